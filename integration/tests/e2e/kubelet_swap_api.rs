//! Live kubelet swaps with API pods (issue 35, point 2): the Go kubelet 1.26 (`KUBELET_JUDGE`)
//! joins the real Kubernetes 1.26 control plane of `KUBE_APISERVER_JUDGE` as a node (TLS
//! bootstrap with the judge's bootstrap token) and runs API pods created with the judge's
//! kubectl, pinned to the node by `nodeName`: one with an init container, two containers,
//! readiness and liveness probes, an emptyDir, a configMap and a secret volume; one with ports,
//! limits and a security context; one that is deleted later. It is stopped and this kubelet is
//! started on the same root directory, runtime, node name, node IP and credentials (the
//! kubeconfig and client certificate the Go kubelet's bootstrap wrote). Nothing may be
//! recreated or restarted: every sandbox and container id stays, no new one appears, no restart
//! count rises, and the API server (watched over each swap) keeps every pod Running, Ready
//! again once settled with the same container ids; only a pod with a readiness or startup
//! probe may be reported not Ready for a moment, which the Go kubelet 1.26 itself does after
//! any restart (a fourth pod carries the container fields a manifest rarely has). This kubelet then manages the adopted pods (a deleted API pod's containers, sandbox, CNI
//! address and, on dockershim, checkpoint go, and the Pod object is finalized), new API pods
//! start, and the labels and annotations it writes on the runtime for them agree with what the
//! Go kubelet wrote for the same specs (`io.kubernetes.pod.*`, `io.kubernetes.container.*`,
//! ports, preStop, terminationMessagePath, restart count, sandbox and container attempts); the
//! Go kubelet then takes everything back the same way, this kubelet's new pods included.
//!
//! - `kubelet_swap_api_pods_with_go_kubelet_containerd`: on the test bed's containerd.
//! - `kubelet_swap_api_pods_with_go_kubelet_dockershim`: on this project's standalone
//!   `dockershim` (one socket for both kubelets).
//!
//! Both judges are required; the tests print a loud `SKIPPED` line without them. The node,
//! pods, watch and checks here also serve kubelet_swap_api_self.rs, which swaps this kubelet
//! for itself against this project's API server fixture (no judge), with a container image
//! edit as well. Start a
//! control plane with `--kubelet-preferred-address-types=InternalIP` (see judge.rs); the node
//! IP is this machine's default-route address because the Go kubelet refuses a loopback one.

use crate::kubelet_faults::ip_reserved_for;
use crate::kubelet_support;
use crate::kubelet_swap::{
    Place, Snapshot, figure, go_kubelet_with, remove_place, settle, skip_for_foreign_pod_logs,
    snapshot, stop,
};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use futures::FutureExt;
use integration::apiserver::ApiServer;
use integration::require_testbed;
use integration::runtimes::{RuntimeKind, ShimProcess};
use integration::testbed::Testbed;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams, WatchParams,
};
use kubelet_support::*;
use tokio::process::Child;

pub(crate) const CONFIG: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  namespace: @NS@
data:
  mode: "a&b<c>"
  app.conf: |
    listen 8080
---
apiVersion: v1
kind: Secret
metadata:
  name: web-secret
  namespace: @NS@
stringData:
  token: s3cr3t
"#;

pub(crate) const WEB: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: @NAME@
  namespace: @NS@
  labels:
    app: web
  annotations:
    example.com/note: "<kept>"
spec:
  nodeName: @NODE@
  terminationGracePeriodSeconds: 1
  initContainers:
  - name: init
    image: @IMAGE@
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo '<ok>' > /work/index.html && test 1 -lt 2"]
    volumeMounts:
    - name: work
      mountPath: /work
  containers:
  - name: server
    image: @IMAGE@
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "exec sleep 3600"]
    ports:
    - containerPort: 8080
      name: http
    env:
    - name: MODE
      valueFrom:
        configMapKeyRef:
          name: web-config
          key: mode
    - name: NODE
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    resources:
      limits:
        cpu: "0.5"
        memory: 64Mi
      requests:
        cpu: 100m
        memory: 32Mi
    readinessProbe:
      exec:
        command: ["test", "-f", "/work/index.html"]
      periodSeconds: 2
    livenessProbe:
      exec:
        command: ["test", "-f", "/etc/web/app.conf"]
      periodSeconds: 5
      failureThreshold: 3
    lifecycle:
      preStop:
        exec:
          command: ["sh", "-c", "true"]
    volumeMounts:
    - name: work
      mountPath: /work
      readOnly: true
    - name: cfg
      mountPath: /etc/web
    - name: sec
      mountPath: /etc/secret
      readOnly: true
  - name: side
    image: @IMAGE@
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "exec sleep 3600"]
    resources:
      requests:
        memory: "1e6"
        cpu: "0.0005"
  volumes:
  - name: work
    emptyDir:
      sizeLimit: 16Mi
  - name: cfg
    configMap:
      name: web-config
  - name: sec
    secret:
      secretName: web-secret
      defaultMode: 0400
