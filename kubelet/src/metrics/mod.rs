//! The kubelet's Prometheus metrics (upstream `pkg/kubelet/metrics`, served at `/metrics`):
//! every metric of kubelet 1.26 that applies to this kubelet, with upstream's names, types,
//! label names, buckets and help texts, held in a `prometheus-client` [`Registry`] and encoded
//! per scrape by [`exposition`]. The sync loop, PLEG, pod workers and the CRI client call the
//! methods of [`Metrics`]; lower modules (eviction, cgroup and certificate managers, the prober,
//! the volume manager, the API client) get small handles ([`EvictionMetrics`], …) or a layer
//! ([`rest_client`]) instead of the whole registry. `/metrics/probes` has a registry of its own
//! ([`prober::ProberMetrics`]).

pub mod exposition;
pub mod prober;
pub mod process;
pub mod rest_client;
pub mod untyped;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use untyped::UntypedCounter;

/// client_golang's `DefBuckets` (seconds).
pub const DEF_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Upstream `podStartupDurationBuckets` (`kubelet_pod_start_sli_duration_seconds`).
pub const POD_STARTUP_BUCKETS: [f64; 25] = [
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

/// Upstream's buckets of `kubelet_pod_status_sync_duration_seconds`.
pub const POD_STATUS_SYNC_BUCKETS: [f64; 11] = [
    0.010, 0.050, 0.100, 0.500, 1.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0,
];

/// A histogram constructor with fixed buckets, for label families.
#[derive(Debug, Clone, Copy)]
pub struct Buckets(pub &'static [f64]);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

/// `kubelet_runtime_operations_duration_seconds`' `ExponentialBuckets(.005, 2.5, 14)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RuntimeBuckets;

impl MetricConstructor<Histogram> for RuntimeBuckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(exponential_buckets(0.005, 2.5, 14))
    }
}

/// A histogram family with fixed buckets.
pub type HistogramFamily<L> = Family<L, Histogram, Buckets>;

/// A histogram family whose members have `DefBuckets`.
pub fn def_buckets<L: Clone + std::hash::Hash + Eq>() -> HistogramFamily<L> {
    Family::new_with_constructor(Buckets(&DEF_BUCKETS))
}

/// Label `operation_type`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationType {
    /// The operation.
    pub operation_type: String,
}

impl OperationType {
    fn of(op: &str) -> Self {
        Self {
            operation_type: op.to_string(),
        }
    }
}

/// Label `container_state`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContainerStateLabel {
    /// `created`, `running`, `exited` or `unknown`.
    pub container_state: String,
}

/// Label `node`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabel {
    /// The node's name.
    pub node: String,
}

/// Label `container_type`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContainerType {
    /// `container`, `init_container` or `ephemeral_container`.
    pub container_type: String,
}

/// Labels `container_type`, `code`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContainerTypeCode {
    /// `container`, `init_container` or `ephemeral_container`.
    pub container_type: String,
    /// The error's gRPC code name (upstream `status.Code(err).String()`).
    pub code: String,
}

/// Label `runtime_handler`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuntimeHandler {
    /// The RuntimeClass handler (`""` for the default).
    pub runtime_handler: String,
}

/// Label `eviction_signal`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvictionSignal {
    /// The signal, e.g. `memory.available`.
    pub eviction_signal: String,
}

/// Label `preemption_signal`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PreemptionSignal {
    /// The resource.
    pub preemption_signal: String,
}

/// Labels `namespace`, `persistentvolumeclaim`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VolumeClaim {
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub persistentvolumeclaim: String,
}

/// Labels `plugin_name`, `state`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginState {
    /// The volume plugin, e.g. `kubernetes.io/empty-dir`.
    pub plugin_name: String,
    /// `desired_state_of_world` or `actual_state_of_world`.
    pub state: String,
}

/// The eviction manager's metrics.
#[derive(Debug, Clone)]
pub struct EvictionMetrics {
    /// `kubelet_evictions{eviction_signal}`.
    pub evictions: Family<EvictionSignal, UntypedCounter>,
    /// `kubelet_eviction_stats_age_seconds{eviction_signal}`.
    pub stats_age: Family<EvictionSignal, Histogram, Buckets>,
}

