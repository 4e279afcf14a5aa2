//! `scrape-bench`: what a Prometheus scrape of every kubelet metrics endpoint costs the kubelet
//! in CPU, with N (default 110) pods running, this kubelet and the Go kubelet 1.26
//! (`KUBELET_JUDGE`) side by side in one run, plus each one's RSS after the scrapes.
//!
//! Both kubelets run, one at a time, the same static pods on the same root directory and the
//! same private containerd (with a CNI network of its own): the second side adopts the pods the
//! first one started, so every side scrapes the same running containers. Each side, once its
//! pods have settled: an idle window, then for each endpoint (`/metrics`, `/metrics/cadvisor`,
//! `/metrics/probes`, `/metrics/resource`: kube-prometheus's kubelet ServiceMonitor; and
//! `/stats/summary`: metrics-server's) `--scrapes` GETs back to back on the read-only port with
//! Prometheus's `Accept` header, then a second idle window. An endpoint's cost is the kubelet
//! process's CPU time over its GETs less what it spends idle over as long (the mean rate of the
//! two idle windows), per GET. Sides alternate `--repeat` times; the ratio is of medians.
//!
//! The whole benchmark runs in a mount namespace of its own with private `/var/log/pods` and
//! `/var/log/containers` (the Go kubelet deletes every pod log directory it does not know,
//! which would break other kubelets on the machine), and the pods' cgroups sit under a cgroup
//! root of its own. Prints a markdown table and optionally JSON; asserts nothing about time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use cri_proto::runtime::v1 as cri;
use integration::containerd::PrivateContainerd;
use integration::fixtures::{ensure_image, unique_name};
use integration::kubelet_proc::{
    KubeletProc, manifest, median, proc_cpu_seconds, rss_mib, rss_parts_mib, start_kubelet,
};
use integration::soak::network::CniNetwork;
use integration::testbed::Testbed;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// What kube-prometheus's kubelet ServiceMonitor scrapes, then what metrics-server reads.
const ENDPOINTS: [&str; 5] = [
    "/metrics",
    "/metrics/cadvisor",
    "/metrics/probes",
    "/metrics/resource",
    "/stats/summary",
];

/// Prometheus 2's scrape `Accept` header.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

#[derive(Debug, Parser)]
#[command(
    name = "scrape-bench",
    about = "Kubelet CPU per scrape of every metrics endpoint and RSS, this kubelet vs the Go kubelet"
)]
struct Args {
    /// Static pods running during the scrapes.
    #[arg(long, default_value_t = 110)]
    pods: usize,
    /// GETs of each endpoint per side and repetition.
    #[arg(long, default_value_t = 10)]
    scrapes: usize,
    /// Repetitions (each side once per repetition, alternating).
    #[arg(long, default_value_t = 2)]
    repeat: usize,
    /// Seconds of each idle window.
    #[arg(long, default_value_t = 15)]
    idle_seconds: u64,
    /// Seconds a side runs with every pod up before it is measured.
    #[arg(long, default_value_t = 30)]
    settle_seconds: u64,
    /// Write the report as JSON here too.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Keep the benchmark's directory (the kubelets' and containerd's logs).
    #[arg(long)]
    keep_dir: bool,
}

fn main() -> Result<()> {
    integration::mountns::enter_with_private_pod_logs("scrape-bench")?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async { integration::interrupt::until_interrupted(run())?.await })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Side {
    Ours,
    Go,
}

impl Side {
    fn label(self) -> &'static str {
        match self {
            Side::Ours => "this kubelet",
            Side::Go => "Go kubelet 1.26",
        }
    }
}

