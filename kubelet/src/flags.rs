//! Command-line flags (upstream `cmd/kubelet/app/options` `KubeletFlags` and the
//! `KubeletConfiguration` flags), with upstream names and defaults, and the resolution of flags
//! plus config file into one [`KubeletConfig`]. Rule, like upstream: defaults, then the values
//! of the `--config` file, then every flag given explicitly on the command line (detected with
//! clap's `ArgMatches::value_source`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser};
use k8s_openapi::api::core::v1::Taint;

use crate::duration::parse_duration_arg;
use crate::kubeletconfig::{ConfigError, KubeletConfig, KubeletConfiguration, system_hostname};

/// The kubelet's flags.
#[derive(Debug, Clone, Parser, PartialEq)]
// Like Go's flag package, a flag given twice takes the last value.
#[command(
    name = "kubelet",
    about = "The Kubernetes node agent",
    args_override_self = true
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
    /// Directories (comma-separated) holding CNI plugin binaries (embedded dockershim).
    #[arg(long, default_value = "/opt/cni/bin")]
    pub cni_bin_dir: String,
    /// Directory holding CNI network configs (embedded dockershim).
    #[arg(long, default_value = "/etc/cni/net.d")]
    pub cni_conf_dir: PathBuf,
    /// Directory where CNI caches results (embedded dockershim).
    #[arg(long, default_value = "/var/lib/cni/cache")]
    pub cni_cache_dir: PathBuf,
    /// kubeconfig of the API server; without it the kubelet runs standalone.
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
    /// Where a self-signed serving certificate is made when none is given
    /// (default `<root-dir>/pki`).
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,
    /// CA bundle that client certificates must be signed by (x509 authentication).
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// Serve unauthenticated requests to the secure port as `system:anonymous`.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub anonymous_auth: bool,
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
    /// kubeconfig for TLS bootstrapping, used when --kubeconfig does not exist (TLS
    /// bootstrapping is not implemented: the kubelet then says so and stays standalone).
    #[arg(long)]
    pub bootstrap_kubeconfig: Option<PathBuf>,
}

/// Parse `--manifest-url-header` values like upstream `ColonSeparatedMultimapStringString`:
/// each value is a comma-separated list of `key:value` pairs; values split at the first ':'.
pub fn parse_header_pairs(values: &[String]) -> Result<BTreeMap<String, Vec<String>>, ConfigError> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for v in values {
        for pair in v.split(',').filter(|p| !p.trim().is_empty()) {
            let (k, val) = pair.split_once(':').ok_or_else(|| ConfigError::Flag {
                flag: "manifest-url-header",
                reason: format!("malformed pair {pair:?}, expect string:string"),
            })?;
            let k = k.trim();
            if k.is_empty() {
                return Err(ConfigError::Flag {
                    flag: "manifest-url-header",
                    reason: format!("empty key in {pair:?}"),
                });
            }
            out.entry(k.to_string()).or_default().push(val.to_string());
        }
    }
    Ok(out)
}

/// Parse `--feature-gates`: comma-separated `Name=bool` pairs.
pub fn parse_feature_gates(s: &str) -> Result<BTreeMap<String, bool>, ConfigError> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|pair| {
            let bad = || ConfigError::Flag {
                flag: "feature-gates",
                reason: format!("malformed pair {pair:?}, expect Name=true|false"),
            };
            let (k, v) = pair.split_once('=').ok_or_else(bad)?;
            let v: bool = v.trim().parse().map_err(|_| bad())?;
            Ok((k.trim().to_string(), v))
        })
        .collect()
}

/// Parse `--node-labels`: comma-separated `key=value` pairs.
pub fn parse_node_labels(s: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').ok_or_else(|| ConfigError::Flag {
                flag: "node-labels",
                reason: format!("malformed pair {pair:?}, expect key=value"),
            })?;
            Ok((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

fn taint(key: &str, value: Option<&str>, effect: &str) -> Result<Taint, String> {
    if key.is_empty() {
        return Err("empty taint key".into());
    }
    if !TAINT_EFFECTS.contains(&effect) {
        return Err(format!(
            "invalid taint effect {effect:?}, must be one of {}",
            TAINT_EFFECTS.join(", ")
        ));
    }
    Ok(Taint {
        key: key.to_string(),
        value: value.filter(|v| !v.is_empty()).map(str::to_string),
        effect: effect.to_string(),
        time_added: None,
    })
}

/// Parse `--register-with-taints` (upstream `ParseTaints`): `key=value:Effect` or
/// `key:Effect`, comma-separated.
pub fn parse_taints(s: &str) -> Result<Vec<Taint>, ConfigError> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|spec| {
            let bad = |reason: String| ConfigError::Flag {
                flag: "register-with-taints",
                reason: format!("{spec:?}: {reason}"),
            };
            let (kv, effect) = spec
                .trim()
                .rsplit_once(':')
                .ok_or_else(|| bad("want key=value:Effect".into()))?;
            let (key, value) = match kv.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (kv, None),
            };
            taint(key, value, effect).map_err(bad)
        })
        .collect()
}

