//! The Docker side of streaming (upstream dockershim's `NativeExecHandler` and port-forward):
//! exec through Docker's exec API — the exec instance created while the client is still
//! opening its streams, then started on a hijacked connection (stdin copied in and half-closed
//! at its EOF, output demultiplexed to stdout/stderr, TTY resizes via the exec resize call, the
//! exit code read from the exec once its output ends); attach to a container's stdio; and
//! port-forward connections made by dockershim itself inside the sandbox's network namespace
//! (a short-lived thread enters `/proc/<pause pid>/ns/net` with setns(CLONE_NEWNET), connects,
//! and hands the socket back to tokio) — no socat or nsenter.

use std::future::Future;
use std::os::fd::AsRawFd;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use bollard::query_parameters::{
    AttachContainerOptions, InspectContainerOptions, ResizeContainerTTYOptions,
};
use bytes::Bytes;
use futures::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::stdio::{Outcome, Stdio, StdioOptions, TermSize};
use crate::docker::{BollardDocker, DockerError};

/// Why a streaming operation could not run.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Docker(#[from] DockerError),
    #[error("{0}")]
    NotRunning(String),
    #[error("port forward: {0}")]
    Dial(String),
}

/// What the streaming server needs from the container runtime.
pub trait StreamingRuntime: Send + Sync + 'static {
    /// Prepares `cmd` in the container for a session with `opts` without running it (Docker:
    /// creates the exec instance); returns what [`StreamingRuntime::exec`] runs. The server
    /// calls it as soon as it accepts a session, so it overlaps the client's stream set-up.
    fn prepare_exec(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        opts: StdioOptions,
    ) -> impl Future<Output = Result<String, String>> + Send;
    /// Runs a prepared exec with `stdio`; ends when its output ends.
    fn exec(
        &self,
        prepared: String,
        tty: bool,
        stdio: Stdio,
    ) -> impl Future<Output = Outcome> + Send;
    /// Attaches `stdio` to the container's main process; ends when its output ends.
    fn attach(
        &self,
        container_id: &str,
        tty: bool,
        stdio: Stdio,
    ) -> impl Future<Output = Outcome> + Send;
    /// A TCP connection to `port` on the sandbox's loopback, made in its network namespace.
    fn dial(
        &self,
        sandbox_id: &str,
        port: u16,
    ) -> impl Future<Output = Result<TcpStream, RuntimeError>> + Send;
}

/// Copies stdin into the hijacked connection and half-closes it at EOF, so the process sees EOF.
async fn pump_stdin(
    mut stdin: mpsc::Receiver<Bytes>,
    mut input: std::pin::Pin<Box<dyn AsyncWrite + Send>>,
) {
    while let Some(chunk) = stdin.recv().await {
        if input.write_all(&chunk).await.is_err() {
            return;
        }
        let _ = input.flush().await;
    }
    let _ = input.shutdown().await;
}

/// Routes Docker's output to the session's stdout/stderr until it ends.
async fn pump_output(
    mut output: std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>,
    >,
    stdout: Option<mpsc::Sender<Bytes>>,
    stderr: Option<mpsc::Sender<Bytes>>,
) -> Result<(), DockerError> {
    while let Some(item) = output.next().await {
        let (to, bytes) = match item? {
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                (stdout.as_ref(), message)
            }
            LogOutput::StdErr { message } => (stderr.as_ref(), message),
            LogOutput::StdIn { .. } => continue,
        };
        if let Some(tx) = to
            && tx.send(bytes).await.is_err()
        {
            // The client went away: stop reading.
            return Ok(());
        }
    }
    Ok(())
}

/// Relays one hijacked Docker session: stdin copied in (half-closed at its EOF), each terminal
/// size handed to `resize`, output routed until Docker ends it; the stdin and resize relays
/// stop with the output.
async fn relay<F, Fut>(
    output: std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>,
    >,
    input: std::pin::Pin<Box<dyn AsyncWrite + Send>>,
    stdio: Stdio,
    resize: F,
) -> Result<(), DockerError>
where
    F: Fn(TermSize) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let Stdio {
        stdin,
        stdout,
        stderr,
        resize: sizes,
    } = stdio;
    let stdin_task = stdin.map(|rx| tokio::spawn(pump_stdin(rx, input)));
    let resize_task = sizes.map(|mut rx| {
        tokio::spawn(async move {
            while let Some(sz) = rx.recv().await {
                resize(sz).await;
            }
        })
    });
    let pumped = pump_output(output, stdout, stderr).await;
    for task in [stdin_task, resize_task].into_iter().flatten() {
        task.abort();
    }
    pumped
}

impl StreamingRuntime for BollardDocker {
    async fn prepare_exec(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        opts: StdioOptions,
    ) -> Result<String, String> {
        self.client()
            .create_exec(
                container_id,
                CreateExecOptions {
                    cmd: Some(cmd),
                    attach_stdin: Some(opts.stdin),
                    attach_stdout: Some(opts.stdout),
                    attach_stderr: Some(opts.stderr && !opts.tty),
                    tty: Some(opts.tty),
                    ..Default::default()
                },
            )
            .await
            .map(|c| c.id)
            .map_err(|e| DockerError::from(e).to_string())
    }

