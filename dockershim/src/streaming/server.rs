//! The streaming HTTP server (upstream `streaming/server.go`): `/exec/{token}`,
//! `/attach/{token}` and `/portforward/{token}` on hyper, each consuming its single-use token
//! first (unknown, used or expired tokens get 404), then upgrading to WebSocket (when the request
//! asks for it) or SPDY/3.1 with the subprotocol negotiated from the client's list
//! (`Sec-WebSocket-Protocol` / `X-Stream-Protocol-Version`). A semaphore caps concurrent
//! sessions (503 beyond it). [`start`] binds and spawns it and returns its [`Handle`], which
//! stores validated requests under tokens and answers their URLs.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role as WsRole, WebSocketConfig};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use cri_proto::runtime::v1 as cri;

use super::config::{Limits, StreamingConfig, protocols};
use super::portforward;
use super::remotecommand::{self, Target};
use super::runtime::StreamingRuntime;
use super::stdio::StdioOptions;
use super::tokens::{CachedRequest, RequestCache};
use crate::errors::{Result, ShimError};
use crate::shim::StreamingServer;

/// A session whose token was consumed and whose upgrade was accepted.
enum Accepted {
    /// Exec (already being prepared) or attach, and the streams the client asked for.
    RemoteCommand(Target, StdioOptions),
    PortForward(cri::PortForwardRequest),
}

struct State<R> {
    rt: Arc<R>,
    cache: Arc<RequestCache>,
    sessions: Arc<Semaphore>,
    limits: Limits,
}

type Resp = Response<Full<Bytes>>;

fn text(status: StatusCode, msg: impl Into<String>) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(msg.into())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// A running streaming server: where it is, and its token cache. The CRI side reaches it
/// through the shim's [`StreamingServer`] trait.
#[derive(Clone)]
pub struct Handle {
    pub addr: SocketAddr,
    cache: Arc<RequestCache>,
}

impl Handle {
    /// Stores `req` and returns the absolute URL that serves it once.
    pub fn url_for(&self, req: CachedRequest) -> Result<String> {
        let kind = req.kind();
        let token = self
            .cache
            .insert(req)
            .map_err(|e| ShimError::ResourceExhausted(e.to_string()))?;
        Ok(format!("http://{}/{kind}/{token}", self.addr))
    }
}

/// Binds `config.bind_addr` and serves until `shutdown`.
pub async fn start<R: StreamingRuntime>(
    config: &StreamingConfig,
    rt: Arc<R>,
    shutdown: CancellationToken,
) -> std::io::Result<Handle> {
    let listener = TcpListener::bind(&config.bind_addr).await?;
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "the streaming server listens beyond loopback (--streaming-bind-addr)");
    }
    let cache = Arc::new(RequestCache::new(
        config.token_ttl,
        config.max_pending_tokens,
    ));
    spawn(listener, rt, cache.clone(), config.limits.clone(), shutdown);
    info!(%addr, "dockershim streaming server listening");
    Ok(Handle { addr, cache })
}

impl StreamingServer for Handle {
    fn get_exec(&self, req: cri::ExecRequest) -> Result<cri::ExecResponse> {
        Ok(cri::ExecResponse {
            url: self.url_for(CachedRequest::Exec(req))?,
        })
    }

    fn get_attach(&self, req: cri::AttachRequest) -> Result<cri::AttachResponse> {
        Ok(cri::AttachResponse {
            url: self.url_for(CachedRequest::Attach(req))?,
        })
    }

    fn get_port_forward(&self, req: cri::PortForwardRequest) -> Result<cri::PortForwardResponse> {
        Ok(cri::PortForwardResponse {
            url: self.url_for(CachedRequest::PortForward(req))?,
        })
    }
}