"#;

pub(crate) const DB: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: db
  namespace: @NS@
spec:
  nodeName: @NODE@
  terminationGracePeriodSeconds: 1
  containers:
  - name: db
    image: @IMAGE@
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "exec sleep 3600"]
    ports:
    - containerPort: 5432
      protocol: TCP
    - containerPort: 5433
      protocol: UDP
      name: udp
    resources:
      limits:
        cpu: "1"
        memory: 1Gi
    securityContext:
      allowPrivilegeEscalation: false
"#;

/// A pod with the container fields a manifest rarely has (they all go into the container
/// hash): envFrom, resourceFieldRef and secretKeyRef env, a security context with
/// capabilities, a read-only root and a user, stdin and tty, a startup probe, a postStart hook,
/// a termination message policy and path, ephemeral-storage resources, args and a downward API
/// volume; pod-level fsGroup, host aliases and DNS config.
const RICH: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: rich
  namespace: @NS@
spec:
  nodeName: @NODE@
  terminationGracePeriodSeconds: 2
  securityContext:
    fsGroup: 2000
    supplementalGroups: [3000]
  hostAliases:
  - ip: 10.1.2.3
    hostnames: [db.example]
  dnsPolicy: None
  dnsConfig:
    nameservers: [10.0.0.10]
    searches: [example.svc]
    options:
    - name: ndots
      value: "2"
  containers:
  - name: rich
    image: @IMAGE@
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c"]
    args: ["echo started; exec sleep 3600"]
    stdin: true
    tty: true
    terminationMessagePath: /tmp/message
    terminationMessagePolicy: FallbackToLogsOnError
    envFrom:
    - configMapRef:
        name: web-config
      prefix: CFG_
    - secretRef:
        name: web-secret
    env:
    - name: MEM
      valueFrom:
        resourceFieldRef:
          resource: limits.memory
          divisor: 1Mi
    - name: TOKEN
      valueFrom:
        secretKeyRef:
          name: web-secret
          key: token
    resources:
      requests:
        ephemeral-storage: 10Mi
        memory: 16Mi
      limits:
        ephemeral-storage: 100Mi
        memory: 48Mi
    securityContext:
      runAsUser: 1000
      runAsGroup: 1000
      readOnlyRootFilesystem: true
      capabilities:
        add: ["NET_BIND_SERVICE"]
        drop: ["MKNOD"]
    startupProbe:
      exec:
        command: ["true"]
      periodSeconds: 1
      failureThreshold: 30
    lifecycle:
      postStart:
        exec:
          command: ["sh", "-c", "true"]
    volumeMounts:
    - name: info
      mountPath: /etc/info
  volumes:
  - name: info
    downwardAPI:
      items:
      - path: labels
        fieldRef:
          fieldPath: metadata.labels
"#;

/// A plain pod: `tools` is deleted under the adopting kubelet, `fresh` is created after that.
pub(crate) const PLAIN: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: @NAME@
  namespace: @NS@
spec:
  nodeName: @NODE@
  terminationGracePeriodSeconds: 1
  containers:
  - name: @NAME@
    image: @IMAGE@
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo \"<b>&amp;</b>\"; exec sleep 3600"]
    workingDir: /tmp
"#;

/// What the API server reports for a Running and Ready pod: its UID and, per container (init
/// containers too), its name, container id and restart count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiState {
    pub(crate) uid: String,
    pub(crate) containers: Vec<(String, String, i64)>,
}

/// The pod's API state when it is Running, Ready and every container is ready.
pub(crate) fn api_ready(pod: &serde_json::Value) -> Option<ApiState> {
    let st = &pod["status"];
    if st["phase"] != "Running" {
        return None;
    }
    let ready = st["conditions"]
        .as_array()?
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    if !ready {
        return None;
    }
    let mut containers = Vec::new();
    for key in ["initContainerStatuses", "containerStatuses"] {
        for c in st[key].as_array().into_iter().flatten() {
            if key == "containerStatuses" && c["ready"] != true {
                return None;
            }
            containers.push((
                c["name"].as_str()?.to_string(),
                c["containerID"].as_str()?.to_string(),
                c["restartCount"].as_i64()?,
            ));
        }
    }
    containers.sort();
    Some(ApiState {
        uid: pod["metadata"]["uid"].as_str()?.to_string(),
        containers,
    })
}

