//! The dockershim service state: the one [`Shim`] value every RPC works on. It owns the Docker
//! client, the sandbox checkpoints, the CNI network (in CNI mode), the per-container log copiers,
//! the container-event fan-out and the writable-layer size cache. The RPCs themselves live in
//! `sandbox`, `container`, `image`, `runtime`, `stats` and `events`; `service` wires them to gRPC.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bollard::models::ContainerSummary;
use cri_proto::runtime::v1 as cri;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::cache::{ImageRefCache, ListCache};
use crate::cgroups::CgroupCache;
use crate::checkpoint::CheckpointStore;
use crate::config::ShimConfig;
use crate::docker::DockerApi;
use crate::errors::Result;
use crate::labels;
use crate::logs::LogManager;
use crate::network::CniNetwork;
use crate::stats::SizeCache;

/// The state shared by every RPC handler.
pub struct Shim<D: DockerApi> {
    pub docker: Arc<D>,
    pub config: ShimConfig,
    pub checkpoints: CheckpointStore,
    pub network: Option<CniNetwork>,
    pub logs: LogManager,
    pub events: broadcast::Sender<cri::ContainerEventResponse>,
    pub sizes: SizeCache,
    /// The last listing of our containers, valid until something changes.
    pub listing: ListCache,
    /// Repo digests by image id, for ContainerStatus.
    pub image_refs: ImageRefCache,
    /// Cgroup directories of the containers whose stats were asked for.
    pub cgroups: CgroupCache,
    /// The pod CIDR the kubelet last told us (UpdateRuntimeConfig).
    pub pod_cidr: Mutex<String>,
    /// oom_score_adj given to sandbox containers (upstream -998, or the host-limited fallback).
    pub sandbox_oom_score_adj: i64,
    /// The lowest oom_score_adj a container may get: `None` when this host can lower scores;
    /// `Some(0)` without CAP_SYS_RESOURCE, where a lower value would fail the container's start
    /// (the kubelet asks -997 for Guaranteed pods), like containerd's `restrict_oom_score_adj`.
    pub oom_score_adj_floor: Option<i64>,
    /// Containers Docker reported an `oom` event for. Docker's own OOMKilled flag misses an
    /// OOM event that arrives after the exit event; the event itself is not lost.
    pub oom_killed: Mutex<std::collections::HashSet<String>>,
    /// Ends the background tasks.
    pub shutdown: CancellationToken,
    /// Docker's cgroup driver, read once at start.
    pub cgroup_driver: String,
    /// Docker's daemon version, read once at start.
    pub docker_version: String,
    pub docker_api_version: String,
    /// Docker's data root (where writable layers live).
    pub docker_root: String,
    /// The streaming server (set once it listens; Exec/Attach/PortForward need it).
    pub streaming: std::sync::OnceLock<crate::streaming::Handle>,
}

impl<D: DockerApi> Shim<D> {
    /// Every container and sandbox of ours (any state), from the listing cache when nothing
    /// changed since it was taken, otherwise from Docker.
    pub async fn our_containers(&self) -> Result<Vec<ContainerSummary>> {
        if let Some(list) = self.listing.get() {
            return Ok(list);
        }
        let ticket = self.listing.ticket();
        let filters = HashMap::from([(
            "label".to_string(),
            vec![labels::CONTAINER_TYPE_LABEL_KEY.to_string()],
        )]);
        let list = self.docker.list_containers(filters).await?;
        self.listing.store(ticket, &list);
        Ok(list)
    }

    /// The CNI network, or why networking is not ready.
    pub fn network_name(&self) -> Option<String> {
        self.network.as_ref().and_then(|n| n.current_name())
    }
}

/// Nanoseconds since the epoch of a Docker timestamp; Docker's zero time (`0001-01-01...`) and
/// unparsable values give 0.
pub fn docker_time_ns(ts: Option<&str>) -> i64 {
    let Some(ts) = ts else { return 0 };
    if ts.starts_with("0001-") {
        return 0;
    }
    chrono::DateTime::parse_from_rfc3339(ts)
        .ok()
        .and_then(|t| t.timestamp_nanos_opt())
        .unwrap_or(0)
}

/// Now, in nanoseconds since the epoch.
pub fn now_ns() -> i64 {
    chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0)
}

/// The Docker label value `key` of a listed container.
pub fn summary_label<'a>(c: &'a ContainerSummary, key: &str) -> Option<&'a str> {
    c.labels.as_ref()?.get(key).map(String::as_str)
}

/// Does a listed container match a CRI id filter (the full id or a prefix of it)?
pub fn id_matches(c: &ContainerSummary, filter: &str) -> bool {
    filter.is_empty() || c.id.as_deref().is_some_and(|id| id.starts_with(filter))
}

/// Does `labels` match every `key=value` of `selector` (CRI label selectors are equality only)?
pub fn matches_selector(
    labels: &HashMap<String, String>,
    selector: &HashMap<String, String>,
) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_times_become_nanoseconds() {
        assert_eq!(docker_time_ns(Some("0001-01-01T00:00:00Z")), 0);
        assert_eq!(docker_time_ns(None), 0);
        assert_eq!(
            docker_time_ns(Some("1970-01-01T00:00:01.000000002Z")),
            1_000_000_002
        );
        assert_eq!(docker_time_ns(Some("garbage")), 0);
    }

    #[test]
    fn selectors_need_every_pair() {
        let labels: HashMap<String, String> =
            [("a".into(), "1".into()), ("b".into(), "2".into())].into();
        assert!(matches_selector(&labels, &HashMap::new()));
        assert!(matches_selector(
            &labels,
            &[("a".into(), "1".into())].into()
        ));
        assert!(!matches_selector(
            &labels,
            &[("a".into(), "2".into())].into()
        ));
        assert!(!matches_selector(
            &labels,
            &[("c".into(), "1".into())].into()
        ));
    }
}
