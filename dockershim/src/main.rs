//! The `dockershim` binary: flags, logging, signals; the service is in the library.

use anyhow::Context;
use clap::Parser;
use tokio_util::sync::CancellationToken;

fn init_logging(v: u8) {
    let level = match v {
        0 | 1 => "info",
        2..=4 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = dockershim::Flags::parse();
    init_logging(flags.verbosity);
    let shutdown = CancellationToken::new();
    let running = dockershim::start(flags.into_config(), shutdown.clone())
        .await
        .context("starting dockershim")?;
    let mut server = running.server;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        r = &mut server => {
            r.context("server task")?.context("serving CRI")?;
            return Ok(());
        }
    }
    tracing::info!("shutting down; containers keep running");
    shutdown.cancel();
    let _ = server.await;
    Ok(())
}
