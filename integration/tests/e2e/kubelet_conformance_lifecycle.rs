//! End to end: Kubernetes 1.26 `[Conformance]` specs about the pod lifecycle, run against the
//! `kubelet` BINARY in API-server mode (the API server fixture) on both runtimes (containerd's
//! CRI and the embedded dockershim), with the checks of the upstream e2e specs applied to every
//! pod status the watch delivers:
//! - `InitContainer should not start app containers if init containers fail on a RestartAlways
//!   pod`: init1 (`/bin/false`) restarts with back-off (Waiting `CrashLoopBackOff` between
//!   attempts, its failure as lastState) until its restart count reaches 3, while init2 and the
//!   app container stay Waiting `PodInitializing` and the pod stays Pending;
//! - `InitContainer should not start app containers and fail the pod if init containers fail on
//!   a RestartNever pod`: init1 succeeds, init2 fails, the app container never leaves Waiting
//!   `PodInitializing` and the pod ends Failed;
//! - `PreStop should call prestop when killing a pod`: a tester pod deleted through the API runs
//!   its preStop exec hook, which POSTs to a server pod over the pod network, before its
//!   container is stopped.

use crate::kubelet_support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use integration::apiserver::ApiServer;
use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use integration::testbed::Testbed;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams, WatchEvent, WatchParams};
use kubelet_support::*;
use parking_lot::Mutex;

/// A kubelet in API-server mode on `kind`, registered with a fresh fixture.
struct Bed {
    server: Arc<ApiServer>,
    k: Kubelet,
    pods: Api<Pod>,
}

async fn bed(kind: RuntimeKind, tb: &Testbed, prefix: &str) -> Bed {
    let flags = [
        "--node-status-update-frequency",
        "1s",
        "--sync-frequency",
        "5s",
    ]
    .map(String::from);
    let (server, k, client) = api_mode_kubelet(tb, kind, prefix, &flags).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    Bed { server, k, pods }
}

fn state_json(s: &ContainerStatus) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

fn waiting_reason(s: &ContainerStatus) -> Option<&str> {
    s.state.as_ref()?.waiting.as_ref()?.reason.as_deref()
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// Watches pod `name` from `rv` and applies `check` to every version the watch delivers (as
/// upstream's `watchtools.Until`): an error fails the test with the offending pod, `Ok(true)`
/// ends the watch with that pod. Re-watches from the last version seen when the stream ends.
async fn watch_until<F>(
    pods: &Api<Pod>,
    name: &str,
    rv: String,
    log: &Path,
    deadline: Duration,
    mut check: F,
) -> Pod
where
    F: FnMut(&Pod) -> Result<bool, String>,
{
    let end = tokio::time::Instant::now() + deadline;
    let mut rv = rv;
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    loop {
        let left = end.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            panic!(
                "timed out watching pod {name}; kubelet log tail:\n{}",
                log_tail(log, 80)
            );
        }
        let mut stream = match pods.watch(&params, &rv).await {
            Ok(s) => s.boxed(),
            Err(e) => {
                tracing::warn!(error = %e, "watch failed, retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        loop {
            let next = match tokio::time::timeout(left, stream.try_next()).await {
                Ok(Ok(Some(e))) => e,
                Ok(Ok(None)) | Ok(Err(_)) | Err(_) => break,
            };
            let pod = match next {
                WatchEvent::Added(p) | WatchEvent::Modified(p) => p,
                WatchEvent::Deleted(p) => panic!("pod {name} deleted while watched: {p:?}"),
                WatchEvent::Bookmark(b) => {
                    rv = b.metadata.resource_version;
                    continue;
                }
                WatchEvent::Error(e) => panic!("watch error for {name}: {e:?}"),
            };
            if let Some(v) = pod.metadata.resource_version.clone() {
                rv = v;
            }
            match check(&pod) {
                Ok(true) => return pod,
                Ok(false) => {}
                Err(why) => panic!(
                    "pod {name}: {why}\nstatus: {}\nkubelet log tail:\n{}",
                    serde_json::to_string(&pod.status).unwrap_or_default(),
                    log_tail(log, 80)
                ),
            }
        }
    }
}

/// The upstream specs' check on every event: no app container out of Waiting
/// `PodInitializing` while an init container has not succeeded.
fn apps_waiting_pod_initializing(p: &Pod) -> Result<(), String> {
    for s in p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
    {
        match waiting_reason(s) {
            Some("PodInitializing") => {}
            _ => {
                return Err(format!(
                    "container {:?} should be Waiting PodInitializing: {}",
                    s.name,
                    state_json(s)
                ));
            }
        }
    }
    Ok(())
}

fn init_statuses(p: &Pod) -> &[ContainerStatus] {
    p.status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_deref())
        .unwrap_or(&[])
}

fn init_pod(name: &str, node: &str, policy: &str, init: [&str; 2], app: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node, "restartPolicy": policy, "terminationGracePeriodSeconds": 1,
            "initContainers": [
                {"name": "init1", "image": init[0], "imagePullPolicy": "IfNotPresent",
                 "command": [init[1]]},
                {"name": "init2", "image": init[0], "imagePullPolicy": "IfNotPresent",
                 "command": [if init[1] == "/bin/true" { "/bin/false" } else { "/bin/true" }]}
            ],
            "containers": [app]
        }
    }))
    .expect("pod")
}

