//! The CRI streaming server: Exec, Attach and PortForward validate their request (the container
//! or sandbox exists and runs; at least one of stdin/stdout/stderr; tty excludes stderr), store
//! it under a single-use token that expires after a minute (`tokens`) and answer an absolute URL
//! on the streaming server (`server`), which serves the session over SPDY/3.1 (`spdy`) or
//! WebSocket (`wschannel`) with the remotecommand and portforward subprotocols
//! (`remotecommand`, `portforward`), on the Docker side through exec/attach and a dial inside
//! the sandbox's network namespace (`runtime`). `stdio` is the protocol-neutral session face.
//! Limits: idle timeout, a cap on concurrent sessions and on pending tokens, loopback unless
//! `--streaming-bind-addr` says otherwise.

pub mod portforward;
pub mod remotecommand;
pub mod runtime;
pub mod server;
pub mod spdy;
pub mod stdio;
pub mod tokens;
pub mod wschannel;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::docker::DockerApi;
use crate::errors::{Result, ShimError};
use crate::shim::Shim;
pub use runtime::StreamingRuntime;
use tokens::{CachedRequest, RequestCache};

/// Protocol names, as upstream.
pub mod protocols {
    /// The SPDY handshake header carrying the offered / chosen subprotocols.
    pub const VERSION_HEADER: &str = "x-stream-protocol-version";
    pub const STREAM_V1: &str = "channel.k8s.io";
    pub const STREAM_V2: &str = "v2.channel.k8s.io";
    pub const STREAM_V3: &str = "v3.channel.k8s.io";
    pub const STREAM_V4: &str = "v4.channel.k8s.io";
    pub const STREAM_V5: &str = "v5.channel.k8s.io";
    pub const BASE64_V1: &str = "base64.channel.k8s.io";
    pub const BASE64_V4: &str = "v4.base64.channel.k8s.io";
    pub const PORTFORWARD_V1: &str = "portforward.k8s.io";
    /// remotecommand over SPDY, preferred first.
    pub const SPDY_REMOTECOMMAND: &[&str] = &[STREAM_V4, STREAM_V3, STREAM_V2, STREAM_V1];
    /// remotecommand over WebSocket.
    pub const WS_REMOTECOMMAND: &[&str] = &[STREAM_V5, STREAM_V4, BASE64_V4, STREAM_V1, BASE64_V1];
    /// portforward over SPDY.
    pub const SPDY_PORTFORWARD: &[&str] = &[PORTFORWARD_V1];
    /// portforward over WebSocket.
    pub const WS_PORTFORWARD: &[&str] = &[STREAM_V4, BASE64_V4, PORTFORWARD_V1];
}

/// Streaming server settings.
#[derive(Debug, Clone)]
pub struct StreamingConfig {
    /// `host:port`; port 0 picks one.
    pub bind_addr: String,
    /// How long a token stays valid.
    pub token_ttl: Duration,
    /// Pending tokens at most (upstream's maxInFlight).
    pub max_pending_tokens: usize,
    pub limits: Limits,
}

/// Per-session limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// A connection with no traffic for this long is closed (upstream default 4h).
    pub idle_timeout: Duration,
    /// How long a client may take to open a session's streams.
    pub stream_creation_timeout: Duration,
    /// Concurrent sessions at most.
    pub max_sessions: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(4 * 3600),
            stream_creation_timeout: Duration::from_secs(30),
            max_sessions: 128,
        }
    }
}

impl StreamingConfig {
    pub fn new(bind_addr: impl Into<String>) -> Self {
        Self {
            bind_addr: bind_addr.into(),
            token_ttl: Duration::from_secs(60),
            max_pending_tokens: 1000,
            limits: Limits::default(),
        }
    }
}

/// What the CRI side needs of a running streaming server: where it is, and its token cache.
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
    server::spawn(listener, rt, cache.clone(), config.limits.clone(), shutdown);
    info!(%addr, "dockershim streaming server listening");
    Ok(Handle { addr, cache })
}

