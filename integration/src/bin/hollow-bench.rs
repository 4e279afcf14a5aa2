//! `hollow-bench`: what hollow nodes (this kubelet on the in-memory fake runtime, the
//! `hollow-node` binary) ask of the API server, and how fast pods reach Running through them.
//! N nodes register, P pods are created (bound round-robin on the fixture; as Deployments
//! the real scheduler places on a real control plane), the bench waits for every pod Running,
//! keeps an idle window, deletes them and waits for them gone. It reports pods/s to Running,
//! p50/p99 startup (created → Running seen by the bench), API requests per pod lifecycle by
//! verb and resource, node status and lease writes per node per minute when idle, watches per
//! node, bytes each way between the API server and the nodes (a byte-counting proxy between
//! them, `integration::byteproxy`: each side's kubeconfigs name it), and RSS and CPU per node.
//! On a real control plane the startup is also split into phases (created → scheduled →
//! the kubelet's first sync → Running seen).
//!
//! `--api fixture` (default; what CI runs): the project's API server fixture in-process,
//! which logs every request. `--api judge`: the real Kubernetes 1.26 control plane of
//! `KUBE_APISERVER_JUDGE` (its `run/admin.kubeconfig`, `run/bootstrap.kubeconfig`); requests
//! are read from its audit log (`--audit-log`, the API server started with an audit policy at
//! level Metadata), per node by user `system:node:<name>`. With `KUBELET_JUDGE` (a Go kubelet
//! 1.26 binary) and `--go-nodes M`, the same run then measures M Go kubelets, each on its own
//! `fake-runtime`, side by side; it then runs in a mount namespace of its own with private pod
//! log directories (`integration::mountns`), and the Go kubelets listen on loopback only. On
//! a real control plane each side's Node objects are deleted once its nodes are stopped.
//! Prints a table and, with `--json`, JSON; asserts nothing about time.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use integration::apiserver::ApiServer;
use integration::apiserver::store::Key;
use integration::byteproxy::{self, ByteCounts, ByteProxy};
use integration::hollow::{self, ApiRequest, PodTimeline, SideResult, StartupPhases};
use integration::kubelet_proc::{proc_cpu_seconds, rss_mib};
use integration::runtimes::workspace_binary;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::time::Instant;

#[derive(Debug, Parser)]
#[command(name = "hollow-bench", about = "Hollow nodes against an API server")]
struct Args {
    /// `fixture` (in-process, CI) or `judge` (KUBE_APISERVER_JUDGE's control plane).
    #[arg(long, default_value = "fixture")]
    api: String,
    /// Hollow nodes of this kubelet.
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    /// Pods per node.
    #[arg(long, default_value_t = 30)]
    pods_per_node: usize,
    /// Go kubelets on fake-runtime for the reference side (needs KUBELET_JUDGE and --api judge).
    #[arg(long, default_value_t = 0)]
    go_nodes: usize,
    /// Deployments created per second on the real control plane (each of `--pods-per-node`
    /// replicas; 0: all at once). Pace them to what the control plane schedules, or the
    /// startup figures measure its queue.
    #[arg(long, default_value_t = 0.0)]
    deployments_per_second: f64,
    /// The idle window (seconds) in which status and lease writes are counted.
    #[arg(long, default_value_t = 60)]
    idle_seconds: u64,
    /// The judge API server's audit log (JSON lines).
    #[arg(long)]
    audit_log: Option<PathBuf>,
    /// How long to wait for each phase.
    #[arg(long, default_value_t = 600)]
    timeout_seconds: u64,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

const NAMESPACE: &str = "hollow-bench";

/// The hard eviction thresholds of both sides: memory only.
const EVICTION_HARD: &str = "memory.available<100Mi";

/// Where the API server is and how requests are read back.
enum Api {
    Fixture(ApiServer),
    Judge {
        dir: PathBuf,
        client: kube::Client,
        audit_log: Option<PathBuf>,
    },
}

impl Api {
    /// Where the request log stands: the fixture's request count, or the audit log's length
    /// in bytes (a cursor for [`Api::requests_between`]).
    fn request_cursor(&self) -> usize {
        match self {
            Api::Fixture(s) => s.requests().len(),
            Api::Judge { audit_log, .. } => audit_log
                .as_ref()
                .and_then(|p| std::fs::metadata(p).ok())
                .map_or(0, |m| usize::try_from(m.len()).unwrap_or(usize::MAX)),
        }
    }

