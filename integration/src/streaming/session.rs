//! The session types both transports build and every caller holds: what a session asks for
//! (`StdioRequest`), a live exec / attach session (`ExecSession`) and how it ended
//! (`ExecResult`, with the v4/v5 error-stream `parse_status`), one forwarded connection
//! (`PortForwardConn`), the errors (`ClientError`) and the URL split. Imports nothing of
//! `spdy_client`, `ws_client` or the parent module.

use std::time::Duration;

use bytes::Bytes;
pub use dockershim::streaming::stdio::TermSize;
use tokio::sync::mpsc;

/// Why a streaming client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("bad streaming url {0:?}")]
    Url(String),
    #[error("connect: {0}")]
    Io(#[from] std::io::Error),
    #[error("upgrade refused: HTTP {status}: {body}")]
    Refused { status: u16, body: String },
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("timed out: {0}")]
    Timeout(&'static str),
}

/// What the session asks for (must match the CRI request).
#[derive(Debug, Clone, Copy, Default)]
pub struct StdioRequest {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// `host:port` and path of an `http://` streaming URL.
pub fn split_url(url: &str) -> Result<(String, String), ClientError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| ClientError::Url(url.to_string()))?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if host.is_empty() {
        return Err(ClientError::Url(url.to_string()));
    }
    Ok((host.to_string(), format!("/{path}")))
}

pub(crate) enum StdinMsg {
    Data(Bytes),
    Close,
}

/// A live exec / attach session.
pub struct ExecSession {
    /// The negotiated subprotocol ("" when the server chose the legacy one).
    pub protocol: String,
    pub(crate) stdin: Option<mpsc::Sender<StdinMsg>>,
    pub(crate) resize: Option<mpsc::Sender<TermSize>>,
    pub(crate) stdout: mpsc::Receiver<Bytes>,
    pub(crate) stderr: mpsc::Receiver<Bytes>,
    pub(crate) error: mpsc::Receiver<Bytes>,
}

/// How a session ended.
#[derive(Debug, Clone, Default)]
pub struct ExecResult {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The exit code, when the protocol reports one (v4/v5: 0 for Success).
    pub exit_code: Option<i32>,
    /// What the error stream said (raw).
    pub error: String,
}

