//! dockershim: a CRI `runtime.v1` server on the Docker Engine, compatible in container names,
//! labels and checkpoints with the Go dockershim and cri-dockerd. [`start`] builds the service
//! (Docker connection, pod infra image, background tasks) and serves it on a unix socket; the
//! kubelet's embedded mode calls the same function.
//!
//! Modules, bottom to top (each imports only from the layers under it):
//! 1. `docker` — the [`DockerApi`] trait, its bollard client and (in tests) a fake; in tests,
//!    `testbed` — when a test that needs the real runtime skips and when it fails.
//! 2. `naming`, `labels`, `checkpoint`, `security`, `crilog`, `cni`, `filter`, `timestamp`,
//!    `pause_image`, `cgroups`, `config`, `errors` (the one mapping to gRPC codes),
//!    `sandbox_files` — pure translation and files; `cache`, `logs`, `network` — state those build on.
//! 3. `shim` (the state every RPC works on and its shared lookups), then the CRI semantics on
//!    [`DockerApi`], each an `impl Shim` block: `creation`, `container`, `container_status`,
//!    `sandbox`, `image`, `stats`, `events`, `streaming_rpc`.
//! 4. `service` — the gRPC face.
//! 5. `streaming` — exec / attach / port-forward sessions over SPDY and WebSocket; the shim
//!    reaches it only through its `StreamingServer` trait.
//! 6. `fuzzing` (tests and the `fuzzing` feature only) — the `cri_to_docker` fuzz harness on
//!    the fake Engine.

pub mod cache;
pub mod cgroups;
pub mod checkpoint;
pub mod cni;
pub mod config;
pub mod container;
pub mod container_status;
pub mod creation;
pub mod crilog;
pub mod docker;
pub mod errors;
pub mod events;
pub mod filter;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod image;
pub mod image_cache;
pub mod labels;
pub mod logs;
pub mod naming;
pub mod network;
pub mod pause_image;
pub mod sandbox;
pub mod sandbox_files;
pub mod security;
pub mod service;
#[cfg(test)]
mod service_tests;
pub mod shim;
pub mod stats;
pub mod streaming;
pub mod streaming_rpc;
#[cfg(test)]
mod testbed;
pub mod timestamp;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
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

