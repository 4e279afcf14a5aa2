//! End to end (issue 33): PersistentVolumeClaim volumes of the `kubelet` BINARY in API-server
//! mode against the API fixture, on both runtimes (containerd's CRI and the embedded
//! dockershim):
//! - a pod's claim Bound to a `local` PV whose path is an 8 MiB tmpfs the test mounts: the
//!   container's writes land on the tmpfs; `/stats/summary` lists the volume with its `pvcRef`,
//!   and `/metrics` has `kubelet_volume_stats_*` for (namespace, claim), both with the figures
//!   statfs(2) of the tmpfs gives (upstream's `MetricsStatFS`); a claim on a `hostPath` PV is
//!   mounted too, without figures (upstream's `MetricsNil`);
//! - a pod whose claim is not Bound does not start: `FailedMount` with upstream's "PVC is not
//!   bound"; a claim Bound to an `nfs` PV gets "unsupported volume source nfs";
//! - deleting the pod unmounts the local volume and removes the pod directory; the PV's data
//!   stays.

use crate::kubelet_support;

use std::sync::Arc;

use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Api;
use kube::api::PostParams;
use kubelet_support::pv::{
    Tmpfs, VOLUME_STATS, create_claim, delete_claims, local_source, sample, statfs,
};
use kubelet_support::*;
use parking_lot::Mutex;

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// A pod mounting claim `claim` at `/data` (and, when given, `host_claim` at `/host`), running
/// `script`.
fn claim_pod(
    name: &str,
    node: &str,
    image: &str,
    claim: &str,
    host_claim: Option<&str>,
    script: &str,
) -> Pod {
    let mut volumes = vec![serde_json::json!(
        {"name": "data", "persistentVolumeClaim": {"claimName": claim}})];
    let mut mounts = vec![serde_json::json!({"name": "data", "mountPath": "/data"})];
    if let Some(h) = host_claim {
        volumes.push(serde_json::json!(
            {"name": "host", "persistentVolumeClaim": {"claimName": h}}));
        mounts.push(serde_json::json!({"name": "host", "mountPath": "/host"}));
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node, "terminationGracePeriodSeconds": 1,
            "volumes": volumes,
            "containers": [{
                "name": "main", "image": image, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "volumeMounts": mounts
            }]
        }
    }))
    .expect("pod")
}

/// The FailedMount events of pod `uid`.
async fn failed_mounts(events: &Api<Event>, uid: &str) -> Vec<String> {
    let Ok(list) = events.list(&Default::default()).await else {
        return Vec::new();
    };
    list.items
        .into_iter()
        .filter(|e| e.involved_object.uid.as_deref() == Some(uid))
        .filter(|e| e.reason.as_deref() == Some("FailedMount"))
        .filter_map(|e| e.message)
        .collect()
}

