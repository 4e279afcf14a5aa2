//! `kubelet-api-bench`: the kubelet in API-server mode against the API server fixture, side by
//! side with a standalone kubelet on the same runtime in one run:
//! - start-up: N pods (default 30) created in the API until all are `Running` *in the API*
//!   (their status written back by the kubelet), vs the same N pods as static manifests until
//!   all are Running in the standalone kubelet's `/pods`; alternating which goes first, the
//!   median of `--repeat` runs each; the ratio's target is <= 1.3;
//! - idle traffic: with the N pods running, the requests the kubelet sends over
//!   `--idle-seconds`, per minute and by kind (pod status writes must be 0; lease renewals at
//!   most one per 10 s; node status only on change);
//! - the API-mode kubelet's RSS with the N pods (target < 30 MiB).
//!
//! Runs against the test bed's containerd by default (so the RSS excludes an embedded
//! dockershim). Prints a markdown table and optionally JSON; asserts nothing about time.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use clap::Parser;
use integration::apiserver::ApiServer;
use integration::apiserver::store::Key;
use integration::fixtures::{ensure_image, unique_name};
use integration::kubelet_proc::{
    KubeletProc, clear_static_pods, http_get, manifest, median, rss_mib, running, start_kubelet,
};
use integration::runtimes::clients;
use integration::testbed::Testbed;
use tokio::time::Instant;

#[derive(Debug, Parser)]
#[command(
    name = "kubelet-api-bench",
    about = "Kubelet in API-server mode vs standalone: start-up, idle API traffic, RSS"
)]
struct Args {
    /// CRI endpoint (default: the test bed's containerd).
    #[arg(long)]
    runtime_endpoint: Option<String>,
    /// Pods per batch.
    #[arg(long, default_value_t = 30)]
    pods: usize,
    /// Repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Seconds of idle time over which the API requests are counted.
    #[arg(long, default_value_t = 60)]
    idle_seconds: u64,
    /// Write the results as JSON here too.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn pod_json(name: &str, node: &str, image: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "app", "image": image,
                                 "imagePullPolicy": "IfNotPresent",
                                 "command": ["sleep", "3600"]}]}
    })
}

fn pod_key(name: &str) -> Key {
    Key {
        resource: "pods".into(),
        namespace: "default".into(),
        name: name.into(),
    }
}

