//! End to end: the resource usage the `kubelet` BINARY reports on its authenticated port —
//! `/stats/summary` and `/metrics/resource` — against what the kernel measured (the pod's
//! network against its network namespace's counters), on both
//! runtimes (containerd's CRI and the embedded dockershim on Docker). A static pod runs a busy
//! container (`while :; do :; done`); the test finds its cgroup through the container's pid
//! (CRI ContainerStatus, verbose), its pod cgroup (the parent) and the root cgroup, and reads
//! them around two rounds of both endpoints about [`WINDOW`] apart. Every CPU figure (cumulative
//! deltas and `usageNanoCores`, container, pod and node) must be within [`TOLERANCE`] of the
//! cgroup's rate over the same window, and every memory working set within it of the cgroup's
//! usage minus inactive file pages. The comparisons are ratios of usage over one window, never
//! of how long something took; the measured figures are printed.

use crate::kubelet_secure_port::{client_identity, connector, get, relay};
use crate::kubelet_support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cri_proto::runtime::v1 as cri;
use integration::fixtures::{cleanup_sandboxes, sandbox_config};
use integration::require_testbed;
use integration::runtimes::{RuntimeKind, clients};
use kubelet_support::*;

/// How far apart the two rounds are.
const WINDOW: Duration = Duration::from_secs(5);
/// The largest relative difference allowed between a reported figure and the cgroup's.
const TOLERANCE: f64 = 0.10;

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Where a cgroup's cumulative CPU usage and memory figures are.
#[derive(Debug, Clone)]
enum Cgroup {
    /// cgroup v1: the cpuacct and memory hierarchies' directories.
    V1 { cpuacct: PathBuf, memory: PathBuf },
    /// cgroup v2: the unified directory.
    V2 { dir: PathBuf },
}

fn read_u64(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {text:?}: {e}", path.display()))
}

fn keyed(path: &Path, key: &str) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}: no {key} in {text:?}", path.display()))
}

impl Cgroup {
    /// The cgroup of process `pid`, from `/proc/<pid>/cgroup`.
    fn of_pid(pid: i64) -> Cgroup {
        let table = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("proc cgroup");
        let root = Path::new(CGROUP_ROOT);
        let (mut cpuacct, mut memory, mut unified) = (None, None, None);
        for line in table.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(_), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let rel = path.trim_start_matches('/');
            if controllers.is_empty() {
                unified = Some(root.join(rel));
            } else if controllers.split(',').any(|c| c == "cpuacct") {
                cpuacct = Some(root.join(controllers).join(rel));
            } else if controllers.split(',').any(|c| c == "memory") {
                memory = Some(root.join(controllers).join(rel));
            }
        }
        match (cpuacct, memory, unified) {
            (Some(cpuacct), Some(memory), _) => Cgroup::V1 { cpuacct, memory },
            (None, None, Some(dir)) => Cgroup::V2 { dir },
            other => panic!("no cgroup in {table:?}: {other:?}"),
        }
    }

    /// The root cgroup (the node).
    fn root() -> Cgroup {
        let root = Path::new(CGROUP_ROOT);
        if root.join("cgroup.controllers").exists() {
            return Cgroup::V2 {
                dir: root.to_path_buf(),
            };
        }
        let cpuacct = ["cpuacct", "cpu,cpuacct", "cpuacct,cpu"]
            .iter()
            .map(|d| root.join(d))
            .find(|d| d.join("cpuacct.usage").exists())
            .expect("a cpuacct hierarchy");
        Cgroup::V1 {
            cpuacct,
            memory: root.join("memory"),
        }
    }

    fn parent(&self) -> Cgroup {
        let up = |p: &PathBuf| p.parent().expect("parent").to_path_buf();
        match self {
            Cgroup::V1 { cpuacct, memory } => Cgroup::V1 {
                cpuacct: up(cpuacct),
                memory: up(memory),
            },
            Cgroup::V2 { dir } => Cgroup::V2 { dir: up(dir) },
        }
    }

    fn name(&self) -> String {
        let dir = match self {
            Cgroup::V1 { cpuacct, .. } => cpuacct,
            Cgroup::V2 { dir } => dir,
        };
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Cumulative CPU usage, core-nanoseconds.
    fn cpu(&self) -> u64 {
        match self {
            Cgroup::V1 { cpuacct, .. } => read_u64(&cpuacct.join("cpuacct.usage")),
            Cgroup::V2 { dir } => keyed(&dir.join("cpu.stat"), "usage_usec") * 1000,
        }
    }

    /// The working set: memory in use minus inactive file pages (hierarchical).
    fn working_set(&self) -> u64 {
        match self {
            Cgroup::V1 { memory, .. } => read_u64(&memory.join("memory.usage_in_bytes"))
                .saturating_sub(keyed(&memory.join("memory.stat"), "total_inactive_file")),
            Cgroup::V2 { dir } => read_u64(&dir.join("memory.current"))
                .saturating_sub(keyed(&dir.join("memory.stat"), "inactive_file")),
        }
    }
}

