//! The config file's types (upstream `k8s.io/kubelet/config/v1beta1/types.go`
//! `KubeletConfiguration` of Kubernetes 1.26 and its nested types), every field optional,
//! decoded strictly (an unknown field is an error naming it).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::serde_go_opt;

/// The config file's `apiVersion`.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The config file's `kind`.
pub const KIND: &str = "KubeletConfiguration";

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