    /// The node requests logged from `from` to `to` (cursors), of the nodes named `prefix*`.
    fn requests_between(&self, from: usize, to: usize, prefix: &str) -> Vec<ApiRequest> {
        match self {
            Api::Fixture(s) => s
                .requests()
                .get(from..to)
                .unwrap_or_default()
                .iter()
                .filter_map(|r| {
                    hollow::classify(&r.method, &r.path, &r.query).map(|(verb, resource)| {
                        ApiRequest {
                            verb,
                            resource,
                            node: None,
                            at_ms: None,
                        }
                    })
                })
                .collect(),
            Api::Judge { audit_log, .. } => audit_log
                .as_ref()
                .and_then(|p| hollow::log_lines_between(p, from as u64, to as u64).ok())
                .map(|lines| {
                    lines
                        .iter()
                        .map(String::as_str)
                        .filter_map(hollow::parse_audit_line)
                        .filter(|r| r.node.as_deref().is_some_and(|n| n.starts_with(prefix)))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// Where the API server listens (what the byte proxies forward to).
    fn server_addr(&self) -> Result<std::net::SocketAddr> {
        match self {
            Api::Fixture(s) => Ok(s.addr),
            Api::Judge { .. } => byteproxy::kubeconfig_server_addr(&self.kubeconfig_text()?)
                .ok_or_else(|| anyhow!("the judge's admin kubeconfig names no server")),
        }
    }

    /// Response body bytes the API server logged so far (the fixture only).
    fn logged_response_bytes(&self) -> Option<u64> {
        match self {
            Api::Fixture(s) => Some(s.response_body_bytes()),
            Api::Judge { .. } => None,
        }
    }

    fn kubeconfig_text(&self) -> Result<String> {
        match self {
            Api::Fixture(s) => Ok(s.kubeconfig()),
            Api::Judge { dir, .. } => {
                Ok(std::fs::read_to_string(dir.join("run/admin.kubeconfig"))?)
            }
        }
    }

    /// Nodes named `prefix*` that are Ready.
    async fn ready_nodes(&self, prefix: &str) -> Result<usize> {
        let nodes = self.list("nodes", None).await?;
        Ok(nodes
            .iter()
            .filter(|n| {
                n.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .is_some_and(|name| name.starts_with(prefix))
            })
            .filter(|n| {
                n.pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
            })
            .count())
    }

    async fn list(&self, resource: &str, namespace: Option<&str>) -> Result<Vec<Value>> {
        match self {
            Api::Fixture(s) => Ok(s.store().list(resource, namespace).0),
            Api::Judge { client, .. } => {
                let path = match namespace {
                    Some(ns) => format!("/api/v1/namespaces/{ns}/{resource}"),
                    None => format!("/api/v1/{resource}"),
                };
                let req = http::Request::get(path).body(Vec::new())?;
                let v: Value = client.request(req).await?;
                Ok(v["items"].as_array().cloned().unwrap_or_default())
            }
        }
    }
}

/// The pod the bench runs: one container, nothing to pull (the fake has every image).
fn pod(name: &str, node: Option<&str>) -> Value {
    let mut spec = json!({
        "containers": [{"name": "c", "image": "127.0.0.1:5000/busybox", "imagePullPolicy": "IfNotPresent"}],
        "terminationGracePeriodSeconds": 1,
        "tolerations": [{"operator": "Exists"}],
    });
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "hollow-bench"}},
        "spec": spec,
    })
}

/// The phase each pod of the namespace is in, by name.
async fn pod_phases(api: &Api) -> Result<Vec<(String, String)>> {
    Ok(api
        .list("pods", Some(NAMESPACE))
        .await?
        .iter()
        .map(|p| {
            (
                p.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                p.pointer("/status/phase")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect())
}

/// One side's processes: the kubelets (measured: RSS and CPU) and what they run on (the Go
/// side's fake-runtime processes, not measured; this kubelet's fake is in its process and
/// counted), all killed at the end; and the proxy their API traffic goes through.
struct Side {
    name: String,
    prefix: String,
    nodes: usize,
    children: Vec<tokio::process::Child>,
    runtimes: Vec<tokio::process::Child>,
    proxy: ByteProxy,
    /// The API server's logged response bytes when the side started (fixture).
    logged_from: Option<u64>,
}

impl Side {
    /// The value of the `hollow-side` label of the side's nodes.
    fn label(&self) -> &str {
        self.prefix.trim_end_matches('-')
    }

    fn pids(&self) -> Vec<u32> {
        self.children.iter().filter_map(|c| c.id()).collect()
    }

    fn rss_mib(&self) -> f64 {
        self.pids().into_iter().filter_map(rss_mib).sum()
    }

    fn cpu_seconds(&self) -> f64 {
        self.pids().into_iter().filter_map(proc_cpu_seconds).sum()
    }
}

fn log_file(dir: &Path, name: &str) -> Result<(Stdio, Stdio)> {
    let f = std::fs::File::create(dir.join(name))?;
    Ok((f.try_clone()?.into(), f.into()))
}

/// The judge's bootstrap kubeconfig with its server replaced by `proxy`, written in `dir`.
fn proxied_bootstrap(judge: &Path, proxy: &ByteProxy, dir: &Path, prefix: &str) -> Result<PathBuf> {
    let text = std::fs::read_to_string(judge.join("run/bootstrap.kubeconfig"))?;
    let path = dir.join(format!("{prefix}bootstrap.kubeconfig"));
    std::fs::write(&path, byteproxy::redirect_kubeconfig(&text, proxy.addr()))?;
    Ok(path)
}

/// Starts this kubelet's hollow nodes: one `hollow-node` process with `nodes` nodes.
async fn start_hollow(api: &Api, dir: &Path, prefix: &str, nodes: usize) -> Result<Side> {
    let bin = workspace_binary("hollow-node")?;
    let logged_from = api.logged_response_bytes();
    let proxy = ByteProxy::start(api.server_addr()?).await?;
    let mut cmd = tokio::process::Command::new(bin);
    cmd.arg(format!("--nodes={nodes}"))
        .arg(format!("--name-prefix={prefix}"))
        .arg(format!("--root-dir-base={}", dir.join("hollow").display()));
    // No eviction on the host's disk: every hollow node shares it (kubemark's do too).
    let mut kubelet_flags = vec![
        "--cgroups-per-qos=false".to_string(),
        format!("--eviction-hard={EVICTION_HARD}"),
    ];
    match api {
        Api::Fixture(_) => {
            let kubeconfig = dir.join(format!("{prefix}kubeconfig"));
            let text = byteproxy::redirect_kubeconfig(&api.kubeconfig_text()?, proxy.addr());
            std::fs::write(&kubeconfig, text)?;
            kubelet_flags.push(format!("--kubeconfig={}", kubeconfig.display()));
        }
        Api::Judge { dir: judge, .. } => {
            let kubeconfigs = dir.join("hollow-kubeconfigs");
            std::fs::create_dir_all(&kubeconfigs)?;
            cmd.arg(format!("--kubeconfig-dir={}", kubeconfigs.display()));
            let bootstrap = proxied_bootstrap(judge, &proxy, dir, prefix)?;
            kubelet_flags.push(format!("--bootstrap-kubeconfig={}", bootstrap.display()));
        }
    }
    let (out, err) = log_file(dir, "hollow-node.log")?;
    let child = cmd
        .arg("--")
        .args(kubelet_flags)
        .stdout(out)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .context("starting hollow-node")?;
    Ok(Side {
        name: "this kubelet (hollow-node)".into(),
        prefix: prefix.into(),
        nodes,
        children: vec![child],
        runtimes: Vec::new(),
        proxy,
        logged_from,
    })
}

/// Starts `nodes` Go kubelets, each on its own `fake-runtime` (judge mode only).
async fn start_go(
    judge: &Path,
    go_kubelet: &Path,
    dir: &Path,
    prefix: &str,
    nodes: usize,
) -> Result<Side> {
    let fake = workspace_binary("fake-runtime")?;
    let text = std::fs::read_to_string(judge.join("run/admin.kubeconfig"))?;
    let upstream = byteproxy::kubeconfig_server_addr(&text)
        .ok_or_else(|| anyhow!("the judge's admin kubeconfig names no server"))?;
    let proxy = ByteProxy::start(upstream).await?;
    let bootstrap = proxied_bootstrap(judge, &proxy, dir, prefix)?;
    let mut children = Vec::new();
    let mut runtimes = Vec::new();
    for i in 0..nodes {
        let name = format!("{prefix}{i}");
        let root = dir.join("go").join(&name);
        std::fs::create_dir_all(&root)?;
        let sock = root.join("fake.sock");
        let (out, err) = log_file(&root, "fake-runtime.log")?;
        runtimes.push(
            tokio::process::Command::new(&fake)
                .arg(format!("--listen=unix://{}", sock.display()))
                .stdout(out)
                .stderr(err)
                .kill_on_drop(true)
                .spawn()
                .context("starting fake-runtime")?,
        );
        let (out, err) = log_file(&root, "kubelet.log")?;
        children.push(
            tokio::process::Command::new(go_kubelet)
                .arg(format!("--bootstrap-kubeconfig={}", bootstrap.display()))
                .arg(format!(
                    "--kubeconfig={}",
                    root.join("kubelet.kubeconfig").display()
                ))
                .arg(format!(
                    "--container-runtime-endpoint=unix://{}",
                    sock.display()
                ))
                .arg(format!("--hostname-override={name}"))
                .arg(format!("--root-dir={}", root.join("root").display()))
                .arg(format!("--cert-dir={}", root.join("pki").display()))
                .arg(format!("--port={}", 20250 + i))
                .arg("--read-only-port=0")
                .arg("--healthz-port=0")
                .arg("--cgroups-per-qos=false")
                .arg(format!("--eviction-hard={EVICTION_HARD}"))
                .arg("--enforce-node-allocatable=")
                .arg("--fail-swap-on=false")
                .arg("--cgroup-driver=cgroupfs")
                // Loopback only, and no iptables chains on the host.
                .arg("--address=127.0.0.1")
                .arg("--make-iptables-util-chains=false")
                .arg("--v=1")
                .stdout(out)
                .stderr(err)
                .kill_on_drop(true)
                .spawn()
                .context("starting the Go kubelet")?,
        );
    }
    Ok(Side {
        name: "Go kubelet 1.26 (fake-runtime)".into(),
        prefix: prefix.into(),
        nodes,
        children,
        runtimes,
        proxy,
        logged_from: None,
    })
}

async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await? {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates the side's pods: bound round-robin on the fixture, one Deployment per node's
/// worth on the judge (the scheduler places them; a node selector keeps them on the side's
/// nodes).
async fn create_pods(
    api: &Api,
    side: &Side,
    pods_per_node: usize,
    pace: f64,
) -> Result<Vec<(String, Instant)>> {
    let mut created = Vec::new();
    match api {
        Api::Fixture(s) => {
            for i in 0..side.nodes * pods_per_node {
                let name = format!("{}pod-{i}", side.prefix);
                let node = format!("{}{}", side.prefix, i % side.nodes);
                s.store()
                    .create(
                        Key {
                            resource: "pods".into(),
                            namespace: NAMESPACE.into(),
                            name: name.clone(),
                        },
                        pod(&name, Some(&node)),
                    )
                    .map_err(|e| anyhow!("creating pod {name}: {e:?}"))?;
                created.push((name, Instant::now()));
            }
        }
        Api::Judge { client, .. } => {
            use k8s_openapi::api::apps::v1::Deployment;
            let deployments: kube::Api<Deployment> =
                kube::Api::namespaced(client.clone(), NAMESPACE);
            for d in 0..side.nodes {
                let name = format!("{}dep-{d}", side.prefix);
                let mut template = pod("x", None);
                template["metadata"] = json!({"labels": {"app": name}});
                template["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "hollow-side", "operator": "In", "values": [side.label()]}]}]}}});
                let dep: Deployment = serde_json::from_value(json!({
                    "apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": name, "namespace": NAMESPACE},
                    "spec": {"replicas": pods_per_node, "selector": {"matchLabels": {"app": name}}, "template": template},
                }))?;
                deployments.create(&Default::default(), &dep).await?;
                created.push((name, Instant::now()));
                if pace > 0.0 {
                    tokio::time::sleep(Duration::from_secs_f64(1.0 / pace)).await;
                }
            }
        }
    }
    Ok(created)
}

async fn run_side(api: &Api, mut side: Side, args: &Args) -> Result<SideResult> {
    let timeout = Duration::from_secs(args.timeout_seconds);
    let t0 = Instant::now();
    let all_from = api.request_cursor();
    let prefix = side.prefix.clone();
    wait_until("every node Ready", timeout, || async {
        Ok(api.ready_nodes(&prefix).await? == side.nodes)
    })
    .await?;
    let nodes_ready_seconds = t0.elapsed().as_secs_f64();
    if let Api::Judge { client, .. } = api {
        label_nodes(client, &side).await?;
    }
    // Idle window: registered, no pods.
    let idle_from = api.request_cursor();
    let idle_bytes_from = side.proxy.counts();
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let idle_to = api.request_cursor();
    let idle_bytes = side.proxy.counts().since(&idle_bytes_from);
    let cpu0 = side.cpu_seconds();
    let churn_from = api.request_cursor();
    let pods = side.nodes * args.pods_per_node;
    let observer = match api {
        Api::Judge { client, .. } => Some(observe_pods(client.clone())),
        Api::Fixture(_) => None,
    };
    let start = Instant::now();
    let created = create_pods(api, &side, args.pods_per_node, args.deployments_per_second).await?;
    let mut first_running: HashMap<String, Instant> = Default::default();
    let mut created_at: HashMap<String, Instant> = created.into_iter().collect();
    let deadline = Instant::now() + timeout;
    while first_running.len() < pods {
        if Instant::now() > deadline {
            bail!(
                "timed out after {timeout:?} waiting for every pod Running ({} of {pods})",
                first_running.len()
            );
        }
        match &observer {
            // The real API server: the watch's times (a pod's creation as seen, its first
            // Running as seen), not a listing of thousands of pods every 100 ms.
            Some(o) => {
                for (name, seen) in o.lock().iter() {
                    if !name.starts_with(prefix.as_str()) {
                        continue;
                    }
                    created_at.entry(name.clone()).or_insert(seen.created);
                    if let Some(t) = seen.running {
                        first_running.entry(name.clone()).or_insert(t);
                    }
                }
            }
            None => {
                let now = Instant::now();
                for (name, phase) in pod_phases(api).await? {
                    if name.starts_with(prefix.as_str()) && phase == "Running" {
                        first_running.entry(name).or_insert(now);
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all_running = start.elapsed().as_secs_f64();
    let rss = side.rss_mib();
    let latencies: Vec<f64> = first_running
        .iter()
        .filter_map(|(n, t)| {
            created_at
                .get(n)
                .map(|c| t.duration_since(*c).as_secs_f64())
        })
        .collect();
    delete_pods(api, &side).await?;
    wait_until("every pod gone", timeout, || async {
        Ok(match &observer {
            Some(o) => !o
                .lock()
                .iter()
                .any(|(n, seen)| n.starts_with(prefix.as_str()) && !seen.deleted),
            None => !pod_phases(api)
                .await?
                .iter()
                .any(|(n, _)| n.starts_with(prefix.as_str())),
        })
    })
    .await?;
    let churn_to = api.request_cursor();
    // The API server's own count first: what it logged has reached the proxy after.
    let logged = api
        .logged_response_bytes()
        .zip(side.logged_from)
        .map(|(now, from)| now.saturating_sub(from));
    let whole_bytes: ByteCounts = side.proxy.counts();
    let cpu = side.cpu_seconds() - cpu0;
    let churn_secs = start.elapsed().as_secs_f64();
    let mut result = SideResult {
        name: side.name.clone(),
        nodes: side.nodes,
        pods,
        nodes_ready_seconds,
        pods_per_second: pods as f64 / all_running.max(1e-9),
        startup_p50_seconds: hollow::percentile(&latencies, 50.0),
        startup_p99_seconds: hollow::percentile(&latencies, 99.0),
        rss_mib_per_node: rss / side.nodes.max(1) as f64,
        cpu_millicores_per_node: cpu / churn_secs.max(1e-9) * 1000.0 / side.nodes.max(1) as f64,
        ..Default::default()
    };
    let churn = api.requests_between(churn_from, churn_to, &prefix);
    let idle = api.requests_between(idle_from, idle_to, &prefix);
    let all = api.requests_between(all_from, churn_to, &prefix);
    result.count_requests(&churn, &idle, args.idle_seconds as f64 / 60.0, &all);
    result.count_bytes(&whole_bytes, &idle_bytes, args.idle_seconds as f64 / 60.0);
    result.api_logged_response_bytes_per_node = logged.map(|b| b as f64 / side.nodes.max(1) as f64);
    if let Some(o) = &observer {
        let timelines: Vec<PodTimeline> = o
            .lock()
            .iter()
            .filter(|(n, _)| n.starts_with(prefix.as_str()))
            .filter_map(|(_, seen)| seen.timeline())
            .collect();
        result.startup_phases = StartupPhases::of(&timelines);
    }
    for c in side.children.iter_mut().chain(side.runtimes.iter_mut()) {
        let _ = c.start_kill();
    }
    for c in side.children.iter_mut().chain(side.runtimes.iter_mut()) {
        let _ = c.wait().await;
    }
    if let Api::Judge { client, .. } = api {
        delete_nodes(client, &side).await;
    }
    Ok(result)
}

/// Removes the side's Node objects from the real control plane once its nodes are stopped (the
/// Leases go with them: their owner is the Node), so that a later run, or other work sharing
/// the control plane, does not meet hundreds of NotReady nodes.
async fn delete_nodes(client: &kube::Client, side: &Side) {
    use k8s_openapi::api::core::v1::Node;
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    for i in 0..side.nodes {
        let name = format!("{}{i}", side.prefix);
        if let Err(e) = nodes.delete(&name, &Default::default()).await {
            eprintln!("hollow-bench: deleting node {name}: {e}");
        }
    }
}

/// What the pod watch saw of one pod, and when.
struct Seen {
    created: Instant,
    running: Option<Instant>,
    deleted: bool,
    /// The API server's times (s since the epoch): created, scheduled, the kubelet's
    /// `status.startTime`; and the wall clock when the watch saw it Running.
    created_at: Option<f64>,
    scheduled_at: Option<f64>,
    kubelet_saw_at: Option<f64>,
    running_seen_at: Option<f64>,
}

impl Seen {
    fn timeline(&self) -> Option<PodTimeline> {
        Some(PodTimeline {
            created: self.created_at?,
            scheduled: self.scheduled_at?,
            kubelet_saw: self.kubelet_saw_at?,
            running_seen: self.running_seen_at?,
        })
    }
}

/// Seconds since the epoch of an API time.
fn api_seconds(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> f64 {
    t.0.as_millisecond() as f64 / 1000.0
}

type Observed = Arc<Mutex<HashMap<String, Seen>>>;

/// Watches the bench's namespace (kept until the process ends): each pod's first sighting,
/// first Running and deletion.
fn observe_pods(client: kube::Client) -> Observed {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::{WatchStreamExt, watcher};
    let seen: Observed = Arc::default();
    let out = Arc::clone(&seen);
    tokio::spawn(async move {
        let pods: kube::Api<Pod> = kube::Api::namespaced(client, NAMESPACE);
        let mut stream = watcher::watcher(pods, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = stream.next().await {
            let now = Instant::now();
            let (pods, deleted) = match ev {
                Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => (vec![p], false),
                Ok(watcher::Event::Delete(p)) => (vec![p], true),
                _ => continue,
            };
            let mut m = seen.lock();
            for p in pods {
                let name = p.metadata.name.clone().unwrap_or_default();
                let e = m.entry(name).or_insert(Seen {
                    created: now,
                    running: None,
                    deleted: false,
                    created_at: None,
                    scheduled_at: None,
                    kubelet_saw_at: None,
                    running_seen_at: None,
                });
                let status = p.status.as_ref();
                let running = status.and_then(|s| s.phase.as_deref()) == Some("Running");
                if running && e.running.is_none() {
                    e.running = Some(now);
                    e.running_seen_at = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .ok()
                        .map(|d| d.as_secs_f64());
                }
                if e.created_at.is_none() {
                    e.created_at = p.metadata.creation_timestamp.as_ref().map(api_seconds);
                }
                if e.scheduled_at.is_none() {
                    e.scheduled_at = status
                        .and_then(|s| s.conditions.as_ref())
                        .and_then(|cs| {
                            cs.iter()
                                .find(|c| c.type_ == "PodScheduled" && c.status == "True")
                        })
                        .and_then(|c| c.last_transition_time.as_ref())
                        .map(api_seconds);
                }
                if e.kubelet_saw_at.is_none() {
                    e.kubelet_saw_at = status.and_then(|s| s.start_time.as_ref()).map(api_seconds);
                }
                e.deleted |= deleted;
            }
        }
    });
    out
}

async fn label_nodes(client: &kube::Client, side: &Side) -> Result<()> {
    use k8s_openapi::api::core::v1::Node;
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    for i in 0..side.nodes {
        let patch = json!({"metadata": {"labels": {"hollow-side": side.label()}}});
        nodes
            .patch(
                &format!("{}{i}", side.prefix),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await?;
    }
    Ok(())
}

async fn delete_pods(api: &Api, side: &Side) -> Result<()> {
    match api {
        Api::Fixture(s) => {
            for (name, _) in pod_phases(api).await? {
                if name.starts_with(side.prefix.as_str()) {
                    let key = Key {
                        resource: "pods".into(),
                        namespace: NAMESPACE.into(),
                        name,
                    };
                    let _ = s.store().delete(&key, None, None, None);
                }
            }
        }
        Api::Judge { client, .. } => {
            use k8s_openapi::api::apps::v1::Deployment;
            let deployments: kube::Api<Deployment> =
                kube::Api::namespaced(client.clone(), NAMESPACE);
            for d in 0..side.nodes {
                let _ = deployments
                    .delete(&format!("{}dep-{d}", side.prefix), &Default::default())
                    .await;
            }
        }
    }
    Ok(())
}

async fn connect(args: &Args) -> Result<Api> {
    match args.api.as_str() {
        "fixture" => Ok(Api::Fixture(ApiServer::start().await?)),
        "judge" => {
            let dir = std::env::var_os("KUBE_APISERVER_JUDGE")
                .map(PathBuf::from)
                .ok_or_else(|| anyhow!("--api judge needs KUBE_APISERVER_JUDGE (a Kubernetes 1.26 control plane directory)"))?;
            let text = std::fs::read_to_string(dir.join("run/admin.kubeconfig"))?;
            let kc = kube::config::Kubeconfig::from_yaml(&text)?;
            let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
            let client = kube::Client::try_from(config)?;
            let ns: kube::Api<k8s_openapi::api::core::v1::Namespace> =
                kube::Api::all(client.clone());
            let _ = ns
                .create(
                    &Default::default(),
                    &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?,
                )
                .await;
            if args.audit_log.is_none() {
                eprintln!("hollow-bench: no --audit-log: API request figures will be zero");
            }
            Ok(Api::Judge {
                dir,
                client,
                audit_log: args.audit_log.clone(),
            })
        }
        other => bail!("invalid value for --api: {other:?} (fixture or judge)"),
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.go_nodes > 0 {
        // The Go kubelets' container GC would remove other kubelets' pod log directories.
        integration::mountns::enter_with_private_pod_logs("hollow-bench with --go-nodes")?;
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(args))
}

async fn run(args: Args) -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::Builder::new().prefix("hollow-bench-").tempdir()?;
    let api = connect(&args).await?;
    let mut results = Vec::new();
    let ours = start_hollow(&api, dir.path(), "hollow-", args.nodes).await?;
    results.push(run_side(&api, ours, &args).await?);
    if args.go_nodes > 0 {
        match (&api, std::env::var_os("KUBELET_JUDGE")) {
            (Api::Judge { dir: judge, .. }, Some(go)) => {
                if args.go_nodes != args.nodes {
                    // This kubelet at the Go side's scale too: the same control plane load.
                    let mut same =
                        start_hollow(&api, dir.path(), "hollowb-", args.go_nodes).await?;
                    same.name = format!("this kubelet, {} nodes", args.go_nodes);
                    results.push(run_side(&api, same, &args).await?);
                }
                let side = start_go(
                    judge,
                    Path::new(&go),
                    dir.path(),
                    "gohollow-",
                    args.go_nodes,
                )
                .await?;
                results.push(run_side(&api, side, &args).await?);
            }
            (Api::Judge { .. }, None) => {
                eprintln!(
                    "SKIPPED the Go kubelet side: KUBELET_JUDGE is not set (a Go kubelet 1.26 binary built by hand)"
                );
            }
            _ => eprintln!("SKIPPED the Go kubelet side: it needs --api judge"),
        }
    }
    println!("{}", hollow::table(&results));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&results)?)?;
    }
    Ok(())
}
