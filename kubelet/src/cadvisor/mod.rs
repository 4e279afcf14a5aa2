//! The kubelet's own cAdvisor (upstream embeds google/cadvisor: `pkg/kubelet/cadvisor` and the
//! `/metrics/cadvisor` collector registered in `pkg/kubelet/server`): which containers exist
//! ([`inventory`]: the node, the kubepods slices, this kubelet's pods and their runtime
//! containers and sandboxes), what their cgroups say ([`cgroup`], v1 and v2; [`network`] for
//! the sandboxes' namespaces and the host), a housekeeping task that samples them on its own
//! ([`sampler`], 10 s like cAdvisor, first rates a second after start) so that
//! `/stats/summary` and `/metrics/resource` have CPU rates from their first read, and the
//! Prometheus collector of `/metrics/cadvisor` ([`collector`]).
//!
//! Managers layer: reads the host (cgroupfs, procfs) and the runtime's listing; imports
//! [`crate::host`] only in [`KubeletInventory`].

pub mod cgroup;
pub mod collector;
pub mod inventory;
pub mod network;
pub mod sampler;

use std::path::Path;
use std::sync::{Arc, Weak};

pub use sampler::{CadvisorState, Housekeeping, InventorySource};

use crate::host::KubeletShared;
use inventory::{PodCgroup, Sources};

/// Where the cgroup filesystem is mounted.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The inventory of a running kubelet: its pods (the test bed shares one runtime between
/// kubelets, so only the pods this one was given), their cgroups as the container manager
/// names them, and the runtime's sandboxes and containers.
pub struct KubeletInventory {
    shared: Weak<KubeletShared>,
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
impl InventorySource for KubeletInventory {
    async fn inventory(&self) -> Vec<inventory::Entry> {
        let Some(shared) = self.shared.upgrade() else {
            return Vec::new();
        };
        let runtime = &shared.runtime;
        let pods: Vec<PodCgroup> = shared
            .pods
            .read()
            .values()
            .filter_map(|p| {
                let parent = runtime.container_manager().pod_cgroup_parent(p)?;
                Some(PodCgroup {
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
            inventory::build(
                Path::new(CGROUP_ROOT),
                &Sources {
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

/// `/metrics/cadvisor`'s page: every inventoried container read now, and the machine.
pub async fn metrics_page(state: Arc<CadvisorState>) -> String {
    let page = tokio::task::spawn_blocking(move || {
        let scraped = collector::scrape(state.root(), &state.inventory());
        let now = chrono::Utc::now().timestamp_millis() as f64 / 1000.0;
        collector::render(collector::CadvisorCollector {
            scraped,
            machine: collector::Machine::read(),
            now,
        })
    });
    page.await.unwrap_or_default()
}