fn file_taints(t: &[crate::kubeletconfig::Taint]) -> Result<Vec<Taint>, ConfigError> {
    t.iter()
        .map(|t| {
            taint(
                t.key.as_deref().unwrap_or_default(),
                t.value.as_deref(),
                t.effect.as_deref().unwrap_or_default(),
            )
            .map_err(|reason| ConfigError::Flag {
                flag: "register-with-taints",
                reason: format!("registerWithTaints: {reason}"),
            })
        })
        .collect()
}

fn explicit(m: &ArgMatches, id: &str) -> bool {
    matches!(m.value_source(id), Some(ValueSource::CommandLine))
}

/// Merge `flags` (with their `matches`, to know what was explicit) and the config `file`.
pub fn resolve(
    flags: &KubeletFlags,
    matches: &ArgMatches,
    file: Option<KubeletConfiguration>,
) -> Result<KubeletConfig, ConfigError> {
    let with_file = file.is_some();
    let mut f = file.unwrap_or_default();
    let ignored: Vec<String> = f.ignored_fields().into_iter().map(String::from).collect();
    f.normalize();
    // With a file, a field it leaves out takes upstream's v1beta1 default, which differs from
    // the flag's (legacy) default for these two (upstream `applyLegacyDefaults`).
    if with_file {
        f.read_only_port.get_or_insert(0);
        f.address.get_or_insert_with(|| "0.0.0.0".to_string());
    }
    if f.enable_server == Some(false) {
        f.port = Some(0);
    }
    // Upstream: nodeStatusReportFrequency defaults to nodeStatusUpdateFrequency when only
    // the latter is set.
    if f.node_status_report_frequency.is_none() {
        f.node_status_report_frequency = f.node_status_update_frequency;
    }
    let eviction = eviction_config(flags, matches, &f)?;
    let pick = |id: &str, flag: Option<String>, file: Option<String>| {
        if explicit(matches, id) {
            flag
        } else {
            file.or(flag)
        }
    };
    macro_rules! val {
        ($id:literal, $flag:expr, $file:expr) => {
            if explicit(matches, $id) {
                $flag
            } else {
                $file.unwrap_or($flag)
            }
        };
    }
    let header = if explicit(matches, "manifest_url_header") {
        parse_header_pairs(&flags.manifest_url_header)?
    } else {
        match f.static_pod_url_header {
            Some(h) => h,
            None => parse_header_pairs(&flags.manifest_url_header)?,
        }
    };
    let high = val!(
        "image_gc_high_threshold",
        flags.image_gc_high_threshold,
        f.image_gc_high_threshold_percent
    );
    let low = val!(
        "image_gc_low_threshold",
        flags.image_gc_low_threshold,
        f.image_gc_low_threshold_percent
    );
    for (flag, v) in [
        ("image-gc-high-threshold", high),
        ("image-gc-low-threshold", low),
    ] {
        if !(0..=100).contains(&v) {
            return Err(ConfigError::Flag {
                flag,
                reason: format!("{v} must be between 0 and 100, inclusive"),
            });
        }
    }
    if low >= high {
        return Err(ConfigError::Flag {
            flag: "image-gc-low-threshold",
            reason: format!(
                "imageGCLowThresholdPercent ({low}) must be less than imageGCHighThresholdPercent ({high})"
            ),
        });
    }
    let node_name = flags
        .hostname_override
        .as_deref()
        .map(|h| h.trim().to_lowercase())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(system_hostname);
    Ok(KubeletConfig {
        node_name,
        container_runtime_endpoint: pick(
            "container_runtime_endpoint",
            flags.container_runtime_endpoint.clone(),
            f.container_runtime_endpoint,
        ),
        image_service_endpoint: pick(
            "image_service_endpoint",
            flags.image_service_endpoint.clone(),
            f.image_service_endpoint,
        ),
        docker_endpoint: flags.docker_endpoint.clone(),
        pod_infra_container_image: flags.pod_infra_container_image.clone(),
        static_pod_path: if explicit(matches, "pod_manifest_path") {
            flags.pod_manifest_path.clone()
        } else {
            f.static_pod_path
                .or_else(|| flags.pod_manifest_path.clone())
        },
        static_pod_url: pick("manifest_url", flags.manifest_url.clone(), f.static_pod_url),
        static_pod_url_header: header,
        file_check_frequency: val!(
            "file_check_frequency",
            flags.file_check_frequency,
            f.file_check_frequency
        ),
        http_check_frequency: val!(
            "http_check_frequency",
            flags.http_check_frequency,
            f.http_check_frequency
        ),
        sync_frequency: val!("sync_frequency", flags.sync_frequency, f.sync_frequency),
        root_dir: flags.root_dir.clone(),
        max_pods: val!("max_pods", flags.max_pods, f.max_pods),
        address: val!("address", flags.address.clone(), f.address),
        read_only_port: val!("read_only_port", flags.read_only_port, f.read_only_port),
        runtime_request_timeout: val!(
            "runtime_request_timeout",
            flags.runtime_request_timeout,
            f.runtime_request_timeout
        ),
        evented_pleg: {
            let mut gates = f.feature_gates.clone().unwrap_or_default();
            gates.extend(parse_feature_gates(&flags.feature_gates)?);
            flags.evented_pleg || gates.get("EventedPLEG").copied().unwrap_or(false)
        },
        api: match &flags.kubeconfig {
            None => None,
            Some(path) => Some(crate::apimode::ApiModeConfig {
                kubeconfig: path.clone(),
                register_node: val!("register_node", flags.register_node, f.register_node),
                node_ip: flags
                    .node_ip
                    .clone()
                    .unwrap_or_else(crate::nodestatus::node_ip),
                node_labels: parse_node_labels(&flags.node_labels)?,
                node_status_update_frequency: val!(
                    "node_status_update_frequency",
                    flags.node_status_update_frequency,
                    f.node_status_update_frequency
                ),
                node_status_report_frequency: val!(
                    "node_status_report_frequency",
                    flags.node_status_report_frequency,
                    f.node_status_report_frequency
                ),
                node_lease_duration_seconds: val!(
                    "node_lease_duration_seconds",
                    flags.node_lease_duration_seconds,
                    f.node_lease_duration_seconds
                ),
                kubelet_port: val!("port", flags.port, f.port),
                max_pods: u32::try_from(val!("max_pods", flags.max_pods, f.max_pods)).unwrap_or(0),
                node_status_max_images: {
                    let n = val!(
                        "node_status_max_images",
                        flags.node_status_max_images,
                        f.node_status_max_images
                    );
                    if n < -1 {
                        return Err(ConfigError::Flag {
                            flag: "node-status-max-images",
                            reason: format!("{n} must be -1 or greater"),
                        });
                    }
                    n
                },
                register_with_taints: if explicit(matches, "register_with_taints") {
                    parse_taints(&flags.register_with_taints)?
                } else {
                    match &f.register_with_taints {
                        Some(t) => file_taints(t)?,
                        None => parse_taints(&flags.register_with_taints)?,
                    }
                },
            }),
        },
        verbosity: val!(
            "v",
            flags.v,
            f.logging
                .as_ref()
                .and_then(|l| l.verbosity)
                .and_then(|v| i32::try_from(v).ok())
        ),
        container_log_max_size: {
            let q = val!(
                "container_log_max_size",
                flags.container_log_max_size.clone(),
                f.container_log_max_size
            );
            crate::resource::parse_quantity_scaled(&q, 1.0)
                .and_then(|v| u64::try_from(v).ok())
                .ok_or_else(|| ConfigError::Flag {
                    flag: "container-log-max-size",
                    reason: format!("invalid quantity {q:?}"),
                })?
        },
        container_log_max_files: {
            let n = val!(
                "container_log_max_files",
                flags.container_log_max_files,
                f.container_log_max_files
            );
            usize::try_from(n)
                .ok()
                .filter(|n| *n > 1)
                .ok_or_else(|| ConfigError::Flag {
                    flag: "container-log-max-files",
                    reason: format!("containerLogMaxFiles ({n}) must be > 1"),
                })?
        },
        container_log_monitor_interval: val!(
            "container_log_monitor_interval",
            flags.container_log_monitor_interval,
            f.container_log_monitor_interval
        ),
        minimum_container_ttl_duration: flags.minimum_container_ttl_duration,
        max_per_pod_container: flags.maximum_dead_containers_per_container,
        max_containers: flags.maximum_dead_containers,
        container_gc_period: flags.container_gc_period,
        image_gc_high_threshold_percent: high,
        image_gc_low_threshold_percent: low,
        image_minimum_gc_age: val!(
            "minimum_image_ttl_duration",
            flags.minimum_image_ttl_duration,
            f.image_minimum_gc_age
        ),
        image_gc_period: flags.image_gc_period,
        image_gc_ref_prefix: flags.image_gc_ref_prefix.clone(),
        eviction,
        port: val!("port", flags.port, f.port),
        tls: crate::server::secure::TlsConfig {
            tls_cert_file: pick_path(
                explicit(matches, "tls_cert_file"),
                &flags.tls_cert_file,
                &f.tls_cert_file,
            ),
            tls_private_key_file: pick_path(
                explicit(matches, "tls_private_key_file"),
                &flags.tls_private_key_file,
                &f.tls_private_key_file,
            ),
            cert_dir: flags
                .cert_dir
                .clone()
                .unwrap_or_else(|| flags.root_dir.join("pki")),
            client_ca_file: pick_path(
                explicit(matches, "client_ca_file"),
                &flags.client_ca_file,
                &f.authentication
                    .as_ref()
                    .and_then(|a| a.x509.as_ref())
                    .and_then(|x| x.client_ca_file.clone()),
            ),
            anonymous_auth: if explicit(matches, "anonymous_auth") {
                flags.anonymous_auth
            } else {
                f.authentication
                    .as_ref()
                    .and_then(|a| a.anonymous.as_ref())
                    .and_then(|a| a.enabled)
                    .unwrap_or(flags.anonymous_auth)
            },
        },
        cgroups: {
            let driver = val!(
                "cgroup_driver",
                flags.cgroup_driver.clone(),
                f.cgroup_driver.clone()
            );
            if driver != "cgroupfs" && driver != "systemd" {
                return Err(ConfigError::Flag {
                    flag: "cgroup-driver",
                    reason: format!("{driver:?} is neither cgroupfs nor systemd"),
                });
            }
            crate::cm::CgroupConfig {
                per_qos: val!("cgroups_per_qos", flags.cgroups_per_qos, f.cgroups_per_qos),
                driver,
                root: val!(
                    "cgroup_root",
                    flags.cgroup_root.clone(),
                    f.cgroup_root.clone()
                ),
            }
        },
        dns: crate::dns::DnsConfigurer {
            cluster_dns: {
                let list = if explicit(matches, "cluster_dns") {
                    flags.cluster_dns.clone()
                } else {
                    f.cluster_dns
                        .clone()
                        .unwrap_or_else(|| flags.cluster_dns.clone())
                };
                list.iter()
                    .filter(|s| !s.trim().is_empty())
                    .map(|s| {
                        s.trim().parse().map_err(|_| ConfigError::Flag {
                            flag: "cluster-dns",
                            reason: format!("{s:?} is not an IP address"),
                        })
                    })
                    .collect::<Result<_, _>>()?
            },
            cluster_domain: val!(
                "cluster_domain",
                flags.cluster_domain.clone(),
                f.cluster_domain.clone()
            ),
            resolver_config: val!(
                "resolv_conf",
                flags.resolv_conf.clone(),
                f.resolv_conf.clone()
            ),
            node_ips: Vec::new(),
        },
        healthz_bind_address: val!(
            "healthz_bind_address",
            flags.healthz_bind_address.clone(),
            f.healthz_bind_address.clone()
        ),
        healthz_port: {
            let p = val!("healthz_port", flags.healthz_port, f.healthz_port);
            if !(0..=65535).contains(&p) {
                return Err(ConfigError::Flag {
                    flag: "healthz-port",
                    reason: format!("{p} must be between 0 and 65535, inclusive"),
                });
            }
            p
        },
        logging_format: val!(
            "logging_format",
            flags.logging_format.clone(),
            f.logging.as_ref().and_then(|l| l.format.clone())
        ),
        streaming_connection_idle_timeout: val!(
            "streaming_connection_idle_timeout",
            flags.streaming_connection_idle_timeout,
            f.streaming_connection_idle_timeout
        ),
        oom_score_adj: {
            let v = val!("oom_score_adj", flags.oom_score_adj, f.oom_score_adj);
            if !(-1000..=1000).contains(&v) {
                return Err(ConfigError::Flag {
                    flag: "oom-score-adj",
                    reason: format!("{v} must be between -1000 and 1000, inclusive"),
                });
            }
            v
        },
        max_open_files: val!(
            "max_open_files",
            flags.max_open_files,
            f.max_open_files.and_then(|n| u64::try_from(n).ok())
        ),
        fail_swap_on: val!("fail_swap_on", flags.fail_swap_on, f.fail_swap_on),
        config_file: flags.config.clone(),
        ignored_fields: ignored,
        image_credential_file: flags.image_credential_file.clone().or_else(|| {
            let p = flags.root_dir.join("config.json");
            p.exists().then_some(p)
        }),
    })
}