/// Where a test's API pods live.
pub(crate) enum Server {
    /// The judge's control plane (`KUBE_APISERVER_JUDGE`), through its kubectl: the kubelets
    /// join it by TLS bootstrap with its bootstrap token, from node IP `ip`, and keep the
    /// client certificate the Go kubelet's bootstrap writes in `cert_dir`.
    Judge {
        dir: PathBuf,
        ip: String,
        cert_dir: PathBuf,
    },
    /// This project's API server fixture (serving while the node lives), through kube-rs.
    Fixture {
        _server: ApiServer,
        client: kube::Client,
    },
}

/// One test's node: its API server, the namespace of its pods, its place (root directory,
/// node name, read-only port), the kubeconfig, the CRI endpoint and the runtime flags this
/// kubelet gets, the image of the pods.
pub(crate) struct Node {
    pub(crate) server: Server,
    pub(crate) ns: String,
    pub(crate) place: Place,
    pub(crate) kubeconfig: PathBuf,
    pub(crate) endpoint: String,
    pub(crate) runtime: Vec<std::ffi::OsString>,
    pub(crate) image: String,
}

/// A fixture request's failure as text, `NotFound` for a 404 (as kubectl's message says).
fn api_error(e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 404 => format!("NotFound: {}", s.message),
        e => e.to_string(),
    }
}

/// One YAML document as kubectl reads it (YAML 1.1: `0400` is octal, a file mode).
fn yaml_object(doc: &str) -> serde_json::Value {
    let mut options = serde_saphyr::Options::default();
    options.legacy_octal_numbers = true;
    serde_saphyr::from_str_with_options(doc, options)
        .unwrap_or_else(|e| panic!("a YAML document: {e}\n{doc}"))
}

#[test]
fn yaml_objects_read_file_modes_as_kubectl() {
    let v = yaml_object("a:\n  defaultMode: 0400\n  b: \"0400\"\n  c: 420\n");
    assert_eq!(
        v,
        serde_json::json!({"a": {"defaultMode": 256, "b": "0400", "c": 420}})
    );
}