/// One endpoint's figures for one side and repetition.
#[derive(Debug, Clone, serde::Serialize)]
struct EndpointCost {
    /// Kubelet CPU per GET beyond its idle rate, milliseconds.
    cpu_ms: f64,
    /// Mean answer time, milliseconds.
    latency_ms: f64,
    /// Body size, KiB (last GET).
    kib: f64,
    /// Sample lines (non-empty, not `#`) of the last GET; for `/stats/summary`, 0.
    series: usize,
    /// Highest RSS seen during its GETs, MiB.
    rss_mib_peak: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
struct Measurement {
    side: Side,
    repetition: usize,
    /// Idle CPU of the kubelet, millicores (mean of both windows).
    idle_millicores: f64,
    endpoints: BTreeMap<String, EndpointCost>,
    /// Sum over the endpoints: one scrape of everything.
    all_cpu_ms: f64,
    /// RSS with the pods settled, before any GET.
    rss_mib_before: f64,
    /// Highest RSS seen (every 200 ms) from the first GET to the end of the last idle window.
    rss_mib_peak: f64,
    /// RSS at the end of the last idle window (the kubelet gives freed heap back every 10 s).
    rss_mib_after: f64,
    /// Its anonymous and file-backed parts.
    rss_mib_after_anon_file: (f64, f64),
    pods_running: usize,
}

#[derive(Debug, serde::Serialize)]
struct Report {
    pods: usize,
    scrapes: usize,
    idle_seconds: u64,
    measurements: Vec<Measurement>,
    /// Median per endpoint and side: (ours, go, ours / go).
    summary: BTreeMap<String, (f64, Option<f64>, Option<f64>)>,
    /// Medians (ours, Go) of RSS before the GETs, at the peak, and settled after them.
    rss_mib_before: (f64, Option<f64>),
    rss_mib_peak: (f64, Option<f64>),
    rss_mib_after: (f64, Option<f64>),
}

async fn run() -> Result<()> {
    let args = Args::parse();
    let tb = Testbed::get("scrape-bench")
        .ok_or_else(|| anyhow!("needs the test bed (root, hack/testbed.sh up)"))?;
    let judge = std::env::var_os("KUBELET_JUDGE").map(PathBuf::from);
    if judge.is_none() {
        eprintln!(
            "scrape-bench: SKIPPED the Go kubelet side: KUBELET_JUDGE is not set (a Go kubelet 1.26 binary built by hand); measuring this kubelet only"
        );
    }
    let tmp = tempfile::Builder::new()
        .prefix("scrape-bench-")
        .disable_cleanup(args.keep_dir)
        .tempdir_in("/var/lib")?;
    if args.keep_dir {
        eprintln!("scrape-bench: keeping {}", tmp.path().display());
    }
    let dir = tmp.path().to_path_buf();
    let id = unique_name("scrape");
    let cgroup_root = format!("/{id}");
    make_cgroup_root(&cgroup_root)?;
    let net = CniNetwork::create(&dir, Some(PathBuf::from("/var/lib/cni")))?;
    let cdir = dir.join("containerd");
    std::fs::create_dir_all(&cdir)?;
    let ctd = tokio::task::block_in_place(|| PrivateContainerd::start(&cdir, &net.conf_dir))?;
    let outcome = bench(&args, &tb, judge.as_deref(), &dir, &id, &cgroup_root, &ctd).await;
    integration::runtimes::remove_all_sandboxes(&ctd.endpoint).await;
    drop(ctd);
    drop(net);
    integration::soak::leaks::remove_cgroup_root(
        Path::new(integration::soak::leaks::CGROUP_MOUNT),
        &cgroup_root,
    );
    // The Go kubelet bind-mounts its root directory on itself (`MakeRShared`): undone, or the
    // directory cannot be removed.
    let _ = Command::new("umount")
        .args(["-R", "-l"])
        .arg(dir.join("root"))
        .stderr(Stdio::null())
        .status();
    let report = outcome?;
    println!("{}", markdown(&report, judge.is_some()));
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}

/// Makes `root` in every cgroup v1 hierarchy (the Go kubelet wants its `--cgroup-root` to
/// exist), with cpuset's CPUs and memory nodes copied from the top (an empty cpuset takes no
/// task), or in the v2 hierarchy.
fn make_cgroup_root(root: &str) -> Result<()> {
    let mount = Path::new(integration::soak::leaks::CGROUP_MOUNT);
    let rel = root.trim_start_matches('/');
    let v2 = mount.join("cgroup.controllers").exists();
    if v2 {
        std::fs::create_dir_all(mount.join(rel))?;
        return Ok(());
    }
    for h in std::fs::read_dir(mount)?.flatten() {
        let name = h.file_name().to_string_lossy().into_owned();
        if name == "unified" || !h.path().is_dir() {
            continue;
        }
        let dir = h.path().join(rel);
        std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
        if name.split(',').any(|c| c == "cpuset") {
            for f in ["cpuset.cpus", "cpuset.mems"] {
                let v = std::fs::read_to_string(h.path().join(f))?;
                std::fs::write(dir.join(f), v.trim())?;
            }
        }
    }
    Ok(())
}

async fn bench(
    args: &Args,
    tb: &Testbed,
    judge: Option<&Path>,
    dir: &Path,
    id: &str,
    cgroup_root: &str,
    ctd: &PrivateContainerd,
) -> Result<Report> {
    let (mut rt, mut img) = integration::runtimes::clients(&ctd.endpoint).await?;
    for i in [tb.busybox_image.as_str(), tb.pause_image.as_str()] {
        ensure_image(&mut img, i)
            .await
            .with_context(|| format!("pulling {i} into the private containerd"))?;
    }
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests)?;
    for i in 0..args.pods {
        let name = format!("scrape-{i}");
        let uid = format!("{id}-{i}");
        std::fs::write(
            manifests.join(format!("{name}.yaml")),
            manifest(&name, &uid, &tb.busybox_image),
        )?;
    }
    let node = id.to_string();
    let mut sides = Vec::new();
    for _ in 0..args.repeat {
        if judge.is_some() {
            sides.push(Side::Go);
        }
        sides.push(Side::Ours);
    }
    let mut measurements = Vec::new();
    for (n, side) in sides.into_iter().enumerate() {
        let mut k = match (side, judge) {
            (Side::Go, Some(j)) => go_kubelet(j, tb, &ctd.endpoint, dir, &node, cgroup_root)?,
            _ => start_kubelet(
                tb,
                &ctd.endpoint,
                dir,
                &node,
                &["--cgroup-root".to_string(), cgroup_root.to_string()],
            )?,
        };
        k.wait_healthy(Duration::from_secs(120))
            .await
            .with_context(|| format!("{} did not come up", side.label()))?;
        let pid = k.child.id();
        let up = wait_running(&mut rt, id, args.pods, Duration::from_secs(600)).await?;
        eprintln!(
            "scrape-bench: {} runs {up} pods; settling {} s",
            side.label(),
            args.settle_seconds
        );
        tokio::time::sleep(Duration::from_secs(args.settle_seconds)).await;
        let m = measure(args, side, n / 2, pid, k.port, up).await?;
        eprintln!(
            "scrape-bench: {}: {:.1} ms CPU per scrape of every endpoint, idle {:.0} mc, RSS {:.1} MiB",
            side.label(),
            m.all_cpu_ms,
            m.idle_millicores,
            m.rss_mib_after
        );
        measurements.push(m);
        drop(k); // SIGTERM; the pods keep running for the next side.
    }
    Ok(summarize(args, measurements))
}

