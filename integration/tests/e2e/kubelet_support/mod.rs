//! Helpers for end-to-end tests that run the `kubelet` BINARY on a real runtime (containerd's
//! CRI, or the kubelet's embedded dockershim on Docker): spawn it with static pods from a
//! manifest directory, read its read-only server, wait with a deadline (dumping the kubelet's
//! log tail on timeout), and clean the runtime up afterwards.

#![allow(dead_code)]

pub mod cgroup;
pub mod judge;
pub mod pv;
pub use judge::{admin_client as judge_admin, client_from, judge_or_skip, kubectl};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use integration::runtimes::{InProcessShim, RuntimeKind, clients};
use integration::testbed::Testbed;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

pub const DEADLINE: Duration = Duration::from_secs(150);
pub const UID_LABEL: &str = "io.kubernetes.pod.uid";

/// The `kubelet` of this test binary's cargo profile and target directory.
pub fn kubelet_binary() -> PathBuf {
    integration::runtimes::workspace_binary("kubelet")
        .unwrap_or_else(|e| panic!("{e} (hack/test.sh builds the workspace)"))
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// `GET path` on 127.0.0.1:port: (status code, body), de-chunked.
pub async fn http_get_status(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    parse_http_response(&buf)
}

/// An HTTP/1.1 response as read to its end: (status code, body), de-chunked.
pub fn parse_http_response(buf: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_string()
    };
    Some((code, body))
}

fn dechunk(mut s: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = s.split_once("\r\n")?;
        let n = usize::from_str_radix(size.trim(), 16).ok()?;
        if n == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..n)?);
        s = rest.get(n + 2..)?;
    }
}

/// `GET path`: the body when the answer is 200.
pub async fn http_get(port: u16, path: &str) -> Option<String> {
    match http_get_status(port, path).await? {
        (200, b) => Some(b),
        _ => None,
    }
}

pub async fn pods(port: u16) -> Option<Vec<serde_json::Value>> {
    let body = http_get(port, "/pods").await?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["items"].as_array().cloned()
}

pub fn find_pod<'a>(pods: &'a [serde_json::Value], uid: &str) -> Option<&'a serde_json::Value> {
    pods.iter().find(|p| p["metadata"]["uid"] == uid)
}

/// The pod from /pods.
pub async fn pod(port: u16, uid: &str) -> Option<serde_json::Value> {
    find_pod(&pods(port).await?, uid).cloned()
}

/// containerIDs by name when the pod is Running with every container running.
pub fn running_ids(pod: &serde_json::Value) -> Option<HashMap<String, String>> {
    let st = &pod["status"];
    if st["phase"] != "Running" {
        return None;
    }
    let mut out = HashMap::new();
    for c in st["containerStatuses"].as_array()? {
        c["state"]["running"].as_object()?;
        out.insert(
            c["name"].as_str()?.to_string(),
            c["containerID"].as_str()?.to_string(),
        );
    }
    Some(out)
}