/// The three cgroups at one instant.
#[derive(Debug, Clone, Copy)]
struct Reading {
    at: Instant,
    container: u64,
    pod: u64,
    node: u64,
    container_ws: u64,
    pod_ws: u64,
}

struct Cgroups {
    container: Cgroup,
    pod: Cgroup,
    node: Cgroup,
}

impl Cgroups {
    fn read(&self) -> Reading {
        Reading {
            at: Instant::now(),
            container: self.container.cpu(),
            pod: self.pod.cpu(),
            node: self.node.cpu(),
            container_ws: self.container.working_set(),
            pod_ws: self.pod.working_set(),
        }
    }
}

/// Halfway between two readings (an endpoint read its figures somewhere between them).
fn between(a: &Reading, b: &Reading) -> Reading {
    let avg = |x: u64, y: u64| x / 2 + y / 2;
    Reading {
        at: a.at + (b.at - a.at) / 2,
        container: avg(a.container, b.container),
        pod: avg(a.pod, b.pod),
        node: avg(a.node, b.node),
        container_ws: avg(a.container_ws, b.container_ws),
        pod_ws: avg(a.pod_ws, b.pod_ws),
    }
}

/// A cgroup counter's rate from `a` to `b`, in cores.
fn cg_rate(a: &Reading, b: &Reading, f: fn(&Reading) -> u64) -> f64 {
    (f(b) - f(a)) as f64 / (b.at - a.at).as_nanos() as f64
}

/// One round: the cgroups, the summary, the cgroups, the metrics, the cgroups.
struct Round {
    before: Reading,
    summary: serde_json::Value,
    mid: Reading,
    metrics: String,
    after: Reading,
}

async fn round(relay: u16, cg: &Cgroups) -> Round {
    let before = cg.read();
    let (code, body) = get(relay, "/stats/summary").await.expect("/stats/summary");
    let mid = cg.read();
    assert_eq!(code, 200, "{body}");
    let summary = serde_json::from_str(&body).expect("summary JSON");
    let (code, metrics) = get(relay, "/metrics/resource")
        .await
        .expect("/metrics/resource");
    let after = cg.read();
    assert_eq!(code, 200, "{metrics}");
    Round {
        before,
        summary,
        mid,
        metrics,
        after,
    }
}

/// `reported` agrees with `measured` within [`TOLERANCE`]; the figures are printed.
fn agrees(what: &str, reported: f64, measured: f64, failures: &mut Vec<String>) {
    let ratio = reported / measured;
    let line = format!("{what}: reported {reported:.4}, cgroup {measured:.4}, ratio {ratio:.4}");
    eprintln!("{line}");
    if !(ratio - 1.0).abs().le(&TOLERANCE) {
        failures.push(line);
    }
}

async fn container_pid(endpoint: &str, id: &str) -> Option<i64> {
    let (mut rt, _) = clients(endpoint).await.ok()?;
    let st = rt
        .container_status(cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: true,
        })
        .await
        .ok()?
        .into_inner();
    let info: serde_json::Value = serde_json::from_str(st.info.get("info")?).ok()?;
    info["pid"].as_i64().filter(|p| *p > 0)
}

const NS: f64 = 1e9;

