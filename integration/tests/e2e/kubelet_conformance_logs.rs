//! End to end: the container-log reads of two Kubernetes 1.26 [Conformance] specs, done on the
//! `kubelet` BINARY in API-server mode against the API server fixture, on both runtimes
//! (containerd's CRI and the embedded dockershim). The real API server serves `pods/<name>/log`
//! with one plain GET of the kubelet's `/containerLogs/<ns>/<pod>/<container>` (its
//! `LocationStreamer`), so these tests do that GET themselves on the kubelet's secure port:
//! - "Pods should support retrieving logs from the container over websockets": a container that
//!   runs `echo container is alive; sleep 10000` is created, and as soon as the pod's status in
//!   the API server says Running and Ready (here: the very status that first says so, taken from
//!   the fixture's change feed, so the test does not depend on how often it polls), ONE
//!   non-follow read of its log must be exactly `container is alive\n`. Like the Go kubelet's,
//!   the status that first says Running is written by a sync after the one that started the
//!   container, once the PLEG has looked at the runtime since (a relist later), so the
//!   container's first output has reached its log by then. (Before, the starting sync wrote
//!   Running itself, 5 to 12 ms after the line reached the log on an idle test bed: a read at
//!   that moment found it only while the runtime was quick; the pod worker's unit test
//!   `a_started_container_is_reported_running_by_the_next_sync` pins the order.)
//! - "Ephemeral Containers will start an ephemeral container in an existing pod": an ephemeral
//!   container (`stdin` and `tty`, printing `polo` every 2 s) is added through the
//!   `ephemeralcontainers` subresource; once it runs, an exec into it answers and its log,
//!   read through `/containerLogs` by its name, contains `polo`.
//! - The websockets spec as the API server reads the log for it: a Go client
//!   (`integration/clients/go-log-reader`, Debian's Go) with the copy loop of the API server's
//!   websocket stream, which drops data that Go's `net/http` returns together with EOF.

use crate::kubelet_logs::{secure_get_status, secure_port_flags};
use crate::kubelet_secure_port::{connector, relay};
use crate::kubelet_support;

use std::sync::Arc;
use std::time::Duration;

use integration::apiserver::ApiServer;
use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use integration::streaming::{self, StdioRequest, Transport};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kubelet_support::*;
use parking_lot::Mutex;

/// The spec's pod: one busybox container `main` running `script`.
fn busybox_pod(name: &str, node: &str, image: &str, script: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": image, "imagePullPolicy": "IfNotPresent",
                            "command": ["/bin/sh", "-c", script]}]
        }
    }))
    .expect("pod")
}

fn running(c: Option<&ContainerStatus>) -> bool {
    c.and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

/// What the e2e framework's `CreateSync` waits for: phase Running and condition Ready True.
fn running_and_ready(st: &PodStatus) -> bool {
    st.phase.as_deref() == Some("Running")
        && st
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// `GET /containerLogs/default/<pod>/<container>` on the kubelet's secure port, as the API
/// server's `pods/<name>/log` does: (status code, body).
async fn container_logs(port: u16, pod: &str, container: &str) -> (u16, String) {
    secure_get_status(port, &format!("/containerLogs/default/{pod}/{container}"))
        .await
        .expect("an answer from /containerLogs")
}

/// Runs `body` (given the pods API, the kubelet and its secure port, and where to record the
/// UIDs of pods created) on a fresh kubelet of `kind`, then deletes the pods and cleans up.
async fn with_kubelet<F, Fut>(test: &str, kind: RuntimeKind, prefix: &str, body: F)
where
    F: FnOnce(Arc<ApiServer>, Api<Pod>, Arc<KubeletInfo>, Arc<Mutex<Vec<String>>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let tb = require_testbed!(&format!("{test}[{}]", kind.name()));
    // Its secure port serves anonymous requests.
    let sport = free_port();
    let mut flags = ["--node-status-update-frequency", "1s"]
        .map(String::from)
        .to_vec();
    flags.extend(secure_port_flags(sport));
    let (server, mut k, client) = api_mode_kubelet(&tb, kind, prefix, &flags).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let info = Arc::new(KubeletInfo {
        node: k.node.clone(),
        log: k.log.clone(),
        image: tb.busybox_image.clone(),
        secure_port: sport,
    });
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let outcome = tokio::spawn(body(
        Arc::clone(&server),
        pods.clone(),
        info,
        Arc::clone(&created),
    ))
    .await;
    let (list, _) = server.store().list("pods", Some("default"));
    for p in list {
        if let Some(n) = p.pointer("/metadata/name").and_then(|n| n.as_str()) {
            let _ = pods
                .delete(n, &DeleteParams::default().grace_period(0))
                .await;
        }
    }
    let uids = created.lock().clone();
    k.shutdown(&tb, &uids).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// What a test body needs of its kubelet.
struct KubeletInfo {
    node: String,
    log: std::path::PathBuf,
    image: String,
    secure_port: u16,
}

/// Creates the websockets logs spec's pod `name` (`echo container is alive; sleep 10000`) and
/// records its UID in `created`.
async fn create_alive_pod(
    pods: &Api<Pod>,
    k: &KubeletInfo,
    name: &str,
    created: &Mutex<Vec<String>>,
) {
    let script = "echo container is alive; sleep 10000";
    let p = pods
        .create(
            &PostParams::default(),
            &busybox_pod(name, &k.node, &k.image, script),
        )
        .await
        .expect("create pod");
    created.lock().extend(p.metadata.uid);
}

/// The websockets logs spec: the first status that says Running and Ready, then at once one
/// non-follow read of the log.
async fn logs_at_running(kind: RuntimeKind) {
    with_kubelet(
        "kubelet_conformance_logs_at_running",
        kind,
        "kclogrun",
        |server, pods, k, created| async move {
            let name = unique_name("pod-logs-websocket");
            // The fixture's change feed from now on: every status the kubelet writes.
            let store = server.store();
            let (_, mut feed) = store
                .watch_from(store.resource_version(), &|_| false)
                .expect("watch");
            create_alive_pod(&pods, &k, &name, &created).await;
            let first_running = tokio::time::timeout(DEADLINE, async {
                loop {
                    let change = match feed.recv().await {
                        Ok(c) => c,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(e) => panic!("the fixture's feed ended: {e}"),
                    };
                    if change.key.resource != "pods" || change.key.name != name {
                        continue;
                    }
                    let Some(st) = change
                        .object
                        .get("status")
                        .and_then(|s| serde_json::from_value::<PodStatus>(s.clone()).ok())
                    else {
                        continue;
                    };
                    if running_and_ready(&st) {
                        return st;
                    }
                }
            })
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the pod never turned Running and Ready; kubelet log tail:\n{}",
                    log_tail(&k.log, 60)
                )
            });
            // At once, as the spec's one websocket does: the whole log, no follow.
            let (code, body) = container_logs(k.secure_port, &name, "main").await;
            let main = first_running
                .container_statuses
                .iter()
                .flatten()
                .find(|c| c.name == "main");
            assert!(running(main), "{first_running:?}");
            assert_eq!(
                (code, body.as_str()),
                (200, "container is alive\n"),
                "the log read as soon as the pod's status said Running and Ready"
            );
        },
    )
    .await;
}

