//! End to end: what Kubernetes 1.26's node conformance specs ask of admission and of the pod's
//! lifetime and readiness, on the `kubelet` BINARY in API-server mode against the API server
//! fixture, on both runtimes (containerd's CRI and the embedded dockershim):
//! - PodOSRejection: a pod whose `spec.os.name` is not the node's ends Failed with reason
//!   `PodOSNotSupported` and never gets a sandbox;
//! - Sysctls "should not launch unsafe, but not explicitly enabled sysctls on the node": a pod
//!   setting `kernel.msgmax` ends Failed with reason `SysctlForbidden`, while one allowed by
//!   `--allowed-unsafe-sysctls` runs;
//! - Pods "should allow activeDeadlineSeconds to be updated": a running pod whose
//!   `activeDeadlineSeconds` is set to 5 ends Failed with reason `DeadlineExceeded` and its
//!   containers stop;
//! - Pods "should support pod readiness gates": `Ready` stays False with reason
//!   `ReadinessGatesNotReady` until every gate's condition is True on the API pod, and goes
//!   False again when one is set False.

use crate::kubelet_support;

use std::sync::Arc;

use cri_proto::runtime::v1 as cri;
use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kubelet_support::*;
use parking_lot::Mutex;

fn phase_reason(p: &Pod) -> (String, String) {
    let s = p.status.as_ref();
    (
        s.and_then(|s| s.phase.clone()).unwrap_or_default(),
        s.and_then(|s| s.reason.clone()).unwrap_or_default(),
    )
}

/// The pod's `Ready` condition: (status, reason).
fn ready(p: &Pod) -> Option<(String, String)> {
    let c = p
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default()))
}

fn pod(name: &str, node: &str, image: &str, extra_spec: serde_json::Value) -> Pod {
    let mut spec = serde_json::json!({
        "nodeName": node, "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "app", "image": image, "imagePullPolicy": "IfNotPresent",
                        "command": ["sleep", "3600"]}]
    });
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        s.extend(extra.clone());
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
    .expect("pod")
}

