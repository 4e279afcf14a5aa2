//! The protocol-neutral face of a streaming session: what the runtime side (Docker exec or
//! attach) gets — channels for stdin, stdout, stderr and terminal resizes — and what it returns
//! (an exit code or an error), plus the encoding of that result on the error stream: plain text
//! for the pre-v4 protocols, a `metav1.Status` JSON for v4 and v5 (`NonZeroExitCode` with an
//! `ExitCode` cause, as client-go's executor expects).

use bytes::Bytes;
use serde::Deserialize;
use tokio::sync::mpsc;

/// What the client asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StdioOptions {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// A terminal size, as the resize stream carries it (`{"Width":80,"Height":24}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct TermSize {
    #[serde(rename = "Width")]
    pub width: u16,
    #[serde(rename = "Height")]
    pub height: u16,
}

/// The session's streams as the runtime sees them. A closed `stdin` receiver is EOF; the
/// runtime drops `stdout`/`stderr` when the process's output ends.
#[derive(Debug, Default)]
pub struct Stdio {
    pub stdin: Option<mpsc::Receiver<Bytes>>,
    pub stdout: Option<mpsc::Sender<Bytes>>,
    pub stderr: Option<mpsc::Sender<Bytes>>,
    pub resize: Option<mpsc::Receiver<TermSize>>,
}

/// How a session ended, for the error stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Exited 0 (or an attach that ended).
    Success,
    /// The command exited non-zero.
    ExitCode(i32),
    /// The runtime failed.
    Error(String),
}

/// The bytes written on the error stream for `outcome`; `None` writes nothing (pre-v4 success).
pub fn encode_outcome(outcome: &Outcome, v4_status: bool) -> Option<Vec<u8>> {
    if !v4_status {
        return match outcome {
            Outcome::Success => None,
            Outcome::ExitCode(code) => Some(
                format!("command terminated with non-zero exit code: exit status {code}")
                    .into_bytes(),
            ),
            Outcome::Error(e) => Some(e.clone().into_bytes()),
        };
    }
    let status = match outcome {
        Outcome::Success => serde_json::json!({"metadata": {}, "status": "Success"}),
        Outcome::ExitCode(code) => serde_json::json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("command terminated with non-zero exit code: exit status {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        }),
        Outcome::Error(e) => serde_json::json!({
            "metadata": {},
            "status": "Failure",
            "message": e,
            "reason": "InternalError",
            "code": 500,
        }),
    };
    Some(status.to_string().into_bytes())
}

/// Splits a resize stream into sizes: JSON objects, possibly several per chunk or one split
/// across chunks. Complete objects are drained from `buf`.
pub fn parse_resizes(buf: &mut Vec<u8>) -> Vec<TermSize> {
    let mut out = Vec::new();
    let mut it = serde_json::Deserializer::from_slice(buf).into_iter::<TermSize>();
    let mut used = 0;
    loop {
        match it.next() {
            Some(Ok(sz)) => out.push(sz),
            Some(Err(e)) if e.is_eof() => break,
            Some(Err(_)) => {
                // Garbage: drop what we have.
                used = buf.len();
                out.clear();
                break;
            }
            None => break,
        }
        used = it.byte_offset();
    }
    buf.drain(..used.min(buf.len()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_status_carries_the_exit_code_as_a_cause() {
        let s = encode_outcome(&Outcome::ExitCode(3), true).expect("status");
        let v: serde_json::Value = serde_json::from_slice(&s).expect("json");
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["reason"], "NonZeroExitCode");
        assert_eq!(v["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(v["details"]["causes"][0]["message"], "3");
        let ok = encode_outcome(&Outcome::Success, true).expect("status");
        assert_eq!(ok, br#"{"metadata":{},"status":"Success"}"#);
        assert!(encode_outcome(&Outcome::Success, false).is_none());
    }

    #[test]
    fn resizes_split_and_joined() {
        let mut buf = br#"{"Width":80,"Height":24}{"Width":100,"#.to_vec();
        assert_eq!(
            parse_resizes(&mut buf),
            vec![TermSize {
                width: 80,
                height: 24
            }]
        );
        buf.extend_from_slice(b"\"Height\":40}\n");
        assert_eq!(
            parse_resizes(&mut buf),
            vec![TermSize {
                width: 100,
                height: 40
            }]
        );
    }
}
