//! `hollow-node`: many hollow kubelets in one process (upstream kubemark's `hollow-node
//! --morph=kubelet`, which runs one per pod). Each is this kubelet's real code on its own
//! in-memory fake runtime (`kubelet::kubemark`), registered as its own Node with the API
//! server; no container runs. The flags after `--` are the kubelet's own (a config file,
//! `--kubeconfig`, `--max-pods`, ...); hollow-node sets each node's name and root directory.
//!
//! ```text
//! hollow-node --nodes 100 --name-prefix hollow- --root-dir-base /var/lib/hollow \
//!   --kubeconfig-dir /etc/hollow -- --kubeconfig /etc/hollow/shared.kubeconfig --cgroups-per-qos=false
//! ```
//!
//! With `--kubeconfig-dir`, node `<name>` uses `<dir>/<name>.kubeconfig` (its own identity,
//! as the Node authorizer wants), which TLS bootstrap writes when the kubelet flags carry
//! `--bootstrap-kubeconfig`; otherwise every node uses the kubelet flags' `--kubeconfig`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use kubelet::kubemark::LatencyFlags;
use tokio_util::sync::CancellationToken;

/// Run N hollow kubelets (the kubelet on an in-memory runtime) in one process.
#[derive(Debug, Parser)]
#[command(name = "hollow-node", version = kubelet::version::KUBERNETES_VERSION)]
struct Flags {
    /// How many hollow nodes to run.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// Node names are `<prefix><index>`.
    #[arg(long, default_value = "hollow-node-")]
    name_prefix: String,
    /// The index of the first node (several processes: give each its own range).
    #[arg(long, default_value_t = 0)]
    first_index: usize,
    /// Node `<name>` keeps its files under `<base>/<name>`.
    #[arg(long, default_value = "/var/lib/hollow-node")]
    root_dir_base: PathBuf,
    /// Node `<name>` uses `<dir>/<name>.kubeconfig` (made by TLS bootstrap if missing and the
    /// kubelet flags have `--bootstrap-kubeconfig`).
    #[arg(long)]
    kubeconfig_dir: Option<PathBuf>,
    #[command(flatten)]
    latency: LatencyFlags,
    /// The kubelet's flags, after `--`.
    #[arg(last = true)]
    kubelet_flags: Vec<String>,
}

/// Flags hollow-node sets for each node itself.
const OWN: &[&str] = &["--hostname-override", "--root-dir"];

fn fail(status: u8, line: impl std::fmt::Display) -> ExitCode {
    eprintln!("hollow-node: {line}");
    ExitCode::from(status)
}

/// The kubelet's arguments for node `name`.
fn node_args(flags: &Flags, name: &str) -> Vec<String> {
    let mut args = vec!["kubelet".to_string()];
    args.extend(flags.kubelet_flags.iter().cloned());
    if let Some(dir) = &flags.kubeconfig_dir {
        let own = dir.join(format!("{name}.kubeconfig"));
        args.push(format!("--kubeconfig={}", own.display()));
    }
    args.push(format!("--hostname-override={name}"));
    args.push(format!(
        "--root-dir={}",
        flags.root_dir_base.join(name).display()
    ));
    args
}

#[tokio::main]
async fn main() -> ExitCode {
    let flags = match Flags::try_parse() {
        Ok(f) => f,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => return fail(2, dockershim::config::clap_error_line(&e)),
    };
    if let Some(own) = flags
        .kubelet_flags
        .iter()
        .find(|f| OWN.iter().any(|o| f.split('=').next() == Some(*o)))
    {
        return fail(
            2,
            format_args!("invalid kubelet flag {own}: hollow-node sets it for each node"),
        );
    }
    if flags.kubeconfig_dir.is_some()
        && flags
            .kubelet_flags
            .iter()
            .any(|f| f.split('=').next() == Some("--kubeconfig"))
    {
        return fail(
            2,
            "invalid flags: --kubeconfig-dir and the kubelet's --kubeconfig exclude each other",
        );
    }
    let cancel = CancellationToken::new();
    let mut configs = Vec::with_capacity(flags.nodes);
    for i in flags.first_index..flags.first_index + flags.nodes {
        let name = format!("{}{i}", flags.name_prefix);
        match kubelet::flags::load(node_args(&flags, &name)) {
            Ok(v) => configs.push(v),
            Err(e) => return fail(1, format_args!("node {name}: {e}")),
        }
    }
    if let Some((_, config)) = configs.first() {
        kubelet::logging::init(&config.logging_format, config.verbosity);
    }
    // All at once, as separate machines would: TLS bootstrap and registration overlap.
    let starts = configs.into_iter().map(|(kubelet_flags, config)| {
        let cancel = cancel.child_token();
        let latency = flags.latency.latency();
        async move {
            kubelet::kubemark::start(
                config,
                kubelet_flags.bootstrap_kubeconfig.as_deref(),
                latency,
                cancel,
            )
            .await
        }
    });
    let mut nodes = Vec::with_capacity(flags.nodes);
    for started in futures::future::join_all(starts).await {
        match started {
            Ok(node) => nodes.push(node),
            Err(e) => {
                cancel.cancel();
                return fail(1, e);
            }
        }
    }
    tracing::info!(nodes = nodes.len(), "hollow nodes running");
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => return fail(1, format_args!("installing the SIGTERM handler: {e}")),
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    cancel.cancel();
    for node in nodes {
        let _ = node.task.await;
    }
    ExitCode::SUCCESS
}
