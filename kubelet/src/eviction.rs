//! Node-pressure eviction (upstream `pkg/kubelet/eviction`). The eviction manager watches the
//! node's signals (`memory.available`, `nodefs.available`, `nodefs.inodesFree`,
//! `imagefs.available`, `imagefs.inodesFree`, `pid.available`) every 10 s against the hard and
//! soft thresholds of `--eviction-hard` / `--eviction-soft` (with their grace periods and
//! minimum reclaim), keeps the node conditions MemoryPressure / DiskPressure / PIDPressure
//! (held for `--eviction-pressure-transition-period` after the last breach), first reclaims
//! node-level resources (dead containers, unused images) and, when that is not enough, evicts
//! one pod per round: ranked by whether it uses more than it requested, its priority, its QoS
//! class (BestEffort, Burstable, Guaranteed) and its usage; critical pods (static pods, priority
//! of system-critical and above) are never evicted. The evicted pod ends in phase Failed with
//! reason `Evicted`. It owns its thresholds and observation history; the sync loop owns the
//! killing (it receives [`EvictRequest`]s); [`EvictionState`] is what the rest of the kubelet
//! reads (conditions, pod admission).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::cri::{ImageManagerService, RuntimeService};
use crate::fsstats::{device_of, dir_usage, fs_stats, meminfo_field};
use crate::qos::get_pod_qos;
use crate::resource::parse_quantity_scaled;
use crate::types::POD_UID_LABEL;
use crate::types::{API_SOURCE, CONFIG_SOURCE_ANNOTATION};

/// Upstream `evictionMonitoringPeriod`.
pub const MONITORING_PERIOD: Duration = Duration::from_secs(10);
/// Upstream `scheduling.SystemCriticalPriority`: pods at or above it are critical.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
/// The pod status reason of an evicted pod.
pub const REASON: &str = "Evicted";
/// Upstream `immediateEvictionGracePeriodSeconds` (hard thresholds).
pub const IMMEDIATE_GRACE_SECONDS: i64 = 1;
/// Upstream `DefaultEvictionHard` (Linux).
pub const DEFAULT_EVICTION_HARD: &str = "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%,imagefs.inodesFree<5%";

/// An eviction signal (upstream `evictionapi.Signal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    MemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    PidAvailable,
}

/// A node condition the eviction manager drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeCondition {
    MemoryPressure,
    DiskPressure,
    PidPressure,
}

impl NodeCondition {
    /// The API name (`PIDPressure`, not `PidPressure`).
    pub fn name(self) -> &'static str {
        match self {
            NodeCondition::MemoryPressure => "MemoryPressure",
            NodeCondition::DiskPressure => "DiskPressure",
            NodeCondition::PidPressure => "PIDPressure",
        }
    }
}

impl Signal {
    pub const ALL: [Signal; 6] = [
        Signal::MemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
    ];

    /// The signal's name in flags and config.
    pub fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    fn parse(s: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|x| x.name() == s)
    }

    /// The node condition a breach of this signal sets.
    pub fn condition(self) -> NodeCondition {
        match self {
            Signal::MemoryAvailable => NodeCondition::MemoryPressure,
            Signal::PidAvailable => NodeCondition::PidPressure,
            _ => NodeCondition::DiskPressure,
        }
    }

    /// The resource named in eviction messages (upstream `signalToResource`).
    pub fn resource(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory",
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => "ephemeral-storage",
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => "inodes",
            Signal::PidAvailable => "pids",
        }
    }

    /// Upstream evicts for memory first, then the filesystems, then PIDs.
    fn priority(self) -> u8 {
        match self {
            Signal::MemoryAvailable => 0,
            Signal::NodeFsAvailable | Signal::NodeFsInodesFree => 1,
            Signal::ImageFsAvailable | Signal::ImageFsInodesFree => 2,
            Signal::PidAvailable => 3,
        }
    }

    fn is_bytes(self) -> bool {
        matches!(
            self,
            Signal::MemoryAvailable | Signal::NodeFsAvailable | Signal::ImageFsAvailable
        )
    }
}

/// A threshold value: an absolute quantity or a percentage of capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Quantity(u64),
    Percentage(f64),
}

impl Value {
    fn parse(s: &str) -> Result<Value, String> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            let v: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("invalid percentage {s:?}"))?;
            if !(0.0..=100.0).contains(&v) {
                return Err(format!(
                    "eviction percentage threshold must be >= 0% and <= 100%: {s}"
                ));
            }
            return Ok(Value::Percentage(v / 100.0));
        }
        let v = parse_quantity_scaled(s, 1.0).ok_or_else(|| format!("invalid quantity {s:?}"))?;
        u64::try_from(v)
            .map(Value::Quantity)
            .map_err(|_| format!("eviction threshold must be positive: {s}"))
    }

    /// The value in units of the signal, given the capacity.
    pub fn amount(self, capacity: u64) -> u64 {
        match self {
            Value::Quantity(q) => q,
            Value::Percentage(p) => (capacity as f64 * p).round() as u64,
        }
    }

    fn render(self, signal: Signal) -> String {
        match self {
            Value::Percentage(p) => format!("{}%", p * 100.0),
            Value::Quantity(q) => render_amount(signal, q),
        }
    }
}

