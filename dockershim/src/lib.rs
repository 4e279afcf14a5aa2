//! dockershim: a CRI `runtime.v1` server on the Docker Engine, compatible in container names,
//! labels and checkpoints with the Go dockershim and cri-dockerd. [`start`] builds the service
//! (Docker connection, pod infra image, background tasks) and serves it on a unix socket; the
//! kubelet's embedded mode calls the same function. Module map: `docker` (the Docker adapter),
//! `sandbox`, `container`, `image`, `stats`, `events` (the CRI translation), `naming`, `labels`,
//! `checkpoint`, `crilog`, `logs`, `cni`, `security`, `pause_image` (building blocks), `service`
//! (the gRPC face), `errors` (the one mapping to gRPC codes), `streaming` (exec / attach /
//! port-forward sessions over SPDY and WebSocket).

pub mod cache;
pub mod cgroups;
pub mod checkpoint;
pub mod cni;
pub mod config;
pub mod container;
pub mod crilog;
pub mod docker;
pub mod errors;
pub mod events;
pub mod image;
pub mod labels;
pub mod logs;
pub mod naming;
pub mod network;
pub mod pause_image;
pub mod sandbox;
pub mod security;
pub mod service;
pub mod shim;
pub mod stats;
pub mod streaming;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use config::{Flags, ShimConfig};
pub use docker::{BollardDocker, DockerApi};
pub use service::DockerService;
pub use shim::Shim;

/// The oom_score_adj upstream gives sandbox containers.
pub const UPSTREAM_SANDBOX_OOM_SCORE_ADJ: i64 = -998;

/// Can this process lower an oom_score_adj (CAP_SYS_RESOURCE)? Probed on our own process:
/// lowering and restoring our own value is harmless.
pub fn can_lower_oom_score_adj() -> bool {
    let path = "/proc/self/oom_score_adj";
    let Ok(cur) = std::fs::read_to_string(path) else {
        return false;
    };
    let Ok(cur) = cur.trim().parse::<i64>() else {
        return false;
    };
    if cur <= -1000 {
        return true;
    }
    let ok = std::fs::write(path, (cur - 1).to_string()).is_ok();
    if ok {
        let _ = std::fs::write(path, cur.to_string());
    }
    ok
}

