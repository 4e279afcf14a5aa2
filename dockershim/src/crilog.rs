//! The CRI container log, written by the shim itself (as containerd's
//! `pkg/cri/io/logger.go` does) instead of symlinking Docker's json log. Each
//! line is `<RFC3339Nano timestamp> <stdout|stderr> <F|P> <content>\n` (the line
//! format itself, writing and parsing one line, is `node_common::crilog`, shared
//! with the kubelet and re-exported here):
//! a complete line (newline-terminated, `\r\n` and `\n` stripped) is tagged
//! `F`; a line longer than the maximum (16 KiB, containerd's
//! `max_container_log_line_size` default) is cut into `P` entries of exactly
//! the maximum followed by the rest as `F`; bytes left without a newline when a
//! stream ends are flushed as one `P` entry; an empty line is an `F` with
//! empty content. This module owns the cutting into lines ([`LineSplitter`],
//! [`CriLogEncoder`]), the file ([`LogWriter`], append-only, reopenable after the
//! kubelet rotated it away) and the async copier task fed either by two
//! `AsyncRead`s or by a stream of tagged chunks (bollard's
//! `LogOutput::{StdOut,StdErr,Console}`).

use std::io;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use chrono::{DateTime, TimeZone, Utc};
use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use node_common::crilog::{
    CriLogLine, LogStream, LogTag, ParseError, TAG_FULL, TAG_PARTIAL, encode_line,
    format_rfc3339_nano, parse_cri_log,
};

/// containerd's default `max_container_log_line_size`.
pub const DEFAULT_MAX_LINE_SIZE: usize = 16 * 1024;
/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum CriLogError {
    #[error("log file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("reading container output: {0}")]
    Read(String),
    #[error("log copier has stopped")]
    CopierGone,
}

/// Splits one stream's bytes into CRI entries, with containerd's rules.
#[derive(Debug)]
pub struct LineSplitter {
    max_len: usize,
    buf: Vec<u8>,
}

impl LineSplitter {
    /// `max_len` 0 means no limit.
    pub fn new(max_len: usize) -> Self {
        LineSplitter {
            max_len,
            buf: Vec::new(),
        }
    }

    fn cut(&mut self, out: &mut Vec<(LogTag, Vec<u8>)>, at_newline: bool) {
        if self.max_len == 0 {
            return;
        }
        while self.buf.len() > self.max_len {
            // A trailing '\r' may be half of "\r\n": wait for the next byte.
            if !at_newline && self.buf.len() == self.max_len + 1 && self.buf.last() == Some(&b'\r')
            {
                break;
            }
            let rest = self.buf.split_off(self.max_len);
            out.push((LogTag::Partial, std::mem::replace(&mut self.buf, rest)));
        }
    }

    /// Feed bytes; complete entries are appended to `out`.
    pub fn push(&mut self, mut data: &[u8], out: &mut Vec<(LogTag, Vec<u8>)>) {
        while let Some(i) = data.iter().position(|b| *b == b'\n') {
            self.buf.extend_from_slice(&data[..i]);
            data = &data[i + 1..];
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
            self.cut(out, true);
            out.push((LogTag::Full, std::mem::take(&mut self.buf)));
        }
        self.buf.extend_from_slice(data);
        self.cut(out, false);
    }

    /// End of stream: leftover bytes become one `P` entry.
    pub fn finish(&mut self, out: &mut Vec<(LogTag, Vec<u8>)>) {
        if !self.buf.is_empty() {
            out.push((LogTag::Partial, std::mem::take(&mut self.buf)));
        }
    }
}

/// An append-only CRI log file at a fixed path.
#[derive(Debug)]
pub struct LogWriter {
    path: PathBuf,
    file: tokio::fs::File,
}