impl Node {
    fn flags(&self) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        let mut flags = vec!["--kubeconfig".into(), path(&self.kubeconfig)];
        match &self.server {
            Server::Judge { dir, ip, cert_dir } => flags.extend([
                "--bootstrap-kubeconfig".into(),
                path(&dir.join("run/bootstrap.kubeconfig")),
                "--cert-dir".into(),
                path(cert_dir),
                "--node-ip".into(),
                ip.clone(),
            ]),
            Server::Fixture { .. } => {
                flags.extend(["--node-status-update-frequency".into(), "1s".into()])
            }
        }
        flags
    }

    /// The Go kubelet 1.26 on this node: the secure port on a free port of 127.0.0.1 (with a
    /// self-signed serving certificate), no healthz port.
    fn go(&self, judge: &Path, tb: &Testbed) -> Child {
        let mut flags = self.flags();
        flags.extend(["--address".into(), "127.0.0.1".into()]);
        go_kubelet_with(judge, tb, &self.endpoint, &self.place, &flags)
    }

    /// This kubelet on this node (its secure port off).
    pub(crate) fn ours(&self, tb: &Testbed) -> Child {
        kubelet_command_on(
            self.runtime.clone(),
            tb,
            &self.place.root,
            Some(&self.place.manifests),
            self.place.port,
            &self.place.node,
            &self.place.log,
        )
        .args(self.flags())
        .spawn()
        .expect("spawn kubelet")
    }

    /// The namespace's pods on the fixture (None on a judge).
    pub(crate) fn fixture_pods(&self) -> Option<Api<Pod>> {
        match &self.server {
            Server::Fixture { client, .. } => Some(Api::namespaced(client.clone(), &self.ns)),
            Server::Judge { .. } => None,
        }
    }

    /// Creates the objects of `text` (YAML documents) with its placeholders filled in:
    /// `kubectl apply` on a judge, a create per document on the fixture.
    pub(crate) async fn apply(&self, text: &str) {
        let text = text
            .replace("@NS@", &self.ns)
            .replace("@NODE@", &self.place.node)
            .replace("@IMAGE@", &self.image);
        match &self.server {
            Server::Judge { dir, .. } => {
                let file = self.place.dir.join("apply.yaml");
                std::fs::write(&file, text).expect("write manifest");
                let file = file.display().to_string();
                kubectl(dir, &["apply", "-f", &file])
                    .await
                    .unwrap_or_else(|e| panic!("kubectl apply: {e}"));
            }
            Server::Fixture { client, .. } => {
                for doc in text.split("\n---\n") {
                    let obj: DynamicObject = serde_json::from_value(yaml_object(doc))
                        .unwrap_or_else(|e| panic!("an API object: {e}\n{doc}"));
                    let kind = obj.types.as_ref().map(|t| t.kind.as_str()).unwrap_or("");
                    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", kind));
                    Api::<DynamicObject>::namespaced_with(client.clone(), &self.ns, &ar)
                        .create(&PostParams::default(), &obj)
                        .await
                        .unwrap_or_else(|e| panic!("create {kind}: {e}"));
                }
            }
        }
    }

    pub(crate) async fn plain(&self, name: &str) {
        self.apply(&PLAIN.replace("@NAME@", name)).await;
    }

    pub(crate) async fn api_pod(&self, name: &str) -> Result<serde_json::Value, String> {
        match &self.server {
            Server::Judge { dir, .. } => {
                let out = kubectl(dir, &["get", "pod", "-n", &self.ns, name, "-o", "json"]).await?;
                serde_json::from_str(&out).map_err(|e| e.to_string())
            }
            Server::Fixture { client, .. } => {
                let pods: Api<Pod> = Api::namespaced(client.clone(), &self.ns);
                let p = pods.get(name).await.map_err(api_error)?;
                serde_json::to_value(p).map_err(|e| e.to_string())
            }
        }
    }

    /// Deletes API pod `name` gracefully, without waiting.
    async fn delete_pod(&self, name: &str) {
        let r = match &self.server {
            Server::Judge { dir, .. } => kubectl(
                dir,
                &["delete", "pod", "-n", &self.ns, name, "--wait=false"],
            )
            .await
            .map(drop),
            Server::Fixture { client, .. } => Api::<Pod>::namespaced(client.clone(), &self.ns)
                .delete(name, &DeleteParams::default())
                .await
                .map(drop)
                .map_err(api_error),
        };
        r.unwrap_or_else(|e| panic!("delete pod {name}: {e}"));
    }

    async fn node_ready(&self) -> bool {
        match &self.server {
            Server::Judge { dir, .. } => kubectl(
                dir,
                &[
                    "get",
                    "node",
                    &self.place.node,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                ],
            )
            .await
            .is_ok_and(|s| s.trim() == "True"),
            Server::Fixture { client, .. } => {
                Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
                    .get_opt(&self.place.node)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|n| node_ready(&n))
            }
        }
    }

    /// Waits until the Node is Ready, then until each pod of `names` is Running and Ready
    /// through the API server and running on the kubelet's read-only server: (API state,
    /// runtime snapshot) per pod.
    pub(crate) async fn ready(&self, step: &str, names: &[&str]) -> Vec<(ApiState, Snapshot)> {
        let log = &self.place.log;
        wait_for(&format!("{step}: node Ready"), log, || async {
            self.node_ready().await.then_some(())
        })
        .await;
        let mut out = Vec::new();
        for name in names {
            let api = wait_for(
                &format!("{step}: {name} Running and Ready"),
                log,
                || async { api_ready(&self.api_pod(name).await.ok()?) },
            )
            .await;
            wait_for(
                &format!("{step}: {name} running on the kubelet"),
                log,
                || async { running_ids(&pod(self.place.port, &api.uid).await?) },
            )
            .await;
            let snap = snapshot(&self.endpoint, &api.uid).await;
            out.push((api, snap));
        }
        out
    }

    /// Deletes API pod `name` (UID `uid`) and waits until its containers and sandboxes are
    /// gone from the runtime, the Pod object from the API server and its directory
    /// (`pods/<uid>`, its volumes) from the kubelet's root; then its CNI address is released
    /// and, given dockershim's checkpoint directory, its checkpoint removed.
    pub(crate) async fn delete(
        &self,
        kind: RuntimeKind,
        name: &str,
        uid: &str,
        checkpoints: Option<&Path>,
    ) {
        let ids: Vec<String> = runtime_sandboxes(&self.endpoint, uid)
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert!(!ids.is_empty(), "{name}: a sandbox before the deletion");
        assert!(
            ids.iter().any(|id| ip_reserved_for(kind, id)),
            "{name}: an address reserved for its sandbox"
        );
        if let Some(dir) = checkpoints {
            for id in &ids {
                assert!(dir.join(id).exists(), "{name}: sandbox {id} checkpointed");
            }
        }
        let pod_dir = self.place.root.join("pods").join(uid);
        assert!(pod_dir.is_dir(), "{name}: {} exists", pod_dir.display());
        self.delete_pod(name).await;
        let log = &self.place.log;
        wait_for(&format!("{name} removed from the runtime"), log, || async {
            let c = runtime_containers(&self.endpoint, uid).await?;
            let s = runtime_sandboxes(&self.endpoint, uid).await?;
            (c.is_empty() && s.is_empty()).then_some(())
        })
        .await;
        wait_for(&format!("{name} gone from the API server"), log, || async {
            match self.api_pod(name).await {
                Err(e) if e.contains("NotFound") => Some(()),
                _ => None,
            }
        })
        .await;
        wait_for(
            &format!("{name}: {} removed", pod_dir.display()),
            log,
            || async { (!pod_dir.exists()).then_some(()) },
        )
        .await;
        for id in &ids {
            assert!(
                !ip_reserved_for(kind, id),
                "{name}: the address of sandbox {id} released"
            );
            if let Some(dir) = checkpoints {
                assert!(
                    !dir.join(id).exists(),
                    "{name}: the checkpoint of sandbox {id} removed"
                );
            }
        }
    }

    /// The kubelet that just took over has its API pods: a new API pod `name` added after it
    /// started runs and Ready (the kubelet got the node's pods, the adopted ones among them,
    /// before), and once deleted its containers and sandboxes go.
    pub(crate) async fn api_canary(&self, step: &str, name: &str) {
        self.plain(name).await;
        let ready = self.ready(step, &[name]).await;
        let uid = ready[0].0.uid.clone();
        self.delete_pod(name).await;
        wait_for(
            &format!("{step}: {name} removed"),
            &self.place.log,
            || async {
                let c = runtime_containers(&self.endpoint, &uid).await?;
                let s = runtime_sandboxes(&self.endpoint, &uid).await?;
                (c.is_empty() && s.is_empty()).then_some(())
            },
        )
        .await;
    }

    /// The UIDs of every pod of the namespace (to clean up after the test).
    pub(crate) async fn pod_uids(&self) -> Vec<String> {
        match &self.server {
            Server::Judge { dir, .. } => kubectl(
                dir,
                &[
                    "get",
                    "pods",
                    "-n",
                    &self.ns,
                    "-o",
                    "jsonpath={.items[*].metadata.uid}",
                ],
            )
            .await
            .map(|s| s.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default(),
            Server::Fixture { client, .. } => Api::<Pod>::namespaced(client.clone(), &self.ns)
                .list(&ListParams::default())
                .await
                .map(|l| l.items.into_iter().filter_map(|p| p.metadata.uid).collect())
                .unwrap_or_default(),
        }
    }
}