impl Default for EvictionMetrics {
    fn default() -> Self {
        Self {
            evictions: Family::default(),
            stats_age: def_buckets(),
        }
    }
}

impl EvictionMetrics {
    /// One pod evicted for `signal` on stats `age` old.
    pub fn evicted(&self, signal: &str, age: Duration) {
        let l = EvictionSignal {
            eviction_signal: signal.to_string(),
        };
        self.evictions.get_or_create(&l).inc();
        self.stats_age.get_or_create(&l).observe(age.as_secs_f64());
    }
}

/// The cgroup manager's metric, `kubelet_cgroup_manager_duration_seconds{operation_type}`.
#[derive(Debug, Clone)]
pub struct CgroupMetrics(pub HistogramFamily<OperationType>);

impl Default for CgroupMetrics {
    fn default() -> Self {
        Self(def_buckets())
    }
}

impl CgroupMetrics {
    /// One cgroup operation (`create`, `update`, `destroy`) that took `d`.
    pub fn observe(&self, op: &str, d: Duration) {
        self.0
            .get_or_create(&OperationType::of(op))
            .observe(d.as_secs_f64());
    }
}

/// A certificate's TTL, computed at each scrape (upstream's `GaugeFunc` of
/// `math.Trunc(time.Until(NotAfter).Seconds())`): whole seconds until NotAfter, negative once
/// expired, `+Inf` without a certificate.
#[derive(Debug, Clone, Default)]
pub struct TtlGauge(Arc<Mutex<Option<SystemTime>>>);

impl TtlGauge {
    /// The TTL now.
    pub fn seconds(&self) -> f64 {
        match *self.0.lock() {
            None => f64::INFINITY,
            Some(t) => match t.duration_since(SystemTime::now()) {
                Ok(d) => d.as_secs_f64().trunc(),
                Err(e) => -e.duration().as_secs_f64().trunc(),
            },
        }
    }
}

impl prometheus_client::metrics::TypedMetric for TtlGauge {
    const TYPE: prometheus_client::metrics::MetricType =
        prometheus_client::metrics::MetricType::Gauge;
}

impl prometheus_client::encoding::EncodeMetric for TtlGauge {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.seconds())
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Gauge
    }
}

/// Upstream's buckets of `kubelet_certificate_manager_server_rotation_seconds`: a minute, an
/// hour, 4 hours, a day, a week, a month, 3 and 6 months, a year, 4 years.
pub const ROTATION_BUCKETS: [f64; 10] = [
    60.0,
    3600.0,
    14400.0,
    86400.0,
    604800.0,
    2592000.0,
    7776000.0,
    15552000.0,
    31104000.0,
    124416000.0,
];

/// A certificate manager's metrics: the certificate's TTL, renewal errors and (the serving
/// certificate's) how long each certificate lived before it was rotated.
#[derive(Debug, Clone, Default)]
pub struct CertificateMetrics {
    /// Seconds until the current certificate expires.
    pub ttl: TtlGauge,
    /// Renewal errors.
    pub renew_errors: UntypedCounter,
    /// `kubelet_certificate_manager_server_rotation_seconds` (the serving manager's only).
    pub rotation: Option<Histogram>,
}

impl CertificateMetrics {
    /// The certificate now expires at `not_after` (`None`: none).
    pub fn set_expiry(&self, not_after: Option<SystemTime>) {
        *self.ttl.0.lock() = not_after;
    }

    /// A certificate issued at `not_before` was replaced now.
    pub fn rotated(&self, not_before: SystemTime) {
        if let Some(h) = &self.rotation {
            let lived = SystemTime::now()
                .duration_since(not_before)
                .unwrap_or_default();
            h.observe(lived.as_secs_f64());
        }
    }
}