impl LogWriter {
    /// Open (create if missing, never truncate) the log file for appending.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CriLogError> {
        let path = path.as_ref().to_path_buf();
        let file = Self::open_file(&path)?;
        Ok(LogWriter { path, file })
    }

    /// Opens in place, not through `tokio::fs`: creating or opening one file on a local disk
    /// takes microseconds, while a trip to the blocking pool and back is two thread wake-ups,
    /// milliseconds on a CPU-bound host (StartContainer opens the file on its request path).
    fn open_file(path: &Path) -> Result<tokio::fs::File, CriLogError> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o640)
            .open(path)
            .map(tokio::fs::File::from_std)
            .map_err(|source| CriLogError::Io {
                path: path.to_path_buf(),
                source,
            })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Open the path again (after the kubelet renamed the old file away); the
    /// old handle is flushed and closed only once the new one is open.
    pub async fn reopen(&mut self) -> Result<(), CriLogError> {
        let new = Self::open_file(&self.path)?;
        let _ = self.file.flush().await;
        self.file = new;
        Ok(())
    }

    /// Append raw bytes (already encoded CRI lines) and flush them to the
    /// file (tokio's `File` otherwise completes writes in the background).
    pub async fn write_all(&mut self, data: &[u8]) -> Result<(), CriLogError> {
        if data.is_empty() {
            return Ok(());
        }
        let res = match self.file.write_all(data).await {
            Ok(()) => self.file.flush().await,
            Err(e) => Err(e),
        };
        res.map_err(|source| CriLogError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

/// Encodes both streams of one container into a [`LogWriter`].
#[derive(Debug)]
pub struct CriLogEncoder {
    stdout: LineSplitter,
    stderr: LineSplitter,
}

impl CriLogEncoder {
    pub fn new(max_len: usize) -> Self {
        CriLogEncoder {
            stdout: LineSplitter::new(max_len),
            stderr: LineSplitter::new(max_len),
        }
    }

    fn splitter(&mut self, s: LogStream) -> &mut LineSplitter {
        match s {
            LogStream::Stdout => &mut self.stdout,
            LogStream::Stderr => &mut self.stderr,
        }
    }

    /// Encode a chunk of `stream` at time `now`; returns the bytes to append.
    pub fn encode<Tz: TimeZone>(
        &mut self,
        stream: LogStream,
        data: &[u8],
        now: &DateTime<Tz>,
    ) -> Vec<u8> {
        let mut entries = Vec::new();
        self.splitter(stream).push(data, &mut entries);
        Self::render(stream, entries, now)
    }

    /// Flush the partial line of `stream` (stream ended).
    pub fn finish<Tz: TimeZone>(&mut self, stream: LogStream, now: &DateTime<Tz>) -> Vec<u8> {
        let mut entries = Vec::new();
        self.splitter(stream).finish(&mut entries);
        Self::render(stream, entries, now)
    }

    fn render<Tz: TimeZone>(
        stream: LogStream,
        entries: Vec<(LogTag, Vec<u8>)>,
        now: &DateTime<Tz>,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        for (tag, content) in entries {
            encode_line(&mut out, now, stream, tag, &content);
        }
        out
    }
}

/// Map one bollard output chunk to a stream (TTY `Console` output is stdout;
/// stdin echoes are dropped).
pub fn from_bollard(chunk: bollard::container::LogOutput) -> Option<(LogStream, Bytes)> {
    use bollard::container::LogOutput;
    match chunk {
        LogOutput::StdOut { message } | LogOutput::Console { message } => {
            Some((LogStream::Stdout, message))
        }
        LogOutput::StdErr { message } => Some((LogStream::Stderr, message)),
        LogOutput::StdIn { .. } => None,
    }
}

type ReopenRequest = oneshot::Sender<Result<(), CriLogError>>;

/// Handle of a running copier task.
#[derive(Debug)]
pub struct LogCopierHandle {
    reopen_tx: mpsc::Sender<ReopenRequest>,
    task: JoinHandle<Result<(), CriLogError>>,
    /// Cancelled once the task has ended (output written, failed or aborted).
    done: CancellationToken,
}

impl LogCopierHandle {
    /// Ask the copier to reopen its file (CRI `ReopenContainerLog`) and wait
    /// until the new file is open.
    pub async fn reopen(&self) -> Result<(), CriLogError> {
        let (tx, rx) = oneshot::channel();
        self.reopen_tx
            .send(tx)
            .await
            .map_err(|_| CriLogError::CopierGone)?;
        rx.await.map_err(|_| CriLogError::CopierGone)?
    }

    /// Wait until the container output ended and everything is written.
    pub async fn wait(self) -> Result<(), CriLogError> {
        self.task
            .await
            .map_err(|e| CriLogError::Read(format!("copier task: {e}")))?
    }

    /// Has the copier ended (the container's output ended)?
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Resolves once the copier has ended: everything the container wrote is in the file.
    pub async fn drained(&self) {
        self.done.cancelled().await
    }

    /// Stop copying at once (the container is being removed).
    pub fn abort(&self) {
        self.task.abort();
    }
}

/// Copy a stream of tagged chunks (e.g. bollard `logs(follow=true)` or
/// `attach` output mapped with [`from_bollard`]) into the CRI log at `path`,
/// which the task opens (creates) first.
/// The task ends when the stream ends or yields an error (after flushing
/// partial lines as `P`); write errors are logged and copying goes on, like
/// containerd, so the container never blocks on its output.
pub fn spawn_chunk_copier<S, E>(
    path: impl AsRef<Path>,
    chunks: S,
    max_len: usize,
) -> LogCopierHandle
where
    S: Stream<Item = Result<(LogStream, Bytes), E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let path = path.as_ref().to_path_buf();
    spawn_copier(async move { LogWriter::open(&path) }, chunks, max_len)
}

/// [`spawn_chunk_copier`] into a log file the caller has already opened: the
/// file exists before the copier starts (StartContainer opens it before it
/// answers, so a reader that opens it at once finds it, as with containerd).
pub fn spawn_chunk_copier_into<S, E>(
    writer: LogWriter,
    chunks: S,
    max_len: usize,
) -> LogCopierHandle
where
    S: Stream<Item = Result<(LogStream, Bytes), E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    spawn_copier(std::future::ready(Ok(writer)), chunks, max_len)
}

