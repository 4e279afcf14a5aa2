//! The kubelet config file (upstream `kubelet.config.k8s.io/v1beta1` `KubeletConfiguration`,
//! the subset this kubelet implements) and the resolved configuration the rest of the kubelet
//! uses. This module owns strict YAML/JSON decoding of the file (an unknown field is an error
//! naming it, like upstream strict decoding), the merge rule (defaults, then the file, then
//! flags given explicitly on the command line) and the final [`KubeletConfig`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::serde_go_opt;

/// The config file's `apiVersion`.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The config file's `kind`.
pub const KIND: &str = "KubeletConfiguration";

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

/// The config file: upstream `kubelet.config.k8s.io/v1beta1` `KubeletConfiguration` of
/// Kubernetes 1.26, every field (plus three of later versions this kubelet already took:
/// `containerRuntimeEndpoint`, `imageServiceEndpoint`, `containerLogMonitorInterval`). Decoding
/// is strict like upstream's: a field upstream does not have is an error naming it and its
/// line. Every field is optional; [`KubeletConfiguration::normalize`] applies upstream's
/// "zero means default" rule and [`KubeletConfiguration::ignored_fields`] names the fields set
/// to something this kubelet does not implement (docs/kubelet-config.md has the table).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletConfiguration {
    /// `kubelet.config.k8s.io/v1beta1`.
    pub api_version: Option<String>,
    /// `KubeletConfiguration`.
    pub kind: Option<String>,
    /// `enableServer`: Serve the authenticated port (`false`: off).
    pub enable_server: Option<bool>,
    /// `staticPodPath`: Directory (or file) of static pod manifests.
    pub static_pod_path: Option<PathBuf>,
    /// `syncFrequency`: Max period between syncs of running pods.
    #[serde(with = "serde_go_opt")]
    pub sync_frequency: Option<Duration>,
    /// `fileCheckFrequency`: How often to re-list `staticPodPath`.
    #[serde(with = "serde_go_opt")]
    pub file_check_frequency: Option<Duration>,
    /// `httpCheckFrequency`: How often to poll `staticPodURL`.
    #[serde(with = "serde_go_opt")]
    pub http_check_frequency: Option<Duration>,
    /// `staticPodURL`: URL of static pod manifests.
    #[serde(rename = "staticPodURL")]
    pub static_pod_url: Option<String>,
    /// `staticPodURLHeader`: Headers for `staticPodURL`.
    #[serde(rename = "staticPodURLHeader")]
    pub static_pod_url_header: Option<BTreeMap<String, Vec<String>>>,
    /// `address`: Address of the kubelet's servers.
    pub address: Option<String>,
    /// `port`: The authenticated port.
    pub port: Option<i32>,
    /// `readOnlyPort`: Read-only port (0 disables it).
    pub read_only_port: Option<i32>,
    /// `tlsCertFile`: The serving certificate of the secure port.
    pub tls_cert_file: Option<PathBuf>,
    /// `tlsPrivateKeyFile`: Its key.
    pub tls_private_key_file: Option<PathBuf>,
    /// `tlsCipherSuites`: Allowed TLS cipher suites.
    pub tls_cipher_suites: Option<Vec<String>>,
    /// `tlsMinVersion`: Minimum TLS version.
    pub tls_min_version: Option<String>,
    /// `rotateCertificates`: Client certificate rotation through CSRs.
    pub rotate_certificates: Option<bool>,
    /// `serverTLSBootstrap`: Serving certificate from a CSR.
    #[serde(rename = "serverTLSBootstrap")]
    pub server_tls_bootstrap: Option<bool>,
    /// `authentication`: Authentication of the secure port.
    pub authentication: Option<KubeletAuthentication>,
    /// `authorization`: Authorization of the secure port.
    pub authorization: Option<KubeletAuthorization>,
    /// `registryPullQPS`: Image pulls per second (0: no limit).
    #[serde(rename = "registryPullQPS")]
    pub registry_pull_qps: Option<i32>,
    /// `registryBurst`: Burst of image pulls.
    pub registry_burst: Option<i32>,
    /// `eventRecordQPS`: Event creations per second (0: no limit).
    #[serde(rename = "eventRecordQPS")]
    pub event_record_qps: Option<i32>,
    /// `eventBurst`: Burst of event creations.
    pub event_burst: Option<i32>,
    /// `enableDebuggingHandlers`: Logs, exec, attach and port-forward endpoints.
    pub enable_debugging_handlers: Option<bool>,
    /// `enableContentionProfiling`: Block profiling.
    pub enable_contention_profiling: Option<bool>,
    /// `healthzPort`: Port of the healthz endpoint (0 disables it).
    pub healthz_port: Option<i32>,
    /// `healthzBindAddress`: Address of the healthz endpoint.
    pub healthz_bind_address: Option<String>,
    /// `oomScoreAdj`: oom_score_adj of the kubelet process.
    pub oom_score_adj: Option<i32>,
    /// `clusterDomain`: The cluster's DNS domain.
    pub cluster_domain: Option<String>,
    /// `clusterDNS`: Cluster DNS server IPs.
    #[serde(rename = "clusterDNS")]
    pub cluster_dns: Option<Vec<String>>,
    /// `streamingConnectionIdleTimeout`: Idle timeout of streaming connections.
    #[serde(with = "serde_go_opt")]
    pub streaming_connection_idle_timeout: Option<Duration>,
    /// `nodeStatusUpdateFrequency`: How often the node status is computed (and written when changed).
    #[serde(with = "serde_go_opt")]
    pub node_status_update_frequency: Option<Duration>,
    /// `nodeStatusReportFrequency`: How often the node status is written even without a change.
    #[serde(with = "serde_go_opt")]
    pub node_status_report_frequency: Option<Duration>,
    /// `nodeLeaseDurationSeconds`: Duration of the node lease.
    pub node_lease_duration_seconds: Option<i32>,
    /// `imageMinimumGCAge`: Minimum age of an unused image before it may be garbage collected.
    #[serde(rename = "imageMinimumGCAge", with = "serde_go_opt")]
    pub image_minimum_gc_age: Option<Duration>,
    /// `imageGCHighThresholdPercent`: Image-filesystem usage percent at or above which image GC always runs.
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// `imageGCLowThresholdPercent`: Image-filesystem usage percent image GC frees down to.
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// `volumeStatsAggPeriod`: Period of volume usage calculation.
    #[serde(with = "serde_go_opt")]
    pub volume_stats_agg_period: Option<Duration>,
    /// `kubeletCgroups`: Cgroup of the kubelet.
    pub kubelet_cgroups: Option<String>,
    /// `systemCgroups`: Cgroup of non-kernel processes.
    pub system_cgroups: Option<String>,
    /// `cgroupRoot`: The root cgroup of pods.
    pub cgroup_root: Option<String>,
    /// `cgroupsPerQOS`: QoS-class cgroups for pods.
    #[serde(rename = "cgroupsPerQOS")]
    pub cgroups_per_qos: Option<bool>,
    /// `cgroupDriver`: `cgroupfs` or `systemd`.
    pub cgroup_driver: Option<String>,
    /// `cpuManagerPolicy`: CPU manager policy.
    pub cpu_manager_policy: Option<String>,
    /// `cpuManagerPolicyOptions`: CPU manager policy options.
    pub cpu_manager_policy_options: Option<BTreeMap<String, String>>,
    /// `cpuManagerReconcilePeriod`: CPU manager reconcile period.
    #[serde(with = "serde_go_opt")]
    pub cpu_manager_reconcile_period: Option<Duration>,
    /// `memoryManagerPolicy`: Memory manager policy.
    pub memory_manager_policy: Option<String>,
    /// `topologyManagerPolicy`: Topology manager policy.
    pub topology_manager_policy: Option<String>,
    /// `topologyManagerScope`: Topology manager scope.
    pub topology_manager_scope: Option<String>,
    /// `topologyManagerPolicyOptions`: Topology manager policy options.
    pub topology_manager_policy_options: Option<BTreeMap<String, String>>,
    /// `qosReserved`: Resources reserved for Guaranteed pods.
    pub qos_reserved: Option<BTreeMap<String, String>>,
    /// `runtimeRequestTimeout`: Timeout of runtime requests (except long-running ones).
    #[serde(with = "serde_go_opt")]
    pub runtime_request_timeout: Option<Duration>,
    /// `hairpinMode`: Hairpin mode of the container bridge.
    pub hairpin_mode: Option<String>,
    /// `maxPods`: Maximum pods on this node.
    pub max_pods: Option<i32>,
    /// `podCIDR`: Pod CIDR in standalone mode.
    #[serde(rename = "podCIDR")]
    pub pod_cidr: Option<String>,
    /// `podPidsLimit`: Maximum PIDs per pod.
    pub pod_pids_limit: Option<i64>,
    /// `resolvConf`: The host resolver file pods' DNS starts from ("": none).
    pub resolv_conf: Option<String>,
    /// `runOnce`: Run the pods once and exit.
    pub run_once: Option<bool>,
    /// `cpuCFSQuota`: CFS quota for CPU limits.
    #[serde(rename = "cpuCFSQuota")]
    pub cpu_cfs_quota: Option<bool>,
    /// `cpuCFSQuotaPeriod`: CFS quota period.
    #[serde(rename = "cpuCFSQuotaPeriod", with = "serde_go_opt")]
    pub cpu_cfs_quota_period: Option<Duration>,
    /// `nodeStatusMaxImages`: Images reported in the node status.
    pub node_status_max_images: Option<i32>,
    /// `maxOpenFiles`: Open files limit of the kubelet process.
    pub max_open_files: Option<i64>,
    /// `contentType`: Content type of API requests.
    pub content_type: Option<String>,
    /// `kubeAPIQPS`: API requests per second.
    #[serde(rename = "kubeAPIQPS")]
    pub kube_api_qps: Option<i32>,
    /// `kubeAPIBurst`: Burst of API requests.
    #[serde(rename = "kubeAPIBurst")]
    pub kube_api_burst: Option<i32>,
    /// `serializeImagePulls`: Pull images one at a time.
    pub serialize_image_pulls: Option<bool>,
    /// `evictionHard`: Hard eviction thresholds by signal (`memory.available: 100Mi`).
    pub eviction_hard: Option<BTreeMap<String, String>>,
    /// `evictionSoft`: Soft eviction thresholds by signal.
    pub eviction_soft: Option<BTreeMap<String, String>>,
    /// `evictionSoftGracePeriod`: Grace periods of the soft thresholds (`memory.available: 1m30s`).
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    /// `evictionPressureTransitionPeriod`: How long a pressure condition is held after the last breach.
    #[serde(with = "serde_go_opt")]
    pub eviction_pressure_transition_period: Option<Duration>,
    /// `evictionMaxPodGracePeriod`: Maximum grace period of pods evicted on a soft threshold.
    pub eviction_max_pod_grace_period: Option<i64>,
    /// `evictionMinimumReclaim`: Minimum reclaim by signal.
    pub eviction_minimum_reclaim: Option<BTreeMap<String, String>>,
    /// `podsPerCore`: Maximum pods per core.
    pub pods_per_core: Option<i32>,
    /// `enableControllerAttachDetach`: Volumes attached by the attach/detach controller.
    pub enable_controller_attach_detach: Option<bool>,
    /// `protectKernelDefaults`: Fail on kernel tunables other than expected.
    pub protect_kernel_defaults: Option<bool>,
    /// `makeIPTablesUtilChains`: Create the KUBE-MARK-* iptables chains.
    #[serde(rename = "makeIPTablesUtilChains")]
    pub make_iptables_util_chains: Option<bool>,
    /// `iptablesMasqueradeBit`: fwmark bit for SNAT.
    pub iptables_masquerade_bit: Option<i32>,
    /// `iptablesDropBit`: fwmark bit for dropping.
    pub iptables_drop_bit: Option<i32>,
    /// `featureGates`: Feature gates by name (`EventedPLEG: true`).
    pub feature_gates: Option<BTreeMap<String, bool>>,
    /// `failSwapOn`: Refuse to start with swap on.
    pub fail_swap_on: Option<bool>,
    /// `memorySwap`: Swap for workloads (NodeSwap).
    pub memory_swap: Option<MemorySwapConfiguration>,
    /// `containerLogMaxSize`: Maximum size of a container log file before it is rotated (a quantity, e.g. `10Mi`).
    pub container_log_max_size: Option<String>,
    /// `containerLogMaxFiles`: Maximum number of log files per container (the current one included).
    pub container_log_max_files: Option<i32>,
    /// `configMapAndSecretChangeDetectionStrategy`: How configMap and secret changes are found.
    pub config_map_and_secret_change_detection_strategy: Option<String>,
    /// `systemReserved`: Resources reserved for the system.
    pub system_reserved: Option<BTreeMap<String, String>>,
    /// `kubeReserved`: Resources reserved for Kubernetes daemons.
    pub kube_reserved: Option<BTreeMap<String, String>>,
    /// `reservedSystemCPUs`: CPUs reserved for the system.
    #[serde(rename = "reservedSystemCPUs")]
    pub reserved_system_cpus: Option<String>,
    /// `showHiddenMetricsForVersion`: Show metrics hidden since this version.
    pub show_hidden_metrics_for_version: Option<String>,
    /// `systemReservedCgroup`: Cgroup enforcing systemReserved.
    pub system_reserved_cgroup: Option<String>,
    /// `kubeReservedCgroup`: Cgroup enforcing kubeReserved.
    pub kube_reserved_cgroup: Option<String>,
    /// `enforceNodeAllocatable`: Node allocatable enforcement.
    pub enforce_node_allocatable: Option<Vec<String>>,
    /// `allowedUnsafeSysctls`: Unsafe sysctls pods may set.
    pub allowed_unsafe_sysctls: Option<Vec<String>>,
    /// `volumePluginDir`: FlexVolume plugin directory.
    pub volume_plugin_dir: Option<String>,
    /// `providerID`: The node's provider ID.
    #[serde(rename = "providerID")]
    pub provider_id: Option<String>,
    /// `kernelMemcgNotification`: Memory eviction by memcg notification.
    pub kernel_memcg_notification: Option<bool>,
    /// `logging`: Logging (format, verbosity).
    pub logging: Option<LoggingConfiguration>,
    /// `enableSystemLogHandler`: Serve /logs/.
    pub enable_system_log_handler: Option<bool>,
    /// `shutdownGracePeriod`: Graceful node shutdown: total delay.
    #[serde(with = "serde_go_opt")]
    pub shutdown_grace_period: Option<Duration>,
    /// `shutdownGracePeriodCriticalPods`: Graceful node shutdown: the part for critical pods.
    #[serde(with = "serde_go_opt")]
    pub shutdown_grace_period_critical_pods: Option<Duration>,
    /// `shutdownGracePeriodByPodPriority`: Graceful node shutdown by pod priority.
    pub shutdown_grace_period_by_pod_priority: Option<Vec<ShutdownGracePeriodByPodPriority>>,
    /// `reservedMemory`: Memory reserved per NUMA node.
    pub reserved_memory: Option<Vec<MemoryReservation>>,
    /// `enableProfilingHandler`: Serve /debug/pprof.
    pub enable_profiling_handler: Option<bool>,
    /// `enableDebugFlagsHandler`: Serve /debug/flags/v.
    pub enable_debug_flags_handler: Option<bool>,
    /// `seccompDefault`: RuntimeDefault seccomp for every workload.
    pub seccomp_default: Option<bool>,
    /// `memoryThrottlingFactor`: memory.high factor (MemoryQoS).
    pub memory_throttling_factor: Option<f64>,
    /// `registerWithTaints`: Taints of the Node at registration.
    pub register_with_taints: Option<Vec<Taint>>,
    /// `registerNode`: Register the node with the API server.
    pub register_node: Option<bool>,
    /// `tracing`: OpenTelemetry tracing.
    pub tracing: Option<TracingConfiguration>,
    /// `localStorageCapacityIsolation`: Ephemeral storage requests and limits.
    pub local_storage_capacity_isolation: Option<bool>,
    /// `containerRuntimeEndpoint`: CRI runtime endpoint (upstream 1.27+; accepted here too).
    pub container_runtime_endpoint: Option<String>,
    /// `imageServiceEndpoint`: CRI image endpoint (upstream 1.27+; accepted here too).
    pub image_service_endpoint: Option<String>,
    /// `containerLogMonitorInterval`: How often container logs are checked for rotation (upstream 1.30+; accepted here too).
    #[serde(with = "serde_go_opt")]
    pub container_log_monitor_interval: Option<Duration>,
}

