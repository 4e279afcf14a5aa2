//! The prober's metrics, served at `/metrics/probes` (upstream `pkg/kubelet/prober`'s
//! `ProberResults` and `ProberDuration`, registered in their own registry): one count per probe
//! run by result, and the probes' durations.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::Buckets;

/// Labels of `prober_probe_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeResultLabels {
    /// `Liveness`, `Readiness` or `Startup`.
    pub probe_type: String,
    /// `successful`, `failed` or `unknown`.
    pub result: String,
    /// The container's name.
    pub container: String,
    /// The pod's name.
    pub pod: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's UID.
    pub pod_uid: String,
}

/// Labels of `prober_probe_duration_seconds`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeDurationLabels {
    /// `Liveness`, `Readiness` or `Startup`.
    pub probe_type: String,
    /// The container's name.
    pub container: String,
    /// The pod's name.
    pub pod: String,
    /// The pod's namespace.
    pub namespace: String,
}

/// Which probe of which container (the labels both metrics share).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeTarget {
    /// `Liveness`, `Readiness` or `Startup`.
    pub probe_type: &'static str,
    /// The container's name.
    pub container: String,
    /// The pod's name.
    pub pod: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's UID.
    pub pod_uid: String,
}

/// The `/metrics/probes` registry and its two metrics.
#[derive(Debug)]
pub struct ProberMetrics {
    registry: Registry,
    /// `prober_probe_total`.
    pub results: Family<ProbeResultLabels, Counter>,
    /// `prober_probe_duration_seconds`.
    pub durations: Family<ProbeDurationLabels, Histogram, Buckets>,
}

impl Default for ProberMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ProberMetrics {
    /// An empty registry with both metrics.
    pub fn new() -> Self {
        let results: Family<ProbeResultLabels, Counter> = Family::default();
        let durations = super::def_buckets();
        let mut registry = Registry::default();
        let mut r = super::Help(&mut registry);
        r.register(
            "prober_probe",
            "Cumulative number of a liveness, readiness or startup probe for a container by result.",
            results.clone(),
        );
        r.register(
            "prober_probe_duration_seconds",
            "Duration in seconds for a probe response.",
            durations.clone(),
        );
        Self {
            registry,
            results,
            durations,
        }
    }

    /// A handle for the probe workers.
    pub fn recorder(&self) -> ProbeRecorder {
        ProbeRecorder {
            results: self.results.clone(),
            durations: self.durations.clone(),
        }
    }

    /// Encoded for a scraper that sent `accept`.
    pub fn encode(&self, accept: &str) -> (&'static str, String) {
        super::exposition::encode(&self.registry, accept)
    }
}

/// What a probe worker records its runs with (the two families, without the registry).
#[derive(Debug, Clone)]
pub struct ProbeRecorder {
    results: Family<ProbeResultLabels, Counter>,
    durations: Family<ProbeDurationLabels, Histogram, Buckets>,
}

impl Default for ProbeRecorder {
    fn default() -> Self {
        Self {
            results: Family::default(),
            durations: super::def_buckets(),
        }
    }
}

impl ProbeRecorder {
    /// One probe run of `target` with `result` (`successful`, `failed`, `unknown`) that took
    /// `took` (upstream records the duration of all but failed probes).
    pub fn observe(&self, target: &ProbeTarget, result: &str, took: Duration) {
        self.results
            .get_or_create(&ProbeResultLabels {
                probe_type: target.probe_type.to_string(),
                result: result.to_string(),
                container: target.container.clone(),
                pod: target.pod.clone(),
                namespace: target.namespace.clone(),
                pod_uid: target.pod_uid.clone(),
            })
            .inc();
        if result != "failed" {
            self.durations
                .get_or_create(&ProbeDurationLabels {
                    probe_type: target.probe_type.to_string(),
                    container: target.container.clone(),
                    pod: target.pod.clone(),
                    namespace: target.namespace.clone(),
                })
                .observe(took.as_secs_f64());
        }
    }

    /// The probe worker of `target` stopped (upstream `worker.stop` deletes its series).
    pub fn forget(&self, target: &ProbeTarget) {
        for result in ["successful", "failed", "unknown"] {
            self.results.remove(&ProbeResultLabels {
                probe_type: target.probe_type.to_string(),
                result: result.to_string(),
                container: target.container.clone(),
                pod: target.pod.clone(),
                namespace: target.namespace.clone(),
                pod_uid: target.pod_uid.clone(),
            });
        }
        self.durations.remove(&ProbeDurationLabels {
            probe_type: target.probe_type.to_string(),
            container: target.container.clone(),
            pod: target.pod.clone(),
            namespace: target.namespace.clone(),
        });
    }
}