fn spawn_copier<W, S, E>(writer: W, chunks: S, max_len: usize) -> LogCopierHandle
where
    W: std::future::Future<Output = Result<LogWriter, CriLogError>> + Send + 'static,
    S: Stream<Item = Result<(LogStream, Bytes), E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let (reopen_tx, mut reopen_rx) = mpsc::channel::<ReopenRequest>(4);
    let done = CancellationToken::new();
    let ended = done.clone().drop_guard();
    let copy = async move {
        let mut writer = writer.await?;
        let mut enc = CriLogEncoder::new(max_len);
        let mut chunks = std::pin::pin!(chunks);
        let mut reopen_open = true;
        let mut result = Ok(());
        loop {
            tokio::select! {
                req = reopen_rx.recv(), if reopen_open => match req {
                    Some(tx) => { let _ = tx.send(writer.reopen().await); }
                    None => reopen_open = false,
                },
                item = chunks.next() => match item {
                    Some(Ok((stream, data))) => {
                        let out = enc.encode(stream, &data, &Utc::now());
                        if let Err(e) = writer.write_all(&out).await {
                            tracing::error!("writing container log: {e}");
                        }
                    }
                    Some(Err(e)) => {
                        result = Err(CriLogError::Read(e.to_string()));
                        break;
                    }
                    None => break,
                },
            }
        }
        let now = Utc::now();
        let mut out = enc.finish(LogStream::Stdout, &now);
        out.extend(enc.finish(LogStream::Stderr, &now));
        writer.write_all(&out).await?;
        result
    };
    let task = tokio::spawn(
        async move {
            let _ended = ended;
            let result = copy.await;
            if let Err(e) = &result {
                tracing::warn!("container log copier stopped: {e}");
            }
            result
        }
        .instrument(tracing::Span::current()),
    );
    LogCopierHandle {
        reopen_tx,
        task,
        done,
    }
}

