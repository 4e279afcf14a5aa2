//! Live runtime swap under a running Go kubelet (issue 35): cri-dockerd 0.3.7 (`CRI_DOCKERD`)
//! serves the Go kubelet 1.26 (`KUBELET_JUDGE`, standalone, three static pods from
//! kubelet_swap.rs) on the test bed's Docker and CNI network; it is stopped with SIGTERM and
//! this project's `dockershim` started on the same socket and root directory with the same
//! flags, as an operator swaps the binary behind `cri-docker.service`; later the swap goes
//! back. After each swap:
//!
//! - nothing restarted: the same sandbox and container ids, restart counts and no new ones;
//! - `ListPodSandbox` lists the old pods, and `PodSandboxStatus` reports the addresses the
//!   other runtime gave them;
//! - exec (`ExecSync`) and the container log (the file `ContainerStatus` names) work on an old
//!   pod;
//! - a pod whose manifest is deleted is stopped by the kubelet and its address released
//!   (host-local IPAM); its sandbox is then removed through the CRI, as the kubelet's garbage
//!   collector would (the judge runs with GC off: the Docker is shared), and its checkpoint
//!   goes — for a pod the other runtime started, from the other runtime's checkpoint;
//! - a new pod starts.
//!
//! Skipped with a loud line when `KUBELET_JUDGE` or `CRI_DOCKERD` is not set. On a host that
//! cannot lower oom_score_adj (`CRI_TESTBED_CAN_LOWER_OOM_SCORE_ADJ=false`) cri-dockerd's
//! pause containers (-998) do not start: `CRI_DOCKERD` must then be a build that takes the
//! sandboxes' value from `CRI_DOCKERD_SANDBOX_OOM_SCORE_ADJ` (see
//! `ShimProcess::start_cri_dockerd`). Nor can cri-dockerd start a Guaranteed pod's containers
//! there (the kubelet asks -997 for them, which cri-dockerd passes to Docker unchanged and runc
//! fails to apply): the `db` pod is then the Burstable `DB_BURSTABLE`.

use crate::kubelet_faults::ip_reserved_for;
use crate::kubelet_support::*;
use crate::kubelet_swap::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cri_proto::runtime::v1 as cri;
use futures::FutureExt;
use integration::require_testbed;
use integration::runtimes::{RuntimeKind, ShimProcess, clients};

/// Wait until the runtime at `endpoint` answers `Version`.
async fn wait_serving(endpoint: &str, log: &Path) {
    wait_for("the runtime serving CRI", log, || async {
        let (mut rt, _) = clients(endpoint).await.ok()?;
        rt.version(cri::VersionRequest::default())
            .await
            .ok()
            .map(|_| ())
    })
    .await;
}

/// The address `PodSandboxStatus` reports for each pod's ready sandbox in `ListPodSandbox`.
async fn pod_ips(endpoint: &str, uids: &[&str]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok((mut rt, _)) = clients(endpoint).await else {
        return out;
    };
    for uid in uids {
        let ready = runtime_sandboxes(endpoint, uid)
            .await
            .unwrap_or_default()
            .into_iter()
            .find(|s| s.state == cri::PodSandboxState::SandboxReady as i32);
        let Some(s) = ready else { continue };
        let ip = rt
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: s.id,
                verbose: false,
            })
            .await
            .ok()
            .and_then(|r| r.into_inner().status?.network)
            .map(|n| n.ip)
            .unwrap_or_default();
        out.insert(uid.to_string(), ip);
    }
    out
}

/// The messages of the log file `ContainerStatus` names for the first container of pod `uid`
/// called `name`: Docker's JSON lines (cri-dockerd and dockershim link the kubelet's log path
/// to Docker's json-file log) or the CRI format.
async fn log_messages(endpoint: &str, uid: &str, name: &str) -> Vec<String> {
    let Ok((mut rt, _)) = clients(endpoint).await else {
        return Vec::new();
    };
    let containers = runtime_containers(endpoint, uid).await.unwrap_or_default();
    let Some(c) = containers
        .iter()
        .find(|c| c.metadata.as_ref().is_some_and(|m| m.name == name))
    else {
        return Vec::new();
    };
    let path = rt
        .container_status(cri::ContainerStatusRequest {
            container_id: c.id.clone(),
            verbose: false,
        })
        .await
        .ok()
        .and_then(|r| r.into_inner().status)
        .map(|s| s.log_path)
        .unwrap_or_default();
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    text.lines()
        .filter_map(|l| match serde_json::from_str::<serde_json::Value>(l) {
            Ok(v) => v["log"].as_str().map(|s| s.trim_end().to_string()),
            Err(_) => l.splitn(4, ' ').nth(3).map(str::to_string),
        })
        .collect()
}