/// The last `n` lines of a kubelet log (for failure messages).
pub fn log_tail(log: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

pub async fn wait_for<T, F, Fut>(what: &str, log: &Path, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() > end {
            panic!(
                "timed out waiting for {what}; kubelet log tail:\n{}",
                log_tail(log, 60)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Runs `cmd` through the CRI's ExecSync in the first running container of pod `uid`:
/// (exit code, stdout, stderr), or None when none runs or the call fails.
pub async fn exec_in_pod(endpoint: &str, uid: &str, cmd: &[&str]) -> Option<(i32, String, String)> {
    let containers = runtime_containers(endpoint, uid).await?;
    let c = containers
        .iter()
        .find(|c| c.state == cri::ContainerState::ContainerRunning as i32)?;
    let (mut rt, _) = clients(endpoint).await.ok()?;
    let r = rt
        .exec_sync(cri::ExecSyncRequest {
            container_id: c.id.clone(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout: 10,
        })
        .await
        .ok()?
        .into_inner();
    Some((
        r.exit_code,
        String::from_utf8_lossy(&r.stdout).into_owned(),
        String::from_utf8_lossy(&r.stderr).into_owned(),
    ))
}

/// Containers of `uid` on the runtime at `endpoint`.
pub async fn runtime_containers(endpoint: &str, uid: &str) -> Option<Vec<cri::Container>> {
    let (mut rt, _) = clients(endpoint).await.ok()?;
    let sel = HashMap::from([(UID_LABEL.to_string(), uid.to_string())]);
    Some(
        rt.list_containers(cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter {
                label_selector: sel,
                ..Default::default()
            }),
        })
        .await
        .ok()?
        .into_inner()
        .containers,
    )
}

/// Sandboxes of `uid` on the runtime at `endpoint`.
pub async fn runtime_sandboxes(endpoint: &str, uid: &str) -> Option<Vec<cri::PodSandbox>> {
    let (mut rt, _) = clients(endpoint).await.ok()?;
    let sel = HashMap::from([(UID_LABEL.to_string(), uid.to_string())]);
    Some(
        rt.list_pod_sandbox(cri::ListPodSandboxRequest {
            filter: Some(cri::PodSandboxFilter {
                label_selector: sel,
                ..Default::default()
            }),
        })
        .await
        .ok()?
        .into_inner()
        .items,
    )
}

/// Asserts that pod `uid` ran once on the runtime at `endpoint`: one sandbox, of attempt 0,
/// and one container (a finished run-once pod is not set up again).
pub async fn assert_ran_once(endpoint: &str, uid: &str, what: &str) {
    let sandboxes = runtime_sandboxes(endpoint, uid)
        .await
        .expect("ListPodSandbox");
    let attempts: Vec<u32> = sandboxes
        .iter()
        .filter_map(|s| s.metadata.as_ref().map(|m| m.attempt))
        .collect();
    assert_eq!(attempts, vec![0], "{what}: not set up again");
    let containers = runtime_containers(endpoint, uid)
        .await
        .expect("ListContainers");
    assert_eq!(containers.len(), 1, "{what}: run once: {containers:?}");
}

/// Stop and remove every sandbox labelled with `uid` (best effort).
pub async fn cleanup_runtime(endpoint: &str, uid: &str) {
    let Ok((mut rt, _)) = clients(endpoint).await else {
        return;
    };
    for s in runtime_sandboxes(endpoint, uid).await.unwrap_or_default() {
        let _ = rt
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: s.id.clone(),
            })
            .await;
        let _ = rt
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: s.id,
            })
            .await;
    }
}

/// Clean up the pods `uids` from the runtime of `kind` after the kubelet stopped.
pub async fn cleanup_all(kind: RuntimeKind, tb: &Testbed, uids: &[String]) {
    remove_pod_log_dirs(uids);
    match kind {
        RuntimeKind::Containerd => {
            for u in uids {
                cleanup_runtime(&tb.containerd_endpoint, u).await;
            }
        }
        RuntimeKind::Dockershim => {
            // The kubelet's embedded dockershim is gone: clean up through one of our own.
            if let Ok(mut shim) = InProcessShim::start(tb).await {
                let ep = shim.config.endpoint.clone();
                for u in uids {
                    cleanup_runtime(&ep, u).await;
                }
                shim.stop().await;
            }
        }
    }
}

/// Removes the pod log directories (`/var/log/pods/<namespace>_<name>_<uid>`) of `uids`, which
/// a kubelet stopped before its pods were gone leaves behind (a later kubelet on this host would
/// otherwise find them).
fn remove_pod_log_dirs(uids: &[String]) {
    let Ok(rd) = std::fs::read_dir("/var/log/pods") else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if uids
            .iter()
            .any(|u| !u.is_empty() && name.ends_with(&format!("_{u}")))
        {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

pub async fn stop_kubelet(child: &mut Child) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) on the pid of our own child process.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGTERM);
        }
    }
    if tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}

