//! `cri-conformance`: runs the CRI conformance suite against any CRI endpoint and prints a table
//! (plus JUnit XML / JSON on request). Exit code 1 when any case fails (or was not run because
//! the runtime died).

use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use integration::conformance::{self, Ctx, Settings, report};

#[derive(Debug, Parser)]
#[command(
    name = "cri-conformance",
    about = "CRI conformance suite for any CRI runtime"
)]
struct Args {
    /// CRI runtime endpoint (unix:///path or a socket path).
    #[arg(long, default_value = "unix:///var/run/dockershim.sock")]
    runtime_endpoint: String,
    /// CRI image endpoint (defaults to the runtime endpoint).
    #[arg(long)]
    image_endpoint: Option<String>,
    /// Run only cases whose name matches this regex.
    #[arg(long)]
    focus: Option<String>,
    /// Skip cases whose name matches this regex.
    #[arg(long)]
    skip: Option<String>,
    /// How many cases run at once.
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Per-case timeout in seconds.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Registry holding `busybox:latest` and `busybox:1.36`.
    #[arg(long, default_value = "127.0.0.1:5000")]
    registry: String,
    /// The busybox image the cases run (default: <registry>/busybox:latest).
    #[arg(long)]
    busybox_image: Option<String>,
    /// A registry requiring credentials (with --auth-user / --auth-password).
    #[arg(long)]
    auth_registry: Option<String>,
    #[arg(long, default_value = "testuser")]
    auth_user: String,
    #[arg(long, default_value = "testpassword")]
    auth_password: String,
    /// Write JUnit XML here.
    #[arg(long)]
    junit: Option<std::path::PathBuf>,
    /// Write JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// List the cases and exit.
    #[arg(long)]
    list: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let focus = args
        .focus
        .as_deref()
        .map(regex::Regex::new)
        .transpose()
        .context("--focus")?;
    let skip = args
        .skip
        .as_deref()
        .map(regex::Regex::new)
        .transpose()
        .context("--skip")?;
    let cases = conformance::select(conformance::cases::all(), focus.as_ref(), skip.as_ref());
    if args.list {
        for c in &cases {
            println!("{}", c.name);
        }
        return Ok(());
    }
    let rt = cri_proto::connect(&args.runtime_endpoint, Duration::from_secs(10)).await?;
    let img = match &args.image_endpoint {
        Some(e) => cri_proto::connect(e, Duration::from_secs(10)).await?,
        None => rt.clone(),
    };
    let log_root = tempfile::Builder::new()
        .prefix("cri-conformance-")
        .tempdir()?;
    let ctx = Ctx {
        runtime: cri_proto::runtime_client(rt),
        image: cri_proto::image_client(img),
        settings: Settings {
            busybox_image: args
                .busybox_image
                .clone()
                .unwrap_or_else(|| format!("{}/busybox:latest", args.registry)),
            registry: args.registry.clone(),
            auth_registry: args
                .auth_registry
                .clone()
                .map(|r| (r, args.auth_user.clone(), args.auth_password.clone())),
            log_root: log_root.path().to_path_buf(),
        },
    };
    let reports =
        conformance::run(ctx, cases, args.parallel, Duration::from_secs(args.timeout)).await;
    print!("{}", report::table(&args.runtime_endpoint, &reports));
    if let Some(p) = &args.junit {
        std::fs::write(p, report::junit(&args.runtime_endpoint, &reports))?;
    }
    if let Some(p) = &args.json {
        std::fs::write(
            p,
            serde_json::to_vec_pretty(&report::json(&args.runtime_endpoint, &reports))?,
        )?;
    }
    let (_, failed, _) = report::counts(&reports);
    let not_run = report::not_run(&reports);
    std::process::exit(if failed > 0 || not_run > 0 { 1 } else { 0 });
}
