//! End to end: node-pressure eviction by the `kubelet` BINARY in API-server mode on both
//! runtimes (containerd's CRI and the embedded dockershim on Docker). The kubelet's root
//! directory (its nodefs) is a 64 MiB tmpfs and `--eviction-hard=nodefs.available<50%`; three
//! API pods run (BestEffort writing to an emptyDir, Burstable, Guaranteed) beside a static
//! pod. Filling the tmpfs sets DiskPressure on the Node and evicts one pod per round in QoS
//! order (BestEffort, then Burstable, then Guaranteed), each ending phase Failed with reason
//! `Evicted`, a message naming the resource and its containers gone from the runtime; the
//! static pod (critical) keeps running; a pod created under pressure is rejected; freeing the
//! space clears DiskPressure.

use crate::kubelet_support;

use std::path::Path;
use std::sync::Arc;

use integration::apiserver::ApiServer;
use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client, Config};
use kubelet_support::*;
use parking_lot::Mutex;

fn mount_tmpfs(dir: &Path, size: &str) {
    use std::ffi::CString;
    std::fs::create_dir_all(dir).expect("mount point");
    let target = CString::new(dir.to_string_lossy().as_bytes()).expect("path");
    let fstype = CString::new("tmpfs").expect("fstype");
    let data = CString::new(format!("size={size}")).expect("data");
    // SAFETY: mount(2) with valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            data.as_ptr().cast(),
        )
    };
    assert_eq!(
        rc,
        0,
        "mount tmpfs on {}: {}",
        dir.display(),
        std::io::Error::last_os_error()
    );
}

fn api_pod(name: &str, node: &str, image: &str, script: &str, resources: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [{
                "name": "app", "image": image, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "resources": resources,
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
        }
    }))
    .expect("pod")
}

fn phase_reason(p: &Pod) -> (String, String) {
    let st = p.status.clone().unwrap_or_default();
    (st.phase.unwrap_or_default(), st.reason.unwrap_or_default())
}