async fn kubelet_resource_metrics(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_resource_metrics[{}]", kind.name()));
    let mut k = Kubelet::new(kind, "klres");
    let uid = format!("{}-busy", k.node);
    let ca = k.dir.path().join("client-ca.pem");
    let identity = client_identity(&ca);
    k.write_manifest(
        "busy.yaml",
        &pod_manifest("busy", &uid, &tb.busybox_image, "while :; do :; done", ""),
    );
    let secure_port = free_port();
    k.spawn(
        &tb,
        &[
            "--port".into(),
            secure_port.to_string(),
            "--client-ca-file".into(),
            ca.display().to_string(),
        ],
    );
    let pod_name = k.pod_name("busy");
    let endpoint = k.endpoint(&tb);
    let outcome = tokio::spawn({
        let (port, log, uid) = (k.port, k.log.clone(), uid.clone());
        async move {
            let ids = wait_for("the busy pod running", &log, || async {
                running_ids(&pod(port, &uid).await?)
            })
            .await;
            let id = ids["main"]
                .split_once("://")
                .expect("runtime://id")
                .1
                .to_string();
            let pid = wait_for("the container's pid", &log, || {
                container_pid(&endpoint, &id)
            })
            .await;
            let container = Cgroup::of_pid(pid);
            let pod = container.parent();
            assert!(pod.name().contains("pod"), "pod cgroup: {pod:?}");
            let cg = Cgroups {
                container,
                pod,
                node: Cgroup::root(),
            };
            eprintln!("cgroups: {:?} in {:?}", cg.container, cg.pod);
            let with_cert = relay(secure_port, connector(Some(identity))).await;

            // A sandbox that is not ready sits on the runtime through every summary below (not
            // this kubelet's; the runtime is shared): containerd 1.6 fails a
            // ListPodSandboxStats sent without a filter on such a sandbox, so the kubelet must
            // send an empty filter, as upstream does.
            let (mut rt, _) = clients(&endpoint).await.expect("CRI clients");
            let log_root = tempfile::tempdir().expect("log dir");
            let stopped = rt
                .run_pod_sandbox(cri::RunPodSandboxRequest {
                    config: Some(sandbox_config("klres-notready", log_root.path())),
                    runtime_handler: String::new(),
                })
                .await
                .expect("RunPodSandbox")
                .into_inner()
                .pod_sandbox_id;
            rt.stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: stopped.clone(),
            })
            .await
            .expect("StopPodSandbox");
            let outcome = tokio::spawn(async move {
                measure(kind, with_cert, cg, uid, pod_name, pid, port, log).await
            })
            .await;
            cleanup_sandboxes(&mut rt, std::slice::from_ref(&stopped)).await;
            if let Err(e) = outcome {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    })
    .await;
    k.shutdown(&tb, std::slice::from_ref(&uid)).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// The comparisons of the kubelet's figures with the cgroups', once the busy pod runs.
#[allow(clippy::too_many_arguments)]
async fn measure(
    kind: RuntimeKind,
    with_cert: u16,
    cg: Cgroups,
    uid: String,
    pod_name: String,
    pid: i64,
    port: u16,
    log: PathBuf,
) {
    // Until the container has a rate: every CPU figure then has a previous sample.
    wait_for("the busy container's usageNanoCores", &log, || async {
        let (_, body) = get(with_cert, "/stats/summary").await?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let p = v["pods"]
            .as_array()?
            .iter()
            .find(|p| p["podRef"]["uid"] == uid.as_str())?;
        p["containers"][0]["cpu"]["usageNanoCores"]
            .as_u64()
            .map(|_| ())
    })
    .await;
    let _ = get(with_cert, "/metrics/resource").await;
    // The read-only port serves them too (upstream's default handlers), without
    // authentication.
    let ro = http_get(port, "/stats/summary")
        .await
        .expect("read-only /stats/summary");
    let v: serde_json::Value = serde_json::from_str(&ro).expect("summary json");
    assert!(
        v["pods"]
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p["podRef"]["uid"] == uid.as_str())),
        "the pod in the read-only summary: {ro}"
    );
    let ro = http_get(port, "/metrics/resource")
        .await
        .expect("read-only /metrics/resource");
    assert!(ro.contains("container_cpu_usage_seconds_total{"), "{ro}");

    // The pod's network (its sandbox's namespace, read from the sandbox's process) lies between
    // two readings of the pod's network namespace.
    let eth0 = || -> (u64, u64) {
        let dev = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).expect("net/dev");
        let line = dev
            .lines()
            .find(|l| l.trim_start().starts_with("eth0:"))
            .unwrap_or_else(|| panic!("eth0 in the pod: {dev}"));
        let f: Vec<u64> = line
            .split_once(':')
            .map(|(_, r)| {
                r.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        (f[0], f[8])
    };
    let before = eth0();
    let (_, body) = get(with_cert, "/stats/summary").await.expect("summary");
    let after = eth0();
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    let net = v["pods"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["podRef"]["uid"] == uid.as_str()))
        .map(|p| p["network"].clone())
        .expect("the pod in the summary");
    assert_eq!(net["name"], "eth0", "the pod's network: {net}");
    let (rx, tx) = (
        net["rxBytes"].as_u64().expect("rxBytes"),
        net["txBytes"].as_u64().expect("txBytes"),
    );
    assert!(
        (before.0..=after.0).contains(&rx) && (before.1..=after.1).contains(&tx),
        "pod network rx {rx} tx {tx} between {before:?} and {after:?}"
    );
    eprintln!("[{}] pod network: rx {rx} B, tx {tx} B", kind.name());

    let a = round(with_cert, &cg).await;
    tokio::time::sleep(WINDOW).await;
    let b = round(with_cert, &cg).await;

    let find_pod = |s: &serde_json::Value| -> serde_json::Value {
        s["pods"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["podRef"]["uid"] == uid.as_str()))
            .cloned()
            .unwrap_or_else(|| panic!("pod {uid} in {s}"))
    };
    let (pa, pb) = (find_pod(&a.summary), find_pod(&b.summary));
    assert_eq!(pb["podRef"]["name"], pod_name.as_str());
    assert_eq!(pb["podRef"]["namespace"], "default");
    let (ca_, cb) = (&pa["containers"][0], &pb["containers"][0]);
    assert_eq!(cb["name"], "main");
    assert!(
        cb["startTime"].is_string() && pb["startTime"].is_string(),
        "{pb}"
    );
    let num = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("a number: {v}")) as f64;

    let mut failures = Vec::new();
    let (sa, sb) = (between(&a.before, &a.mid), between(&b.before, &b.mid));
    let (ma, mb) = (between(&a.mid, &a.after), between(&b.mid, &b.after));
    let secs = |x: &Reading, y: &Reading| (y.at - x.at).as_secs_f64();
    let container_rate = cg_rate(&sa, &sb, |r| r.container);
    eprintln!(
        "[{}] window {:.3} s; busy container {container_rate:.4} cores, pod {:.4}, node {:.4}",
        kind.name(),
        secs(&sa, &sb),
        cg_rate(&sa, &sb, |r| r.pod),
        cg_rate(&sa, &sb, |r| r.node),
    );
    assert!(
        container_rate > 0.1,
        "the busy loop runs: {container_rate} cores"
    );

    // /stats/summary: cumulative usage over the window between the two summaries.
    let delta = |x: &serde_json::Value, y: &serde_json::Value| (num(y) - num(x)) / NS;
    agrees(
        "summary container usageCoreNanoSeconds rate",
        delta(
            &ca_["cpu"]["usageCoreNanoSeconds"],
            &cb["cpu"]["usageCoreNanoSeconds"],
        ) / secs(&sa, &sb),
        container_rate,
        &mut failures,
    );
    agrees(
        "summary pod usageCoreNanoSeconds rate",
        delta(
            &pa["cpu"]["usageCoreNanoSeconds"],
            &pb["cpu"]["usageCoreNanoSeconds"],
        ) / secs(&sa, &sb),
        cg_rate(&sa, &sb, |r| r.pod),
        &mut failures,
    );
    let (na, nb) = (&a.summary["node"], &b.summary["node"]);
    agrees(
        "summary node usageCoreNanoSeconds rate",
        delta(
            &na["cpu"]["usageCoreNanoSeconds"],
            &nb["cpu"]["usageCoreNanoSeconds"],
        ) / secs(&sa, &sb),
        cg_rate(&sa, &sb, |r| r.node),
        &mut failures,
    );
    // usageNanoCores: the rate since the previous sample, taken in round a (the
    // summary, or the metrics' CRI call where the runtime rates it) — the cgroups'
    // rate from between a's two requests to just before b's summary.
    let since_a = |f: fn(&Reading) -> u64| cg_rate(&a.mid, &b.before, f);
    agrees(
        "summary container usageNanoCores",
        num(&cb["cpu"]["usageNanoCores"]) / NS,
        since_a(|r| r.container),
        &mut failures,
    );
    agrees(
        "summary pod usageNanoCores",
        num(&pb["cpu"]["usageNanoCores"]) / NS,
        since_a(|r| r.pod),
        &mut failures,
    );
    agrees(
        "summary node usageNanoCores",
        num(&nb["cpu"]["usageNanoCores"]) / NS,
        since_a(|r| r.node),
        &mut failures,
    );
    // Working sets, against the cgroups read around the request.
    agrees(
        "summary container workingSetBytes",
        num(&cb["memory"]["workingSetBytes"]),
        sb.container_ws as f64,
        &mut failures,
    );
    agrees(
        "summary pod workingSetBytes",
        num(&pb["memory"]["workingSetBytes"]),
        sb.pod_ws as f64,
        &mut failures,
    );

    // /metrics/resource: the same through upstream's metric names.
    let container = [
        ("container", "main"),
        ("namespace", "default"),
        ("pod", pod_name.as_str()),
    ];
    let pod_labels = [("namespace", "default"), ("pod", pod_name.as_str())];
    let get_metric = |r: &Round, name: &str, labels: &[(&str, &str)]| {
        metric(&r.metrics, name, labels)
            .unwrap_or_else(|| panic!("{name} {labels:?} in:\n{}", r.metrics))
    };
    for (name, labels, f) in [
        (
            "container_cpu_usage_seconds_total",
            &container[..],
            (|r: &Reading| r.container) as fn(&Reading) -> u64,
        ),
        ("pod_cpu_usage_seconds_total", &pod_labels[..], |r| r.pod),
        ("node_cpu_usage_seconds_total", &[][..], |r| r.node),
    ] {
        let (va, ta) = get_metric(&a, name, labels);
        let (vb, tb_) = get_metric(&b, name, labels);
        let measured = cg_rate(&ma, &mb, f);
        agrees(
            &format!("metrics {name} rate over the requests"),
            (vb - va) / secs(&ma, &mb),
            measured,
            &mut failures,
        );
        // As Prometheus' rate() takes it: over the samples' own time stamps.
        let (ta, tb_) = (ta.expect("a time stamp"), tb_.expect("a time stamp"));
        agrees(
            &format!("metrics {name} rate over its time stamps"),
            (vb - va) / ((tb_ - ta) as f64 / 1000.0),
            measured,
            &mut failures,
        );
    }
    agrees(
        "metrics container_memory_working_set_bytes",
        get_metric(&b, "container_memory_working_set_bytes", &container).0,
        mb.container_ws as f64,
        &mut failures,
    );
    agrees(
        "metrics pod_memory_working_set_bytes",
        get_metric(&b, "pod_memory_working_set_bytes", &pod_labels).0,
        mb.pod_ws as f64,
        &mut failures,
    );
    let start = get_metric(&b, "container_start_time_seconds", &container).0;
    assert!(start > 1e9, "container_start_time_seconds {start}");
    assert_eq!(
        metric(&b.metrics, "scrape_error", &[]).map(|m| m.0),
        Some(0.0)
    );
    assert!(
        b.metrics
            .contains("# TYPE container_cpu_usage_seconds_total counter"),
        "{}",
        b.metrics
    );
    assert!(
        failures.is_empty(),
        "[{}] figures off by more than {:.0} %:\n{}",
        kind.name(),
        TOLERANCE * 100.0,
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_resource_metrics_containerd() {
    kubelet_resource_metrics(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_resource_metrics_dockershim() {
    kubelet_resource_metrics(RuntimeKind::Dockershim).await;
}