/// A watch of a namespace's pods (`kubectl get pods --watch` on a judge, a kube-rs list and
/// watch on the fixture): one line per event, `<name> <phase> <Ready>`.
pub(crate) struct Watch {
    child: Option<Child>,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

/// A [`Watch`] line of `pod`.
fn watch_line(pod: &Pod) -> String {
    let status = pod.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str())
        .unwrap_or("");
    format!(
        "{} {} {ready}",
        pod.metadata.name.as_deref().unwrap_or(""),
        status.and_then(|s| s.phase.as_deref()).unwrap_or("")
    )
}

/// Lists `pods` and watches them from the list's version, pushing a [`watch_line`] per object
/// and event onto `lines`; lists again when a watch ends. Runs until aborted.
async fn watch_fixture(pods: Api<Pod>, lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use futures::{StreamExt, TryStreamExt};
    use kube::api::WatchEvent;
    let push = |p: &Pod| {
        if let Ok(mut v) = lines.lock() {
            v.push(watch_line(p));
        }
    };
    loop {
        let Ok(list) = pods.list(&ListParams::default()).await else {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            continue;
        };
        list.items.iter().for_each(push);
        let rv = list.metadata.resource_version.unwrap_or_default();
        let Ok(stream) = pods.watch(&WatchParams::default(), &rv).await else {
            continue;
        };
        let mut stream = stream.boxed();
        while let Ok(Some(event)) = stream.try_next().await {
            match event {
                WatchEvent::Added(p) | WatchEvent::Modified(p) | WatchEvent::Deleted(p) => push(&p),
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(_) => break,
            }
        }
    }
}

impl Watch {
    pub(crate) fn start(node: &Node) -> Watch {
        use tokio::io::AsyncBufReadExt;
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let dir = match &node.server {
            Server::Judge { dir, .. } => dir,
            Server::Fixture { client, .. } => {
                let pods = Api::namespaced(client.clone(), &node.ns);
                let task = tokio::spawn(watch_fixture(pods, lines.clone()));
                return Watch {
                    child: None,
                    lines,
                    task,
                };
            }
        };
        let template = r#"jsonpath={.metadata.name} {.status.phase} {.status.conditions[?(@.type=="Ready")].status}{"\n"}"#;
        let mut child = kubelet_support::judge::kubectl_child(
            dir,
            &["get", "pods", "-n", &node.ns, "--watch", "-o", template],
        );
        let out = child.stdout.take().expect("kubectl stdout");
        let task = tokio::spawn({
            let lines = lines.clone();
            async move {
                let mut rd = tokio::io::BufReader::new(out).lines();
                while let Ok(Some(l)) = rd.next_line().await {
                    if let Ok(mut v) = lines.lock() {
                        v.push(l);
                    }
                }
            }
        });
        Watch {
            child: Some(child),
            lines,
            task,
        }
    }