/// A value that is a number or a string (Go `resource.QuantityValue`, or the 1.26 logging
/// `flushFrequency`, a `time.Duration` in nanoseconds that later versions also take as a
/// duration string).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    /// A number.
    Int(i64),
    /// A string.
    Str(String),
}

impl IntOrString {
    /// Is this zero (`0`, `"0"`, `"0s"`)?
    pub fn is_zero(&self) -> bool {
        match self {
            IntOrString::Int(n) => *n == 0,
            IntOrString::Str(s) => {
                let s = s.trim();
                s.is_empty() || s.trim_start_matches(['0', '.']).is_empty() || s == "0s"
            }
        }
    }
}

/// `authentication`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletAuthentication {
    /// x509 client certificates.
    pub x509: Option<KubeletX509Authentication>,
    /// Bearer tokens through TokenReviews (not implemented).
    pub webhook: Option<KubeletWebhookAuthentication>,
    /// Anonymous requests.
    pub anonymous: Option<KubeletAnonymousAuthentication>,
}

/// `authentication.x509`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletX509Authentication {
    /// CA bundle of client certificates.
    #[serde(rename = "clientCAFile")]
    pub client_ca_file: Option<PathBuf>,
}

/// `authentication.webhook`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletWebhookAuthentication {
    /// Bearer token authentication (upstream default true).
    pub enabled: Option<bool>,
    /// Cache of TokenReview results.
    #[serde(rename = "cacheTTL", with = "serde_go_opt")]
    pub cache_ttl: Option<Duration>,
}

