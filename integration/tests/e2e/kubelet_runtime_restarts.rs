//! Fault runs under a running `kubelet` BINARY: its runtime goes away and comes back.
//! - **dockershim restarted alone**: the kubelet runs on a standalone `dockershim` process (on
//!   the test bed's Docker); dockershim is killed with SIGKILL and started again on the same
//!   socket and root directory. The kubelet stays up; the pods keep their container ids and a
//!   restart count of 0; afterwards an edited pod runs its new spec, a deleted pod leaves no
//!   container, sandbox, checkpoint or CNI IP allocation, and a new pod runs.
//! - **dockerd restarted** under running pods, on a Docker of the test's own (`PrivateDockerd`:
//!   the test bed's one is shared by every test), with the embedded dockershim: with
//!   `--live-restore` the containers outlive dockerd and nothing is restarted (same ids, restart
//!   count 0); without it Docker stops every container on the way out, and the kubelet brings
//!   every pod back in a new sandbox whose old one keeps no CNI IP allocation. Either way a
//!   deleted pod leaves nothing and a new pod runs afterwards.

use crate::kubelet_faults::ip_reserved_for;
use crate::kubelet_support;

use std::collections::HashMap;
use std::time::Duration;

use integration::dockerd::PrivateDockerd;
use integration::require_testbed;
use integration::runtimes::{RuntimeKind, ShimProcess};
use integration::testbed::Testbed;
use kubelet_support::*;

fn restart_count(p: &serde_json::Value) -> Option<i64> {
    p["status"]["containerStatuses"][0]["restartCount"].as_i64()
}

/// Waits until every pod of `names` runs; their container ids.
async fn running(
    k: &Kubelet,
    what: &str,
    names: &[&str],
) -> HashMap<String, HashMap<String, String>> {
    let mut out = HashMap::new();
    for n in names {
        let uid = format!("{}-{n}", k.node);
        let ids = wait_for(what, &k.log, || async {
            running_ids(&pod(k.port, &uid).await?)
        })
        .await;
        out.insert(n.to_string(), ids);
    }
    out
}

/// Pods `names` still run in the containers of `before`, never restarted.
async fn untouched(k: &Kubelet, names: &[&str], before: &HashMap<String, HashMap<String, String>>) {
    for n in names {
        let p = pod(k.port, &format!("{}-{n}", k.node))
            .await
            .expect("pod status");
        assert_eq!(
            running_ids(&p).as_ref(),
            before.get(*n),
            "{n} kept its container"
        );
        assert_eq!(restart_count(&p), Some(0), "{n} was not restarted");
    }
}

/// Pod `name` is gone from the runtime at `endpoint`: no container, no sandbox, none of
/// `sandboxes` holds a CNI IP or (when `checkpoints` is given) a checkpoint.
async fn gone(
    k: &Kubelet,
    endpoint: &str,
    name: &str,
    sandboxes: &[String],
    checkpoints: Option<&std::path::Path>,
) {
    let uid = format!("{}-{name}", k.node);
    wait_for(
        &format!("{name} removed from the runtime"),
        &k.log,
        || async {
            let cs = runtime_containers(endpoint, &uid).await?;
            let ss = runtime_sandboxes(endpoint, &uid).await?;
            let ips = sandboxes
                .iter()
                .any(|id| ip_reserved_for(RuntimeKind::Dockershim, id));
            let cps =
                checkpoints.is_some_and(|dir| sandboxes.iter().any(|id| dir.join(id).exists()));
            (cs.is_empty() && ss.is_empty() && !ips && !cps).then_some(())
        },
    )
    .await;
}

async fn sandbox_ids(endpoint: &str, uid: &str) -> Vec<String> {
    runtime_sandboxes(endpoint, uid)
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.id)
        .collect()
}

/// Removes every manifest and waits until the runtime at `endpoint` holds none of `uids`.
async fn drain(k: &Kubelet, endpoint: &str, uids: &[String]) {
    for e in std::fs::read_dir(&k.manifests)
        .into_iter()
        .flatten()
        .flatten()
    {
        let _ = std::fs::remove_file(e.path());
    }
    for u in uids {
        wait_for("the pods removed at the end", &k.log, || async {
            runtime_sandboxes(endpoint, u)
                .await
                .filter(|s| s.is_empty())
                .map(|_| ())
        })
        .await;
    }
}

