//! End to end: `--max-pods` admission on the `kubelet` BINARY, on both runtimes (containerd's
//! CRI and the embedded dockershim on Docker). With `--max-pods=3`, three static pods run; a
//! fourth is rejected at admission as upstream's predicate admit handler rejects it: reason
//! `OutOfpods`, message "Node didn't have enough resource: pods, requested: 1, used: 3,
//! capacity: 3" in the kubelet's log, and in `/pods` phase Failed with that reason and the
//! message after "Pod " (upstream `rejectPod`); the runtime never sees it and the three others
//! keep running. Once one of the three is removed, a new pod is admitted and runs, while the
//! rejected one stays Failed.

use crate::kubelet_support;

use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use kubelet_support::*;

const MESSAGE: &str = "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3";

async fn kubelet_max_pods(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_max_pods[{}]", kind.name()));
    let mut k = Kubelet::new(kind, "klmaxp");
    let node = k.node.clone();
    let uid = |n: &str| format!("{node}-{n}");
    let names = ["a", "b", "c", "d", "e"];
    let uids: Vec<String> = names.iter().map(|n| uid(n)).collect();
    let manifest = |n: &str| pod_manifest(n, &uid(n), &tb.busybox_image, "sleep 3600", "");
    for n in &names[..3] {
        k.write_manifest(&format!("{n}.yaml"), &manifest(n));
    }
    k.spawn(&tb, &["--max-pods=3".into()]);
    let (port, log, endpoint) = (k.port, k.log.clone(), k.endpoint(&tb));
    let body = async {
        for u in &uids[..3] {
            wait_for("the three admitted pods running", &log, || async {
                running_ids(&pod(port, u).await?)
            })
            .await;
        }
        // A fourth pod is one too many.
        k.write_manifest("d.yaml", &manifest("d"));
        let d = wait_for("the fourth pod rejected in /pods", &log, || async {
            let p = pod(port, &uids[3]).await?;
            (p["status"]["phase"] == "Failed").then_some(p)
        })
        .await;
        assert_eq!(d["status"]["reason"], "OutOfpods", "{d}");
        assert_eq!(d["status"]["message"], format!("Pod {MESSAGE}"), "{d}");
        let text = std::fs::read_to_string(&log).expect("kubelet log");
        let line = text
            .lines()
            .find(|l| l.contains("pod rejected at admission") && l.contains(&k.pod_name("d")))
            .unwrap_or_else(|| panic!("no rejection line in the log:\n{}", log_tail(&log, 40)));
        assert!(
            line.contains("OutOfpods") && line.contains(MESSAGE),
            "reason and message in the log: {line}"
        );
        // It never reaches the runtime; the others keep running.
        tokio::time::sleep(std::time::Duration::from_secs(4)).await;
        let sandboxes = runtime_sandboxes(&endpoint, &uids[3])
            .await
            .expect("list sandboxes");
        assert!(
            sandboxes.is_empty(),
            "no sandbox for the rejected pod: {sandboxes:?}"
        );
        for u in &uids[..3] {
            assert!(
                running_ids(&pod(port, u).await.expect("pod")).is_some(),
                "{u} runs"
            );
        }
        // One admitted pod goes away: a new pod fits again; the rejected one stays Failed.
        std::fs::remove_file(k.manifests.join("a.yaml")).expect("remove a.yaml");
        wait_for("the removed pod gone", &log, || async {
            pod(port, &uids[0]).await.is_none().then_some(())
        })
        .await;
        k.write_manifest("e.yaml", &manifest("e"));
        wait_for("a new pod admitted after one left", &log, || async {
            running_ids(&pod(port, &uids[4]).await?)
        })
        .await;
        let d = pod(port, &uids[3]).await.expect("rejected pod");
        assert_eq!(d["status"]["reason"], "OutOfpods", "{d}");
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    k.shutdown(&tb, &uids).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

/// API-server mode: the rejected pod's status is written to the API.
async fn api_pods_beyond_max_pods(kind: RuntimeKind) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, DeleteParams, PostParams};
    let tb = require_testbed!(&format!("kubelet_max_pods_api[{}]", kind.name()));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = integration::apiserver::ApiServer::start()
        .await
        .expect("fixture");
    let dir = tempfile::Builder::new()
        .prefix("kubelet-maxpods-")
        .tempdir()
        .expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).expect("kubeconfig");
    let (root, log) = (dir.path().join("root"), dir.path().join("kubelet.log"));
    let node = integration::fixtures::unique_name("maxpapi");
    let mut cmd = kubelet_command(kind, &tb, &root, None, free_port(), &node, &log);
    cmd.arg("--kubeconfig").arg(&kubeconfig).arg("--max-pods=1");
    let mut child = cmd.spawn().expect("spawn kubelet");
    let config = kube::Config::new(server.url().parse().expect("url"));
    let pods: Api<Pod> =
        Api::namespaced(kube::Client::try_from(config).expect("client"), "default");
    let new_pod = |name: &str| -> Pod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": node, "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": tb.busybox_image,
                    "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"]}]
            }
        }))
        .expect("pod")
    };
    let (first, second) = (format!("{node}-first"), format!("{node}-second"));
    let mut uids = Vec::new();
    let body = async {
        let p = pods
            .create(&PostParams::default(), &new_pod(&first))
            .await
            .expect("create first");
        uids.extend(p.metadata.uid.clone());
        wait_for("the first pod Running in the API", &log, || async {
            let p = pods.get_opt(&first).await.ok()??;
            (p.status?.phase.as_deref() == Some("Running")).then_some(())
        })
        .await;
        let p = pods
            .create(&PostParams::default(), &new_pod(&second))
            .await
            .expect("create second");
        uids.extend(p.metadata.uid.clone());
        let status = wait_for("the second pod Failed in the API", &log, || async {
            let s = pods.get_opt(&second).await.ok()??.status?;
            (s.phase.as_deref() == Some("Failed")).then_some(s)
        })
        .await;
        assert_eq!(status.reason.as_deref(), Some("OutOfpods"), "{status:?}");
        assert_eq!(
            status.message.as_deref(),
            Some("Pod Node didn't have enough resource: pods, requested: 1, used: 1, capacity: 1"),
            "{status:?}"
        );
        // And a Warning event with the reason and message (upstream `rejectPod`).
        let second_uid = p.metadata.uid.clone();
        let events: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(pods.clone().into_client(), "default");
        let event = wait_for("the OutOfpods event", &log, || async {
            let list = events.list(&Default::default()).await.ok()?;
            list.items.into_iter().find(|e| {
                e.involved_object.uid == second_uid && e.reason.as_deref() == Some("OutOfpods")
            })
        })
        .await;
        assert_eq!(event.type_.as_deref(), Some("Warning"), "{event:?}");
        assert_eq!(
            event.message.as_deref(),
            Some("Node didn't have enough resource: pods, requested: 1, used: 1, capacity: 1"),
            "{event:?}"
        );
        let first_status = pods.get(&first).await.expect("first").status;
        assert_eq!(
            first_status.and_then(|s| s.phase).as_deref(),
            Some("Running"),
            "the admitted pod keeps running"
        );
        for name in [&first, &second] {
            let _ = pods
                .delete(name, &DeleteParams::default().grace_period(0))
                .await;
        }
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    stop_kubelet(&mut child).await;
    cleanup_all(kind, &tb, &uids).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_max_pods_api_containerd() {
    api_pods_beyond_max_pods(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_max_pods_containerd() {
    kubelet_max_pods(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_max_pods_dockershim() {
    kubelet_max_pods(RuntimeKind::Dockershim).await;
}
