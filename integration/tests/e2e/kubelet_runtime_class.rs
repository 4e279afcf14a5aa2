//! End to end: a pod's `runtimeClassName` (upstream `runtimeclass.Manager` and
//! `createPodSandbox`), on the `kubelet` BINARY in API-server mode against the API server
//! fixture, on both runtimes (containerd's CRI and the embedded dockershim):
//! - a pod naming a RuntimeClass that does not exist gets no sandbox and a
//!   `FailedCreatePodSandBox` event with upstream's message, and stays Pending;
//! - a RuntimeClass whose handler the runtime lacks gets the runtime's refusal in that event,
//!   naming the handler (the e2e spec "should reject a Pod requesting a RuntimeClass with an
//!   unconfigured handler" waits for it);
//! - on containerd, once the missing RuntimeClass is created with handler `runc`, the first pod
//!   runs, in a sandbox whose runtime handler is `runc`.

use crate::kubelet_support;

use std::sync::Arc;

use cri_proto::runtime::v1 as cri;
use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kubelet_support::*;
use parking_lot::Mutex;

fn pod(name: &str, node: &str, image: &str, class: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node, "terminationGracePeriodSeconds": 1, "runtimeClassName": class,
            "containers": [{"name": "app", "image": image, "imagePullPolicy": "IfNotPresent",
                            "command": ["sleep", "3600"]}]
        },
    }))
    .expect("pod")
}

fn runtime_class(name: &str, handler: &str) -> RuntimeClass {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": {"name": name}, "handler": handler,
    }))
    .expect("runtime class")
}

async fn runtime_class_e2e(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_runtime_class[{}]", kind.name()));
    let flags = ["--node-status-update-frequency", "1s"].map(String::from);
    let (_server, mut k, client) = api_mode_kubelet(&tb, kind, "klrc", &flags).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let classes: Api<RuntimeClass> = Api::all(client.clone());
    let events: Api<Event> = Api::namespaced(client, "default");
    let base = unique_name("rc");
    let names = ["missing", "unconfigured"].map(|n| format!("{base}-{n}"));
    let (missing_class, unconfigured_class) = (format!("{base}-later"), format!("{base}-bad"));
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let outcome = tokio::spawn({
        let (log, node, endpoint, image) = k.handles(&tb);
        let (pods, classes, created) = (pods.clone(), classes.clone(), created.clone());
        let [missing, unconfigured] = names.clone();
        let (missing_class, unconfigured_class) = (missing_class.clone(), unconfigured_class.clone());
        async move {
            let sandbox_failure = |uid: String| {
                let (events, log) = (events.clone(), log.clone());
                async move {
                    wait_for("a FailedCreatePodSandBox event", &log, || async {
                        let list = events.list(&Default::default()).await.ok()?;
                        list.items.into_iter().find_map(|e| {
                            (e.involved_object.uid.as_deref() == Some(uid.as_str())
                                && e.reason.as_deref() == Some("FailedCreatePodSandBox"))
                            .then(|| e.message.unwrap_or_default())
                        })
                    })
                    .await
                }
            };

            // A RuntimeClass that does not exist.
            let missing_uid =
                create_recorded(&pods, &created, &pod(&missing, &node, &image, &missing_class)).await;
            assert_eq!(
                sandbox_failure(missing_uid.clone()).await,
                format!(
                    "Failed to create pod sandbox: runtimeclass.node.k8s.io \"{missing_class}\" not found"
                )
            );
            assert_eq!(
                runtime_sandboxes(&endpoint, &missing_uid).await.map(|s| s.len()),
                Some(0),
                "no sandbox without the RuntimeClass"
            );
            let p = pods.get(&missing).await.expect("pod");
            assert_eq!(
                p.status.and_then(|s| s.phase).as_deref(),
                Some("Pending")
            );

            // A handler the runtime does not have.
            let handler = "unconfigured-handler";
            classes
                .create(&PostParams::default(), &runtime_class(&unconfigured_class, handler))
                .await
                .expect("create RuntimeClass");
            let bad_pod = pod(&unconfigured, &node, &image, &unconfigured_class);
            let bad_uid = create_recorded(&pods, &created, &bad_pod).await;
            let msg = sandbox_failure(bad_uid.clone()).await;
            assert!(
                msg.starts_with("Failed to create pod sandbox: ") && msg.contains(handler),
                "{msg}"
            );

            if kind == RuntimeKind::Containerd {
                // The missing RuntimeClass appears: the next sync runs the pod with its handler.
                classes
                    .create(&PostParams::default(), &runtime_class(&missing_class, "runc"))
                    .await
                    .expect("create RuntimeClass");
                let sb = wait_for("the pod's sandbox, ready", &log, || async {
                    let s = runtime_sandboxes(&endpoint, &missing_uid).await?;
                    s.into_iter()
                        .find(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
                })
                .await;
                assert_eq!(sb.runtime_handler, "runc");
                wait_for("the pod Running", &log, || async {
                    let p = pods.get_opt(&missing).await.ok()??;
                    (p.status?.phase.as_deref() == Some("Running")).then_some(())
                })
                .await;
            }
        }
    })
    .await;
    for c in [&missing_class, &unconfigured_class] {
        let _ = classes.delete(c, &DeleteParams::default()).await;
    }
    let uids = created.lock().clone();
    k.finish(&tb, &pods, &names, &uids, outcome).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_runtime_class_containerd() {
    runtime_class_e2e(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_runtime_class_dockershim() {
    runtime_class_e2e(RuntimeKind::Dockershim).await;
}