async fn kubelet_eviction(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_eviction[{}]", kind.name()));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = ApiServer::start().await.expect("fixture");
    let mut k = Kubelet::new(kind, "klevict");
    let kubeconfig = k.dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).expect("kubeconfig");
    mount_tmpfs(&k.root, "64m");
    let static_uid = format!("{}-static", k.node);
    k.write_manifest(
        "static.yaml",
        &pod_manifest("static", &static_uid, &tb.busybox_image, "sleep 3600", ""),
    );
    k.spawn(
        &tb,
        &[
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--node-status-update-frequency".into(),
            "1s".into(),
            "--eviction-hard".into(),
            "nodefs.available<50%".into(),
            "--eviction-pressure-transition-period".into(),
            "2s".into(),
            // Node-level reclaim may remove unused images: only none of the shared ones.
            "--image-gc-ref-prefix".into(),
            "eviction-test.invalid/".into(),
        ],
    );
    let client = Client::try_from(Config::new(server.url().parse().expect("url"))).expect("client");
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let (be, bu, gu, late) = (
        unique_name("evict-be"),
        unique_name("evict-bu"),
        unique_name("evict-gu"),
        unique_name("evict-late"),
    );
    let names = [be.clone(), bu.clone(), gu.clone(), late.clone()];
    // UIDs of the API pods once created, for the cleanup whatever happens.
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let outcome = tokio::spawn({
        let (log, node, port, root, image) = (
            k.log.clone(),
            k.node.clone(),
            k.port,
            k.root.clone(),
            tb.busybox_image.clone(),
        );
        let endpoint = k.endpoint(&tb);
        let (nodes, pods, static_uid) = (nodes.clone(), pods.clone(), static_uid.clone());
        let (be, bu, gu, late) = (be.clone(), bu.clone(), gu.clone(), late.clone());
        let created = created.clone();
        async move {
            wait_for("the node Ready without DiskPressure", &log, || async {
                let n = nodes.get_opt(&node).await.ok()??;
                (node_condition(&n, "Ready")?.status == "True"
                    && node_condition(&n, "DiskPressure")?.status == "False")
                    .then_some(())
            })
            .await;
            let specs = [
                (&be, "head -c 1048576 /dev/zero > /data/f; sleep 3600", serde_json::json!({})),
                (
                    &bu,
                    "sleep 3600",
                    serde_json::json!({"requests": {"memory": "16Mi", "ephemeral-storage": "20Mi"}}),
                ),
                (
                    &gu,
                    "sleep 3600",
                    serde_json::json!({
                        "requests": {"cpu": "50m", "memory": "16Mi", "ephemeral-storage": "20Mi"},
                        "limits": {"cpu": "50m", "memory": "16Mi", "ephemeral-storage": "20Mi"}}),
                ),
            ];
            let mut uids = Vec::new();
            for (name, script, res) in specs {
                let p = pods
                    .create(&PostParams::default(), &api_pod(name, &node, &image, script, res))
                    .await
                    .expect("create pod");
                let uid = p.metadata.uid.expect("uid");
                created.lock().push(uid.clone());
                uids.push(uid);
            }
            for name in [&be, &bu, &gu] {
                wait_for(&format!("{name} Running"), &log, || async {
                    let p = pods.get_opt(name).await.ok()??;
                    (phase_reason(&p).0 == "Running").then_some(())
                })
                .await;
            }
            let mut qos = Vec::new();
            for n in [&be, &bu, &gu] {
                let p = pods.get(n).await.expect("pod");
                qos.push(p.status.and_then(|s| s.qos_class).unwrap_or_default());
            }
            assert_eq!(qos, ["BestEffort", "Burstable", "Guaranteed"]);

            // Fill the nodefs past the threshold: 40 of 64 MiB.
            std::fs::write(root.join("filler"), vec![7u8; 40 << 20]).expect("fill the tmpfs");
            wait_for("DiskPressure on the node", &log, || async {
                let n = nodes.get_opt(&node).await.ok()??;
                (node_condition(&n, "DiskPressure")?.status == "True").then_some(())
            })
            .await;
            // One pod per round, in QoS order: when one is seen evicted, the next ones are
            // still running (rounds are 10 s apart).
            let order = [&be, &bu, &gu];
            for (i, name) in order.iter().enumerate() {
                let p = wait_for(&format!("{name} evicted"), &log, || async {
                    let p = pods.get_opt(name).await.ok()??;
                    (phase_reason(&p) == ("Failed".into(), "Evicted".into())).then_some(p)
                })
                .await;
                let message = p
                    .status
                    .as_ref()
                    .and_then(|s| s.message.clone())
                    .unwrap_or_default();
                assert!(
                    message.starts_with("The node was low on resource: ephemeral-storage."),
                    "{message}"
                );
                for later in &order[i + 1..] {
                    let lp = pods.get(later).await.expect("pod");
                    assert_eq!(
                        phase_reason(&lp).0,
                        "Running",
                        "{later} must outlive {name} (QoS order)"
                    );
                }
                let uid = &uids[i];
                wait_for(&format!("{name}'s containers gone"), &log, || async {
                    let c = runtime_containers(&endpoint, uid).await?;
                    c.is_empty().then_some(())
                })
                .await;
            }
            // The static pod is critical: never evicted.
            let sp = pod(port, &static_uid).await.expect("static pod in /pods");
            assert!(running_ids(&sp).is_some(), "static pod still running: {sp}");
            // A pod arriving under pressure is rejected at admission.
            pods.create(
                &PostParams::default(),
                &api_pod(&late, &node, &image, "sleep 3600", serde_json::json!({})),
            )
            .await
            .expect("create late pod");
            let p = wait_for("the late pod rejected", &log, || async {
                let p = pods.get_opt(&late).await.ok()??;
                (phase_reason(&p) == ("Failed".into(), "Evicted".into())).then_some(p)
            })
            .await;
            let message = p.status.and_then(|s| s.message).unwrap_or_default();
            assert!(message.contains("DiskPressure"), "{message}");

            // Freeing the space clears the condition (2 s transition period).
            std::fs::remove_file(root.join("filler")).expect("free the tmpfs");
            wait_for("DiskPressure cleared", &log, || async {
                let n = nodes.get_opt(&node).await.ok()??;
                (node_condition(&n, "DiskPressure")?.status == "False").then_some(())
            })
            .await;
        }
    })
    .await;
    for n in &names {
        let _ = pods.delete(n, &DeleteParams::default()).await;
    }
    let mut all = created.lock().clone();
    all.push(static_uid.clone());
    k.shutdown(&tb, &all).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_eviction_containerd() {
    kubelet_eviction(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_eviction_dockershim() {
    kubelet_eviction(RuntimeKind::Dockershim).await;
}
