//! What the kubelet benchmarks share: starting the `kubelet` binary next to the benchmark's own
//! (`target/<profile>/kubelet`) on a runtime with static pods and extra flags, asking its
//! read-only server, and reading a process's CPU time and RSS from `/proc`.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::testbed::Testbed;

/// The median of `v` (0 when empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// `GET path` on the loopback `port`: the body of a 200.
pub async fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The pods of the kubelet's `/pods` (`None` when it does not answer).
pub async fn pods(port: u16) -> Option<Vec<serde_json::Value>> {
    let body = http_get(port, "/pods").await?;
    // Chunked or not, the JSON starts at the first '{'.
    let json = body.find('{').map(|i| &body[i..]).unwrap_or("");
    let json = json.rfind('}').map(|i| &json[..=i]).unwrap_or("");
    let mut v = serde_json::from_str::<serde_json::Value>(json).ok()?;
    match v["items"].take() {
        serde_json::Value::Array(items) => Some(items),
        _ => None,
    }
}

/// Whether pod `p` (as `/pods` gives it) is Running with every container ready.
pub fn pod_ready(p: &serde_json::Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|cs| cs.iter().all(|c| c["ready"] == true))
}

/// How many of `uids` are Running with every container ready in the kubelet's `/pods`.
pub async fn running(port: u16, uids: &[String]) -> usize {
    pods(port)
        .await
        .unwrap_or_default()
        .iter()
        .filter(|p| uids.iter().any(|u| p["metadata"]["uid"] == u.as_str()) && pod_ready(p))
        .count()
}

/// User plus system CPU seconds of process `pid`.
pub fn proc_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks_per_second())
}

/// The unit of the CPU times in `/proc` (`USER_HZ`).
fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

/// The pid of the Docker daemon serving `socket` (a `unix://` endpoint or a path): the
/// `dockerd` whose command line names the socket, or else the only `dockerd` running.
pub fn dockerd_pid(socket: &str) -> Option<u32> {
    let path = socket.strip_prefix("unix://").unwrap_or(socket);
    let mut all = Vec::new();
    for ent in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = ent.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() != "dockerd" {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(path) {
            return Some(pid);
        }
        all.push(pid);
    }
    (all.len() == 1).then(|| all[0])
}

/// The seconds every CPU of the machine has been busy (not idle or waiting for I/O) since boot,
/// from `/proc/stat`.
pub fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<f64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is within user).
    let busy: f64 = ticks
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    Some(busy / clock_ticks_per_second())
}

/// VmRSS of process `pid` in MiB.
pub fn rss_mib(pid: u32) -> Option<f64> {
    status_mib(pid, "VmRSS:")
}

/// The anonymous (heap, stacks) and file-backed (the binary's and libraries' pages) parts of
/// process `pid`'s RSS, in MiB.
pub fn rss_parts_mib(pid: u32) -> Option<(f64, f64)> {
    Some((status_mib(pid, "RssAnon:")?, status_mib(pid, "RssFile:")?))
}

/// A `/proc/<pid>/status` field given in kB, in MiB.
fn status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// A one-container static pod manifest running `sleep 3600`.
pub fn manifest(name: &str, uid: &str, image: &str) -> String {
    manifest_with_command(name, uid, image, &["sleep", "3600"])
}

/// A one-container static pod manifest running `command`.
pub fn manifest_with_command(name: &str, uid: &str, image: &str, command: &[&str]) -> String {
    let command = serde_json::to_string(command).unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  uid: {uid}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: {image}\n    imagePullPolicy: IfNotPresent\n    command: {command}\n"
    )
}

