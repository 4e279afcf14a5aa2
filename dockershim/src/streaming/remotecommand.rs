//! Exec and attach sessions over either transport (upstream `remotecommand` server): over SPDY
//! the client opens one stream per purpose (`streamtype` error, stdin, stdout, stderr, resize),
//! over WebSocket fixed channels 0..4 carry the same. Either way the session waits for what the
//! request asked for, runs the runtime with protocol-neutral [`Stdio`], lets the output drain,
//! writes the outcome on the error stream (a Status from v4 on) and closes the connection.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::debug;

use super::config::{Limits, protocols};
use super::runtime::StreamingRuntime;
use super::spdy::{Role, Session, StreamWriter};
use super::stdio::{Outcome, Stdio, StdioOptions, TermSize, encode_outcome, parse_resizes};
use super::wschannel::{self, Ws};

/// What a session runs.
#[derive(Debug)]
pub enum Target {
    /// An exec being prepared since the session was accepted
    /// ([`StreamingRuntime::prepare_exec`]).
    Exec {
        prepared: JoinHandle<Result<String, String>>,
    },
    Attach {
        container_id: String,
    },
}

impl Target {
    /// An exec whose preparation starts now, while the client opens its streams. Should the
    /// session never get that far, the prepared exec is simply never run.
    pub fn exec<R: StreamingRuntime>(
        rt: &Arc<R>,
        container_id: String,
        cmd: Vec<String>,
        opts: StdioOptions,
    ) -> Target {
        let rt = rt.clone();
        Target::Exec {
            prepared: tokio::spawn(async move { rt.prepare_exec(&container_id, cmd, opts).await }),
        }
    }
}

async fn run<R: StreamingRuntime>(rt: &R, target: Target, tty: bool, stdio: Stdio) -> Outcome {
    match target {
        Target::Exec { prepared } => match prepared.await {
            Ok(Ok(exec)) => rt.exec(exec, tty, stdio).await,
            Ok(Err(e)) => Outcome::Error(e),
            Err(e) => Outcome::Error(format!("preparing the exec failed: {e}")),
        },
        Target::Attach { container_id } => rt.attach(&container_id, tty, stdio).await,
    }
}

/// An output channel whose data a task forwards to `write` until the runtime drops it.
fn forward_output<F, Fut>(write: F) -> (mpsc::Sender<Bytes>, JoinHandle<()>)
where
    F: Fn(Bytes) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let (tx, mut rx) = mpsc::channel::<Bytes>(16);
    let task = tokio::spawn(async move {
        while let Some(b) = rx.recv().await {
            if !write(b).await {
                break;
            }
        }
    });
    (tx, task)
}