/// Upstream's RestartAlways spec: until init1 shows a previous termination, every event has
/// the app containers and init2 Waiting `PodInitializing` and init1 never terminated with
/// exit code 0; then until init1's restart count reaches 3. The invariants are applied to
/// every event here, also after the first restart (the Go kubelet keeps them throughout).
fn restart_always_check(p: &Pod) -> Result<bool, String> {
    apps_waiting_pod_initializing(p)?;
    if phase(p) != "Pending" {
        return Err(format!("phase {:?}, want Pending", phase(p)));
    }
    let init = init_statuses(p);
    if init.len() != 2 {
        return Ok(false);
    }
    if waiting_reason(&init[1]) != Some("PodInitializing") {
        return Err(format!(
            "second init container should be Waiting PodInitializing: {}",
            state_json(&init[1])
        ));
    }
    let first = &init[0];
    if first
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .is_some_and(|t| t.exit_code == 0)
    {
        return Err(format!(
            "first init container should have exitCode != 0: {}",
            state_json(first)
        ));
    }
    let restarted = first
        .last_state
        .as_ref()
        .is_some_and(|l| l.terminated.is_some());
    Ok(restarted && first.restart_count >= 3)
}

/// Upstream's RestartNever spec, first condition: app containers Waiting `PodInitializing`;
/// init1 Waiting `PodInitializing` until it terminated, then with exit code 0; done once init2
/// terminated, with a non-zero exit code.
fn restart_never_check(p: &Pod) -> Result<bool, String> {
    apps_waiting_pod_initializing(p)?;
    let init = init_statuses(p);
    if init.len() != 2 {
        return Ok(false);
    }
    let first = &init[0];
    let Some(t) = first.state.as_ref().and_then(|s| s.terminated.as_ref()) else {
        if let Some(r) = first.state.as_ref().and_then(|s| s.waiting.as_ref())
            && r.reason.as_deref() != Some("PodInitializing")
        {
            return Err(format!(
                "first init container should be Waiting PodInitializing: {}",
                state_json(first)
            ));
        }
        return Ok(false);
    };
    if t.exit_code != 0 {
        return Err(format!(
            "first init container should have exitCode 0: {}",
            state_json(first)
        ));
    }
    let second = &init[1];
    let Some(t) = second.state.as_ref().and_then(|s| s.terminated.as_ref()) else {
        return Ok(false);
    };
    if t.exit_code == 0 {
        return Err(format!(
            "second init container should have failed: {}",
            state_json(second)
        ));
    }
    Ok(true)
}

