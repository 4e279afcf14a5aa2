//! `cri-bench`: the CRI benchmark against one or more runtime endpoints, interleaved in one
//! run, printing a markdown table (with each operation's p50 ratio to the first endpoint) and
//! optionally JSON. `--runtime-endpoint dockershim` starts this workspace's `dockershim` binary
//! as a separate process on the test bed's Docker and CNI network; `--runtime-endpoint
//! cri-dockerd` starts the cri-dockerd binary named by `CRI_DOCKERD` the same way (an outside
//! judge, built by hand). Without any endpoint it compares cri-dockerd (when `CRI_DOCKERD` is
//! set, as the reference), dockershim and the test bed's containerd. `--runtime-endpoint
//! NAME=PATH` starts the dockershim-compatible binary at PATH like `dockershim`, reported as
//! NAME (to compare two builds of dockershim in one run).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use clap::Parser;
use integration::benchmark::{self, Settings, Target};
use integration::runtimes::{ShimProcess, clients};
use integration::testbed::Testbed;

#[derive(Debug, Parser)]
#[command(name = "cri-bench", about = "Benchmark and compare CRI runtimes")]
struct Args {
    /// CRI endpoint to measure (repeat to compare; the first is the reference). `dockershim`
    /// starts our dockershim binary, `cri-dockerd` the one `CRI_DOCKERD` names. Default:
    /// [cri-dockerd,] dockershim and the test bed's containerd.
    #[arg(long = "runtime-endpoint")]
    endpoints: Vec<String>,
    /// Parallel workers per phase.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Rounds per endpoint.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Extra running containers on each endpoint while ListContainers is timed.
    #[arg(long, default_value_t = 50)]
    containers: usize,
    /// The image the containers run (default: the test bed's busybox).
    #[arg(long)]
    busybox_image: Option<String>,
    /// Per-call timeout in seconds.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Pull phases per round and endpoint (each: PullImage, RemoveImage by tag, PullImage,
    /// RemoveImage by id of `--pull-image`; 0 = none).
    #[arg(long, default_value_t = 2)]
    pulls: usize,
    /// The image of the pull phases; removed from each runtime before the first (default: the
    /// test bed registry's `k8s-staging-cri-tools/test-image-3:latest`, which nothing else here
    /// pulls under that name).
    #[arg(long)]
    pull_image: Option<String>,
    /// Also write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> Result<()> {
    // Interrupted, it stops what it started (integration::interrupt).
    integration::interrupt::until_interrupted(run())?.await
}

async fn run() -> Result<()> {
    let args = Args::parse();
    let tmp = tempfile::Builder::new().prefix("cri-bench-").tempdir()?;
    let tb = Testbed::get("cri-bench");
    let mut endpoints = args.endpoints.clone();
    if endpoints.is_empty() {
        let tb = tb.as_ref().ok_or_else(|| {
            anyhow!("no --runtime-endpoint and no test bed (run as root after hack/testbed.sh up)")
        })?;
        endpoints = vec!["dockershim".into(), tb.containerd_endpoint.clone()];
        if std::env::var_os("CRI_DOCKERD").is_some() {
            endpoints.insert(0, "cri-dockerd".into());
        }
    }
    let mut shims = Vec::new();
    let mut targets = Vec::new();
    for ep in &endpoints {
        let (name, url) = if let Some((name, path)) = ep.split_once('=') {
            let tb = tb
                .as_ref()
                .ok_or_else(|| anyhow!("`{ep}` needs the test bed"))?;
            let dir = tmp.path().join(name);
            std::fs::create_dir_all(&dir)?;
            let shim = ShimProcess::start_binary(tb, &dir, std::path::Path::new(path)).await?;
            let url = shim.endpoint.clone();
            shims.push(shim);
            (name.to_string(), url)
        } else if ep == "dockershim" || ep == "cri-dockerd" {
            let tb = tb
                .as_ref()
                .ok_or_else(|| anyhow!("`{ep}` needs the test bed"))?;
            let dir = tmp.path().join(ep);
            std::fs::create_dir_all(&dir)?;
            let shim = if ep == "dockershim" {
                ShimProcess::start(tb, &dir).await?
            } else {
                ShimProcess::start_cri_dockerd(tb, &dir).await?
            };
            let url = shim.endpoint.clone();
            shims.push(shim);
            (ep.clone(), url)
        } else {
            (ep.clone(), ep.clone())
        };
        let (rt, img) = clients(&url)
            .await
            .with_context(|| format!("connecting to {url}"))?;
        targets.push(Target { name, rt, img });
    }
    let image = args
        .busybox_image
        .clone()
        .or_else(|| tb.as_ref().map(|t| t.busybox_image.clone()))
        .ok_or_else(|| anyhow!("--busybox-image is required without the test bed"))?;
    let settings = Settings {
        workers: args.workers.max(1),
        rounds: args.rounds.max(1),
        containers: args.containers,
        image,
        log_root: benchmark::log_root(tmp.path()),
        timeout: Duration::from_secs(args.timeout),
        pull_image: args.pull_image.clone().or_else(|| {
            tb.as_ref()
                .map(|t| format!("{}/k8s-staging-cri-tools/test-image-3:latest", t.registry))
        }),
        pulls: args.pulls,
    };
    eprintln!(
        "cri-bench: {} endpoint(s), {} workers, {} rounds, {} extra containers, {} pull phases of {:?} per round",
        targets.len(),
        settings.workers,
        settings.rounds,
        settings.containers,
        settings.pulls,
        settings.pull_image
    );
    let report = benchmark::run(&mut targets, &settings).await;
    println!("{}", benchmark::markdown(&report));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    drop(shims);
    Ok(())
}