fn render_amount(signal: Signal, v: u64) -> String {
    if signal.is_bytes() && v >= 1024 && v.is_multiple_of(1024) {
        let mut v = v;
        let mut unit = 0;
        let units = ["", "Ki", "Mi", "Gi", "Ti"];
        while v.is_multiple_of(1024) && v >= 1024 && unit < units.len() - 1 {
            v /= 1024;
            unit += 1;
        }
        format!("{v}{}", units[unit])
    } else {
        v.to_string()
    }
}

/// One eviction threshold (upstream `evictionapi.Threshold`; the operator is always `<`).
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub value: Value,
    /// Zero for hard thresholds.
    pub grace_period: Duration,
    pub min_reclaim: Option<Value>,
}

impl Threshold {
    pub fn is_hard(&self) -> bool {
        self.grace_period.is_zero()
    }

    fn key(&self) -> (Signal, bool) {
        (self.signal, self.is_hard())
    }
}

/// Parse a `--eviction-hard`-style flag (`memory.available<100Mi,nodefs.available<10%`) into
/// a signal -> value map (upstream `MapStringString` with `<`).
pub fn parse_threshold_flag(s: &str) -> Result<BTreeMap<String, String>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            p.split_once('<')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| format!("malformed pair {p:?}, expect signal<value"))
        })
        .collect()
}

/// Parse a `--eviction-soft-grace-period`-style flag (`memory.available=1m30s`).
pub fn parse_pairs_flag(s: &str) -> Result<BTreeMap<String, String>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| format!("malformed pair {p:?}, expect signal=value"))
        })
        .collect()
}

/// Upstream `ParseThresholdConfig`: hard and soft thresholds, soft grace periods (every soft
/// threshold needs one, and only those may have one) and minimum reclaims.
pub fn parse_thresholds(
    hard: &BTreeMap<String, String>,
    soft: &BTreeMap<String, String>,
    soft_grace: &BTreeMap<String, String>,
    min_reclaim: &BTreeMap<String, String>,
) -> Result<Vec<Threshold>, String> {
    let signal =
        |k: &str| Signal::parse(k).ok_or_else(|| format!("unsupported eviction signal {k}"));
    let mut reclaim = HashMap::new();
    for (k, v) in min_reclaim {
        let s = signal(k)?;
        reclaim.insert(s, Value::parse(v).map_err(|e| format!("{k}: {e}"))?);
    }
    let mut out = Vec::new();
    for (k, v) in hard {
        let s = signal(k)?;
        let value = Value::parse(v).map_err(|e| format!("{k}: {e}"))?;
        // A zero threshold disables the signal (upstream drops it).
        if matches!(value, Value::Quantity(0)) || value == Value::Percentage(0.0) {
            continue;
        }
        out.push(Threshold {
            signal: s,
            value,
            grace_period: Duration::ZERO,
            min_reclaim: reclaim.get(&s).copied(),
        });
    }
    for k in soft_grace.keys() {
        if !soft.contains_key(k) {
            return Err(format!(
                "grace period specified for an eviction signal without a soft threshold: {k}"
            ));
        }
    }
    for (k, v) in soft {
        let s = signal(k)?;
        let value = Value::parse(v).map_err(|e| format!("{k}: {e}"))?;
        let grace = soft_grace
            .get(k)
            .ok_or_else(|| format!("no grace period specified for soft eviction threshold {k}"))?;
        let grace = crate::duration::parse_duration(grace)
            .map_err(|e| format!("grace period of {k}: {e}"))?;
        if grace.is_zero() {
            return Err(format!(
                "grace period of soft eviction threshold {k} must be positive"
            ));
        }
        out.push(Threshold {
            signal: s,
            value,
            grace_period: grace,
            min_reclaim: reclaim.get(&s).copied(),
        });
    }
    Ok(out)
}

/// The eviction settings (flags and config fields of the same names).
#[derive(Debug, Clone, PartialEq)]
pub struct EvictionConfig {
    pub thresholds: Vec<Threshold>,
    /// `--eviction-pressure-transition-period` (5m).
    pub pressure_transition_period: Duration,
    /// `--eviction-max-pod-grace-period` (0: the pod's own grace period).
    pub max_pod_grace_period: i64,
}

impl Default for EvictionConfig {
    fn default() -> Self {
        let hard = parse_threshold_flag(DEFAULT_EVICTION_HARD).unwrap_or_default();
        let empty = BTreeMap::new();
        Self {
            thresholds: parse_thresholds(&hard, &empty, &empty, &empty).unwrap_or_default(),
            pressure_transition_period: Duration::from_secs(300),
            max_pod_grace_period: 0,
        }
    }
}

/// What a signal measured: available and capacity in the signal's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    pub available: u64,
    pub capacity: u64,
}

/// All signals measured in one round.
pub type Observations = HashMap<Signal, Observation>;