    async fn exec(&self, exec_id: String, tty: bool, stdio: Stdio) -> Outcome {
        let docker = self.client();
        let started = docker
            .start_exec(
                &exec_id,
                Some(StartExecOptions {
                    detach: false,
                    tty,
                    output_capacity: None,
                }),
            )
            .await;
        let (output, input) = match started {
            Ok(StartExecResults::Attached { output, input }) => (output, input),
            Ok(StartExecResults::Detached) => {
                return Outcome::Error("docker started the exec detached".into());
            }
            Err(e) => return Outcome::Error(DockerError::from(e).to_string()),
        };
        let resize = {
            let (docker, exec_id) = (docker.clone(), exec_id.clone());
            move |sz: TermSize| {
                let (docker, exec_id) = (docker.clone(), exec_id.clone());
                async move {
                    let opts = ResizeExecOptions {
                        height: sz.height,
                        width: sz.width,
                    };
                    if let Err(e) = docker.resize_exec(&exec_id, opts).await {
                        debug!(error = %e, "exec resize failed");
                    }
                }
            }
        };
        if let Err(e) = relay(output, input, stdio, resize).await {
            return Outcome::Error(e.to_string());
        }
        // The output ends a moment before Docker records the exit code.
        for _ in 0..500 {
            match docker.inspect_exec(&exec_id).await {
                Ok(info) if info.running != Some(true) => {
                    return match info.exit_code.unwrap_or(0) {
                        0 => Outcome::Success,
                        code => Outcome::ExitCode(code as i32),
                    };
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(2)).await,
                Err(e) => return Outcome::Error(DockerError::from(e).to_string()),
            }
        }
        Outcome::Error(format!(
            "exec {exec_id} still running after its output ended"
        ))
    }

    async fn attach(&self, container_id: &str, tty: bool, mut stdio: Stdio) -> Outcome {
        if !tty {
            stdio.resize = None; // a container without a TTY has nothing to resize
        }
        let docker = self.client();
        let opts = AttachContainerOptions {
            detach_keys: None,
            logs: false,
            stream: true,
            stdin: stdio.stdin.is_some(),
            stdout: stdio.stdout.is_some(),
            stderr: stdio.stderr.is_some(),
        };
        let attached = match docker.attach_container(container_id, Some(opts)).await {
            Ok(a) => a,
            Err(e) => return Outcome::Error(DockerError::from(e).to_string()),
        };
        let (docker, id) = (docker.clone(), container_id.to_string());
        let resize = move |sz: TermSize| {
            let (docker, id) = (docker.clone(), id.clone());
            async move {
                let opts = ResizeContainerTTYOptions {
                    h: i32::from(sz.height),
                    w: i32::from(sz.width),
                };
                if let Err(e) = docker.resize_container_tty(&id, opts).await {
                    debug!(error = %e, "attach resize failed");
                }
            }
        };
        match relay(attached.output, attached.input, stdio, resize).await {
            Ok(()) => Outcome::Success,
            Err(e) => Outcome::Error(e.to_string()),
        }
    }

    async fn dial(&self, sandbox_id: &str, port: u16) -> Result<TcpStream, RuntimeError> {
        let info = self
            .client()
            .inspect_container(sandbox_id, None::<InspectContainerOptions>)
            .await
            .map_err(DockerError::from)?;
        let state = info.state.unwrap_or_default();
        let pid = state.pid.unwrap_or(0);
        if state.running != Some(true) || pid <= 0 {
            return Err(RuntimeError::NotRunning(format!(
                "pod sandbox {sandbox_id} is not running"
            )));
        }
        let std_stream = connect_in_netns(pid as libc::pid_t, port).await?;
        std_stream
            .set_nonblocking(true)
            .map_err(|e| RuntimeError::Dial(e.to_string()))?;
        let _ = std_stream.set_nodelay(true);
        TcpStream::from_std(std_stream).map_err(|e| RuntimeError::Dial(e.to_string()))
    }
}

/// Connects to `localhost:port` inside the network namespace of `pid`. A dedicated thread
/// enters the namespace (setns only affects the calling thread) and exits afterwards, so no
/// runtime thread is ever left in a pod's namespace; the socket stays bound to the pod's netns.
pub async fn connect_in_netns(
    pid: libc::pid_t,
    port: u16,
) -> Result<std::net::TcpStream, RuntimeError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("netns-dial".into())
        .spawn(move || {
            let _ = tx.send(dial_blocking(pid, port));
        });
    if let Err(e) = spawned {
        return Err(RuntimeError::Dial(format!("cannot start a thread: {e}")));
    }
    rx.await
        .map_err(|_| RuntimeError::Dial("the dialing thread died".into()))?
}

fn dial_blocking(pid: libc::pid_t, port: u16) -> Result<std::net::TcpStream, RuntimeError> {
    let path = format!("/proc/{pid}/ns/net");
    let ns = std::fs::File::open(&path).map_err(|e| RuntimeError::Dial(format!("{path}: {e}")))?;
    // SAFETY: setns on a namespace fd we own, affecting only this (short-lived) thread.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        warn!(%path, error = %err, "setns failed");
        return Err(RuntimeError::Dial(format!("setns {path}: {err}")));
    }
    let timeout = Duration::from_secs(10);
    let v4 = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    match std::net::TcpStream::connect_timeout(&v4, timeout) {
        Ok(s) => Ok(s),
        Err(e4) => {
            let v6 = std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port));
            std::net::TcpStream::connect_timeout(&v6, timeout).map_err(|_| {
                RuntimeError::Dial(format!(
                    "failed to connect to localhost:{port} inside namespace of process {pid}: {e4}"
                ))
            })
        }
    }
}
