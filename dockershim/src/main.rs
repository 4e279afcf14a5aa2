//! The `dockershim` binary: cri-dockerd's command line, logging, socket activation, systemd
//! notification and signals; the service is in the library.
//!
//! Failures are one line on stderr that says what and why: a bad flag is
//! `dockershim: invalid value "x" for --flag: reason` (exit status 2, before anything is
//! started or logged), a failed start `dockershim: starting: <cause>: <its cause>...` (status 1).

use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;
use cri_proto::activation;
use dockershim::config::{Flags, clap_error_line};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracing::level_filters::LevelFilter;

/// Exit status of a bad command line.
const EXIT_USAGE: u8 = 2;
/// Exit status of a failed start or a failed server.
const EXIT_FAILURE: u8 = 1;

fn init_logging(level: LevelFilter) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level.to_string()));
    // No colour codes when stderr is not a terminal (journald, log files).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        // At `--log-level trace` the end of each span is logged with its time: our spans (a CRI
        // call, the Docker calls and CNI plugin runs in it) are trace-level. Below trace nothing
        // changes (h2's debug-level connection spans would otherwise log their ends too).
        .with_span_events(if level >= LevelFilter::TRACE {
            tracing_subscriber::fmt::format::FmtSpan::CLOSE
        } else {
            tracing_subscriber::fmt::format::FmtSpan::NONE
        })
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .init();
}

fn fail(status: u8, line: impl std::fmt::Display) -> ExitCode {
    eprintln!("dockershim: {line}");
    ExitCode::from(status)
}

fn version_text() -> String {
    match option_env!("DOCKERSHIM_GIT_COMMIT") {
        Some(commit) => format!("{} ({commit})", env!("CARGO_PKG_VERSION")),
        None => env!("CARGO_PKG_VERSION").to_string(),
    }
}

fn main() -> ExitCode {
    // Before any thread starts (see node_common::memory).
    node_common::memory::one_arena();
    let flags = match Flags::try_parse() {
        Ok(f) => f,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => return fail(EXIT_USAGE, clap_error_line(&e)),
    };
    if flags.version {
        println!("dockershim {}", version_text());
        return ExitCode::SUCCESS;
    }
    if flags.buildinfo {
        println!(
            "Program: dockershim\nVersion: {}\nGitCommit: {}\nTarget: {}-{}\nProfile: {}",
            env!("CARGO_PKG_VERSION"),
            option_env!("DOCKERSHIM_GIT_COMMIT").unwrap_or("unknown"),
            std::env::consts::ARCH,
            std::env::consts::OS,
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
        );
        return ExitCode::SUCCESS;
    }
    let level = match flags.log_level() {
        Ok(l) => l,
        Err(e) => return fail(EXIT_USAGE, e),
    };
    let config = match flags.into_config() {
        Ok(c) => c,
        Err(e) => return fail(EXIT_USAGE, e),
    };
    // Socket activation: take the passed sockets and clear LISTEN_* while this process has one
    // thread (the environment may only change then), so that what we start does not inherit them.
    if activation::is_fd_endpoint(&config.endpoint) {
        if let Err(e) = activation::passed_fds() {
            return fail(
                EXIT_FAILURE,
                format!("starting: cri socket {}: {e}", config.endpoint),
            );
        }
        // SAFETY: no other thread exists yet: the tokio runtime is built below.
        unsafe { activation::unset_environment() };
    }
    init_logging(level);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(EXIT_FAILURE, format!("starting: tokio runtime: {e}")),
    };
    runtime.block_on(run(config))
}

async fn run(config: dockershim::ShimConfig) -> ExitCode {
    let shutdown = CancellationToken::new();
    let (mut term, mut int, mut hup) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) {
        (Ok(t), Ok(i), Ok(h)) => (t, i, h),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            return fail(EXIT_FAILURE, format!("starting: signal handlers: {e}"));
        }
    };
    let running = match dockershim::start(config, shutdown.clone()).await {
        Ok(r) => r,
        Err(e) => {
            return fail(
                EXIT_FAILURE,
                format!("starting: {}", dockershim::error_chain(&e)),
            );
        }
    };
    // Give the allocator's free pages back after bursts (see node_common::memory).
    tokio::spawn(node_common::memory::scavenge(
        node_common::memory::SCAVENGE_PERIOD,
        shutdown.clone(),
    ));
    if let Err(e) = activation::notify("READY=1") {
        tracing::warn!(error = %e, "could not tell the service manager we are ready (NOTIFY_SOCKET)");
    }
    let mut server = running.server;
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => {
                // cri-docker.service's ExecReload sends SIGHUP; there is nothing to reload.
                tracing::info!("SIGHUP: nothing to reload");
            }
            r = &mut server => {
                let _ = activation::notify("STOPPING=1");
                return match r {
                    Ok(Ok(())) => ExitCode::SUCCESS,
                    Ok(Err(e)) => fail(
                        EXIT_FAILURE,
                        format!("serving CRI: {}", dockershim::error_chain(&e)),
                    ),
                    Err(e) => fail(EXIT_FAILURE, format!("serving CRI: server task: {e}")),
                };
            }
        }
    }
    let _ = activation::notify("STOPPING=1");
    tracing::info!("shutting down; containers keep running");
    shutdown.cancel();
    let _ = server.await;
    ExitCode::SUCCESS
}
