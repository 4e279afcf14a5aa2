//! The SPDY/3.1 side of the streaming client (client-go's `SPDYExecutor` and SPDY
//! port-forwarder): the `Upgrade: SPDY/3.1` handshake offering subprotocols in
//! `X-Stream-Protocol-Version`, then one SPDY stream per purpose (`streamtype` headers) on the
//! shared session from `dockershim::streaming::spdy`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use dockershim::streaming::spdy::{Headers, Role, Session, Stream};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::session::{
    ClientError, ExecSession, PortForwardConn, StdinMsg, StdioRequest, TermSize, split_url,
};

const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// Default subprotocols offered for exec/attach, preferred first.
pub const REMOTECOMMAND_PROTOCOLS: &[&str] = &[
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

/// Upgrades `url` to SPDY; returns the session and the negotiated protocol.
async fn handshake(url: &str, protocols: &[&str]) -> Result<(Session, String), ClientError> {
    let (host, path) = split_url(url)?;
    let tcp = TcpStream::connect(&host).await?;
    tcp.set_nodelay(true)?;
    let mut io = BufReader::new(tcp);
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nContent-Length: 0\r\n"
    );
    for p in protocols {
        req.push_str(&format!("X-Stream-Protocol-Version: {p}\r\n"));
    }
    req.push_str("\r\n");
    io.get_mut().write_all(req.as_bytes()).await?;
    let mut head = Vec::new();
    loop {
        let n = io.read_until(b'\n', &mut head).await?;
        if n == 0 {
            return Err(ClientError::Protocol(
                "connection closed in handshake".into(),
            ));
        }
        if head.ends_with(b"\r\n\r\n") {
            break;
        }
        if head.len() > 64 * 1024 {
            return Err(ClientError::Protocol("oversized handshake".into()));
        }
    }
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    resp.parse(&head)
        .map_err(|e| ClientError::Protocol(format!("bad response: {e}")))?;
    let status = resp.code.unwrap_or(0);
    let protocol = resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("x-stream-protocol-version"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned())
        .unwrap_or_default();
    if status != 101 {
        let mut body = vec![0u8; 4096];
        let n = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::io::AsyncReadExt::read(&mut io, &mut body),
        )
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or(0);
        return Err(ClientError::Refused {
            status,
            body: String::from_utf8_lossy(&body[..n]).into_owned(),
        });
    }
    let (session, _incoming) = Session::new(io, Role::Client, None);
    Ok((session, protocol))
}

fn h(pairs: &[(&str, &str)]) -> Headers {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn open(session: &Session, headers: Headers) -> Result<Stream, ClientError> {
    session
        .open(headers, REPLY_TIMEOUT)
        .await
        .map_err(|e| ClientError::Protocol(e.to_string()))
}

/// Forwards the caller's stdin messages to a stream (FIN on close).
fn stdin_pump(stream: Stream) -> mpsc::Sender<StdinMsg> {
    let (tx, mut rx) = mpsc::channel::<StdinMsg>(16);
    let w = stream.writer();
    tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            match m {
                StdinMsg::Data(b) => {
                    if w.write(b).await.is_err() {
                        return;
                    }
                }
                StdinMsg::Close => break,
            }
        }
        let _ = w.close().await;
    });
    tx
}

fn closed_receiver() -> mpsc::Receiver<Bytes> {
    mpsc::channel(1).1
}

/// Opens an exec/attach session: error stream first, then the requested ones (as client-go).
pub async fn exec(
    url: &str,
    req: StdioRequest,
    protocols: Option<&[&str]>,
) -> Result<ExecSession, ClientError> {
    let (session, protocol) = handshake(url, protocols.unwrap_or(REMOTECOMMAND_PROTOCOLS)).await?;
    let resize_ok =
        req.tty && matches!(protocol.as_str(), "v3.channel.k8s.io" | "v4.channel.k8s.io");
    let (error, stdin, stdout, stderr, resize) = tokio::try_join!(
        open(&session, h(&[("streamtype", "error")])),
        async {
            if req.stdin {
                Ok(Some(open(&session, h(&[("streamtype", "stdin")])).await?))
            } else {
                Ok(None)
            }
        },
        async {
            if req.stdout {
                Ok(Some(open(&session, h(&[("streamtype", "stdout")])).await?))
            } else {
                Ok(None)
            }
        },
        async {
            if req.stderr && !req.tty {
                Ok(Some(open(&session, h(&[("streamtype", "stderr")])).await?))
            } else {
                Ok(None)
            }
        },
        async {
            if resize_ok {
                Ok::<_, ClientError>(Some(open(&session, h(&[("streamtype", "resize")])).await?))
            } else {
                Ok(None)
            }
        },
    )?;
    let resize = resize.map(|s| {
        let (tx, mut rx) = mpsc::channel::<TermSize>(8);
        let w = s.writer();
        tokio::spawn(async move {
            while let Some(sz) = rx.recv().await {
                let mut j = serde_json::to_vec(&sz).unwrap_or_default();
                j.push(b'\n');
                if w.write(Bytes::from(j)).await.is_err() {
                    return;
                }
            }
        });
        tx
    });
    Ok(ExecSession {
        protocol,
        stdin: stdin.map(stdin_pump),
        resize,
        stdout: stdout.map(|s| s.split().0).unwrap_or_else(closed_receiver),
        stderr: stderr.map(|s| s.split().0).unwrap_or_else(closed_receiver),
        error: error.split().0,
    })
}

/// A SPDY port-forward connection: any number of forwarded connections (request ids).
pub struct PortForwarder {
    session: Session,
    next_request: AtomicU32,
}

impl PortForwarder {
    pub async fn connect(url: &str) -> Result<PortForwarder, ClientError> {
        let (session, protocol) = handshake(url, &["portforward.k8s.io"]).await?;
        if protocol != "portforward.k8s.io" {
            return Err(ClientError::Protocol(format!(
                "server chose {protocol:?} for port-forward"
            )));
        }
        Ok(PortForwarder {
            session,
            next_request: AtomicU32::new(0),
        })
    }

    /// Opens a new forwarded connection to `port` (error stream, then data stream).
    pub async fn open(&self, port: u16) -> Result<PortForwardConn, ClientError> {
        let id = self
            .next_request
            .fetch_add(1, Ordering::Relaxed)
            .to_string();
        let port = port.to_string();
        let error = open(
            &self.session,
            h(&[("streamtype", "error"), ("port", &port), ("requestid", &id)]),
        )
        .await?;
        let data = open(
            &self.session,
            h(&[("streamtype", "data"), ("port", &port), ("requestid", &id)]),
        )
        .await?;
        let w = data.writer();
        let (tx, mut rx) = mpsc::channel::<StdinMsg>(16);
        tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                match m {
                    StdinMsg::Data(b) => {
                        if w.write(b).await.is_err() {
                            return;
                        }
                    }
                    StdinMsg::Close => break,
                }
            }
            let _ = w.close().await;
        });
        Ok(PortForwardConn {
            tx,
            rx: data.split().0,
            error: error.split().0,
            _keep: Some(Box::new(self.session.clone())),
        })
    }

    /// Ends the connection.
    pub async fn close(&self) {
        self.session.close().await;
    }
}
