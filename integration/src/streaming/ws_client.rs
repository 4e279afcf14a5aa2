//! The WebSocket side of the streaming client (client-go's `WebSocketExecutor` and its
//! port-forward tunnel): subprotocols offered in `Sec-WebSocket-Protocol`, one byte of channel
//! number in front of each binary message (an ASCII digit and base64 in the `base64.` ones),
//! v5's `[255, 0]` to close stdin, and for port-forward the two-byte port prefix each channel
//! starts with.

use base64::Engine;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

use super::session::{
    ClientError, ExecSession, PortForwardConn, StdinMsg, StdioRequest, TermSize, split_url,
};

/// Default subprotocols offered for exec/attach, preferred first.
pub const REMOTECOMMAND_PROTOCOLS: &[&str] =
    &["v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io"];

type Ws = tokio_tungstenite::WebSocketStream<TcpStream>;

async fn handshake(url: &str, protocols: &[&str]) -> Result<(Ws, String), ClientError> {
    let (host, path) = split_url(url)?;
    let mut req = format!("ws://{host}{path}")
        .into_client_request()
        .map_err(|e| ClientError::Url(e.to_string()))?;
    if !protocols.is_empty() {
        let v = HeaderValue::from_str(&protocols.join(", "))
            .map_err(|e| ClientError::Url(e.to_string()))?;
        req.headers_mut().insert("Sec-WebSocket-Protocol", v);
    }
    let tcp = TcpStream::connect(&host).await?;
    tcp.set_nodelay(true)?;
    let (ws, resp) = match tokio_tungstenite::client_async(req, tcp).await {
        Ok(x) => x,
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            let body = resp
                .body()
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default();
            return Err(ClientError::Refused {
                status: resp.status().as_u16(),
                body,
            });
        }
        Err(e) => return Err(ClientError::Protocol(e.to_string())),
    };
    let protocol = resp
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    Ok((ws, protocol))
}

fn encode(base64: bool, ch: u8, data: &[u8]) -> Message {
    if base64 {
        let mut s = String::new();
        s.push(char::from(b'0' + ch));
        base64::engine::general_purpose::STANDARD.encode_string(data, &mut s);
        Message::Text(s.into())
    } else {
        let mut v = Vec::with_capacity(1 + data.len());
        v.push(ch);
        v.extend_from_slice(data);
        Message::Binary(v.into())
    }
}

fn decode(msg: Message) -> Option<(u8, Bytes)> {
    match msg {
        Message::Binary(b) if !b.is_empty() => {
            let b: Bytes = b;
            Some((b[0], b.slice(1..)))
        }
        Message::Text(t) if !t.is_empty() => {
            let t = t.as_bytes();
            let d = base64::engine::general_purpose::STANDARD
                .decode(&t[1..])
                .ok()?;
            Some((t[0].wrapping_sub(b'0'), Bytes::from(d)))
        }
        _ => None,
    }
}

enum Out {
    Data(u8, Bytes),
    CloseChannel(u8),
}

/// Splits `ws` into a writer task fed by the returned sender and a reader task routing each
/// channel's data to `routes[ch]`.
fn run(ws: Ws, base64: bool, routes: Vec<Option<mpsc::Sender<Bytes>>>) -> mpsc::Sender<Out> {
    let (mut sink, mut stream) = ws.split();
    let (tx, mut rx) = mpsc::channel::<Out>(64);
    tokio::spawn(async move {
        while let Some(o) = rx.recv().await {
            let msg = match o {
                Out::Data(ch, b) => encode(base64, ch, &b),
                Out::CloseChannel(ch) => Message::Binary(vec![255, ch].into()),
            };
            if sink.send(msg).await.is_err() {
                return;
            }
        }
        let _ = sink.close().await;
    });
    // The reader holds a writer handle: the connection stays up until the server ends it.
    let keep = tx.clone();
    tokio::spawn(async move {
        let _keep = keep;
        let mut routes = routes;
        while let Some(Ok(msg)) = stream.next().await {
            if matches!(msg, Message::Close(_)) {
                break;
            }
            let Some((ch, data)) = decode(msg) else {
                continue;
            };
            if data.is_empty() {
                continue;
            }
            if let Some(Some(tx)) = routes.get(usize::from(ch))
                && tx.send(data).await.is_err()
            {
                routes[usize::from(ch)] = None;
            }
        }
    });
    tx
}