/// `authentication.anonymous`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletAnonymousAuthentication {
    /// Anonymous requests allowed.
    pub enabled: Option<bool>,
}

/// `authorization`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletAuthorization {
    /// `AlwaysAllow` or `Webhook` (upstream default).
    pub mode: Option<String>,
    /// SubjectAccessReview caching.
    pub webhook: Option<KubeletWebhookAuthorization>,
}

/// `authorization.webhook`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletWebhookAuthorization {
    /// Cache of allowed answers.
    #[serde(rename = "cacheAuthorizedTTL", with = "serde_go_opt")]
    pub cache_authorized_ttl: Option<Duration>,
    /// Cache of denied answers.
    #[serde(rename = "cacheUnauthorizedTTL", with = "serde_go_opt")]
    pub cache_unauthorized_ttl: Option<Duration>,
}

/// `logging` (component-base `LoggingConfiguration` v1 of 1.26).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LoggingConfiguration {
    /// `text` (default) or `json`.
    pub format: Option<String>,
    /// Maximum time between flushes (ours: every line is written at once).
    pub flush_frequency: Option<IntOrString>,
    /// klog verbosity.
    pub verbosity: Option<u32>,
    /// Per-file verbosity.
    pub vmodule: Option<Vec<VModuleItem>>,
    /// Format options.
    pub options: Option<FormatOptions>,
}

