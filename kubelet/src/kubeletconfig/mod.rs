//! The kubelet config file (upstream `kubelet.config.k8s.io/v1beta1` `KubeletConfiguration`,
//! the subset this kubelet implements) and the resolved configuration the rest of the kubelet
//! uses. This module owns strict YAML/JSON decoding of the file (an unknown field is an error
//! naming it, like upstream strict decoding), the merge rule (defaults, then the file, then
//! flags given explicitly on the command line) and the final [`KubeletConfig`].
//!
//! Layout: `v1beta1.rs` (the file's types), `configfiles.rs` (decoding and validation),
//! `defaults.rs` (upstream's zero-value defaulting), `ignored.rs` (fields accepted but not
//! acted on), `features.rs` (the feature gates a 1.26 kubelet recognizes); this file holds the errors and the resolved [`KubeletConfig`], and re-exports
//! the file's types.

mod configfiles;
mod defaults;
pub mod features;
mod ignored;
mod v1beta1;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use v1beta1::{
    API_VERSION, FormatOptions, IntOrString, JsonOptions, KIND, KubeletAnonymousAuthentication,
    KubeletAuthentication, KubeletAuthorization, KubeletConfiguration,
    KubeletWebhookAuthentication, KubeletWebhookAuthorization, KubeletX509Authentication,
    LoggingConfiguration, MemoryReservation, MemorySwapConfiguration,
    ShutdownGracePeriodByPodPriority, Taint, TracingConfiguration, VModuleItem,
};

