//! The container log reader (upstream `pkg/kubelet/kuberuntime/logs/logs.go` `ReadLogs`):
//! [`LogOptions`] from a `/containerLogs` query (`tailLines`, `sinceSeconds`/`sinceTime`,
//! `timestamps`, `limitBytes`, `follow`, `previous`), and [`read_logs`], which reads the
//! rotated files of a container (oldest first) before the current one and in follow mode
//! notices when the current file is rotated away; [`last_log_string`] for
//! `FallbackToLogsOnError`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use tokio::io::{AsyncBufReadExt, AsyncSeekExt, BufReader};
use tokio::sync::mpsc;

use super::parser::{LogMessage, parse_log_line, parse_time};
use super::{LogError, log_files};

/// Upstream `MaxContainerTerminationMessageLogLines`.
pub const TERMINATION_LOG_LINES: i64 = 80;
/// Upstream `MaxContainerTerminationMessageLogLength`.
pub const TERMINATION_LOG_BYTES: i64 = 2048;
/// How often a follower looks for new data.
const FOLLOW_POLL: Duration = Duration::from_millis(200);
/// How often a follower checks whether the container still runs (upstream `stateCheckPeriod`).
const STATE_CHECK_PERIOD: Duration = Duration::from_secs(1);

/// Options of a log request (upstream `v1.PodLogOptions` as `LogOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Only the last N lines (`tailLines`).
    pub tail_lines: Option<i64>,
    /// Only entries at or after this time (`sinceSeconds` / `sinceTime`).
    pub since: Option<DateTime<Utc>>,
    /// Prefix every line with its RFC3339Nano timestamp.
    pub timestamps: bool,
    /// Stop after this many bytes (`limitBytes`).
    pub limit_bytes: Option<i64>,
    /// Keep streaming while the container runs.
    pub follow: bool,
    /// The previous (terminated) instance of the container.
    pub previous: bool,
}