/// `logging.vmodule[]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct VModuleItem {
    /// File pattern.
    pub file_pattern: Option<String>,
    /// Its verbosity.
    pub verbosity: Option<u32>,
}

/// `logging.options`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct FormatOptions {
    /// JSON format options.
    pub json: Option<JsonOptions>,
}

/// `logging.options.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct JsonOptions {
    /// Info to stdout, errors to stderr.
    pub split_stream: Option<bool>,
    /// Buffer of the info stream (a quantity).
    pub info_buffer_size: Option<IntOrString>,
}

/// `memorySwap`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemorySwapConfiguration {
    /// "", `LimitedSwap` or `UnlimitedSwap`.
    pub swap_behavior: Option<String>,
}

/// `shutdownGracePeriodByPodPriority[]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ShutdownGracePeriodByPodPriority {
    /// Priority.
    pub priority: Option<i32>,
    /// Grace period in seconds.
    pub shutdown_grace_period_seconds: Option<i64>,
}

/// `reservedMemory[]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemoryReservation {
    /// NUMA node.
    pub numa_node: Option<i32>,
    /// Reserved amounts by resource.
    pub limits: Option<BTreeMap<String, IntOrString>>,
}

/// `registerWithTaints[]` (core/v1 `Taint`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Taint {
    /// Key.
    pub key: Option<String>,
    /// Value.
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: Option<String>,
    /// When added.
    pub time_added: Option<String>,
}

/// `tracing`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TracingConfiguration {
    /// Collector endpoint.
    pub endpoint: Option<String>,
    /// Sampling rate.
    pub sampling_rate_per_million: Option<i32>,
}

