//! dockershim performance benchmark: the CRI calls through a spawned `dockershim` process
//! versus the equivalent Docker calls made directly with bollard, interleaved in one run (the
//! machine is noisy: compare ratios, not absolute times). Also ListContainers and
//! ListContainerStats with many running containers, and the RSS of the dockershim process.
//! Prints a markdown table; `--json FILE` writes every number. No timing assertions.
//!
//! `cargo run --release -p integration --bin dockershim-bench -- [--iterations N]
//! [--containers 300] [--json FILE]`
//!
//! `lifecycle` and `scale` are the two phases, `ctx` what both use (the shim's CRI client, the
//! Docker client and the direct Docker calls), `summary` the numbers, `shim` the process under
//! test; this module runs the phases, cleans up and prints the tables.

mod args;
mod ctx;
mod lifecycle;
mod scale;
mod shim;
mod summary;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use bollard::Docker;
use clap::Parser;
use integration::fixtures;
use integration::runtimes::ShimProcess;
use integration::testbed::Testbed;

use args::Args;
use ctx::{Ctx, RUN_LABEL, sweep};
use lifecycle::{OPS, Timings, direct_lifecycle, shim_lifecycle};
use scale::{SHIM_STATS_CONCURRENCY, scale_phase};
use shim::{find_shim_binary, rss_kib};
use summary::{OpResult, ScaleResult, Summary, fmt_ms, mib, summarize};

#[tokio::main]
async fn main() -> Result<()> {
    // Interrupted, it stops what it started (integration::interrupt).
    integration::interrupt::until_interrupted(run())?.await
}

