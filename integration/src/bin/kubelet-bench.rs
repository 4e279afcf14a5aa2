//! `kubelet-bench`: how long the kubelet takes from manifests written to every pod Running in
//! its `GET /pods`, and from manifests removed to every sandbox gone from the runtime ("back to
//! nothing"), for 1 and for N (default 30) pods, side by side in one run with the same
//! sandboxes and containers created (and stopped and removed) by direct CRI calls at the same
//! parallelism (every pod at once, as the kubelet's pod workers do); plus, with N pods running,
//! the kubelet's CPU per PLEG relist (process CPU over an idle window divided by the relists in
//! it: an upper bound, since everything else the idle kubelet does is counted too) and its RSS.
//!
//! `--runtime` picks the runtime: `containerd` (the test bed's, the default, so the kubelet's
//! RSS excludes a dockershim), `embedded-dockershim` (the kubelet's in-process dockershim on
//! the test bed's Docker and CNI network; the direct side then talks to a standalone
//! `dockershim` process on the same Docker, so both sides run the same shim code, and the
//! kubelet's CPU and RSS include its dockershim's), or any CRI endpoint. On the embedded
//! dockershim it also measures the shims as processes of their own: a fresh standalone
//! `dockershim` (and cri-dockerd when `CRI_DOCKERD` names its binary) with a kubelet on it,
//! RSS at start and with N pods idle, CPU over the idle window (the kubelet's relists and
//! stats calls and Docker's events included).
//! Each batch starts once the machine is quiet (see `settle`), so neither side starts while
//! something else still keeps the CPUs busy; the seconds waited are in the JSON.
//! Prints a markdown table and optionally JSON; asserts nothing about time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use clap::Parser;
use cri_proto::runtime::v1 as cri;
use integration::fixtures::{busybox_container, ensure_image, unique_name};
use integration::kubelet_proc::{
    KubeletProc, clear_static_pods, dockerd_pid, http_get, machine_busy_seconds,
    manifest_with_command, median, proc_cpu_seconds, rss_mib, rss_parts_mib, running,
    start_kubelet, start_kubelet_embedded,
};
use integration::runtimes::{ShimProcess, clients};
use integration::testbed::Testbed;
use tokio::time::Instant;

#[derive(Debug, Parser)]
#[command(
    name = "kubelet-bench",
    about = "Kubelet pod start-up and teardown vs direct CRI, relist CPU, RSS"
)]
struct Args {
    /// `containerd` (the test bed's), `embedded-dockershim`, or a CRI endpoint.
    #[arg(long, default_value = "containerd")]
    runtime: String,
    /// CRI endpoint (overrides `--runtime`; kept for older command lines).
    #[arg(long)]
    runtime_endpoint: Option<String>,
    /// Pods in the large batch.
    #[arg(long, default_value_t = 30)]
    pods: usize,
    /// Repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Seconds of idle time over which relist CPU is measured.
    #[arg(long, default_value_t = 10)]
    idle_seconds: u64,
    /// Seconds to let N freshly Running pods settle before the idle window.
    #[arg(long, default_value_t = 5)]
    settle_seconds: u64,
    /// Skip the standalone shims' RSS/CPU (measured on the embedded dockershim only).
    #[arg(long)]
    no_shims: bool,
    /// Write the results as JSON here too.
    #[arg(long)]
    json: Option<PathBuf>,
    /// The pods' container exits on SIGTERM (`sh -c 'trap "exit 0" TERM; sleep 3600 & wait'`)
    /// instead of running `sleep 3600` as PID 1, which ignores SIGTERM, so that the kubelet's
    /// teardown waits out its 2 s minimum grace period (upstream's
    /// `minimumGracePeriodInSeconds`) in every pod: with it, "back to nothing" measures the
    /// kubelet's own work. Both sides run the same command.
    #[arg(long)]
    trap_term: bool,
    /// Keep the temporary directories (the kubelets' `kubelet.log`, the shims' logs) and print
    /// where they are.
    #[arg(long)]
    keep_dir: bool,
}

/// The pods' command (see `--trap-term`).
fn command(trap_term: bool) -> Vec<&'static str> {
    if trap_term {
        vec!["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
    } else {
        vec!["sleep", "3600"]
    }
}

enum Runtime {
    Endpoint(String),
    Embedded,
}

fn relist_count(metrics: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("kubelet_pleg_relist_duration_seconds_count "))
        .and_then(|v| v.trim().parse().ok())
}

/// The kubelet's CRI calls so far by operation (`kubelet_runtime_operations_total`).
async fn runtime_operations(k: &KubeletProc) -> BTreeMap<String, f64> {
    runtime_operation_metric(k, "kubelet_runtime_operations_total").await
}