/// The volume manager's metrics.
#[derive(Debug, Clone, Default)]
pub struct VolumeMetrics {
    /// `volume_manager_total_volumes{plugin_name,state}`.
    pub total_volumes: Family<PluginState, Gauge>,
    /// `kubelet_volume_stats_capacity_bytes` and the other five, by claim.
    pub capacity_bytes: Family<VolumeClaim, Gauge>,
    /// `kubelet_volume_stats_available_bytes`.
    pub available_bytes: Family<VolumeClaim, Gauge>,
    /// `kubelet_volume_stats_used_bytes`.
    pub used_bytes: Family<VolumeClaim, Gauge>,
    /// `kubelet_volume_stats_inodes`.
    pub inodes: Family<VolumeClaim, Gauge>,
    /// `kubelet_volume_stats_inodes_free`.
    pub inodes_free: Family<VolumeClaim, Gauge>,
    /// `kubelet_volume_stats_inodes_used`.
    pub inodes_used: Family<VolumeClaim, Gauge>,
    /// Per pod UID: its volumes' plugins, and whether they are mounted (the desired and the
    /// actual state of the world).
    pods: Arc<Mutex<PodVolumes>>,
    /// Per pod UID: its mounted PersistentVolumeClaim volumes.
    claims: Arc<Mutex<HashMap<String, Vec<ClaimVolume>>>>,
}

/// A pod volume backed by a PersistentVolumeClaim, as mounted: what `/stats/summary` lists
/// with a `pvcRef` and `kubelet_volume_stats_*` report by claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimVolume {
    /// The pod's volume name.
    pub volume: String,
    /// The claim's namespace (the pod's).
    pub namespace: String,
    /// The claim's name.
    pub claim: String,
    /// The volume's path on the host (what the containers mount).
    pub path: std::path::PathBuf,
    /// Whether the volume's plugin has a metrics provider: upstream's `local` plugin has
    /// `MetricsStatFS`, `hostPath` has `MetricsNil` (no figures, no series).
    pub stat_fs: bool,
}

