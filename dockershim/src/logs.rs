//! Container log copiers: one task per running container copying Docker's output stream into
//! the container's CRI log file (see `crilog`). This module owns the map from container id to
//! copier, so ReopenContainerLog can reach a copier, RemoveContainer can stop it, and
//! ContainerStatus can wait for an exited container's last output to reach the file.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use parking_lot::Mutex;

use crate::crilog::{self, CriLogError, LogCopierHandle, LogStream, LogWriter};
use crate::docker::{self, DockerApi, LogChunk};

const MAX_LINE: usize = crilog::DEFAULT_MAX_LINE_SIZE;

/// One chunk of a container's output, for a copier.
type Chunk = Result<(LogStream, bytes::Bytes), docker::DockerError>;

/// How many bytes of each stream a copier has been given.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Given {
    stdout: usize,
    stderr: usize,
}

impl Given {
    fn of(&mut self, stream: LogStream) -> &mut usize {
        match stream {
            LogStream::Stdout => &mut self.stdout,
            LogStream::Stderr => &mut self.stderr,
        }
    }
}

/// `id`'s output from `since` (unix seconds), as the copier's tagged chunks: Docker's follow
/// stream, then what it missed. Docker 20.10's follow stream of a container that has already
/// exited can end without the container's last unterminated output (a `printf` without a
/// newline): a container that exits before its follow stream is opened loses it about one time
/// in four. So once the follow stream ends, one plain read of the same output follows, and
/// whatever of each stream lies past what the follow stream gave is copied too. The follow
/// stream gives a prefix of each stream, so the bytes past it are exactly the missed ones.
fn output<D: DockerApi>(
    docker: Arc<D>,
    id: &str,
    since: i64,
) -> impl Stream<Item = Chunk> + use<D> {
    let given = Arc::new(Mutex::new(Given::default()));
    let tally = given.clone();
    let follow = docker.logs(id, since, true).inspect(move |r| {
        if let Ok(c) = r {
            *tally.lock().of(c.stream) += c.bytes.len();
        }
    });
    let id = id.to_string();
    let missed = futures::stream::once(async move {
        let given = *given.lock();
        past(docker.logs(&id, since, false), given)
    })
    .flatten();
    follow.chain(missed).map(|r| r.map(|c| (c.stream, c.bytes)))
}

/// What of `chunks` lies past the first `given` bytes of each stream.
fn past(
    chunks: docker::DockerStream<LogChunk>,
    mut given: Given,
) -> impl Stream<Item = Result<LogChunk, docker::DockerError>> {
    chunks.filter_map(move |r| {
        let out = match r {
            Ok(c) => {
                let skip = given.of(c.stream);
                let n = (*skip).min(c.bytes.len());
                *skip -= n;
                (n < c.bytes.len()).then(|| {
                    Ok(LogChunk {
                        stream: c.stream,
                        bytes: c.bytes.slice(n..),
                    })
                })
            }
            Err(e) => Some(Err(e)),
        };
        std::future::ready(out)
    })
}

/// The running log copiers, by container id.
#[derive(Default, Clone)]
pub struct LogManager {
    copiers: Arc<Mutex<HashMap<String, Arc<LogCopierHandle>>>>,
}

impl LogManager {
    /// Starts copying `id`'s output (from `since`, unix seconds; 0 = the beginning) into `path`,
    /// which the copier opens (creates) by itself a moment later: for containers whose log file
    /// exists already (adopted after a restart). A copier already running for `id` is replaced.
    pub fn start<D: DockerApi>(&self, docker: Arc<D>, id: &str, path: PathBuf, since: i64) {
        let _span = tracing::info_span!("log_copier", container = %id).entered();
        let handle = crilog::spawn_chunk_copier(path, output(docker, id, since), MAX_LINE);
        self.insert(id, handle);
    }

    /// Like [`LogManager::start`], into a log file already opened with [`LogWriter::open`]:
    /// StartContainer opens it before it answers, so whoever opens the log right after the
    /// start (the kubelet, `kubectl logs`, critest) finds it, created and empty, as with
    /// containerd.
    pub fn start_into<D: DockerApi>(
        &self,
        docker: Arc<D>,
        id: &str,
        writer: LogWriter,
        since: i64,
    ) {
        let _span = tracing::info_span!("log_copier", container = %id).entered();
        let handle = crilog::spawn_chunk_copier_into(writer, output(docker, id, since), MAX_LINE);
        self.insert(id, handle);
    }

    fn insert(&self, id: &str, handle: LogCopierHandle) {
        let mut copiers = self.copiers.lock();
        copiers.retain(|_, h| !h.is_finished());
        if let Some(old) = copiers.insert(id.to_string(), Arc::new(handle)) {
            old.abort();
        }
    }

    /// Reopens `id`'s log file at its path.
    pub async fn reopen(&self, id: &str) -> Result<(), CriLogError> {
        let handle = {
            let copiers = self.copiers.lock();
            copiers.get(id).cloned()
        };
        match handle {
            Some(h) => h.reopen().await,
            None => Err(CriLogError::CopierGone),
        }
    }

    /// Waits (at most `limit`) until `id`'s copier has written everything the container wrote,
    /// for a container Docker reports exited: its output stream ends a moment after the exit,
    /// and whoever reads the log on seeing the exit (the kubelet's `FallbackToLogsOnError`
    /// termination message) must find the last lines. Docker itself waits for its log copier
    /// the same way (2 s) before it marks a container stopped. A copier still busy after
    /// `limit` is left to finish on its own and not waited for again.
    pub async fn drained(&self, id: &str, limit: Duration) {
        let handle = {
            let copiers = self.copiers.lock();
            match copiers.get(id) {
                Some(h) if !h.is_finished() => h.clone(),
                _ => return,
            }
        };
        if tokio::time::timeout(limit, handle.drained()).await.is_err() {
            tracing::warn!(container = %id, "container log copier still busy after the exit, not waiting for it again");
            let mut copiers = self.copiers.lock();
            if copiers.get(id).is_some_and(|h| Arc::ptr_eq(h, &handle)) {
                copiers.remove(id);
            }
        }
    }

    /// Stops copying `id` (it is being removed).
    pub fn stop(&self, id: &str) {
        let mut copiers = self.copiers.lock();
        if let Some(h) = copiers.remove(id) {
            h.abort();
        }
    }
}
