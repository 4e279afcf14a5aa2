//! The eviction manager task (upstream `pkg/kubelet/eviction/eviction_manager.go`
//! `managerImpl`, with the `ImageGC` / `ContainerGC` interfaces of `types.go`): every
//! monitoring period it measures, decides, reclaims node-level resources and, when that is not
//! enough, asks the sync loop to evict the first ranked pod.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::admission::EvictionState;
use super::api::{Observations, Signal};
use super::measure::observe;
use super::rank::{PodUsage, eviction_message, rank};
use super::thresholds::{Decider, EvictionConfig, thresholds_met};
use crate::cri::{ImageManagerService, RuntimeService};
use crate::fsstats::{device_of, dir_usage};
use crate::types::POD_UID_LABEL;

/// Upstream `evictionMonitoringPeriod`.
pub const MONITORING_PERIOD: Duration = Duration::from_secs(10);
/// The pod status reason of an evicted pod.
pub const REASON: &str = "Evicted";
/// Upstream `immediateEvictionGracePeriodSeconds` (hard thresholds).
pub const IMMEDIATE_GRACE_SECONDS: i64 = 1;

/// A pod the eviction manager wants gone.
#[derive(Debug, Clone)]
pub struct EvictRequest {
    pub pod: Pod,
    pub message: String,
    pub grace_seconds: i64,
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
    /// How the node's signals are measured (`/proc`, statvfs; a stand-in in unit tests).
    observe: Observer,
    /// `kubelet_evictions`, `kubelet_eviction_stats_age_seconds`.
    metrics: crate::metrics::EvictionMetrics,
}