/// Per pod UID: its volumes' plugins and whether they are mounted.
type PodVolumes = HashMap<String, (Vec<&'static str>, bool)>;

impl VolumeMetrics {
    /// The pod `uid` wants volumes of `plugins`; `mounted` whether they are set up.
    pub fn pod_volumes(&self, uid: &str, plugins: Vec<&'static str>, mounted: bool) {
        let mut pods = self.pods.lock();
        pods.insert(uid.to_string(), (plugins, mounted));
        self.recount(&pods);
    }

    /// The pod `uid`'s volumes are gone.
    pub fn pod_removed(&self, uid: &str) {
        self.claims.lock().remove(uid);
        let mut pods = self.pods.lock();
        if pods.remove(uid).is_some() {
            self.recount(&pods);
        }
    }

    /// The pod `uid`'s PersistentVolumeClaim volumes are mounted (an empty list: none).
    pub fn pod_claims(&self, uid: &str, claims: Vec<ClaimVolume>) {
        let mut all = self.claims.lock();
        if claims.is_empty() {
            all.remove(uid);
        } else {
            all.insert(uid.to_string(), claims);
        }
    }

    /// The mounted PersistentVolumeClaim volumes, by pod UID.
    pub fn claims(&self) -> HashMap<String, Vec<ClaimVolume>> {
        self.claims.lock().clone()
    }

    /// Upstream's `volumeStatsCollector` (`collectors/volume_stats.go`): per claim (the first
    /// volume of each (namespace, claim), as upstream deduplicates them), the statfs figures of
    /// its path, read now; volumes whose plugin has no metrics provider give no series.
    pub fn refresh_claim_stats(&self) {
        let families = [
            &self.capacity_bytes,
            &self.available_bytes,
            &self.used_bytes,
            &self.inodes,
            &self.inodes_free,
            &self.inodes_used,
        ];
        for f in families {
            f.clear();
        }
        let claims = self.claims.lock().clone();
        let mut uids: Vec<&String> = claims.keys().collect();
        uids.sort();
        let mut seen = std::collections::HashSet::new();
        for v in uids.into_iter().flat_map(|u| &claims[u]) {
            if !v.stat_fs {
                continue;
            }
            let key = VolumeClaim {
                namespace: v.namespace.clone(),
                persistentvolumeclaim: v.claim.clone(),
            };
            if seen.contains(&key) {
                continue;
            }
            let Some(s) = crate::fsstats::volume_fs_stats(&v.path) else {
                continue;
            };
            let g = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            for (f, n) in families.iter().zip([
                s.capacity,
                s.available,
                s.used,
                s.inodes,
                s.inodes_free,
                s.inodes_used,
            ]) {
                f.get_or_create(&key).set(g(n));
            }
            seen.insert(key);
        }
    }

    fn recount(&self, pods: &PodVolumes) {
        let mut counts: HashMap<(&str, &str), i64> = HashMap::new();
        for (plugins, mounted) in pods.values() {
            for p in plugins {
                *counts.entry((p, "desired_state_of_world")).or_default() += 1;
                if *mounted {
                    *counts.entry((p, "actual_state_of_world")).or_default() += 1;
                }
            }
        }
        self.total_volumes.clear();
        for ((plugin, state), n) in counts {
            self.total_volumes
                .get_or_create(&PluginState {
                    plugin_name: plugin.to_string(),
                    state: state.to_string(),
                })
                .set(n);
        }
    }
}

/// When a pod was first seen, and the image pulls of its start (upstream's pod startup
/// latency tracker).
#[derive(Debug, Clone)]
struct PodStart {
    seen: Instant,
    /// The pod's creation timestamp, if it has one.
    created: Option<SystemTime>,
    first_pull_started: Option<Instant>,
    last_pull_finished: Option<Instant>,
    worker_started: bool,
}

/// All kubelet metrics of `/metrics`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// `kubelet_running_pods`.
    pub running_pods: Gauge,
    /// `kubelet_running_containers{container_state}`.
    pub running_containers: Family<ContainerStateLabel, Gauge>,
    node_name: Family<NodeLabel, Gauge>,
    containers_per_pod: Histogram,
    pod_worker: HistogramFamily<OperationType>,
    pod_start: Histogram,
    pod_start_sli: Histogram,
    pod_worker_start: Histogram,
    /// `kubelet_pod_status_sync_duration_seconds` (the API status syncer observes it).
    pub pod_status_sync: Histogram,
    pleg_relist: Histogram,
    pleg_relist_interval: Histogram,
    pleg_discard_events: UntypedCounter,
    pleg_last_seen: Gauge<f64, std::sync::atomic::AtomicU64>,
    runtime_ops: Family<OperationType, Counter>,
    runtime_errors: Family<OperationType, Counter>,
    runtime_durations: Family<OperationType, Histogram, RuntimeBuckets>,
    run_podsandbox: Family<RuntimeHandler, Histogram, Buckets>,
    run_podsandbox_errors: Family<RuntimeHandler, Counter>,
    started_pods: Counter,
    started_pods_errors: Counter,
    started_containers: Family<ContainerType, Counter>,
    started_containers_errors: Family<ContainerTypeCode, Counter>,
    preemptions: Family<PreemptionSignal, UntypedCounter>,
    /// The eviction manager's.
    pub eviction: EvictionMetrics,
    /// The cgroup manager's.
    pub cgroups: CgroupMetrics,
    /// The client certificate manager's.
    pub client_certificate: CertificateMetrics,
    /// The serving certificate manager's.
    pub server_certificate: CertificateMetrics,
    /// The volume manager's.
    pub volumes: VolumeMetrics,
    /// The prober's (served at `/metrics/probes`).
    pub prober: prober::ProberMetrics,
    last_relist: Mutex<Option<Instant>>,
    /// Pods not yet running, by UID.
    starting: Mutex<HashMap<String, PodStart>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new("")
    }
}

