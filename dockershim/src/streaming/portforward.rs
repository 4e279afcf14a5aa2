//! Port forwarding (upstream `portforward` server). Over SPDY (`portforward.k8s.io`) the client
//! opens, per forwarded connection, an error stream and a data stream carrying the same `port`
//! and `requestid` headers; once both are there dockershim dials the port inside the sandbox's
//! network namespace and copies bytes both ways (client EOF half-closes the pod socket; the
//! pod's EOF ends the data stream), reporting a failure as text on the error stream. Over
//! WebSocket the ports come from `?port=` query parameters, channel 2i carries data for the
//! i-th port and 2i+1 its errors, and each channel's first message is the port (u16 LE).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tracing::debug;

use super::config::Limits;
use super::runtime::StreamingRuntime;
use super::spdy::{Role, Session, Stream};
use super::wschannel::{self, Ws, WsWriter};

/// Copies between a pod connection and a client stream until the pod side ends. `to_client`
/// gets each chunk the pod sends; `from_client` ends at the client's EOF.
async fn pump<W, Fut>(conn: TcpStream, mut from_client: mpsc::Receiver<Bytes>, to_client: W)
where
    W: Fn(Bytes) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let (mut rd, mut wr) = conn.into_split();
    let upstream = async move {
        while let Some(b) = from_client.recv().await {
            if wr.write_all(&b).await.is_err() {
                return;
            }
        }
        let _ = wr.shutdown().await;
        // Keep the write half alive until the pod side finishes.
        std::future::pending::<()>().await;
    };
    let downstream = async {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        loop {
            buf.reserve(64 * 1024);
            match rd.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if !to_client(buf.split().freeze()).await {
                        return;
                    }
                }
            }
        }
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
    }
}

fn parse_port(s: &str) -> Result<u16, String> {
    match s.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(format!("invalid port {s:?}")),
    }
}

/// Serves a SPDY port-forward connection for `sandbox_id`.
pub async fn serve_spdy<R, T>(io: T, sandbox_id: String, rt: Arc<R>, limits: Limits)
where
    R: StreamingRuntime,
    T: AsyncRead + AsyncWrite + Send + 'static,
{
    let (session, mut incoming) = Session::new(io, Role::Server, Some(limits.idle_timeout));
    let mut pending: HashMap<String, (Option<Stream>, Option<Stream>)> = HashMap::new();
    loop {
        let stream = tokio::select! {
            s = incoming.accept() => s,
            _ = session.closed() => None,
        };
        let Some(stream) = stream else { break };
        let request_id = stream
            .header("requestid")
            .map(str::to_string)
            .unwrap_or_else(|| stream.id.to_string());
        let kind = stream.header("streamtype").unwrap_or("").to_string();
        let entry = pending.entry(request_id.clone()).or_default();
        match kind.as_str() {
            "error" => entry.0 = Some(stream),
            "data" => entry.1 = Some(stream),
            other => {
                debug!(streamtype = other, "port-forward: unknown stream type");
                let _ = stream.writer().reset().await;
                continue;
            }
        }
        if let (Some(_), Some(_)) = entry {
            let Some((Some(error), Some(data))) = pending.remove(&request_id) else {
                continue;
            };
            tokio::spawn(forward_pair(rt.clone(), sandbox_id.clone(), error, data));
        }
    }
    session.abort();
}

async fn forward_pair<R: StreamingRuntime>(
    rt: Arc<R>,
    sandbox: String,
    error: Stream,
    data: Stream,
) {
    let ew = error.writer();
    let port = data
        .header("port")
        .ok_or_else(|| "missing port header".to_string())
        .and_then(parse_port);
    let result = match port {
        Ok(port) => rt
            .dial(&sandbox, port)
            .await
            .map(|c| (c, port))
            .map_err(|e| format!("error forwarding port {port} to pod {sandbox}, uid : {e}")),
        Err(e) => Err(e),
    };
    let (data_rx, dw) = data.split();
    match result {
        Ok((conn, _)) => {
            let w = dw.clone();
            pump(conn, data_rx, move |b| {
                let w = w.clone();
                async move { w.write(b).await.is_ok() }
            })
            .await;
        }
        Err(msg) => {
            debug!(%msg, "port-forward failed");
            let _ = ew.write(Bytes::from(msg)).await;
        }
    }
    let _ = dw.close().await;
    let _ = ew.close().await;
}

/// Serves a WebSocket port-forward connection for `sandbox_id` and the requested `ports`.
pub async fn serve_ws<R: StreamingRuntime>(
    ws: Ws,
    protocol: &str,
    sandbox_id: String,
    ports: Vec<u16>,
    rt: Arc<R>,
    limits: Limits,
) {
    let base64 = protocol.contains("base64");
    let readable: Vec<bool> = ports.iter().flat_map(|_| [true, false]).collect();
    let mut ch = wschannel::open(ws, base64, &readable, false, limits.idle_timeout);
    let w = ch.writer.clone();
    let mut tasks = Vec::new();
    for (i, port) in ports.iter().copied().enumerate() {
        let (data_ch, err_ch) = ((2 * i) as u8, (2 * i + 1) as u8);
        let prefix = Bytes::copy_from_slice(&port.to_le_bytes());
        w.write(data_ch, prefix.clone()).await;
        w.write(err_ch, prefix).await;
        let Some(from_client) = ch.inbound[2 * i].take() else {
            continue;
        };
        let (rt, sandbox, w) = (rt.clone(), sandbox_id.clone(), w.clone());
        tasks.push(tokio::spawn(ws_forward(
            rt,
            sandbox,
            port,
            from_client,
            w,
            data_ch,
            err_ch,
        )));
    }
    let closed = ch.closed.clone();
    tokio::select! {
        _ = futures::future::join_all(tasks) => {}
        _ = closed.cancelled() => return,
    }
    // Let queued data go out before closing.
    let _ = tokio::time::timeout(Duration::from_secs(5), w.close()).await;
}

async fn ws_forward<R: StreamingRuntime>(
    rt: Arc<R>,
    sandbox: String,
    port: u16,
    from_client: mpsc::Receiver<Bytes>,
    w: WsWriter,
    data_ch: u8,
    err_ch: u8,
) {
    match rt.dial(&sandbox, port).await {
        Ok(conn) => {
            let w2 = w.clone();
            pump(conn, from_client, move |b| {
                let w = w2.clone();
                async move { w.write(data_ch, b).await }
            })
            .await;
        }
        Err(e) => {
            let msg = format!("error forwarding port {port} to pod {sandbox}, uid : {e}");
            w.write(err_ch, Bytes::from(msg)).await;
        }
    }
}