/// Copy two readers (stdout, stderr) into the CRI log at `path`.
pub fn spawn_log_copier<O, R>(
    path: impl AsRef<Path>,
    stdout: O,
    stderr: R,
    max_len: usize,
) -> LogCopierHandle
where
    O: AsyncRead + Send + 'static,
    R: AsyncRead + Send + 'static,
{
    use tokio_util::io::ReaderStream;
    let out = ReaderStream::new(stdout).map(|r| r.map(|b| (LogStream::Stdout, b)));
    let err = ReaderStream::new(stderr).map(|r| r.map(|b| (LogStream::Stderr, b)));
    spawn_chunk_copier(path, futures::stream::select(out, err), max_len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Timelike;

    fn t(nanos: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2024, 3, 5, 7, 8, 9)
            .single()
            .expect("valid date")
            .with_nanosecond(nanos)
            .expect("valid nanos")
    }

    fn split(max: usize, chunks: &[&[u8]], finish: bool) -> Vec<(LogTag, Vec<u8>)> {
        let mut s = LineSplitter::new(max);
        let mut out = Vec::new();
        for c in chunks {
            s.push(c, &mut out);
        }
        if finish {
            s.finish(&mut out);
        }
        out
    }

    #[test]
    fn full_partial_and_empty_lines() {
        use LogTag::*;
        let out = split(16, &[b"hello\nwor", b"ld\r\n\nend"], true);
        assert_eq!(
            out,
            vec![
                (Full, b"hello".to_vec()),
                (Full, b"world".to_vec()),
                (Full, b"".to_vec()),
                (Partial, b"end".to_vec()),
            ]
        );
        // Nothing left: no trailing entry.
        assert!(split(16, &[b"a\n"], true).len() == 1);
    }

    #[test]
    fn long_lines_are_cut_at_max() {
        use LogTag::*;
        let line = vec![b'x'; 10];
        let mut data = line.clone();
        data.push(b'\n');
        assert_eq!(
            split(4, &[&data], false),
            vec![
                (Partial, b"xxxx".to_vec()),
                (Partial, b"xxxx".to_vec()),
                (Full, b"xx".to_vec()),
            ]
        );
        // Exactly max then newline: one F, no empty F after it.
        assert_eq!(
            split(4, &[b"abcd\n"], false),
            vec![(Full, b"abcd".to_vec())]
        );
        assert_eq!(
            split(4, &[b"abcd", b"e\n"], false),
            vec![(Partial, b"abcd".to_vec()), (Full, b"e".to_vec()),]
        );
        // "\r\n" straddling the cut point.
        assert_eq!(
            split(4, &[b"abcd\r", b"\n"], false),
            vec![(Full, b"abcd".to_vec())]
        );
        // Default maximum.
        let big = vec![b'y'; DEFAULT_MAX_LINE_SIZE * 2 + 3];
        let out = split(DEFAULT_MAX_LINE_SIZE, &[&big, b"\n"], false);
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].1.len(), DEFAULT_MAX_LINE_SIZE);
        assert_eq!(out[2], (Full, b"yyy".to_vec()));
    }

    #[test]
    fn encoder_renders_lines_per_stream() {
        let mut enc = CriLogEncoder::new(DEFAULT_MAX_LINE_SIZE);
        let now = t(10);
        let mut out = enc.encode(LogStream::Stdout, b"out1\nout", &now);
        out.extend(enc.encode(LogStream::Stderr, b"err1\n", &now));
        out.extend(enc.encode(LogStream::Stdout, b"2\n", &now));
        out.extend(enc.finish(LogStream::Stderr, &now));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "2024-03-05T07:08:09.00000001Z stdout F out1\n\
             2024-03-05T07:08:09.00000001Z stderr F err1\n\
             2024-03-05T07:08:09.00000001Z stdout F out2\n"
        );
    }

    fn read_lines(path: &Path) -> Vec<CriLogLine> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| parse_cri_log(l.as_bytes()).unwrap())
            .collect()
    }

    fn text(l: &CriLogLine) -> &str {
        std::str::from_utf8(&l.content).unwrap()
    }

    #[tokio::test]
    async fn drained_waits_for_the_last_output_and_for_an_abort() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let (tx, rx) = mpsc::channel::<Result<(LogStream, Bytes), String>>(4);
        let h = spawn_chunk_copier(&path, tokio_stream::wrappers::ReceiverStream::new(rx), 1024);
        tx.send(Ok((LogStream::Stdout, Bytes::from_static(b"oops\n"))))
            .await
            .unwrap();
        let early = tokio::time::timeout(std::time::Duration::from_millis(50), h.drained()).await;
        assert!(early.is_err(), "drained while the output is still open");
        drop(tx);
        h.drained().await;
        let lines = read_lines(&path);
        assert_eq!(lines.len(), 1);
        assert_eq!(text(&lines[0]), "oops");

        let (_tx, rx) = mpsc::channel::<Result<(LogStream, Bytes), String>>(4);
        let h = spawn_chunk_copier(
            dir.path().join("1.log"),
            tokio_stream::wrappers::ReceiverStream::new(rx),
            1024,
        );
        h.abort();
        h.drained().await; // an aborted copier counts as ended
    }

    #[tokio::test]
    async fn a_copier_into_an_opened_writer_uses_the_file_that_exists_already() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let writer = LogWriter::open(&path).unwrap();
        let meta = std::fs::metadata(&path).expect("open creates the file");
        assert_eq!(meta.len(), 0, "created empty");
        let (tx, rx) = mpsc::channel::<Result<(LogStream, Bytes), String>>(4);
        let h = spawn_chunk_copier_into(
            writer,
            tokio_stream::wrappers::ReceiverStream::new(rx),
            1024,
        );
        tx.send(Ok((LogStream::Stderr, Bytes::from_static(b"hi\n"))))
            .await
            .unwrap();
        drop(tx);
        h.wait().await.unwrap();
        let lines = read_lines(&path);
        assert_eq!(lines.len(), 1);
        assert_eq!(
            (lines[0].stream, text(&lines[0])),
            (LogStream::Stderr, "hi")
        );
    }

    #[tokio::test]
    async fn copier_interleaves_streams_and_flushes_partial() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let (mut ow, or) = tokio::io::duplex(64);
        let (mut ew, er) = tokio::io::duplex(64);
        let h = spawn_log_copier(&path, or, er, 8);
        ow.write_all(b"first\n").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        ew.write_all(b"oops\n").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        ow.write_all(b"0123456789\ntail").await.unwrap();
        drop(ow);
        drop(ew);
        h.wait().await.unwrap();
        let lines = read_lines(&path);
        let got: Vec<(LogStream, bool, &str)> = lines
            .iter()
            .map(|l| (l.stream, l.partial, text(l)))
            .collect();
        assert_eq!(
            got,
            vec![
                (LogStream::Stdout, false, "first"),
                (LogStream::Stderr, false, "oops"),
                (LogStream::Stdout, true, "01234567"),
                (LogStream::Stdout, false, "89"),
                (LogStream::Stdout, true, "tail"),
            ]
        );
    }

    #[tokio::test]
    async fn reopen_after_rename_and_append_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, "2016-10-06T00:17:09Z stdout F old\n").unwrap();
        let (tx, rx) = mpsc::channel::<Result<(LogStream, Bytes), io::Error>>(8);
        let h = spawn_chunk_copier(&path, tokio_stream_from(rx), DEFAULT_MAX_LINE_SIZE);
        tx.send(Ok((LogStream::Stdout, Bytes::from_static(b"before\n"))))
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        let rotated = dir.path().join("0.log.20240305-070809");
        std::fs::rename(&path, &rotated).unwrap();
        h.reopen().await.unwrap();
        assert!(path.exists(), "reopen creates a new file");
        tx.send(Ok((LogStream::Stderr, Bytes::from_static(b"after\n"))))
            .await
            .unwrap();
        drop(tx);
        h.wait().await.unwrap();
        let old: Vec<String> = read_lines(&rotated)
            .into_iter()
            .map(|l| text(&l).to_string())
            .collect();
        assert_eq!(old, vec!["old", "before"]);
        let new = read_lines(&path);
        assert_eq!(new.len(), 1);
        assert_eq!(text(&new[0]), "after");
        assert_eq!(new[0].stream, LogStream::Stderr);
    }

    #[test]
    fn bollard_chunks_map_to_streams() {
        use bollard::container::LogOutput;
        let b = Bytes::from_static(b"x");
        assert_eq!(
            from_bollard(LogOutput::Console { message: b.clone() }).map(|c| c.0),
            Some(LogStream::Stdout)
        );
        assert_eq!(
            from_bollard(LogOutput::StdErr { message: b.clone() }).map(|c| c.0),
            Some(LogStream::Stderr)
        );
        assert_eq!(from_bollard(LogOutput::StdIn { message: b }), None);
    }

    fn tokio_stream_from<T: Send + 'static>(
        mut rx: mpsc::Receiver<T>,
    ) -> impl Stream<Item = T> + Send {
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}