impl Metrics {
    /// The registry of a kubelet on node `node_name` (`kubelet_node_name{node}` is 1).
    pub fn new(node_name: &str) -> Self {
        let m = Self {
            registry: Registry::default(),
            running_pods: Gauge::default(),
            running_containers: Family::default(),
            node_name: Family::default(),
            containers_per_pod: Histogram::new(exponential_buckets(1.0, 2.0, 5)),
            pod_worker: def_buckets(),
            pod_start: Histogram::new(DEF_BUCKETS),
            pod_start_sli: Histogram::new(POD_STARTUP_BUCKETS),
            pod_worker_start: Histogram::new(DEF_BUCKETS),
            pod_status_sync: Histogram::new(POD_STATUS_SYNC_BUCKETS),
            pleg_relist: Histogram::new(DEF_BUCKETS),
            pleg_relist_interval: Histogram::new(DEF_BUCKETS),
            pleg_discard_events: UntypedCounter::default(),
            pleg_last_seen: Gauge::default(),
            runtime_ops: Family::default(),
            runtime_errors: Family::default(),
            runtime_durations: Family::new_with_constructor(RuntimeBuckets),
            run_podsandbox: def_buckets(),
            run_podsandbox_errors: Family::default(),
            started_pods: Counter::default(),
            started_pods_errors: Counter::default(),
            started_containers: Family::default(),
            started_containers_errors: Family::default(),
            preemptions: Family::default(),
            eviction: EvictionMetrics::default(),
            cgroups: CgroupMetrics::default(),
            client_certificate: CertificateMetrics::default(),
            server_certificate: CertificateMetrics {
                rotation: Some(Histogram::new(ROTATION_BUCKETS)),
                ..Default::default()
            },
            volumes: VolumeMetrics::default(),
            prober: prober::ProberMetrics::new(),
            last_relist: Mutex::new(None),
            starting: Mutex::new(HashMap::new()),
        };
        m.node_name
            .get_or_create(&NodeLabel {
                node: node_name.to_string(),
            })
            .set(1);
        m.register()
    }

