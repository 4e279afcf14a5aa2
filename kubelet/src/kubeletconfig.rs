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

/// The config file (upstream `KubeletConfiguration`, implemented subset). Every field is
/// optional; unset fields fall back to the flag defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletConfiguration {
    /// `kubelet.config.k8s.io/v1beta1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `KubeletConfiguration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Directory (or file) of static pod manifests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub static_pod_path: Option<PathBuf>,
    /// URL of static pod manifests.
    #[serde(
        default,
        rename = "staticPodURL",
        skip_serializing_if = "Option::is_none"
    )]
    pub static_pod_url: Option<String>,
    /// Headers for `staticPodURL`.
    #[serde(
        default,
        rename = "staticPodURLHeader",
        skip_serializing_if = "Option::is_none"
    )]
    pub static_pod_url_header: Option<BTreeMap<String, Vec<String>>>,
    /// How often to re-list `staticPodPath`.
    #[serde(
        default,
        with = "serde_go_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub file_check_frequency: Option<Duration>,
    /// How often to poll `staticPodURL`.
    #[serde(
        default,
        with = "serde_go_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub http_check_frequency: Option<Duration>,
    /// Max period between syncs of running pods.
    #[serde(
        default,
        with = "serde_go_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub sync_frequency: Option<Duration>,
    /// Address of the kubelet's server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Read-only port (0 disables it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_port: Option<i32>,
    /// Maximum pods on this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<i32>,
    /// Register the node with the API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub register_node: Option<bool>,
    /// How often the node status is computed (and written when changed).
    #[serde(
        default,
        with = "serde_go_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub node_status_update_frequency: Option<Duration>,
    /// How often the node status is written even without a change.
    #[serde(
        default,
        with = "serde_go_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub node_status_report_frequency: Option<Duration>,
    /// Duration of the node lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_lease_duration_seconds: Option<i32>,
    /// The kubelet's authenticated port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// Timeout of runtime requests (except long-running ones).
    #[serde(
        default,
        with = "serde_go_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub runtime_request_timeout: Option<Duration>,
    /// Feature gates by name (`EventedPLEG: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_gates: Option<BTreeMap<String, bool>>,
    /// CRI runtime endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_runtime_endpoint: Option<String>,
    /// CRI image endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_service_endpoint: Option<String>,
    /// Maximum size of a container log file before it is rotated (a quantity, e.g. `10Mi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_log_max_size: Option<String>,
    /// Maximum number of log files per container (the current one included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_log_max_files: Option<i32>,
    /// How often container logs are checked for rotation.
    #[serde(
        default,
        with = "serde_go_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub container_log_monitor_interval: Option<Duration>,
    /// Image-filesystem usage percent at or above which image GC always runs.
    #[serde(
        default,
        rename = "imageGCHighThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Image-filesystem usage percent image GC frees down to.
    #[serde(
        default,
        rename = "imageGCLowThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// Minimum age of an unused image before it may be garbage collected.
    #[serde(
        default,
        rename = "imageMinimumGCAge",
        with = "serde_go_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_minimum_gc_age: Option<Duration>,
    /// Hard eviction thresholds by signal (`memory.available: 100Mi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_hard: Option<BTreeMap<String, String>>,
    /// Soft eviction thresholds by signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_soft: Option<BTreeMap<String, String>>,
    /// Grace periods of the soft thresholds (`memory.available: 1m30s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    /// Minimum reclaim by signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_minimum_reclaim: Option<BTreeMap<String, String>>,
    /// How long a pressure condition is held after the last breach.
    #[serde(
        default,
        with = "serde_go_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub eviction_pressure_transition_period: Option<Duration>,
    /// Maximum grace period of pods evicted on a soft threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i64>,
    /// QoS-class cgroups for pods.
    #[serde(
        default,
        rename = "cgroupsPerQOS",
        skip_serializing_if = "Option::is_none"
    )]
    pub cgroups_per_qos: Option<bool>,
    /// `cgroupfs` or `systemd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_driver: Option<String>,
    /// The root cgroup of pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_root: Option<String>,
    /// The serving certificate of the secure port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert_file: Option<PathBuf>,
    /// Its key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_private_key_file: Option<PathBuf>,
    /// Authentication of the secure port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<KubeletAuthentication>,
}

/// `authentication` of the config file (x509 and anonymous; webhook is not supported).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletAuthentication {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x509: Option<KubeletX509Authentication>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anonymous: Option<KubeletAnonymousAuthentication>,
}

/// `authentication.x509`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletX509Authentication {
    #[serde(
        default,
        rename = "clientCAFile",
        skip_serializing_if = "Option::is_none"
    )]
    pub client_ca_file: Option<PathBuf>,
}

/// `authentication.anonymous`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletAnonymousAuthentication {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

impl KubeletConfiguration {
    /// Decode strictly from YAML or JSON text; `path` is for messages.
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
            serde_saphyr::from_str(text).map_err(|e| decode(e.to_string()))?
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
    pub tls: crate::secure_server::TlsConfig,
    /// Pod cgroups.
    pub cgroups: crate::cm::CgroupConfig,
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
}