fn pick_path(explicit: bool, flag: &Option<PathBuf>, file: &Option<PathBuf>) -> Option<PathBuf> {
    if explicit {
        flag.clone()
    } else {
        file.clone().or_else(|| flag.clone())
    }
}

/// The eviction settings: a flag given on the command line replaces the config file's map.
fn eviction_config(
    flags: &KubeletFlags,
    matches: &ArgMatches,
    f: &KubeletConfiguration,
) -> Result<crate::eviction::EvictionConfig, ConfigError> {
    use crate::eviction::{parse_pairs_flag, parse_threshold_flag, parse_thresholds};
    let bad = |flag: &'static str| move |reason: String| ConfigError::Flag { flag, reason };
    let pick = |id: &str,
                flag: &'static str,
                value: &str,
                file: &Option<BTreeMap<String, String>>,
                parse: fn(&str) -> Result<BTreeMap<String, String>, String>|
     -> Result<BTreeMap<String, String>, ConfigError> {
        match file {
            Some(m) if !explicit(matches, id) => Ok(m.clone()),
            _ => parse(value).map_err(bad(flag)),
        }
    };
    let hard = pick(
        "eviction_hard",
        "eviction-hard",
        &flags.eviction_hard,
        &f.eviction_hard,
        parse_threshold_flag,
    )?;
    let soft = pick(
        "eviction_soft",
        "eviction-soft",
        &flags.eviction_soft,
        &f.eviction_soft,
        parse_threshold_flag,
    )?;
    let grace = pick(
        "eviction_soft_grace_period",
        "eviction-soft-grace-period",
        &flags.eviction_soft_grace_period,
        &f.eviction_soft_grace_period,
        parse_pairs_flag,
    )?;
    let reclaim = pick(
        "eviction_minimum_reclaim",
        "eviction-minimum-reclaim",
        &flags.eviction_minimum_reclaim,
        &f.eviction_minimum_reclaim,
        parse_pairs_flag,
    )?;
    Ok(crate::eviction::EvictionConfig {
        thresholds: parse_thresholds(&hard, &soft, &grace, &reclaim)
            .map_err(bad("eviction-hard"))?,
        pressure_transition_period: if explicit(matches, "eviction_pressure_transition_period") {
            flags.eviction_pressure_transition_period
        } else {
            f.eviction_pressure_transition_period
                .unwrap_or(flags.eviction_pressure_transition_period)
        },
        max_pod_grace_period: if explicit(matches, "eviction_max_pod_grace_period") {
            flags.eviction_max_pod_grace_period
        } else {
            f.eviction_max_pod_grace_period
                .unwrap_or(flags.eviction_max_pod_grace_period)
        },
    })
}

