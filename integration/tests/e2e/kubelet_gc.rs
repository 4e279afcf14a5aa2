//! End to end: garbage collection by the `kubelet` BINARY on both runtimes (containerd's CRI
//! and the embedded dockershim on Docker).
//! - Containers: with `--maximum-dead-containers-per-container=2`, a container restarted four
//!   times (its spec changed each time) ends up with exactly two dead instances.
//! - Images: with forced-low thresholds (`--image-gc-high-threshold=1 --image-gc-low-threshold=0`)
//!   an unused image is removed while an image in use by a running pod is kept. The images are
//!   two unique tags created in the local registry for this run (new config blobs over
//!   busybox's layer), and GC is limited to them (`--image-gc-ref-prefix`) so that the shared
//!   runtimes keep everything else.
//! - Orphans: a process left in the pod cgroup of a pod no source, worker or runtime knows is
//!   killed by housekeeping, and the cgroups and pod directory go.

use crate::kubelet_support;

use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use integration::require_testbed;
use integration::runtimes::{InProcessShim, RuntimeKind, clients};
use integration::testbed::Testbed;
use kubelet_support::*;
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A raw HTTP/1.1 request to the registry: (status, headers, body).
async fn registry(
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let mut s = tokio::net::TcpStream::connect(host)
        .await
        .expect("registry");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    s.write_all(body).await.expect("write body");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("read");
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("http head");
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head, buf[split + 4..].to_vec())
}

/// Push `busybox:<tag>` to the local registry as a new image (a changed config blob, same
/// layer): a distinct image id.
async fn push_unique_image(tb: &Testbed, tag: &str) -> String {
    let host = tb.registry.as_str();
    let accept = (
        "Accept",
        "application/vnd.docker.distribution.manifest.v2+json",
    );
    let (code, _, body) =
        registry(host, "GET", "/v2/busybox/manifests/latest", &[accept], b"").await;
    assert_eq!(code, 200, "busybox manifest");
    let mut manifest: serde_json::Value = serde_json::from_slice(&body).expect("manifest");
    let digest = manifest["config"]["digest"]
        .as_str()
        .expect("digest")
        .to_string();
    let (code, _, body) = registry(
        host,
        "GET",
        &format!("/v2/busybox/blobs/{digest}"),
        &[],
        b"",
    )
    .await;
    assert_eq!(code, 200, "config blob");
    let mut config: serde_json::Value = serde_json::from_slice(&body).expect("config");
    config["config"]["Labels"] = serde_json::json!({ "kubelet-gc-test": tag });
    let blob = serde_json::to_vec(&config).expect("json");
    let new_digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&blob)));
    let (code, head, _) = registry(host, "POST", "/v2/busybox/blobs/uploads/", &[], b"").await;
    assert_eq!(code, 202, "start upload: {head}");
    let location = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("location")
                .then(|| v.trim().to_string())
        })
        .expect("upload location");
    let location = location
        .strip_prefix(&format!("http://{host}"))
        .unwrap_or(&location)
        .to_string();
    let sep = if location.contains('?') { '&' } else { '?' };
    let (code, head, _) = registry(
        host,
        "PUT",
        &format!("{location}{sep}digest={new_digest}"),
        &[("Content-Type", "application/octet-stream")],
        &blob,
    )
    .await;
    assert_eq!(code, 201, "upload config: {head}");
    manifest["config"]["digest"] = serde_json::Value::String(new_digest);
    manifest["config"]["size"] = serde_json::json!(blob.len());
    let body = serde_json::to_vec(&manifest).expect("json");
    let (code, head, _) = registry(
        host,
        "PUT",
        &format!("/v2/busybox/manifests/{tag}"),
        &[(
            "Content-Type",
            "application/vnd.docker.distribution.manifest.v2+json",
        )],
        &body,
    )
    .await;
    assert_eq!(code, 201, "put manifest: {head}");
    format!("{host}/busybox:{tag}")
}