/// The CRI endpoint a test kubelet with root directory `root` uses on `kind`: containerd's, or
/// its embedded dockershim's socket.
pub fn runtime_endpoint(kind: RuntimeKind, tb: &Testbed, root: &Path) -> String {
    match kind {
        RuntimeKind::Containerd => tb.containerd_endpoint.clone(),
        RuntimeKind::Dockershim => format!("unix://{}/dockershim.sock", root.display()),
    }
}

/// The `kubelet` command every test starts, ready for more flags: state under `root`, static
/// pods from `manifests` (checked every 2 s) when given, the read-only server on
/// `read_only_port`, the secure port off, containerd's CRI or the embedded dockershim with CNI,
/// `-v 2`, its log appended to `log`; killed when dropped.
pub fn kubelet_command(
    kind: RuntimeKind,
    tb: &Testbed,
    root: &Path,
    manifests: Option<&Path>,
    read_only_port: u16,
    node: &str,
    log: &Path,
) -> Command {
    kubelet_command_on(
        runtime_args(kind, tb),
        tb,
        root,
        manifests,
        read_only_port,
        node,
        log,
    )
}

/// The runtime flags of [`kubelet_command`]: containerd's CRI endpoint, or the embedded
/// dockershim on the test bed's Docker with its CNI network.
pub fn runtime_args(kind: RuntimeKind, tb: &Testbed) -> Vec<std::ffi::OsString> {
    match kind {
        RuntimeKind::Containerd => vec![
            "--container-runtime-endpoint".into(),
            tb.containerd_endpoint.clone().into(),
        ],
        RuntimeKind::Dockershim => tb.dockershim_args(),
    }
}

