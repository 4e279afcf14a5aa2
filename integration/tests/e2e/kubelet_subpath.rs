//! End to end: the `subPath` symlink-swap race (CVE-2017-1002101, CVE-2021-25741) against the
//! `kubelet` BINARY on both runtimes. While a pod of twelve containers starts, each mounting
//! `subPath: x` of a hostPath volume, a thread on the host swaps `x` between a directory and a
//! symlink to a directory outside the volume that holds a `secret` file, as fast as it can,
//! during the kubelet's first attempts (four per container). Whatever the kubelet checked, the
//! runtime must mount it: no container may see `secret`. Attempts where the kubelet finds the
//! symlink are refused (`CreateContainerConfigError`), and those whose checked directory was
//! removed before the runtime mounted it fail to start; both are retried, and once the
//! swapping stops every container runs on a directory of the volume. The test prints the
//! counts; removing the pod removes its bind mounts. A kubelet that passed the path (not the checked directory) to
//! the runtime (check, then mount the path) let 4 of the 12 containers see the secret here, on
//! each runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::kubelet_support;

use cri_proto::runtime::v1 as cri;
use integration::require_testbed;
use integration::runtimes::{RuntimeKind, clients};
use kubelet_support::*;

const CONTAINERS: usize = 12;

/// Swaps `dir/x` between a directory and a symlink to `outside` until `stop`; counts swaps.
fn swapper(
    dir: std::path::PathBuf,
    outside: std::path::PathBuf,
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let x = dir.join("x");
        while !stop.load(Ordering::Relaxed) {
            let _ = std::fs::remove_file(&x);
            let _ = std::fs::remove_dir(&x);
            let _ = std::fs::create_dir(&x);
            std::thread::yield_now();
            let _ = std::fs::remove_dir(&x);
            let _ = std::os::unix::fs::symlink(&outside, &x);
            std::thread::yield_now();
            swaps.fetch_add(1, Ordering::Relaxed);
        }
        // Leave a plain directory behind.
        let _ = std::fs::remove_file(&x);
        let _ = std::fs::create_dir(&x);
    })
}

async fn kubelet_subpath_race(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_subpath_race[{}]", kind.name()));
    let mut k = Kubelet::new(kind, "klsub");
    let uid = format!("{}-race", k.node);
    let uids = [uid.clone()];
    let hostvol = k.dir.path().join("hostvol");
    let outside = k.dir.path().join("outside");
    std::fs::create_dir_all(&hostvol).expect("hostvol");
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::write(outside.join("secret"), "host secret").expect("secret");

    let mut containers = String::new();
    for i in 0..CONTAINERS {
        containers.push_str(&format!(
            r#"  - name: c{i}
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    volumeMounts:
    - name: data
      mountPath: /mnt
      subPath: x
"#,
            image = tb.busybox_image
        ));
    }
    k.write_manifest(
        "race.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: race
  uid: {uid}
spec:
  terminationGracePeriodSeconds: 0
  volumes:
  - name: data
    hostPath:
      path: {hostvol}
      type: Directory
  containers:
{containers}"#,
            hostvol = hostvol.display()
        ),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swap = swapper(
        hostvol.clone(),
        outside.clone(),
        stop.clone(),
        swaps.clone(),
    );
    k.spawn(&tb, &[]);
    let endpoint = k.endpoint(&tb);
    let log = k.log.clone();
    let body = async {
        // Swap while the kubelet makes its attempts (each start of a container is one), then
        // leave a plain directory so that every container can start.
        let attempts = || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .matches("start_container{container=")
                .count()
        };
        let window = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        while attempts() < 4 * CONTAINERS && tokio::time::Instant::now() < window {
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
        stop.store(true, Ordering::Relaxed);
        let attempts_while_swapping = attempts();
        let running = wait_for("every container to run after the swaps", &log, || async {
            let cs = runtime_containers(&endpoint, &uid).await?;
            let running: Vec<cri::Container> = cs
                .into_iter()
                .filter(|c| c.state == cri::ContainerState::ContainerRunning as i32)
                .collect();
            (running.len() == CONTAINERS).then_some(running)
        })
        .await;
        let (mut rt, _) = clients(&endpoint).await.expect("cri client");
        let mut escaped = Vec::new();
        for c in &running {
            let r = rt
                .exec_sync(cri::ExecSyncRequest {
                    container_id: c.id.clone(),
                    cmd: vec!["ls".into(), "-a".into(), "/mnt".into()],
                    timeout: 10,
                })
                .await
                .expect("exec ls /mnt")
                .into_inner();
            assert_eq!(r.exit_code, 0, "ls /mnt in {:?}", c.metadata);
            if String::from_utf8_lossy(&r.stdout).contains("secret") {
                escaped.push(c.metadata.as_ref().map(|m| m.name.clone()));
            }
        }
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let refused = text.matches("unexpected symlink found").count()
            + text.matches("not within volume path").count();
        println!(
            "subPath race [{}]: {} swaps, {} start attempts while swapping, {} containers running, {} refused attempts in the log, {} escaped",
            kind.name(),
            swaps.load(Ordering::Relaxed),
            attempts_while_swapping,
            running.len(),
            refused,
            escaped.len()
        );
        assert!(
            swaps.load(Ordering::Relaxed) > 0,
            "the swapper ran during the starts"
        );
        assert!(
            escaped.is_empty(),
            "containers saw the host directory through subPath: {escaped:?}"
        );

        // The subPath bind mounts go with the pod.
        let pod_dir = k.root.join("pods").join(&uid);
        let subpaths = pod_dir.join("volume-subpaths").display().to_string();
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        assert_eq!(
            mountinfo.matches(&format!(" {subpaths}/")).count(),
            CONTAINERS,
            "one bind mount per container"
        );
        std::fs::remove_file(k.manifests.join("race.yaml")).expect("remove manifest");
        wait_for(
            "the pod's subPath mounts and directory to go",
            &log,
            || async {
                let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
                (!mountinfo.contains(&subpaths) && !pod_dir.exists()).then_some(())
            },
        )
        .await;
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    stop.store(true, Ordering::Relaxed);
    let _ = swap.join();
    k.shutdown(&tb, &uids).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_subpath_race_containerd() {
    kubelet_subpath_race(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_subpath_race_dockershim() {
    kubelet_subpath_race(RuntimeKind::Dockershim).await;
}
