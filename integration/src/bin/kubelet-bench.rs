//! `kubelet-bench`: how long the kubelet takes from manifests written to every pod Running in
//! its `GET /pods`, for 1 and for N (default 30) pods, side by side in one run with the same
//! sandboxes and containers created by direct CRI calls at the same parallelism (every pod at
//! once, as the kubelet's pod workers do); plus, with N pods running, the kubelet's CPU per
//! PLEG relist (process CPU over an idle window divided by the relists in it: an upper bound,
//! since everything else the idle kubelet does is counted too) and its RSS. Runs against the
//! test bed's containerd by default (so the kubelet's RSS excludes an embedded dockershim).
//! Prints a markdown table and optionally JSON; asserts nothing about time.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use clap::Parser;
use cri_proto::runtime::v1 as cri;
use integration::fixtures::{busybox_container, cleanup_sandboxes, ensure_image, unique_name};
use integration::kubelet_proc::{
    KubeletProc, clear_static_pods, http_get, manifest, median, proc_cpu_seconds, rss_mib, running,
    start_kubelet,
};
use integration::runtimes::clients;
use integration::testbed::Testbed;
use tokio::time::Instant;

#[derive(Debug, Parser)]
#[command(
    name = "kubelet-bench",
    about = "Kubelet pod start-up vs direct CRI, relist CPU, RSS"
)]
struct Args {
    /// CRI endpoint (default: the test bed's containerd).
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
    /// Write the results as JSON here too.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn relist_count(metrics: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("kubelet_pleg_relist_duration_seconds_count "))
        .and_then(|v| v.trim().parse().ok())
}