impl KubeletConfiguration {
    /// Decode strictly from YAML or JSON text; `path` is for messages. Zero values are kept
    /// as written ([`Self::normalize`] applies upstream's defaulting).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let decode = |reason: String| ConfigError::Decode {
            path: path.to_path_buf(),
            reason,
        };
        let cfg: Self = if text.trim().is_empty() {
            Self::default()
        } else if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|e| decode(e.to_string()))?
        } else {
            serde_saphyr::from_str(text).map_err(|e| decode(short_yaml_error(&e.to_string())))?
        };
        for (field, value, want) in [
            ("apiVersion", &cfg.api_version, API_VERSION),
            ("kind", &cfg.kind, KIND),
        ] {
            if let Some(v) = value
                && v != want
            {
                return Err(ConfigError::TypeMeta {
                    path: path.to_path_buf(),
                    field,
                    value: v.clone(),
                    want,
                });
            }
        }
        cfg.validate().map_err(decode)?;
        Ok(cfg)
    }

    /// Read and decode a file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Values upstream's validation refuses and this kubelet relies on.
    fn validate(&self) -> Result<(), String> {
        let one_of = |field: &str, v: &Option<String>, allowed: &[&str]| match v {
            Some(v) if !allowed.contains(&v.as_str()) => Err(format!(
                "invalid value {v:?} for {field}: must be one of {}",
                allowed.join(", ")
            )),
            _ => Ok(()),
        };
        one_of(
            "authorization.mode",
            &self.authorization.as_ref().and_then(|a| a.mode.clone()),
            &["AlwaysAllow", "Webhook"],
        )?;
        one_of(
            "logging.format",
            &self.logging.as_ref().and_then(|l| l.format.clone()),
            &["text", "json"],
        )?;
        one_of(
            "memorySwap.swapBehavior",
            &self
                .memory_swap
                .as_ref()
                .and_then(|m| m.swap_behavior.clone()),
            &["", "LimitedSwap", "UnlimitedSwap"],
        )?;
        one_of(
            "cgroupDriver",
            &self.cgroup_driver,
            &["", "cgroupfs", "systemd"],
        )?;
        for ip in self.cluster_dns.iter().flatten() {
            if ip.parse::<std::net::IpAddr>().is_err() {
                return Err(format!(
                    "invalid value {ip:?} for clusterDNS: not an IP address"
                ));
            }
        }
        if let Some(p) = self.healthz_port
            && !(0..=65535).contains(&p)
        {
            return Err(format!(
                "invalid value {p} for healthzPort: must be 0 to 65535"
            ));
        }
        if let (Some(g), Some(c)) = (
            self.shutdown_grace_period,
            self.shutdown_grace_period_critical_pods,
        ) && c > g
        {
            return Err(
                "shutdownGracePeriodCriticalPods must be <= shutdownGracePeriod".to_string(),
            );
        }
        Ok(())
    }

    /// Upstream defaulting of zero values (`SetDefaults_KubeletConfiguration`): a zero
    /// duration, a zero port/count or an empty string means "the default" for the fields
    /// upstream defaults that way (kubeadm writes `0s` for most durations). After this, `None`
    /// means "the default".
    pub fn normalize(&mut self) {
        fn zero_dur(d: &mut Option<Duration>) {
            if *d == Some(Duration::ZERO) {
                *d = None;
            }
        }
        fn zero_int<T: Default + PartialEq>(v: &mut Option<T>) {
            if v.as_ref() == Some(&T::default()) {
                *v = None;
            }
        }
        for d in [
            &mut self.sync_frequency,
            &mut self.file_check_frequency,
            &mut self.http_check_frequency,
            &mut self.streaming_connection_idle_timeout,
            &mut self.node_status_update_frequency,
            &mut self.node_status_report_frequency,
            &mut self.image_minimum_gc_age,
            &mut self.volume_stats_agg_period,
            &mut self.cpu_manager_reconcile_period,
            &mut self.runtime_request_timeout,
            &mut self.eviction_pressure_transition_period,
        ] {
            zero_dur(d);
        }
        for v in [
            &mut self.port,
            &mut self.node_lease_duration_seconds,
            &mut self.max_pods,
            &mut self.registry_burst,
            &mut self.event_burst,
            &mut self.kube_api_burst,
        ] {
            zero_int(v);
        }
        zero_int(&mut self.max_open_files);
        for v in [
            &mut self.address,
            &mut self.healthz_bind_address,
            &mut self.cgroup_driver,
            &mut self.cpu_manager_policy,
            &mut self.memory_manager_policy,
            &mut self.topology_manager_policy,
            &mut self.topology_manager_scope,
            &mut self.hairpin_mode,
            &mut self.content_type,
            &mut self.container_log_max_size,
            &mut self.config_map_and_secret_change_detection_strategy,
            &mut self.volume_plugin_dir,
        ] {
            zero_int(v);
        }
        if let Some(p) = self.pod_pids_limit
            && p < 0
        {
            self.pod_pids_limit = None;
        }
    }

    /// The fields set in the file to a value this kubelet does not act on (a feature it does
    /// not have), by their upstream names, in file order of the type. A field set to the value
    /// under which upstream does nothing either (`shutdownGracePeriod: 0s`, `memorySwap: {}`,
    /// `rotateCertificates: false`, ...) is not named. Call before [`Self::normalize`].
    pub fn ignored_fields(&self) -> Vec<&'static str> {
        let mut out = vec![];
        let mut note = |name: &'static str, ignored: bool| {
            if ignored {
                out.push(name);
            }
        };
        let nonempty_str = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.is_empty());
        let is_true = |v: &Option<bool>| *v == Some(true);
        let is_false = |v: &Option<bool>| *v == Some(false);
        let nonzero_dur = |v: &Option<Duration>| v.is_some_and(|d| !d.is_zero());
        note(
            "tlsCipherSuites",
            self.tls_cipher_suites
                .as_ref()
                .is_some_and(|v| !v.is_empty()),
        );
        note("tlsMinVersion", nonempty_str(&self.tls_min_version));
        note("rotateCertificates", is_true(&self.rotate_certificates));
        note("serverTLSBootstrap", is_true(&self.server_tls_bootstrap));
        note(
            "authentication.webhook",
            self.authentication
                .as_ref()
                .and_then(|a| a.webhook.as_ref())
                .is_some_and(|w| w.enabled != Some(false)),
        );
        note(
            "authorization",
            self.authorization
                .as_ref()
                .is_some_and(|a| a.mode.as_deref() != Some("AlwaysAllow")),
        );
        note(
            "registryPullQPS",
            self.registry_pull_qps.is_some_and(|q| q != 0),
        );
        note(
            "registryBurst",
            self.registry_burst.is_some() && self.registry_pull_qps != Some(0),
        );
        note(
            "eventRecordQPS",
            self.event_record_qps.is_some_and(|q| q != 0),
        );
        note(
            "eventBurst",
            self.event_burst.is_some() && self.event_record_qps != Some(0),
        );
        note(
            "enableDebuggingHandlers",
            is_false(&self.enable_debugging_handlers),
        );
        note(
            "enableContentionProfiling",
            is_true(&self.enable_contention_profiling),
        );
        note(
            "volumeStatsAggPeriod",
            self.volume_stats_agg_period.is_some(),
        );
        note("kubeletCgroups", nonempty_str(&self.kubelet_cgroups));
        note("systemCgroups", nonempty_str(&self.system_cgroups));
        let static_cpu = self
            .cpu_manager_policy
            .as_deref()
            .is_some_and(|p| !p.is_empty() && !p.eq_ignore_ascii_case("none"));
        note("cpuManagerPolicy", static_cpu);
        note(
            "cpuManagerPolicyOptions",
            self.cpu_manager_policy_options
                .as_ref()
                .is_some_and(|m| !m.is_empty()),
        );
        note(
            "cpuManagerReconcilePeriod",
            static_cpu && self.cpu_manager_reconcile_period.is_some(),
        );
        note(
            "memoryManagerPolicy",
            self.memory_manager_policy
                .as_deref()
                .is_some_and(|p| !p.is_empty() && !p.eq_ignore_ascii_case("none")),
        );
        let topology = self
            .topology_manager_policy
            .as_deref()
            .is_some_and(|p| !p.is_empty() && p != "none");
        note("topologyManagerPolicy", topology);
        note(
            "topologyManagerScope",
            topology && self.topology_manager_scope.is_some(),
        );
        note(
            "topologyManagerPolicyOptions",
            self.topology_manager_policy_options
                .as_ref()
                .is_some_and(|m| !m.is_empty()),
        );
        note(
            "qosReserved",
            self.qos_reserved.as_ref().is_some_and(|m| !m.is_empty()),
        );
        note(
            "hairpinMode",
            self.hairpin_mode
                .as_deref()
                .is_some_and(|h| !h.is_empty() && h != "promiscuous-bridge"),
        );
        note("podCIDR", nonempty_str(&self.pod_cidr));
        note("podPidsLimit", self.pod_pids_limit.is_some_and(|p| p > 0));
        note("runOnce", is_true(&self.run_once));
        note("cpuCFSQuota", is_false(&self.cpu_cfs_quota));
        note(
            "cpuCFSQuotaPeriod",
            self.cpu_cfs_quota_period
                .is_some_and(|p| p != Duration::from_millis(100)),
        );
        note(
            "contentType",
            self.content_type
                .as_deref()
                .is_some_and(|c| !c.is_empty() && c != "application/json"),
        );
        note("kubeAPIQPS", self.kube_api_qps.is_some());
        note("kubeAPIBurst", self.kube_api_burst.is_some_and(|b| b != 0));
        note("serializeImagePulls", self.serialize_image_pulls.is_some());
        note("podsPerCore", self.pods_per_core.is_some_and(|n| n != 0));
        note(
            "enableControllerAttachDetach",
            is_false(&self.enable_controller_attach_detach),
        );
        note(
            "protectKernelDefaults",
            is_true(&self.protect_kernel_defaults),
        );
        note(
            "makeIPTablesUtilChains",
            self.make_iptables_util_chains.is_some() && !is_false(&self.make_iptables_util_chains),
        );
        note(
            "iptablesMasqueradeBit",
            self.iptables_masquerade_bit.is_some(),
        );
        note("iptablesDropBit", self.iptables_drop_bit.is_some());
        note(
            "memorySwap",
            self.memory_swap
                .as_ref()
                .is_some_and(|m| nonempty_str(&m.swap_behavior)),
        );
        note(
            "configMapAndSecretChangeDetectionStrategy",
            self.config_map_and_secret_change_detection_strategy
                .as_deref()
                .is_some_and(|s| !s.is_empty() && s != "Get"),
        );
        let nonempty_map =
            |m: &Option<BTreeMap<String, String>>| m.as_ref().is_some_and(|m| !m.is_empty());
        note("systemReserved", nonempty_map(&self.system_reserved));
        note("kubeReserved", nonempty_map(&self.kube_reserved));
        note(
            "reservedSystemCPUs",
            nonempty_str(&self.reserved_system_cpus),
        );
        note(
            "showHiddenMetricsForVersion",
            nonempty_str(&self.show_hidden_metrics_for_version),
        );
        note(
            "systemReservedCgroup",
            nonempty_str(&self.system_reserved_cgroup),
        );
        note(
            "kubeReservedCgroup",
            nonempty_str(&self.kube_reserved_cgroup),
        );
        note(
            "enforceNodeAllocatable",
            self.enforce_node_allocatable
                .as_ref()
                .is_some_and(|v| v.iter().any(|e| e != "none")),
        );
        note(
            "allowedUnsafeSysctls",
            self.allowed_unsafe_sysctls
                .as_ref()
                .is_some_and(|v| !v.is_empty()),
        );
        note("volumePluginDir", nonempty_str(&self.volume_plugin_dir));
        note("providerID", nonempty_str(&self.provider_id));
        note(
            "kernelMemcgNotification",
            is_true(&self.kernel_memcg_notification),
        );
        if let Some(l) = &self.logging {
            note(
                "logging.vmodule",
                l.vmodule.as_ref().is_some_and(|v| !v.is_empty()),
            );
            let json = l.options.as_ref().and_then(|o| o.json.as_ref());
            note(
                "logging.options.json.splitStream",
                json.is_some_and(|j| is_true(&j.split_stream)),
            );
            note(
                "logging.options.json.infoBufferSize",
                json.and_then(|j| j.info_buffer_size.as_ref())
                    .is_some_and(|b| !b.is_zero()),
            );
        }
        note(
            "enableSystemLogHandler",
            is_true(&self.enable_system_log_handler),
        );
        note(
            "shutdownGracePeriod",
            nonzero_dur(&self.shutdown_grace_period),
        );
        note(
            "shutdownGracePeriodCriticalPods",
            nonzero_dur(&self.shutdown_grace_period_critical_pods),
        );
        note(
            "shutdownGracePeriodByPodPriority",
            self.shutdown_grace_period_by_pod_priority
                .as_ref()
                .is_some_and(|v| !v.is_empty()),
        );
        note(
            "reservedMemory",
            self.reserved_memory.as_ref().is_some_and(|v| !v.is_empty()),
        );
        note(
            "enableProfilingHandler",
            is_true(&self.enable_profiling_handler),
        );
        note(
            "enableDebugFlagsHandler",
            is_true(&self.enable_debug_flags_handler),
        );
        note("seccompDefault", is_true(&self.seccomp_default));
        let gate = |name: &str| {
            self.feature_gates
                .as_ref()
                .and_then(|g| g.get(name))
                .copied()
                .unwrap_or(false)
        };
        note(
            "memoryThrottlingFactor",
            self.memory_throttling_factor.is_some() && gate("MemoryQoS"),
        );
        note("tracing", self.tracing.is_some());
        note(
            "localStorageCapacityIsolation",
            is_false(&self.local_storage_capacity_isolation),
        );
        out
    }
}