fn manifest(k: &Kubelet, tb: &Testbed, n: &str, script: &str) -> String {
    pod_manifest(n, &format!("{}-{n}", k.node), &tb.busybox_image, script, "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_restarted_alone_under_a_running_kubelet() {
    let tb = require_testbed!("dockershim_restarted_alone_under_a_running_kubelet");
    let mut k = Kubelet::new(RuntimeKind::Dockershim, "klshim");
    let names = ["keep0", "keep1", "edit", "del", "add"];
    let uids: Vec<String> = names.iter().map(|n| format!("{}-{n}", k.node)).collect();
    let shim_dir = k.dir.path().join("shim");
    std::fs::create_dir_all(&shim_dir).expect("shim dir");
    let mut shim = ShimProcess::start(&tb, &shim_dir)
        .await
        .expect("dockershim");
    let endpoint = shim.endpoint.clone();
    let checkpoints = shim_dir.join("root").join("sandbox");
    for n in ["keep0", "keep1", "edit", "del"] {
        k.write_manifest(&format!("{n}.yaml"), &manifest(&k, &tb, n, "sleep 3600"));
    }
    k.spawn_on(
        &tb,
        vec![
            "--container-runtime-endpoint".into(),
            endpoint.clone().into(),
        ],
        &[],
    );
    let body = async {
        let before = running(&k, "the pods running", &["keep0", "keep1", "edit", "del"]).await;
        let del_sandboxes = sandbox_ids(&endpoint, &format!("{}-del", k.node)).await;
        assert!(
            del_sandboxes.iter().all(|id| checkpoints.join(id).exists()),
            "dockershim checkpoints its sandboxes in {}",
            checkpoints.display()
        );

        // SIGKILL: no chance to clean up anything.
        // SAFETY: kill(2) on the pid of a child we spawned.
        unsafe { libc::kill(shim.pid() as libc::pid_t, libc::SIGKILL) };
        shim.terminate();
        // The kubelet relists and syncs against a dead socket for a while.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(
            k.child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(None))),
            "the kubelet is still running without its runtime"
        );
        shim = ShimProcess::start(&tb, &shim_dir)
            .await
            .expect("dockershim again");
        // Some relists on the restarted dockershim, then nothing may have changed.
        tokio::time::sleep(Duration::from_secs(5)).await;
        untouched(&k, &["keep0", "keep1", "edit", "del"], &before).await;

        // The kubelet still drives it: an edit, a deletion and a new pod.
        k.write_manifest("edit.yaml", &manifest(&k, &tb, "edit", "sleep 3601"));
        let _ = std::fs::remove_file(k.manifests.join("del.yaml"));
        k.write_manifest("add.yaml", &manifest(&k, &tb, "add", "sleep 3600"));
        let edit_uid = format!("{}-edit", k.node);
        wait_for("the edited pod on its new spec", &k.log, || async {
            let p = pod(k.port, &edit_uid).await?;
            let ids = running_ids(&p)?;
            (p["spec"]["containers"][0]["command"][2].as_str()? == "sleep 3601"
                && Some(&ids) != before.get("edit"))
            .then_some(())
        })
        .await;
        running(&k, "the new pod running", &["add"]).await;
        gone(&k, &endpoint, "del", &del_sandboxes, Some(&checkpoints)).await;
        untouched(&k, &["keep0", "keep1"], &before).await;
        drain(&k, &endpoint, &uids).await;
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    k.shutdown(&tb, &uids).await;
    drop(shim);
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