async fn image_present(endpoint: &str, image: &str) -> Option<bool> {
    let (_, mut img) = clients(endpoint).await.ok()?;
    let r = img
        .image_status(cri::ImageStatusRequest {
            image: Some(cri::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .ok()?;
    Some(r.into_inner().image.is_some())
}

async fn remove_images(kind: RuntimeKind, tb: &Testbed, images: &[String]) {
    let mut shim = None;
    let endpoint = match kind {
        RuntimeKind::Containerd => tb.containerd_endpoint.clone(),
        RuntimeKind::Dockershim => match InProcessShim::start(tb).await {
            Ok(s) => {
                let ep = s.config.endpoint.clone();
                shim = Some(s);
                ep
            }
            Err(_) => return,
        },
    };
    if let Ok((_, mut img)) = clients(&endpoint).await {
        for i in images {
            let _ = img
                .remove_image(cri::RemoveImageRequest {
                    image: Some(cri::ImageSpec {
                        image: i.clone(),
                        ..Default::default()
                    }),
                })
                .await;
        }
    }
    if let Some(mut s) = shim {
        s.stop().await;
    }
}

fn exited(cs: &[cri::Container]) -> usize {
    cs.iter()
        .filter(|c| c.state == cri::ContainerState::ContainerExited as i32)
        .count()
}

async fn kubelet_gc(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_gc[{}]", kind.name()));
    let mut k = Kubelet::new(kind, "klgc");
    let uid = |n: &str| format!("{}-{n}", k.node);
    let (churn_uid, used_uid, unused_uid) = (uid("churn"), uid("used"), uid("unused"));
    let uids = [churn_uid.clone(), used_uid.clone(), unused_uid.clone()];
    let tag = format!("gc-{}", k.node);
    let used_image = push_unique_image(&tb, &format!("{tag}-used")).await;
    let unused_image = push_unique_image(&tb, &format!("{tag}-unused")).await;
    let images = [used_image.clone(), unused_image.clone()];
    let churn = |generation: u32| {
        pod_manifest(
            "churn",
            &churn_uid,
            &tb.busybox_image,
            &format!("echo generation {generation}; sleep 3600"),
            "",
        )
    };
    k.write_manifest("churn.yaml", &churn(0));
    k.write_manifest(
        "used.yaml",
        &pod_manifest("used", &used_uid, &used_image, "sleep 3600", ""),
    );
    k.write_manifest(
        "unused.yaml",
        &pod_manifest(
            "unused",
            &unused_uid,
            &unused_image,
            "true",
            "  restartPolicy: Never\n",
        ),
    );
    k.spawn(
        &tb,
        &[
            "--maximum-dead-containers-per-container=2".into(),
            "--minimum-container-ttl-duration=0s".into(),
            "--container-gc-period=2s".into(),
            "--image-gc-high-threshold=1".into(),
            "--image-gc-low-threshold=0".into(),
            "--minimum-image-ttl-duration=10s".into(),
            "--image-gc-period=2s".into(),
            format!("--image-gc-ref-prefix={}/busybox:{tag}", tb.registry),
        ],
    );
    let endpoint = k.endpoint(&tb);
    let (port, log) = (k.port, k.log.clone());
    let body = async {
        // Containers: four spec changes leave four dead instances; GC keeps two.
        let mut last = wait_for("the churn pod to run", &log, || async {
            running_ids(&pod(port, &churn_uid).await?)
        })
        .await;
        for generation in 1..=4 {
            k.write_manifest("churn.yaml", &churn(generation));
            last = wait_for("the changed container to run", &log, || async {
                let ids = running_ids(&pod(port, &churn_uid).await?)?;
                (ids.get("main") != last.get("main")).then_some(ids)
            })
            .await;
        }
        wait_for("exactly two dead instances", &log, || async {
            let cs = runtime_containers(&endpoint, &churn_uid).await?;
            (exited(&cs) == 2).then_some(())
        })
        .await;
        // Several GC periods later, still exactly two.
        tokio::time::sleep(Duration::from_secs(6)).await;
        let cs = runtime_containers(&endpoint, &churn_uid)
            .await
            .expect("containers");
        assert_eq!(exited(&cs), 2, "GC keeps exactly the configured number");

        // Images: the unused one goes once its pod is removed, the used one stays.
        wait_for(
            "the run-once pod with the unused image to finish",
            &log,
            || async {
                let p = pod(port, &unused_uid).await?;
                (p["status"]["phase"] == "Succeeded").then_some(())
            },
        )
        .await;
        wait_for("the pod using the other image to run", &log, || async {
            running_ids(&pod(port, &used_uid).await?)
        })
        .await;
        std::fs::remove_file(k.manifests.join("unused.yaml")).expect("remove manifest");
        wait_for("the unused image to be garbage collected", &log, || async {
            (!image_present(&endpoint, &unused_image).await?).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(
            image_present(&endpoint, &used_image).await,
            Some(true),
            "an image in use is kept"
        );
        assert_eq!(
            image_present(&endpoint, &tb.busybox_image).await,
            Some(true),
            "images outside the prefix are untouched"
        );
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    if outcome.is_err() {
        // What the runtime holds for the churn pod, to tell a GC fault from a start fault.
        for c in runtime_containers(&endpoint, &churn_uid)
            .await
            .unwrap_or_default()
        {
            eprintln!(
                "churn container {} attempt {} state {:?} created_at {}",
                c.id,
                c.metadata.map(|m| m.attempt).unwrap_or_default(),
                cri::ContainerState::try_from(c.state),
                c.created_at
            );
        }
        // Manifest trouble (a torn read of a rewritten manifest) would explain a lost pod.
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        for l in text.lines().filter(|l| l.contains("manifest")) {
            eprintln!("{l}");
        }
    }
    k.shutdown(&tb, &uids).await;
    remove_images(kind, &tb, &images).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_gc_containerd() {
    kubelet_gc(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_gc_dockershim() {
    kubelet_gc(RuntimeKind::Dockershim).await;
}

/// A pod this kubelet ran (its directory is under the kubelet's root) that no source, worker
/// or runtime knows, with a process left in its pod cgroup (as a `runc init` Docker lost when
/// dockerd died between a container's create and start): housekeeping kills the process, then
/// removes the cgroups and the pod directory (upstream `cleanupOrphanedPodCgroups` ->
/// `podContainerManager.Destroy`). The kubelet runs with a cgroup root of its own, so nothing
/// of another kubelet's is in reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_kills_what_is_left_in_an_orphaned_pods_cgroup() {
    let tb = require_testbed!("kubelet_kills_what_is_left_in_an_orphaned_pods_cgroup");
    let mut k = Kubelet::new(RuntimeKind::Containerd, "klorph");
    let cgroup_root = format!("/{}", k.node);
    let uid = format!("{}-orphan", k.node);
    let pod_dir = k.root.join("pods").join(&uid);
    std::fs::create_dir_all(pod_dir.join("volumes")).expect("pod dir");
    // The lost process, in a container cgroup below the pod's (the pids hierarchy on cgroup
    // v1, the unified one on v2).
    let mount = std::path::Path::new("/sys/fs/cgroup");
    let base = if mount.join("cgroup.controllers").exists() {
        mount.to_path_buf()
    } else {
        mount.join("pids")
    };
    let rel = format!("{cgroup_root}/kubepods/besteffort/pod{uid}/lost");
    let cg = base.join(rel.trim_start_matches('/'));
    std::fs::create_dir_all(&cg).expect("pod cgroup");
    let mut lost = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .expect("spawn sleep");
    std::fs::write(cg.join("cgroup.procs"), lost.id().to_string()).expect("move into cgroup");
    k.spawn(&tb, &["--cgroup-root".to_string(), cgroup_root.clone()]);
    let log = k.log.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Ok(Some(st)) = lost.try_wait() {
            break st;
        }
        if std::time::Instant::now() > deadline {
            let _ = lost.kill();
            panic!(
                "the lost process still runs after 60 s; kubelet log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    wait_for("the pod cgroup and directory removed", &log, || async {
        (!cg.parent().is_some_and(|p| p.exists()) && !pod_dir.exists()).then_some(())
    })
    .await;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains("killed a process left in the cgroup of a pod no source knows")
            && text.contains(&uid),
        "the kill is logged"
    );
    k.shutdown(&tb, &[]).await;
    integration::soak::leaks::remove_cgroup_root(mount, &cgroup_root);
}
