//! A byte-counting TCP proxy: listens on 127.0.0.1 and forwards every connection to one
//! upstream address, counting the bytes that pass each way. It reads nothing of what it
//! forwards (TLS passes through untouched, so clients still verify the upstream's
//! certificate, which must cover 127.0.0.1), which is how `hollow-bench` measures the bytes
//! an API server sends to and receives from a side's nodes, the same way for any kubelet:
//! the nodes' kubeconfigs name the proxy instead of the API server.
//!
//! Bytes are counted as they are read from one side, just before they are written to the
//! other, so a reader that has received bytes sees them counted. Handshakes, HTTP headers,
//! chunk framing and TLS records are all counted: it is what the wire carries.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// What passed through a [`ByteProxy`] so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ByteCounts {
    /// Bytes the clients sent to the upstream (requests).
    pub to_upstream: u64,
    /// Bytes the upstream sent to the clients (responses, watch streams).
    pub to_clients: u64,
    /// Connections accepted.
    pub connections: u64,
}

impl ByteCounts {
    /// The bytes counted since `earlier`.
    pub fn since(&self, earlier: &ByteCounts) -> ByteCounts {
        ByteCounts {
            to_upstream: self.to_upstream.saturating_sub(earlier.to_upstream),
            to_clients: self.to_clients.saturating_sub(earlier.to_clients),
            connections: self.connections.saturating_sub(earlier.connections),
        }
    }
}

#[derive(Default)]
struct Counters {
    to_upstream: AtomicU64,
    to_clients: AtomicU64,
    connections: AtomicU64,
}

/// A running proxy; it stops accepting and closes its connections when dropped.
pub struct ByteProxy {
    addr: SocketAddr,
    counters: Arc<Counters>,
    stop: CancellationToken,
}

