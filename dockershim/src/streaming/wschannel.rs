//! The WebSocket channel protocol (apimachinery `wsstream`): every message starts with a
//! channel number (one byte in the binary protocols; an ASCII digit followed by base64 data in
//! the `base64.` ones), and in v5 a message `[255, n]` closes channel n (the client's stdin EOF).
//! [`open`] turns an upgraded WebSocket into per-channel receivers plus a [`WsWriter`]; an idle
//! timeout ends a connection with no messages either way.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// The v5 "close this channel" signal.
pub const CLOSE_SIGNAL: u8 = 255;

/// The upgraded connection.
pub type Ws = WebSocketStream<TokioIo<Upgraded>>;

enum Cmd {
    Data(u8, Bytes),
    Close(tokio::sync::oneshot::Sender<()>),
}

/// Writes channel messages (in order) and finally closes the connection.
#[derive(Clone)]
pub struct WsWriter {
    tx: mpsc::Sender<Cmd>,
}

impl WsWriter {
    /// Sends `data` on `channel` (an empty `data` still sends the channel byte).
    pub async fn write(&self, channel: u8, data: Bytes) -> bool {
        self.tx.send(Cmd::Data(channel, data)).await.is_ok()
    }

    /// Flushes what was written, sends a normal close and waits for it to go out.
    pub async fn close(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.tx.send(Cmd::Close(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }
}

/// An open channel connection.
pub struct WsChannels {
    pub writer: WsWriter,
    /// Data the client sent, per channel (`None` for channels the client may not write).
    pub inbound: Vec<Option<mpsc::Receiver<Bytes>>>,
    /// Cancelled when the connection ends.
    pub closed: CancellationToken,
}

/// Starts the reader and writer tasks. `readable[n]` says whether the client may write
/// channel n; `close_signal` enables v5's channel close.
pub fn open(
    ws: Ws,
    base64: bool,
    readable: &[bool],
    close_signal: bool,
    idle_timeout: Duration,
) -> WsChannels {
    let (sink, mut stream) = ws.split();
    let closed = CancellationToken::new();
    let started = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let touch = {
        let last = last.clone();
        move || last.store(started.elapsed().as_millis() as u64, Ordering::Relaxed)
    };
    let mut senders = Vec::new();
    let mut inbound = Vec::new();
    for &r in readable {
        if r {
            let (tx, rx) = mpsc::channel::<Bytes>(64);
            senders.push(Some(tx));
            inbound.push(Some(rx));
        } else {
            senders.push(None);
            inbound.push(None);
        }
    }
    let (cmd_tx, mut cmd_rx) = mpsc::channel::<Cmd>(256);
    // Writer.
    {
        let closed = closed.clone();
        let touch = touch.clone();
        tokio::spawn(async move {
            let mut sink = sink;
            loop {
                let cmd = tokio::select! {
                    c = cmd_rx.recv() => c,
                    _ = closed.cancelled() => None,
                };
                let Some(mut cmd) = cmd else { break };
                loop {
                    match cmd {
                        Cmd::Data(ch, data) => {
                            let msg = if base64 {
                                let mut s = String::with_capacity(1 + data.len() * 4 / 3 + 4);
                                s.push(char::from(b'0' + ch));
                                base64::engine::general_purpose::STANDARD
                                    .encode_string(&data, &mut s);
                                Message::Text(s.into())
                            } else {
                                let mut v = Vec::with_capacity(1 + data.len());
                                v.push(ch);
                                v.extend_from_slice(&data);
                                Message::Binary(v.into())
                            };
                            if sink.feed(msg).await.is_err() {
                                closed.cancel();
                                return;
                            }
                        }
                        Cmd::Close(done) => {
                            let _ = sink
                                .send(Message::Close(Some(CloseFrame {
                                    code: CloseCode::Normal,
                                    reason: "".into(),
                                })))
                                .await;
                            let _ = sink.close().await;
                            let _ = done.send(());
                            closed.cancel();
                            return;
                        }
                    }
                    match cmd_rx.try_recv() {
                        Ok(c) => cmd = c,
                        Err(_) => break,
                    }
                }
                if sink.flush().await.is_err() {
                    closed.cancel();
                    return;
                }
                touch();
            }
        });
    }
    // Reader.
    {
        let closed = closed.clone();
        tokio::spawn(async move {
            let mut senders = senders;
            loop {
                let msg = tokio::select! {
                    m = stream.next() => m,
                    _ = closed.cancelled() => None,
                };
                let Some(Ok(msg)) = msg else { break };
                touch();
                let raw: Vec<u8> = match msg {
                    Message::Binary(b) => b.to_vec(),
                    Message::Text(t) => {
                        let t = t.as_bytes();
                        if t.is_empty() {
                            continue;
                        }
                        let mut v = vec![t[0].wrapping_sub(b'0')];
                        match base64::engine::general_purpose::STANDARD.decode(&t[1..]) {
                            Ok(d) => v.extend_from_slice(&d),
                            Err(_) => {
                                debug!("websocket: bad base64 message");
                                continue;
                            }
                        }
                        v
                    }
                    Message::Close(_) => break,
                    _ => continue,
                };
                if raw.is_empty() {
                    continue;
                }
                if close_signal && raw[0] == CLOSE_SIGNAL {
                    if let Some(&ch) = raw.get(1)
                        && let Some(slot) = senders.get_mut(usize::from(ch))
                    {
                        *slot = None;
                    }
                    continue;
                }
                let ch = usize::from(raw[0]);
                let data = Bytes::from(raw).slice(1..);
                if data.is_empty() {
                    continue;
                }
                if let Some(Some(tx)) = senders.get(ch)
                    && tx.send(data).await.is_err()
                {
                    senders[ch] = None;
                }
            }
            closed.cancel();
        });
    }
    // Idle watchdog.
    {
        let closed = closed.clone();
        tokio::spawn(async move {
            let tick = (idle_timeout / 4).max(Duration::from_millis(50));
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(tick) => {}
                    _ = closed.cancelled() => return,
                }
                let l = Duration::from_millis(last.load(Ordering::Relaxed));
                if started.elapsed().saturating_sub(l) >= idle_timeout {
                    debug!("websocket: idle timeout");
                    closed.cancel();
                    return;
                }
            }
        });
    }
    WsChannels {
        writer: WsWriter { tx: cmd_tx },
        inbound,
        closed,
    }
}