async fn dockerd_restart(live_restore: bool) {
    let test = format!("dockerd_restart[live_restore={live_restore}]");
    let tb = require_testbed!(&test);
    let mut k = Kubelet::new(RuntimeKind::Dockershim, "kldockerd");
    let docker_dir = k.dir.path().join("docker");
    std::fs::create_dir_all(&docker_dir).expect("docker dir");
    let mut dockerd = PrivateDockerd::start(&docker_dir, live_restore).expect("private dockerd");
    dockerd
        .copy_images(
            &tb.docker_endpoint,
            &[tb.busybox_image.as_str(), tb.pause_image.as_str()],
        )
        .expect("images");
    let names = ["a", "b", "del", "add"];
    let uids: Vec<String> = names.iter().map(|n| format!("{}-{n}", k.node)).collect();
    for n in ["a", "b", "del"] {
        k.write_manifest(&format!("{n}.yaml"), &manifest(&k, &tb, n, "sleep 3600"));
    }
    // The embedded dockershim, on this Docker instead of the test bed's.
    let mut runtime = tb.dockershim_args();
    if let Some(i) = runtime.iter().position(|a| a == "--docker-endpoint") {
        runtime[i + 1] = dockerd.endpoint.clone().into();
    }
    k.spawn_on(&tb, runtime, &[]);
    let endpoint = k.endpoint(&tb);
    let checkpoints = k.root.join("dockershim").join("sandbox");
    let body = async {
        let before = running(&k, "the pods running", &["a", "b", "del"]).await;
        let mut old_sandboxes = HashMap::new();
        for n in ["a", "b", "del"] {
            old_sandboxes.insert(n, sandbox_ids(&endpoint, &format!("{}-{n}", k.node)).await);
        }
        let containers_before = dockerd.running_containers().expect("docker ps");
        assert_eq!(
            containers_before.len(),
            6,
            "a pause and a main container per pod"
        );

        dockerd.restart().expect("dockerd restarted");
        let after_restart = dockerd.running_containers().expect("docker ps");
        println!(
            "[{test}] running containers before the restart: {}, right after: {}",
            containers_before.len(),
            after_restart.len()
        );
        if live_restore {
            assert_eq!(
                after_restart.len(),
                6,
                "--live-restore keeps the containers"
            );
            // Some relists and syncs later, nothing was restarted.
            tokio::time::sleep(Duration::from_secs(6)).await;
            untouched(&k, &["a", "b", "del"], &before).await;
        } else {
            assert!(after_restart.is_empty(), "Docker stopped its containers");
            // Every pod comes back, in a new sandbox; the old ones keep no IP.
            for n in ["a", "b", "del"] {
                let uid = format!("{}-{n}", k.node);
                let old = &before[n];
                wait_for("the pod back in a new sandbox", &k.log, || async {
                    let ids = running_ids(&pod(k.port, &uid).await?)?;
                    (ids.values().all(|id| !old.values().any(|o| o == id))).then_some(())
                })
                .await;
                let ready: Vec<String> = runtime_sandboxes(&endpoint, &uid)
                    .await
                    .expect("sandboxes")
                    .into_iter()
                    .filter(|s| {
                        s.state == cri_proto::runtime::v1::PodSandboxState::SandboxReady as i32
                    })
                    .map(|s| s.id)
                    .collect();
                assert_eq!(ready.len(), 1, "{n}: one ready sandbox");
                assert!(!old_sandboxes[n].contains(&ready[0]), "{n}: a new sandbox");
                wait_for("the old sandbox's IP released", &k.log, || async {
                    (!old_sandboxes[n]
                        .iter()
                        .any(|id| ip_reserved_for(RuntimeKind::Dockershim, id)))
                    .then_some(())
                })
                .await;
            }
            assert_eq!(
                dockerd.running_containers().expect("docker ps").len(),
                6,
                "one pause and one main container per pod, nothing else running"
            );
        }
        // The kubelet still drives Docker: a deletion and a new pod.
        let del_sandboxes = sandbox_ids(&endpoint, &format!("{}-del", k.node)).await;
        let _ = std::fs::remove_file(k.manifests.join("del.yaml"));
        k.write_manifest("add.yaml", &manifest(&k, &tb, "add", "sleep 3600"));
        running(&k, "the new pod running", &["add"]).await;
        gone(&k, &endpoint, "del", &del_sandboxes, Some(&checkpoints)).await;
        drain(&k, &endpoint, &uids).await;
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    if outcome.is_err() {
        eprintln!(
            "[{test}] dockerd log tail:\n{}",
            log_tail(&dockerd.log(), 30)
        );
        let keep = std::env::temp_dir().join(format!("{}.kubelet.log", k.node));
        if std::fs::copy(&k.log, &keep).is_ok() {
            eprintln!("[{test}] the kubelet's whole log: {}", keep.display());
        }
    }
    k.shutdown(&tb, &[]).await;
    drop(dockerd);
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_restart_with_live_restore() {
    dockerd_restart(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_restart_without_live_restore() {
    dockerd_restart(false).await;
}