/// The seconds the kubelet's CRI calls took so far by operation (the sum of
/// `kubelet_runtime_operations_duration_seconds`).
async fn runtime_operation_seconds(k: &KubeletProc) -> BTreeMap<String, f64> {
    runtime_operation_metric(k, "kubelet_runtime_operations_duration_seconds_sum").await
}

async fn runtime_operation_metric(k: &KubeletProc, name: &str) -> BTreeMap<String, f64> {
    let metrics = http_get(k.port, "/metrics").await.unwrap_or_default();
    let prefix = format!("{name}{{operation_type=\"");
    metrics
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&prefix)?;
            let (op, n) = rest.split_once("\"} ")?;
            Some((op.to_string(), n.trim().parse().ok()?))
        })
        .collect()
}

/// Mean milliseconds per call of each operation called between two readings: the seconds'
/// growth over the calls' growth.
fn mean_ms(
    calls: (&BTreeMap<String, f64>, &BTreeMap<String, f64>),
    seconds: (&BTreeMap<String, f64>, &BTreeMap<String, f64>),
) -> BTreeMap<String, f64> {
    calls
        .1
        .iter()
        .filter_map(|(op, a)| {
            let n = a - calls.0.get(op).unwrap_or(&0.0);
            let s = seconds.1.get(op)? - seconds.0.get(op).unwrap_or(&0.0);
            (n > 0.0).then(|| (op.clone(), s * 1000.0 / n))
        })
        .collect()
}

/// What the kubelet asked the runtime between two readings of [`runtime_operations`], per pod.
fn calls_per_pod(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    n: usize,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(op, a)| (op.clone(), (a - before.get(op).unwrap_or(&0.0)) / n as f64))
        .filter(|(_, d)| *d > 0.0)
        .collect()
}

/// What the kubelet did while a batch of pods started.
struct KubeletBatch {
    seconds: f64,
    /// CRI calls per pod, by operation.
    calls_per_pod: BTreeMap<String, f64>,
    /// Mean milliseconds per CRI call, by operation.
    mean_ms: BTreeMap<String, f64>,
    cpu_seconds: f64,
    load: Load,
}

/// What a batch cost the machine: the Docker daemon's CPU seconds (when it is the runtime's),
/// the standalone dockershim's on the direct side (the kubelet's side counts its process,
/// embedded dockershim included, in `kubelet_cpu_seconds`), this benchmark's own (its CRI
/// calls, or its polls of the kubelet's `/pods`), and every CPU's busy seconds.
#[derive(Clone, Copy, Default, serde::Serialize)]
struct Load {
    dockerd_cpu_seconds: Option<f64>,
    shim_cpu_seconds: Option<f64>,
    bench_cpu_seconds: Option<f64>,
    machine_busy_seconds: Option<f64>,
}

/// Readings for [`Load`]: taken before a batch, and [`LoadMeter::done`] after it.
struct LoadMeter {
    dockerd: Option<(u32, f64)>,
    shim: Option<(u32, f64)>,
    bench: Option<(u32, f64)>,
    busy: Option<f64>,
}

impl LoadMeter {
    fn start(dockerd: Option<u32>, shim: Option<u32>) -> Self {
        let cpu = |pid: Option<u32>| pid.and_then(|pid| Some((pid, proc_cpu_seconds(pid)?)));
        Self {
            dockerd: cpu(dockerd),
            shim: cpu(shim),
            bench: cpu(Some(std::process::id())),
            busy: machine_busy_seconds(),
        }
    }

    fn done(&self) -> Load {
        let grown = |p: Option<(u32, f64)>| {
            p.and_then(|(pid, before)| Some(proc_cpu_seconds(pid)? - before))
        };
        Load {
            dockerd_cpu_seconds: grown(self.dockerd),
            shim_cpu_seconds: grown(self.shim),
            bench_cpu_seconds: grown(self.bench),
            machine_busy_seconds: self.busy.and_then(|b| Some(machine_busy_seconds()? - b)),
        }
    }
}

/// The benchmark's kubelets run without image GC (`--image-gc-high-threshold=100`, upstream's
/// way to turn it off while 1 % of the disk is free): on a disk near the default 85 % the GC
/// removed the unused busybox in the middle of a timed batch, and its pods pulled it again (a
/// containerd run, 11 pulls in one repetition).
fn no_image_gc() -> Vec<String> {
    vec!["--image-gc-high-threshold=100".to_string()]
}

