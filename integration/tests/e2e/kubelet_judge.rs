//! The kubelet BINARY judged by the real Kubernetes 1.26 control plane of
//! `KUBE_APISERVER_JUDGE` (skipped, saying so, when unset), on both runtimes (containerd's CRI
//! and the embedded dockershim on the test bed's Docker). Each test joins a fresh node with
//! [`JudgeNode::join`] (TLS bootstrap, serving CSR approved with kubectl) and talks to it only
//! through the real API server and its kubectl:
//! - streaming: `kubectl port-forward` to a busybox httpd in a pod, then an HTTP GET through
//!   the forwarded local port; `kubectl exec` (output and exit code) and `kubectl logs`;
//! - ephemeral containers: `kubectl debug --target` (a PATCH of the `ephemeralcontainers`
//!   subresource), the container running in `ephemeralContainerStatuses`, `kubectl attach -i`
//!   sending a line and reading the answer, and `kubectl exec` into it seeing the target's
//!   PID 1 (shared PID namespace);
//! - sidecars (KEP-753): the 1.26 API has no container `restartPolicy`, so the pod is a STATIC
//!   pod (our manifest decoder knows the field) observed through its MIRROR pod in the real
//!   API server: the sidecar starts before the app and keeps running, the pod turns Ready with
//!   the sidecar's readiness, and when the sidecar exits its restart count in the mirror pod's
//!   status grows while the app keeps running.

use crate::kubelet_support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
use kube::Api;
use kubelet_support::judge::{
    JudgeNode, admin_client, judge_or_skip, kubectl, kubectl_child, read_until,
};
use kubelet_support::{delete_pod_and_wait, http_get, wait_for};
use parking_lot::Mutex;
use tokio::io::AsyncWriteExt;

fn status_of<'a>(
    list: Option<&'a Vec<ContainerStatus>>,
    name: &str,
) -> Option<&'a ContainerStatus> {
    list.into_iter().flatten().find(|c| c.name == name)
}

fn running(c: Option<&ContainerStatus>) -> bool {
    c.and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

fn condition(st: &PodStatus, t: &str) -> Option<String> {
    st.conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == t)
        .map(|c| c.status.clone())
}

/// Creates `manifest` with `kubectl create -f` (the judge's own client).
async fn kubectl_create(judge: &Path, name: &str, manifest: &serde_json::Value) {
    let file = std::env::temp_dir().join(format!("{name}.json"));
    std::fs::write(&file, manifest.to_string()).expect("manifest");
    let out = kubectl(judge, &["create", "-f", &file.display().to_string()]).await;
    let _ = std::fs::remove_file(&file);
    out.expect("kubectl create");
}

/// Waits until pod `name` runs on `node` with every container running: its uid.
async fn wait_running(pods: &Api<Pod>, name: &str, node: &str, log: &Path) -> Pod {
    wait_for("the pod Running with its containers", log, || async {
        let p = pods.get_opt(name).await.ok()??;
        let on_node = p.spec.as_ref()?.node_name.as_deref() == Some(node);
        let st = p.status.as_ref()?;
        let all = st
            .container_statuses
            .as_ref()?
            .iter()
            .all(|c| running(Some(c)));
        (on_node && st.phase.as_deref() == Some("Running") && all).then_some(p)
    })
    .await
}

/// Runs `body` with a node of `kind` joined to the judge, then cleans up: the pod `name` (if
/// created) through the API, the node's runtime, the Node.
async fn with_node<F, Fut>(test: &str, kind: RuntimeKind, prefix: &str, extra: &[&str], body: F)
where
    F: FnOnce(Arc<JudgeNodeInfo>, Arc<Mutex<Vec<String>>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let test = format!("{test}[{}]", kind.name());
    let Some(judge) = judge_or_skip(&test) else {
        return;
    };
    let tb = require_testbed!(&test);
    let mut node = JudgeNode::join(kind, &tb, &judge, prefix, extra).await;
    let info = Arc::new(JudgeNodeInfo {
        judge: judge.clone(),
        node: node.kubelet.node.clone(),
        log: node.kubelet.log.clone(),
        root: node.kubelet.root.clone(),
        manifests: node.kubelet.manifests.clone(),
        image: tb.busybox_image.clone(),
    });
    let uids: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = info.log.clone();
    let outcome = tokio::spawn(body(info, uids.clone())).await;
    let refusals = api_refusals(&log);
    let uids = uids.lock().clone();
    node.shutdown(&tb, &uids).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
    assert!(
        refusals.is_empty(),
        "the API server refused the kubelet's writes:\n{}",
        refusals.join("\n")
    );
}