/// Upstream `thresholdsMet`: the thresholds whose signal is below their value (plus the minimum
/// reclaim when `enforce_min_reclaim`, i.e. a threshold stays met until that much is freed).
pub fn thresholds_met(
    thresholds: &[Threshold],
    obs: &Observations,
    enforce_min_reclaim: bool,
) -> Vec<Threshold> {
    thresholds
        .iter()
        .filter(|t| {
            let Some(o) = obs.get(&t.signal) else {
                return false;
            };
            let mut q = t.value.amount(o.capacity);
            if enforce_min_reclaim && let Some(r) = t.min_reclaim {
                q = q.saturating_add(r.amount(o.capacity));
            }
            o.available < q
        })
        .cloned()
        .collect()
}

/// The parts of upstream `managerImpl.synchronize` that decide, with no I/O: which thresholds
/// are met and past their grace period, and which node conditions hold.
#[derive(Debug, Default)]
pub struct Decider {
    thresholds_met: Vec<Threshold>,
    first_observed: HashMap<(Signal, bool), Instant>,
    conditions_last_observed: HashMap<NodeCondition, Instant>,
}

impl Decider {
    /// One round at `now`: returns the node conditions to report and the thresholds to act on,
    /// the most urgent first.
    pub fn step(
        &mut self,
        config: &EvictionConfig,
        obs: &Observations,
        now: Instant,
    ) -> (HashSet<NodeCondition>, Vec<Threshold>) {
        let mut met = thresholds_met(&config.thresholds, obs, false);
        if !self.thresholds_met.is_empty() {
            for t in thresholds_met(&self.thresholds_met, obs, true) {
                if !met.contains(&t) {
                    met.push(t);
                }
            }
        }
        let first: HashMap<(Signal, bool), Instant> = met
            .iter()
            .map(|t| {
                let k = t.key();
                (k, self.first_observed.get(&k).copied().unwrap_or(now))
            })
            .collect();
        for t in &met {
            self.conditions_last_observed
                .insert(t.signal.condition(), now);
        }
        self.conditions_last_observed.retain(|_, at| {
            now.saturating_duration_since(*at) < config.pressure_transition_period || *at == now
        });
        let conditions = self.conditions_last_observed.keys().copied().collect();
        let mut act: Vec<Threshold> = met
            .iter()
            .filter(|t| {
                first
                    .get(&t.key())
                    .is_some_and(|at| now.saturating_duration_since(*at) >= t.grace_period)
            })
            .cloned()
            .collect();
        act.sort_by_key(|t| (t.signal.priority(), !t.is_hard()));
        self.first_observed = first;
        self.thresholds_met = met;
        (conditions, act)
    }
}

/// What one pod uses, for ranking.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodUsage {
    pub memory_working_set: u64,
    /// Writable layers of its containers.
    pub rootfs: u64,
    /// Its log directory.
    pub logs: u64,
    /// Its local volumes (emptyDir on disk) under the pod directory.
    pub volumes: u64,
    /// Files in logs and volumes.
    pub inodes: u64,
}

/// Is `pod` critical (upstream `IsCriticalPod`): a static or mirror pod, or priority of
/// system-critical and above. Critical pods are never evicted nor rejected.
pub fn is_critical(pod: &Pod) -> bool {
    let source = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_SOURCE_ANNOTATION));
    let is_static = source.is_some_and(|s| s != API_SOURCE);
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(crate::types::CONFIG_MIRROR_ANNOTATION));
    let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    is_static || mirror || priority >= SYSTEM_CRITICAL_PRIORITY
}

fn request_sum(pod: &Pod, resource: &str) -> u64 {
    pod.spec
        .as_ref()
        .map(|s| {
            s.containers
                .iter()
                .filter_map(|c| {
                    let q = c.resources.as_ref()?.requests.as_ref()?.get(resource)?;
                    parse_quantity_scaled(&q.0, 1.0)
                })
                .map(|v| u64::try_from(v).unwrap_or(0))
                .sum()
        })
        .unwrap_or(0)
}

fn qos_rank(pod: &Pod) -> u8 {
    match get_pod_qos(pod) {
        "BestEffort" => 0,
        "Burstable" => 1,
        _ => 2,
    }
}

/// The usage of `u` that counts against `signal`.
pub fn usage_for(signal: Signal, u: &PodUsage, dedicated_imagefs: bool) -> u64 {
    match signal {
        Signal::MemoryAvailable => u.memory_working_set,
        Signal::NodeFsAvailable if dedicated_imagefs => u.logs + u.volumes,
        Signal::ImageFsAvailable if dedicated_imagefs => u.rootfs,
        Signal::NodeFsAvailable | Signal::ImageFsAvailable => u.rootfs + u.logs + u.volumes,
        Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => u.inodes,
        Signal::PidAvailable => 0,
    }
}