/// Writes `n` manifests and waits for all pods Running.
async fn kubelet_batch(
    k: &KubeletProc,
    image: &str,
    node: &str,
    n: usize,
    trap_term: bool,
    dockerd: Option<u32>,
) -> Result<KubeletBatch> {
    let meter = LoadMeter::start(dockerd, None);
    let calls_before = runtime_operations(k).await;
    let seconds_before = runtime_operation_seconds(k).await;
    let cpu_before = proc_cpu_seconds(k.child.id()).unwrap_or(0.0);
    let batch = unique_name("kb");
    let uids: Vec<String> = (0..n).map(|i| format!("{batch}-{i}")).collect();
    let start = Instant::now();
    for (i, uid) in uids.iter().enumerate() {
        let name = format!("{batch}-{i}");
        std::fs::write(
            k.manifests.join(format!("{name}.yaml")),
            manifest_with_command(&name, uid, image, &command(trap_term)),
        )?;
    }
    // Each poll is a `GET /pods` of every pod, which the kubelet serialises and this process
    // parses, both on the CPUs the pods start on: 50 polls a second with 110 pods cost the
    // kubelet side what the direct side does not pay. A larger batch is polled every 100 ms
    // (under 1 % of its time), a small one every 20 ms.
    let poll = Duration::from_millis(if n > 10 { 100 } else { 20 });
    loop {
        if running(k.port, &uids).await == n {
            break;
        }
        if start.elapsed() > Duration::from_secs(600) {
            bail!("kubelet: pods not Running after 600 s ({node})");
        }
        tokio::time::sleep(poll).await;
    }
    let took = start.elapsed().as_secs_f64();
    let load = meter.done();
    let cpu = proc_cpu_seconds(k.child.id()).unwrap_or(0.0) - cpu_before;
    let calls_after = runtime_operations(k).await;
    let seconds_after = runtime_operation_seconds(k).await;
    Ok(KubeletBatch {
        seconds: took,
        calls_per_pod: calls_per_pod(&calls_before, &calls_after, n),
        mean_ms: mean_ms(
            (&calls_before, &calls_after),
            (&seconds_before, &seconds_after),
        ),
        cpu_seconds: cpu,
        load,
    })
}

/// Removes the manifests and waits until no sandbox of them is left; returns the seconds.
async fn kubelet_teardown(k: &KubeletProc) -> Result<f64> {
    let start = Instant::now();
    clear_static_pods(k, &k.endpoint, "kb-").await?;
    Ok(start.elapsed().as_secs_f64())
}

/// `call`'s output and the seconds it took.
async fn timed<T>(call: impl std::future::Future<Output = T>) -> (T, f64) {
    let start = Instant::now();
    let out = call.await;
    (out, start.elapsed().as_secs_f64())
}

/// A batch starts only once the machine is quiet: under [`QUIET_CPUS`] CPUs busy on average
/// over [`QUIET_WINDOW`], waited for at most [`SETTLE_LIMIT`]. Work left from before (another
/// run's teardown, a build) would otherwise land in one side's batch and not the other's.
const QUIET_CPUS: f64 = 0.25;
const QUIET_WINDOW: Duration = Duration::from_millis(500);
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// Whether `busy_cpu_seconds` of CPU time over `window` is quiet enough to start a batch.
fn is_quiet(busy_cpu_seconds: f64, window: Duration) -> bool {
    busy_cpu_seconds < QUIET_CPUS * window.as_secs_f64()
}

/// Waits for a quiet machine (see [`QUIET_CPUS`]); returns the seconds waited. Without
/// `/proc/stat` it does not wait.
async fn settle() -> f64 {
    let start = Instant::now();
    while start.elapsed() < SETTLE_LIMIT {
        let Some(before) = machine_busy_seconds() else {
            break;
        };
        tokio::time::sleep(QUIET_WINDOW).await;
        let Some(after) = machine_busy_seconds() else {
            break;
        };
        if is_quiet(after - before, QUIET_WINDOW) {
            break;
        }
    }
    start.elapsed().as_secs_f64()
}

/// What the direct side did for a batch.
struct DirectBatch {
    up_seconds: f64,
    down_seconds: f64,
    /// Mean milliseconds of each start-up call, under the kubelet's operation names.
    mean_ms: BTreeMap<String, f64>,
    load: Load,
}

