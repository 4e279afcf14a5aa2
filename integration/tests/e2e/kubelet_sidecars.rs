//! End to end: sidecar containers (KEP-753, init containers with `restartPolicy: Always`) and
//! ephemeral containers of the `kubelet` BINARY in API-server mode against the API server
//! fixture, on both runtimes (containerd's CRI and the embedded dockershim). One pod, with a
//! shared emptyDir where each container writes a line when it starts or stops:
//! - the sidecar starts before the next init container, which starts before the app container;
//! - the pod is Running but not Ready while the sidecar's readiness probe fails, Ready once it
//!   succeeds, and the sidecar's init container status says started and ready;
//! - the sidecar exits while the app runs: it is restarted (restart count 1), the app is not;
//! - an ephemeral container added through the `ephemeralcontainers` subresource starts, shares
//!   the app container's PID namespace (`targetContainerName`), shows in
//!   `ephemeralContainerStatuses`, and exec and attach to it through the kubelet work;
//! - the app completes (`restartPolicy: Never`): the sidecar is stopped after it, and the pod
//!   is `Succeeded`.

use crate::kubelet_secure_port::{client_identity, connector, relay};
use crate::kubelet_support;

use std::sync::Arc;
use std::time::Duration;

use integration::apiserver::ApiServer;
use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use integration::streaming::{self, StdioRequest, Transport};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Config};
use kubelet_support::*;
use parking_lot::Mutex;

fn sidecar_pod(name: &str, node: &str, image: &str) -> Pod {
    // `sh` as PID 1 ignores SIGTERM unless it traps it: the sidecar traps it to record its stop.
    let sidecar = "trap 'echo sidecar-term >> /shared/order; exit 0' TERM; \
                   echo sidecar >> /shared/order; \
                   while [ ! -f /shared/kill-sidecar ]; do sleep 0.2; done; \
                   rm -f /shared/kill-sidecar; exit 1";
    let main = "echo main >> /shared/order; \
                while [ ! -f /shared/done ]; do sleep 0.2; done; \
                echo main-exit >> /shared/order";
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
            "volumes": [{"name": "shared", "emptyDir": {}}],
            "initContainers": [
                {"name": "sidecar", "image": image, "imagePullPolicy": "IfNotPresent",
                 "restartPolicy": "Always", "command": ["sh", "-c", sidecar],
                 "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
                 "readinessProbe": {"exec": {"command": ["cat", "/shared/sidecar-ready"]},
                                    "periodSeconds": 1, "failureThreshold": 1}},
                {"name": "setup", "image": image, "imagePullPolicy": "IfNotPresent",
                 "command": ["sh", "-c", "echo setup >> /shared/order"],
                 "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}
            ],
            "containers": [
                {"name": "main", "image": image, "imagePullPolicy": "IfNotPresent",
                 "command": ["sh", "-c", main],
                 "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}
            ]
        }
    }))
    .expect("pod")
}

fn init_status<'a>(st: &'a PodStatus, name: &str) -> Option<&'a ContainerStatus> {
    st.init_container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == name)
}

fn app_status<'a>(st: &'a PodStatus, name: &str) -> Option<&'a ContainerStatus> {
    st.container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == name)
}

fn condition(st: &PodStatus, t: &str) -> Option<String> {
    st.conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == t)
        .map(|c| c.status.clone())
}