/// Errors starting dockershim. Each message carries its cause's text, so `{}` alone says what
/// and why; [`error_chain`] prints one with its sources on one line.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{}", docker_text(.0))]
    Docker(#[from] docker::DockerError),
    #[error("checkpoint store: {0}")]
    Checkpoint(#[from] checkpoint::CheckpointError),
    #[error("cri socket: {0}")]
    Transport(#[from] cri_proto::TransportError),
    #[error("cri socket {endpoint}: {source}")]
    Activation {
        endpoint: String,
        source: cri_proto::ActivationError,
    },
    #[error("network: {0}")]
    Network(String),
    #[error("streaming server on {addr}: {err}")]
    Streaming { addr: String, err: std::io::Error },
}

/// `docker: ...`, without doubling the prefix some Docker errors already carry.
fn docker_text(e: &docker::DockerError) -> String {
    let text = e.to_string();
    if text.starts_with("docker:") {
        text
    } else {
        format!("docker: {text}")
    }
}

/// An error and its sources on one line, `a: b: c`; a source whose text the line already holds
/// (messages that embed their cause) is not repeated, and line breaks become spaces.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut line = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let text = e.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cur = e.source();
    }
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Builds the service state on a connected Docker and starts its background tasks (event pump,
/// layer-size refresher, log copiers of running containers).
pub async fn build_shim<D: DockerApi>(
    docker: Arc<D>,
    config: ShimConfig,
    shutdown: CancellationToken,
) -> Result<Arc<Shim<D>>, StartError> {
    build_shim_with(docker, config, shutdown, can_lower_oom_score_adj()).await
}

/// [`build_shim`] told whether this host can lower oom_score_adj instead of probing it (unit
/// tests run many shims at once in one process, whose probes would race on
/// `/proc/self/oom_score_adj`).
pub(crate) async fn build_shim_with<D: DockerApi>(
    docker: Arc<D>,
    config: ShimConfig,
    shutdown: CancellationToken,
    can_lower: bool,
) -> Result<Arc<Shim<D>>, StartError> {
    let version = docker.version().await?;
    let info = docker.info().await?;
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
        files: sandbox_files::SandboxFiles::new(&config.root_directory),
        docker: docker.clone(),
        network,
        logs: logs::LogManager::default(),
        events,
        sizes: cache::SizeCache::default(),
        listing: cache::ListCache::default(),
        image_refs: Arc::new(cache::ImageRefCache::default()),
        images: image_cache::ImageCache::default(),
        facts: cache::FactCache::default(),
        cgroups: cgroups::CgroupCache::default(),
        container_cpu: Default::default(),
        sandbox_cpu: Default::default(),
        pod_cidr: Mutex::new(config.pod_cidr.clone()),
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

/// The CRI listening socket: one we bound (and remove when done), or one the service manager
/// passed (which stays: systemd keeps listening on it while we restart).
enum CriListener {
    Bound {
        listener: tokio::net::UnixListener,
        path: std::path::PathBuf,
    },
    Activated {
        listener: tokio::net::UnixListener,
        selector: cri_proto::FdSelector,
    },
}

impl CriListener {
    async fn open(endpoint: &str) -> Result<Self, StartError> {
        let activation = |source| StartError::Activation {
            endpoint: endpoint.to_string(),
            source,
        };
        match cri_proto::activation::parse_fd_endpoint(endpoint).map_err(activation)? {
            Some(selector) => {
                let listener =
                    cri_proto::activation::unix_listener(&selector).map_err(activation)?;
                Ok(CriListener::Activated { listener, selector })
            }
            None => {
                let path = cri_proto::parse_endpoint(endpoint)?;
                let listener = cri_proto::bind_unix(&path).await?;
                Ok(CriListener::Bound { listener, path })
            }
        }
    }

    /// Gives the socket up after a failed start: a socket we bound is removed (if it is still
    /// ours), a passed one is left to the service manager.
    fn discard(self) {
        if let CriListener::Bound { listener, path } = self {
            let ours = |p: &std::path::Path| {
                use std::os::unix::fs::MetadataExt;
                std::fs::symlink_metadata(p)
                    .ok()
                    .map(|m| (m.dev(), m.ino()))
            };
            let ident = ours(&path);
            drop(listener);
            if ident.is_some() && ours(&path) == ident {
                let _ = std::fs::remove_file(&path);
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            CriListener::Bound { path, .. } => format!("unix://{}", path.display()),
            CriListener::Activated { listener, selector } => {
                let path = listener
                    .local_addr()
                    .ok()
                    .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
                    .unwrap_or_else(|| "an unnamed socket".to_string());
                format!("{selector} ({path}, passed by the service manager)")
            }
        }
    }

    fn serve(
        self,
        router: tonic::transport::server::Router,
        shutdown: CancellationToken,
    ) -> tokio::task::JoinHandle<Result<(), cri_proto::TransportError>> {
        match self {
            CriListener::Bound { listener, .. } => {
                tokio::spawn(cri_proto::serve_with_listener(router, listener, shutdown))
            }
            CriListener::Activated { listener, .. } => {
                tokio::spawn(cri_proto::serve_activated(router, listener, shutdown))
            }
        }
    }
}

/// Settings accepted for cri-dockerd's command line that do nothing here, said once at start.
fn log_inert_settings(config: &ShimConfig) {
    if config.cni.is_some() && config.network_plugin_mtu != 0 {
        warn!(
            mtu = config.network_plugin_mtu,
            "--network-plugin-mtu has no effect with the cni plugin (as in cri-dockerd, only kubenet uses it): set the MTU in the CNI network config"
        );
    }
    if config.hairpin_mode != config::HairpinMode::None {
        info!(
            mode = config.hairpin_mode.as_str(),
            "--hairpin-mode has no effect with the cni plugin (as in cri-dockerd, only kubenet uses it): the bridge network config's hairpinMode decides"
        );
    }
    if !config.runtime_cgroups.is_empty() {
        warn!(
            cgroup = %config.runtime_cgroups,
            "--runtime-cgroups is recorded but not applied: run the service in that cgroup (systemd Slice=) instead"
        );
    }
    if !config.pod_cidr.is_empty() && config.cni.is_some() {
        info!(
            pod_cidr = %config.pod_cidr,
            "--pod-cidr is the runtime's pod CIDR (as UpdateRuntimeConfig sets it); it is not passed to CNI plugins as ipRanges yet"
        );
    }
}

/// Opens the CRI socket (binds it, or takes the one systemd passed for `fd://`), connects to
/// Docker, builds the service and serves it until `shutdown` is cancelled. Returns once the
/// socket accepts connections. The socket comes first, so that a socket in use fails before
/// anything else is done; if a later step fails, a socket we bound is removed again.
pub async fn start(config: ShimConfig, shutdown: CancellationToken) -> Result<Running, StartError> {
    info!(version = env!("CARGO_PKG_VERSION"), "starting dockershim");
    log_inert_settings(&config);
    let listener = CriListener::open(&config.endpoint).await?;
    match start_on(config, shutdown.clone()).await {
        Ok((shim, router)) => {
            info!(endpoint = %listener.describe(), "dockershim serving CRI");
            let server = listener.serve(router, shutdown);
            Ok(Running { shim, server })
        }
        Err(e) => {
            listener.discard();
            Err(e)
        }
    }
}

async fn start_on(
    config: ShimConfig,
    shutdown: CancellationToken,
) -> Result<(Arc<Shim<BollardDocker>>, tonic::transport::server::Router), StartError> {
    let docker = Arc::new(
        BollardDocker::connect(&config.docker_endpoint, config.runtime_request_timeout).await?,
    );
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
    let _ = shim.streaming.set(Arc::new(handle));
    if let Err(e) = shim.ensure_pod_infra_image().await {
        warn!(error = %e, "pod infra image not available yet; RunPodSandbox will retry");
    }
    let svc = DockerService::new(shim.clone());
    let router = tonic::transport::Server::builder()
        // One span per CRI call, at trace level only (free otherwise): with `--log-level
        // trace` the standalone binary logs each call's and each Docker call's time inside it.
        .trace_fn(|req| {
            let method = req.uri().path().rsplit('/').next().unwrap_or_default();
            tracing::trace_span!("cri", method = %method)
        })
        .add_service(cri_proto::runtime_server(svc.clone()))
        .add_service(cri_proto::image_server(svc));
    Ok((shim, router))
}

#[cfg(test)]
mod start_error_tests {
    use super::*;

    #[test]
    fn start_errors_say_what_and_why_once() {
        let in_use = StartError::from(cri_proto::TransportError::AddrInUse {
            path: "/x.sock".into(),
        });
        assert_eq!(
            error_chain(&in_use),
            "cri socket: socket /x.sock is already in use by a live server"
        );
        let io = StartError::from(cri_proto::TransportError::Io {
            op: "bind",
            path: "/x.sock".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        });
        assert_eq!(
            error_chain(&io),
            "cri socket: bind /x.sock: permission denied"
        );
        let docker = StartError::from(docker::DockerError::Connection(
            "Socket not found: /d.sock".into(),
        ));
        assert_eq!(
            error_chain(&docker),
            "docker: cannot reach the Docker Engine: Socket not found: /d.sock"
        );
        let streaming = StartError::Streaming {
            addr: "127.0.0.1:1".into(),
            err: std::io::Error::from(std::io::ErrorKind::AddrInUse),
        };
        assert_eq!(
            error_chain(&streaming),
            "streaming server on 127.0.0.1:1: address in use"
        );
        let activation = StartError::Activation {
            endpoint: "fd://".into(),
            source: cri_proto::ActivationError::NoSockets,
        };
        assert_eq!(
            error_chain(&activation),
            "cri socket fd://: no sockets found via socket activation: LISTEN_FDS=0"
        );
    }
}
