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
use super::api::Signal;
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