/// Exec and the container log work on old pods through the CRI of the runtime now serving.
async fn exec_and_logs(step: &str, endpoint: &str, exec_uid: &str, log: (&str, &str, &str)) {
    let got = exec_in_pod(endpoint, exec_uid, &["sh", "-c", "echo exec-ok"]).await;
    assert_eq!(
        got.map(|(code, out, _)| (code, out)),
        Some((0, "exec-ok\n".to_string())),
        "{step}: ExecSync in pod {exec_uid}"
    );
    let (uid, name, want) = log;
    let messages = log_messages(endpoint, uid, name).await;
    assert!(
        messages.iter().any(|m| m == want),
        "{step}: {name}'s log holds {want:?}: {messages:?}"
    );
}

/// Delete pod `uid`'s manifest `file`: the Go kubelet stops the pod and its address is
/// released; then its sandbox is removed through the CRI, as the kubelet's container GC
/// would, and its containers and checkpoint (in `checkpoints`) go.
async fn delete_pod(place: &Place, endpoint: &str, file: &str, uid: &str, checkpoints: &Path) {
    let ids: Vec<String> = runtime_sandboxes(endpoint, uid)
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert!(!ids.is_empty(), "{file}: a sandbox before the deletion");
    for id in &ids {
        assert!(checkpoints.join(id).exists(), "{file}: {id} checkpointed");
    }
    assert!(
        ids.iter()
            .any(|id| ip_reserved_for(RuntimeKind::Dockershim, id)),
        "{file}: an address reserved for its sandbox"
    );
    std::fs::remove_file(place.manifests.join(file)).expect("remove manifest");
    wait_for(&format!("{file} stopped"), &place.log, || async {
        let running = cri::ContainerState::ContainerRunning as i32;
        let ready = cri::PodSandboxState::SandboxReady as i32;
        let c = runtime_containers(endpoint, uid).await?;
        let s = runtime_sandboxes(endpoint, uid).await?;
        (c.iter().all(|c| c.state != running) && s.iter().all(|s| s.state != ready)).then_some(())
    })
    .await;
    for id in &ids {
        assert!(
            !ip_reserved_for(RuntimeKind::Dockershim, id),
            "{file}: the address of sandbox {id} released"
        );
    }
    let (mut rt, _) = clients(endpoint).await.expect("runtime client");
    for id in &ids {
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.clone(),
        })
        .await
        .unwrap_or_else(|e| panic!("{file}: RemovePodSandbox {id}: {e}"));
        assert!(
            !checkpoints.join(id).exists(),
            "{file}: the checkpoint of {id} removed"
        );
    }
    let left = snapshot(endpoint, uid).await;
    assert!(
        left.sandboxes.is_empty() && left.containers.is_empty(),
        "{file}: nothing left: {left:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_swap_cri_dockerd() {
    let test = "dockershim_swap_cri_dockerd";
    let Some(judge) = std::env::var_os("KUBELET_JUDGE").map(PathBuf::from) else {
        eprintln!(
            "SKIPPED {test}: set KUBELET_JUDGE (a Go kubelet 1.26 binary, e.g. /opt/judges/k8s/bin/kubelet)"
        );
        return;
    };
    if std::env::var_os("CRI_DOCKERD").is_none() {
        eprintln!("SKIPPED {test}: set CRI_DOCKERD (a cri-dockerd 0.3.7 binary)");
        return;
    }
    let tb = require_testbed!(test);
    let case = if tb.can_lower_oom_score_adj {
        &DOCKERSHIM_CRI_DOCKERD
    } else {
        eprintln!(
            "NOTE {test}: this host cannot lower oom_score_adj, so cri-dockerd cannot start a Guaranteed pod (oom_score_adj -997): `db` runs Burstable"
        );
        &DOCKERSHIM_CRI_DOCKERD_BURSTABLE
    };
    if skip_for_shared_pod_logs(test, case) {
        return;
    }
    let uids: Vec<&str> = case.pods.iter().map(|(_, _, u)| *u).collect();
    let place = Place::new(case, &tb.busybox_image);
    let shim_dir = place.dir.join("shim");
    std::fs::create_dir_all(&shim_dir).expect("shim dir");
    let checkpoints = shim_dir.join("root").join("sandbox");
    let mut runtime = Some(
        ShimProcess::start_cri_dockerd(&tb, &shim_dir)
            .await
            .expect("cri-dockerd"),
    );
    let endpoint = runtime
        .as_ref()
        .map(|r| r.endpoint.clone())
        .unwrap_or_default();
    wait_serving(&endpoint, &place.log).await;
    let mut child = Some(go_kubelet(&judge, &tb, &endpoint, &place));
    let fresh_uid = format!("{}-fresh", place.node);
    let body = async {
        let before = all_running(case, &place, &endpoint).await;
        if tb.busybox_image == GOLDEN_IMAGE {
            assert_golden(case, &before);
        }
        let ips = pod_ips(&endpoint, &uids).await;
        assert!(
            ips.len() == 3 && ips.values().all(|ip| !ip.is_empty()),
            "cri-dockerd reports an address for every pod: {ips:?}"
        );

        // cri-dockerd -> dockershim.
        let t = std::time::Instant::now();
        drop(runtime.take());
        runtime = Some(
            ShimProcess::start(&tb, &shim_dir)
                .await
                .expect("dockershim"),
        );
        wait_serving(&endpoint, &place.log).await;
        figure("cri-dockerd -> dockershim, serving CRI", t);
        settle(&place, &tb.busybox_image, &endpoint).await;
        let after = all_running(case, &place, &endpoint).await;
        assert_unchanged("cri-dockerd -> dockershim", case, &before, &after);
        assert_eq!(
            pod_ips(&endpoint, &uids).await,
            ips,
            "dockershim reports the addresses cri-dockerd gave"
        );
        exec_and_logs(
            "cri-dockerd -> dockershim",
            &endpoint,
            uids[0],
            (uids[2], "tools", "<b>&amp;</b>"),
        )
        .await;
        delete_pod(&place, &endpoint, case.pods[2].0, uids[2], &checkpoints).await;
        // A pod dockershim starts, for cri-dockerd to take over.
        std::fs::write(
            place.manifests.join("fresh.yaml"),
            pod_manifest(
                "fresh",
                &fresh_uid,
                &tb.busybox_image,
                "echo fresh-log; exec sleep 3600",
                "",
            ),
        )
        .expect("fresh manifest");
        wait_for("the fresh pod Running", &place.log, || async {
            running_ids(&pod(place.port, &fresh_uid).await?)
        })
        .await;
        let fresh = snapshot(&endpoint, &fresh_uid).await;
        let fresh_ip = pod_ips(&endpoint, &[&fresh_uid]).await;

        // dockershim -> cri-dockerd.
        let t = std::time::Instant::now();
        drop(runtime.take());
        runtime = Some(
            ShimProcess::start_cri_dockerd(&tb, &shim_dir)
                .await
                .expect("cri-dockerd again"),
        );
        wait_serving(&endpoint, &place.log).await;
        figure("dockershim -> cri-dockerd, serving CRI", t);
        settle(&place, &tb.busybox_image, &endpoint).await;
        let back = running_pods(case, 2, &place, &endpoint).await;
        assert_unchanged("dockershim -> cri-dockerd", case, &before[..2], &back);
        assert_eq!(
            snapshot(&endpoint, &fresh_uid).await,
            fresh,
            "dockershim -> cri-dockerd: the pod dockershim started"
        );
        let mut want = ips.clone();
        want.remove(uids[2]);
        assert_eq!(
            pod_ips(&endpoint, &uids[..2]).await,
            want,
            "cri-dockerd reports the old addresses"
        );
        assert_eq!(
            pod_ips(&endpoint, &[&fresh_uid]).await,
            fresh_ip,
            "cri-dockerd reports the address dockershim gave"
        );
        exec_and_logs(
            "dockershim -> cri-dockerd",
            &endpoint,
            &fresh_uid,
            (&fresh_uid, "main", "fresh-log"),
        )
        .await;
        delete_pod(&place, &endpoint, "fresh.yaml", &fresh_uid, &checkpoints).await;
        let kept = running_pods(case, 2, &place, &endpoint).await;
        assert_unchanged("after deleting fresh", case, &before[..2], &kept);
    };
    let outcome = std::panic::AssertUnwindSafe(body).catch_unwind().await;
    if runtime.is_none() {
        // A swap failed between stopping one runtime and starting the other: start one for
        // the clean-up, or the pods stay in Docker.
        runtime = match ShimProcess::start(&tb, &shim_dir).await {
            Ok(r) => Some(r),
            Err(_) => ShimProcess::start_cri_dockerd(&tb, &shim_dir).await.ok(),
        };
        for _ in 0..100 {
            if let Ok((mut rt, _)) = clients(&endpoint).await
                && rt.version(cri::VersionRequest::default()).await.is_ok()
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    teardown_on(
        &endpoint,
        case,
        &place,
        &mut child,
        std::slice::from_ref(&fresh_uid),
    )
    .await;
    drop(runtime);
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}