async fn run() -> Result<()> {
    let args = Args::parse();
    let tb = Testbed::get("dockershim-bench")
        .ok_or_else(|| anyhow!("the test bed is needed (root, hack/testbed.sh up)"))?;
    let shim_bin = find_shim_binary(args.dockershim.clone())?;
    let tmp = tempfile::Builder::new()
        .prefix("dockershim-bench")
        .tempdir()?;
    let mut shim = ShimProcess::spawn(
        &shim_bin,
        tmp.path(),
        [
            "--docker-endpoint".into(),
            tb.docker_endpoint.clone().into(),
            "--pod-infra-container-image".into(),
            tb.pause_image.clone().into(),
            "--sandbox-oom-score-adj".into(),
            "0".into(),
            // Docker's default bridge, as the raw Docker calls it is compared with.
            "--network-plugin=no-op".into(),
        ],
    )
    .await?;
    let endpoint = shim.endpoint.clone();
    let pid = shim.pid();
    let channel = cri_proto::connect(&endpoint, Duration::from_secs(10)).await?;
    let rt = cri_proto::runtime_client(channel);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_idle = rss_kib(pid).ok();

    let docker_path = tb
        .docker_endpoint
        .strip_prefix("unix://")
        .unwrap_or(&tb.docker_endpoint)
        .to_string();
    let docker = Docker::connect_with_unix(&docker_path, 120, bollard::API_DEFAULT_VERSION)?
        .negotiate_version()
        .await?;
    let version = docker.version().await?;
    let ctx = Ctx {
        rt,
        docker,
        pause_image: tb.pause_image.clone(),
        tb,
        run_id: fixtures::unique_name("run"),
        log_root: tmp.path().join("logs"),
    };

    let started = Instant::now();
    let mut shim_t = Timings::new();
    let mut direct_t = Timings::new();
    let mut scale = ScaleResult {
        containers: args.containers,
        sandboxes: args.sandboxes,
        ..Default::default()
    };
    let mut rss_loaded = None;
    let outcome: Result<()> = async {
        // One warm-up lifecycle each, not recorded.
        let mut created = Vec::new();
        shim_lifecycle(&ctx, &mut Timings::new(), &mut created).await?;
        direct_lifecycle(&ctx, &mut Timings::new(), &mut created).await?;
        for i in 0..args.iterations {
            let mut created = Vec::new();
            if i % 2 == 0 {
                shim_lifecycle(&ctx, &mut shim_t, &mut created).await?;
                direct_lifecycle(&ctx, &mut direct_t, &mut created).await?;
            } else {
                direct_lifecycle(&ctx, &mut direct_t, &mut created).await?;
                shim_lifecycle(&ctx, &mut shim_t, &mut created).await?;
            }
        }
        eprintln!(
            "lifecycle: {} iterations in {:.1} s",
            args.iterations,
            started.elapsed().as_secs_f64()
        );
        if args.containers > 0 {
            scale_phase(&ctx, &args, pid, &mut scale, &mut rss_loaded).await?;
        }
        Ok(())
    }
    .await;
    let cleanup = Instant::now();
    let swept = sweep(&ctx).await;
    let leftover = ctx
        .d_list(format!("{RUN_LABEL}={}", ctx.run_id), false)
        .await
        .map(|l| l.len())
        .unwrap_or(usize::MAX);
    eprintln!(
        "cleanup: removed {swept} containers in {:.1} s; {leftover} left",
        cleanup.elapsed().as_secs_f64()
    );
    shim.terminate();
    outcome?;

    let ops: Vec<OpResult> = OPS
        .iter()
        .map(|op| {
            let d = summarize(shim_t.get(op).map(Vec::as_slice).unwrap_or(&[]));
            let b = summarize(direct_t.get(op).map(Vec::as_slice).unwrap_or(&[]));
            OpResult {
                op,
                dockershim: d,
                direct: b,
                ratio_p50: d.p50_ms / b.p50_ms,
            }
        })
        .collect();

    println!(
        "## dockershim benchmark ({} iterations, {} containers; Docker {} API {})\n",
        args.iterations,
        args.containers,
        version.version.unwrap_or_default(),
        version.api_version.unwrap_or_default()
    );
    println!("### Lifecycle: CRI via dockershim vs direct Docker calls (ms)\n");
    println!(
        "| operation | shim p50 | shim p95 | shim min | shim max | direct p50 | direct p95 | direct min | direct max | ratio p50 | target <= 1.1 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in &ops {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {} |",
            r.op,
            fmt_ms(r.dockershim.p50_ms),
            fmt_ms(r.dockershim.p95_ms),
            fmt_ms(r.dockershim.min_ms),
            fmt_ms(r.dockershim.max_ms),
            fmt_ms(r.direct.p50_ms),
            fmt_ms(r.direct.p95_ms),
            fmt_ms(r.direct.min_ms),
            fmt_ms(r.direct.max_ms),
            r.ratio_p50,
            if r.ratio_p50 <= 1.1 { "met" } else { "NOT met" }
        );
    }
    if args.containers > 0 {
        let row = |name: &str, s: Option<Summary>, target: &str| {
            if let Some(s) = s {
                println!(
                    "| {name} | {} | {} | {} | {} | {target} |",
                    s.n,
                    fmt_ms(s.p50_ms),
                    fmt_ms(s.p95_ms),
                    fmt_ms(s.max_ms)
                );
            }
        };
        println!(
            "\n### {} running containers in {} sandboxes (created and started in {:.1} s)\n",
            scale.containers, scale.sandboxes, scale.setup_seconds
        );
        println!("| call | calls | p50 ms | p95 ms | max ms | target |");
        println!("|---|---:|---:|---:|---:|---|");
        let lc = scale.list_containers.map(|s| s.p50_ms).unwrap_or(f64::NAN);
        let ls = scale
            .list_container_stats
            .map(|s| s.p50_ms)
            .unwrap_or(f64::NAN);
        row(
            &format!(
                "CRI ListContainers ({} returned)",
                scale.list_containers_returned
            ),
            scale.list_containers,
            if lc < 20.0 {
                "< 20 ms: met"
            } else {
                "< 20 ms: NOT met"
            },
        );
        row("docker ps (all, label filter)", scale.docker_list, "");
        row(
            "docker ps size=true (reference only)",
            scale.docker_list_with_sizes,
            "",
        );
        row(
            &format!(
                "CRI ListContainerStats ({} returned)",
                scale.list_container_stats_returned
            ),
            scale.list_container_stats,
            if ls < 200.0 {
                "< 200 ms: met"
            } else {
                "< 200 ms: NOT met"
            },
        );
        row(
            &format!("docker ps + one-shot stats x N (concurrency {SHIM_STATS_CONCURRENCY})"),
            scale.direct_stats,
            "",
        );
    }
    println!("\n### dockershim RSS (VmRSS)\n");
    println!("| when | RSS | target |");
    println!("|---|---:|---|");
    let met = |k: Option<u64>, limit: u64| match k {
        Some(k) if k < limit * 1024 => "met",
        Some(_) => "NOT met",
        None => "n/a",
    };
    println!(
        "| idle (after start) | {} | < 20 MiB: {} |",
        mib(rss_idle),
        met(rss_idle, 20)
    );
    println!(
        "| with {} containers (after list/stats) | {} | < 40 MiB: {} |",
        args.containers,
        mib(rss_loaded),
        met(rss_loaded, 40)
    );
    println!(
        "\nTotal {:.1} s; cleanup removed {swept} containers, {leftover} left.",
        started.elapsed().as_secs_f64()
    );

    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "iterations": args.iterations,
            "lifecycle": ops,
            "scale": scale,
            "rss_idle_kib": rss_idle,
            "rss_loaded_kib": rss_loaded,
            "total_seconds": started.elapsed().as_secs_f64(),
            "leftover_containers": leftover,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