    /// Stops the watch: the events of pods `names` that were not Running and Ready (after at
    /// least one event of each, so that the watch saw them).
    pub(crate) async fn stop(mut self, names: &[&str]) -> Vec<String> {
        match self.child.as_mut() {
            Some(child) => {
                let _ = child.kill().await;
            }
            None => self.task.abort(),
        }
        let _ = self.task.await;
        let lines = self.lines.lock().map(|v| v.clone()).unwrap_or_default();
        for n in names {
            assert!(
                lines.iter().any(|l| l.split(' ').next() == Some(*n)),
                "the watch saw {n}: {lines:?}"
            );
        }
        lines
            .into_iter()
            .filter(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                names.contains(&f[0]) && f.get(1..3) != Some(&["Running", "True"][..])
            })
            .collect()
    }
}

/// The pods with a readiness or startup probe.
const PROBED: &[&str] = &["web", "web2", "rich"];

/// Checks the events a [`Watch`] saw over a swap that were not Running and Ready: every pod
/// stayed Running, and only a pod with a readiness or startup probe may have been reported not
/// Ready for a moment. That is the Go kubelet 1.26's own behaviour after any restart (its
/// readiness workers start at `Failure` and its startup workers at `Unknown` for a container
/// they have not probed yet, and the first status it writes says not Ready, resp. not started,
/// until the probe succeeds), and this kubelet's as well; the swaps show it in both
/// directions.
pub(crate) fn check_watch(step: &str, not_ready: Vec<String>) {
    for l in &not_ready {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(
            f.get(1),
            Some(&"Running"),
            "{step}: the API server reported a pod not Running: {l}"
        );
        assert!(
            PROBED.contains(&f[0]),
            "{step}: the API server reported a pod without a readiness or startup probe not Ready: {l}"
        );
    }
    eprintln!("FIGURE {step}: not-Ready moments of probed pods: {not_ready:?}");
}

/// The labels and annotations of an API pod's sandbox and containers on the runtime, keyed
/// `sandbox.label.<key>`, `container.<name>.annotation.<key>`…, with the values that name the
/// pod (its name, which may also be a container's, and UID) or differ by name or time
/// (the container hash, `kubernetes.io/config.seen`) replaced by placeholders: what two
/// kubelets write for the same spec, comparable.
pub(crate) async fn runtime_meta(
    endpoint: &str,
    name: &str,
    uid: &str,
) -> BTreeMap<String, String> {
    let norm = |k: &str, v: &str| -> String {
        match k {
            "io.kubernetes.container.hash" => "<hash>".into(),
            "kubernetes.io/config.seen" => "<time>".into(),
            "io.kubernetes.pod.name" | "io.kubernetes.container.name" if v == name => {
                "<name>".into()
            }
            "kubectl.kubernetes.io/last-applied-configuration" => {
                v.replace(&format!("\"name\":\"{name}\""), "\"name\":\"<name>\"")
            }
            _ => v.replace(uid, "<uid>"),
        }
    };
    let mut out = BTreeMap::new();
    for s in runtime_sandboxes(endpoint, uid).await.unwrap_or_default() {
        for (k, v) in &s.labels {
            out.insert(format!("sandbox.label.{k}"), norm(k, v));
        }
        for (k, v) in &s.annotations {
            out.insert(format!("sandbox.annotation.{k}"), norm(k, v));
        }
        let attempt = s.metadata.as_ref().map(|m| m.attempt).unwrap_or(u32::MAX);
        out.insert("sandbox.attempt".into(), attempt.to_string());
    }
    for c in runtime_containers(endpoint, uid).await.unwrap_or_default() {
        let cname = c.metadata.as_ref().map(|m| m.name.as_str()).unwrap_or("?");
        let cname = if cname == name { "<name>" } else { cname };
        for (k, v) in &c.labels {
            out.insert(format!("container.{cname}.label.{k}"), norm(k, v));
        }
        for (k, v) in &c.annotations {
            out.insert(format!("container.{cname}.annotation.{k}"), norm(k, v));
        }
        let attempt = c.metadata.as_ref().map(|m| m.attempt).unwrap_or(u32::MAX);
        out.insert(format!("container.{cname}.attempt"), attempt.to_string());
    }
    out
}

/// The differences between two [`runtime_meta`] maps, one line each, the maps named by
/// `sides`.
pub(crate) fn meta_diff(
    sides: [&str; 2],
    a: &BTreeMap<String, String>,
    b: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| {
            format!(
                "{k}: {} {:?}, {} {:?}",
                sides[0],
                a.get(k),
                sides[1],
                b.get(k)
            )
        })
        .collect()
}