/// Parse the command line, load `--config` if given, and resolve (what `main` calls).
pub fn load<I, T>(args: I) -> Result<(KubeletFlags, KubeletConfig), ConfigError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let matches = KubeletFlags::command().try_get_matches_from(args)?;
    let flags = KubeletFlags::from_arg_matches(&matches)?;
    let file = flags
        .config
        .as_deref()
        .map(KubeletConfiguration::load)
        .transpose()?;
    let cfg = resolve(&flags, &matches, file)?;
    Ok((flags, cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_with(args: &[&str]) -> KubeletConfig {
        let mut all = vec!["kubelet", "--hostname-override", "Node-1"];
        all.extend_from_slice(args);
        load(all).expect("load").1
    }

    #[test]
    fn command_is_well_formed() {
        KubeletFlags::command().debug_assert();
    }

    #[test]
    fn defaults() {
        let c = load_with(&[]);
        assert_eq!(c.node_name, "node-1");
        assert_eq!(c.container_runtime_endpoint, None);
        assert_eq!(c.docker_endpoint, "unix:///var/run/docker.sock");
        assert_eq!(c.pod_infra_container_image, "registry.k8s.io/pause:3.9");
        assert_eq!(c.file_check_frequency, Duration::from_secs(20));
        assert_eq!(c.http_check_frequency, Duration::from_secs(20));
        assert_eq!(c.sync_frequency, Duration::from_secs(60));
        assert_eq!(c.runtime_request_timeout, Duration::from_secs(120));
        assert_eq!(c.root_dir, PathBuf::from("/var/lib/kubelet"));
        assert_eq!((c.max_pods, c.read_only_port), (110, 10255));
        assert_eq!(c.address, "127.0.0.1");
        assert!(!c.evented_pleg);
        assert_eq!(c.verbosity, 0);
        assert!(c.static_pod_url_header.is_empty());
    }

    #[test]
    fn log_and_gc_flags() {
        let c = load_with(&[]);
        assert_eq!(c.container_log_max_size, 10 * 1024 * 1024);
        assert_eq!(c.container_log_max_files, 5);
        assert_eq!(c.container_log_monitor_interval, Duration::from_secs(10));
        assert_eq!((c.max_per_pod_container, c.max_containers), (1, -1));
        assert_eq!(c.minimum_container_ttl_duration, Duration::ZERO);
        assert_eq!(
            (
                c.image_gc_high_threshold_percent,
                c.image_gc_low_threshold_percent
            ),
            (85, 80)
        );
        assert_eq!(c.image_minimum_gc_age, Duration::from_secs(120));
        assert_eq!(c.container_gc_period, Duration::from_secs(60));
        assert_eq!(c.image_gc_period, Duration::from_secs(300));
        let c = load_with(&[
            "--container-log-max-size=4Ki",
            "--container-log-max-files=2",
            "--maximum-dead-containers-per-container=-1",
            "--maximum-dead-containers=3",
            "--minimum-container-ttl-duration=10s",
            "--image-gc-high-threshold=1",
            "--image-gc-low-threshold=0",
        ]);
        assert_eq!(c.container_log_max_size, 4096);
        assert_eq!(c.container_log_max_files, 2);
        assert_eq!((c.max_per_pod_container, c.max_containers), (-1, 3));
        assert_eq!(c.minimum_container_ttl_duration, Duration::from_secs(10));
        assert_eq!(
            (
                c.image_gc_high_threshold_percent,
                c.image_gc_low_threshold_percent
            ),
            (1, 0)
        );
        for bad in [
            "--container-log-max-files=1",
            "--container-log-max-size=lots",
            "--image-gc-high-threshold=101",
            "--image-gc-low-threshold=90",
        ] {
            assert!(load(["kubelet", bad]).is_err(), "{bad}");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            "containerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\nimageGCHighThresholdPercent: 70\nimageGCLowThresholdPercent: 60\nimageMinimumGCAge: 1m\n",
        )
        .expect("write");
        let c = load_with(&["--config", path.to_str().expect("utf8")]);
        assert_eq!(c.container_log_max_size, 1024 * 1024);
        assert_eq!(c.container_log_max_files, 3);
        assert_eq!(c.container_log_monitor_interval, Duration::from_secs(3));
        assert_eq!(
            (
                c.image_gc_high_threshold_percent,
                c.image_gc_low_threshold_percent
            ),
            (70, 60)
        );
        assert_eq!(c.image_minimum_gc_age, Duration::from_secs(60));
    }

    #[test]
    fn flags_and_headers() {
        let c = load_with(&[
            "--v=4",
            "--evented-pleg",
            "--sync-frequency=1m30s",
            "--manifest-url=http://h/pods",
            "--manifest-url-header=a:hello,b:again",
            "--manifest-url-header",
            "b:beautiful,c:x:y",
            "--container-runtime-endpoint",
            "unix:///run/containerd/containerd.sock",
        ]);
        assert_eq!(c.verbosity, 4);
        assert!(c.evented_pleg);
        assert_eq!(c.sync_frequency, Duration::from_secs(90));
        assert_eq!(c.static_pod_url.as_deref(), Some("http://h/pods"));
        assert_eq!(
            c.static_pod_url_header,
            BTreeMap::from([
                ("a".to_string(), vec!["hello".to_string()]),
                (
                    "b".to_string(),
                    vec!["again".to_string(), "beautiful".to_string()]
                ),
                ("c".to_string(), vec!["x:y".to_string()]),
            ])
        );
        assert!(load(["kubelet", "--manifest-url-header=nocolon"]).is_err());
        assert!(load(["kubelet", "--sync-frequency=5x"]).is_err());
        let c = load_with(&["-v", "2"]);
        assert_eq!(c.verbosity, 2);
    }

    #[test]
    fn explicit_flag_wins_over_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: /from/file\nsyncFrequency: 10s\nmaxPods: 20\nreadOnlyPort: 0\nstaticPodURLHeader:\n  f: [\"1\"]\n",
        )
        .expect("write");
        let p = path.to_str().expect("utf8");
        // File values beat defaults.
        let c = load_with(&["--config", p]);
        assert_eq!(c.static_pod_path, Some(PathBuf::from("/from/file")));
        assert_eq!(c.sync_frequency, Duration::from_secs(10));
        assert_eq!((c.max_pods, c.read_only_port), (20, 0));
        assert_eq!(
            c.static_pod_url_header.get("f"),
            Some(&vec!["1".to_string()])
        );
        // Explicit flags beat the file, even when equal to the default.
        let c = load_with(&[
            "--config",
            p,
            "--pod-manifest-path=/from/flag",
            "--sync-frequency=1m",
            "--max-pods=110",
            "--manifest-url-header=g:2",
        ]);
        assert_eq!(c.static_pod_path, Some(PathBuf::from("/from/flag")));
        assert_eq!(c.sync_frequency, Duration::from_secs(60));
        assert_eq!(c.max_pods, 110);
        assert_eq!(c.read_only_port, 0);
        assert!(!c.static_pod_url_header.contains_key("f"));
        // An unknown field in the file is an error naming it.
        std::fs::write(&path, "maxPods: 1\nbogusField: true\n").expect("write");
        let err = load(["kubelet", "--config", p]).expect_err("unknown field");
        assert!(err.to_string().contains("bogusField"), "{err}");
    }

    #[test]
    fn feature_gates_turn_on_the_evented_pleg() {
        assert!(load_with(&["--feature-gates", "EventedPLEG=true"]).evented_pleg);
        assert!(!load_with(&["--feature-gates", "EventedPLEG=false,Other=true"]).evented_pleg);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, "featureGates:\n  EventedPLEG: true\n").expect("write");
        assert!(load_with(&["--config", path.to_str().expect("utf8")]).evented_pleg);
        let bad = load(["kubelet", "--feature-gates", "EventedPLEG=yes"]);
        assert!(bad.is_err());
    }

    #[test]
    fn eviction_tls_and_cgroup_settings_from_flags_and_config() {
        use crate::eviction::{Signal, Value};
        // Defaults: upstream's hard thresholds, the secure port with a cert dir under root.
        let c = load_with(&["--root-dir", "/srv/k"]);
        assert_eq!(c.eviction.thresholds.len(), 5);
        assert_eq!(c.port, 10250);
        assert_eq!(c.tls.cert_dir, PathBuf::from("/srv/k/pki"));
        assert!(!c.tls.anonymous_auth);
        assert!(c.cgroups.per_qos);
        assert_eq!(c.cgroups.driver, "cgroupfs");
        // The config file's maps and fields.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            "evictionHard:\n  memory.available: 1Gi\nevictionSoft:\n  nodefs.available: 20%\n\
             evictionSoftGracePeriod:\n  nodefs.available: 1m\n\
             evictionPressureTransitionPeriod: 30s\ncgroupDriver: systemd\n\
             tlsCertFile: /etc/k/tls.crt\ntlsPrivateKeyFile: /etc/k/tls.key\n\
             authentication:\n  x509:\n    clientCAFile: /etc/k/ca.crt\n  anonymous:\n    enabled: true\n",
        )
        .expect("write");
        let file = path.to_str().expect("utf8");
        let c = load_with(&["--config", file]);
        let hard: Vec<_> = c
            .eviction
            .thresholds
            .iter()
            .filter(|t| t.is_hard())
            .collect();
        assert_eq!(hard.len(), 1, "the file's map replaces the defaults");
        assert_eq!(hard[0].value, Value::Quantity(1 << 30));
        let soft = c
            .eviction
            .thresholds
            .iter()
            .find(|t| !t.is_hard())
            .expect("soft");
        assert_eq!(soft.signal, Signal::NodeFsAvailable);
        assert_eq!(soft.grace_period, Duration::from_secs(60));
        assert_eq!(
            c.eviction.pressure_transition_period,
            Duration::from_secs(30)
        );
        assert_eq!(c.cgroups.driver, "systemd");
        assert_eq!(c.tls.tls_cert_file, Some(PathBuf::from("/etc/k/tls.crt")));
        assert_eq!(c.tls.client_ca_file, Some(PathBuf::from("/etc/k/ca.crt")));
        assert!(c.tls.anonymous_auth);
        // Explicit flags win over the file; a flag given twice takes the last value.
        let c = load_with(&[
            "--config",
            file,
            "--eviction-hard",
            "nodefs.available<5%",
            "--anonymous-auth=false",
            "--port",
            "1",
            "--port",
            "0",
        ]);
        let hard: Vec<_> = c
            .eviction
            .thresholds
            .iter()
            .filter(|t| t.is_hard())
            .collect();
        assert_eq!(hard.len(), 1);
        assert_eq!(hard[0].signal, Signal::NodeFsAvailable);
        assert!(!c.tls.anonymous_auth);
        assert_eq!(c.port, 0);
        // Bad values name the flag.
        let e = load(["kubelet", "--eviction-hard", "memory.available=1Gi"]).unwrap_err();
        assert!(e.to_string().contains("eviction-hard"), "{e}");
        let e = load(["kubelet", "--cgroup-driver", "lxc"]).unwrap_err();
        assert!(e.to_string().contains("cgroup-driver"), "{e}");
    }

    #[test]
    fn kubeconfig_turns_on_api_server_mode() {
        assert!(load_with(&[]).api.is_none());
        let c = load_with(&[
            "--kubeconfig",
            "/tmp/kc",
            "--node-labels",
            "a=1,b=2",
            "--node-status-update-frequency",
            "2s",
        ]);
        let api = c.api.expect("api mode");
        assert_eq!(api.node_labels.get("b").map(String::as_str), Some("2"));
        assert_eq!(api.node_status_update_frequency, Duration::from_secs(2));
        assert_eq!(api.node_status_report_frequency, Duration::from_secs(300));
        assert_eq!(
            (api.node_lease_duration_seconds, api.kubelet_port),
            (40, 10250)
        );
        assert!(api.register_node);
    }

    #[test]
    fn kubeadm_config_resolves_to_upstream_defaults_and_flags_win() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            include_str!("../../integration/tests/fixtures/kubeadm/config-1.26.yaml"),
        )
        .expect("write");
        let p = path.to_str().expect("utf8");
        let c = load_with(&["--config", p]);
        // kubeadm's 0s are upstream's defaults.
        assert_eq!(c.sync_frequency, Duration::from_secs(60));
        assert_eq!(c.file_check_frequency, Duration::from_secs(20));
        assert_eq!(c.runtime_request_timeout, Duration::from_secs(120));
        assert_eq!(c.image_minimum_gc_age, Duration::from_secs(120));
        assert_eq!(
            c.streaming_connection_idle_timeout,
            Duration::from_secs(4 * 3600)
        );
        assert_eq!(
            c.eviction.pressure_transition_period,
            Duration::from_secs(300)
        );
        // Fields the file leaves out take the v1beta1 defaults.
        assert_eq!(c.read_only_port, 0);
        assert_eq!(c.address, "0.0.0.0");
        assert_eq!(c.port, 10250);
        assert_eq!(
            (c.healthz_bind_address.as_str(), c.healthz_port),
            ("127.0.0.1", 10248)
        );
        assert_eq!(
            c.dns.cluster_dns,
            vec!["10.96.0.10".parse::<std::net::IpAddr>().expect("ip")]
        );
        assert_eq!(c.dns.cluster_domain, "cluster.local");
        assert_eq!(c.dns.resolver_config, "/run/systemd/resolve/resolv.conf");
        assert_eq!(c.cgroups.driver, "systemd");
        assert_eq!(
            c.static_pod_path,
            Some(PathBuf::from("/etc/kubernetes/manifests"))
        );
        assert_eq!(c.logging_format, "text");
        assert_eq!(c.verbosity, 0);
        assert_eq!(c.ignored_fields.len(), 4);
        // Flags win over the file.
        let c = load_with(&[
            "--config",
            p,
            "--healthz-port",
            "0",
            "--cluster-dns",
            "10.0.0.10,fd00::a",
            "--cluster-domain",
            "example.org",
            "--resolv-conf=",
            "--read-only-port",
            "10255",
            "-v",
            "3",
            "--logging-format",
            "json",
        ]);
        assert_eq!(c.healthz_port, 0);
        assert_eq!(c.dns.cluster_dns.len(), 2);
        assert_eq!(c.dns.cluster_domain, "example.org");
        assert_eq!(c.dns.resolver_config, "");
        assert_eq!(c.read_only_port, 10255);
        assert_eq!(c.verbosity, 3);
        assert_eq!(c.logging_format, "json");
        // Without a file: the flag defaults (no cluster DNS, /etc/resolv.conf).
        let c = load_with(&[]);
        assert!(c.dns.cluster_dns.is_empty());
        assert_eq!(c.dns.resolver_config, "/etc/resolv.conf");
        assert_eq!(c.read_only_port, 10255);
        assert!(c.ignored_fields.is_empty());
        // kubeadm's flags are accepted.
        let c = load_with(&[
            "--container-runtime=remote",
            "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
            "--pod-infra-container-image=registry.k8s.io/pause:3.9",
            "--node-ip=10.1.2.3",
            "--node-labels=a=b",
            "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
        ]);
        let api = c.api.expect("api");
        assert_eq!(api.node_ip, "10.1.2.3");
        assert_eq!(api.node_labels.get("a").map(String::as_str), Some("b"));
        assert!(load(["kubelet", "--cluster-dns", "nope"]).is_err());
        let c = load_with(&[
            "--kubeconfig=/kc",
            "--register-with-taints=dedicated=infra:NoSchedule,gpu:NoExecute",
        ]);
        let t = c.api.expect("api").register_with_taints;
        assert_eq!(t.len(), 2);
        assert_eq!(
            (
                t[0].key.as_str(),
                t[0].value.as_deref(),
                t[0].effect.as_str()
            ),
            ("dedicated", Some("infra"), "NoSchedule")
        );
        assert_eq!((t[1].key.as_str(), t[1].value.as_deref()), ("gpu", None));
        for bad in ["a=b:Sometimes", "novalue", "=v:NoSchedule"] {
            let arg = format!("--register-with-taints={bad}");
            assert!(
                load(["kubelet", "--kubeconfig=/kc", &arg]).is_err(),
                "{bad}"
            );
        }
        std::fs::write(
            &path,
            "registerWithTaints:\n- key: k\n  value: v\n  effect: NoExecute\n",
        )
        .expect("write");
        let t = load_with(&["--config", p, "--kubeconfig=/kc"])
            .api
            .expect("api")
            .register_with_taints;
        assert_eq!(
            (t[0].key.as_str(), t[0].effect.as_str()),
            ("k", "NoExecute")
        );
        assert!(load(["kubelet", "--healthz-port", "70000"]).is_err());
        assert!(load(["kubelet", "--container-runtime", "rkt"]).is_err());
        // A file with the secure server off, and an update frequency only.
        std::fs::write(
            &path,
            "enableServer: false\nnodeStatusUpdateFrequency: 4s\nlogging:\n  verbosity: 5\n",
        )
        .expect("write");
        let c = load_with(&["--config", p, "--kubeconfig", "/kc"]);
        assert_eq!(c.port, 0);
        assert_eq!(c.verbosity, 5);
        let api = c.api.expect("api");
        assert_eq!(api.node_status_report_frequency, Duration::from_secs(4));
    }
}