/// The pairs of a query string in order (repeated keys kept), `+` and `%xx` decoded
/// (`application/x-www-form-urlencoded`, as Go's `url.ParseQuery`).
pub(crate) fn query_pairs(query: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

pub(crate) fn parse_bool(k: &str, v: &str) -> Result<bool, LogError> {
    match v {
        "" | "true" | "1" | "True" | "TRUE" | "t" | "T" => Ok(true),
        "false" | "0" | "False" | "FALSE" | "f" | "F" => Ok(false),
        _ => Err(LogError::Options(format!("{k}: invalid boolean {v:?}"))),
    }
}

fn parse_int(k: &str, v: &str) -> Result<i64, LogError> {
    v.parse()
        .map_err(|_| LogError::Options(format!("{k}: invalid integer {v:?}")))
}

impl LogOptions {
    /// Parse a `/containerLogs` query string (upstream's `PodLogOptions` conversion and
    /// validation: `tailLines >= 0`, `limitBytes >= 1`, `sinceSeconds >= 1`, not both
    /// `sinceSeconds` and `sinceTime`). `now` anchors `sinceSeconds`.
    pub fn from_query(query: &str, now: DateTime<Utc>) -> Result<Self, LogError> {
        let mut o = LogOptions::default();
        let (mut since_seconds, mut since_time) = (None, None);
        for (k, v) in query_pairs(query) {
            match k.as_str() {
                "tailLines" => {
                    let n = parse_int(&k, &v)?;
                    if n < 0 {
                        return Err(LogError::Options("tailLines must be >= 0".into()));
                    }
                    o.tail_lines = Some(n);
                }
                "limitBytes" => {
                    let n = parse_int(&k, &v)?;
                    if n < 1 {
                        return Err(LogError::Options("limitBytes must be >= 1".into()));
                    }
                    o.limit_bytes = Some(n);
                }
                "sinceSeconds" => {
                    let n = parse_int(&k, &v)?;
                    if n < 1 {
                        return Err(LogError::Options("sinceSeconds must be >= 1".into()));
                    }
                    since_seconds = Some(n);
                }
                "sinceTime" => {
                    since_time = Some(parse_time(v.as_bytes()).ok_or_else(|| {
                        LogError::Options(format!("sinceTime: invalid RFC3339 time {v:?}"))
                    })?);
                }
                "timestamps" => o.timestamps = parse_bool(&k, &v)?,
                "follow" => o.follow = parse_bool(&k, &v)?,
                "previous" => o.previous = parse_bool(&k, &v)?,
                _ => {}
            }
        }
        o.since = match (since_seconds, since_time) {
            (Some(_), Some(_)) => {
                return Err(LogError::Options(
                    "at most one of sinceTime or sinceSeconds may be specified".into(),
                ));
            }
            (Some(s), None) => Some(now - chrono::Duration::seconds(s)),
            (None, t) => t,
        };
        Ok(o)
    }
}

/// Lines in a file: newlines, plus one for unterminated trailing bytes.
async fn count_lines(path: &Path) -> std::io::Result<u64> {
    use tokio::io::AsyncReadExt;
    let mut f = tokio::fs::File::open(path).await?;
    let mut buf = vec![0u8; 64 * 1024];
    let (mut n, mut last) = (0u64, b'\n');
    loop {
        let r = f.read(&mut buf).await?;
        if r == 0 {
            break;
        }
        n += buf[..r].iter().filter(|b| **b == b'\n').count() as u64;
        last = buf[r - 1];
    }
    Ok(if last == b'\n' { n } else { n + 1 })
}

/// Where to start for `tail` lines over `files` (oldest first): (file index, lines to skip).
async fn tail_start(files: &[PathBuf], tail: i64) -> (usize, u64) {
    let mut need = u64::try_from(tail).unwrap_or(0);
    if need == 0 {
        return (files.len(), 0);
    }
    for (i, f) in files.iter().enumerate().rev() {
        let n = count_lines(f).await.unwrap_or(0);
        if n >= need {
            return (i, n - need);
        }
        need -= n;
    }
    (0, 0)
}

/// Why reading stopped early.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    /// `limitBytes` reached or the receiver went away.
    Done,
}

/// Formats and sends messages (upstream `logWriter`).
struct Writer<'a> {
    opts: &'a LogOptions,
    remain: Option<i64>,
    tx: &'a mpsc::Sender<Bytes>,
    at_line_start: bool,
}

impl Writer<'_> {
    async fn write(&mut self, msg: &LogMessage) -> Result<(), Stop> {
        if self.opts.since.is_some_and(|s| msg.timestamp < s) {
            return Ok(());
        }
        let mut line = Vec::with_capacity(msg.log.len() + 36);
        if self.opts.timestamps && self.at_line_start {
            line.extend_from_slice(
                node_common::crilog::format_rfc3339_nano(&msg.timestamp).as_bytes(),
            );
            line.push(b' ');
        }
        line.extend_from_slice(&msg.log);
        self.at_line_start = msg.log.last() == Some(&b'\n');
        if let Some(r) = self.remain {
            let r = usize::try_from(r).unwrap_or(0);
            if line.len() > r {
                line.truncate(r);
            }
        }
        let n = i64::try_from(line.len()).unwrap_or(i64::MAX);
        if !line.is_empty() && self.tx.send(Bytes::from(line)).await.is_err() {
            return Err(Stop::Done);
        }
        if let Some(r) = self.remain.as_mut() {
            *r -= n;
            if *r <= 0 {
                return Err(Stop::Done);
            }
        }
        Ok(())
    }

    async fn line(&mut self, path: &Path, line: &[u8]) -> Result<(), Stop> {
        if line.is_empty() || line == b"\n" {
            return Ok(());
        }
        match parse_log_line(line) {
            Ok(m) => self.write(&m).await,
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "skipping malformed log line");
                Ok(())
            }
        }
    }
}