/// After a swap: the same API state and runtime snapshot, pod by pod.
pub(crate) fn assert_same(
    step: &str,
    names: &[&str],
    before: &[(ApiState, Snapshot)],
    after: &[(ApiState, Snapshot)],
) {
    assert_eq!(before.len(), after.len(), "{step}: pods");
    for ((name, (ba, bs)), (aa, as_)) in names.iter().zip(before).zip(after) {
        assert_eq!(
            bs, as_,
            "{step}: {name}: a sandbox or container was recreated or restarted on the runtime"
        );
        assert_eq!(
            ba, aa,
            "{step}: {name}: the API server reports other containers or restart counts"
        );
        assert!(
            aa.containers.iter().all(|(_, _, r)| *r == 0),
            "{step}: {name}: no restart: {aa:?}"
        );
    }
}

/// This machine's default-route IPv4 address (the address a UDP socket "connected" to a
/// public address would send from; nothing is sent).
fn host_ip() -> Option<String> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.255:53")
        .or_else(|_| s.connect("8.8.8.8:53"))
        .ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then(|| ip.to_string())
}

/// The judges, or None after a loud `SKIPPED` line.
fn judges(test: &str) -> Option<(PathBuf, PathBuf)> {
    let Some(kubelet) = std::env::var_os("KUBELET_JUDGE").map(PathBuf::from) else {
        eprintln!(
            "SKIPPED {test}: KUBELET_JUDGE is not set (a Go kubelet 1.26 binary, e.g. /opt/judges/k8s/bin/kubelet)"
        );
        return None;
    };
    let apiserver = judge_or_skip(test)?;
    Some((kubelet, apiserver))
}