impl ExecResult {
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// Parses the error stream: a v4 Status JSON, or pre-v4 text.
pub fn parse_status(protocol: &str, raw: &[u8]) -> (Option<i32>, String) {
    let text = String::from_utf8_lossy(raw).into_owned();
    let v4 = protocol.starts_with("v4.") || protocol.starts_with("v5.");
    if !v4 {
        return (if raw.is_empty() { Some(0) } else { None }, text);
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(raw) else {
        return (None, text);
    };
    if v["status"] == "Success" {
        return (Some(0), text);
    }
    let code = v["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["reason"] == "ExitCode")
        .and_then(|c| c["message"].as_str())
        .and_then(|m| m.parse().ok());
    (code, text)
}

impl ExecSession {
    /// Sends bytes to the process's stdin.
    pub async fn write_stdin(&self, data: impl Into<Bytes>) -> Result<(), ClientError> {
        let tx = self
            .stdin
            .as_ref()
            .ok_or(ClientError::Protocol("no stdin in this session".into()))?;
        tx.send(StdinMsg::Data(data.into()))
            .await
            .map_err(|_| ClientError::Protocol("session closed".into()))
    }

    /// Closes stdin (SPDY: FIN on the stream; WebSocket v5: the close signal).
    pub async fn close_stdin(&mut self) {
        if let Some(tx) = self.stdin.take() {
            let _ = tx.send(StdinMsg::Close).await;
        }
    }

    /// Sends a terminal size.
    pub async fn resize(&self, width: u16, height: u16) -> Result<(), ClientError> {
        let tx = self.resize.as_ref().ok_or(ClientError::Protocol(
            "no resize stream in this session".into(),
        ))?;
        tx.send(TermSize { width, height })
            .await
            .map_err(|_| ClientError::Protocol("session closed".into()))
    }

    /// Reads stdout until it contains `needle`; returns everything read.
    pub async fn read_stdout_until(
        &mut self,
        needle: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, ClientError> {
        let mut got = Vec::new();
        let read = async {
            while let Some(b) = self.stdout.recv().await {
                got.extend_from_slice(&b);
                if got.windows(needle.len().max(1)).any(|w| w == needle) {
                    return true;
                }
            }
            false
        };
        match tokio::time::timeout(timeout, read).await {
            Ok(true) => Ok(got),
            Ok(false) => Err(ClientError::Protocol(format!(
                "stdout ended before {:?}; got {:?}",
                String::from_utf8_lossy(needle),
                String::from_utf8_lossy(&got)
            ))),
            Err(_) => Err(ClientError::Timeout("waiting for output")),
        }
    }

    /// Reads everything to the end of the session.
    pub async fn wait(mut self, timeout: Duration) -> Result<ExecResult, ClientError> {
        self.stdin.take();
        self.resize.take();
        let (mut out, mut err, mut status) = (Vec::new(), Vec::new(), Vec::new());
        let all = async {
            let (mut o, mut e, mut s) = (true, true, true);
            while o || e || s {
                tokio::select! {
                    b = self.stdout.recv(), if o => match b { Some(b) => out.extend_from_slice(&b), None => o = false },
                    b = self.stderr.recv(), if e => match b { Some(b) => err.extend_from_slice(&b), None => e = false },
                    b = self.error.recv(), if s => match b { Some(b) => status.extend_from_slice(&b), None => s = false },
                }
            }
        };
        tokio::time::timeout(timeout, all)
            .await
            .map_err(|_| ClientError::Timeout("waiting for the session to end"))?;
        let (exit_code, error) = parse_status(&self.protocol, &status);
        Ok(ExecResult {
            stdout: out,
            stderr: err,
            exit_code,
            error,
        })
    }
}

/// One forwarded connection.
pub struct PortForwardConn {
    pub(crate) tx: mpsc::Sender<StdinMsg>,
    pub(crate) rx: mpsc::Receiver<Bytes>,
    pub(crate) error: mpsc::Receiver<Bytes>,
    /// Keeps the transport alive as long as the connection.
    pub(crate) _keep: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl PortForwardConn {
    pub async fn write(&self, data: impl Into<Bytes>) -> Result<(), ClientError> {
        self.tx
            .send(StdinMsg::Data(data.into()))
            .await
            .map_err(|_| ClientError::Protocol("connection closed".into()))
    }

    /// Half-closes (SPDY only; WebSocket port-forward has no such signal).
    pub async fn close_write(&self) {
        let _ = self.tx.send(StdinMsg::Close).await;
    }

    /// The next chunk from the pod, or `None` at its end.
    pub async fn read(&mut self) -> Option<Bytes> {
        self.rx.recv().await
    }

    /// Everything until the pod side ends; an error stream message becomes an error.
    pub async fn read_to_end(&mut self, timeout: Duration) -> Result<Vec<u8>, ClientError> {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let all = async {
            let (mut d, mut e) = (true, true);
            while d || e {
                tokio::select! {
                    b = self.rx.recv(), if d => match b { Some(b) => out.extend_from_slice(&b), None => d = false },
                    b = self.error.recv(), if e => match b { Some(b) => err.extend_from_slice(&b), None => e = false },
                }
            }
        };
        tokio::time::timeout(timeout, all)
            .await
            .map_err(|_| ClientError::Timeout("port-forward read"))?;
        if !err.is_empty() {
            return Err(ClientError::Protocol(
                String::from_utf8_lossy(&err).into_owned(),
            ));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split() {
        assert_eq!(
            split_url("http://127.0.0.1:1234/exec/abc").expect("url"),
            ("127.0.0.1:1234".to_string(), "/exec/abc".to_string())
        );
        assert!(split_url("https://x/").is_err());
    }

    #[test]
    fn statuses_parse() {
        let s = br#"{"metadata":{},"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"7"}]}}"#;
        assert_eq!(parse_status("v4.channel.k8s.io", s).0, Some(7));
        assert_eq!(
            parse_status("v5.channel.k8s.io", br#"{"status":"Success"}"#).0,
            Some(0)
        );
        assert_eq!(parse_status("v3.channel.k8s.io", b"").0, Some(0));
        assert_eq!(parse_status("v3.channel.k8s.io", b"boom").0, None);
    }
}
