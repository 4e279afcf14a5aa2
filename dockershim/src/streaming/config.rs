//! The streaming server's settings: where it listens, how long a token lives, how many may be
//! pending ([`StreamingConfig`]), the per-session [`Limits`], and the subprotocol names both
//! transports negotiate ([`protocols`]). Plain data; imports nothing of the crate.

use std::time::Duration;

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