/// Opens an exec/attach session over WebSocket.
pub async fn exec(
    url: &str,
    req: StdioRequest,
    protocols: Option<&[&str]>,
) -> Result<ExecSession, ClientError> {
    let (ws, protocol) = handshake(url, protocols.unwrap_or(REMOTECOMMAND_PROTOCOLS)).await?;
    let base64 = protocol.contains("base64");
    let (out_tx, out_rx) = mpsc::channel(64);
    let (err_tx, err_rx) = mpsc::channel(64);
    let (status_tx, status_rx) = mpsc::channel(8);
    let writer = run(
        ws,
        base64,
        vec![None, Some(out_tx), Some(err_tx), Some(status_tx)],
    );
    let stdin = req.stdin.then(|| {
        let (tx, mut rx) = mpsc::channel::<StdinMsg>(16);
        let w = writer.clone();
        let v5 = protocol == "v5.channel.k8s.io";
        tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                match m {
                    StdinMsg::Data(b) => {
                        if w.send(Out::Data(0, b)).await.is_err() {
                            return;
                        }
                    }
                    StdinMsg::Close => {
                        if v5 {
                            let _ = w.send(Out::CloseChannel(0)).await;
                        }
                        return;
                    }
                }
            }
        });
        tx
    });
    let resize = req.tty.then(|| {
        let (tx, mut rx) = mpsc::channel::<TermSize>(8);
        let w = writer.clone();
        tokio::spawn(async move {
            while let Some(sz) = rx.recv().await {
                let j = serde_json::to_vec(&sz).unwrap_or_default();
                if w.send(Out::Data(4, Bytes::from(j))).await.is_err() {
                    return;
                }
            }
        });
        tx
    });
    Ok(ExecSession {
        protocol,
        stdin,
        resize,
        stdout: out_rx,
        stderr: err_rx,
        error: status_rx,
    })
}

/// Opens a WebSocket port-forward to one `port` (channel 0 data, channel 1 errors).
pub async fn port_forward(url: &str, port: u16) -> Result<PortForwardConn, ClientError> {
    let url = format!(
        "{url}{}port={port}",
        if url.contains('?') { '&' } else { '?' }
    );
    let (ws, protocol) = handshake(&url, &["v4.channel.k8s.io", "portforward.k8s.io"]).await?;
    let (data_tx, data_rx) = mpsc::channel(64);
    let (err_tx, err_rx) = mpsc::channel(8);
    // Each channel starts with the port number (2 bytes, little endian): strip it.
    let strip = |tx: mpsc::Sender<Bytes>| {
        let (in_tx, mut in_rx) = mpsc::channel::<Bytes>(64);
        tokio::spawn(async move {
            let mut skip = 2usize;
            while let Some(mut b) = in_rx.recv().await {
                let n = skip.min(b.len());
                skip -= n;
                let _ = b.split_to(n);
                if !b.is_empty() && tx.send(b).await.is_err() {
                    return;
                }
            }
        });
        in_tx
    };
    let writer = run(
        ws,
        protocol.contains("base64"),
        vec![Some(strip(data_tx)), Some(strip(err_tx))],
    );
    let (tx, mut rx) = mpsc::channel::<StdinMsg>(16);
    tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if let StdinMsg::Data(b) = m
                && writer.send(Out::Data(0, b)).await.is_err()
            {
                return;
            }
        }
    });
    Ok(PortForwardConn {
        tx,
        rx: data_rx,
        error: err_rx,
        _keep: None,
    })
}