    fn register(mut self) -> Self {
        let r = &mut Help(&mut self.registry);
        // Counters are registered without `_total`: the encoders append it.
        r.register(
            "kubelet_node_name",
            "The node's name. The count is always 1.",
            self.node_name.clone(),
        );
        r.register(
            "kubelet_containers_per_pod_count",
            "The number of containers per pod.",
            self.containers_per_pod.clone(),
        );
        r.register(
            "kubelet_pod_worker_duration_seconds",
            "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
            self.pod_worker.clone(),
        );
        r.register(
            "kubelet_pod_start_duration_seconds",
            "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
            self.pod_start.clone(),
        );
        r.register(
            "kubelet_pod_start_sli_duration_seconds",
            "Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
            self.pod_start_sli.clone(),
        );
        r.register(
            "kubelet_cgroup_manager_duration_seconds",
            "Duration in seconds for cgroup manager operations. Broken down by method.",
            self.cgroups.0.clone(),
        );
        r.register(
            "kubelet_pod_worker_start_duration_seconds",
            "Duration in seconds from kubelet seeing a pod to starting a worker.",
            self.pod_worker_start.clone(),
        );
        r.register(
            "kubelet_pod_status_sync_duration_seconds",
            "Duration in seconds to sync a pod status update. Measures time from detection of a change to pod status until the API is successfully updated for that pod, even if multiple intevening changes to pod status occur.",
            self.pod_status_sync.clone(),
        );
        r.register(
            "kubelet_pleg_relist_duration_seconds",
            "Duration in seconds for relisting pods in PLEG.",
            self.pleg_relist.clone(),
        );
        r.register(
            "kubelet_pleg_discard_events",
            "The number of discard events in PLEG.",
            self.pleg_discard_events.clone(),
        );
        r.register(
            "kubelet_pleg_relist_interval_seconds",
            "Interval in seconds between relisting in PLEG.",
            self.pleg_relist_interval.clone(),
        );
        r.register(
            "kubelet_pleg_last_seen_seconds",
            "Timestamp in seconds when PLEG was last seen active.",
            self.pleg_last_seen.clone(),
        );
        r.register(
            "kubelet_runtime_operations",
            "Cumulative number of runtime operations by operation type.",
            self.runtime_ops.clone(),
        );
        r.register(
            "kubelet_runtime_operations_duration_seconds",
            "Duration in seconds of runtime operations. Broken down by operation type.",
            self.runtime_durations.clone(),
        );
        r.register(
            "kubelet_runtime_operations_errors",
            "Cumulative number of runtime operation errors by operation type.",
            self.runtime_errors.clone(),
        );
        r.register(
            "kubelet_evictions",
            "Cumulative number of pod evictions by eviction signal",
            self.eviction.evictions.clone(),
        );
        r.register(
            "kubelet_eviction_stats_age_seconds",
            "Time between when stats are collected, and when pod is evicted based on those stats by eviction signal",
            self.eviction.stats_age.clone(),
        );
        r.register(
            "kubelet_preemptions",
            "Cumulative number of pod preemptions by preemption resource",
            self.preemptions.clone(),
        );
        r.register(
            "kubelet_run_podsandbox_duration_seconds",
            "Duration in seconds of the run_podsandbox operations. Broken down by RuntimeClass.Handler.",
            self.run_podsandbox.clone(),
        );
        r.register(
            "kubelet_run_podsandbox_errors",
            "Cumulative number of the run_podsandbox operation errors by RuntimeClass.Handler.",
            self.run_podsandbox_errors.clone(),
        );
        r.register(
            "kubelet_running_pods",
            "Number of pods that have a running pod sandbox",
            self.running_pods.clone(),
        );
        r.register(
            "kubelet_running_containers",
            "Number of containers currently running",
            self.running_containers.clone(),
        );
        r.register(
            "kubelet_started_pods",
            "Cumulative number of pods started",
            self.started_pods.clone(),
        );
        r.register(
            "kubelet_started_pods_errors",
            "Cumulative number of errors when starting pods",
            self.started_pods_errors.clone(),
        );
        r.register(
            "kubelet_started_containers",
            "Cumulative number of containers started",
            self.started_containers.clone(),
        );
        r.register(
            "kubelet_started_containers_errors",
            "Cumulative number of errors when starting containers",
            self.started_containers_errors.clone(),
        );
        r.register(
            "kubelet_certificate_manager_client_ttl_seconds",
            "Gauge of the TTL (time-to-live) of the Kubelet's client certificate. The value is in seconds until certificate expiry (negative if already expired). If client certificate is invalid or unused, the value will be +INF.",
            self.client_certificate.ttl.clone(),
        );
        r.register(
            "kubelet_certificate_manager_client_expiration_renew_errors",
            "Counter of certificate renewal errors.",
            self.client_certificate.renew_errors.clone(),
        );
        r.register(
            "kubelet_certificate_manager_server_ttl_seconds",
            "Gauge of the shortest TTL (time-to-live) of the Kubelet's serving certificate. The value is in seconds until certificate expiry (negative if already expired). If serving certificate is invalid or unused, the value will be +INF.",
            self.server_certificate.ttl.clone(),
        );
        r.register(
            "kubelet_server_expiration_renew_errors",
            "Counter of certificate renewal errors.",
            self.server_certificate.renew_errors.clone(),
        );
        if let Some(h) = &self.server_certificate.rotation {
            r.register(
                "kubelet_certificate_manager_server_rotation_seconds",
                "Histogram of the number of seconds the previous certificate lived before being rotated.",
                h.clone(),
            );
        }
        let v = &self.volumes;
        for (name, help, family) in [
            (
                "kubelet_volume_stats_capacity_bytes",
                "Capacity in bytes of the volume",
                &v.capacity_bytes,
            ),
            (
                "kubelet_volume_stats_available_bytes",
                "Number of available bytes in the volume",
                &v.available_bytes,
            ),
            (
                "kubelet_volume_stats_used_bytes",
                "Number of used bytes in the volume",
                &v.used_bytes,
            ),
            (
                "kubelet_volume_stats_inodes",
                "Maximum number of inodes in the volume",
                &v.inodes,
            ),
            (
                "kubelet_volume_stats_inodes_free",
                "Number of free inodes in the volume",
                &v.inodes_free,
            ),
            (
                "kubelet_volume_stats_inodes_used",
                "Number of used inodes in the volume",
                &v.inodes_used,
            ),
        ] {
            r.register(name, help, family.clone());
        }
        r.register(
            "volume_manager_total_volumes",
            "Number of volumes in Volume Manager",
            v.total_volumes.clone(),
        );
        let rc = rest_client::global();
        r.register(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            rc.requests.clone(),
        );
        r.register(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            rc.duration.clone(),
        );
        r.register_collector(Box::new(process::ProcessCollector));
        self
    }