fn resize_channel(mut raw: mpsc::Receiver<Bytes>) -> mpsc::Receiver<TermSize> {
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(async move {
        let mut buf = Vec::new();
        while let Some(chunk) = raw.recv().await {
            buf.extend_from_slice(&chunk);
            for sz in parse_resizes(&mut buf) {
                if tx.send(sz).await.is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// Serves one exec/attach session over SPDY with the negotiated `protocol`.
pub async fn serve_spdy<R, T>(
    io: T,
    protocol: &str,
    target: Target,
    opts: StdioOptions,
    rt: Arc<R>,
    limits: Limits,
) where
    R: StreamingRuntime,
    T: AsyncRead + AsyncWrite + Send + 'static,
{
    let (session, mut incoming) = Session::new(io, Role::Server, Some(limits.idle_timeout));
    let v3_or_later = matches!(
        protocol,
        protocols::STREAM_V3 | protocols::STREAM_V4 | protocols::STREAM_V5
    );
    let want_resize = opts.tty && v3_or_later;
    let (mut error, mut stdin, mut stdout, mut stderr, mut resize) = (None, None, None, None, None);
    let complete = |e: &Option<_>, i: &Option<_>, o: &Option<_>, r: &Option<_>, s: &Option<_>| {
        e.is_some()
            && (!opts.stdin || i.is_some())
            && (!opts.stdout || o.is_some())
            && (!opts.stderr || s.is_some())
            && (!want_resize || r.is_some())
    };
    let gather = async {
        while !complete(&error, &stdin, &stdout, &resize, &stderr) {
            let Some(s) = incoming.accept().await else {
                return false;
            };
            match s.header("streamtype").unwrap_or("") {
                "error" => error = Some(s),
                "stdin" => stdin = Some(s),
                "stdout" => stdout = Some(s),
                "stderr" => stderr = Some(s),
                "resize" => resize = Some(s),
                other => debug!(streamtype = other, "ignoring an unknown stream"),
            }
        }
        true
    };
    match tokio::time::timeout(limits.stream_creation_timeout, gather).await {
        Ok(true) => {}
        _ => {
            debug!("streaming: the client did not open the expected streams");
            session.close().await;
            return;
        }
    }
    let Some(error) = error else { return };
    let spdy_out = |w: StreamWriter| {
        forward_output(move |b| {
            let w = w.clone();
            async move { w.write(b).await.is_ok() }
        })
    };
    let mut writers: Vec<(StreamWriter, JoinHandle<()>)> = Vec::new();
    let mut stdio = Stdio::default();
    if let Some(s) = stdin {
        // The client's FIN on stdin closes the receiver: EOF for the process.
        stdio.stdin = Some(s.split().0);
    }
    for (s, slot) in [(stdout, &mut stdio.stdout), (stderr, &mut stdio.stderr)] {
        if let Some(s) = s {
            let w = s.writer();
            let (tx, task) = spdy_out(w.clone());
            *slot = Some(tx);
            writers.push((w, task));
        }
    }
    if let Some(s) = resize {
        stdio.resize = Some(resize_channel(s.split().0));
    }
    let outcome = tokio::select! {
        o = run(rt.as_ref(), target, opts.tty, stdio) => o,
        _ = session.closed() => {
            debug!("streaming: client went away");
            return;
        }
    };
    for (w, task) in writers {
        let _ = task.await;
        let _ = w.close().await;
    }
    let ew = error.writer();
    if let Some(msg) = encode_outcome(&outcome, protocol == protocols::STREAM_V4) {
        let _ = ew.write(Bytes::from(msg)).await;
    }
    let _ = ew.close().await;
    session.close().await;
    // Give the client a moment to read the end before dropping the connection.
    let _ = tokio::time::timeout(Duration::from_secs(5), session.closed()).await;
    session.abort();
}

/// Channel numbers of the remotecommand WebSocket protocols.
const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;

/// Serves one exec/attach session over a WebSocket with the negotiated subprotocol.
pub async fn serve_ws<R: StreamingRuntime>(
    ws: Ws,
    protocol: &str,
    target: Target,
    opts: StdioOptions,
    rt: Arc<R>,
    limits: Limits,
) {
    let base64 = protocol.contains("base64");
    let close_signal = protocol == protocols::STREAM_V5;
    let v4_status = protocol.starts_with("v4.") || protocol.starts_with("v5.");
    let readable = [opts.stdin, false, false, false, true];
    let mut ch = wschannel::open(ws, base64, &readable, close_signal, limits.idle_timeout);
    let w = ch.writer.clone();
    // Tell the client the session is up: an empty message on the lowest writable channel.
    let first = if opts.stdout {
        STDOUT
    } else if opts.stderr {
        STDERR
    } else {
        ERROR
    };
    w.write(first, Bytes::new()).await;
    let mut stdio = Stdio {
        stdin: ch.inbound[usize::from(STDIN)].take(),
        ..Default::default()
    };
    let mut tasks = Vec::new();
    for (on, chan, slot) in [
        (opts.stdout, STDOUT, &mut stdio.stdout),
        (opts.stderr, STDERR, &mut stdio.stderr),
    ] {
        if on {
            let w = w.clone();
            let (tx, task) = forward_output(move |b| {
                let w = w.clone();
                async move { w.write(chan, b).await }
            });
            *slot = Some(tx);
            tasks.push(task);
        }
    }
    if opts.tty
        && let Some(raw) = ch.inbound[usize::from(RESIZE)].take()
    {
        stdio.resize = Some(resize_channel(raw));
    }
    let closed = ch.closed.clone();
    let outcome = tokio::select! {
        o = run(rt.as_ref(), target, opts.tty, stdio) => o,
        _ = closed.cancelled() => {
            debug!("streaming: websocket client went away");
            return;
        }
    };
    for t in tasks {
        let _ = t.await;
    }
    if let Some(msg) = encode_outcome(&outcome, v4_status) {
        w.write(ERROR, Bytes::from(msg)).await;
    }
    w.close().await;
}
