//! The CRI container log line (upstream `pkg/kubelet/kuberuntime/logs` and containerd's
//! `pkg/cri/io/logger.go`): `<RFC3339Nano timestamp> <stdout|stderr> <P|F>[:extras] <content>\n`,
//! where `P` marks a partial line (a long line cut, or bytes left without a newline) and `F` a
//! full one. This module owns the two ends of that format: writing one line ([`encode_line`],
//! with Go's `time.RFC3339Nano` rendering in [`format_rfc3339_nano`]) and reading one back
//! ([`parse_cri_log`], upstream `parseCRILog`). How a runtime cuts output into lines and files is
//! the writer's business (dockershim's `crilog`), how the kubelet follows and rotates files the
//! reader's.

use chrono::{DateTime, Datelike, FixedOffset, Offset, TimeZone, Timelike};

/// CRI tag of a partial line (`runtime.LogTagPartial`).
pub const TAG_PARTIAL: &str = "P";
/// CRI tag of a full line (`runtime.LogTagFull`).
pub const TAG_FULL: &str = "F";

/// Which output stream a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogStream {
    Stdout,
    Stderr,
}

impl LogStream {
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        }
    }

    /// `stdout` or `stderr`, as written in a log line.
    pub fn from_bytes(s: &[u8]) -> Option<Self> {
        match s {
            b"stdout" => Some(LogStream::Stdout),
            b"stderr" => Some(LogStream::Stderr),
            _ => None,
        }
    }
}

/// `P` or `F`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTag {
    Partial,
    Full,
}

impl LogTag {
    pub fn as_str(self) -> &'static str {
        match self {
            LogTag::Partial => TAG_PARTIAL,
            LogTag::Full => TAG_FULL,
        }
    }
}

/// Go's `time.RFC3339Nano` (`2006-01-02T15:04:05.999999999Z07:00`): the fraction has trailing
/// zeros trimmed and disappears with its dot when zero; a zero offset prints `Z`, others
/// `+hh:mm`/`-hh:mm`.
pub fn format_rfc3339_nano<Tz: TimeZone>(t: &DateTime<Tz>) -> String {
    let off = t.offset().fix().local_minus_utc();
    let l = t.naive_local();
    let mut s = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        l.year(),
        l.month(),
        l.day(),
        l.hour(),
        l.minute(),
        l.second()
    );
    let nanos = l.nanosecond() % 1_000_000_000;
    if nanos != 0 {
        let frac = format!("{nanos:09}");
        s.push('.');
        s.push_str(frac.trim_end_matches('0'));
    }
    if off == 0 {
        s.push('Z');
    } else {
        let sign = if off < 0 { '-' } else { '+' };
        let m = off.unsigned_abs() / 60;
        s.push_str(&format!("{sign}{:02}:{:02}", m / 60, m % 60));
    }
    s
}

