//! dockershim's settings: the command line of Mirantis cri-dockerd 0.3 (every flag of v0.3.7,
//! with its names, syntax and defaults, so an existing `cri-docker.service` runs us unchanged and
//! finds its checkpoints under `/var/lib/cri-dockerd`), a few flags of our own, and the resolved
//! [`ShimConfig`] the service runs with.
//!
//! Every value is checked up front by [`Flags::into_config`]; a bad one is a [`FlagError`] that
//! names the flag, the value and the reason, in one line. Durations use Go's syntax
//! ([`parse_go_duration`]), booleans Go's `strconv.ParseBool`, log levels logrus's names.
//!
//! The kubelet's embedded mode builds a `ShimConfig` itself ([`ShimConfig::with_endpoint`]).
//!
//! Files: this one holds the defaults and the resolved settings ([`ShimConfig`],
//! [`CniSettings`], [`HairpinMode`]); `flags` the command line ([`Flags`] and its resolution);
//! `validate` the checks of single values ([`FlagError`], endpoints, CIDRs, Go durations and
//! booleans); `tests` the command line end to end.

mod flags;
#[cfg(test)]
mod tests;
mod validate;

use std::path::PathBuf;
use std::time::Duration;

use cri_proto::activation::{self, FdSelector};

pub use flags::{Flags, clap_error_line};
pub use validate::{FlagError, parse_go_bool, parse_go_duration};

/// cri-dockerd 0.3.7's pod infra ("pause") image.
pub const DEFAULT_POD_INFRA_IMAGE: &str = "registry.k8s.io/pause:3.6";
/// cri-dockerd's CRI endpoint.
pub const DEFAULT_ENDPOINT: &str = "unix:///var/run/cri-dockerd.sock";
/// cri-dockerd's state directory (sandbox checkpoints under `sandbox/`).
pub const DEFAULT_ROOT_DIRECTORY: &str = "/var/lib/cri-dockerd";
/// Docker's default socket.
pub const DEFAULT_DOCKER_ENDPOINT: &str = "unix:///var/run/docker.sock";
/// cri-dockerd's network plugin.
pub const DEFAULT_NETWORK_PLUGIN: &str = "cni";
/// Where the streaming server listens unless told: loopback, a port chosen by the kernel. (The
/// one default that is not cri-dockerd's, whose empty default listens on every address: the
/// kubelet reaches the streaming server from this node, so nothing needs more than loopback.
/// `--streaming-bind-addr=` asks for cri-dockerd's behaviour.)
pub const DEFAULT_STREAMING_BIND_ADDR: &str = "127.0.0.1";
/// What `--runtime-request-timeout 0` (the default) means: cri-dockerd's Docker client then
/// applies its own default of about two minutes.
pub const DEFAULT_RUNTIME_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// The logrus level names `--log-level` accepts.
pub const LOG_LEVELS: &[&str] = &[
    "panic", "fatal", "error", "warn", "warning", "info", "debug", "trace",
];

/// `--hairpin-mode` (cri-dockerd's `config.HairpinMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HairpinMode {
    PromiscuousBridge,
    HairpinVeth,
    #[default]
    None,
}

impl HairpinMode {
    pub const ALL: [HairpinMode; 3] = [
        HairpinMode::PromiscuousBridge,
        HairpinMode::HairpinVeth,
        HairpinMode::None,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HairpinMode::PromiscuousBridge => "promiscuous-bridge",
            HairpinMode::HairpinVeth => "hairpin-veth",
            HairpinMode::None => "none",
        }
    }
}

/// What the service runs with.
#[derive(Debug, Clone)]
pub struct ShimConfig {
    /// `unix:///path` (or a path) to bind, or `fd://...` for a passed socket.
    pub endpoint: String,
    pub docker_endpoint: String,
    pub pod_infra_image: String,
    /// `Some` in CNI mode.
    pub cni: Option<CniSettings>,
    pub root_directory: PathBuf,
    /// `IP:port` (port 0: the kernel picks one).
    pub streaming_bind_addr: String,
    pub streaming_idle_timeout: Duration,
    pub streaming_max_sessions: usize,
    pub sandbox_oom_score_adj: Option<i64>,
    pub image_pull_progress_deadline: Duration,
    /// Timeout of Docker requests (`--runtime-request-timeout`, 0 resolved to two minutes).
    pub runtime_request_timeout: Duration,
    /// `--network-plugin-mtu` (0: default). Kubenet's only, as in cri-dockerd.
    pub network_plugin_mtu: u32,
    /// `--hairpin-mode`. Kubenet's only, as in cri-dockerd.
    pub hairpin_mode: HairpinMode,
    /// `--pod-cidr` (the initial value of the pod CIDR UpdateRuntimeConfig sets).
    pub pod_cidr: String,
    /// `--ipv6-dual-stack`.
    pub ipv6_dual_stack: bool,
    /// `--runtime-cgroups` (recorded, not applied).
    pub runtime_cgroups: String,
    /// Where pulls post their progress for a kubelet in the same process (no flag: the
    /// embedding kubelet sets it).
    pub pull_progress: Option<node_common::pull_progress::PullProgressBoard>,
}

/// Where CNI lives.
#[derive(Debug, Clone)]
pub struct CniSettings {
    pub bin_dirs: Vec<PathBuf>,
    pub conf_dir: PathBuf,
    pub cache_dir: PathBuf,
}

impl ShimConfig {
    /// The passed socket the endpoint names, when it is an `fd://` one.
    pub fn fd_selector(&self) -> Result<Option<FdSelector>, activation::ActivationError> {
        activation::parse_fd_endpoint(&self.endpoint)
    }
}