/// Upstream `rankMemoryPressure` / `rankDiskPressureFunc` / `rankPIDPressure`: pods using more
/// than they requested first, then by priority (lowest first), then by QoS class (BestEffort,
/// Burstable, Guaranteed), then by usage above the request (largest first). Critical pods are
/// left out: they are never evicted.
pub fn rank<'a>(
    signal: Signal,
    pods: &'a [Pod],
    usage: &HashMap<String, PodUsage>,
    dedicated_imagefs: bool,
) -> Vec<&'a Pod> {
    let request_resource = match signal {
        Signal::MemoryAvailable => Some("memory"),
        Signal::NodeFsAvailable | Signal::ImageFsAvailable => Some("ephemeral-storage"),
        _ => None,
    };
    let mut ranked: Vec<(bool, i32, u8, i128, &Pod)> = pods
        .iter()
        .filter(|p| !is_critical(p))
        .map(|p| {
            let uid = p.metadata.uid.as_deref().unwrap_or_default();
            let used = usage
                .get(uid)
                .map(|u| usage_for(signal, u, dedicated_imagefs))
                .unwrap_or(0);
            let request = request_resource.map(|r| request_sum(p, r)).unwrap_or(0);
            let exceeds = request_resource.is_some() && used > request;
            let priority = p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
            (
                exceeds,
                priority,
                qos_rank(p),
                i128::from(used) - i128::from(request),
                p,
            )
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(a.1.cmp(&b.1))
            .then(a.2.cmp(&b.2))
            .then(b.3.cmp(&a.3))
    });
    ranked.into_iter().map(|r| r.4).collect()
}

/// Upstream `evictionMessage`: why the pod was evicted, naming what its containers used.
pub fn eviction_message(
    t: &Threshold,
    obs: Option<&Observation>,
    pod: &Pod,
    usage: Option<&PodUsage>,
    dedicated_imagefs: bool,
) -> String {
    let resource = t.signal.resource();
    let available = obs
        .map(|o| render_amount(t.signal, o.available))
        .unwrap_or_default();
    let mut msg = format!(
        "The node was low on resource: {resource}. Threshold quantity: {}, available: {available}. ",
        t.value.render(t.signal)
    );
    if let Some(u) = usage
        && t.signal != Signal::PidAvailable
    {
        let used = usage_for(t.signal, u, dedicated_imagefs);
        let request = match t.signal {
            Signal::MemoryAvailable => request_sum(pod, "memory"),
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => {
                request_sum(pod, "ephemeral-storage")
            }
            _ => 0,
        };
        msg.push_str(&format!(
            "Pod {} was using {}, request is {}, has larger consumption of {resource}. ",
            pod.metadata.name.as_deref().unwrap_or_default(),
            render_amount(t.signal, used),
            render_amount(t.signal, request),
        ));
    }
    msg
}

/// Upstream eviction `Admit`: under memory pressure only BestEffort pods are rejected; under
/// any other pressure every pod is; critical pods always get in.
pub fn admit(conditions: &HashSet<NodeCondition>, pod: &Pod) -> Result<(), String> {
    if conditions.is_empty() || is_critical(pod) {
        return Ok(());
    }
    let only_memory = conditions.len() == 1 && conditions.contains(&NodeCondition::MemoryPressure);
    if only_memory && get_pod_qos(pod) != "BestEffort" {
        return Ok(());
    }
    let mut names: Vec<&str> = conditions.iter().map(|c| c.name()).collect();
    names.sort_unstable();
    Err(format!("The node had condition: [{}]. ", names.join(", ")))
}

/// What the rest of the kubelet reads of the eviction manager.
#[derive(Debug, Default)]
pub struct EvictionState {
    conditions: RwLock<HashSet<NodeCondition>>,
}

impl EvictionState {
    /// The node conditions now in force.
    pub fn conditions(&self) -> HashSet<NodeCondition> {
        self.conditions
            .read()
            .map(|c| c.clone())
            .unwrap_or_default()
    }

    pub fn has(&self, c: NodeCondition) -> bool {
        self.conditions.read().is_ok_and(|s| s.contains(&c))
    }

    fn set(&self, c: HashSet<NodeCondition>) {
        if let Ok(mut s) = self.conditions.write() {
            *s = c;
        }
    }

    /// Should `pod` be admitted? `Err` carries the rejection message (reason `Evicted`).
    pub fn admit(&self, pod: &Pod) -> Result<(), String> {
        admit(&self.conditions(), pod)
    }
}

/// A pod the eviction manager wants gone.
#[derive(Debug, Clone)]
pub struct EvictRequest {
    pub pod: Pod,
    pub message: String,
    pub grace_seconds: i64,
}

// ---- measuring ----

/// `MemTotal` and `MemAvailable` of `/proc/meminfo`, in bytes.
pub fn parse_meminfo(text: &str) -> Option<Observation> {
    Some(Observation {
        available: meminfo_field(text, "MemAvailable")?,
        capacity: meminfo_field(text, "MemTotal")?,
    })
}

/// (bytes, inodes) observations of the filesystem holding `path`.
fn statvfs(path: &Path) -> Option<(Observation, Observation)> {
    let s = fs_stats(path)?;
    Some((
        Observation {
            available: s.available,
            capacity: s.capacity,
        },
        Observation {
            available: s.inodes_free,
            capacity: s.inodes,
        },
    ))
}