/// Serves on `listener` until `shutdown`.
pub fn spawn<R: StreamingRuntime>(
    listener: TcpListener,
    rt: Arc<R>,
    cache: Arc<RequestCache>,
    limits: Limits,
    shutdown: CancellationToken,
) {
    let state = Arc::new(State {
        rt,
        cache,
        sessions: Arc::new(Semaphore::new(limits.max_sessions)),
        limits,
    });
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(e) => {
                        warn!(error = %e, "streaming: accept failed");
                        continue;
                    }
                },
                _ = shutdown.cancelled() => break,
            };
            let _ = tcp.set_nodelay(true);
            let state = state.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(handle(req, state, peer).await) }
                });
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .with_upgrades()
                    .await
                {
                    debug!(error = %e, "streaming: connection ended");
                }
            });
        }
        info!("streaming server stopped");
    });
}

/// All values of `name`, comma-separated lists flattened, in order.
fn header_list(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The client offered protocols, none of which we support.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("unable to negotiate protocol")]
pub struct NoCommonProtocol;

/// The first protocol the client offered that we support; `Ok(None)` when it offered none.
pub fn negotiate(
    offered: &[String],
    supported: &[&str],
) -> Result<Option<String>, NoCommonProtocol> {
    if offered.is_empty() {
        return Ok(None);
    }
    offered
        .iter()
        .find(|p| supported.contains(&p.as_str()))
        .map(|p| Some(p.clone()))
        .ok_or(NoCommonProtocol)
}

fn is_websocket(headers: &HeaderMap) -> bool {
    let has = |name: header::HeaderName, want: &str| {
        header_list(headers, name.as_str())
            .iter()
            .any(|v| v.eq_ignore_ascii_case(want))
    };
    has(header::CONNECTION, "upgrade") && has(header::UPGRADE, "websocket")
}

fn is_spdy(headers: &HeaderMap) -> bool {
    header_list(headers, header::UPGRADE.as_str())
        .iter()
        .any(|v| v.eq_ignore_ascii_case("SPDY/3.1"))
}