fn check_stdio(stdin: bool, stdout: bool, stderr: bool, tty: bool) -> Result<()> {
    if tty && stderr {
        return Err(ShimError::invalid("tty and stderr cannot both be true"));
    }
    if !stdin && !stdout && !stderr {
        return Err(ShimError::invalid(
            "one of stdin, stdout, or stderr must be set",
        ));
    }
    Ok(())
}

impl<D: DockerApi> Shim<D> {
    fn streaming(&self) -> Result<&Handle> {
        self.streaming
            .get()
            .ok_or_else(|| ShimError::Unimplemented("the streaming server is not running".into()))
    }

    /// The full id of a running container, or NotFound / FailedPrecondition. One of ours that
    /// an inspect found running is remembered (see `cache`) until any container changes.
    async fn running_container(&self, id: &str, what: &str) -> Result<String> {
        if id.is_empty() {
            return Err(ShimError::invalid(format!("missing required {what}_id")));
        }
        if let Some(full) = self.listing.running(id) {
            return Ok(full);
        }
        let ticket = self.listing.ticket();
        let info = self.docker.inspect_container(id).await.map_err(|e| {
            if e.is_not_found() {
                ShimError::NotFound(format!("{what} {id:?} not found"))
            } else {
                e.into()
            }
        })?;
        if info.state.and_then(|s| s.running) != Some(true) {
            return Err(ShimError::FailedPrecondition(format!(
                "{what} {id} is not running"
            )));
        }
        let full = info.id.unwrap_or_else(|| id.to_string());
        let ours = info
            .config
            .and_then(|c| c.labels)
            .is_some_and(|l| l.contains_key(crate::labels::CONTAINER_TYPE_LABEL_KEY));
        if ours {
            self.listing.store_running(ticket, id, &full);
        }
        Ok(full)
    }

    /// CRI Exec: validates and returns the streaming URL.
    pub async fn exec(&self, mut req: cri::ExecRequest) -> Result<cri::ExecResponse> {
        let handle = self.streaming()?;
        if req.cmd.is_empty() {
            return Err(ShimError::invalid("cmd is required"));
        }
        check_stdio(req.stdin, req.stdout, req.stderr, req.tty)?;
        req.container_id = self
            .running_container(&req.container_id, "container")
            .await?;
        Ok(cri::ExecResponse {
            url: handle.url_for(CachedRequest::Exec(req))?,
        })
    }

    /// CRI Attach: validates and returns the streaming URL.
    pub async fn attach(&self, mut req: cri::AttachRequest) -> Result<cri::AttachResponse> {
        let handle = self.streaming()?;
        check_stdio(req.stdin, req.stdout, req.stderr, req.tty)?;
        req.container_id = self
            .running_container(&req.container_id, "container")
            .await?;
        Ok(cri::AttachResponse {
            url: handle.url_for(CachedRequest::Attach(req))?,
        })
    }

    /// CRI PortForward: validates and returns the streaming URL.
    pub async fn port_forward(
        &self,
        mut req: cri::PortForwardRequest,
    ) -> Result<cri::PortForwardResponse> {
        let handle = self.streaming()?;
        if req.port.iter().any(|p| !(1..=65535).contains(p)) {
            return Err(ShimError::invalid(format!(
                "invalid port in {:?}",
                req.port
            )));
        }
        req.pod_sandbox_id = self
            .running_container(&req.pod_sandbox_id, "pod_sandbox")
            .await?;
        Ok(cri::PortForwardResponse {
            url: handle.url_for(CachedRequest::PortForward(req))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdio_rules_follow_upstream() {
        assert!(check_stdio(false, false, false, false).is_err());
        assert!(check_stdio(false, true, true, true).is_err());
        assert!(check_stdio(true, true, false, true).is_ok());
        assert!(check_stdio(false, false, true, false).is_ok());
    }
}
