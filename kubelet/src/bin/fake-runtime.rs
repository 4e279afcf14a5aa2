//! `fake-runtime`: the kubelet's in-memory CRI runtime (`kubelet::cri::fake`) served on a CRI
//! socket. Any CRI client runs on it: this kubelet or the Go kubelet (pods go Running with no
//! container behind them, as kubemark's hollow nodes), crictl, a benchmark. Sandboxes,
//! containers and images live in memory and are gone when it stops; the slow operations take
//! the simulated time the flags give.
//!
//! ```text
//! fake-runtime --listen unix:///run/fake-runtime.sock --sandbox-latency 250ms
//! ```

use std::process::ExitCode;

use clap::Parser;
use kubelet::cri::server::CriServer;
use kubelet::kubemark::LatencyFlags;
use tokio_util::sync::CancellationToken;

/// Serve an in-memory CRI runtime (no containers run) on a socket.
#[derive(Debug, Parser)]
#[command(name = "fake-runtime", version = kubelet::version::KUBERNETES_VERSION)]
struct Flags {
    /// The CRI endpoint to serve (`unix:///path` or a path).
    #[arg(long, default_value = "unix:///run/fake-runtime.sock")]
    listen: String,
    #[command(flatten)]
    latency: LatencyFlags,
    /// Images present from the start (repeatable), e.g. the pause image.
    #[arg(long = "image")]
    images: Vec<String>,
    /// Log verbosity (klog-style).
    #[arg(long, short = 'v', default_value_t = 0)]
    v: i32,
}

fn fail(line: impl std::fmt::Display) -> ExitCode {
    eprintln!("fake-runtime: {line}");
    ExitCode::from(1)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let flags = match Flags::try_parse() {
        Ok(f) => f,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{}", dockershim::config::clap_error_line(&e));
            return ExitCode::from(2);
        }
    };
    kubelet::logging::init("text", flags.v);
    let fake = kubelet::kubemark::fake_runtime(flags.latency.latency());
    for image in &flags.images {
        fake.add_image(image, 1 << 20);
    }
    let path = match cri_proto::parse_endpoint(&flags.listen) {
        Ok(p) => p,
        Err(e) => return fail(format_args!("invalid value for --listen: {e}")),
    };
    let listener = match cri_proto::bind_unix(&path).await {
        Ok(l) => l,
        Err(e) => return fail(format_args!("--listen {}: {e}", flags.listen)),
    };
    tracing::info!(endpoint = %flags.listen, "fake runtime serving CRI");
    let cancel = CancellationToken::new();
    let server = tokio::spawn(cri_proto::serve_with_listener(
        CriServer::new(fake).router(),
        listener,
        cancel.clone(),
    ));
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => return fail(format_args!("installing the SIGTERM handler: {e}")),
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    cancel.cancel();
    match server.await {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => fail(e),
        Err(e) => fail(e),
    }
}