async fn persistent_volumes(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_persistent_volumes[{}]", kind.name()));
    let (_server, mut k, client) = api_mode_kubelet(
        &tb,
        kind,
        "klpvc",
        &["--sync-frequency".into(), "2s".into()],
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let tmpfs = Tmpfs::mount(8 << 20);
    let host_dir = tempfile::tempdir().expect("host dir");
    let base = unique_name("pvc");
    let (data, pending, nfs, hostpath) = (
        format!("{base}-data"),
        format!("{base}-pending"),
        format!("{base}-nfs"),
        format!("{base}-host"),
    );
    let claims = vec![data.clone(), pending.clone(), nfs.clone(), hostpath.clone()];
    let pvs: Vec<String> = [&data, &nfs, &hostpath]
        .iter()
        .map(|c| format!("{c}-pv"))
        .collect();
    let names = vec![
        format!("{base}-writer"),
        format!("{base}-unbound"),
        format!("{base}-nfs"),
    ];
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let outcome = tokio::spawn({
        let (log, node, image, port, root) = (
            k.log.clone(),
            k.node.clone(),
            tb.busybox_image.clone(),
            k.port,
            k.root.clone(),
        );
        let (pods, client, names, created) =
            (pods.clone(), client.clone(), names.clone(), created.clone());
        let local = tmpfs.path().to_path_buf();
        let host = host_dir.path().to_path_buf();
        let (data, pending, nfs, hostpath) =
            (data.clone(), pending.clone(), nfs.clone(), hostpath.clone());
        async move {
            wait_for("the node registered", &log, || async {
                Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
                    .get_opt(&node)
                    .await
                    .ok()?
                    .map(|_| ())
            })
            .await;
            create_claim(&client, "default", &data, &format!("{data}-pv"), Some(local_source(&local, &node))).await;
            create_claim(&client, "default", &pending, "", None).await;
            create_claim(
                &client,
                "default",
                &nfs,
                &format!("{nfs}-pv"),
                Some(serde_json::json!({"nfs": {"server": "nfs.example", "path": "/export"}})),
            )
            .await;
            create_claim(
                &client,
                "default",
                &hostpath,
                &format!("{hostpath}-pv"),
                Some(serde_json::json!({"hostPath": {"path": host, "type": "Directory"}})),
            )
            .await;

            // 1. The writer: 1 MiB and a marker on the local PV, a marker on the hostPath PV.
            let script = "echo hello > /data/hello && dd if=/dev/zero of=/data/blob bs=1024 count=1024 2>/dev/null \
                          && echo there > /host/hello && echo written && sleep 3600";
            let p = pods
                .create(
                    &PostParams::default(),
                    &claim_pod(&names[0], &node, &image, &data, Some(&hostpath), script),
                )
                .await
                .expect("create writer");
            let writer = p.metadata.uid.expect("uid");
            created.lock().push(writer.clone());
            wait_for("the writer Running", &log, || async {
                (phase(&pods.get_opt(&names[0]).await.ok()??) == "Running").then_some(())
            })
            .await;
            wait_for("the writes on the tmpfs and the host path", &log, || async {
                let a = std::fs::read_to_string(local.join("hello")).ok()?;
                let b = std::fs::read_to_string(host.join("hello")).ok()?;
                let blob = std::fs::metadata(local.join("blob")).ok()?.len();
                (a == "hello\n" && b == "there\n" && blob == 1 << 20).then_some(())
            })
            .await;
            let mount = root
                .join("pods")
                .join(&writer)
                .join("volumes/kubernetes.io~local-volume")
                .join(format!("{data}-pv"));
            assert!(
                std::fs::read_to_string("/proc/self/mountinfo")
                    .unwrap_or_default()
                    .lines()
                    .any(|l| l.split(' ').nth(4) == Some(&mount.display().to_string())),
                "the local volume is bind-mounted at {}",
                mount.display()
            );
            // Nothing writes to the tmpfs any more: its figures are fixed.
            let want = statfs(&local);
            assert!(want[2] >= 1 << 20, "1 MiB used on the tmpfs: {want:?}");
            assert_eq!(want[0], 8 << 20, "an 8 MiB tmpfs: {want:?}");

            // /stats/summary: the volume with its pvcRef and the statfs figures; no entry for
            // the hostPath PV (MetricsNil).
            let summary: serde_json::Value = serde_json::from_str(
                &http_get(port, "/stats/summary").await.expect("/stats/summary"),
            )
            .expect("summary JSON");
            let pod = summary["pods"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["podRef"]["uid"] == writer.as_str())
                .unwrap_or_else(|| panic!("the writer in the summary: {summary}"))
                .clone();
            let vols = pod["volume"].as_array().cloned().unwrap_or_default();
            assert_eq!(vols.len(), 1, "one volume with figures: {pod}");
            let v = &vols[0];
            assert_eq!(v["name"], "data", "{v}");
            assert_eq!(
                v["pvcRef"],
                serde_json::json!({"name": data, "namespace": "default"})
            );
            for (field, i) in [
                ("capacityBytes", 0),
                ("availableBytes", 1),
                ("usedBytes", 2),
                ("inodes", 3),
                ("inodesFree", 4),
                ("inodesUsed", 5),
            ] {
                assert_eq!(v[field].as_u64(), Some(want[i]), "{field}: {v} vs {want:?}");
            }
            eprintln!("[{}] /stats/summary volume: {v}", kind.name());

            // /metrics: kubelet_volume_stats_* for (default, claim), the same figures; none for
            // the hostPath PV's claim.
            let page = http_get(port, "/metrics").await.expect("/metrics");
            let labels = format!("namespace=\"default\",persistentvolumeclaim=\"{data}\"");
            for (name, want) in VOLUME_STATS.iter().zip(want) {
                assert_eq!(
                    sample(&page, name, &labels),
                    Some(want as f64),
                    "{name}{{{labels}}}"
                );
                eprintln!("[{}] {name}{{{labels}}} {want}", kind.name());
            }
            assert!(
                !page.contains(&format!("persistentvolumeclaim=\"{hostpath}\"")),
                "no series for the hostPath PV's claim"
            );

            // 2. An unbound claim and an nfs PV: the pods wait, with upstream's reasons.
            let events: Api<Event> = Api::namespaced(client.clone(), "default");
            for (name, claim, want) in [
                (
                    &names[1],
                    &pending,
                    format!(
                        "unmounted volumes=[data], failed to process volumes=[data]: error processing PVC default/{pending}: PVC is not bound"
                    ),
                ),
                (
                    &names[2],
                    &nfs,
                    format!(
                        "unmounted volumes=[data], failed to process volumes=[data]: error processing PVC default/{nfs}: PV {nfs}-pv: unsupported volume source nfs (this node mounts hostPath and local persistent volumes only)"
                    ),
                ),
            ] {
                let p = pods
                    .create(
                        &PostParams::default(),
                        &claim_pod(name, &node, &image, claim, None, "sleep 3600"),
                    )
                    .await
                    .expect("create waiting pod");
                let uid = p.metadata.uid.expect("uid");
                created.lock().push(uid.clone());
                wait_for(&format!("{name}'s FailedMount"), &log, || async {
                    failed_mounts(&events, &uid)
                        .await
                        .contains(&want)
                        .then_some(())
                })
                .await;
                let p = pods.get(name).await.expect("get waiting pod");
                assert_eq!(phase(&p), "Pending", "{name} does not start");
                let waiting = p
                    .status
                    .and_then(|s| s.container_statuses)
                    .and_then(|c| c.into_iter().next())
                    .and_then(|c| c.state)
                    .and_then(|s| s.waiting);
                if let Some(w) = waiting {
                    assert_eq!(w.reason.as_deref(), Some("ContainerCreating"), "{w:?}");
                }
                eprintln!("[{}] {name}: {want}", kind.name());
            }

            // 3. The writer deleted: the bind mount and the pod directory go, the data stays.
            pods.delete(&names[0], &Default::default())
                .await
                .expect("delete writer");
            let pod_dir = root.join("pods").join(&writer);
            wait_for("the writer's pod directory removed", &log, || async {
                (!pod_dir.exists()).then_some(())
            })
            .await;
            assert_eq!(
                std::fs::read_to_string(local.join("hello")).ok().as_deref(),
                Some("hello\n"),
                "the PV's data stays"
            );
            assert!(
                !std::fs::read_to_string("/proc/self/mountinfo")
                    .unwrap_or_default()
                    .contains(&pod_dir.display().to_string()),
                "nothing mounted under the removed pod directory"
            );
        }
    })
    .await;
    let uids = created.lock().clone();
    k.finish(&tb, &pods, &names, &uids, Ok(())).await;
    delete_claims(&client, "default", &claims, &pvs).await;
    drop(tmpfs);
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_persistent_volumes_containerd() {
    persistent_volumes(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_persistent_volumes_dockershim() {
    persistent_volumes(RuntimeKind::Dockershim).await;
}
