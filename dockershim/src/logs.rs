//! Container log copiers: one task per running container copying Docker's output stream into
//! the container's CRI log file (see `crilog`). This module owns the map from container id to
//! copier, so ReopenContainerLog can reach a copier and RemoveContainer can stop it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures::StreamExt;

use crate::crilog::{self, CriLogError, LogCopierHandle, LogStream};
use crate::docker::{self, DockerApi};

/// The running log copiers, by container id.
#[derive(Default, Clone)]
pub struct LogManager {
    copiers: Arc<Mutex<HashMap<String, Arc<LogCopierHandle>>>>,
}

impl LogManager {
    /// Starts copying `id`'s output (from `since`, unix seconds; 0 = the beginning) into `path`.
    /// A copier already running for `id` is replaced.
    pub fn start<D: DockerApi>(&self, docker: Arc<D>, id: &str, path: PathBuf, since: i64) {
        let chunks = docker.logs(id, since).map(|r| {
            r.map(|c| {
                let stream = match c.stream {
                    docker::LogStream::Stdout => LogStream::Stdout,
                    docker::LogStream::Stderr => LogStream::Stderr,
                };
                (stream, c.bytes)
            })
        });
        let handle = crilog::spawn_chunk_copier(path, chunks, crilog::DEFAULT_MAX_LINE_SIZE);
        let mut copiers = self.copiers.lock().unwrap_or_else(|p| p.into_inner());
        copiers.retain(|_, h| !h.is_finished());
        if let Some(old) = copiers.insert(id.to_string(), Arc::new(handle)) {
            old.abort();
        }
    }

    /// Reopens `id`'s log file at its path.
    pub async fn reopen(&self, id: &str) -> Result<(), CriLogError> {
        let handle = {
            let copiers = self.copiers.lock().unwrap_or_else(|p| p.into_inner());
            copiers.get(id).cloned()
        };
        match handle {
            Some(h) => h.reopen().await,
            None => Err(CriLogError::CopierGone),
        }
    }

    /// Stops copying `id` (it is being removed).
    pub fn stop(&self, id: &str) {
        let mut copiers = self.copiers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = copiers.remove(id) {
            h.abort();
        }
    }
}
