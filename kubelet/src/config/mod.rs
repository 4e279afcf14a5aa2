//! Pod sources and their merge (upstream `pkg/kubelet/config`). This module owns the
//! [`PodUpdate`] protocol between the sources (`file`, `http`, later `api`) and the kubelet's
//! sync loop, the static-pod decoding and defaulting shared by the file and http sources
//! ([`common`], [`defaults`], [`validation`]), the sources themselves ([`file`](mod@file), [`http`]) and
//! [`podconfig::PodConfig`], which merges per-source snapshots into incremental operations.

pub mod apiserver;
pub mod common;
pub mod defaults;
pub mod file;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod http;
pub mod podconfig;
pub mod validation;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;

pub use crate::types::{
    ALL_SOURCE, API_SOURCE, CONFIG_FIRST_SEEN_ANNOTATION, CONFIG_HASH_ANNOTATION,
    CONFIG_MIRROR_ANNOTATION, CONFIG_SOURCE_ANNOTATION, FILE_SOURCE, HTTP_SOURCE,
};

/// The operation a [`PodUpdate`] carries (upstream `kubetypes.PodOperation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodOperation {
    /// Full snapshot of a source's pods (sources -> `PodConfig` only).
    Set,
    /// New pods.
    Add,
    /// Pods whose spec, labels or annotations changed.
    Update,
    /// Pods gone from their source.
    Remove,
    /// Pods whose status only changed.
    Reconcile,
    /// Pods being gracefully deleted (deletionTimestamp set).
    Delete,
}

impl std::fmt::Display for PodOperation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PodOperation::Set => "SET",
            PodOperation::Add => "ADD",
            PodOperation::Update => "UPDATE",
            PodOperation::Remove => "REMOVE",
            PodOperation::Reconcile => "RECONCILE",
            PodOperation::Delete => "DELETE",
        })
    }
}

/// A batch of pods with one operation, from one source (upstream `kubetypes.PodUpdate`).
#[derive(Debug, Clone, PartialEq)]
pub struct PodUpdate {
    /// The operation.
    pub op: PodOperation,
    /// The source name (`file`, `http`, `api`).
    pub source: String,
    /// The pods.
    pub pods: Vec<Pod>,
}

/// The merge loop stopped; the update was not delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod config for source {0:?} is closed")]
pub struct SourceClosed(pub String);

/// A source's handle for sending updates into [`podconfig::PodConfig`] (upstream: the channel
/// returned by `PodConfig.Channel(source)`); it stamps the source name on every update.
#[derive(Debug, Clone)]
pub struct SourceSender {
    source: String,
    tx: mpsc::Sender<PodUpdate>,
}

impl SourceSender {
    /// A sender for `source` writing into `tx`.
    pub fn new(source: impl Into<String>, tx: mpsc::Sender<PodUpdate>) -> Self {
        Self {
            source: source.into(),
            tx,
        }
    }

    /// The source name.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Send `pods` with `op`.
    pub async fn send(&self, op: PodOperation, pods: Vec<Pod>) -> Result<(), SourceClosed> {
        self.tx
            .send(PodUpdate {
                op,
                source: self.source.clone(),
                pods,
            })
            .await
            .map_err(|_| SourceClosed(self.source.clone()))
    }
}

/// A manifest that could not be turned into a pod: where it came from (file path or URL), the
/// offending field when known, and why. Sources log these with `tracing` and publish them so
/// the kubelet can expose them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}: {location}: {}{reason}", field.as_deref().map(|f| format!("{f}: ")).unwrap_or_default())]
pub struct ManifestError {
    /// `file` or `http`.
    pub source_name: String,
    /// The file path or URL.
    pub location: String,
    /// The field path, e.g. `spec.containers[0].image`.
    pub field: Option<String>,
    /// The reason, e.g. `Required value`.
    pub reason: String,
}

impl SourceSender {
    /// True when the merge loop has stopped.
    pub fn send_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

#[cfg(test)]
mod gohash_tests;
