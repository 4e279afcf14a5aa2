//! The dockershim service state: the one [`Shim`] value every RPC works on. It owns the Docker
//! client, the sandbox checkpoints, the CNI network (in CNI mode), the per-container log copiers,
//! the container-event fan-out and the caches, plus the lookups every RPC module shares (our
//! containers, "is this one of our sandboxes / containers"). The RPCs themselves live in
//! `sandbox`, `container`, `image`, `stats`, `events` and `streaming_rpc`, each adding an
//! `impl Shim` block; `service` wires them to gRPC. The streaming server sits above all of them,
//! so the shim reaches it only through the small [`StreamingServer`] trait it owns here.

use std::collections::HashMap;
use std::sync::Arc;

use bollard::models::ContainerInspectResponse;
use cri_proto::runtime::v1 as cri;
use parking_lot::Mutex;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::cache::{
    CpuUsageCache, Fact, FactCache, ImageRefCache, ListCache, Lookup, SharedListing, SizeCache,
};
use crate::cgroups::CgroupCache;
use crate::checkpoint::CheckpointStore;
use crate::config::ShimConfig;
use crate::docker::DockerApi;
use crate::errors::{Result, ShimError};
use crate::labels;
use crate::logs::LogManager;
use crate::network::CniNetwork;

/// What the CRI Exec, Attach and PortForward RPCs need of the streaming server (upstream's
/// `streaming.Server`): the single-use URL that serves a request already checked. The
/// streaming server implements it; the shim never names the server's types.
pub trait StreamingServer: Send + Sync + 'static {
    fn get_exec(&self, req: cri::ExecRequest) -> Result<cri::ExecResponse>;
    fn get_attach(&self, req: cri::AttachRequest) -> Result<cri::AttachResponse>;
    fn get_port_forward(&self, req: cri::PortForwardRequest) -> Result<cri::PortForwardResponse>;
}

/// The state shared by every RPC handler.
pub struct Shim<D: DockerApi> {
    pub docker: Arc<D>,
    pub config: ShimConfig,
    pub checkpoints: CheckpointStore,
    /// `resolv.conf` and `hosts` of the sandboxes whose network Docker does not manage.
    pub files: crate::sandbox_files::SandboxFiles,
    pub network: Option<CniNetwork>,
    pub logs: LogManager,
    pub events: broadcast::Sender<cri::ContainerEventResponse>,
    pub sizes: SizeCache,
    /// The last listing of our containers, valid until something changes.
    pub listing: ListCache,
    /// Repo digests by image id, for ContainerStatus.
    pub image_refs: Arc<ImageRefCache>,
    /// Image inspects by reference, for ImageStatus and the pod infra image check.
    pub images: crate::image_cache::ImageCache,
    /// What never changes about our containers (kind, log path), by whole id.
    pub facts: FactCache,
    /// Cgroup directories of the containers whose stats were asked for.
    pub cgroups: CgroupCache,
    /// The last CPU sample of each container whose stats were asked for (`usage_nano_cores`).
    pub container_cpu: CpuUsageCache,
    /// The last CPU sample of each sandbox (its pause container and containers together).
    pub sandbox_cpu: CpuUsageCache,
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
    pub streaming: std::sync::OnceLock<Arc<dyn StreamingServer>>,
}

impl<D: DockerApi> Shim<D> {
    /// Every container and sandbox of ours (any state), from the listing cache when nothing
    /// changed since it was taken, otherwise from Docker: the listing another caller has in
    /// flight if nothing changed since it was requested, else one of our own.
    pub async fn our_containers(&self) -> Result<SharedListing> {
        self.our_containers_labelled(&HashMap::new()).await
    }

    /// Our containers and sandboxes that may carry every label of `selector` (a CRI label
    /// selector: a superset, to be filtered by the caller). Without a selector, or when the
    /// listing cache is fresh or a listing is in flight, the same as
    /// [`Shim::our_containers`]; otherwise Docker is asked for the labelled ones only, as
    /// cri-dockerd asks: the kubelet reads each pod's status by listing with its UID label,
    /// and while pods start (every event makes the cache stale) a full listing of every
    /// container each time cost the Engine a summary of each.
    pub async fn our_containers_labelled(
        &self,
        selector: &HashMap<String, String>,
    ) -> Result<SharedListing> {
        let mut labels = vec![labels::CONTAINER_TYPE_LABEL_KEY.to_string()];
        // A key with `=` would not survive Docker's `key=value` filter syntax.
        labels.extend(
            selector
                .iter()
                .filter(|(k, _)| !k.is_empty() && !k.contains('='))
                .map(|(k, v)| format!("{k}={v}")),
        );
        let full = labels.len() == 1;
        // Only a full listing leads (others wait for it) and is kept.
        let found = if full {
            Some(self.listing.lookup())
        } else {
            self.listing.cached_or_in_flight()
        };
        let leader = match found {
            Some(Lookup::Cached(list)) => return Ok(list),
            Some(Lookup::Join(mut rx)) => {
                if let Ok(list) = rx.wait_for(Option::is_some).await
                    && let Some(list) = list.as_ref()
                {
                    return Ok(Arc::clone(list));
                }
                // The leader failed or was cancelled: list without it.
                None
            }
            Some(Lookup::Lead(leader)) => Some(leader),
            None => None,
        };
        // Taken before asking Docker, for a full listing nobody leads (see `ListCache::store`).
        let ticket = (full && leader.is_none()).then(|| self.listing.ticket());
        let list = self
            .docker
            .list_containers(HashMap::from([("label".to_string(), labels)]))
            .await?;
        Ok(match leader {
            Some(leader) => self.listing.finish(leader, list),
            None => {
                let list = Arc::new(list);
                if let Some(ticket) = ticket {
                    self.listing.store(ticket, &list);
                }
                list
            }
        })
    }

