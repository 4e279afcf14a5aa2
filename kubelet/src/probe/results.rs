//! The latest probe result per container (upstream `pkg/kubelet/prober/results`): what the
//! prober's workers write and the runtime manager (liveness, startup) and the status (readiness,
//! startup) read.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

/// Probe kinds (upstream `probeType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeType {
    /// Restart the container when it fails.
    Liveness,
    /// Gate the container's readiness.
    Readiness,
    /// Hold the other probes until it succeeds; restart when it fails.
    Startup,
}

/// Latest probe results per (type, runtime container id) (upstream `results.Manager`).
#[derive(Debug, Clone, Default)]
pub struct ProbeResults {
    inner: Arc<RwLock<HashMap<(ProbeType, String), bool>>>,
}

impl ProbeResults {
    /// The result for container `id`, if any.
    pub fn get(&self, kind: ProbeType, id: &str) -> Option<bool> {
        self.inner.read().get(&(kind, id.to_string())).copied()
    }

    /// Store a result; true when it changed.
    pub fn set(&self, kind: ProbeType, id: &str, ok: bool) -> bool {
        self.inner.write().insert((kind, id.to_string()), ok) != Some(ok)
    }

    /// Forget container `id`.
    pub fn remove(&self, id: &str) {
        self.inner.write().retain(|(_, i), _| i != id);
    }
}