impl ByteProxy {
    /// Listens on 127.0.0.1 (a free port) and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<ByteProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let counters = Arc::new(Counters::default());
        let stop = CancellationToken::new();
        let (c, s) = (Arc::clone(&counters), stop.clone());
        tokio::spawn(async move {
            loop {
                let client = tokio::select! {
                    _ = s.cancelled() => return,
                    accepted = listener.accept() => match accepted {
                        Ok((client, _)) => client,
                        Err(e) => {
                            tracing::warn!(error = %e, "byte proxy: accept failed");
                            continue;
                        }
                    },
                };
                c.connections.fetch_add(1, Ordering::Relaxed);
                let (c, s) = (Arc::clone(&c), s.clone());
                tokio::spawn(async move {
                    let Ok(up) = TcpStream::connect(upstream).await else {
                        return; // dropping the client closes it, as a refused connection would
                    };
                    let _ = client.set_nodelay(true);
                    let _ = up.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (ur, uw) = up.into_split();
                    let up_counter = Arc::clone(&c);
                    tokio::select! {
                        _ = s.cancelled() => {}
                        _ = async {
                            tokio::join!(
                                pump(cr, uw, move |n| {
                                    up_counter.to_upstream.fetch_add(n, Ordering::Relaxed);
                                }),
                                pump(ur, cw, move |n| {
                                    c.to_clients.fetch_add(n, Ordering::Relaxed);
                                }),
                            )
                        } => {}
                    }
                });
            }
        });
        Ok(ByteProxy {
            addr,
            counters,
            stop,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The counts so far.
    pub fn counts(&self) -> ByteCounts {
        ByteCounts {
            to_upstream: self.counters.to_upstream.load(Ordering::Relaxed),
            to_clients: self.counters.to_clients.load(Ordering::Relaxed),
            connections: self.counters.connections.load(Ordering::Relaxed),
        }
    }
}

impl Drop for ByteProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Copies `from` to `to` until end of stream or an error, counting each chunk before it is
/// written; at the end it shuts `to` down (a half-close passes through).
async fn pump<R, W, F>(mut from: R, mut to: W, count: F)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
    F: Fn(u64),
{
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        count(n as u64);
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// `url` with its authority (`host:port`) replaced by `addr`, the scheme and path kept:
/// `https://127.0.0.1:6443` → `https://127.0.0.1:<proxy port>`.
pub fn redirect_url(url: &str, addr: SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("https", url));
    let path = rest.find('/').map_or("", |i| &rest[i..]);
    format!("{scheme}://{addr}{path}")
}

/// A kubeconfig's text with every `server:` line pointing at `addr` instead (see
/// [`redirect_url`]); the rest (CA, credentials) unchanged.
pub fn redirect_kubeconfig(text: &str, addr: SocketAddr) -> String {
    text.lines()
        .map(|line| {
            let trimmed = line.trim_start();
            match trimmed.strip_prefix("server:") {
                Some(url) => {
                    let indent = &line[..line.len() - trimmed.len()];
                    format!("{indent}server: {}", redirect_url(url.trim(), addr))
                }
                None => line.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The `host:port` the first `server:` line of a kubeconfig names, resolved (for
/// [`ByteProxy::start`]); the scheme's default port when it names none.
pub fn kubeconfig_server_addr(text: &str) -> Option<SocketAddr> {
    use std::net::ToSocketAddrs;
    let url = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("server:"))?
        .trim()
        .trim_matches('"');
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split('/').next()?;
    let with_port = if authority.rsplit_once(':').is_some_and(|(h, p)| {
        !h.is_empty() && !h.ends_with(':') && p.chars().all(|c| c.is_ascii_digit())
    }) {
        authority.to_string()
    } else {
        let port = if scheme == "http" { 80 } else { 443 };
        format!("{authority}:{port}")
    };
    with_port.to_socket_addrs().ok()?.next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn it_counts_exactly_the_bytes_that_pass_each_way() {
        // An upstream that reads 1,000 bytes, answers 3,000 and closes.
        let upstream = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let up_addr = upstream.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            for _ in 0..2 {
                let (mut s, _) = upstream.accept().await.expect("accept");
                let mut req = vec![0u8; 1000];
                s.read_exact(&mut req).await.expect("request");
                assert!(req.iter().all(|b| *b == 7), "the request arrives unchanged");
                s.write_all(&[9u8; 3000]).await.expect("answer");
                s.shutdown().await.expect("shutdown");
            }
        });
        let proxy = ByteProxy::start(up_addr).await.expect("proxy");
        assert_eq!(proxy.counts(), ByteCounts::default());
        for round in 1..=2u64 {
            let mut c = TcpStream::connect(proxy.addr()).await.expect("connect");
            c.write_all(&[7u8; 1000]).await.expect("send");
            let mut answer = Vec::new();
            c.read_to_end(&mut answer).await.expect("read");
            assert_eq!(answer, vec![9u8; 3000], "the answer arrives unchanged");
            assert_eq!(
                proxy.counts(),
                ByteCounts {
                    to_upstream: 1000 * round,
                    to_clients: 3000 * round,
                    connections: round,
                }
            );
        }
        server.await.expect("upstream");
        let before = ByteCounts {
            to_upstream: 1000,
            to_clients: 3000,
            connections: 1,
        };
        assert_eq!(
            proxy.counts().since(&before),
            ByteCounts {
                to_upstream: 1000,
                to_clients: 3000,
                connections: 1,
            }
        );
    }

    #[test]
    fn kubeconfigs_are_redirected_to_the_proxy() {
        let addr: SocketAddr = "127.0.0.1:4000".parse().expect("addr");
        let kc = "clusters:\n- name: judge\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority-data: QUJD\nusers: []\n";
        let out = redirect_kubeconfig(kc, addr);
        assert!(
            out.contains("    server: https://127.0.0.1:4000\n"),
            "{out}"
        );
        assert!(
            out.contains("    certificate-authority-data: QUJD\n"),
            "{out}"
        );
        assert_eq!(
            kubeconfig_server_addr(kc),
            Some("127.0.0.1:6443".parse().expect("addr"))
        );
        assert_eq!(
            redirect_url("http://127.0.0.1:8080/prefix", addr),
            "http://127.0.0.1:4000/prefix"
        );
        assert_eq!(
            kubeconfig_server_addr("    server: http://127.0.0.1\n"),
            Some("127.0.0.1:80".parse().expect("addr"))
        );
        assert_eq!(kubeconfig_server_addr("users: []\n"), None);
    }
}