/// The Go kubelet on the private containerd with the same root directory, manifests and
/// cgroup root as this kubelet's side, serving its read-only port on loopback.
fn go_kubelet(
    judge: &Path,
    tb: &Testbed,
    endpoint: &str,
    dir: &Path,
    node: &str,
    cgroup_root: &str,
) -> Result<KubeletProc> {
    let port = free_port()?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("go-kubelet.log"))?;
    let manifests = dir.join("manifests");
    let child = Command::new(judge)
        .args([
            "--container-runtime=remote",
            "--container-runtime-endpoint",
            endpoint,
        ])
        .arg("--root-dir")
        .arg(dir.join("root"))
        .arg("--pod-manifest-path")
        .arg(&manifests)
        .args(["--cgroup-driver", "cgroupfs", "--cgroup-root", cgroup_root])
        .args(["--fail-swap-on=false", "--make-iptables-util-chains=false"])
        .args([
            "--address",
            "127.0.0.1",
            "--read-only-port",
            &port.to_string(),
        ])
        .args(["--port", &free_port()?.to_string(), "--healthz-port", "0"])
        .args(["--hostname-override", node])
        .args(["--pod-infra-container-image", &tb.pause_image])
        .args(["--eviction-hard", "memory.available<100Mi"])
        .args([
            "--image-gc-high-threshold",
            "100",
            "--image-gc-low-threshold",
            "99",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .context("starting the Go kubelet")?;
    Ok(KubeletProc {
        child,
        port,
        manifests,
        endpoint: endpoint.to_string(),
    })
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Waits until `want` containers of the benchmark's pods (UIDs starting with `id`) run.
async fn wait_running(
    rt: &mut cri_proto::runtime::v1::runtime_service_client::RuntimeServiceClient<
        tonic::transport::Channel,
    >,
    id: &str,
    want: usize,
    timeout: Duration,
) -> Result<usize> {
    let start = Instant::now();
    loop {
        let running = rt
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter {
                    state: Some(cri::ContainerStateValue {
                        state: cri::ContainerState::ContainerRunning as i32,
                    }),
                    ..Default::default()
                }),
            })
            .await?
            .into_inner()
            .containers
            .iter()
            .filter(|c| {
                c.labels
                    .get("io.kubernetes.pod.uid")
                    .is_some_and(|u| u.starts_with(id))
            })
            .count();
        if running >= want {
            return Ok(running);
        }
        if start.elapsed() > timeout {
            bail!("{running} of {want} containers running after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `GET path` on loopback `port` with HTTP/1.0 (no chunked body): the body of a 200.
async fn get(port: u16, path: &str) -> Result<String> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let req = format!(
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: {PROMETHEUS_ACCEPT}\r\nUser-Agent: Prometheus/2.42.0\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("GET {path}: no HTTP head"))?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200") {
        bail!("GET {path}: {status}");
    }
    Ok(body.to_string())
}

fn cpu(pid: u32) -> Result<f64> {
    proc_cpu_seconds(pid).ok_or_else(|| anyhow!("the kubelet (pid {pid}) is gone"))
}

/// CPU seconds of `pid` over `seconds` of idling.
async fn idle(pid: u32, seconds: u64) -> Result<f64> {
    let c0 = cpu(pid)?;
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    Ok((cpu(pid)? - c0) / t0.elapsed().as_secs_f64())
}

async fn measure(
    args: &Args,
    side: Side,
    repetition: usize,
    pid: u32,
    port: u16,
    pods_running: usize,
) -> Result<Measurement> {
    let rss_mib_before = rss_mib(pid).unwrap_or(0.0);
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                if let Some(r) = rss_mib(pid) {
                    peak.fetch_max((r * 1024.0) as u64, std::sync::atomic::Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    // A first GET of each endpoint, not counted: caches and first samples.
    for e in ENDPOINTS {
        get(port, e).await?;
    }
    let rate_before = idle(pid, args.idle_seconds).await?;
    let mut raw = Vec::new();
    let mut peak_all = peak.swap(0, std::sync::atomic::Ordering::Relaxed) as f64 / 1024.0;
    for e in ENDPOINTS {
        let c0 = cpu(pid)?;
        let t0 = Instant::now();
        let mut body = String::new();
        for _ in 0..args.scrapes {
            body = get(port, e).await?;
        }
        let elapsed = t0.elapsed().as_secs_f64();
        let used = cpu(pid)? - c0;
        let rss_peak = rss_mib(pid)
            .unwrap_or(0.0)
            .max(peak.swap(0, std::sync::atomic::Ordering::Relaxed) as f64 / 1024.0);
        peak_all = peak_all.max(rss_peak);
        let series = if e == "/stats/summary" {
            0
        } else {
            body.lines()
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .count()
        };
        raw.push((e, used, elapsed, body.len(), series, rss_peak));
    }
    let rate_after = idle(pid, args.idle_seconds).await?;
    sampler.abort();
    let rss_mib_after = rss_mib(pid).unwrap_or(0.0);
    let rss_mib_after_anon_file = rss_parts_mib(pid).unwrap_or((0.0, 0.0));
    let rss_mib_peak = (peak.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1024.0)
        .max(peak_all)
        .max(rss_mib_after);
    let rate = (rate_before + rate_after) / 2.0;
    let n = args.scrapes.max(1) as f64;
    let endpoints: BTreeMap<String, EndpointCost> = raw
        .into_iter()
        .map(|(e, used, elapsed, bytes, series, rss_mib_peak)| {
            (
                e.to_string(),
                EndpointCost {
                    cpu_ms: (used - rate * elapsed) * 1000.0 / n,
                    latency_ms: elapsed * 1000.0 / n,
                    kib: bytes as f64 / 1024.0,
                    series,
                    rss_mib_peak,
                },
            )
        })
        .collect();
    Ok(Measurement {
        side,
        repetition,
        idle_millicores: rate * 1000.0,
        all_cpu_ms: endpoints.values().map(|c| c.cpu_ms).sum(),
        endpoints,
        rss_mib_before,
        rss_mib_peak,
        rss_mib_after,
        rss_mib_after_anon_file,
        pods_running,
    })
}

fn summarize(args: &Args, measurements: Vec<Measurement>) -> Report {
    let med = |side: Side, f: &dyn Fn(&Measurement) -> f64| -> Option<f64> {
        let v: Vec<f64> = measurements
            .iter()
            .filter(|m| m.side == side)
            .map(f)
            .collect();
        (!v.is_empty()).then(|| median(v))
    };
    let mut summary = BTreeMap::new();
    let mut rows: Vec<String> = ENDPOINTS.iter().map(|e| e.to_string()).collect();
    rows.push("all".to_string());
    for e in rows {
        let f = |m: &Measurement| {
            if e == "all" {
                m.all_cpu_ms
            } else {
                m.endpoints.get(&e).map_or(0.0, |c| c.cpu_ms)
            }
        };
        let ours = med(Side::Ours, &f).unwrap_or(0.0);
        let go = med(Side::Go, &f);
        summary.insert(e.clone(), (ours, go, go.map(|g| ours / g)));
    }
    let rss =
        |f: &dyn Fn(&Measurement) -> f64| (med(Side::Ours, f).unwrap_or(0.0), med(Side::Go, f));
    let (rss_mib_before, rss_mib_peak, rss_mib_after) = (
        rss(&|m| m.rss_mib_before),
        rss(&|m| m.rss_mib_peak),
        rss(&|m| m.rss_mib_after),
    );
    Report {
        pods: args.pods,
        scrapes: args.scrapes,
        idle_seconds: args.idle_seconds,
        measurements,
        rss_mib_before,
        rss_mib_peak,
        rss_mib_after,
        summary,
    }
}

fn markdown(r: &Report, with_go: bool) -> String {
    let mut out = format!(
        "scrape-bench: {} pods, {} GETs per endpoint per side and repetition, medians\n\n",
        r.pods, r.scrapes
    );
    let last = |side: Side, e: &str| {
        r.measurements
            .iter()
            .rev()
            .find(|m| m.side == side)
            .and_then(|m| m.endpoints.get(e).cloned())
    };
    out.push_str("| endpoint | this kubelet CPU ms/scrape | Go kubelet CPU ms/scrape | ratio | series (ours / Go) | KiB (ours / Go) |\n|---|---:|---:|---:|---|---|\n");
    let mut rows: Vec<&str> = ENDPOINTS.to_vec();
    rows.push("all");
    for e in rows {
        let Some((ours, go, ratio)) = r.summary.get(e) else {
            continue;
        };
        let opt = |v: Option<f64>, p: usize| v.map_or("n/a".to_string(), |v| format!("{v:.p$}"));
        let (series, kib) = match (last(Side::Ours, e), last(Side::Go, e)) {
            (Some(o), g) => (
                format!(
                    "{} / {}",
                    o.series,
                    g.as_ref().map_or("n/a".into(), |g| g.series.to_string())
                ),
                format!(
                    "{:.0} / {}",
                    o.kib,
                    g.map_or("n/a".into(), |g| format!("{:.0}", g.kib))
                ),
            ),
            _ => ("".into(), "".into()),
        };
        out.push_str(&format!(
            "| {e} | {ours:.2} | {} | {} | {series} | {kib} |\n",
            opt(*go, 2),
            opt(*ratio, 2)
        ));
    }
    let idle = |side: Side| {
        let v: Vec<f64> = r
            .measurements
            .iter()
            .filter(|m| m.side == side)
            .map(|m| m.idle_millicores)
            .collect();
        (!v.is_empty()).then(|| median(v))
    };
    let fmt = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.1}"));
    out.push_str("\n| | this kubelet | Go kubelet |\n|---|---:|---:|\n");
    for (what, (ours, go)) in [
        ("RSS before the GETs, MiB", r.rss_mib_before),
        ("RSS peak during the GETs, MiB", r.rss_mib_peak),
        ("RSS settled after them, MiB", r.rss_mib_after),
    ] {
        out.push_str(&format!("| {what} | {ours:.1} | {} |\n", fmt(go)));
    }
    out.push_str(&format!(
        "| idle CPU, millicores | {} | {} |\n",
        fmt(idle(Side::Ours)),
        fmt(idle(Side::Go))
    ));
    if !with_go {
        out.push_str("\n(KUBELET_JUDGE not set: no Go kubelet side)\n");
    }
    out
}