async fn swap_api(kind: RuntimeKind, test: &str) {
    let Some((go, judge)) = judges(test) else {
        return;
    };
    let tb = require_testbed!(test);
    // The Go kubelet's container GC removes every other pod's log directory (kubelet_swap.rs);
    // this test's API pods have no UID yet, so any directory there is another's.
    if skip_for_foreign_pod_logs(test, &[]) {
        return;
    }
    let ip = host_ip().unwrap_or_else(|| panic!("{test}: no default-route address for --node-ip"));
    let place = Place::empty(&format!("api-{}", kind.name()));
    let shim_dir = place.dir.join("shim");
    let shim = match kind {
        RuntimeKind::Containerd => None,
        RuntimeKind::Dockershim => {
            std::fs::create_dir_all(&shim_dir).expect("shim dir");
            Some(
                ShimProcess::start(&tb, &shim_dir)
                    .await
                    .expect("dockershim"),
            )
        }
    };
    let endpoint = shim
        .as_ref()
        .map(|s| s.endpoint.clone())
        .unwrap_or_else(|| tb.containerd_endpoint.clone());
    let checkpoints = shim_dir.join("root").join("sandbox");
    let checkpoints = shim.is_some().then_some(checkpoints.as_path());
    let runtime = match kind {
        RuntimeKind::Containerd => runtime_args(kind, &tb),
        RuntimeKind::Dockershim => vec![
            "--container-runtime-endpoint".into(),
            endpoint.clone().into(),
        ],
    };
    let node = Node {
        server: Server::Judge {
            dir: judge.clone(),
            ip,
            cert_dir: place.dir.join("pki"),
        },
        // A namespace of this run's own (an earlier run's may still be terminating).
        ns: format!("{}-{}", place.node, std::process::id()),
        kubeconfig: place.dir.join("kubelet.conf"),
        endpoint: endpoint.clone(),
        runtime,
        image: tb.busybox_image.clone(),
        place,
    };
    // A Node left by an earlier run.
    let _ = kubectl(
        &judge,
        &["delete", "node", &node.place.node, "--wait=false"],
    )
    .await;
    let mut child = Some(node.go(&go, &tb));
    let mut uids: Vec<String> = vec![format!("{}-canary", node.place.node)];
    let body = async {
        kubectl(&judge, &["create", "namespace", &node.ns])
            .await
            .expect("kubectl create namespace");
        node.apply(CONFIG).await;
        node.apply(&WEB.replace("@NAME@", "web")).await;
        node.apply(DB).await;
        node.plain("tools").await;
        node.apply(RICH).await;
        let names = ["web", "db", "tools", "rich"];
        let before = node.ready("the Go kubelet", &names).await;
        uids.extend(before.iter().map(|(a, _)| a.uid.clone()));
        let count = |s: &[(ApiState, Snapshot)]| {
            s.iter()
                .map(|(_, s)| {
                    s.sandboxes.len() + s.containers.values().map(Vec::len).sum::<usize>()
                })
                .sum::<usize>()
        };
        eprintln!(
            "FIGURE {test}: {} API pods, {} sandboxes and containers under the Go kubelet",
            before.len(),
            count(&before)
        );

        let watch = Watch::start(&node);
        let t = std::time::Instant::now();
        stop(&mut child).await;
        child = Some(node.ours(&tb));
        node.ready("Go kubelet -> this kubelet", &names).await;
        figure(
            &format!("{test}: Go kubelet -> this kubelet, pods Running and Ready"),
            t,
        );
        settle(&node.place, &node.image, &endpoint).await;
        node.api_canary("this kubelet", "canary-ours").await;
        let settled = node
            .ready("Go kubelet -> this kubelet, settled", &names)
            .await;
        check_watch("Go kubelet -> this kubelet", watch.stop(&names).await);
        assert_same("Go kubelet -> this kubelet", &names, &before, &settled);

        // What the Go kubelet wrote on the runtime for `tools`, to compare with what this
        // kubelet writes for the same spec (`fresh`).
        let go_meta = runtime_meta(&endpoint, "tools", &before[2].0.uid).await;
        let go_web_meta = runtime_meta(&endpoint, "web", &before[0].0.uid).await;
        // This kubelet manages the adopted pods: a deleted one goes, a new one starts.
        node.delete(kind, "tools", &before[2].0.uid, checkpoints)
            .await;
        node.plain("fresh").await;
        node.apply(&WEB.replace("@NAME@", "web2")).await;
        let kept_names = ["web", "db", "fresh", "web2", "rich"];
        let kept = node
            .ready("this kubelet, after deleting tools", &kept_names)
            .await;
        uids.extend(kept[2..].iter().map(|(a, _)| a.uid.clone()));
        assert_same(
            "this kubelet, after deleting tools",
            &["rich"],
            &before[3..],
            &kept[4..],
        );
        let our_meta = runtime_meta(&endpoint, "fresh", &kept[2].0.uid).await;
        let our_web_meta = runtime_meta(&endpoint, "web2", &kept[3].0.uid).await;
        let sides = ["Go kubelet", "this kubelet"];
        let mut diff = meta_diff(sides, &go_meta, &our_meta);
        diff.extend(meta_diff(sides, &go_web_meta, &our_web_meta));
        assert!(
            diff.is_empty(),
            "labels and annotations this kubelet writes for an API pod differ from the Go kubelet 1.26's:\n{}",
            diff.join("\n")
        );
        eprintln!(
            "FIGURE {test}: {} labels and annotations of two API pods' sandboxes and containers agree",
            our_meta.len() + our_web_meta.len()
        );
        assert_same(
            "this kubelet, after deleting tools",
            &names[..2],
            &before[..2],
            &kept[..2],
        );

        let watch = Watch::start(&node);
        let t = std::time::Instant::now();
        stop(&mut child).await;
        child = Some(node.go(&go, &tb));
        node.ready("this kubelet -> Go kubelet", &kept_names).await;
        figure(
            &format!("{test}: this kubelet -> Go kubelet, pods Running and Ready"),
            t,
        );
        settle(&node.place, &node.image, &endpoint).await;
        node.api_canary("the Go kubelet again", "canary-go").await;
        let back = node
            .ready("this kubelet -> Go kubelet, settled", &kept_names)
            .await;
        check_watch("this kubelet -> Go kubelet", watch.stop(&kept_names).await);
        assert_same("this kubelet -> Go kubelet", &kept_names, &kept, &back);
        let tools = snapshot(&endpoint, &before[2].0.uid).await;
        assert!(
            tools.sandboxes.is_empty() && tools.containers.is_empty(),
            "the Go kubelet did not bring the deleted pod back: {tools:?}"
        );
        eprintln!(
            "FIGURE {test}: {} sandboxes and containers kept across both swaps",
            count(&back)
        );
    };
    let outcome = std::panic::AssertUnwindSafe(body).catch_unwind().await;
    if outcome.is_err() {
        eprintln!("kubelet log tail:\n{}", log_tail(&node.place.log, 60));
    }
    stop(&mut child).await;
    // Every pod of the namespace, also those the body did not get to record.
    uids.extend(node.pod_uids().await);
    for u in &uids {
        cleanup_runtime(&endpoint, u).await;
    }
    let _ = kubectl(&judge, &["delete", "namespace", &node.ns, "--wait=false"]).await;
    let _ = kubectl(
        &judge,
        &["delete", "node", &node.place.node, "--wait=false"],
    )
    .await;
    // The last run's kubelet log stays beside the case's directory.
    let _ = std::fs::copy(
        &node.place.log,
        node.place.dir.with_extension("last-kubelet.log"),
    );
    remove_place(&node.place);
    drop(shim);
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

#[tokio::test]
async fn kubelet_swap_api_pods_with_go_kubelet_containerd() {
    swap_api(
        RuntimeKind::Containerd,
        "kubelet_swap_api_pods_with_go_kubelet_containerd",
    )
    .await;
}

#[tokio::test]
async fn kubelet_swap_api_pods_with_go_kubelet_dockershim() {
    swap_api(
        RuntimeKind::Dockershim,
        "kubelet_swap_api_pods_with_go_kubelet_dockershim",
    )
    .await;
}