/// Signals of the node: memory from `/proc/meminfo`, nodefs from the kubelet's root
/// directory, imagefs from the runtime's image filesystem mountpoint (the nodefs when
/// unknown), PIDs from `pid_max` and the task count of `/proc/loadavg`.
pub fn observe(root_dir: &Path, imagefs: Option<&Path>) -> Observations {
    let mut obs = Observations::new();
    if let Some(m) = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .as_deref()
        .and_then(parse_meminfo)
    {
        obs.insert(Signal::MemoryAvailable, m);
    }
    if let Some((bytes, inodes)) = statvfs(root_dir) {
        obs.insert(Signal::NodeFsAvailable, bytes);
        obs.insert(Signal::NodeFsInodesFree, inodes);
    }
    if let Some((bytes, inodes)) = imagefs.and_then(statvfs).or_else(|| statvfs(root_dir)) {
        obs.insert(Signal::ImageFsAvailable, bytes);
        obs.insert(Signal::ImageFsInodesFree, inodes);
    }
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    let tasks = std::fs::read_to_string("/proc/loadavg").ok().and_then(|s| {
        s.split_whitespace()
            .nth(3)?
            .split_once('/')?
            .1
            .parse::<u64>()
            .ok()
    });
    if let (Some(max), Some(n)) = (pid_max, tasks) {
        obs.insert(
            Signal::PidAvailable,
            Observation {
                available: max.saturating_sub(n),
                capacity: max,
            },
        );
    }
    obs
}

/// Frees disk by removing unused images (upstream eviction's `ImageGC` interface).
#[async_trait::async_trait]
pub trait ImageGc: Send + Sync {
    /// Removes every unused image; the bytes freed.
    async fn delete_unused_images(&self) -> Result<u64, String>;
}

/// Frees disk by removing dead containers (upstream eviction's `ContainerGC` interface).
#[async_trait::async_trait]
pub trait ContainerGc: Send + Sync {
    /// Removes the dead containers and sandboxes of pods other than `active` (UIDs).
    async fn delete_all_unused_containers(&self, active: &HashSet<String>) -> Result<(), String>;
}

/// The eviction manager task (upstream `managerImpl`).
pub struct EvictionManager {
    config: EvictionConfig,
    runtime: Arc<dyn RuntimeService>,
    images: Arc<dyn ImageManagerService>,
    root_dir: PathBuf,
    state: Arc<EvictionState>,
    /// The pods the kubelet runs (the pod manager), and those already evicted.
    pods: Arc<dyn Fn() -> Vec<Pod> + Send + Sync>,
    image_gc: Arc<dyn ImageGc>,
    container_gc: Arc<dyn ContainerGc>,
    evict: mpsc::UnboundedSender<EvictRequest>,
    decider: Decider,
}

impl std::fmt::Debug for EvictionManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvictionManager")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What the eviction manager needs from the kubelet.
pub struct ManagerParts {
    pub config: EvictionConfig,
    /// The runtime, for container stats (upstream's summary provider).
    pub runtime: Arc<dyn RuntimeService>,
    /// The image service, for the image filesystem.
    pub images: Arc<dyn ImageManagerService>,
    pub root_dir: PathBuf,
    pub state: Arc<EvictionState>,
    /// Active (not yet evicted, not terminating) pods.
    pub pods: Arc<dyn Fn() -> Vec<Pod> + Send + Sync>,
    /// Unused images.
    pub image_gc: Arc<dyn ImageGc>,
    /// Dead containers.
    pub container_gc: Arc<dyn ContainerGc>,
    /// Where evictions go (upstream `KillPodFunc`).
    pub evict: mpsc::UnboundedSender<EvictRequest>,
}

impl EvictionManager {
    pub fn new(p: ManagerParts) -> Self {
        Self {
            config: p.config,
            runtime: p.runtime,
            images: p.images,
            root_dir: p.root_dir,
            state: p.state,
            pods: p.pods,
            image_gc: p.image_gc,
            container_gc: p.container_gc,
            evict: p.evict,
            decider: Decider::default(),
        }
    }

    /// Runs a round every [`MONITORING_PERIOD`] until `cancel`.
    pub async fn run(mut self, cancel: CancellationToken) {
        if self.config.thresholds.is_empty() {
            tracing::info!("eviction manager: no thresholds, nothing to watch");
            return;
        }
        let mut tick = tokio::time::interval(MONITORING_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            self.synchronize().await;
        }
    }

    async fn imagefs_path(&self) -> Option<PathBuf> {
        let fs = self.images.image_fs_info().await.ok()?.into_iter().next()?;
        fs.fs_id
            .map(|f| PathBuf::from(f.mountpoint))
            .filter(|p| p.exists())
    }

