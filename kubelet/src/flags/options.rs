//! The kubelet's command line (upstream `cmd/kubelet/app/options/options.go` `KubeletFlags`
//! and the `KubeletConfiguration` flags of `AddKubeletConfigFlags`): one clap field per flag,
//! with upstream's names and defaults.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::duration::parse_duration_arg;

/// A Go duration that must be positive.
fn parse_positive_duration_arg(s: &str) -> Result<Duration, String> {
    let d = parse_duration_arg(s)?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

/// The kubelet's flags.
#[derive(Debug, Clone, Parser, PartialEq)]
// Like Go's flag package, a flag given twice takes the last value, and a value may be negative
// (`--port -1` is a bad port, not an unknown flag).
#[command(
    name = "kubelet",
    about = "The Kubernetes node agent",
    args_override_self = true,
    allow_negative_numbers = true
)]
pub struct KubeletFlags {
    /// Path to a KubeletConfiguration file; explicit flags override its values.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// CRI runtime endpoint; when omitted the kubelet embeds dockershim.
    #[arg(long)]
    pub container_runtime_endpoint: Option<String>,
    /// CRI image endpoint (defaults to the runtime endpoint).
    #[arg(long)]
    pub image_service_endpoint: Option<String>,
    /// Docker endpoint for the embedded dockershim.
    #[arg(long, default_value = "unix:///var/run/docker.sock")]
    pub docker_endpoint: String,
    /// The sandbox (pause) image.
    #[arg(long, default_value = "registry.k8s.io/pause:3.9")]
    pub pod_infra_container_image: String,
    /// Directory (or file) of static pod manifests.
    #[arg(long)]
    pub pod_manifest_path: Option<PathBuf>,
    /// URL of static pod manifests.
    #[arg(long)]
    pub manifest_url: Option<String>,
    /// HTTP headers for --manifest-url: `key:value` pairs, comma-separated or repeated.
    #[arg(long)]
    pub manifest_url_header: Vec<String>,
    /// How often to re-list --pod-manifest-path.
    #[arg(long, default_value = "20s", value_parser = parse_duration_arg)]
    pub file_check_frequency: Duration,
    /// How often to poll --manifest-url.
    #[arg(long, default_value = "20s", value_parser = parse_duration_arg)]
    pub http_check_frequency: Duration,
    /// Max period between syncs of running pods.
    #[arg(long, default_value = "1m", value_parser = parse_duration_arg)]
    pub sync_frequency: Duration,
    /// Use this name instead of the host name.
    #[arg(long)]
    pub hostname_override: Option<String>,
    /// Kubelet state directory.
    #[arg(long, default_value = "/var/lib/kubelet")]
    pub root_dir: PathBuf,
    /// Maximum pods on this node.
    #[arg(long, default_value_t = 110)]
    pub max_pods: i32,
    /// Address of the kubelet's server.
    #[arg(long, default_value = "127.0.0.1")]
    pub address: String,
    /// Read-only port (0 disables it).
    #[arg(long, default_value_t = 10255)]
    pub read_only_port: i32,
    /// Timeout of runtime requests except long-running ones.
    #[arg(long, default_value = "2m", value_parser = parse_duration_arg)]
    pub runtime_request_timeout: Duration,
    /// Use the runtime's container event stream instead of polling (EventedPLEG).
    #[arg(long)]
    pub evented_pleg: bool,
    /// Feature gates: comma-separated `Name=true|false` (`EventedPLEG=true`).
    #[arg(long, default_value = "")]
    pub feature_gates: String,
    /// Dockershim-era network plugin for the embedded dockershim: `cni`, or empty for
    /// Docker's default bridge.
    #[arg(long, default_value = "")]
    pub network_plugin: String,
    /// Kubelet 1.23's dockershim flag: a pull of the embedded dockershim that makes no progress
    /// for this long is cancelled.
    #[arg(long, default_value = "1m0s", value_parser = parse_positive_duration_arg)]
    pub image_pull_progress_deadline: Duration,
    /// The CNI directories of the embedded dockershim (`--cni-bin-dir`, `--cni-conf-dir`,
    /// `--cni-cache-dir`), the same group dockershim takes.
    #[command(flatten)]
    pub cni: node_common::cni::CniDirFlags,
    /// kubeconfig of the API server; without it (or empty) the kubelet runs standalone; an
    /// unusable one stops it at start-up.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Register the node with the API server.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub register_node: bool,
    /// The node's IP address (default: the address of the default route).
    #[arg(long)]
    pub node_ip: Option<String>,
    /// Labels for the node at registration: `key=value` pairs, comma-separated.
    #[arg(long, default_value = "")]
    pub node_labels: String,
    /// Resources reserved for Kubernetes system daemons (`cpu=100m,memory=100Mi,...`),
    /// subtracted from the node's allocatable (`kubeReserved`).
    #[arg(long, default_value = "")]
    pub kube_reserved: String,
    /// Resources reserved for the OS' system daemons (`systemReserved`), likewise.
    #[arg(long, default_value = "")]
    pub system_reserved: String,
    /// How often the node status is computed and written when it changed.
    #[arg(long, default_value = "10s", value_parser = parse_duration_arg)]
    pub node_status_update_frequency: Duration,
    /// How often the node status is written even without a change.
    #[arg(long, default_value = "5m", value_parser = parse_duration_arg)]
    pub node_status_report_frequency: Duration,
    /// Duration of the node lease, renewed every quarter of it.
    #[arg(long, default_value_t = 40)]
    pub node_lease_duration_seconds: i32,
    /// The kubelet's authenticated HTTPS port (0 disables it).
    #[arg(long, default_value_t = 10250)]
    pub port: i32,
    /// The serving certificate (PEM, chain); with --tls-private-key-file.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// The serving key (PEM).
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,
    /// Where the certificates of TLS bootstrap and rotation (`kubelet-client-*.pem`,
    /// `kubelet-server-*.pem`) and a self-signed serving certificate made when none is given
    /// live (default `<root-dir>/pki`, i.e. `/var/lib/kubelet/pki`).
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,
    /// CA bundle that client certificates must be signed by (x509 authentication).
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// Serve unauthenticated requests to the secure port as `system:anonymous`.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub anonymous_auth: bool,
    /// Bearer tokens on the secure port are checked with a TokenReview on the API server.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub authentication_token_webhook: bool,
    /// How long TokenReview answers are kept.
    #[arg(long, default_value = "2m", value_parser = parse_duration_arg)]
    pub authentication_token_webhook_cache_ttl: Duration,
    /// Authorization of the secure port: AlwaysAllow or Webhook (SubjectAccessReview).
    #[arg(long, default_value = "AlwaysAllow")]
    pub authorization_mode: String,
    /// How long allowed SubjectAccessReview answers are kept.
    #[arg(long, default_value = "5m", value_parser = parse_duration_arg)]
    pub authorization_webhook_cache_authorized_ttl: Duration,
    /// How long denied SubjectAccessReview answers are kept.
    #[arg(long, default_value = "30s", value_parser = parse_duration_arg)]
    pub authorization_webhook_cache_unauthorized_ttl: Duration,
    /// Maximum size of a container log file before rotation (a quantity, e.g. `10Mi`).
    #[arg(long, default_value = "10Mi")]
    pub container_log_max_size: String,
    /// Maximum number of log files per container (at least 2).
    #[arg(long, default_value_t = 5)]
    pub container_log_max_files: i32,
    /// How often container logs are checked for rotation (config field upstream).
    #[arg(long, default_value = "10s", value_parser = parse_duration_arg)]
    pub container_log_monitor_interval: Duration,
    /// Minimum age of a dead container before it is garbage collected.
    #[arg(long, default_value = "0s", value_parser = parse_duration_arg)]
    pub minimum_container_ttl_duration: Duration,
    /// Dead instances kept per container (negative: no limit).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub maximum_dead_containers_per_container: i32,
    /// Dead containers kept in total (negative: no limit).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub maximum_dead_containers: i32,
    /// Image-filesystem usage percent at or above which image GC runs.
    #[arg(long, default_value_t = 85)]
    pub image_gc_high_threshold: i32,
    /// Image-filesystem usage percent image GC frees down to.
    #[arg(long, default_value_t = 80)]
    pub image_gc_low_threshold: i32,
    /// Minimum age of an unused image before it is garbage collected.
    #[arg(long, default_value = "2m", value_parser = parse_duration_arg)]
    pub minimum_image_ttl_duration: Duration,
    /// Container GC period (a constant upstream; for tests).
    #[arg(long, default_value = "1m", value_parser = parse_duration_arg, hide = true)]
    pub container_gc_period: Duration,
    /// Image GC period (a constant upstream; for tests).
    #[arg(long, default_value = "5m", value_parser = parse_duration_arg, hide = true)]
    pub image_gc_period: Duration,
    /// Not upstream: image GC only considers images with a repo tag starting with this prefix
    /// (empty: every image, as upstream). Lets tests share a runtime safely.
    #[arg(long, default_value = "", hide = true)]
    pub image_gc_ref_prefix: String,
    /// A Docker config file (`config.json` or `.dockercfg`) with image pull credentials for
    /// the node (default: `<root-dir>/config.json` when present).
    #[arg(long)]
    pub image_credential_file: Option<PathBuf>,
    /// Hard eviction thresholds (`memory.available<100Mi,nodefs.available<10%`); replaces the
    /// defaults when given.
    #[arg(long, default_value = crate::eviction::DEFAULT_EVICTION_HARD)]
    pub eviction_hard: String,
    /// Soft eviction thresholds (`memory.available<1.5Gi`); each needs a grace period.
    #[arg(long, default_value = "")]
    pub eviction_soft: String,
    /// Grace periods of the soft thresholds (`memory.available=1m30s`).
    #[arg(long, default_value = "")]
    pub eviction_soft_grace_period: String,
    /// Minimum amounts reclaimed once a threshold is met (`memory.available=0Mi`).
    #[arg(long, default_value = "")]
    pub eviction_minimum_reclaim: String,
    /// How long a pressure condition is held after the last breach.
    #[arg(long, default_value = "5m", value_parser = parse_duration_arg)]
    pub eviction_pressure_transition_period: Duration,
    /// Maximum grace period for pods evicted on a soft threshold (0: the pod's own).
    #[arg(long, default_value_t = 0)]
    pub eviction_max_pod_grace_period: i64,
    /// Put pods in QoS-class cgroups (`kubepods`, `kubepods/burstable`, `kubepods/besteffort`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub cgroups_per_qos: bool,
    /// The cgroup driver (`cgroupfs` or `systemd`); the runtime's own, when it reports one
    /// through the CRI RuntimeConfig call, wins (upstream `KubeletCgroupDriverFromCRI`).
    #[arg(long, default_value = "cgroupfs")]
    pub cgroup_driver: String,
    /// The root cgroup of pods (empty: `/`).
    #[arg(long, default_value = "")]
    pub cgroup_root: String,
    /// Log verbosity (klog `-v`/`--v`).
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub v: i32,
    /// Log format: `text` or `json` (one JSON object a line).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub logging_format: String,
    /// Print the Kubernetes version this kubelet implements and its own version, and exit.
    #[arg(long)]
    pub version: bool,
    /// Unsafe sysctls or sysctl patterns (ending in `*`), comma-separated, that pods may set
    /// beside the safe ones (`allowedUnsafeSysctls`); a pod setting any other is rejected with
    /// reason `SysctlForbidden`.
    #[arg(long, value_delimiter = ',')]
    pub allowed_unsafe_sysctls: Vec<String>,
    /// Cluster DNS server IPs, comma-separated (pods with `ClusterFirst` use them).
    #[arg(long, value_delimiter = ',')]
    pub cluster_dns: Vec<String>,
    /// The cluster's DNS domain (pods search `<ns>.svc.<domain> svc.<domain> <domain>`).
    #[arg(long, default_value = "")]
    pub cluster_domain: String,
    /// The resolver file pods' DNS starts from ("" disables the host's resolvers).
    #[arg(long, default_value = crate::dns::RESOLV_CONF_DEFAULT)]
    pub resolv_conf: String,
    /// Address of the healthz server.
    #[arg(long, default_value = "127.0.0.1")]
    pub healthz_bind_address: String,
    /// Port of the healthz server (0 disables it).
    #[arg(long, default_value_t = 10248)]
    pub healthz_port: i32,
    /// Idle timeout of streaming (exec/attach/port-forward) connections of the embedded
    /// dockershim.
    #[arg(long, default_value = "4h", value_parser = parse_duration_arg)]
    pub streaming_connection_idle_timeout: Duration,
    /// Period of volume usage calculation (accepted; usage is computed on each request).
    #[arg(long, default_value = "1m", value_parser = parse_duration_arg)]
    pub volume_stats_agg_period: Duration,
    /// oom_score_adj of the kubelet process, in [-1000, 1000].
    #[arg(long, default_value_t = -999, allow_negative_numbers = true)]
    pub oom_score_adj: i32,
    /// Open files limit of the kubelet process.
    #[arg(long, default_value_t = 1_000_000)]
    pub max_open_files: u64,
    /// Refuse to start when swap is on.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub fail_swap_on: bool,
    /// Deprecated upstream (1.26 takes only `remote`): `remote` (or `docker`, this kubelet's
    /// embedded dockershim when no endpoint is given).
    #[arg(long, default_value = "remote", value_parser = ["remote", "docker"])]
    pub container_runtime: String,
    /// Images reported in the node status (-1: no cap).
    #[arg(long, default_value_t = 50, allow_negative_numbers = true)]
    pub node_status_max_images: i32,
    /// Taints of the Node at registration: `key=value:Effect` or `key:Effect`, comma-separated.
    #[arg(long, default_value = "")]
    pub register_with_taints: String,
    /// kubeconfig for TLS bootstrapping: when --kubeconfig does not exist (or its client
    /// certificate is expired or unreadable), the kubelet requests a client certificate with
    /// these credentials (a `kubernetes.io/kube-apiserver-client-kubelet` CSR), stores it in
    /// --cert-dir as `kubelet-client-current.pem` and writes --kubeconfig pointing at it.
    #[arg(long)]
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// Renew the client certificate through CSRs as it nears expiry (70–90 % of its
    /// lifetime), swapping `kubelet-client-current.pem` and the API client's certificate.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub rotate_certificates: bool,
    /// Request the serving certificate of --port through a `kubernetes.io/kubelet-serving`
    /// CSR (kept as `kubelet-server-current.pem` in --cert-dir) and renew it like the client
    /// certificate; the secure port completes no TLS handshake until one is issued.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub rotate_server_certificates: bool,
}
