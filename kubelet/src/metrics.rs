//! The kubelet's Prometheus metrics (upstream `pkg/kubelet/metrics`), kept in-process without a
//! metrics library: counters per label, fixed-bucket histograms and gauges, rendered in the
//! Prometheus text format by [`Metrics::render`]. This module owns their names and help texts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

/// Default latency buckets (seconds).
pub const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A fixed-bucket histogram.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    /// Record one observation.
    pub fn observe(&mut self, d: Duration) {
        let v = d.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += v;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {}",
                self.counts[i]
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

/// All kubelet metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    /// `kubelet_running_pods`.
    pub running_pods: AtomicI64,
    /// `kubelet_running_containers`.
    pub running_containers: AtomicI64,
    pleg_relist: Mutex<Histogram>,
    runtime_ops: Mutex<BTreeMap<String, u64>>,
    runtime_errors: Mutex<BTreeMap<String, u64>>,
    pod_worker: Mutex<BTreeMap<String, Histogram>>,
    runtime_durations: Mutex<BTreeMap<String, Histogram>>,
    pod_start: Mutex<Histogram>,
    /// When each pod not yet running was first seen.
    first_seen: Mutex<std::collections::HashMap<String, std::time::Instant>>,
}

impl Metrics {
    /// Observe one PLEG relist.
    pub fn observe_relist(&self, d: Duration) {
        self.pleg_relist.lock().observe(d);
    }

    /// The kubelet saw pod `uid` for the first time (start of `kubelet_pod_start_duration_seconds`).
    pub fn pod_seen(&self, uid: &str) {
        self.first_seen
            .lock()
            .entry(uid.to_string())
            .or_insert_with(std::time::Instant::now);
    }

    /// Pod `uid` is running: observe its start duration once.
    pub fn pod_running(&self, uid: &str) {
        let seen = self.first_seen.lock().remove(uid);
        if let Some(t) = seen {
            self.pod_start.lock().observe(t.elapsed());
        }
    }

    /// Pod `uid` is gone before it ran.
    pub fn pod_forgotten(&self, uid: &str) {
        self.first_seen.lock().remove(uid);
    }

    /// Count one runtime operation (and its failure) that took `took`.
    pub fn runtime_operation_took(&self, op: &str, failed: bool, took: Duration) {
        self.runtime_operation(op, failed);
        self.runtime_durations
            .lock()
            .entry(op.to_string())
            .or_default()
            .observe(took);
    }

    /// Count one runtime operation (and its failure).
    pub fn runtime_operation(&self, op: &str, failed: bool) {
        *self.runtime_ops.lock().entry(op.to_string()).or_default() += 1;
        if failed {
            *self
                .runtime_errors
                .lock()
                .entry(op.to_string())
                .or_default() += 1;
        }
    }

    /// Observe one pod worker sync of `operation` (`sync`, `terminating`, `terminated`).
    pub fn observe_pod_worker(&self, operation: &str, d: Duration) {
        self.pod_worker
            .lock()
            .entry(operation.to_string())
            .or_default()
            .observe(d);
    }

    /// Set the running pod/container gauges.
    pub fn set_running(&self, pods: i64, containers: i64) {
        self.running_pods.store(pods, Ordering::Relaxed);
        self.running_containers.store(containers, Ordering::Relaxed);
    }

    /// Render in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP kubelet_running_pods Number of pods that have a running pod sandbox\n# TYPE kubelet_running_pods gauge\n");
        let _ = writeln!(
            out,
            "kubelet_running_pods {}",
            self.running_pods.load(Ordering::Relaxed)
        );
        out.push_str("# HELP kubelet_running_containers Number of containers currently running\n# TYPE kubelet_running_containers gauge\n");
        let _ = writeln!(
            out,
            "kubelet_running_containers{{container_state=\"running\"}} {}",
            self.running_containers.load(Ordering::Relaxed)
        );
        out.push_str("# HELP kubelet_pleg_relist_duration_seconds Duration in seconds for relisting pods in PLEG.\n# TYPE kubelet_pleg_relist_duration_seconds histogram\n");
        self.pleg_relist
            .lock()
            .render(&mut out, "kubelet_pleg_relist_duration_seconds", "");
        out.push_str("# HELP kubelet_runtime_operations_total Cumulative number of runtime operations by operation type.\n# TYPE kubelet_runtime_operations_total counter\n");
        for (op, n) in self.runtime_ops.lock().iter() {
            let _ = writeln!(
                out,
                "kubelet_runtime_operations_total{{operation_type=\"{op}\"}} {n}"
            );
        }
        out.push_str("# HELP kubelet_runtime_operations_errors_total Cumulative number of runtime operation errors by operation type.\n# TYPE kubelet_runtime_operations_errors_total counter\n");
        for (op, n) in self.runtime_errors.lock().iter() {
            let _ = writeln!(
                out,
                "kubelet_runtime_operations_errors_total{{operation_type=\"{op}\"}} {n}"
            );
        }
        out.push_str("# HELP kubelet_runtime_operations_duration_seconds Duration in seconds of runtime operations. Broken down by operation type.\n# TYPE kubelet_runtime_operations_duration_seconds histogram\n");
        for (op, h) in self.runtime_durations.lock().iter() {
            h.render(
                &mut out,
                "kubelet_runtime_operations_duration_seconds",
                &format!("operation_type=\"{op}\""),
            );
        }
        out.push_str("# HELP kubelet_pod_start_duration_seconds Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run\n# TYPE kubelet_pod_start_duration_seconds histogram\n");
        self.pod_start
            .lock()
            .render(&mut out, "kubelet_pod_start_duration_seconds", "");
        out.push_str("# HELP kubelet_pod_worker_duration_seconds Duration in seconds to sync a single pod.\n# TYPE kubelet_pod_worker_duration_seconds histogram\n");
        for (op, h) in self.pod_worker.lock().iter() {
            h.render(
                &mut out,
                "kubelet_pod_worker_duration_seconds",
                &format!("operation_type=\"{op}\""),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders() {
        let m = Metrics::default();
        m.observe_relist(Duration::from_millis(20));
        m.runtime_operation("list_podsandbox", false);
        m.runtime_operation_took("run_podsandbox", false, Duration::from_millis(80));
        m.pod_seen("u1");
        m.pod_running("u1");
        m.pod_running("u1");
        m.observe_pod_worker("sync", Duration::from_millis(300));
        m.set_running(1, 2);
        let t = m.render();
        assert!(t.contains("kubelet_running_pods 1"));
        assert!(
            t.contains("kubelet_pod_start_duration_seconds_count 1"),
            "observed once"
        );
        assert!(t.contains(
            "kubelet_runtime_operations_duration_seconds_count{operation_type=\"run_podsandbox\"} 1"
        ));
        assert!(t.contains("kubelet_pleg_relist_duration_seconds_count 1"));
        assert!(
            t.contains("kubelet_runtime_operations_total{operation_type=\"list_podsandbox\"} 1")
        );
        assert!(t.contains(
            "kubelet_pod_worker_duration_seconds_bucket{operation_type=\"sync\",le=\"0.5\"} 1"
        ));
    }
}