    /// One round (upstream `synchronize`).
    async fn synchronize(&mut self) {
        let imagefs = self.imagefs_path().await;
        let dedicated_imagefs = imagefs
            .as_deref()
            .is_some_and(|p| device_of(p).is_some() && device_of(p) != device_of(&self.root_dir));
        let obs = observe(&self.root_dir, imagefs.as_deref());
        let (conditions, act) = self.decider.step(&self.config, &obs, Instant::now());
        if conditions != self.state.conditions() {
            tracing::info!(conditions = ?conditions, "eviction manager: node conditions changed");
        }
        self.state.set(conditions);
        let Some(t) = act.first().cloned() else {
            return;
        };
        let o = obs.get(&t.signal).copied();
        tracing::warn!(signal = t.signal.name(), available = ?o.map(|o| o.available), "eviction manager: attempting to reclaim");
        if self.reclaim_node_level(t.signal, dedicated_imagefs).await {
            let obs = observe(&self.root_dir, imagefs.as_deref());
            if thresholds_met(std::slice::from_ref(&t), &obs, true).is_empty() {
                tracing::info!(
                    signal = t.signal.name(),
                    "eviction manager: node-level reclaim was enough"
                );
                return;
            }
        }
        let pods = (self.pods)();
        let usage = self.pod_usage(&pods).await;
        let ranked = rank(t.signal, &pods, &usage, dedicated_imagefs);
        let Some(victim) = ranked.first() else {
            tracing::error!(
                signal = t.signal.name(),
                "eviction manager: no pod to evict"
            );
            return;
        };
        let uid = victim.metadata.uid.clone().unwrap_or_default();
        let message = eviction_message(&t, o.as_ref(), victim, usage.get(&uid), dedicated_imagefs);
        let pod_grace = victim
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(crate::kuberuntime::manager::DEFAULT_GRACE_PERIOD_SECONDS);
        let grace = if t.is_hard() {
            IMMEDIATE_GRACE_SECONDS
        } else if self.config.max_pod_grace_period > 0 {
            pod_grace.min(self.config.max_pod_grace_period)
        } else {
            pod_grace
        };
        tracing::warn!(pod = %crate::container::pod_full_name(victim), pod_uid = %uid, signal = t.signal.name(), message = %message, "evicting pod");
        let _ = self.evict.send(EvictRequest {
            pod: (*victim).clone(),
            message,
            grace_seconds: grace,
        });
    }

    /// Upstream `reclaimNodeLevelResources`: dead containers for any disk signal, plus unused
    /// images when the images live on the starved filesystem. True when something ran.
    async fn reclaim_node_level(&self, signal: Signal, dedicated_imagefs: bool) -> bool {
        let images = match signal {
            Signal::ImageFsAvailable | Signal::ImageFsInodesFree => true,
            Signal::NodeFsAvailable | Signal::NodeFsInodesFree => !dedicated_imagefs,
            _ => return false,
        };
        let known: HashSet<String> = (self.pods)()
            .iter()
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        if let Err(e) = self.container_gc.delete_all_unused_containers(&known).await {
            tracing::warn!(error = %e, "eviction manager: container GC failed");
        }
        if images {
            match self.image_gc.delete_unused_images().await {
                Ok(freed) => tracing::info!(freed, "eviction manager: unused images removed"),
                Err(e) => tracing::warn!(error = %e, "eviction manager: image GC failed"),
            }
        }
        true
    }