/// Appends one CRI log line to `out`: timestamp, stream, tag, content and `\n`. `content` must
/// not hold a newline (cutting output into lines is the writer's job).
pub fn encode_line<Tz: TimeZone>(
    out: &mut Vec<u8>,
    t: &DateTime<Tz>,
    stream: LogStream,
    tag: LogTag,
    content: &[u8],
) {
    out.extend_from_slice(format_rfc3339_nano(t).as_bytes());
    out.push(b' ');
    out.extend_from_slice(stream.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(tag.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(content);
    out.push(b'\n');
}

/// One parsed CRI log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriLogLine {
    pub timestamp: DateTime<FixedOffset>,
    pub stream: LogStream,
    /// Tagged `P`: the line goes on in the next entry.
    pub partial: bool,
    /// What the container wrote, without the line's own `\n`.
    pub content: Vec<u8>,
}

/// Why a line is not a CRI log line (upstream `parseCRILog`'s messages).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {line:?}")]
pub struct ParseError {
    pub reason: &'static str,
    /// The line, lossily decoded.
    pub line: String,
}

/// Upstream `parseCRILog`: one line, with or without its trailing `\n`. The tag field may carry
/// `:`-separated extras; the entry is partial when the first is `P` and full otherwise (forward
/// compatible, as upstream). The content is everything after the tag's separating space.
pub fn parse_cri_log(line: &[u8]) -> Result<CriLogLine, ParseError> {
    let err = |reason| ParseError {
        reason,
        line: String::from_utf8_lossy(line).into_owned(),
    };
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    let mut fields = body.splitn(4, |b| *b == b' ');
    let (Some(ts), Some(rest)) = (fields.next(), fields.next()) else {
        return Err(err("timestamp is not found"));
    };
    let timestamp = std::str::from_utf8(ts)
        .ok()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .ok_or_else(|| err("unexpected timestamp format"))?;
    let Some(tags) = fields.next() else {
        return Err(err("stream type is not found"));
    };
    let stream = LogStream::from_bytes(rest).ok_or_else(|| err("unexpected stream type"))?;
    let content = fields.next().ok_or_else(|| err("log tag is not found"))?;
    let partial = tags.split(|b| *b == b':').next() == Some(TAG_PARTIAL.as_bytes());
    Ok(CriLogLine {
        timestamp,
        stream,
        partial,
        content: content.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn t(nanos: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2024, 3, 5, 7, 8, 9)
            .single()
            .expect("valid date")
            .with_nanosecond(nanos)
            .expect("valid nanos")
    }

    #[test]
    fn rfc3339nano_like_go() {
        assert_eq!(format_rfc3339_nano(&t(0)), "2024-03-05T07:08:09Z");
        assert_eq!(
            format_rfc3339_nano(&t(500_000_000)),
            "2024-03-05T07:08:09.5Z"
        );
        assert_eq!(
            format_rfc3339_nano(&t(123_456_789)),
            "2024-03-05T07:08:09.123456789Z"
        );
        assert_eq!(
            format_rfc3339_nano(&t(1_000)),
            "2024-03-05T07:08:09.000001Z"
        );
        let east = FixedOffset::east_opt(5 * 3600 + 1800).expect("offset");
        assert_eq!(
            format_rfc3339_nano(&t(120_000_000).with_timezone(&east)),
            "2024-03-05T12:38:09.12+05:30"
        );
        let west = FixedOffset::west_opt(7 * 3600).expect("offset");
        assert_eq!(
            format_rfc3339_nano(&t(0).with_timezone(&west)),
            "2024-03-05T00:08:09-07:00"
        );
        // Round trip through the parser.
        let p = parse_cri_log(b"2024-03-05T12:38:09.12+05:30 stdout F x").expect("line");
        assert_eq!(p.timestamp, t(120_000_000));
    }

    #[test]
    fn lines_encode_and_parse_back() {
        let mut out = Vec::new();
        encode_line(&mut out, &t(10), LogStream::Stderr, LogTag::Partial, b"a b");
        encode_line(&mut out, &t(0), LogStream::Stdout, LogTag::Full, b"");
        assert_eq!(
            String::from_utf8(out.clone()).expect("utf-8"),
            "2024-03-05T07:08:09.00000001Z stderr P a b\n2024-03-05T07:08:09Z stdout F \n"
        );
        let lines: Vec<CriLogLine> = out
            .split_inclusive(|b| *b == b'\n')
            .map(|l| parse_cri_log(l).expect("a line"))
            .collect();
        assert_eq!(
            lines,
            vec![
                CriLogLine {
                    timestamp: t(10).fixed_offset(),
                    stream: LogStream::Stderr,
                    partial: true,
                    content: b"a b".to_vec(),
                },
                CriLogLine {
                    timestamp: t(0).fixed_offset(),
                    stream: LogStream::Stdout,
                    partial: false,
                    content: Vec::new(),
                },
            ]
        );
    }

    #[test]
    fn the_parser_follows_upstream() {
        let l = parse_cri_log(b"2016-10-06T00:17:09.669794202Z stdout P log content 1\n")
            .expect("partial");
        assert_eq!(l.stream, LogStream::Stdout);
        assert!(l.partial);
        assert_eq!(l.content, b"log content 1");
        let l = parse_cri_log(b"2016-10-06T00:17:09.669794202Z stderr F:x ").expect("extras");
        assert!(!l.partial);
        assert!(l.content.is_empty());
        // Forward compatible: a tag other than P is a full line.
        let l = parse_cri_log(b"2016-10-06T00:17:09Z stdout X x").expect("unknown tag");
        assert!(!l.partial);
        // The content is raw bytes.
        let l = parse_cri_log(b"2016-10-06T00:17:09Z stdout F \xff\xfe").expect("bytes");
        assert_eq!(l.content, b"\xff\xfe");
        for (bad, why) in [
            (&b""[..], "timestamp is not found"),
            (b"notatime stdout F x", "unexpected timestamp format"),
            (b"2016-10-06T00:17:09Z stdout", "stream type is not found"),
            (b"2016-10-06T00:17:09Z stdin F x", "unexpected stream type"),
            (b"2016-10-06T00:17:09Z stdout F", "log tag is not found"),
        ] {
            let e = parse_cri_log(bad).expect_err("malformed");
            assert_eq!(e.reason, why, "{bad:?}");
            assert!(e.to_string().starts_with(why), "{e}");
        }
    }
}