/// Measures the node's signals from the kubelet's root directory and the image filesystem.
pub type Observer =
    Arc<dyn Fn(&std::path::Path, Option<&std::path::Path>) -> Observations + Send + Sync>;

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
            observe: Arc::new(observe),
            metrics: Default::default(),
        }
    }

    /// Count evictions in `metrics`.
    pub fn with_metrics(mut self, metrics: crate::metrics::EvictionMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Measure the signals with `observe` instead of the machine (unit tests).
    pub fn with_observer(mut self, observe: Observer) -> Self {
        self.observe = observe;
        self
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
        let obs = (self.observe)(&self.root_dir, imagefs.as_deref());
        let observed_at = Instant::now();
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
            let obs = (self.observe)(&self.root_dir, imagefs.as_deref());
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
        if self
            .evict
            .send(EvictRequest {
                pod: (*victim).clone(),
                message,
                grace_seconds: grace,
            })
            .is_ok()
        {
            // Upstream `evictPod`'s success: by signal, with the age of the stats it acted on.
            self.metrics.evicted(t.signal.name(), observed_at.elapsed());
        }
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
    //! The manager's rounds on the fake runtime with stand-in signals: memory pressure evicts
    //! the BestEffort pod at once and spares critical and Guaranteed ones; disk pressure first
    //! reclaims at node level and evicts nobody when that was enough.

    use super::*;
    use crate::cri::fake::FakeRuntime;
    use crate::eviction::{NodeCondition, Observation, parse_thresholds};
    use parking_lot::Mutex;
    use std::collections::BTreeMap;

    #[derive(Default)]
    struct Gc {
        calls: Mutex<Vec<&'static str>>,
    }

    #[async_trait::async_trait]
    impl ImageGc for Gc {
        async fn delete_unused_images(&self) -> Result<u64, String> {
            self.calls.lock().push("images");
            Ok(0)
        }
    }

    #[async_trait::async_trait]
    impl ContainerGc for Gc {
        async fn delete_all_unused_containers(&self, _: &HashSet<String>) -> Result<(), String> {
            self.calls.lock().push("containers");
            Ok(())
        }
    }

    fn pod(uid: &str, qos: &str, static_pod: bool) -> Pod {
        let resources = match qos {
            "Guaranteed" => serde_json::json!({"limits": {"cpu": "1", "memory": "1Gi"}}),
            _ => serde_json::json!({}),
        };
        let mut annotations = serde_json::Map::new();
        if static_pod {
            annotations.insert(
                crate::types::CONFIG_SOURCE_ANNOTATION.into(),
                crate::types::FILE_SOURCE.into(),
            );
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid,
                "annotations": annotations},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]}
        }))
        .expect("pod")
    }

    struct Bed {
        manager: EvictionManager,
        evictions: mpsc::UnboundedReceiver<EvictRequest>,
        state: Arc<EvictionState>,
        gc: Arc<Gc>,
        available: Arc<Mutex<Vec<u64>>>,
        _dir: tempfile::TempDir,
    }

    /// A manager with `signal<threshold` hard, whose signal reads the next of `available`
    /// (bytes of 1 GiB capacity) on each observation.
    fn bed(signal: &str, threshold: &str, available: Vec<u64>) -> Bed {
        let dir = tempfile::tempdir().expect("tempdir");
        let fake = Arc::new(FakeRuntime::new());
        let hard = BTreeMap::from([(signal.to_string(), threshold.to_string())]);
        let empty = BTreeMap::new();
        let config = EvictionConfig {
            thresholds: parse_thresholds(&hard, &empty, &empty, &empty).expect("thresholds"),
            ..Default::default()
        };
        let (tx, evictions) = mpsc::unbounded_channel();
        let state = Arc::new(EvictionState::default());
        let gc = Arc::new(Gc::default());
        let pods = vec![
            pod("static", "BestEffort", true),
            pod("guaranteed", "Guaranteed", false),
            pod("besteffort", "BestEffort", false),
        ];
        let available = Arc::new(Mutex::new(available));
        let sig = Signal::parse(signal).expect("signal");
        let readings = Arc::clone(&available);
        let manager = EvictionManager::new(ManagerParts {
            config,
            runtime: fake.clone(),
            images: fake,
            root_dir: dir.path().to_path_buf(),
            state: Arc::clone(&state),
            pods: Arc::new(move || pods.clone()),
            image_gc: gc.clone(),
            container_gc: gc.clone(),
            evict: tx,
        })
        .with_observer(Arc::new(move |_, _| {
            let mut r = readings.lock();
            let v = if r.len() > 1 { r.remove(0) } else { r[0] };
            Observations::from([(
                sig,
                Observation {
                    available: v,
                    capacity: 1 << 30,
                },
            )])
        }));
        Bed {
            manager,
            evictions,
            state,
            gc,
            available,
            _dir: dir,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn memory_pressure_evicts_the_best_effort_pod_at_once() {
        let mut b = bed("memory.available", "100Mi", vec![50 << 20]);
        let metrics = crate::metrics::Metrics::new("n");
        b.manager = b.manager.with_metrics(metrics.eviction.clone());
        b.manager.synchronize().await;
        // Upstream's series name, without `_total`, by signal.
        let text = metrics.render();
        assert!(
            text.contains("kubelet_evictions{eviction_signal=\"memory.available\"} 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "kubelet_eviction_stats_age_seconds_count{eviction_signal=\"memory.available\"} 1"
            ),
            "{text}"
        );
        assert!(
            b.state
                .conditions()
                .contains(&NodeCondition::MemoryPressure)
        );
        let e = b.evictions.try_recv().expect("an eviction");
        assert_eq!(e.pod.metadata.uid.as_deref(), Some("besteffort"));
        assert_eq!(e.grace_seconds, IMMEDIATE_GRACE_SECONDS);
        assert!(e.message.contains("memory"), "{}", e.message);
        assert!(b.evictions.try_recv().is_err(), "one eviction per round");
        assert!(
            b.gc.calls.lock().is_empty(),
            "no node-level reclaim for memory"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn disk_pressure_reclaims_first_and_evicts_nobody_when_that_was_enough() {
        // Starved before the reclaim, fine after it.
        let mut b = bed("nodefs.available", "10%", vec![50 << 20, 900 << 20]);
        b.manager.synchronize().await;
        assert_eq!(*b.gc.calls.lock(), vec!["containers", "images"]);
        assert!(b.evictions.try_recv().is_err(), "reclaim was enough");
        // Still starved after the reclaim: a pod goes.
        *b.available.lock() = vec![50 << 20];
        b.manager.synchronize().await;
        let e = b.evictions.try_recv().expect("an eviction");
        assert_ne!(
            e.pod.metadata.uid.as_deref(),
            Some("static"),
            "critical pods stay"
        );
    }
}