    /// Usage per pod UID: memory and writable layers from the runtime's container stats, logs
    /// and local volumes from disk.
    async fn pod_usage(&self, pods: &[Pod]) -> HashMap<String, PodUsage> {
        let mut out: HashMap<String, PodUsage> = HashMap::new();
        match self.runtime.list_container_stats(None).await {
            Ok(stats) => {
                for s in stats {
                    let Some(uid) = s
                        .attributes
                        .as_ref()
                        .and_then(|a| a.labels.get(POD_UID_LABEL))
                    else {
                        continue;
                    };
                    let u = out.entry(uid.clone()).or_default();
                    u.memory_working_set += s
                        .memory
                        .as_ref()
                        .and_then(|m| m.working_set_bytes.as_ref())
                        .map_or(0, |v| v.value);
                    u.rootfs += s
                        .writable_layer
                        .as_ref()
                        .and_then(|w| w.used_bytes.as_ref())
                        .map_or(0, |v| v.value);
                }
            }
            Err(e) => tracing::warn!(error = %e, "eviction manager: cannot read container stats"),
        }
        for p in pods {
            let uid = p.metadata.uid.clone().unwrap_or_default();
            let logs = crate::kuberuntime::sandbox::pod_logs_directory(p);
            let volumes = self.root_dir.join("pods").join(&uid).join("volumes");
            let (lb, lf) = dir_usage(&logs);
            let (vb, vf) = dir_usage(&volumes);
            let u = out.entry(uid).or_default();
            u.logs = lb;
            u.volumes = vb;
            u.inodes = lf + vf;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn pod(uid: &str, requests: &[(&str, &str)], limits: &[(&str, &str)], priority: i32) -> Pod {
        let q = |m: &[(&str, &str)]| {
            (!m.is_empty()).then(|| {
                m.iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        let mut p = Pod::default();
        p.metadata.uid = Some(uid.into());
        p.metadata.name = Some(uid.into());
        p.metadata.annotations = Some(
            [(CONFIG_SOURCE_ANNOTATION.to_string(), API_SOURCE.to_string())]
                .into_iter()
                .collect(),
        );
        p.spec = Some(PodSpec {
            priority: Some(priority),
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: q(requests),
                    limits: q(limits),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    #[test]
    fn defaults_parse_to_upstreams_hard_thresholds() {
        let c = EvictionConfig::default();
        assert_eq!(c.thresholds.len(), 5);
        let mem = c
            .thresholds
            .iter()
            .find(|t| t.signal == Signal::MemoryAvailable)
            .unwrap();
        assert_eq!(mem.value, Value::Quantity(100 << 20));
        assert!(mem.is_hard());
        let nodefs = c
            .thresholds
            .iter()
            .find(|t| t.signal == Signal::NodeFsAvailable)
            .unwrap();
        assert_eq!(nodefs.value, Value::Percentage(0.1));
        assert_eq!(nodefs.value.amount(1000), 100);
    }

    #[test]
    fn soft_thresholds_need_grace_periods_and_bad_input_is_named() {
        let none = BTreeMap::new();
        let soft = map(&[("memory.available", "1Gi")]);
        let e = parse_thresholds(&none, &soft, &none, &none).unwrap_err();
        assert!(e.contains("no grace period"), "{e}");
        let grace = map(&[("nodefs.available", "1m")]);
        let e = parse_thresholds(&none, &soft, &grace, &none).unwrap_err();
        assert!(e.contains("without a soft threshold"), "{e}");
        let grace = map(&[("memory.available", "1m30s")]);
        let t = parse_thresholds(&none, &soft, &grace, &none).unwrap();
        assert_eq!(t[0].grace_period, Duration::from_secs(90));
        let e = parse_thresholds(&map(&[("cpu.available", "1")]), &none, &none, &none).unwrap_err();
        assert!(
            e.contains("unsupported eviction signal cpu.available"),
            "{e}"
        );
        let e = parse_thresholds(&map(&[("nodefs.available", "120%")]), &none, &none, &none)
            .unwrap_err();
        assert!(e.contains("<= 100%"), "{e}");
        assert_eq!(
            parse_threshold_flag("memory.available<100Mi, nodefs.available<10%").unwrap(),
            map(&[("memory.available", "100Mi"), ("nodefs.available", "10%")])
        );
        assert!(parse_threshold_flag("memory.available=1").is_err());
    }

    fn obs(signal: Signal, available: u64, capacity: u64) -> Observations {
        [(
            signal,
            Observation {
                available,
                capacity,
            },
        )]
        .into_iter()
        .collect()
    }

    #[test]
    fn hard_thresholds_act_at_once_and_conditions_linger_for_the_transition_period() {
        let config = EvictionConfig {
            thresholds: parse_thresholds(
                &map(&[("nodefs.available", "50%")]),
                &BTreeMap::new(),
                &BTreeMap::new(),
                &map(&[("nodefs.available", "10%")]),
            )
            .unwrap(),
            pressure_transition_period: Duration::from_secs(30),
            max_pod_grace_period: 0,
        };
        let mut d = Decider::default();
        let t0 = Instant::now();
        let (c, act) = d.step(&config, &obs(Signal::NodeFsAvailable, 60, 100), t0);
        assert!(c.is_empty() && act.is_empty());
        let (c, act) = d.step(
            &config,
            &obs(Signal::NodeFsAvailable, 40, 100),
            t0 + Duration::from_secs(10),
        );
        assert_eq!(c, HashSet::from([NodeCondition::DiskPressure]));
        assert_eq!(act.len(), 1);
        // Above the threshold but not by the minimum reclaim: still met.
        let (_, act) = d.step(
            &config,
            &obs(Signal::NodeFsAvailable, 55, 100),
            t0 + Duration::from_secs(20),
        );
        assert_eq!(act.len(), 1, "minimum reclaim not reached yet");
        let (c, act) = d.step(
            &config,
            &obs(Signal::NodeFsAvailable, 70, 100),
            t0 + Duration::from_secs(30),
        );
        assert!(act.is_empty());
        assert_eq!(
            c,
            HashSet::from([NodeCondition::DiskPressure]),
            "held for the transition period"
        );
        let (c, _) = d.step(
            &config,
            &obs(Signal::NodeFsAvailable, 70, 100),
            t0 + Duration::from_secs(51),
        );
        assert!(c.is_empty(), "released after the transition period");
    }

    #[test]
    fn soft_thresholds_wait_for_their_grace_period() {
        let config = EvictionConfig {
            thresholds: parse_thresholds(
                &BTreeMap::new(),
                &map(&[("memory.available", "1Gi")]),
                &map(&[("memory.available", "30s")]),
                &BTreeMap::new(),
            )
            .unwrap(),
            pressure_transition_period: Duration::from_secs(0),
            max_pod_grace_period: 0,
        };
        let mut d = Decider::default();
        let t0 = Instant::now();
        let low = obs(Signal::MemoryAvailable, 512 << 20, 8 << 30);
        let (c, act) = d.step(&config, &low, t0);
        assert_eq!(c, HashSet::from([NodeCondition::MemoryPressure]));
        assert!(act.is_empty(), "grace period not over");
        let (_, act) = d.step(&config, &low, t0 + Duration::from_secs(29));
        assert!(act.is_empty());
        let (_, act) = d.step(&config, &low, t0 + Duration::from_secs(30));
        assert_eq!(act.len(), 1);
        assert!(!act[0].is_hard());
    }

    #[test]
    fn ranking_follows_usage_over_request_priority_and_qos() {
        let best_effort = pod("be", &[], &[], 0);
        let burstable = pod("bu", &[("memory", "100Mi")], &[], 0);
        let guaranteed = pod(
            "gu",
            &[("memory", "100Mi"), ("cpu", "100m")],
            &[("memory", "100Mi"), ("cpu", "100m")],
            0,
        );
        let pods = vec![guaranteed.clone(), burstable.clone(), best_effort.clone()];
        let usage: HashMap<String, PodUsage> =
            [("be", 10u64 << 20), ("bu", 50 << 20), ("gu", 90 << 20)]
                .into_iter()
                .map(|(u, m)| {
                    (
                        u.to_string(),
                        PodUsage {
                            memory_working_set: m,
                            ..Default::default()
                        },
                    )
                })
                .collect();
        let order: Vec<&str> = rank(Signal::MemoryAvailable, &pods, &usage, false)
            .iter()
            .map(|p| p.metadata.uid.as_deref().unwrap())
            .collect();
        assert_eq!(order, ["be", "bu", "gu"]);
        // Using more than requested goes first: a Burstable pod far above its request
        // before a BestEffort pod using nothing.
        let mut over = usage.clone();
        over.get_mut("bu").unwrap().memory_working_set = 500 << 20;
        over.get_mut("be").unwrap().memory_working_set = 0;
        let order: Vec<&str> = rank(Signal::MemoryAvailable, &pods, &over, false)
            .iter()
            .map(|p| p.metadata.uid.as_deref().unwrap())
            .collect();
        assert_eq!(order, ["bu", "be", "gu"]);
        // Lower priority goes first.
        let low = pod(
            "low",
            &[("memory", "100Mi")],
            &[("memory", "100Mi"), ("cpu", "1")],
            -10,
        );
        let pods2 = vec![burstable.clone(), low];
        let order: Vec<&str> = rank(Signal::MemoryAvailable, &pods2, &HashMap::new(), false)
            .iter()
            .map(|p| p.metadata.uid.as_deref().unwrap())
            .collect();
        assert_eq!(order, ["low", "bu"]);
    }

    #[test]
    fn critical_pods_are_neither_ranked_nor_rejected() {
        let mut static_pod = pod("static", &[], &[], 0);
        static_pod
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(CONFIG_SOURCE_ANNOTATION.into(), "file".into());
        let system = pod("sys", &[], &[], SYSTEM_CRITICAL_PRIORITY);
        let normal = pod("n", &[], &[], 0);
        let pods = vec![static_pod.clone(), system.clone(), normal];
        let ranked = rank(Signal::NodeFsAvailable, &pods, &HashMap::new(), true);
        assert_eq!(ranked.len(), 1);
        let disk = HashSet::from([NodeCondition::DiskPressure]);
        assert!(admit(&disk, &static_pod).is_ok());
        assert!(admit(&disk, &system).is_ok());
        assert_eq!(
            admit(&disk, &pod("x", &[("memory", "1Mi")], &[], 0)).unwrap_err(),
            "The node had condition: [DiskPressure]. "
        );
        let mem = HashSet::from([NodeCondition::MemoryPressure]);
        assert!(admit(&mem, &pod("bu", &[("memory", "1Mi")], &[], 0)).is_ok());
        assert!(admit(&mem, &pod("be", &[], &[], 0)).is_err());
    }

    #[test]
    fn disk_usage_counts_what_lives_on_the_starved_filesystem() {
        let u = PodUsage {
            memory_working_set: 1,
            rootfs: 10,
            logs: 100,
            volumes: 1000,
            inodes: 7,
        };
        assert_eq!(usage_for(Signal::NodeFsAvailable, &u, true), 1100);
        assert_eq!(usage_for(Signal::ImageFsAvailable, &u, true), 10);
        assert_eq!(usage_for(Signal::NodeFsAvailable, &u, false), 1110);
        assert_eq!(usage_for(Signal::NodeFsInodesFree, &u, false), 7);
    }

    #[test]
    fn messages_name_threshold_availability_and_usage() {
        let t = Threshold {
            signal: Signal::MemoryAvailable,
            value: Value::Quantity(100 << 20),
            grace_period: Duration::ZERO,
            min_reclaim: None,
        };
        let p = pod("web", &[], &[], 0);
        let m = eviction_message(
            &t,
            Some(&Observation {
                available: 50 << 20,
                capacity: 1 << 30,
            }),
            &p,
            Some(&PodUsage {
                memory_working_set: 20 << 20,
                ..Default::default()
            }),
            false,
        );
        assert_eq!(
            m,
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Pod web was using 20Mi, request is 0, has larger consumption of memory. "
        );
    }

    #[test]
    fn meminfo_parses() {
        let o =
            parse_meminfo("MemTotal:       16384 kB\nMemFree: 1 kB\nMemAvailable:    8192 kB\n")
                .unwrap();
        assert_eq!(o.capacity, 16384 * 1024);
        assert_eq!(o.available, 8192 * 1024);
    }

    #[test]
    fn dir_usage_counts_files() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), vec![1u8; 10000]).unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/b"), b"x").unwrap();
        let (bytes, files) = dir_usage(d.path());
        assert_eq!(files, 3);
        assert!(bytes >= 10000, "{bytes}");
    }
}