    /// The CNI network, or why networking is not ready.
    pub fn network_name(&self) -> Option<String> {
        self.network.as_ref().and_then(|n| n.current_name())
    }

    /// Inspects `id` and checks it is one of our sandboxes.
    pub(crate) async fn inspect_sandbox(&self, id: &str) -> Result<ContainerInspectResponse> {
        if id.is_empty() {
            return Err(ShimError::invalid("pod sandbox id is required"));
        }
        let c = self.docker.inspect_container(id).await.map_err(|e| {
            if e.is_not_found() {
                ShimError::NotFound(format!("could not find pod sandbox {id:?}"))
            } else {
                e.into()
            }
        })?;
        if container_type(&c) != Some(labels::CONTAINER_TYPE_LABEL_SANDBOX) {
            return Err(ShimError::NotFound(format!("{id:?} is not a pod sandbox")));
        }
        if let Some(full) = &c.id {
            self.facts.learn(
                full,
                Fact::Sandbox {
                    own_files: own_files_of(&c),
                },
            );
        }
        Ok(c)
    }

    /// The whole id of sandbox `id` and whether its containers get dockershim's `resolv.conf`
    /// and `hosts`: known without asking Docker for a sandbox dockershim made or inspected
    /// before (given by its whole id: facts are kept by whole id, a prefix finds none),
    /// otherwise from an inspect.
    pub(crate) async fn sandbox_facts(&self, id: &str) -> Result<(String, bool)> {
        if let Some(Fact::Sandbox { own_files }) = self.facts.get(id) {
            return Ok((id.to_string(), own_files));
        }
        let c = self.inspect_sandbox(id).await?;
        let own_files = own_files_of(&c);
        Ok((c.id.unwrap_or_else(|| id.to_string()), own_files))
    }

    /// The whole id of container `id` and its CRI log path, as [`Shim::sandbox_facts`] for a
    /// sandbox.
    pub(crate) async fn container_facts(&self, id: &str) -> Result<(String, Option<String>)> {
        if let Some(Fact::Container { log_path }) = self.facts.get(id) {
            return Ok((id.to_string(), log_path));
        }
        let c = self.inspect_app_container(id).await?;
        let log_path = log_path_of(&c);
        Ok((c.id.unwrap_or_else(|| id.to_string()), log_path))
    }

    /// Inspects `id` and checks it is one of our (non-sandbox) containers.
    pub(crate) async fn inspect_app_container(&self, id: &str) -> Result<ContainerInspectResponse> {
        if id.is_empty() {
            return Err(ShimError::invalid("container id is required"));
        }
        let c = self.docker.inspect_container(id).await.map_err(|e| {
            if e.is_not_found() {
                ShimError::NotFound(format!("could not find container {id:?}"))
            } else {
                e.into()
            }
        })?;
        if container_type(&c) != Some(labels::CONTAINER_TYPE_LABEL_CONTAINER) {
            return Err(ShimError::NotFound(format!(
                "could not find container {id:?}"
            )));
        }
        if let Some(full) = &c.id {
            self.facts.learn(
                full,
                Fact::Container {
                    log_path: log_path_of(&c),
                },
            );
        }
        Ok(c)
    }
}

/// Does an inspected sandbox run without Docker's network, so that its containers get
/// dockershim's `resolv.conf` and `hosts`?
fn own_files_of(c: &ContainerInspectResponse) -> bool {
    c.config.as_ref().and_then(|cfg| cfg.network_disabled) == Some(true)
}

/// The CRI log path (label) of an inspected container.
fn log_path_of(c: &ContainerInspectResponse) -> Option<String> {
    c.config
        .as_ref()
        .and_then(|cfg| cfg.labels.as_ref())
        .and_then(|l| l.get(labels::CONTAINER_LOG_PATH_LABEL_KEY))
        .cloned()
}

/// The value of our type label on an inspected container, if it has one.
fn container_type(c: &ContainerInspectResponse) -> Option<&str> {
    c.config
        .as_ref()
        .and_then(|cfg| cfg.labels.as_ref())
        .and_then(labels::container_type)
}