async fn conformance_admission(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_conformance_admission[{}]", kind.name()));
    let flags = [
        "--node-status-update-frequency",
        "1s",
        "--allowed-unsafe-sysctls",
        "kernel.msgmnb",
        "--eviction-hard",
        "memory.available<100Mi",
    ]
    .map(String::from);
    let (_server, mut k, client) = api_mode_kubelet(&tb, kind, "kladmit", &flags).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let base = unique_name("admit");
    let names = ["os", "sysctl", "allowed", "deadline", "gates"].map(|n| format!("{base}-{n}"));
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let outcome = tokio::spawn({
        let (log, node, endpoint, image) = (
            k.log.clone(),
            k.node.clone(),
            k.endpoint(&tb),
            tb.busybox_image.clone(),
        );
        let pods = pods.clone();
        let created = created.clone();
        let [os, sysctl, allowed, deadline, gates] = names.clone();
        async move {
            let create = |p: Pod| {
                let (pods, created) = (pods.clone(), created.clone());
                async move {
                    let p = pods
                        .create(&PostParams::default(), &p)
                        .await
                        .expect("create pod");
                    let uid = p.metadata.uid.clone().unwrap_or_default();
                    created.lock().push(uid.clone());
                    uid
                }
            };
            let failed_with = |name: String, reason: &'static str| {
                let (pods, log) = (pods.clone(), log.clone());
                async move {
                    let what = format!("{name} Failed with reason {reason}");
                    wait_for(&what, &log, || async {
                        let p = pods.get_opt(&name).await.ok()??;
                        let (phase, r) = phase_reason(&p);
                        assert_ne!(phase, "Running", "{name} must never run");
                        (phase == "Failed" && r == reason).then_some(p)
                    })
                    .await
                }
            };

            // PodOSRejection.
            let os_uid = create(pod(
                &os,
                &node,
                &image,
                serde_json::json!({"os": {"name": "windows"}}),
            ))
            .await;
            let p = failed_with(os.clone(), "PodOSNotSupported").await;
            assert_eq!(
                p.status.and_then(|s| s.message).as_deref(),
                Some("Pod Failed to admit pod as the OS field doesn't match node OS")
            );
            assert_eq!(
                runtime_sandboxes(&endpoint, &os_uid)
                    .await
                    .map(|s| s.len()),
                Some(0),
                "a rejected pod gets no sandbox"
            );

            // An unsafe sysctl not allowed, and one allowed by --allowed-unsafe-sysctls.
            let sysctls = |name: &str| {
                serde_json::json!({"securityContext": {"sysctls": [{"name": name, "value": "65536"}]}})
            };
            create(pod(&sysctl, &node, &image, sysctls("kernel.msgmax"))).await;
            let p = failed_with(sysctl.clone(), "SysctlForbidden").await;
            assert_eq!(
                p.status.and_then(|s| s.message).as_deref(),
                Some("Pod forbidden sysctl: \"kernel.msgmax\" not allowlisted")
            );
            let allowed_uid = create(pod(&allowed, &node, &image, sysctls("kernel.msgmnb"))).await;
            wait_for("the pod with an allowed unsafe sysctl Running", &log, || async {
                let p = pods.get_opt(&allowed).await.ok()??;
                (phase_reason(&p).0 == "Running").then_some(())
            })
            .await;
            let (code, out, _) = exec_in_pod(&endpoint, &allowed_uid, &["cat", "/proc/sys/kernel/msgmnb"])
                .await
                .expect("exec");
            assert_eq!((code, out.trim()), (0, "65536"), "the sysctl was applied");

            // activeDeadlineSeconds set on a running pod.
            let deadline_uid = create(pod(&deadline, &node, &image, serde_json::json!({}))).await;
            wait_for("the deadline pod Running", &log, || async {
                let p = pods.get_opt(&deadline).await.ok()??;
                (phase_reason(&p).0 == "Running").then_some(())
            })
            .await;
            pods.patch(
                &deadline,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"activeDeadlineSeconds": 5}})),
            )
            .await
            .expect("patch activeDeadlineSeconds");
            let what = "the deadline pod Failed with reason DeadlineExceeded";
            let p = wait_for(what, &log, || async {
                let p = pods.get_opt(&deadline).await.ok()??;
                (phase_reason(&p) == ("Failed".into(), "DeadlineExceeded".into())).then_some(p)
            })
            .await;
            assert_eq!(
                p.status.and_then(|s| s.message).as_deref(),
                Some("Pod was active on the node longer than the specified deadline")
            );
            wait_for("the deadline pod's container stopped", &log, || async {
                let cs = runtime_containers(&endpoint, &deadline_uid).await?;
                cs.iter()
                    .all(|c| c.state != cri::ContainerState::ContainerRunning as i32)
                    .then_some(())
            })
            .await;

            // Readiness gates.
            let (g1, g2) = ("k8s.io/test-condition1", "k8s.io/test-condition2");
            create(pod(
                &gates,
                &node,
                &image,
                serde_json::json!({"readinessGates": [{"conditionType": g1}, {"conditionType": g2}]}),
            ))
            .await;
            let ready_is = |want: (&'static str, &'static str)| {
                let (pods, log, gates) = (pods.clone(), log.clone(), gates.clone());
                async move {
                    let what = format!("the gated pod's Ready condition {want:?}");
                    wait_for(&what, &log, || async {
                        let p = pods.get_opt(&gates).await.ok()??;
                        let r = ready(&p)?;
                        (phase_reason(&p).0 == "Running" && r == (want.0.into(), want.1.into()))
                            .then_some(())
                    })
                    .await
                }
            };
            let set_gate = |t: &'static str, status: &'static str| {
                let (pods, gates) = (pods.clone(), gates.clone());
                async move {
                    let patch = serde_json::json!({"status": {"conditions": [
                        {"type": t, "status": status}]}});
                    pods.patch_status(&gates, &PatchParams::default(), &Patch::Strategic(&patch))
                        .await
                        .expect("patch the gate's condition");
                }
            };
            ready_is(("False", "ReadinessGatesNotReady")).await;
            set_gate(g1, "True").await;
            // Still not ready: the second gate's condition does not exist.
            tokio::time::sleep(std::time::Duration::from_secs(3)).await;
            ready_is(("False", "ReadinessGatesNotReady")).await;
            set_gate(g2, "True").await;
            ready_is(("True", "")).await;
            set_gate(g1, "False").await;
            ready_is(("False", "ReadinessGatesNotReady")).await;
        }
    })
    .await;
    let uids = created.lock().clone();
    k.finish(&tb, &pods, &names, &uids, outcome).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_admission_containerd() {
    conformance_admission(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_admission_dockershim() {
    conformance_admission(RuntimeKind::Dockershim).await;
}