/// The same log read by a Go client as the API server reads it for a websocket
/// (`integration/clients/go-log-reader`: Go's `net/http`, then `wsstream`'s copy loop, which
/// drops data read together with EOF): 20 reads, each must get the whole log. With the log
/// sent with a `Content-Length` every read came back empty, as the spec's did.
async fn logs_read_like_the_api_server(kind: RuntimeKind) {
    with_kubelet(
        "kubelet_conformance_logs_go_reader",
        kind,
        "kclogsgo",
        |_server, pods, k, created| async move {
            let name = unique_name("pod-logs-websocket");
            create_alive_pod(&pods, &k, &name, &created).await;
            let path = format!("/containerLogs/default/{name}/main");
            wait_for("the log written", &k.log, || async {
                let (code, body) = secure_get_status(k.secure_port, &path).await?;
                (code == 200 && body == "container is alive\n").then_some(())
            })
            .await;
            let dir = tempfile::tempdir().expect("tempdir");
            let reader = crate::grpc_clients::build_go_program("go-log-reader", dir.path());
            let url = format!("https://127.0.0.1:{}{path}", k.secure_port);
            let out = tokio::process::Command::new(&reader)
                .args([url.as_str(), "container is alive\n", "20"])
                .output()
                .await
                .expect("run go-log-reader");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.trim() == "OK 20",
                "the Go reader: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_logs_go_reader_containerd() {
    logs_read_like_the_api_server(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_logs_go_reader_dockershim() {
    logs_read_like_the_api_server(RuntimeKind::Dockershim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_logs_at_running_containerd() {
    logs_at_running(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_logs_at_running_dockershim() {
    logs_at_running(RuntimeKind::Dockershim).await;
}

/// The ephemeral containers spec: a debugger added to a running pod starts; exec into it
/// answers; its log, by its name, has its output.
async fn ephemeral_logs(kind: RuntimeKind) {
    with_kubelet(
        "kubelet_conformance_ephemeral_logs",
        kind,
        "kcleph",
        |_server, pods, k, created| async move {
            let name = unique_name("ephemeral-containers-target-pod");
            let p = pods
                .create(
                    &PostParams::default(),
                    &busybox_pod(&name, &k.node, &k.image, "exec /bin/sleep 10000"),
                )
                .await
                .expect("create pod");
            created.lock().extend(p.metadata.uid.clone());
            let status = || async { pods.get_opt(&name).await.ok().flatten().and_then(|p| p.status) };
            wait_for("the target pod Running and Ready", &k.log, || async {
                status().await.filter(running_and_ready).map(|_| ())
            })
            .await;
            // AddEphemeralContainerSync: a PATCH of the subresource, then wait until it runs.
            let patch = serde_json::json!({"spec": {"ephemeralContainers": [{
                "name": "debugger", "image": k.image, "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", "while true; do echo polo; sleep 2; done"],
                "stdin": true, "tty": true
            }]}});
            pods.patch_ephemeral_containers(
                &name,
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await
            .expect("add the ephemeral container");
            wait_for("the ephemeral container running in the status", &k.log, || async {
                let st = status().await?;
                running(
                    st.ephemeral_container_statuses
                        .iter()
                        .flatten()
                        .find(|c| c.name == "debugger"),
                )
                .then_some(())
            })
            .await;
            // ExecCommandInContainer(debugger, "/bin/echo", "marco").
            let port = relay(k.secure_port, connector(None)).await;
            let exec_url = format!(
                "http://127.0.0.1:{port}/exec/default/{name}/debugger?command=%2Fbin%2Fecho&command=marco&output=1&error=1"
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
            assert!(result.stdout_str().contains("marco"), "{result:?}");
            // GetPodLogs(debugger): one read, it must contain "polo".
            let (code, body) = container_logs(k.secure_port, &name, "debugger").await;
            assert_eq!(code, 200, "the ephemeral container's log: {body:?}");
            assert!(body.contains("polo"), "{body:?}");
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_ephemeral_logs_containerd() {
    ephemeral_logs(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_ephemeral_logs_dockershim() {
    ephemeral_logs(RuntimeKind::Dockershim).await;
}