async fn handle<R: StreamingRuntime>(
    mut req: Request<Incoming>,
    state: Arc<State<R>>,
    peer: SocketAddr,
) -> Resp {
    if req.method() != http::Method::GET && req.method() != http::Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    }
    let path = req.uri().path().trim_matches('/').to_string();
    let Some((kind, token)) = path.split_once('/') else {
        return text(StatusCode::NOT_FOUND, "not found");
    };
    if !matches!(kind, "exec" | "attach" | "portforward") || token.contains('/') {
        return text(StatusCode::NOT_FOUND, "not found");
    }
    // Single use: the token is gone whatever happens next.
    let Some(cached) = state.cache.consume(token) else {
        debug!(%peer, kind, "streaming: unknown, used or expired token");
        return text(StatusCode::NOT_FOUND, "token not found or expired");
    };
    if cached.kind() != kind {
        return text(StatusCode::NOT_FOUND, "token not found or expired");
    }
    let Ok(permit) = state.sessions.clone().try_acquire_owned() else {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many concurrent streaming sessions",
        );
    };
    let websocket = is_websocket(req.headers());
    if !websocket && !is_spdy(req.headers()) {
        return text(
            StatusCode::BAD_REQUEST,
            "unable to upgrade: missing upgrade headers in request",
        );
    }
    let port_forward = matches!(cached, CachedRequest::PortForward(_));
    let supported: &[&str] = match (websocket, port_forward) {
        (true, false) => protocols::WS_REMOTECOMMAND,
        (false, false) => protocols::SPDY_REMOTECOMMAND,
        (true, true) => protocols::WS_PORTFORWARD,
        (false, true) => protocols::SPDY_PORTFORWARD,
    };
    let offered = if websocket {
        header_list(req.headers(), "sec-websocket-protocol")
    } else {
        header_list(req.headers(), protocols::VERSION_HEADER)
    };
    let protocol = match negotiate(&offered, supported) {
        Ok(p) => p,
        Err(NoCommonProtocol) => {
            return text(
                StatusCode::FORBIDDEN,
                format!(
                    "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server supports {supported:?}"
                ),
            );
        }
    };
    let ws_ports = if websocket && port_forward {
        let ports: Result<Vec<u16>, String> = req
            .uri()
            .query()
            .unwrap_or("")
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .filter(|(k, _)| *k == "port" || *k == "ports")
            .flat_map(|(_, v)| v.split(',').map(str::to_string).collect::<Vec<_>>())
            .map(|p| {
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| format!("invalid port {p:?}"))
            })
            .collect();
        match ports {
            Ok(p) if !p.is_empty() => p,
            Ok(_) => {
                return text(
                    StatusCode::BAD_REQUEST,
                    "query parameter \"port\" is required",
                );
            }
            Err(e) => return text(StatusCode::BAD_REQUEST, e),
        }
    } else {
        Vec::new()
    };
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if websocket {
        let Some(key) = req.headers().get("sec-websocket-key") else {
            return text(StatusCode::BAD_REQUEST, "missing Sec-WebSocket-Key");
        };
        let accept = derive_accept_key(key.as_bytes());
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        if let Ok(v) = HeaderValue::from_str(&accept) {
            h.insert("sec-websocket-accept", v);
        }
        if let Some(p) = &protocol
            && let Ok(v) = HeaderValue::from_str(p)
        {
            h.insert("sec-websocket-protocol", v);
        }
    } else {
        h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
        if let Some(p) = &protocol
            && let Ok(v) = HeaderValue::from_str(p)
        {
            h.insert(protocols::VERSION_HEADER, v);
        }
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    let limits = state.limits.clone();
    let rt = state.rt.clone();
    let kind = cached.kind();
    // An exec is prepared from here on, while the 101 goes out and the client opens streams.
    let opts = |stdin, stdout, stderr, tty| StdioOptions {
        stdin,
        stdout,
        stderr,
        tty,
    };
    let accepted = match cached {
        CachedRequest::Exec(e) => {
            let o = opts(e.stdin, e.stdout, e.stderr, e.tty);
            Accepted::RemoteCommand(Target::exec(&rt, e.container_id, e.cmd, o), o)
        }
        CachedRequest::Attach(a) => Accepted::RemoteCommand(
            Target::Attach {
                container_id: a.container_id,
            },
            opts(a.stdin, a.stdout, a.stderr, a.tty),
        ),
        CachedRequest::PortForward(pf) => Accepted::PortForward(pf),
    };
    tokio::spawn(async move {
        let _permit = permit;
        let upgraded = match on_upgrade.await {
            Ok(u) => TokioIo::new(u),
            Err(e) => {
                debug!(error = %e, "streaming: upgrade failed");
                return;
            }
        };
        let protocol = protocol.unwrap_or_default();
        debug!(%peer, websocket, %protocol, kind, "streaming session");
        let (target, opts) = match accepted {
            Accepted::RemoteCommand(target, opts) => (target, opts),
            Accepted::PortForward(pf) => {
                if websocket {
                    let ws = WebSocketStream::from_raw_socket(
                        upgraded,
                        WsRole::Server,
                        Some(WebSocketConfig::default()),
                    )
                    .await;
                    portforward::serve_ws(ws, &protocol, pf.pod_sandbox_id, ws_ports, rt, limits)
                        .await;
                } else {
                    portforward::serve_spdy(upgraded, pf.pod_sandbox_id, rt, limits).await;
                }
                return;
            }
        };
        if websocket {
            let ws = WebSocketStream::from_raw_socket(
                upgraded,
                WsRole::Server,
                Some(WebSocketConfig::default()),
            )
            .await;
            remotecommand::serve_ws(ws, &protocol, target, opts, rt, limits).await;
        } else {
            remotecommand::serve_spdy(upgraded, &protocol, target, opts, rt, limits).await;
        }
    });
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_prefers_the_clients_order() {
        let offered = vec!["v5.channel.k8s.io".to_string(), "v4.channel.k8s.io".into()];
        assert_eq!(
            negotiate(&offered, protocols::SPDY_REMOTECOMMAND),
            Ok(Some("v4.channel.k8s.io".into()))
        );
        assert_eq!(
            negotiate(&offered, protocols::WS_REMOTECOMMAND),
            Ok(Some("v5.channel.k8s.io".into()))
        );
        assert_eq!(negotiate(&[], protocols::SPDY_REMOTECOMMAND), Ok(None));
        assert!(negotiate(&["x".into()], protocols::SPDY_REMOTECOMMAND).is_err());
    }
}