/// The same pods by direct CRI calls, all at once, then StopPodSandbox + RemovePodSandbox for
/// all at once.
async fn direct_batch(
    endpoint: &str,
    image: &str,
    n: usize,
    logs: &Path,
    trap_term: bool,
    dockerd: Option<u32>,
    shim: Option<u32>,
) -> Result<DirectBatch> {
    let (rt, _) = clients(endpoint).await?;
    let meter = LoadMeter::start(dockerd, shim);
    let start = Instant::now();
    let results = futures::future::join_all((0..n).map(|_| {
        let mut rt = rt.clone();
        async move {
            let mut config = integration::fixtures::sandbox_config("direct", logs);
            config.linux = Some(cri::LinuxPodSandboxConfig::default());
            let (sid, run_s) = timed(rt.run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            }))
            .await;
            let sid = sid?.into_inner().pod_sandbox_id;
            let mut c = busybox_container("app", image, "sleep 3600");
            c.command = command(trap_term).into_iter().map(String::from).collect();
            let (cid, create_s) = timed(rt.create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sid.clone(),
                config: Some(c),
                sandbox_config: Some(config),
            }))
            .await;
            let (started, start_s) = match cid {
                Ok(cid) => {
                    timed(rt.start_container(cri::StartContainerRequest {
                        container_id: cid.into_inner().container_id,
                    }))
                    .await
                }
                Err(e) => (Err(e), 0.0),
            };
            // The sandbox exists either way: it is torn down with the others.
            let took = [run_s, create_s, start_s];
            Ok::<_, tonic::Status>((sid, started.err(), took))
        }
    }))
    .await;
    let up = start.elapsed().as_secs_f64();
    let load = meter.done();
    let mut ids = Vec::new();
    let mut failed = 0;
    let mut sums = [0.0f64; 3];
    for r in results {
        match r {
            Ok((id, err, took)) => {
                ids.push(id);
                failed += usize::from(err.is_some());
                for (s, t) in sums.iter_mut().zip(took) {
                    *s += t;
                }
            }
            Err(_) => failed += 1,
        }
    }
    let mean_ms: BTreeMap<String, f64> = ["run_podsandbox", "create_container", "start_container"]
        .into_iter()
        .zip(sums)
        .map(|(op, s)| (op.to_string(), s * 1000.0 / n.max(1) as f64))
        .collect();
    let start = Instant::now();
    let down = futures::future::join_all(ids.iter().map(|id| {
        let mut rt = rt.clone();
        async move {
            rt.stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await?;
            rt.remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await?;
            Ok::<_, tonic::Status>(())
        }
    }))
    .await;
    let down_s = start.elapsed().as_secs_f64();
    let down_failed = down.iter().filter(|r| r.is_err()).count();
    if failed > 0 || down_failed > 0 {
        bail!("direct CRI: {failed} pod start(s) and {down_failed} teardown(s) failed");
    }
    Ok(DirectBatch {
        up_seconds: up,
        down_seconds: down_s,
        mean_ms,
        load,
    })
}

/// Process CPU and relists of `k` (and CPU of `shim_pid`) over an idle window.
async fn idle_window(
    k: &KubeletProc,
    shim_pid: Option<u32>,
    n: usize,
    args: &Args,
) -> serde_json::Value {
    tokio::time::sleep(Duration::from_secs(args.settle_seconds)).await;
    let pid = k.child.id();
    let relists = || async {
        http_get(k.port, "/metrics")
            .await
            .and_then(|m| relist_count(&m))
    };
    let m0 = relists().await;
    let ops0 = runtime_operations(k).await;
    let c0 = proc_cpu_seconds(pid);
    let s0 = shim_pid.and_then(proc_cpu_seconds);
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let m1 = relists().await;
    let c1 = proc_cpu_seconds(pid);
    let s1 = shim_pid.and_then(proc_cpu_seconds);
    let ops1 = runtime_operations(k).await;
    let mut v = serde_json::json!({"pods": n, "idle_seconds": args.idle_seconds});
    // What the idle kubelet asked the runtime in the window (not per pod).
    v["cri_calls"] = serde_json::json!(calls_per_pod(&ops0, &ops1, 1));
    if let (Some(m0), Some(m1), Some(c0), Some(c1)) = (m0, m1, c0, c1) {
        let relists = (m1 - m0).max(1.0);
        v["relists"] = relists.into();
        v["cpu_seconds"] = (c1 - c0).into();
        v["cpu_ms_per_relist_upper_bound"] = ((c1 - c0) * 1000.0 / relists).into();
    }
    v["rss_mib"] = rss_mib(pid).into();
    if let Some((anon, file)) = rss_parts_mib(pid) {
        v["rss_anon_mib"] = anon.into();
        v["rss_file_mib"] = file.into();
    }
    if let (Some(p), Some(s0), Some(s1)) = (shim_pid, s0, s1) {
        v["shim_cpu_seconds"] = (s1 - s0).into();
        v["shim_rss_mib"] = rss_mib(p).into();
        if let Some((anon, file)) = rss_parts_mib(p) {
            v["shim_rss_anon_mib"] = anon.into();
            v["shim_rss_file_mib"] = file.into();
        }
    }
    v
}