async fn init_containers_fail(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_conformance_init[{}]", kind.name()));
    let Bed {
        server,
        mut k,
        pods,
    } = bed(kind, &tb, "klinit").await;
    let (always, never) = (unique_name("init-always"), unique_name("init-never"));
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let outcome = tokio::spawn({
        let (log, node, image, pause) = (
            k.log.clone(),
            k.node.clone(),
            tb.busybox_image.clone(),
            tb.pause_image.clone(),
        );
        let (pods, always, never, created) =
            (pods.clone(), always.clone(), never.clone(), created.clone());
        async move {
            let a = init_pod(
                &always,
                &node,
                "Always",
                [&image, "/bin/false"],
                serde_json::json!({"name": "run1", "image": pause,
                    "imagePullPolicy": "IfNotPresent",
                    "resources": {"limits": {"cpu": "100m"}}}),
            );
            let n = init_pod(
                &never,
                &node,
                "Never",
                [&image, "/bin/true"],
                serde_json::json!({"name": "run1", "image": image,
                    "imagePullPolicy": "IfNotPresent", "command": ["/bin/true"],
                    "resources": {"limits": {"cpu": "100m"}}}),
            );
            let a = pods
                .create(&PostParams::default(), &a)
                .await
                .expect("create");
            let n = pods
                .create(&PostParams::default(), &n)
                .await
                .expect("create");
            for p in [&a, &n] {
                created
                    .lock()
                    .push(p.metadata.uid.clone().unwrap_or_default());
            }
            let rv = |p: &Pod| p.metadata.resource_version.clone().unwrap_or_default();
            // Both watched at once: the RestartAlways pod's back-off (10 s, 20 s, 40 s) is
            // the long part.
            let never_watch = {
                let (pods, never, log, rv) = (pods.clone(), never.clone(), log.clone(), rv(&n));
                tokio::spawn(async move {
                    let mut first_done = false;
                    watch_until(&pods, &never, rv, &log, DEADLINE, |p| {
                        if !first_done {
                            first_done = restart_never_check(p)?;
                        } else {
                            // Upstream's second condition: on to a completed pod; the app
                            // container still never left Waiting PodInitializing.
                            apps_waiting_pod_initializing(p)?;
                        }
                        Ok(first_done && matches!(phase(p), "Failed" | "Succeeded"))
                    })
                    .await
                })
            };
            // Between restarts init1 waits in CrashLoopBackOff with its failure as lastState
            // (upstream backs off init containers like any other).
            let mut backed_off = false;
            let end = watch_until(
                &pods,
                &always,
                rv(&a),
                &log,
                Duration::from_secs(300),
                |p| {
                    let done = restart_always_check(p)?;
                    if let Some(first) = init_statuses(p).first()
                        && waiting_reason(first) == Some("CrashLoopBackOff")
                    {
                        let last = first
                            .last_state
                            .as_ref()
                            .and_then(|l| l.terminated.as_ref());
                        if last.is_none_or(|t| t.exit_code == 0) {
                            return Err(format!(
                                "init1 in back-off without its failure as lastState: {}",
                                state_json(first)
                            ));
                        }
                        backed_off = true;
                    }
                    Ok(done)
                },
            )
            .await;
            assert!(
                backed_off,
                "init1 was restarted three times without ever waiting in CrashLoopBackOff"
            );
            assert_eq!(phase(&end), "Pending");
            assert_eq!(init_statuses(&end).len(), 2);

            let end = match never_watch.await {
                Ok(p) => p,
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            };
            assert_eq!(phase(&end), "Failed");
            assert_eq!(init_statuses(&end).len(), 2);
            let app = end
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.first())
                .expect("app container status");
            assert!(
                app.state.as_ref().is_some_and(|s| s.waiting.is_some()),
                "the app container of a pod whose init failed is still Waiting: {}",
                state_json(app)
            );
        }
    })
    .await;
    let uids = created.lock().clone();
    k.finish(&tb, &pods, [&always, &never], &uids, outcome)
        .await;
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_init_containers_fail_containerd() {
    init_containers_fail(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_init_containers_fail_dockershim() {
    init_containers_fail(RuntimeKind::Dockershim).await;
}

/// The server: busybox `httpd` with a CGI `/cgi-bin/write` that appends each POST body to
/// `/tmp/posted` (upstream's agnhost `nettest` `/write`).
const SERVER_SCRIPT: &str = "mkdir -p /www/cgi-bin && \
     printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\nhead -c $CONTENT_LENGTH >> /tmp/posted\\necho >> /tmp/posted\\necho ok\\n' > /www/cgi-bin/write && \
     chmod +x /www/cgi-bin/write && exec httpd -f -p 8080 -h /www";

async fn prestop(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_conformance_prestop[{}]", kind.name()));
    let Bed {
        server,
        mut k,
        pods,
    } = bed(kind, &tb, "klprestop").await;
    let (srv, tester) = (unique_name("prestop-server"), unique_name("prestop-tester"));
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let outcome = tokio::spawn({
        let (log, node, image, endpoint) = (
            k.log.clone(),
            k.node.clone(),
            tb.busybox_image.clone(),
            k.endpoint(&tb),
        );
        let (pods, srv, tester, created) =
            (pods.clone(), srv.clone(), tester.clone(), created.clone());
        async move {
            let s: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": srv, "namespace": "default"},
                "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "server", "image": image,
                                         "imagePullPolicy": "IfNotPresent",
                                         "ports": [{"containerPort": 8080}],
                                         "command": ["sh", "-c", SERVER_SCRIPT]}]}
            }))
            .expect("server pod");
            let s = pods
                .create(&PostParams::default(), &s)
                .await
                .expect("create");
            let server_uid = s.metadata.uid.clone().unwrap_or_default();
            created.lock().push(server_uid.clone());
            let ip = wait_for("the server pod Running with an IP", &log, || async {
                let p = pods.get_opt(&srv).await.ok()??;
                let st = p.status.as_ref()?;
                (st.phase.as_deref() == Some("Running"))
                    .then(|| st.pod_ip.clone())
                    .flatten()
            })
            .await;
            let val = "{\"Source\": \"prestop\"}";
            // As upstream: `sleep` as PID 1 ignores SIGTERM, so the container lives until the
            // grace period ends; the deletion takes the pod's (default 30 s) grace period.
            let t: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": tester, "namespace": "default"},
                "spec": {"nodeName": node,
                         "containers": [{"name": "tester", "image": image,
                                         "imagePullPolicy": "IfNotPresent",
                                         "command": ["sleep", "600"],
                                         "lifecycle": {"preStop": {"exec": {"command": [
                                             "wget", "-O-", format!("--post-data={val}"),
                                             format!("http://{ip}:8080/cgi-bin/write")]}}}}]}
            }))
            .expect("tester pod");
            let t = pods
                .create(&PostParams::default(), &t)
                .await
                .expect("create");
            created
                .lock()
                .push(t.metadata.uid.clone().unwrap_or_default());
            wait_for("the tester pod Running", &log, || async {
                let p = pods.get_opt(&tester).await.ok()??;
                (phase(&p) == "Running").then_some(())
            })
            .await;
            let before = exec_in_pod(&endpoint, &server_uid, &["cat", "/tmp/posted"]).await;
            assert!(
                before.as_ref().is_none_or(|(code, _, _)| *code != 0),
                "nothing was posted before the deletion: {before:?}"
            );
            pods.delete(&tester, &DeleteParams::default())
                .await
                .expect("delete tester");
            let posted = wait_for("the server to receive the preStop POST", &log, || async {
                let (code, out, _) =
                    exec_in_pod(&endpoint, &server_uid, &["cat", "/tmp/posted"]).await?;
                (code == 0 && !out.is_empty()).then_some(out)
            })
            .await;
            assert_eq!(posted.trim(), val, "the hook's POST body");
            // The pod goes away once its container is stopped.
            wait_for("the tester pod removed", &log, || async {
                matches!(pods.get_opt(&tester).await, Ok(None)).then_some(())
            })
            .await;
        }
    })
    .await;
    let uids = created.lock().clone();
    k.finish(&tb, &pods, [&srv, &tester], &uids, outcome).await;
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_prestop_containerd() {
    prestop(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_prestop_dockershim() {
    prestop(RuntimeKind::Dockershim).await;
}
