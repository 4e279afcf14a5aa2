//! A client for CRI streaming URLs (what kubectl does through the API server, minus the API
//! server): exec and attach sessions over SPDY/3.1 (remotecommand v1..v4) or WebSocket
//! (channel.k8s.io, v4, v5, base64), and port-forward over SPDY (portforward.k8s.io) or
//! WebSocket. It speaks to any runtime's streaming server — containerd's Go one or our
//! dockershim's — so the conformance suite and the benchmarks judge both the same way.
//! `spdy_client` and `ws_client` hold the transports and `session` the session types they build
//! (re-exported here); this module picks the transport (`connect`, `http_get`).

mod session;
pub mod spdy_client;
pub mod ws_client;

use std::time::Duration;

pub use session::{
    ClientError, ExecResult, ExecSession, PortForwardConn, StdioRequest, TermSize, parse_status,
    split_url,
};

/// Which transport to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Spdy,
    WebSocket,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Spdy => "spdy",
            Transport::WebSocket => "websocket",
        }
    }
}

/// Opens an exec or attach session on `url`.
pub async fn connect(
    url: &str,
    transport: Transport,
    req: StdioRequest,
    protocols: Option<&[&str]>,
) -> Result<ExecSession, ClientError> {
    match transport {
        Transport::Spdy => spdy_client::exec(url, req, protocols).await,
        Transport::WebSocket => ws_client::exec(url, req, protocols).await,
    }
}

/// One HTTP/1.0 GET through a port-forward URL: returns the response (headers and body).
pub async fn http_get(
    url: &str,
    transport: Transport,
    port: u16,
    path: &str,
    timeout: Duration,
) -> Result<Vec<u8>, ClientError> {
    let mut conn = match transport {
        Transport::Spdy => {
            spdy_client::PortForwarder::connect(url)
                .await?
                .open(port)
                .await?
        }
        Transport::WebSocket => ws_client::port_forward(url, port).await?,
    };
    conn.write(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n"))
        .await?;
    if transport == Transport::Spdy {
        conn.close_write().await;
    }
    conn.read_to_end(timeout).await
}