/// Creates `n` pods in the API; the seconds until all are Running in the API.
async fn api_batch(
    server: &ApiServer,
    node: &str,
    image: &str,
    n: usize,
) -> Result<(f64, Vec<String>)> {
    let batch = unique_name("ab");
    let names: Vec<String> = (0..n).map(|i| format!("{batch}-{i}")).collect();
    let start = Instant::now();
    for name in &names {
        server
            .store()
            .create(pod_key(name), pod_json(name, node, image))
            .map_err(|e| anyhow!("create {name}: {e:?}"))?;
    }
    loop {
        let running = names
            .iter()
            .filter(|n| {
                server
                    .store()
                    .get(&pod_key(n))
                    .is_ok_and(|p| p["status"]["phase"] == "Running")
            })
            .count();
        if running == n {
            break;
        }
        if start.elapsed() > Duration::from_secs(300) {
            bail!("API mode: {running}/{n} pods Running after 300 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((start.elapsed().as_secs_f64(), names))
}

/// Deletes the pods (gracefully) and waits until the kubelet removed their objects.
async fn api_clear(server: &ApiServer, names: &[String]) -> Result<()> {
    for n in names {
        let _ = server.store().delete(&pod_key(n), None, None, None);
    }
    let start = Instant::now();
    while names
        .iter()
        .any(|n| server.store().get(&pod_key(n)).is_ok())
    {
        if start.elapsed() > Duration::from_secs(120) {
            bail!("API mode: pods not removed after 120 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Writes `n` manifests; the seconds until all are Running in `/pods`.
async fn standalone_batch(k: &KubeletProc, endpoint: &str, image: &str, n: usize) -> Result<f64> {
    let batch = unique_name("sb");
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
        let running = running(k.port, &uids).await;
        if running == n {
            break;
        }
        if start.elapsed() > Duration::from_secs(300) {
            bail!("standalone: {running}/{n} pods Running after 300 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    clear_static_pods(k, endpoint, &batch).await?;
    Ok(secs)
}

/// Requests since `from`, by kind.
fn classify(seen: &[integration::apiserver::Seen]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for s in seen {
        let watch = s.query.contains("watch=true") || s.query.contains("watch=1");
        let kind = if watch {
            "watch (re)connects".to_string()
        } else if s.path.ends_with("/status") && s.path.contains("/pods/") {
            format!("{} pod status", s.method)
        } else if s.path.contains("/leases/") {
            format!("{} lease", s.method)
        } else if s.path.contains("/nodes/") && s.path.ends_with("/status") {
            format!("{} node status", s.method)
        } else {
            format!("{} {}", s.method, s.path)
        };
        *out.entry(kind).or_default() += 1;
    }
    out
}

#[tokio::main]
async fn main() -> Result<()> {
    // Interrupted, it stops what it started (integration::interrupt).
    integration::interrupt::until_interrupted(run())?.await
}

async fn run() -> Result<()> {
    let args = Args::parse();
    let tb = Testbed::get("kubelet-api-bench")
        .ok_or_else(|| anyhow!("needs the test bed (root, hack/testbed.sh up)"))?;
    let endpoint = args
        .runtime_endpoint
        .clone()
        .unwrap_or_else(|| tb.containerd_endpoint.clone());
    let (_, mut img) = clients(&endpoint).await?;
    ensure_image(&mut img, &tb.busybox_image).await?;
    let server = ApiServer::start().await?;
    let tmp = tempfile::Builder::new()
        .prefix("kubelet-api-bench-")
        .tempdir()?;
    let kubeconfig = tmp.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig())?;
    let (api_dir, sa_dir) = (tmp.path().join("api"), tmp.path().join("standalone"));
    let api_node = unique_name("bench-api");
    let api_k = start_kubelet(
        &tb,
        &endpoint,
        &api_dir,
        &api_node,
        &["--kubeconfig".into(), kubeconfig.display().to_string()],
    )?;
    let sa_k = start_kubelet(&tb, &endpoint, &sa_dir, &unique_name("bench-sa"), &[])?;
    let start = Instant::now();
    while http_get(api_k.port, "/healthz").await.is_none()
        || http_get(sa_k.port, "/healthz").await.is_none()
        || server
            .store()
            .get(&Key {
                resource: "nodes".into(),
                namespace: String::new(),
                name: api_node.clone(),
            })
            .is_err()
    {
        if start.elapsed() > Duration::from_secs(60) {
            bail!("kubelets not up after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let n = args.pods;
    let (mut api_s, mut sa_s) = (Vec::new(), Vec::new());
    let mut idle = serde_json::json!({});
    for r in 0..args.repeat.max(1) {
        let order = if r % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for api_first in order {
            if api_first {
                let (s, names) = api_batch(&server, &api_node, &tb.busybox_image, n).await?;
                api_s.push(s);
                if r + 1 == args.repeat.max(1) {
                    // Let the start-up writes settle, then count an idle window.
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    let before = server.requests().len();
                    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
                    let seen = server.requests();
                    let window = &seen[before.min(seen.len())..];
                    let per_min = 60.0 / args.idle_seconds.max(1) as f64;
                    let kinds: BTreeMap<String, f64> = classify(window)
                        .into_iter()
                        .map(|(k, v)| (k, v as f64 * per_min))
                        .collect();
                    idle = serde_json::json!({
                        "pods": n,
                        "idle_seconds": args.idle_seconds,
                        "requests_per_minute": window.len() as f64 * per_min,
                        "by_kind_per_minute": kinds,
                        "rss_mib": rss_mib(api_k.child.id()),
                        "standalone_rss_mib_idle": rss_mib(sa_k.child.id()),
                    });
                }
                api_clear(&server, &names).await?;
            } else {
                sa_s.push(standalone_batch(&sa_k, &endpoint, &tb.busybox_image, n).await?);
            }
        }
    }
    let (am, sm) = (median(api_s.clone()), median(sa_s.clone()));
    let ratio = if sm > 0.0 { am / sm } else { 0.0 };
    println!("## kubelet API-server mode benchmark ({endpoint})\n");
    println!(
        "| pods | API mode: created → all Running in the API (median s) | standalone: manifests → all Running in /pods (median s) | ratio | target |"
    );
    println!("|---:|---:|---:|---:|---|");
    println!(
        "| {n} | {am:.2} | {sm:.2} | {ratio:.2} | <= 1.3: {} |",
        if ratio <= 1.3 { "met" } else { "NOT met" }
    );
    println!();
    if let Some(kinds) = idle["by_kind_per_minute"].as_object() {
        println!(
            "Idle with {n} pods over {} s: {:.1} requests/min",
            args.idle_seconds,
            idle["requests_per_minute"].as_f64().unwrap_or(0.0)
        );
        println!("\n| request | per minute |\n|---|---:|");
        for (k, v) in kinds {
            println!("| {k} | {:.1} |", v.as_f64().unwrap_or(0.0));
        }
        let status_writes = kinds
            .iter()
            .filter(|(k, _)| k.ends_with("pod status"))
            .map(|(_, v)| v.as_f64().unwrap_or(0.0))
            .fold(0.0, |a, b| a + b);
        println!(
            "\nPod status writes while idle: {status_writes:.1}/min (target 0: {})",
            if status_writes == 0.0 {
                "met"
            } else {
                "NOT met"
            }
        );
        let rss = idle["rss_mib"].as_f64().unwrap_or(99.0);
        println!(
            "API-mode kubelet RSS with {n} pods: {rss:.1} MiB (target < 30 MiB: {}); standalone kubelet idle: {:.1} MiB",
            if rss < 30.0 { "met" } else { "NOT met" },
            idle["standalone_rss_mib_idle"].as_f64().unwrap_or(0.0)
        );
    }
    if let Some(p) = &args.json {
        std::fs::write(
            p,
            serde_json::to_string_pretty(&serde_json::json!({
                "endpoint": endpoint,
                "pods": n,
                "api_seconds": api_s,
                "standalone_seconds": sa_s,
                "api_median": am,
                "standalone_median": sm,
                "ratio": ratio,
                "idle": idle,
            }))?,
        )?;
    }
    Ok(())
}