/// What a test body needs of its [`JudgeNode`].
struct JudgeNodeInfo {
    judge: std::path::PathBuf,
    node: String,
    log: std::path::PathBuf,
    root: std::path::PathBuf,
    manifests: std::path::PathBuf,
    image: String,
}

/// The kubelet's log lines saying the API server refused a pod status or a mirror pod.
fn api_refusals(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.contains("writing pod status failed") || l.contains("creating mirror pod failed")
        })
        .map(str::to_string)
        .collect()
}

const CONTENT: &str = "served-through-the-judge";

/// Port-forward, exec and logs through the real API server.
async fn streaming(kind: RuntimeKind) {
    with_node("kubelet_judge_streaming", kind, "jstream", &[], |n, uids| async move {
        let pods: Api<Pod> = Api::namespaced(admin_client(&n.judge).await, "default");
        let name = unique_name("jweb");
        let script = format!(
            "echo hello-judge; mkdir -p /www; echo {CONTENT} > /www/index.html; exec httpd -f -p 8080 -h /www"
        );
        let manifest = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": n.node, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "web", "image": n.image,
                                     "imagePullPolicy": "IfNotPresent",
                                     "command": ["sh", "-c", script],
                                     "ports": [{"containerPort": 8080}]}]}
        });
        kubectl_create(&n.judge, &name, &manifest).await;
        let p = wait_running(&pods, &name, &n.node, &n.log).await;
        uids.lock().extend(p.metadata.uid.clone());

        // kubectl port-forward: API server -> kubelet /portForward -> CRI PortForward.
        let mut pf = kubectl_child(&n.judge, &["port-forward", &format!("pod/{name}"), ":8080"]);
        let mut out = pf.stdout.take().expect("stdout");
        let banner = read_until(&mut out, "\n", Duration::from_secs(60)).await;
        // "Forwarding from 127.0.0.1:43567 -> 8080"
        let local: u16 = banner
            .split_once("127.0.0.1:")
            .and_then(|(_, r)| r.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("kubectl port-forward printed {banner:?}"));
        // Two connections through the one forward, each answered by httpd in the pod.
        for _ in 0..2 {
            let body = http_get(local, "/index.html").await;
            assert_eq!(body.as_deref().map(str::trim), Some(CONTENT), "GET through port-forward");
        }
        let _ = pf.kill().await;

        // kubectl exec: output and the exit code.
        let out = kubectl(&n.judge, &["exec", &name, "-c", "web", "--", "cat", "/www/index.html"])
            .await
            .expect("kubectl exec");
        assert_eq!(out.trim(), CONTENT);
        let err = kubectl(&n.judge, &["exec", &name, "--", "sh", "-c", "echo to-stderr >&2; exit 3"])
            .await
            .expect_err("exit 3 fails kubectl exec");
        assert!(err.contains("to-stderr"), "{err}");
        assert!(err.contains("command terminated with exit code 3"), "{err}");
        // kubectl exec -i: stdin through the API server.
        let mut cat = kubectl_child(&n.judge, &["exec", "-i", &name, "--", "cat"]);
        let mut stdin = cat.stdin.take().expect("stdin");
        stdin.write_all(b"through-stdin\n").await.expect("write");
        drop(stdin);
        let mut out = cat.stdout.take().expect("stdout");
        let echoed = read_until(&mut out, "through-stdin\n", Duration::from_secs(60)).await;
        assert_eq!(echoed, "through-stdin\n");
        let st = tokio::time::timeout(Duration::from_secs(60), cat.wait())
            .await
            .expect("kubectl exec -i ends with stdin")
            .expect("wait");
        assert!(st.success(), "{st:?}");

        // kubectl logs.
        let logs = kubectl(&n.judge, &["logs", &name]).await.expect("kubectl logs");
        assert_eq!(logs.trim(), "hello-judge");
        delete_pod_and_wait(&pods, &name, &n.log).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn judge_streaming_containerd() {
    streaming(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn judge_streaming_dockershim() {
    streaming(RuntimeKind::Dockershim).await;
}

/// An ephemeral container added with `kubectl debug --target`, attached to with
/// `kubectl attach -i`, in its target's PID namespace.
async fn ephemeral(kind: RuntimeKind) {
    with_node("kubelet_judge_ephemeral", kind, "jephem", &[], |n, uids| async move {
        let pods: Api<Pod> = Api::namespaced(admin_client(&n.judge).await, "default");
        let name = unique_name("jdebug");
        let manifest = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": n.node, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": n.image,
                                     "imagePullPolicy": "IfNotPresent",
                                     "command": ["sh", "-c", "echo main-start; exec sleep 3601"]}]}
        });
        kubectl_create(&n.judge, &name, &manifest).await;
        let p = wait_running(&pods, &name, &n.node, &n.log).await;
        uids.lock().extend(p.metadata.uid.clone());
        let main_id = status_of(p.status.as_ref().and_then(|s| s.container_statuses.as_ref()), "main")
            .and_then(|c| c.container_id.clone())
            .expect("main's id");

        // kubectl debug: a PATCH of pods/<name>/ephemeralcontainers.
        kubectl(
            &n.judge,
            &[
                "debug", &name, "-c", "debugger", "--image", &n.image,
                "--image-pull-policy", "IfNotPresent", "--target", "main", "-i",
                "--attach=false", "--", "sh", "-c", "while read l; do echo got:$l; done",
            ],
        )
        .await
        .expect("kubectl debug");
        let p = pods.get(&name).await.expect("pod");
        let ec = p
            .spec
            .as_ref()
            .and_then(|s| s.ephemeral_containers.as_ref())
            .and_then(|e| e.first())
            .expect("the ephemeral container in the spec");
        assert_eq!(ec.name, "debugger");
        assert_eq!(ec.target_container_name.as_deref(), Some("main"));
        assert_eq!(ec.stdin, Some(true));
        let st = wait_for("the ephemeral container running in the status", &n.log, || async {
            let st = pods.get_opt(&name).await.ok()??.status?;
            running(status_of(st.ephemeral_container_statuses.as_ref(), "debugger")).then_some(st)
        })
        .await;
        let e = status_of(st.ephemeral_container_statuses.as_ref(), "debugger").expect("status");
        assert!(e.container_id.as_deref().is_some_and(|i| !i.is_empty()), "{e:?}");
        assert!(e.image_id.len() > "sha256:".len(), "{e:?}");

        // kubectl attach -i: a line in, the answer out, both through the API server.
        let mut at = kubectl_child(&n.judge, &["attach", "-i", &name, "-c", "debugger"]);
        let mut stdin = at.stdin.take().expect("stdin");
        let mut out = at.stdout.take().expect("stdout");
        // attach may connect after the first write: repeat until the answer comes.
        let mut seen = String::new();
        for i in 0..20 {
            stdin
                .write_all(format!("hello{i}\n").as_bytes())
                .await
                .expect("write to kubectl attach");
            seen.push_str(&read_until(&mut out, "got:hello", Duration::from_secs(3)).await);
            if seen.contains("got:hello") {
                break;
            }
        }
        assert!(seen.contains("got:hello"), "attach output: {seen:?}");
        let _ = at.kill().await;

        // Shared PID namespace: PID 1 seen from the debugger is main's sleep.
        let cmdline = kubectl(&n.judge, &["exec", &name, "-c", "debugger", "--", "cat", "/proc/1/cmdline"])
            .await
            .expect("kubectl exec into the ephemeral container");
        assert_eq!(cmdline.replace('\0', " ").trim(), "sleep 3601", "{cmdline:?}");
        // main untouched.
        let st = pods.get(&name).await.expect("pod").status.expect("status");
        let main = status_of(st.container_statuses.as_ref(), "main").expect("main");
        assert!(running(Some(main)));
        assert_eq!(main.container_id.as_deref(), Some(main_id.as_str()));
        assert_eq!(main.restart_count, 0);
        delete_pod_and_wait(&pods, &name, &n.log).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn judge_ephemeral_containerd() {
    ephemeral(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn judge_ephemeral_dockershim() {
    ephemeral(RuntimeKind::Dockershim).await;
}

/// A static pod with a sidecar, observed through its mirror pod in the real API server.
async fn sidecar_static_pod(kind: RuntimeKind) {
    with_node(
        "kubelet_judge_sidecar",
        kind,
        "jside",
        &["--sync-frequency", "2s", "--node-status-update-frequency", "2s"],
        |n, uids| async move {
            let pods: Api<Pod> = Api::namespaced(admin_client(&n.judge).await, "default");
            let uid = format!("{}-uid", n.node);
            uids.lock().push(uid.clone());
            // `sh` as PID 1 ignores SIGTERM unless it traps it.
            let sidecar = "trap 'echo sidecar-term >> /shared/order; exit 0' TERM; \
                           echo sidecar >> /shared/order; \
                           while [ ! -f /shared/kill-sidecar ]; do sleep 0.2; done; \
                           rm -f /shared/kill-sidecar; exit 1";
            let main = "trap 'exit 0' TERM; echo main >> /shared/order; \
                        while [ ! -f /shared/done ]; do sleep 0.2; done; \
                        echo main-exit >> /shared/order";
            let manifest = format!(
                r#"apiVersion: v1
kind: Pod
metadata:
  name: jsidecar
  namespace: default
  uid: {uid}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
  volumes:
  - name: shared
    emptyDir: {{}}
  initContainers:
  - name: sidecar
    image: {image}
    imagePullPolicy: IfNotPresent
    restartPolicy: Always
    command: ["sh", "-c", {sidecar}]
    volumeMounts: [{{name: shared, mountPath: /shared}}]
    readinessProbe:
      exec: {{command: ["cat", "/shared/sidecar-ready"]}}
      periodSeconds: 1
      failureThreshold: 1
  containers:
  - name: main
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", {main}]
    volumeMounts: [{{name: shared, mountPath: /shared}}]
"#,
                image = n.image,
                sidecar = serde_json::to_string(sidecar).expect("json"),
                main = serde_json::to_string(main).expect("json"),
            );
            std::fs::write(n.manifests.join("jsidecar.yaml"), manifest).expect("manifest");
            let name = format!("jsidecar-{}", n.node);
            let shared = n.root.join(format!("pods/{uid}/volumes/kubernetes.io~empty-dir/shared"));
            let order = || {
                std::fs::read_to_string(shared.join("order"))
                    .unwrap_or_default()
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            };
            let status = || async { pods.get_opt(&name).await.ok().flatten() };

            // 1. The mirror pod: main running, the sidecar running and started, not Ready.
            let p = wait_for("the mirror pod with main running, not Ready", &n.log, || async {
                let p = status().await?;
                let st = p.status.as_ref()?;
                let ok = st.phase.as_deref() == Some("Running")
                    && running(status_of(st.container_statuses.as_ref(), "main"))
                    && condition(st, "Initialized").as_deref() == Some("True")
                    && condition(st, "Ready").as_deref() == Some("False");
                ok.then_some(p)
            })
            .await;
            let ann = p.metadata.annotations.clone().unwrap_or_default();
            assert!(ann.contains_key("kubernetes.io/config.mirror"), "{ann:?}");
            let owner = p.metadata.owner_references.clone().unwrap_or_default();
            assert_eq!(
                owner.iter().map(|o| (o.kind.as_str(), o.name.as_str())).collect::<Vec<_>>(),
                vec![("Node", n.node.as_str())]
            );
            let st = p.status.clone().expect("status");
            let side = status_of(st.init_container_statuses.as_ref(), "sidecar").expect("sidecar status");
            assert!(running(Some(side)), "{side:?}");
            assert_eq!(side.started, Some(true), "{side:?}");
            assert!(!side.ready, "{side:?}");
            let lines = wait_for("main's line", &n.log, || async {
                let l = order();
                (l.len() >= 2).then_some(l)
            })
            .await;
            assert_eq!(lines[..2], ["sidecar", "main"], "the sidecar starts first: {lines:?}");
            // What the 1.26 API server kept of the spec (it has no container restartPolicy).
            let raw = kubectl(&n.judge, &["get", "pod", &name, "-o", "json"]).await.expect("get");
            let raw: serde_json::Value = serde_json::from_str(&raw).expect("json");
            let sidecar_warning = std::fs::read_to_string(&n.log)
                .unwrap_or_default()
                .lines()
                .find(|l| l.contains("does not know sidecar containers"))
                .map(str::to_string);
            println!(
                "JUDGE FIGURES: mirror pod {name}: initContainers[0] as stored by the API server: restartPolicy {}, readinessProbe {}; kubelet: {sidecar_warning:?}",
                raw["spec"]["initContainers"][0]["restartPolicy"],
                raw["spec"]["initContainers"][0]["readinessProbe"]
            );

            // 2. The sidecar's readiness makes the pod Ready.
            std::fs::write(shared.join("sidecar-ready"), "ok").expect("ready file");
            let p = wait_for("the mirror pod Ready with its sidecar", &n.log, || async {
                let p = status().await?;
                let st = p.status.as_ref()?;
                let ok = condition(st, "Ready").as_deref() == Some("True")
                    && status_of(st.init_container_statuses.as_ref(), "sidecar").is_some_and(|s| s.ready);
                ok.then_some(p)
            })
            .await;
            let st = p.status.expect("status");
            let main_id = status_of(st.container_statuses.as_ref(), "main")
                .and_then(|c| c.container_id.clone())
                .expect("main id");

            // 3. The sidecar exits: its restart count grows in the mirror pod, main runs on.
            std::fs::write(shared.join("kill-sidecar"), "").expect("kill file");
            let st = wait_for("the sidecar restarted in the mirror pod", &n.log, || async {
                let st = status().await?.status?;
                let s = status_of(st.init_container_statuses.as_ref(), "sidecar")?;
                (s.restart_count >= 1 && running(Some(s))).then_some(st)
            })
            .await;
            let main = status_of(st.container_statuses.as_ref(), "main").expect("main");
            assert!(running(Some(main)), "{main:?}");
            assert_eq!(main.container_id.as_deref(), Some(main_id.as_str()));
            assert_eq!(main.restart_count, 0);
            let last = status_of(st.init_container_statuses.as_ref(), "sidecar")
                .and_then(|s| s.last_state.as_ref())
                .and_then(|l| l.terminated.as_ref())
                .map(|t| t.exit_code);
            assert_eq!(last, Some(1), "the sidecar's exit is its last state");
            assert_eq!(st.phase.as_deref(), Some("Running"));
            wait_for("the restarted sidecar's line", &n.log, || async {
                (order().iter().filter(|l| *l == "sidecar").count() == 2).then_some(())
            })
            .await;

            // 4. main completes (`restartPolicy: Never`): the sidecar is stopped after it, and
            // the mirror pod is Succeeded.
            std::fs::write(shared.join("done"), "").expect("done file");
            let st = wait_for("the mirror pod Succeeded", &n.log, || async {
                let st = status().await?.status?;
                (st.phase.as_deref() == Some("Succeeded")).then_some(st)
            })
            .await;
            let lines = order();
            let at = |w: &str| lines.iter().position(|l| l == w);
            assert!(at("main-exit").is_some() && at("sidecar-term").is_some(), "{lines:?}");
            assert!(at("main-exit") < at("sidecar-term"), "{lines:?}");
            let side = status_of(st.init_container_statuses.as_ref(), "sidecar").expect("sidecar");
            assert!(!running(Some(side)), "{side:?}");

            // 5. The manifest goes: the mirror pod goes.
            std::fs::remove_file(n.manifests.join("jsidecar.yaml")).expect("remove manifest");
            wait_for("the mirror pod deleted", &n.log, || async {
                matches!(pods.get_opt(&name).await, Ok(None)).then_some(())
            })
            .await;
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn judge_sidecar_static_pod_containerd() {
    sidecar_static_pod(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn judge_sidecar_static_pod_dockershim() {
    sidecar_static_pod(RuntimeKind::Dockershim).await;
}