/// A fresh standalone shim (ours, or cri-dockerd) with a kubelet on it: RSS at start, `n`
/// pods to Running, idle window, back to nothing.
async fn shim_idle(
    tb: &Testbed,
    cri_dockerd: bool,
    n: usize,
    args: &Args,
) -> Result<serde_json::Value> {
    let name = if cri_dockerd {
        "cri-dockerd"
    } else {
        "dockershim"
    };
    let dir = tempfile::Builder::new()
        .prefix(&format!("kubelet-bench-{name}-"))
        .disable_cleanup(args.keep_dir)
        .tempdir()?;
    if args.keep_dir {
        eprintln!("kubelet-bench: keeping {}", dir.path().display());
    }
    let shim = if cri_dockerd {
        ShimProcess::start_cri_dockerd(tb, dir.path()).await?
    } else {
        ShimProcess::start(tb, dir.path()).await?
    };
    let (_, mut img) = clients(&shim.endpoint).await?;
    ensure_image(&mut img, &tb.busybox_image).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_start = rss_mib(shim.pid());
    let kdir = dir.path().join("kubelet");
    std::fs::create_dir_all(&kdir)?;
    let node = unique_name("bench-node");
    let mut k = start_kubelet(tb, &shim.endpoint, &kdir, &node, &no_image_gc())?;
    k.wait_healthy(Duration::from_secs(60)).await?;
    let up = kubelet_batch(&k, &tb.busybox_image, &node, n, args.trap_term, None)
        .await?
        .seconds;
    let mut v = idle_window(&k, Some(shim.pid()), n, args).await;
    let down = kubelet_teardown(&k).await?;
    v["shim"] = name.into();
    v["shim_rss_mib_start"] = rss_start.into();
    v["kubelet_up_seconds"] = up.into();
    v["kubelet_down_seconds"] = down.into();
    drop(k);
    Ok(v)
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

#[tokio::main]
async fn main() -> Result<()> {
    // Interrupted, it stops what it started (integration::interrupt).
    integration::interrupt::until_interrupted(run())?.await
}

async fn run() -> Result<()> {
    let args = Args::parse();
    let tb = Testbed::get("kubelet-bench")
        .ok_or_else(|| anyhow!("needs the test bed (root, hack/testbed.sh up)"))?;
    let runtime = match (args.runtime_endpoint.clone(), args.runtime.as_str()) {
        (Some(e), _) => Runtime::Endpoint(e),
        (None, "containerd") => Runtime::Endpoint(tb.containerd_endpoint.clone()),
        (None, "embedded-dockershim") => Runtime::Embedded,
        (None, e) if e.contains("://") => Runtime::Endpoint(e.to_string()),
        (None, e) => {
            bail!("--runtime {e}: expected containerd, embedded-dockershim or an endpoint")
        }
    };
    let tmp = tempfile::Builder::new()
        .prefix("kubelet-bench-")
        .disable_cleanup(args.keep_dir)
        .tempdir()?;
    if args.keep_dir {
        eprintln!("kubelet-bench: keeping {}", tmp.path().display());
    }
    let node = unique_name("bench-node");
    // The direct side's runtime: the same endpoint, or a standalone dockershim on the same Docker.
    let direct_shim = match runtime {
        Runtime::Embedded => {
            let d = tmp.path().join("direct-shim");
            std::fs::create_dir_all(&d)?;
            Some(ShimProcess::start(&tb, &d).await?)
        }
        Runtime::Endpoint(_) => None,
    };
    let (mut k, label) = match &runtime {
        Runtime::Endpoint(e) => (
            start_kubelet(&tb, e, tmp.path(), &node, &no_image_gc())?,
            e.clone(),
        ),
        Runtime::Embedded => (
            start_kubelet_embedded(&tb, tmp.path(), &node, &no_image_gc())?,
            "embedded dockershim".to_string(),
        ),
    };
    k.wait_healthy(Duration::from_secs(60)).await?;
    let direct_endpoint = direct_shim
        .as_ref()
        .map(|s| s.endpoint.clone())
        .unwrap_or_else(|| k.endpoint.clone());
    let (_, mut img) = clients(&direct_endpoint).await?;
    ensure_image(&mut img, &tb.busybox_image).await?;
    let logs = tmp.path().join("direct-logs");
    // The Docker daemon's CPU is part of the cost on the embedded dockershim.
    let dockerd = match runtime {
        Runtime::Embedded => dockerd_pid(&tb.docker_endpoint),
        Runtime::Endpoint(_) => None,
    };
    let mut rows = Vec::new();
    let mut idle = serde_json::json!({});
    let repeat = args.repeat.max(1);
    for n in [1usize, args.pods] {
        let (mut kubelet_s, mut direct_s) = (Vec::new(), Vec::new());
        let (mut kubelet_calls, mut kubelet_cpu) = (Vec::new(), Vec::new());
        let (mut kubelet_mean_ms, mut direct_mean_ms) = (Vec::new(), Vec::new());
        let (mut kubelet_load, mut direct_load) = (Vec::new(), Vec::new());
        let (mut kubelet_down, mut direct_down) = (Vec::new(), Vec::new());
        let (mut kubelet_settle, mut direct_settle) = (Vec::new(), Vec::new());
        for r in 0..repeat {
            // Alternate which goes first.
            let order = if r % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for kubelet_first in order {
                if kubelet_first {
                    kubelet_settle.push(settle().await);
                    let b = kubelet_batch(&k, &tb.busybox_image, &node, n, args.trap_term, dockerd)
                        .await?;
                    kubelet_s.push(b.seconds);
                    kubelet_calls.push(b.calls_per_pod);
                    kubelet_mean_ms.push(b.mean_ms);
                    kubelet_cpu.push(b.cpu_seconds);
                    kubelet_load.push(b.load);
                    if n == args.pods && r + 1 == repeat && idle.get("rss_mib").is_none() {
                        // Idle with N pods running: CPU per relist and RSS.
                        idle = idle_window(&k, None, n, &args).await;
                    }
                    kubelet_down.push(kubelet_teardown(&k).await?);
                } else {
                    direct_settle.push(settle().await);
                    let d = direct_batch(
                        &direct_endpoint,
                        &tb.busybox_image,
                        n,
                        &logs,
                        args.trap_term,
                        dockerd,
                        direct_shim.as_ref().map(ShimProcess::pid),
                    )
                    .await?;
                    direct_s.push(d.up_seconds);
                    direct_down.push(d.down_seconds);
                    direct_mean_ms.push(d.mean_ms);
                    direct_load.push(d.load);
                }
            }
        }
        let (km, dm) = (median(kubelet_s.clone()), median(direct_s.clone()));
        let (kdm, ddm) = (median(kubelet_down.clone()), median(direct_down.clone()));
        let ratio_ci95 = ratio_interval(&direct_s, &kubelet_s, n as u64);
        rows.push(serde_json::json!({
            "pods": n,
            "kubelet_seconds": kubelet_s,
            "direct_seconds": direct_s,
            "kubelet_median": km,
            "direct_median": dm,
            "ratio": if dm > 0.0 { km / dm } else { 0.0 },
            "ratio_ci95": ratio_ci95,
            "kubelet_down_seconds": kubelet_down,
            "direct_down_seconds": direct_down,
            "kubelet_down_median": kdm,
            "direct_down_median": ddm,
            "down_ratio": if ddm > 0.0 { kdm / ddm } else { 0.0 },
            "kubelet_cri_calls_per_pod": kubelet_calls,
            "kubelet_cri_mean_ms": kubelet_mean_ms,
            "direct_cri_mean_ms": direct_mean_ms,
            "kubelet_load": kubelet_load,
            "direct_load": direct_load,
            "kubelet_cpu_seconds": kubelet_cpu,
            "kubelet_settle_seconds": kubelet_settle,
            "direct_settle_seconds": direct_settle,
        }));
    }
    let rss_idle_after = rss_mib(k.child.id());
    drop(k);
    drop(direct_shim);
    let mut shims = Vec::new();
    if matches!(runtime, Runtime::Embedded) && !args.no_shims {
        shims.push(shim_idle(&tb, false, args.pods, &args).await?);
        if std::env::var_os("CRI_DOCKERD").is_some() {
            shims.push(shim_idle(&tb, true, args.pods, &args).await?);
        }
    }
    print_report(&label, &rows, &idle, &shims);
    if let Some(p) = &args.json {
        std::fs::write(
            p,
            serde_json::to_string_pretty(&serde_json::json!({
                "runtime": label, "direct_endpoint": direct_endpoint, "batches": rows,
                "trap_term": args.trap_term,
                "idle": idle, "rss_mib_at_end": rss_idle_after, "shims": shims,
                "load_average": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
            }))?,
        )?;
    }
    Ok(())
}

/// A 95 % interval of the ratio of the kubelet's median over the direct median, by a paired
/// bootstrap over the repetitions (each repetition's kubelet and direct batch ran back to back,
/// so they share the machine's state). `None` under 5 repetitions.
fn ratio_interval(direct_s: &[f64], kubelet_s: &[f64], seed: u64) -> Option<[f64; 2]> {
    let secs = |v: &[f64]| -> Vec<[Duration; 1]> {
        v.iter()
            .map(|s| [Duration::from_secs_f64(s.max(0.0))])
            .collect()
    };
    let (d, k) = (secs(direct_s), secs(kubelet_s));
    let pairs: Vec<(&[Duration], &[Duration])> =
        d.iter().zip(&k).map(|(d, k)| (&d[..], &k[..])).collect();
    integration::benchmark::paired_ratio_interval(&pairs, seed)
}

fn print_report(
    label: &str,
    rows: &[serde_json::Value],
    idle: &serde_json::Value,
    shims: &[serde_json::Value],
) {
    println!("## kubelet benchmark ({label})\n");
    println!(
        "| pods | kubelet: manifests → all Running in /pods (median s) | direct CRI, same parallelism (median s) | ratio [95 % interval] (target <= 1.15) | kubelet: manifests removed → no sandbox (median s) | direct Stop+RemovePodSandbox (median s) | ratio |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let ratio = f(&r["ratio"]);
        let interval = match (r["ratio_ci95"][0].as_f64(), r["ratio_ci95"][1].as_f64()) {
            (Some(lo), Some(hi)) => format!(" [{lo:.2}–{hi:.2}]"),
            _ => String::new(),
        };
        println!(
            "| {} | {:.2} | {:.2} | {:.2}{interval} ({}) | {:.2} | {:.2} | {:.2} |",
            r["pods"],
            f(&r["kubelet_median"]),
            f(&r["direct_median"]),
            ratio,
            met(ratio <= 1.15),
            f(&r["kubelet_down_median"]),
            f(&r["direct_down_median"]),
            f(&r["down_ratio"]),
        );
    }
    println!();
    // The direct side makes 3 calls per pod: RunPodSandbox, CreateContainer, StartContainer.
    for r in rows {
        let Some(reps) = r["kubelet_cri_calls_per_pod"].as_array() else {
            continue;
        };
        for (i, calls) in reps.iter().enumerate() {
            let Some(calls) = calls.as_object() else {
                continue;
            };
            let cpu = f(&r["kubelet_cpu_seconds"][i]);
            let total: f64 = calls.values().filter_map(|v| v.as_f64()).sum();
            let each: Vec<String> = calls
                .iter()
                .map(|(op, v)| format!("{op} {:.1}", f(v)))
                .collect();
            println!(
                "kubelet CRI calls per pod while {} pods started (repetition {}): {total:.1} ({}); direct: 3; kubelet CPU meanwhile {cpu:.2} s",
                r["pods"],
                i + 1,
                each.join(", ")
            );
        }
    }
    // Where a start-up's time goes: how long each call waited for the runtime.
    let show = |v: &serde_json::Value| -> String {
        v.as_object()
            .map(|m| {
                m.iter()
                    .map(|(op, ms)| format!("{op} {:.0}", f(ms)))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    for r in rows {
        let (Some(k), Some(d)) = (
            r["kubelet_cri_mean_ms"].as_array(),
            r["direct_cri_mean_ms"].as_array(),
        ) else {
            continue;
        };
        for (i, (k, d)) in k.iter().zip(d).enumerate() {
            println!(
                "mean ms per CRI call while {} pods started (repetition {}): kubelet {}; direct {}",
                r["pods"],
                i + 1,
                show(k),
                show(d)
            );
        }
        let (Some(k), Some(d)) = (r["kubelet_load"].as_array(), r["direct_load"].as_array()) else {
            continue;
        };
        for (i, (k, d)) in k.iter().zip(d).enumerate() {
            let dockerd = match (
                k["dockerd_cpu_seconds"].as_f64(),
                d["dockerd_cpu_seconds"].as_f64(),
            ) {
                (Some(k), Some(d)) => format!("; dockerd CPU {k:.2} s, direct {d:.2} s"),
                _ => String::new(),
            };
            // The kubelet process against the direct side's standalone dockershim process.
            let shim = match d["shim_cpu_seconds"].as_f64() {
                Some(s) => format!(
                    "; kubelet process CPU {:.2} s, direct dockershim process {s:.2} s",
                    f(&r["kubelet_cpu_seconds"][i])
                ),
                None => String::new(),
            };
            let bench = match (
                k["bench_cpu_seconds"].as_f64(),
                d["bench_cpu_seconds"].as_f64(),
            ) {
                (Some(k), Some(d)) => format!("; this benchmark's CPU {k:.2} s, direct {d:.2} s"),
                _ => String::new(),
            };
            println!(
                "machine busy while {} pods started (repetition {}): kubelet {:.1} CPU-s, direct {:.1} CPU-s{dockerd}{shim}{bench}",
                r["pods"],
                i + 1,
                f(&k["machine_busy_seconds"]),
                f(&d["machine_busy_seconds"]),
            );
        }
    }
    println!();
    if let Some(cpu) = idle["cpu_ms_per_relist_upper_bound"].as_f64() {
        let rss = f(&idle["rss_mib"]);
        println!(
            "With {} pods: {:.0} relists in {} s idle, kubelet CPU {:.3} s → at most {:.2} ms CPU per relist (target < 10 ms: {}); RSS {:.1} MiB (target < 28 MiB: {}; anonymous {:.1}, file-backed {:.1})",
            idle["pods"],
            f(&idle["relists"]),
            idle["idle_seconds"],
            f(&idle["cpu_seconds"]),
            cpu,
            met(cpu < 10.0),
            rss,
            met(rss < 28.0),
            f(&idle["rss_anon_mib"]),
            f(&idle["rss_file_mib"]),
        );
        if let Some(calls) = idle["cri_calls"].as_object() {
            let each: Vec<String> = calls.iter().map(|(op, n)| format!("{op} {n}")).collect();
            println!(
                "CRI calls by the kubelet in the idle window: {}",
                each.join(", ")
            );
        }
    }
    if shims.is_empty() {
        return;
    }
    println!(
        "\n| shim process (kubelet on its endpoint) | shim RSS at start (MiB) | shim RSS, N pods idle (MiB) | shim RSS anonymous / file-backed (MiB) | shim CPU over idle window (s) | kubelet RSS (MiB) | kubelet RSS anonymous / file-backed (MiB) | kubelet CPU per relist (ms, upper bound) | kubelet: N pods to Running (s) | back to nothing (s) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for s in shims {
        println!(
            "| {} ({} pods, {} s idle) | {:.1} | {:.1} | {:.1} / {:.1} | {:.3} | {:.1} | {:.1} / {:.1} | {:.2} | {:.2} | {:.2} |",
            s["shim"].as_str().unwrap_or("?"),
            s["pods"],
            s["idle_seconds"],
            f(&s["shim_rss_mib_start"]),
            f(&s["shim_rss_mib"]),
            f(&s["shim_rss_anon_mib"]),
            f(&s["shim_rss_file_mib"]),
            f(&s["shim_cpu_seconds"]),
            f(&s["rss_mib"]),
            f(&s["rss_anon_mib"]),
            f(&s["rss_file_mib"]),
            f(&s["cpu_ms_per_relist_upper_bound"]),
            f(&s["kubelet_up_seconds"]),
            f(&s["kubelet_down_seconds"]),
        );
    }
    if let [ours, theirs] = shims {
        let r0 = f(&ours["shim_rss_mib_start"]) / f(&theirs["shim_rss_mib_start"]);
        let r1 = f(&ours["shim_rss_mib"]) / f(&theirs["shim_rss_mib"]);
        println!(
            "\ndockershim RSS / cri-dockerd RSS: {r0:.2} at start, {r1:.2} with {} pods (target <= 0.5: {}, {})",
            ours["pods"],
            met(r0 <= 0.5),
            met(r1 <= 0.5)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(kv: &[(&str, f64)]) -> BTreeMap<String, f64> {
        kv.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn a_batch_waits_for_less_than_a_quarter_cpu_busy() {
        let w = Duration::from_millis(500);
        assert!(is_quiet(0.0, w));
        assert!(is_quiet(0.1, w));
        assert!(!is_quiet(0.125, w), "a quarter of a CPU is not quiet");
        assert!(!is_quiet(1.0, w), "two CPUs busy");
        assert!(is_quiet(0.4, Duration::from_secs(2)));
    }

    #[test]
    fn the_ratio_interval_pairs_each_repetition_and_needs_five() {
        let direct = [16.0, 17.0, 18.0, 16.5, 17.5];
        assert_eq!(ratio_interval(&direct[..4], &direct[..4], 1), None);
        let [lo, hi] = ratio_interval(&direct, &direct, 1).expect("interval");
        assert!(lo <= 1.0 && 1.0 <= hi, "equal sides hold 1: {lo}..{hi}");
        // Each kubelet batch 10 % over its own direct batch: the pairing keeps the interval
        // at 1.1 although the batches spread by 12 %.
        let kubelet: Vec<f64> = direct.iter().map(|d| d * 1.1).collect();
        let [lo, hi] = ratio_interval(&direct, &kubelet, 1).expect("interval");
        assert!(lo > 1.0 && hi < 1.2, "{lo}..{hi}");
    }

    #[test]
    fn mean_ms_is_the_seconds_growth_over_the_calls_growth() {
        let calls = (
            m(&[("start_container", 2.0)]),
            m(&[("start_container", 6.0), ("version", 1.0), ("list", 3.0)]),
        );
        let seconds = (
            m(&[("start_container", 0.5)]),
            m(&[("start_container", 1.3), ("version", 0.002)]),
        );
        let got = mean_ms((&calls.0, &calls.1), (&seconds.0, &seconds.1));
        assert_eq!(
            got.len(),
            2,
            "an operation without seconds is left out: {got:?}"
        );
        assert!((got["start_container"] - 200.0).abs() < 1e-9);
        assert!((got["version"] - 2.0).abs() < 1e-9);
    }
}
