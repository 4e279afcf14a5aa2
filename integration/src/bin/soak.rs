//! `soak`: churns static pods for a set time on a node of its own (the `kubelet` binary on a
//! private containerd, or on a standalone `dockershim` on a private dockerd) while killing the
//! kubelet, dockershim, dockerd or containerd with SIGKILL at random moments (seeded, the seed
//! printed) and starting them again; then deletes every pod and checks that nothing leaked and
//! that no untouched pod was restarted by a kill of the kubelet or dockershim. Prints the
//! kubelet's and dockershim's RSS over time. See `integration::soak`. Exits non-zero when
//! something leaked, a pod was restarted unexpectedly or the node did not recover.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, anyhow};
use clap::Parser;
use integration::soak::node::SoakRuntime;
use integration::soak::{Settings, parse_duration, run};
use integration::testbed::Testbed;

#[derive(Debug, Parser)]
#[command(
    name = "soak",
    about = "Pod churn with SIGKILLs of the kubelet and runtimes; leak and restart checks; RSS"
)]
struct Args {
    /// `containerd` (a private containerd) or `dockershim` (a standalone dockershim on a
    /// private dockerd).
    #[arg(long, default_value = "containerd")]
    runtime: SoakRuntime,
    /// How long to churn and kill: `90s`, `30m`, `2h`.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    duration: Duration,
    /// Seed of every random choice (default: from the clock; printed either way).
    #[arg(long)]
    seed: Option<u64>,
    /// Pods no one touches, whose containers must survive kills of the kubelet and dockershim.
    #[arg(long, default_value_t = 3)]
    keepers: usize,
    /// At most this many churned pods at once.
    #[arg(long, default_value_t = 5)]
    churn_pods: usize,
    /// Shortest wait between a recovery and the next kill, in seconds.
    #[arg(long, default_value_t = 20.0)]
    kill_interval_min: f64,
    /// Longest wait between a recovery and the next kill, in seconds.
    #[arg(long, default_value_t = 90.0)]
    kill_interval_max: f64,
    /// RSS sampling period, in seconds.
    #[arg(long, default_value_t = 10)]
    rss_interval: u64,
    /// The private dockerd runs with `--live-restore` (its death then stops no container).
    #[arg(long)]
    live_restore: bool,
    /// Write the report as JSON here too.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Keep the soak's directory (the kubelet's, dockershim's and runtime's logs).
    #[arg(long)]
    keep_dir: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    // Interrupted, it stops what it started (integration::interrupt).
    integration::interrupt::until_interrupted(soak())?.await
}

async fn soak() -> Result<()> {
    let args = Args::parse();
    let tb = Testbed::get("soak")
        .ok_or_else(|| anyhow!("needs the test bed (root, hack/testbed.sh up)"))?;
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    println!(
        "soak on {} for {:?}, seed {seed} (--seed {seed} repeats its choices)",
        args.runtime.name(),
        args.duration
    );
    let mut settings = Settings::new(args.runtime, args.duration, seed);
    settings.keepers = args.keepers;
    settings.churn_pods = args.churn_pods;
    settings.kill_interval_s = (args.kill_interval_min, args.kill_interval_max);
    settings.rss_interval = Duration::from_secs(args.rss_interval.max(1));
    settings.live_restore = args.live_restore;
    settings.keep_dir = args.keep_dir;
    let report = run(&tb, &settings).await?;
    println!("{}", report.table());
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
        println!("JSON: {}", path.display());
    }
    if !report.clean() {
        anyhow::bail!(
            "{} leaks, {} unexpected restarts, {} failures",
            report.leaks.len(),
            report.unexpected_restarts.len(),
            report.failures.len()
        );
    }
    Ok(())
}
