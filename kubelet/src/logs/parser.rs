//! Log line parsing (upstream `pkg/kubelet/kuberuntime/logs/logs.go`: `parseCRILog`,
//! `parseDockerJSONLog`, `getParseFunc`): one line of a container log file, in the CRI format
//! (`<RFC3339Nano> <stdout|stderr> <P|F>[:tags] <log>`) or Docker's json-file format
//! (`{"log":..,"stream":..,"time":..}`), into a [`LogMessage`].

use chrono::{DateTime, Utc};

use super::LogError;

pub use node_common::crilog::LogStream;

/// One parsed log entry (upstream `logMessage`). `log` keeps its trailing newline for full
/// lines; a partial (`P`) CRI entry has none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogMessage {
    /// When the runtime logged it.
    pub timestamp: DateTime<Utc>,
    /// Which stream.
    pub stream: LogStream,
    /// The content.
    pub log: Vec<u8>,
}

fn stream_of(s: &[u8]) -> Option<LogStream> {
    LogStream::from_bytes(s)
}

pub(super) fn parse_time(s: &[u8]) -> Option<DateTime<Utc>> {
    let s = std::str::from_utf8(s).ok()?;
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Upstream `parseCRILog` (the shared codec's, [`node_common::crilog::parse_cri_log`]). `line`
/// is one line of the file, with or without its `\n`; a full entry's content gets its newline
/// back, a partial one has none.
pub fn parse_cri_log(line: &[u8]) -> Result<LogMessage, LogError> {
    let l = node_common::crilog::parse_cri_log(line).map_err(|e| LogError::Parse(e.to_string()))?;
    let mut log = l.content;
    if !l.partial {
        log.push(b'\n');
    }
    Ok(LogMessage {
        timestamp: l.timestamp.with_timezone(&Utc),
        stream: l.stream,
        log,
    })
}

/// Upstream `parseDockerJSONLog` (Docker's json-file driver).
pub fn parse_docker_json_log(line: &[u8]) -> Result<LogMessage, LogError> {
    #[derive(serde::Deserialize)]
    struct JsonLog {
        log: String,
        stream: String,
        time: String,
    }
    let j: JsonLog = serde_json::from_slice(line).map_err(|e| {
        LogError::Parse(format!(
            "docker json log: {e}: {:?}",
            String::from_utf8_lossy(line)
        ))
    })?;
    Ok(LogMessage {
        timestamp: parse_time(j.time.as_bytes())
            .ok_or_else(|| LogError::Parse(format!("unexpected time {:?}", j.time)))?,
        stream: stream_of(j.stream.as_bytes())
            .ok_or_else(|| LogError::Parse(format!("unexpected stream {:?}", j.stream)))?,
        log: j.log.into_bytes(),
    })
}

/// Parse one line in whichever format it is (upstream `getParseFunc` tries both).
pub fn parse_log_line(line: &[u8]) -> Result<LogMessage, LogError> {
    if line.first() == Some(&b'{') {
        parse_docker_json_log(line).or_else(|_| parse_cri_log(line))
    } else {
        parse_cri_log(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cri_and_docker_lines() {
        let m = parse_log_line(b"2016-10-06T00:17:09.669794202Z stdout F log content 1\n")
            .expect("cri");
        assert_eq!(m.stream, LogStream::Stdout);
        assert_eq!(m.log, b"log content 1\n");
        assert_eq!(m.timestamp.timestamp_subsec_nanos(), 669_794_202);
        let m = parse_log_line(b"2016-10-06T00:17:09.669794203Z stderr P:x partial\n")
            .expect("partial");
        assert_eq!(
            (m.stream, m.log.as_slice()),
            (LogStream::Stderr, &b"partial"[..])
        );
        let m = parse_log_line(
            br#"{"log":"docker line\n","stream":"stderr","time":"2016-10-20T18:39:20.57606443Z"}"#,
        )
        .expect("docker");
        assert_eq!(
            (m.stream, m.log.as_slice()),
            (LogStream::Stderr, &b"docker line\n"[..])
        );
        assert!(parse_log_line(b"2016-10-06T00:17:09Z stdin F x\n").is_err());
        assert!(parse_log_line(b"garbage\n").is_err());
        assert!(parse_log_line(b"{\"log\":1}\n").is_err());
    }
}