/// Removes every manifest of `k` and waits until the runtime at `endpoint` has no sandbox
/// left whose pod name starts with `prefix` (the kubelet's `/pods` forgets a pod before its
/// containers are gone).
pub async fn clear_static_pods(k: &KubeletProc, endpoint: &str, prefix: &str) -> Result<()> {
    use cri_proto::runtime::v1 as cri;
    for e in std::fs::read_dir(&k.manifests)?.flatten() {
        let _ = std::fs::remove_file(e.path());
    }
    let (mut rt, _) = crate::runtimes::clients(endpoint).await?;
    for _ in 0..1200 {
        let left = rt
            .list_pod_sandbox(cri::ListPodSandboxRequest {
                filter: Some(cri::PodSandboxFilter {
                    label_selector: std::collections::HashMap::from([(
                        "io.kubernetes.pod.namespace".to_string(),
                        "default".to_string(),
                    )]),
                    ..Default::default()
                }),
            })
            .await?
            .into_inner()
            .items
            .into_iter()
            .filter(|s| {
                s.metadata
                    .as_ref()
                    .is_some_and(|m| m.name.starts_with(prefix))
            })
            .count();
        if left == 0 {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    bail!("the kubelet did not clean its pods up")
}

/// A running kubelet process (SIGTERM on drop).
pub struct KubeletProc {
    pub child: std::process::Child,
    /// Its read-only port.
    pub port: u16,
    /// Its static pod directory.
    pub manifests: PathBuf,
    /// The CRI endpoint it uses (its embedded dockershim's socket when it runs one).
    pub endpoint: String,
}

impl KubeletProc {
    /// Waits (at most `timeout`) until its `/healthz` answers 200.
    pub async fn wait_healthy(&mut self, timeout: std::time::Duration) -> Result<()> {
        let start = std::time::Instant::now();
        while http_get(self.port, "/healthz").await.is_none() {
            if let Ok(Some(st)) = self.child.try_wait() {
                bail!("the kubelet exited early: {st}");
            }
            if start.elapsed() > timeout {
                bail!("the kubelet is not healthy after {timeout:?}");
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Ok(())
    }
}

impl KubeletProc {
    /// Kills it with SIGKILL (no chance to clean anything up) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for KubeletProc {
    fn drop(&mut self) {
        // Already reaped (killed): its pid may belong to another process by now.
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// Starts the `kubelet` next to the running executable on `endpoint` with its state under
/// `dir`, as node `node`, with `extra` flags (the secure port off, the memory eviction
/// threshold only: a nearly full benchmark disk must not evict).
pub fn start_kubelet(
    tb: &Testbed,
    endpoint: &str,
    dir: &Path,
    node: &str,
    extra: &[String],
) -> Result<KubeletProc> {
    let runtime = ["--container-runtime-endpoint".into(), endpoint.into()];
    start_kubelet_with(tb, &runtime, endpoint, dir, node, extra)
}

/// [`start_kubelet`] with its embedded dockershim on the test bed's Docker and CNI network
/// (the flags of [`Testbed::dockershim_args`], no runtime endpoint); its CRI socket is
/// `dir/root/dockershim.sock`.
pub fn start_kubelet_embedded(
    tb: &Testbed,
    dir: &Path,
    node: &str,
    extra: &[String],
) -> Result<KubeletProc> {
    let endpoint = format!("unix://{}/dockershim.sock", dir.join("root").display());
    start_kubelet_with(tb, &tb.dockershim_args(), &endpoint, dir, node, extra)
}

/// [`start_kubelet`] with the runtime flags `runtime`, which make it use the CRI `endpoint`.
pub fn start_kubelet_with(
    tb: &Testbed,
    runtime: &[std::ffi::OsString],
    endpoint: &str,
    dir: &Path,
    node: &str,
    extra: &[String],
) -> Result<KubeletProc> {
    let bin = crate::runtimes::workspace_binary("kubelet")?;
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    // Appended to: a kubelet started again on the same directory keeps the earlier log.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("kubelet.log"))?;
    let child = std::process::Command::new(bin)
        .args(runtime)
        .arg("--root-dir")
        .arg(dir.join("root"))
        .arg("--pod-manifest-path")
        .arg(&manifests)
        .arg("--port")
        .arg("0")
        .arg("--eviction-hard")
        .arg("memory.available<100Mi")
        .arg("--read-only-port")
        .arg(port.to_string())
        .arg("--healthz-port")
        .arg("0")
        .arg("--hostname-override")
        .arg(node)
        .arg("--pod-infra-container-image")
        .arg(&tb.pause_image)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting the kubelet")?;
    Ok(KubeletProc {
        child,
        port,
        manifests,
        endpoint: endpoint.to_string(),
    })
}