/// serde-saphyr's message is several lines with a source excerpt and, for an unknown field,
/// every known name: keep the first line up to the list ("line 4 column 1: unknown field
/// `staticPodPaht`").
fn short_yaml_error(msg: &str) -> String {
    let first = msg.lines().next().unwrap_or(msg);
    let first = first.strip_prefix("error: ").unwrap_or(first);
    match first.find(", expected one of") {
        Some(i) => first[..i].to_string(),
        None => first.to_string(),
    }
}

/// The resolved configuration used by the rest of the kubelet.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletConfig {
    /// The node name: `--hostname-override` or the host name, lowercased.
    pub node_name: String,
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
    /// Use the evented PLEG.
    pub evented_pleg: bool,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_upstream_field_names() {
        let yaml = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: /etc/kubernetes/manifests\nstaticPodURL: http://example/pods\nstaticPodURLHeader:\n  X-A: [\"1\", \"2\"]\nfileCheckFrequency: 5s\nhttpCheckFrequency: 1m30s\nsyncFrequency: 30s\naddress: 0.0.0.0\nreadOnlyPort: 0\nmaxPods: 50\nruntimeRequestTimeout: 10m\ncontainerRuntimeEndpoint: unix:///run/containerd/containerd.sock\nimageServiceEndpoint: unix:///run/img.sock\n";
        let c = KubeletConfiguration::parse(yaml, Path::new("c.yaml")).expect("parse");
        assert_eq!(
            c.static_pod_path.as_deref(),
            Some(Path::new("/etc/kubernetes/manifests"))
        );
        assert_eq!(c.static_pod_url.as_deref(), Some("http://example/pods"));
        assert_eq!(
            c.static_pod_url_header
                .as_ref()
                .and_then(|h| h.get("X-A"))
                .cloned(),
            Some(vec!["1".to_string(), "2".to_string()])
        );
        assert_eq!(c.file_check_frequency, Some(Duration::from_secs(5)));
        assert_eq!(c.http_check_frequency, Some(Duration::from_secs(90)));
        assert_eq!(c.sync_frequency, Some(Duration::from_secs(30)));
        assert_eq!(c.read_only_port, Some(0));
        assert_eq!(c.max_pods, Some(50));
        assert_eq!(c.runtime_request_timeout, Some(Duration::from_secs(600)));
        let json = serde_json::to_string(&c).expect("json");
        assert!(json.contains("\"staticPodURL\""));
        assert!(json.contains("\"httpCheckFrequency\":\"1m30s\""));
        assert_eq!(
            KubeletConfiguration::parse(&json, Path::new("c.json")).expect("json"),
            c
        );
    }

    #[test]
    fn unknown_field_is_named() {
        let err = KubeletConfiguration::parse("maxPods: 3\nfooBar: 1\n", Path::new("c.yaml"))
            .expect_err("unknown field");
        assert!(err.to_string().contains("fooBar"), "{err}");
        let err = KubeletConfiguration::parse("fileCheckFrequency: soon\n", Path::new("c.yaml"))
            .expect_err("bad duration");
        assert!(err.to_string().contains("invalid duration"), "{err}");
        let err =
            KubeletConfiguration::parse("kind: Pod\n", Path::new("c.yaml")).expect_err("kind");
        assert!(matches!(err, ConfigError::TypeMeta { field: "kind", .. }));
    }

    const KUBEADM: &str = include_str!("../../integration/tests/fixtures/kubeadm/config-1.26.yaml");

    #[test]
    fn kubeadm_1_26_config_decodes_with_four_ignored_fields() {
        let c = KubeletConfiguration::parse(KUBEADM, Path::new("config.yaml")).expect("kubeadm");
        assert_eq!(
            c.ignored_fields(),
            vec![
                "rotateCertificates",
                "authentication.webhook",
                "authorization",
                "volumeStatsAggPeriod"
            ]
        );
        assert_eq!(c.cluster_dns, Some(vec!["10.96.0.10".to_string()]));
        assert_eq!(c.healthz_port, Some(10248));
        assert_eq!(c.sync_frequency, Some(Duration::ZERO));
        let mut n = c.clone();
        n.normalize();
        // kubeadm's 0s mean "the default".
        assert_eq!(n.sync_frequency, None);
        assert_eq!(n.runtime_request_timeout, None);
        assert_eq!(n.streaming_connection_idle_timeout, None);
        assert_eq!(n.cluster_domain.as_deref(), Some("cluster.local"));
        assert_eq!(
            n.resolv_conf.as_deref(),
            Some("/run/systemd/resolve/resolv.conf")
        );
        // The same file as JSON decodes the same.
        let json = serde_json::to_string(&c).expect("json");
        assert_eq!(
            KubeletConfiguration::parse(&json, Path::new("c.json")).expect("json"),
            c
        );
    }

    #[test]
    fn misspelled_fields_are_named_with_their_line() {
        let text = KUBEADM.replace("clusterDomain:", "clusterDomian:");
        let err = KubeletConfiguration::parse(&text, Path::new("config.yaml"))
            .expect_err("misspelled")
            .to_string();
        assert!(err.contains("unknown field `clusterDomian`"), "{err}");
        assert!(err.contains("line 18"), "{err}");
        assert!(!err.contains("expected one of"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        // Nested structures are strict too.
        let text = KUBEADM.replace("    cacheTTL: 0s", "    cacheTtl: 0s");
        let err = KubeletConfiguration::parse(&text, Path::new("config.yaml"))
            .expect_err("nested")
            .to_string();
        assert!(err.contains("cacheTtl") && err.contains("line 6"), "{err}");
        let err =
            KubeletConfiguration::parse("logging:\n  format: xml\n", Path::new("config.yaml"))
                .expect_err("format");
        assert!(err.to_string().contains("logging.format"), "{err}");
        let err = KubeletConfiguration::parse("clusterDNS: [dns]\n", Path::new("c.yaml"))
            .expect_err("ip");
        assert!(err.to_string().contains("clusterDNS"), "{err}");
    }

    #[test]
    fn every_1_26_field_is_known() {
        // Every field of the 1.26 v1beta1 type, each set once.
        let yaml = "enableServer: true\nstaticPodPath: /m\nsyncFrequency: 1m\nfileCheckFrequency: 20s\nhttpCheckFrequency: 20s\nstaticPodURL: http://x\nstaticPodURLHeader: {a: [b]}\naddress: 0.0.0.0\nport: 10250\nreadOnlyPort: 0\ntlsCertFile: /c\ntlsPrivateKeyFile: /k\ntlsCipherSuites: [TLS_AES_128_GCM_SHA256]\ntlsMinVersion: VersionTLS12\nrotateCertificates: true\nserverTLSBootstrap: true\nauthentication: {x509: {clientCAFile: /ca}, webhook: {enabled: true, cacheTTL: 2m}, anonymous: {enabled: false}}\nauthorization: {mode: Webhook, webhook: {cacheAuthorizedTTL: 5m, cacheUnauthorizedTTL: 30s}}\nregistryPullQPS: 5\nregistryBurst: 10\neventRecordQPS: 5\neventBurst: 10\nenableDebuggingHandlers: true\nenableContentionProfiling: false\nhealthzPort: 10248\nhealthzBindAddress: 127.0.0.1\noomScoreAdj: -999\nclusterDomain: cluster.local\nclusterDNS: [10.96.0.10]\nstreamingConnectionIdleTimeout: 4h\nnodeStatusUpdateFrequency: 10s\nnodeStatusReportFrequency: 5m\nnodeLeaseDurationSeconds: 40\nimageMinimumGCAge: 2m\nimageGCHighThresholdPercent: 85\nimageGCLowThresholdPercent: 80\nvolumeStatsAggPeriod: 1m\nkubeletCgroups: /k\nsystemCgroups: /s\ncgroupRoot: /\ncgroupsPerQOS: true\ncgroupDriver: cgroupfs\ncpuManagerPolicy: none\ncpuManagerPolicyOptions: {a: b}\ncpuManagerReconcilePeriod: 10s\nmemoryManagerPolicy: None\ntopologyManagerPolicy: none\ntopologyManagerScope: container\ntopologyManagerPolicyOptions: {a: b}\nqosReserved: {memory: 50%}\nruntimeRequestTimeout: 2m\nhairpinMode: promiscuous-bridge\nmaxPods: 110\npodCIDR: 10.0.0.0/24\npodPidsLimit: -1\nresolvConf: /etc/resolv.conf\nrunOnce: false\ncpuCFSQuota: true\ncpuCFSQuotaPeriod: 100ms\nnodeStatusMaxImages: 50\nmaxOpenFiles: 1000000\ncontentType: application/vnd.kubernetes.protobuf\nkubeAPIQPS: 5\nkubeAPIBurst: 10\nserializeImagePulls: true\nevictionHard: {memory.available: 100Mi}\nevictionSoft: {}\nevictionSoftGracePeriod: {}\nevictionPressureTransitionPeriod: 5m\nevictionMaxPodGracePeriod: 0\nevictionMinimumReclaim: {}\npodsPerCore: 0\nenableControllerAttachDetach: true\nprotectKernelDefaults: false\nmakeIPTablesUtilChains: true\niptablesMasqueradeBit: 14\niptablesDropBit: 15\nfeatureGates: {EventedPLEG: false}\nfailSwapOn: true\nmemorySwap: {swapBehavior: LimitedSwap}\ncontainerLogMaxSize: 10Mi\ncontainerLogMaxFiles: 5\nconfigMapAndSecretChangeDetectionStrategy: Watch\nsystemReserved: {cpu: 100m}\nkubeReserved: {cpu: 100m}\nreservedSystemCPUs: \"0\"\nshowHiddenMetricsForVersion: \"1.25\"\nsystemReservedCgroup: /s\nkubeReservedCgroup: /k\nenforceNodeAllocatable: [pods]\nallowedUnsafeSysctls: [net.core.somaxconn]\nvolumePluginDir: /v\nproviderID: p\nkernelMemcgNotification: false\nlogging: {format: json, flushFrequency: 5s, verbosity: 2, vmodule: [{filePattern: x, verbosity: 3}], options: {json: {splitStream: false, infoBufferSize: 0}}}\nenableSystemLogHandler: true\nshutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\nshutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 30}]\nreservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]\nenableProfilingHandler: true\nenableDebugFlagsHandler: true\nseccompDefault: false\nmemoryThrottlingFactor: 0.8\nregisterWithTaints: [{key: k, value: v, effect: NoSchedule}]\nregisterNode: true\ntracing: {endpoint: localhost:4317, samplingRatePerMillion: 0}\nlocalStorageCapacityIsolation: true\n";
        let c = KubeletConfiguration::parse(yaml, Path::new("all.yaml")).expect("every field");
        let set = serde_json::to_value(&c).expect("json");
        let nulls: Vec<&String> = set
            .as_object()
            .expect("object")
            .iter()
            .filter(|(_, v)| v.is_null())
            .map(|(k, _)| k)
            .collect();
        // Only the type meta and the three fields of later versions are left unset.
        assert_eq!(nulls.len(), 5, "{nulls:?}");
        let ignored = c.ignored_fields();
        for f in [
            "tlsCipherSuites",
            "serverTLSBootstrap",
            "memorySwap",
            "shutdownGracePeriod",
            "shutdownGracePeriodCriticalPods",
            "tracing",
            "logging.vmodule",
        ] {
            assert!(ignored.contains(&f), "{f}: {ignored:?}");
        }
        for f in ["clusterDNS", "logging", "healthzPort", "oomScoreAdj"] {
            assert!(!ignored.contains(&f), "{f}");
        }
    }
}