    /// `/metrics` encoded for a scraper that sent `accept`: content type and body.
    pub fn encode(&self, accept: &str) -> (&'static str, String) {
        self.volumes.refresh_claim_stats();
        exposition::encode(&self.registry, accept)
    }

    /// `/metrics` in the Prometheus text format 0.0.4.
    pub fn render(&self) -> String {
        self.encode("").1
    }

    /// `/metrics/probes` encoded for `accept`.
    pub fn encode_probes(&self, accept: &str) -> (&'static str, String) {
        self.prober.encode(accept)
    }

    /// Observe one PLEG relist that took `d`: its duration, the interval since the previous
    /// one's start, and PLEG's last-seen timestamp.
    pub fn observe_relist(&self, d: Duration) {
        let now = Instant::now();
        let start = now.checked_sub(d).unwrap_or(now);
        if let Some(prev) = self.last_relist.lock().replace(start) {
            self.pleg_relist_interval
                .observe(start.saturating_duration_since(prev).as_secs_f64());
        }
        self.pleg_relist.observe(d.as_secs_f64());
        self.pleg_last_seen.set(unix_seconds(SystemTime::now()));
    }

    /// PLEG discarded `n` events (its channel was full).
    pub fn pleg_discarded(&self, n: u64) {
        for _ in 0..n {
            self.pleg_discard_events.inc();
        }
    }

    /// The kubelet saw pod `uid` for the first time (start of `kubelet_pod_start_duration_seconds`).
    pub fn pod_seen(&self, uid: &str) {
        self.pod_seen_created(uid, None);
    }

    /// As [`Self::pod_seen`], with the pod's creation timestamp (the SLI's start) and its number
    /// of containers (`kubelet_containers_per_pod_count`, observed once per pod).
    pub fn pod_seen_created(&self, uid: &str, created: Option<SystemTime>) {
        self.starting
            .lock()
            .entry(uid.to_string())
            .or_insert_with(|| PodStart {
                seen: Instant::now(),
                created,
                first_pull_started: None,
                last_pull_finished: None,
                worker_started: false,
            });
    }

    /// A pod with `n` containers was admitted.
    pub fn containers_per_pod(&self, n: usize) {
        self.containers_per_pod.observe(n as f64);
    }

    /// The pod worker of `uid` starts its first sync (`kubelet_pod_worker_start_duration_seconds`).
    pub fn pod_worker_started(&self, uid: &str) {
        let mut starting = self.starting.lock();
        if let Some(p) = starting.get_mut(uid)
            && !p.worker_started
        {
            p.worker_started = true;
            self.pod_worker_start
                .observe(p.seen.elapsed().as_secs_f64());
        }
    }

    /// An image pull for pod `uid` ran from `began` to now.
    pub fn pod_pulled(&self, uid: &str, began: Instant) {
        if let Some(p) = self.starting.lock().get_mut(uid) {
            p.first_pull_started = Some(p.first_pull_started.map_or(began, |f| f.min(began)));
            p.last_pull_finished = Some(Instant::now());
        }
    }

    /// Pod `uid` is running: observe its start duration, and the SLI duration (from its
    /// creation, less the time pulling images), once.
    pub fn pod_running(&self, uid: &str) {
        let Some(p) = self.starting.lock().remove(uid) else {
            return;
        };
        self.pod_start.observe(p.seen.elapsed().as_secs_f64());
        if let Some(created) = p.created {
            let since = SystemTime::now()
                .duration_since(created)
                .unwrap_or_default();
            let pulling = match (p.first_pull_started, p.last_pull_finished) {
                (Some(a), Some(b)) => b.saturating_duration_since(a),
                _ => Duration::ZERO,
            };
            self.pod_start_sli
                .observe(since.saturating_sub(pulling).as_secs_f64());
        }
    }