fn running(c: Option<&ContainerStatus>) -> bool {
    c.and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

async fn sidecars(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_sidecars[{}]", kind.name()));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = Arc::new(ApiServer::start().await.expect("fixture"));
    let mut k = Kubelet::new(kind, "klside");
    let kubeconfig = k.dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).expect("kubeconfig");
    let ca = k.dir.path().join("client-ca.pem");
    let identity = client_identity(&ca);
    let secure_port = free_port();
    k.spawn(
        &tb,
        &[
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--node-status-update-frequency".into(),
            "1s".into(),
            "--sync-frequency".into(),
            "2s".into(),
            "--port".into(),
            secure_port.to_string(),
            "--client-ca-file".into(),
            ca.display().to_string(),
        ],
    );
    let client = Client::try_from(Config::new(server.url().parse().expect("url"))).expect("client");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let name = unique_name("sidecar-pod");
    let created: Arc<Mutex<Option<String>>> = Arc::default();
    let outcome = tokio::spawn({
        let (log, node, image, root) = (
            k.log.clone(),
            k.node.clone(),
            tb.busybox_image.clone(),
            k.root.clone(),
        );
        let (pods, name, created) = (pods.clone(), name.clone(), created.clone());
        async move {
            let p = pods
                .create(&PostParams::default(), &sidecar_pod(&name, &node, &image))
                .await
                .expect("create pod");
            let uid = p.metadata.uid.clone().expect("uid");
            *created.lock() = Some(uid.clone());
            let shared = root.join(format!(
                "pods/{uid}/volumes/kubernetes.io~empty-dir/shared"
            ));
            let order = || {
                std::fs::read_to_string(shared.join("order"))
                    .unwrap_or_default()
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            };
            let status = || async {
                pods.get_opt(&name).await.ok().flatten().and_then(|p| p.status)
            };

            // 1. Order: sidecar, then setup, then main; Running but not Ready (the sidecar's
            // readiness probe fails), the sidecar started and not ready.
            let st = wait_for("main running, the pod not Ready", &log, || async {
                let st = status().await?;
                let ok = st.phase.as_deref() == Some("Running")
                    && running(app_status(&st, "main"))
                    && condition(&st, "Ready").as_deref() == Some("False")
                    && condition(&st, "Initialized").as_deref() == Some("True");
                ok.then_some(st)
            })
            .await;
            let lines = wait_for("main's line in the shared file", &log, || async {
                let l = order();
                (l.len() >= 3).then_some(l)
            })
            .await;
            assert_eq!(lines[..3], ["sidecar", "setup", "main"], "{lines:?}");
            let side = init_status(&st, "sidecar").expect("sidecar status");
            assert!(running(Some(side)), "{side:?}");
            assert_eq!(side.started, Some(true));
            assert!(!side.ready);
            let setup = init_status(&st, "setup").expect("setup status");
            assert_eq!(
                setup.state.as_ref().and_then(|s| s.terminated.as_ref()).map(|t| t.exit_code),
                Some(0)
            );

            // 2. The sidecar's readiness makes the pod Ready.
            std::fs::write(shared.join("sidecar-ready"), "ok").expect("ready file");
            wait_for("the pod Ready with its sidecar", &log, || async {
                let st = status().await?;
                let ok = condition(&st, "Ready").as_deref() == Some("True")
                    && init_status(&st, "sidecar").is_some_and(|s| s.ready);
                ok.then_some(())
            })
            .await;
            let main_id = app_status(&status().await.expect("status"), "main")
                .and_then(|c| c.container_id.clone())
                .expect("main id");

            // 3. The sidecar exits while main runs: restarted, main untouched.
            std::fs::write(shared.join("kill-sidecar"), "").expect("kill file");
            let st = wait_for("the sidecar restarted", &log, || async {
                let st = status().await?;
                let s = init_status(&st, "sidecar")?;
                (s.restart_count >= 1 && running(Some(s))).then_some(st)
            })
            .await;
            let main = app_status(&st, "main").expect("main");
            assert_eq!(main.container_id.as_deref(), Some(main_id.as_str()));
            assert_eq!(main.restart_count, 0);
            let last = init_status(&st, "sidecar")
                .and_then(|s| s.last_state.as_ref())
                .and_then(|l| l.terminated.as_ref())
                .map(|t| t.exit_code);
            assert_eq!(last, Some(1), "the sidecar's exit is its last state");
            wait_for("the restarted sidecar's line", &log, || async {
                (order().iter().filter(|l| *l == "sidecar").count() == 2).then_some(())
            })
            .await;

            // 4. An ephemeral container through the subresource, in main's PID namespace.
            let patch = serde_json::json!({"spec": {"ephemeralContainers": [{
                "name": "debugger", "image": image, "imagePullPolicy": "IfNotPresent",
                "targetContainerName": "main", "stdin": true,
                "command": ["sh", "-c", "while read l; do echo got:$l; done"]
            }]}});
            pods.patch_ephemeral_containers(&name, &PatchParams::default(), &Patch::Strategic(patch))
                .await
                .expect("add the ephemeral container");
            wait_for("the ephemeral container running in the status", &log, || async {
                let st = status().await?;
                let e = st
                    .ephemeral_container_statuses
                    .iter()
                    .flatten()
                    .find(|c| c.name == "debugger")?;
                running(Some(e)).then_some(())
            })
            .await;
            let with_cert = relay(secure_port, connector(Some(identity))).await;
            let exec_url = format!(
                "http://127.0.0.1:{with_cert}/exec/default/{name}/debugger?command=sh&command=-c&command=cat%20%2Fproc%2F1%2Fcmdline&output=1&error=1"
            );
            let req = StdioRequest {
                stdout: true,
                stderr: true,
                ..Default::default()
            };
            let result = streaming::connect(&exec_url, Transport::Spdy, req, None)
                .await
                .expect("exec in the ephemeral container")
                .wait(Duration::from_secs(30))
                .await
                .expect("exec result");
            assert_eq!(result.exit_code, Some(0), "{result:?}");
            assert!(
                result.stdout_str().contains("main-exit"),
                "PID 1 is main's shell (shared PID namespace): {:?}",
                result.stdout_str()
            );
            let attach_url = format!(
                "http://127.0.0.1:{with_cert}/attach/default/{name}/debugger?input=1&output=1&error=1"
            );
            let req = StdioRequest {
                stdin: true,
                stdout: true,
                stderr: true,
                ..Default::default()
            };
            let mut session = streaming::connect(&attach_url, Transport::Spdy, req, None)
                .await
                .expect("attach to the ephemeral container");
            session.write_stdin("hello\n").await.expect("stdin");
            let out = session
                .read_stdout_until(b"got:hello", Duration::from_secs(30))
                .await
                .expect("attach output");
            let out = String::from_utf8_lossy(&out);
            assert!(out.contains("got:hello"), "{out:?}");
            session.close_stdin().await;

            // 5. main completes: the sidecar is stopped after it; the pod Succeeded.
            std::fs::write(shared.join("done"), "").expect("done file");
            let st = wait_for("the pod Succeeded", &log, || async {
                let st = status().await?;
                (st.phase.as_deref() == Some("Succeeded")).then_some(st)
            })
            .await;
            let lines = order();
            let at = |w: &str| lines.iter().position(|l| l == w);
            assert!(at("main-exit").is_some() && at("sidecar-term").is_some(), "{lines:?}");
            assert!(at("main-exit") < at("sidecar-term"), "{lines:?}");
            let side = init_status(&st, "sidecar").expect("sidecar");
            assert!(!running(Some(side)), "{side:?}");
            uid
        }
    })
    .await;
    let _ = pods
        .delete(&name, &DeleteParams::default().grace_period(0))
        .await;
    let uids: Vec<String> = created.lock().clone().into_iter().collect();
    k.shutdown(&tb, &uids).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_sidecars_containerd() {
    sidecars(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_sidecars_dockershim() {
    sidecars(RuntimeKind::Dockershim).await;
}