/// Is the container still running? (upstream `waitLogs` asks the runtime).
pub type RunningCheck = Arc<dyn Fn() -> BoxFuture<'static, bool> + Send + Sync>;

fn inode(m: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    m.ino()
}

/// Upstream `ReadLogs` over the container's log at `path` and its rotated files: sends the
/// selected output to `tx`. In follow mode it keeps reading the current file while
/// `running` says the container runs, reopening `path` when it is rotated away.
pub async fn read_logs(
    path: &Path,
    opts: &LogOptions,
    tx: mpsc::Sender<Bytes>,
    running: Option<RunningCheck>,
) -> Result<(), LogError> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| LogError::Io { path: p, source }
    };
    let files = log_files(path);
    if files.is_empty() && !opts.follow {
        return Err(LogError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
    }
    let (first, mut skip) = match opts.tail_lines {
        Some(t) => tail_start(&files, t).await,
        None => (0, 0),
    };
    let mut w = Writer {
        opts,
        remain: opts.limit_bytes,
        tx: &tx,
        at_line_start: true,
    };
    let current = files.last().filter(|f| f.as_path() == path).cloned();
    let mut buf = Vec::new();
    // Rotated files (and, when not following, the current one) are read to their end.
    for f in files.iter().skip(first) {
        if Some(f) == current.as_ref() && opts.follow {
            break;
        }
        let file = match tokio::fs::File::open(f).await {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(f)(e)),
        };
        let mut r = BufReader::new(file);
        loop {
            buf.clear();
            if r.read_until(b'\n', &mut buf).await.map_err(io(f))? == 0 {
                break;
            }
            if skip > 0 {
                skip -= 1;
                continue;
            }
            if w.line(f, &buf).await.is_err() {
                return Ok(());
            }
        }
    }
    if !opts.follow {
        return Ok(());
    }
    // Follow the current file.
    let running = running.unwrap_or_else(|| Arc::new(|| Box::pin(async { false })));
    let mut start_skip = if current.is_some() && first < files.len() {
        skip
    } else {
        0
    };
    // With a tail that ends before the current file (tail 0), start at its end.
    let mut seek_end = opts.tail_lines == Some(0) || (current.is_some() && first >= files.len());
    let mut open: Option<(BufReader<tokio::fs::File>, u64)> = None;
    let mut last_check = tokio::time::Instant::now();
    let mut alive = true;
    buf.clear();
    loop {
        if open.is_none() {
            match tokio::fs::File::open(path).await {
                Ok(mut f) => {
                    if seek_end {
                        f.seek(std::io::SeekFrom::End(0)).await.map_err(io(path))?;
                        seek_end = false;
                    }
                    let ino = f.metadata().await.map(|m| inode(&m)).unwrap_or(0);
                    open = Some((BufReader::new(f), ino));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(path)(e)),
            }
        }
        let mut progressed = false;
        if let Some((r, _)) = open.as_mut() {
            loop {
                let n = r.read_until(b'\n', &mut buf).await.map_err(io(path))?;
                if n == 0 || buf.last() != Some(&b'\n') {
                    break; // EOF; an incomplete line stays in `buf` until its end arrives
                }
                progressed = true;
                if start_skip > 0 {
                    start_skip -= 1;
                } else if w.line(path, &buf).await.is_err() {
                    return Ok(());
                }
                buf.clear();
            }
        }
        if progressed {
            continue;
        }
        // At EOF: rotated away? Then the rest of the old file was read; open the new one.
        if let Some((_, ino)) = open.as_ref() {
            let now_ino = std::fs::metadata(path).ok().map(|m| inode(&m));
            if now_ino.is_some_and(|n| n != *ino) {
                if !buf.is_empty() && w.line(path, &buf).await.is_err() {
                    return Ok(());
                }
                buf.clear();
                open = None;
                continue;
            }
        }
        if !alive {
            if !buf.is_empty() {
                let _ = w.line(path, &buf).await;
            }
            return Ok(());
        }
        if tx.is_closed() {
            return Ok(());
        }
        if last_check.elapsed() >= STATE_CHECK_PERIOD {
            last_check = tokio::time::Instant::now();
            // One more pass to EOF after the container stopped, then stop.
            alive = running().await;
            continue;
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}

/// Read a whole log selection into memory (tests, termination messages).
pub async fn read_logs_to_vec(path: &Path, opts: &LogOptions) -> Result<Vec<u8>, LogError> {
    let (tx, mut rx) = mpsc::channel(64);
    let p = path.to_path_buf();
    let o = LogOptions {
        follow: false,
        ..opts.clone()
    };
    let reader = tokio::spawn(async move { read_logs(&p, &o, tx, None).await });
    let mut out = Vec::new();
    while let Some(b) = rx.recv().await {
        out.extend_from_slice(&b);
    }
    match reader.await {
        Ok(r) => r.map(|()| out),
        Err(e) => Err(LogError::Options(format!("log reader failed: {e}"))),
    }
}

/// Upstream `readLastStringFromContainerLogs`: the last 80 lines / 2 KiB of a container's log
/// (the termination message of `FallbackToLogsOnError`).
pub async fn last_log_string(path: &Path) -> String {
    let opts = LogOptions {
        tail_lines: Some(TERMINATION_LOG_LINES),
        limit_bytes: Some(TERMINATION_LOG_BYTES),
        ..Default::default()
    };
    read_logs_to_vec(path, &opts)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0)
            .single()
            .expect("time")
    }

    fn cri(ts: DateTime<Utc>, stream: &str, tag: &str, content: &str) -> String {
        format!(
            "{} {stream} {tag} {content}\n",
            node_common::crilog::format_rfc3339_nano(&ts)
        )
    }

    #[test]
    fn query_options() {
        let now = t(100);
        let o = LogOptions::from_query(
            "tailLines=3&timestamps=true&limitBytes=10&follow&previous=false&sinceSeconds=10",
            now,
        )
        .expect("opts");
        assert_eq!(o.tail_lines, Some(3));
        assert!(o.timestamps && o.follow && !o.previous);
        assert_eq!(o.limit_bytes, Some(10));
        assert_eq!(o.since, Some(t(90)));
        let o = LogOptions::from_query("sinceTime=2023-11-14T22%3A13%3A30Z", now).expect("time");
        assert_eq!(o.since, Some(t(10)));
        for bad in [
            "tailLines=-1",
            "limitBytes=0",
            "sinceSeconds=0",
            "tailLines=x",
            "timestamps=maybe",
            "sinceSeconds=1&sinceTime=2023-11-14T22:13:30Z",
        ] {
            assert!(LogOptions::from_query(bad, now).is_err(), "{bad}");
        }
    }

    fn write(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, lines.concat()).expect("write");
        p
    }

    #[tokio::test]
    async fn reads_across_rotated_files_with_tail_since_timestamps_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let old: Vec<String> = (0..3)
            .map(|i| cri(t(i), "stdout", "F", &format!("a{i}")))
            .collect();
        let mid: Vec<String> = (3..5)
            .map(|i| cri(t(i), "stderr", "F", &format!("b{i}")))
            .collect();
        let mut cur: Vec<String> = (5..7)
            .map(|i| cri(t(i), "stdout", "F", &format!("c{i}")))
            .collect();
        cur.push(cri(t(7), "stdout", "P", "part-"));
        cur.push(cri(t(7), "stdout", "F", "ial"));
        write(dir.path(), "0.log.20240101-000000", &old);
        write(dir.path(), "0.log.20240101-000001", &mid);
        write(dir.path(), "0.log.20240101-000002.gz", &["junk\n".into()]);
        let path = write(dir.path(), "0.log", &cur);
        let read = |o: LogOptions| {
            let path = path.clone();
            async move {
                String::from_utf8(read_logs_to_vec(&path, &o).await.expect("read")).expect("utf8")
            }
        };
        assert_eq!(
            read(LogOptions::default()).await,
            "a0\na1\na2\nb3\nb4\nc5\nc6\npart-ial\n"
        );
        let tail = |n| LogOptions {
            tail_lines: Some(n),
            ..Default::default()
        };
        assert_eq!(read(tail(2)).await, "part-ial\n");
        assert_eq!(read(tail(4)).await, "c5\nc6\npart-ial\n");
        assert_eq!(read(tail(5)).await, "b4\nc5\nc6\npart-ial\n");
        assert_eq!(read(tail(6)).await, "b3\nb4\nc5\nc6\npart-ial\n");
        assert_eq!(read(tail(0)).await, "");
        assert_eq!(read(tail(100)).await.lines().count(), 8);
        let since = LogOptions {
            since: Some(t(4)),
            ..Default::default()
        };
        assert_eq!(read(since).await, "b4\nc5\nc6\npart-ial\n");
        let ts = LogOptions {
            tail_lines: Some(3),
            timestamps: true,
            ..Default::default()
        };
        let out = read(ts).await;
        let first = node_common::crilog::format_rfc3339_nano(&t(6));
        let last = node_common::crilog::format_rfc3339_nano(&t(7));
        assert_eq!(out, format!("{first} c6\n{last} part-ial\n"));
        let limit = LogOptions {
            limit_bytes: Some(5),
            ..Default::default()
        };
        assert_eq!(read(limit).await, "a0\na1");
        assert!(
            read_logs_to_vec(&dir.path().join("none.log"), &LogOptions::default())
                .await
                .is_err()
        );
        assert_eq!(last_log_string(&path).await.lines().count(), 8);
    }

    #[tokio::test]
    async fn follow_sees_appends_and_rotation_until_container_stops() {
        use std::io::Write;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(dir.path(), "0.log", &[cri(t(0), "stdout", "F", "one")]);
        let alive = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let a = Arc::clone(&alive);
        let running: RunningCheck = Arc::new(move || {
            let a = Arc::clone(&a);
            Box::pin(async move { a.load(std::sync::atomic::Ordering::SeqCst) })
        });
        let (tx, mut rx) = mpsc::channel(16);
        let p = path.clone();
        let opts = LogOptions {
            follow: true,
            ..Default::default()
        };
        let task = tokio::spawn(async move { read_logs(&p, &opts, tx, Some(running)).await });
        assert_eq!(rx.recv().await.as_deref(), Some(&b"one\n"[..]));
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("open");
        // An incomplete line is held back until its newline arrives.
        let line = cri(t(1), "stdout", "F", "two");
        let (head, tail) = line.split_at(10);
        f.write_all(head.as_bytes()).expect("write");
        f.flush().expect("flush");
        tokio::time::sleep(FOLLOW_POLL * 2).await;
        f.write_all(tail.as_bytes()).expect("write");
        assert_eq!(rx.recv().await.as_deref(), Some(&b"two\n"[..]));
        // Rotation: the rest of the old file, then the new file.
        f.write_all(cri(t(2), "stdout", "F", "three").as_bytes())
            .expect("write");
        std::fs::rename(&path, dir.path().join("0.log.20240101-000000")).expect("rename");
        std::fs::write(&path, cri(t(3), "stdout", "F", "four")).expect("new file");
        assert_eq!(rx.recv().await.as_deref(), Some(&b"three\n"[..]));
        assert_eq!(rx.recv().await.as_deref(), Some(&b"four\n"[..]));
        alive.store(false, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            rx.recv().await,
            None,
            "the stream ends once the container stopped"
        );
        task.await.expect("join").expect("read");
    }
}