    /// Pod `uid` is gone before it ran.
    pub fn pod_forgotten(&self, uid: &str) {
        self.starting.lock().remove(uid);
    }

    /// A pod status change reached the API server `d` after it was detected.
    pub fn pod_status_synced(&self, d: Duration) {
        self.pod_status_sync.observe(d.as_secs_f64());
    }

    /// Count one runtime operation (and its failure) that took `took`.
    pub fn runtime_operation_took(&self, op: &str, failed: bool, took: Duration) {
        self.runtime_operation(op, failed);
        self.runtime_durations
            .get_or_create(&OperationType::of(op))
            .observe(took.as_secs_f64());
    }

    /// Count one runtime operation (and its failure).
    pub fn runtime_operation(&self, op: &str, failed: bool) {
        let l = OperationType::of(op);
        self.runtime_ops.get_or_create(&l).inc();
        if failed {
            self.runtime_errors.get_or_create(&l).inc();
        }
    }

    /// One `RunPodSandbox` with `handler` that took `d` (upstream's instrumented runtime
    /// service).
    pub fn run_podsandbox(&self, handler: &str, failed: bool, d: Duration) {
        let l = RuntimeHandler {
            runtime_handler: handler.to_string(),
        };
        self.run_podsandbox
            .get_or_create(&l)
            .observe(d.as_secs_f64());
        if failed {
            self.run_podsandbox_errors.get_or_create(&l).inc();
        }
    }

    /// The runtime manager tried to start a pod (a sandbox); `ok` whether it did.
    pub fn pod_started(&self, ok: bool) {
        self.started_pods.inc();
        if !ok {
            self.started_pods_errors.inc();
        }
    }

    /// The runtime manager tried to start a container of `container_type`; `error` is the gRPC
    /// code name of its failure.
    pub fn container_started(&self, container_type: &str, error: Option<&str>) {
        self.started_containers
            .get_or_create(&ContainerType {
                container_type: container_type.to_string(),
            })
            .inc();
        if let Some(code) = error {
            self.started_containers_errors
                .get_or_create(&ContainerTypeCode {
                    container_type: container_type.to_string(),
                    code: code.to_string(),
                })
                .inc();
        }
    }

    /// Observe one pod worker sync of `operation` (upstream's `create`, `sync`, `kill`).
    pub fn observe_pod_worker(&self, operation: &str, d: Duration) {
        self.pod_worker
            .get_or_create(&OperationType::of(operation))
            .observe(d.as_secs_f64());
    }

    /// Set the running pod gauge and the container gauges per state (`created`, `running`,
    /// `exited`, `unknown`).
    pub fn set_running(&self, pods: i64, containers: &[(&str, i64)]) {
        self.running_pods.set(pods);
        self.running_containers.clear();
        for (state, n) in containers {
            self.running_containers
                .get_or_create(&ContainerStateLabel {
                    container_state: (*state).to_string(),
                })
                .set(*n);
        }
    }

    /// A shared handle, for the lower modules that hold an `Arc<Metrics>`.
    pub fn shared(self) -> Arc<Self> {
        Arc::new(self)
    }
}

/// Registers with upstream's help texts: prometheus-client appends a full stop to each, so
/// one that has its own loses it (`The count is always 1.`, not `1..`).
pub(crate) struct Help<'a>(pub &'a mut Registry);

impl Help<'_> {
    /// `Registry::register` with `help`'s own final full stop removed.
    pub fn register(
        &mut self,
        name: &str,
        help: &str,
        metric: impl prometheus_client::registry::Metric,
    ) {
        self.0
            .register(name, help.strip_suffix('.').unwrap_or(help), metric);
    }

    /// `Registry::register_collector`.
    pub fn register_collector(&mut self, c: Box<dyn prometheus_client::collector::Collector>) {
        self.0.register_collector(c);
    }
}

/// Seconds since the Unix epoch.
pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