/// Writes `n` manifests and waits for all pods Running; returns the seconds it took.
async fn kubelet_batch(
    k: &KubeletProc,
    image: &str,
    node: &str,
    n: usize,
) -> Result<(f64, Vec<String>)> {
    let batch = unique_name("kb");
    let uids: Vec<String> = (0..n).map(|i| format!("{batch}-{i}")).collect();
    let start = Instant::now();
    for (i, uid) in uids.iter().enumerate() {
        let name = format!("{batch}-{i}");
        std::fs::write(
            k.manifests.join(format!("{name}.yaml")),
            manifest(&name, uid, image),
        )?;
    }
    loop {
        if running(k.port, &uids).await == n {
            break;
        }
        if start.elapsed() > Duration::from_secs(300) {
            bail!("kubelet: pods not Running after 300 s ({node})");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((start.elapsed().as_secs_f64(), uids))
}

/// The same pods by direct CRI calls, all at once; returns the seconds it took.
async fn direct_batch(endpoint: &str, image: &str, n: usize, logs: &Path) -> Result<f64> {
    let (rt, _) = clients(endpoint).await?;
    let start = Instant::now();
    let results = futures::future::join_all((0..n).map(|_| {
        let mut rt = rt.clone();
        async move {
            let mut config = integration::fixtures::sandbox_config("direct", logs);
            config.linux = Some(cri::LinuxPodSandboxConfig::default());
            let sid = rt
                .run_pod_sandbox(cri::RunPodSandboxRequest {
                    config: Some(config.clone()),
                    runtime_handler: String::new(),
                })
                .await?
                .into_inner()
                .pod_sandbox_id;
            let mut c = busybox_container("app", image, "sleep 3600");
            c.command = vec!["sleep".into(), "3600".into()];
            let cid = rt
                .create_container(cri::CreateContainerRequest {
                    pod_sandbox_id: sid.clone(),
                    config: Some(c),
                    sandbox_config: Some(config),
                })
                .await?
                .into_inner()
                .container_id;
            rt.start_container(cri::StartContainerRequest { container_id: cid })
                .await?;
            Ok::<_, tonic::Status>(sid)
        }
    }))
    .await;
    let secs = start.elapsed().as_secs_f64();
    let mut ids = Vec::new();
    let mut failed = 0;
    for r in results {
        match r {
            Ok(id) => ids.push(id),
            Err(_) => failed += 1,
        }
    }
    let mut rt = rt;
    // Stop with the same short grace the kubelet's pods have.
    cleanup_sandboxes(&mut rt, &ids).await;
    if failed > 0 {
        bail!("{failed} direct pod start(s) failed");
    }
    Ok(secs)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let tb = Testbed::get("kubelet-bench")
        .ok_or_else(|| anyhow!("needs the test bed (root, hack/testbed.sh up)"))?;
    let endpoint = args
        .runtime_endpoint
        .clone()
        .unwrap_or_else(|| tb.containerd_endpoint.clone());
    let (_, mut img) = clients(&endpoint).await?;
    ensure_image(&mut img, &tb.busybox_image).await?;
    let tmp = tempfile::Builder::new()
        .prefix("kubelet-bench-")
        .tempdir()?;
    let node = unique_name("bench-node");
    let k = start_kubelet(&tb, &endpoint, tmp.path(), &node, &[])?;
    let start = Instant::now();
    while http_get(k.port, "/healthz").await.is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            bail!("kubelet not healthy after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logs = tmp.path().join("direct-logs");
    let mut rows = Vec::new();
    let mut idle = serde_json::json!({});
    for n in [1usize, args.pods] {
        let (mut kubelet_s, mut direct_s) = (Vec::new(), Vec::new());
        for r in 0..args.repeat.max(1) {
            // Alternate which goes first.
            let order = if r % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for kubelet_first in order {
                if kubelet_first {
                    let (s, _) = kubelet_batch(&k, &tb.busybox_image, &node, n).await?;
                    kubelet_s.push(s);
                    let last = r + 1 == args.repeat.max(1);
                    if n == args.pods && last && idle.get("rss_mib").is_none() {
                        // Idle with N pods running: CPU per relist and RSS.
                        let pid = k.child.id();
                        let m0 = http_get(k.port, "/metrics")
                            .await
                            .and_then(|m| relist_count(&m));
                        let c0 = proc_cpu_seconds(pid);
                        tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
                        let m1 = http_get(k.port, "/metrics")
                            .await
                            .and_then(|m| relist_count(&m));
                        let c1 = proc_cpu_seconds(pid);
                        if let (Some(m0), Some(m1), Some(c0), Some(c1)) = (m0, m1, c0, c1) {
                            let relists = (m1 - m0).max(1.0);
                            idle = serde_json::json!({
                                "pods": n,
                                "idle_seconds": args.idle_seconds,
                                "relists": relists,
                                "cpu_seconds": c1 - c0,
                                "cpu_ms_per_relist_upper_bound": (c1 - c0) * 1000.0 / relists,
                                "rss_mib": rss_mib(pid),
                            });
                        }
                    }
                    clear_static_pods(&k, &endpoint, "kb-").await?;
                } else {
                    direct_s.push(direct_batch(&endpoint, &tb.busybox_image, n, &logs).await?);
                }
            }
        }
        let (km, dm) = (median(kubelet_s.clone()), median(direct_s.clone()));
        rows.push(serde_json::json!({
            "pods": n,
            "kubelet_seconds": kubelet_s,
            "direct_seconds": direct_s,
            "kubelet_median": km,
            "direct_median": dm,
            "ratio": if dm > 0.0 { km / dm } else { 0.0 },
        }));
    }
    let rss_idle_after = rss_mib(k.child.id());
    println!("## kubelet benchmark ({endpoint})\n");
    println!(
        "| pods | kubelet: manifests → all Running in /pods (median s) | direct CRI, same parallelism (median s) | ratio | target |"
    );
    println!("|---:|---:|---:|---:|---|");
    for r in &rows {
        let ratio = r["ratio"].as_f64().unwrap_or(0.0);
        println!(
            "| {} | {:.2} | {:.2} | {:.2} | <= 1.25: {} |",
            r["pods"],
            r["kubelet_median"].as_f64().unwrap_or(0.0),
            r["direct_median"].as_f64().unwrap_or(0.0),
            ratio,
            if ratio <= 1.25 { "met" } else { "NOT met" }
        );
    }
    println!();
    if let Some(cpu) = idle["cpu_ms_per_relist_upper_bound"].as_f64() {
        println!(
            "With {} pods: {:.0} relists in {} s idle, kubelet CPU {:.3} s → at most {:.2} ms CPU per relist (target < 5 ms: {}); RSS {:.1} MiB (target < 30 MiB: {})",
            idle["pods"],
            idle["relists"].as_f64().unwrap_or(0.0),
            idle["idle_seconds"],
            idle["cpu_seconds"].as_f64().unwrap_or(0.0),
            cpu,
            if cpu < 5.0 { "met" } else { "NOT met" },
            idle["rss_mib"].as_f64().unwrap_or(0.0),
            if idle["rss_mib"].as_f64().unwrap_or(99.0) < 30.0 {
                "met"
            } else {
                "NOT met"
            },
        );
    }
    if let Some(p) = &args.json {
        std::fs::write(
            p,
            serde_json::to_string_pretty(&serde_json::json!({
                "endpoint": endpoint, "batches": rows, "idle": idle, "rss_mib_at_end": rss_idle_after,
            }))?,
        )?;
    }
    Ok(())
}
