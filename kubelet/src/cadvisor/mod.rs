//! The kubelet's own cAdvisor (upstream embeds google/cadvisor: `pkg/kubelet/cadvisor` and the
//! `/metrics/cadvisor` collector registered in `pkg/kubelet/server`): which containers exist
//! ([`inventory`]: the node, the kubepods slices, this kubelet's pods and their runtime
//! containers and sandboxes), what their cgroups say ([`cgroup`], v1 and v2; [`network`] for
//! the sandboxes' namespaces and the host), a housekeeping task that samples them on its own
//! ([`sampler`], 10 s like cAdvisor, first rates a second after start) so that
//! `/stats/summary` and `/metrics/resource` have CPU rates from their first read, and the
//! Prometheus collector of `/metrics/cadvisor` ([`collector`]).
//!
//! Managers layer: reads the host (cgroupfs, procfs); what to read comes from an
//! [`InventorySource`] (the running kubelet's is `host::KubeletInventory`).

pub mod cgroup;
pub mod collector;
pub mod inventory;
pub mod network;
pub mod sampler;

use std::sync::Arc;

pub use sampler::{CadvisorState, Housekeeping, InventorySource};

/// Where the cgroup filesystem is mounted.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

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