/// Errors loading or resolving the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("failed to read kubelet config file {path:?}: {source}")]
    Read {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is malformed or has an unknown field (the reason names it).
    #[error("failed to decode kubelet config file {path:?}: {reason}")]
    Decode {
        /// The path.
        path: PathBuf,
        /// Why (e.g. "unknown field `foo`, expected one of ...").
        reason: String,
    },
    /// Wrong apiVersion/kind.
    #[error("kubelet config file {path:?}: unsupported {field} {value:?}, want {want:?}")]
    TypeMeta {
        /// The path.
        path: PathBuf,
        /// `apiVersion` or `kind`.
        field: &'static str,
        /// The value found.
        value: String,
        /// The value wanted.
        want: &'static str,
    },
    /// The file decodes but holds a value upstream's validation refuses (the reason names the
    /// field).
    #[error("invalid kubelet config file {path:?}: {reason}")]
    FileInvalid {
        /// The path.
        path: PathBuf,
        /// Why, naming the field.
        reason: String,
    },
    /// The merged configuration (file plus flags) is refused by upstream's
    /// `ValidateKubeletConfiguration`; the reason names the field and its flag, as upstream's:
    /// `readOnlyPort (--read-only-port) 70000 must be between 0 and 65535, inclusive`.
    #[error("invalid configuration: {0}")]
    Invalid(String),
    /// A flag value is malformed.
    #[error("invalid value for --{flag}: {reason}")]
    Flag {
        /// The flag name.
        flag: &'static str,
        /// Why.
        reason: String,
    },
    /// Command-line parsing failed (includes `--help`).
    #[error(transparent)]
    Clap(#[from] clap::Error),
}

/// The resolved configuration used by the rest of the kubelet.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletConfig {
    /// The node name: `--hostname-override` or the host name, lowercased.
    pub node_name: String,
    /// `--node-ip`'s address (its first, when a dual-stack pair); `None`: detected.
    pub node_ip: Option<String>,
    /// CRI runtime endpoint; `None` means "run the embedded dockershim".
    pub container_runtime_endpoint: Option<String>,
    /// CRI image endpoint; `None` means the runtime endpoint.
    pub image_service_endpoint: Option<String>,
    /// Docker endpoint for the embedded dockershim.
    pub docker_endpoint: String,
    /// The sandbox (pause) image.
    pub pod_infra_container_image: String,
    /// Static pod path.
    pub static_pod_path: Option<PathBuf>,
    /// Static pod URL.
    pub static_pod_url: Option<String>,
    /// Headers for the static pod URL.
    pub static_pod_url_header: BTreeMap<String, Vec<String>>,
    /// File source period.
    pub file_check_frequency: Duration,
    /// http source period.
    pub http_check_frequency: Duration,
    /// Periodic pod sync.
    pub sync_frequency: Duration,
    /// `configMapAndSecretChangeDetectionStrategy` (default `Watch`).
    pub config_map_and_secret_change_detection_strategy: crate::apiobjects::ChangeDetectionStrategy,
    /// Root directory.
    pub root_dir: PathBuf,
    /// Max pods.
    pub max_pods: i32,
    /// Server address.
    pub address: String,
    /// Read-only port.
    pub read_only_port: i32,
    /// CRI request timeout.
    pub runtime_request_timeout: Duration,
    /// `kubeReserved` plus `systemReserved` per resource in base units (millicores, bytes):
    /// subtracted from capacity for allocatable and admission.
    pub node_reservation: std::collections::BTreeMap<String, i64>,
    /// `--node-labels`: the node's own labels beside the well-known ones (admission matches
    /// node selectors against them in every mode).
    pub node_labels: std::collections::BTreeMap<String, String>,
    /// Use the evented PLEG.
    pub evented_pleg: bool,
    /// The sysctls pods may set: the safe ones and `allowedUnsafeSysctls`
    /// (`--allowed-unsafe-sysctls`).
    pub sysctls: crate::sysctl::Allowlist,
    /// Feature `SidecarContainers` (on by default): init containers with `restartPolicy:
    /// Always` are sidecars. Off, the field is dropped from pods as an API server with the gate
    /// off drops it, and they run as plain init containers.
    pub sidecar_containers: bool,
    /// Graceful node shutdown (`shutdownGracePeriod`, `shutdownGracePeriodCriticalPods`; off
    /// when zero or with the `GracefulNodeShutdown` gate off).
    pub shutdown: crate::nodeshutdown::ShutdownConfig,
    /// API-server mode, when `--kubeconfig` is given.
    pub api: Option<crate::apimode::ApiModeConfig>,
    /// klog-style verbosity.
    pub verbosity: i32,
    /// Container log rotation size in bytes (0 disables rotation).
    pub container_log_max_size: u64,
    /// Log files kept per container, the current one included (at least 2).
    pub container_log_max_files: usize,
    /// Period of the container log manager.
    pub container_log_monitor_interval: Duration,
    /// Container GC: minimum age of a dead container before it may be removed.
    pub minimum_container_ttl_duration: Duration,
    /// Container GC: dead instances kept per (pod, container name); negative = no limit.
    pub max_per_pod_container: i32,
    /// Container GC: dead containers kept in total; negative = no limit.
    pub max_containers: i32,
    /// Container GC period (upstream constant `ContainerGCPeriod`, 1 min).
    pub container_gc_period: Duration,
    /// Image GC high threshold percent.
    pub image_gc_high_threshold_percent: i32,
    /// Image GC low threshold percent.
    pub image_gc_low_threshold_percent: i32,
    /// Image GC: minimum age of an unused image.
    pub image_minimum_gc_age: Duration,
    /// Image GC period (upstream constant `ImageGCPeriod`, 5 min).
    pub image_gc_period: Duration,
    /// Image GC only considers images with a repo tag starting with this (empty: all images).
    pub image_gc_ref_prefix: String,
    /// Node-level image pull credentials (a Docker config file).
    pub image_credential_file: Option<PathBuf>,
    /// Node-pressure eviction.
    pub eviction: crate::eviction::EvictionConfig,
    /// The secure port (0: off).
    pub port: i32,
    /// Its TLS and authentication.
    pub tls: crate::server::secure::TlsConfig,
    /// Its token webhook and authorization mode.
    pub auth: crate::server::auth::AuthConfig,
    /// Pod cgroups.
    pub cgroups: crate::cm::CgroupConfig,
    /// Pod DNS: `clusterDNS`, `clusterDomain`, `resolvConf`.
    pub dns: crate::dns::DnsConfigurer,
    /// `healthzBindAddress`.
    pub healthz_bind_address: String,
    /// `healthzPort` (0: no healthz server).
    pub healthz_port: i32,
    /// `logging.format`: `text` or `json`.
    pub logging_format: String,
    /// `streamingConnectionIdleTimeout` (the embedded dockershim's streaming server).
    pub streaming_connection_idle_timeout: Duration,
    /// `oomScoreAdj` of the kubelet process.
    pub oom_score_adj: i32,
    /// `maxOpenFiles` (RLIMIT_NOFILE of the kubelet process).
    pub max_open_files: u64,
    /// `failSwapOn`: refuse to start with swap on.
    pub fail_swap_on: bool,
    /// The `--config` file, when given.
    pub config_file: Option<PathBuf>,
    /// Fields of the config file this kubelet accepts but does not act on (see
    /// [`KubeletConfiguration::ignored_fields`]).
    pub ignored_fields: Vec<String>,
}

/// The machine's host name, lowercased and trimmed (upstream `nodeutil.GetHostname("")`).
pub fn system_hostname() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_lowercase())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}