/// [`kubelet_command`] with the given runtime flags (another CRI endpoint, or the embedded
/// dockershim on another Docker).
pub fn kubelet_command_on(
    runtime: Vec<std::ffi::OsString>,
    tb: &Testbed,
    root: &Path,
    manifests: Option<&Path>,
    read_only_port: u16,
    node: &str,
    log: &Path,
) -> Command {
    let bin = kubelet_binary();
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --workspace` first (hack/test.sh does)",
        bin.display()
    );
    let mut cmd = Command::new(bin);
    cmd.arg("--root-dir").arg(root);
    if let Some(m) = manifests {
        cmd.arg("--pod-manifest-path")
            .arg(m)
            .arg("--file-check-frequency")
            .arg("2s");
    }
    // Only the memory threshold: a nearly full test disk must not put every test kubelet under
    // DiskPressure (node-level reclaim would remove shared images). Eviction has its own test.
    cmd.arg("--eviction-hard")
        .arg("memory.available<100Mi")
        .arg("--port")
        .arg("0")
        .arg("--read-only-port")
        .arg(read_only_port.to_string())
        // Many test kubelets run at once: none takes the healthz port (127.0.0.1:10248).
        .arg("--healthz-port")
        .arg("0")
        .arg("--hostname-override")
        .arg(node)
        .arg("--pod-infra-container-image")
        .arg(&tb.pause_image)
        .arg("-v")
        .arg("2")
        .args(runtime);
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("log file");
    cmd.stdout(Stdio::null())
        .stderr(Stdio::from(log_file))
        .env("NO_COLOR", "1")
        .kill_on_drop(true);
    cmd
}

/// A kubelet of `kind` in API-server mode against a fresh API server fixture, spawned with
/// `--kubeconfig` and `extra` flags: (the fixture, the kubelet, a client of the fixture).
pub async fn api_mode_kubelet(
    tb: &Testbed,
    kind: RuntimeKind,
    prefix: &str,
    extra: &[String],
) -> (
    std::sync::Arc<integration::apiserver::ApiServer>,
    Kubelet,
    kube::Client,
) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = std::sync::Arc::new(
        integration::apiserver::ApiServer::start()
            .await
            .expect("API server fixture"),
    );
    let mut k = Kubelet::new(kind, prefix);
    let kubeconfig = k.dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).expect("kubeconfig");
    let mut flags = vec!["--kubeconfig".to_string(), kubeconfig.display().to_string()];
    flags.extend_from_slice(extra);
    k.spawn(tb, &flags);
    let url = server.url().parse().expect("fixture url");
    let client = kube::Client::try_from(kube::Config::new(url)).expect("client");
    (server, k, client)
}

/// One kubelet of a test: its directories, port and node name.
pub struct Kubelet {
    pub kind: RuntimeKind,
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub manifests: PathBuf,
    pub log: PathBuf,
    pub port: u16,
    pub node: String,
    pub child: Option<Child>,
}

impl Kubelet {
    /// Directories and a unique node name for a kubelet on `kind`.
    pub fn new(kind: RuntimeKind, prefix: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("kubelet-it-")
            .tempdir()
            .expect("tempdir");
        let root = dir.path().join("root");
        let manifests = dir.path().join("manifests");
        std::fs::create_dir_all(&manifests).expect("manifest dir");
        let log = dir.path().join("kubelet.log");
        Self {
            kind,
            root,
            manifests,
            log,
            port: free_port(),
            node: integration::fixtures::unique_name(prefix),
            child: None,
            dir,
        }
    }

    /// The CRI endpoint the checks use: containerd's, or the kubelet's embedded dockershim.
    pub fn endpoint(&self, tb: &Testbed) -> String {
        runtime_endpoint(self.kind, tb, &self.root)
    }

    /// What a test's checking task needs of this kubelet, owned: its log file, node name, CRI
    /// endpoint, and the test bed's busybox image.
    pub fn handles(&self, tb: &Testbed) -> (PathBuf, String, String, String) {
        (
            self.log.clone(),
            self.node.clone(),
            self.endpoint(tb),
            tb.busybox_image.clone(),
        )
    }

    /// The static pod's name (`<name>-<node>`).
    pub fn pod_name(&self, name: &str) -> String {
        format!("{name}-{}", self.node)
    }

    /// Write a manifest file.
    pub fn write_manifest(&self, file: &str, text: &str) -> PathBuf {
        let p = self.manifests.join(file);
        std::fs::write(&p, text).expect("write manifest");
        p
    }

    /// Start the binary with `extra` flags.
    pub fn spawn(&mut self, tb: &Testbed, extra: &[String]) {
        let mut cmd = kubelet_command(
            self.kind,
            tb,
            &self.root,
            Some(&self.manifests),
            self.port,
            &self.node,
            &self.log,
        );
        cmd.args(extra);
        self.child = Some(cmd.spawn().expect("spawn kubelet"));
    }

    /// Start the binary on the given runtime flags (see [`kubelet_command_on`]) with `extra`.
    pub fn spawn_on(&mut self, tb: &Testbed, runtime: Vec<std::ffi::OsString>, extra: &[String]) {
        let mut cmd = kubelet_command_on(
            runtime,
            tb,
            &self.root,
            Some(&self.manifests),
            self.port,
            &self.node,
            &self.log,
        );
        cmd.args(extra);
        self.child = Some(cmd.spawn().expect("spawn kubelet"));
    }

    /// The end of an API-mode test: delete the pods `names` through `pods`, [`Self::shutdown`]
    /// with `uids`, then re-raise the test body's panic, if any.
    pub async fn finish<N: AsRef<str>>(
        &mut self,
        tb: &Testbed,
        pods: &kube::Api<k8s_openapi::api::core::v1::Pod>,
        names: impl IntoIterator<Item = N>,
        uids: &[String],
        outcome: Result<(), tokio::task::JoinError>,
    ) {
        for n in names {
            let _ = pods
                .delete(n.as_ref(), &kube::api::DeleteParams::default())
                .await;
        }
        self.shutdown(tb, uids).await;
        if let Err(e) = outcome {
            std::panic::resume_unwind(e.into_panic());
        }
    }

    /// Remove every manifest, stop the kubelet, remove `uids` from the runtime, and unmount
    /// the volumes a kubelet stopped mid-test left mounted under its root (memory-backed
    /// emptyDirs).
    pub async fn shutdown(&mut self, tb: &Testbed, uids: &[String]) {
        if let Ok(rd) = std::fs::read_dir(&self.manifests) {
            for e in rd.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        if let Some(mut c) = self.child.take() {
            stop_kubelet(&mut c).await;
        }
        cleanup_all(self.kind, tb, uids).await;
        let root = self.root.display().to_string();
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        for m in mountinfo.lines().filter_map(|l| l.split(' ').nth(4)) {
            if m.starts_with(&root)
                && let Ok(c) = std::ffi::CString::new(m)
            {
                // SAFETY: umount2(2) with a valid NUL-terminated path under our temp dir.
                unsafe {
                    libc::umount2(c.as_ptr(), libc::MNT_DETACH);
                }
            }
        }
    }
}

/// Creates `pod` through the API and records its UID in `created` (for the clean-up); the UID.
pub async fn create_recorded(
    pods: &kube::Api<k8s_openapi::api::core::v1::Pod>,
    created: &parking_lot::Mutex<Vec<String>>,
    pod: &k8s_openapi::api::core::v1::Pod,
) -> String {
    let p = pods
        .create(&kube::api::PostParams::default(), pod)
        .await
        .expect("create pod");
    let uid = p.metadata.uid.clone().unwrap_or_default();
    created.lock().push(uid.clone());
    uid
}

/// A single-container pod manifest running `script` in busybox.
pub fn pod_manifest(name: &str, uid: &str, image: &str, script: &str, extra_spec: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  uid: {uid}
spec:
  terminationGracePeriodSeconds: 1
{extra_spec}  containers:
  - name: main
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", {script}]
"#,
        script = serde_json::to_string(script).expect("json string")
    )
}

/// The Node's condition of type `type_`.
pub fn node_condition(
    n: &k8s_openapi::api::core::v1::Node,
    type_: &str,
) -> Option<k8s_openapi::api::core::v1::NodeCondition> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .cloned()
}

/// Is the Node's `Ready` condition `True`?
pub fn node_ready(n: &k8s_openapi::api::core::v1::Node) -> bool {
    node_condition(n, "Ready").is_some_and(|c| c.status == "True")
}

/// Deletes pod `name` through the API (graceful) and waits until the kubelet has removed the
/// object.
pub async fn delete_pod_and_wait(
    pods: &kube::Api<k8s_openapi::api::core::v1::Pod>,
    name: &str,
    log: &Path,
) {
    pods.delete(name, &kube::api::DeleteParams::default())
        .await
        .expect("delete");
    wait_for("the pod object to be removed", log, || async {
        matches!(pods.get_opt(name).await, Ok(None)).then_some(())
    })
    .await;
}

/// `promtool check metrics` on `body`: its complaints (empty: clean). `None` without promtool.
pub fn promtool(body: &str) -> Option<String> {
    use std::io::Write as _;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(if out.status.success() && said.trim().is_empty() {
        String::new()
    } else {
        format!("exit {:?}: {said}", out.status.code())
    })
}

/// The sample of `name` whose labels include `labels`: (value, time stamp in ms).
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<(f64, Option<i64>)> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        let (set, rest) = match rest.strip_prefix('{') {
            Some(r) => r.split_once('}')?,
            None => ("", rest),
        };
        let have: Vec<&str> = set.split(',').collect();
        if !rest.starts_with(' ')
            || !labels
                .iter()
                .all(|(k, v)| have.contains(&format!("{k}=\"{v}\"").as_str()))
        {
            return None;
        }
        let mut f = rest.split_whitespace();
        let value = f.next()?.parse().ok()?;
        Some((value, f.next().and_then(|t| t.parse().ok())))
    })
}
