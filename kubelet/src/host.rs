//! What the node's servers and the API mode read of the running kubelet (upstream `server`'s
//! `HostInterface`, which `Kubelet` implements): the pod manager's desired pods, their live
//! statuses, PLEG and sync-loop health, the runtime manager (logs, exec), eviction conditions,
//! mirror pods and the stats provider. The sync loop ([`crate::kubelet`]) owns and updates it;
//! the read-only and authenticated servers, healthz and the API mode hold an `Arc` of it, so
//! none of them imports the loop.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use parking_lot::RwLock;

use crate::kuberuntime::KubeGenericRuntimeManager;
use crate::metrics::Metrics;
use crate::pleg::PlegState;
use crate::status::StatusManager;

/// The sync loop counts as unhealthy when it has not iterated for this long.
pub const SYNC_LOOP_HEALTH_THRESHOLD: Duration = Duration::from_secs(30);

/// State the sync loop shares with the HTTP server.
#[derive(Debug)]
pub struct KubeletShared {
    /// The pod manager: desired pods by UID.
    pub pods: RwLock<HashMap<String, Pod>>,
    /// API statuses.
    pub status: StatusManager,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// PLEG health and snapshot.
    pub pleg: Arc<PlegState>,
    /// Last sync loop iteration.
    pub last_sync_loop: RwLock<Instant>,
    /// Node name.
    pub node_name: String,
    /// Gracefully deleted pods whose termination finished, by UID: API-server mode deletes
    /// their objects (upstream status manager `canBeDeleted`) and takes them from here.
    pub terminated: RwLock<HashMap<String, Pod>>,
    /// The runtime manager (container logs).
    pub runtime: KubeGenericRuntimeManager,
    /// Node conditions from the eviction manager, and pod admission.
    pub eviction: Arc<crate::eviction::EvictionState>,
    /// The mirror pods the API source sees (API-server mode).
    pub mirrors: crate::mirror::MirrorPods,
    /// The node's allocatable amounts per resource in base units (millicores, bytes, pods):
    /// capacity less kube-reserved, system-reserved and the hard eviction thresholds.
    pub allocatable: std::collections::BTreeMap<String, i64>,
    /// The node's labels (well-known ones and `--node-labels`) and taints (registered ones), as
    /// admission matches pods against them.
    pub node_labels: std::collections::BTreeMap<String, String>,
    pub node_taints: Vec<k8s_openapi::api::core::v1::Taint>,
    /// The node as the API server has it (API-server mode): its labels and taints, set by
    /// anyone, are what admission matches pods against once seen.
    pub node: crate::nodelister::NodeLister,
    /// What allocatable holds back from capacity, per resource in base units.
    pub reserved: std::collections::BTreeMap<String, i64>,
    /// Whether the node is shutting down (graceful node shutdown): Ready turns False and new
    /// pods are rejected.
    pub shutdown: Arc<crate::nodeshutdown::ShutdownState>,
    /// UIDs of pods evicted or rejected at admission: terminal, never started again; they keep
    /// their Failed status until their source removes them.
    pub evicted: RwLock<HashSet<String>>,
    /// The summary provider (`/stats/summary`, `/metrics/resource`) and its CPU samples.
    pub stats: crate::stats::StatsProvider,
    /// The housekeeping samples of the node's, pods' and containers' cgroups and the inventory
    /// `/metrics/cadvisor` reads.
    pub cadvisor: Arc<crate::cadvisor::CadvisorState>,
}

impl KubeletShared {
    /// The known pods with their live status, sorted by namespace/name.
    pub fn pods_with_status(&self) -> Vec<Pod> {
        let mut pods: Vec<Pod> = self.pods.read().values().cloned().collect();
        for p in &mut pods {
            if let Some(s) = p
                .metadata
                .uid
                .as_deref()
                .and_then(|u| self.status.get_pod_status(u))
            {
                p.status = Some(s);
            }
        }
        pods.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        pods
    }

    /// Upstream health checks `syncloop` and `pleg`.
    pub fn healthz(&self) -> Result<(), String> {
        let last = self.last_sync_loop.read().elapsed();
        if last > SYNC_LOOP_HEALTH_THRESHOLD {
            return Err(format!(
                "syncloop: sync loop took too long: last iteration {last:?} ago"
            ));
        }
        self.pleg.healthy().map_err(|e| format!("pleg: {e}"))
    }
}

/// The inventory of a running kubelet: its pods (the test bed shares one runtime between
/// kubelets, so only the pods this one was given), their cgroups as the container manager
/// names them, and the runtime's sandboxes and containers.
pub struct KubeletInventory {
    shared: std::sync::Weak<KubeletShared>,
    pause_image: String,
}

impl KubeletInventory {
    pub fn new(shared: &Arc<KubeletShared>, pause_image: impl Into<String>) -> Self {
        Self {
            shared: Arc::downgrade(shared),
            pause_image: pause_image.into(),
        }
    }
}

#[async_trait::async_trait]
impl crate::cadvisor::InventorySource for KubeletInventory {
    async fn inventory(&self) -> Vec<crate::cadvisor::inventory::Entry> {
        let Some(shared) = self.shared.upgrade() else {
            return Vec::new();
        };
        let runtime = &shared.runtime;
        let pods: Vec<crate::cadvisor::inventory::PodCgroup> = shared
            .pods
            .read()
            .values()
            .filter_map(|p| {
                let parent = runtime.container_manager().pod_cgroup_parent(p)?;
                Some(crate::cadvisor::inventory::PodCgroup {
                    uid: p.metadata.uid.clone()?,
                    name: p.metadata.name.clone().unwrap_or_default(),
                    namespace: p.metadata.namespace.clone().unwrap_or_default(),
                    dir: crate::stats::cgroup::cgroup_dir(&parent),
                    images: p
                        .spec
                        .iter()
                        .flat_map(|s| {
                            s.containers
                                .iter()
                                .chain(s.init_containers.iter().flatten())
                        })
                        .filter_map(|c| Some((c.name.clone(), c.image.clone()?)))
                        .collect(),
                })
            })
            .collect();
        let rt = runtime.runtime_service();
        let (sandboxes, containers) = match tokio::try_join!(
            rt.list_pod_sandbox(None),
            rt.list_containers(None)
        ) {
            Ok(v) => v,
            Err(e) => {
                tracing::debug!(error = %e, "housekeeping: listing the runtime's containers failed");
                Default::default()
            }
        };
        let runtime_name = runtime.runtime_name().to_string();
        let pause_image = self.pause_image.clone();
        let build = move || {
            crate::cadvisor::inventory::build(
                std::path::Path::new(crate::cadvisor::CGROUP_ROOT),
                &crate::cadvisor::inventory::Sources {
                    runtime_name: &runtime_name,
                    pause_image: &pause_image,
                    pods: &pods,
                    sandboxes: &sandboxes,
                    containers: &containers,
                },
            )
        };
        tokio::task::spawn_blocking(build).await.unwrap_or_default()
    }
}