/// Errors starting dockershim.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("docker: {0}")]
    Docker(#[from] docker::DockerError),
    #[error("checkpoint store: {0}")]
    Checkpoint(#[from] checkpoint::CheckpointError),
    #[error("cri socket: {0}")]
    Transport(#[from] cri_proto::TransportError),
    #[error("network: {0}")]
    Network(String),
    #[error("streaming server on {addr}: {err}")]
    Streaming { addr: String, err: std::io::Error },
}

/// Builds the service state on a connected Docker and starts its background tasks (event pump,
/// layer-size refresher, log copiers of running containers).
pub async fn build_shim<D: DockerApi>(
    docker: Arc<D>,
    config: ShimConfig,
    shutdown: CancellationToken,
) -> Result<Arc<Shim<D>>, StartError> {
    let version = docker.version().await?;
    let info = docker.info().await?;
    let can_lower = can_lower_oom_score_adj();
    let sandbox_oom_score_adj = match config.sandbox_oom_score_adj {
        Some(v) => v,
        None if can_lower => UPSTREAM_SANDBOX_OOM_SCORE_ADJ,
        None => {
            warn!(
                "this host cannot lower oom_score_adj (no CAP_SYS_RESOURCE); sandbox containers get 0 instead of {UPSTREAM_SANDBOX_OOM_SCORE_ADJ} (set --sandbox-oom-score-adj to override)"
            );
            0
        }
    };
    let network = config.cni.clone().map(network::CniNetwork::new);
    let (events, _) = broadcast::channel(events::EVENT_BUFFER);
    let shim = Arc::new(Shim {
        checkpoints: checkpoint::CheckpointStore::new(&config.root_directory)?,
        docker: docker.clone(),
        network,
        logs: logs::LogManager::default(),
        events,
        sizes: stats::SizeCache::default(),
        listing: cache::ListCache::default(),
        image_refs: cache::ImageRefCache::default(),
        cgroups: cgroups::CgroupCache::default(),
        pod_cidr: Mutex::new(String::new()),
        sandbox_oom_score_adj,
        oom_score_adj_floor: (!can_lower).then_some(0),
        oom_killed: Mutex::new(Default::default()),
        shutdown: shutdown.clone(),
        cgroup_driver: info
            .cgroup_driver
            .map(|d| d.to_string())
            .unwrap_or_else(|| "cgroupfs".to_string()),
        docker_version: version.version.unwrap_or_default(),
        docker_api_version: version.api_version.unwrap_or_default(),
        docker_root: info
            .docker_root_dir
            .unwrap_or_else(|| "/var/lib/docker".to_string()),
        streaming: std::sync::OnceLock::new(),
        config,
    });
    shim.sizes.spawn_refresher(docker.clone(), shutdown.clone());
    shim.spawn_event_pump();
    shim.adopt_running_logs().await;
    Ok(shim)
}

impl<D: DockerApi> Shim<D> {
    /// After a restart: resume copying the output of running containers into their CRI log
    /// files, from now on (what was written before the restart is already in the file). Only
    /// containers of sandboxes this dockershim checkpointed (under its `--root-directory`) are
    /// adopted: a second dockershim on the same Docker (the test bed runs several) must not
    /// start a second copier into another one's log files, which would duplicate lines.
    async fn adopt_running_logs(&self) {
        let filters = HashMap::from([
            (
                "label".to_string(),
                vec![format!(
                    "{}={}",
                    labels::CONTAINER_TYPE_LABEL_KEY,
                    labels::CONTAINER_TYPE_LABEL_CONTAINER
                )],
            ),
            ("status".to_string(), vec!["running".to_string()]),
        ]);
        let Ok(list) = self.docker.list_containers(filters).await else {
            return;
        };
        let now = chrono::Utc::now().timestamp();
        for c in list {
            let labels = c.labels.unwrap_or_default();
            let (Some(id), Some(path), Some(sandbox)) = (
                c.id,
                labels.get(labels::CONTAINER_LOG_PATH_LABEL_KEY).cloned(),
                labels.get(labels::SANDBOX_ID_LABEL_KEY),
            ) else {
                continue;
            };
            if self.checkpoints.get(sandbox).is_err() {
                continue;
            }
            self.logs.start(self.docker.clone(), &id, path.into(), now);
        }
    }
}

/// A running dockershim: the service and the task serving it.
pub struct Running {
    pub shim: Arc<Shim<BollardDocker>>,
    pub server: tokio::task::JoinHandle<Result<(), cri_proto::TransportError>>,
}

/// Connects to Docker, builds the service, binds the CRI socket (0660) and serves until
/// `shutdown` is cancelled. Returns once the socket accepts connections.
pub async fn start(config: ShimConfig, shutdown: CancellationToken) -> Result<Running, StartError> {
    let docker =
        Arc::new(BollardDocker::connect(&config.docker_endpoint, Duration::from_secs(120)).await?);
    let endpoint = config.endpoint.clone();
    let mut streaming_config = streaming::StreamingConfig::new(config.streaming_bind_addr.clone());
    streaming_config.limits.idle_timeout = config.streaming_idle_timeout;
    streaming_config.limits.max_sessions = config.streaming_max_sessions;
    let shim = build_shim(docker.clone(), config, shutdown.clone()).await?;
    let handle = streaming::start(&streaming_config, docker, shutdown.clone())
        .await
        .map_err(|err| StartError::Streaming {
            addr: streaming_config.bind_addr.clone(),
            err,
        })?;
    let _ = shim.streaming.set(handle);
    if let Err(e) = shim.ensure_pod_infra_image().await {
        warn!(error = %e, "pod infra image not available yet; RunPodSandbox will retry");
    }
    let svc = DockerService::new(shim.clone());
    let router = tonic::transport::Server::builder()
        .add_service(cri_proto::runtime_server(svc.clone()))
        .add_service(cri_proto::image_server(svc));
    let path = cri_proto::parse_endpoint(&endpoint)?;
    let listener = cri_proto::bind_unix(&path).await?;
    info!(endpoint = %endpoint, "dockershim serving CRI");
    let server = tokio::spawn(cri_proto::serve_with_listener(router, listener, shutdown));
    Ok(Running { shim, server })
}
