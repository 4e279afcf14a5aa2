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

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use cri_proto::activation::{self, FdSelector};
use tracing::level_filters::LevelFilter;

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

/// Command-line flags of the `dockershim` binary: cri-dockerd v0.3.7's, then our own.
///
/// Values are kept as given and checked by [`Flags::into_config`], so that every mistake is
/// reported the same way. As with Go's pflag, a flag given twice takes the last value, and a
/// boolean flag takes its value after `=` (`--ipv6-dual-stack=false`).
#[derive(Debug, Clone, Parser)]
#[command(
    name = "dockershim",
    about = "A CRI runtime.v1 server on the Docker Engine (a drop-in replacement for cri-dockerd 0.3)",
    long_about = None,
    disable_version_flag = true,
    args_override_self = true,
    color = clap::ColorChoice::Never
)]
pub struct Flags {
    /// The endpoint to serve CRI on: unix:///path/to.sock (or an absolute path), or fd:// for a
    /// socket passed by systemd (fd:// is the first one, fd://N descriptor N, fd://NAME the one
    /// named NAME).
    #[arg(long, allow_hyphen_values = true, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    pub container_runtime_endpoint: String,
    /// Path to the state directory (sandbox checkpoints). `--root-directory` is our older name.
    #[arg(
        long = "cri-dockerd-root-directory",
        allow_hyphen_values = true,
        visible_alias = "root-directory",
        value_name = "DIR",
        default_value = DEFAULT_ROOT_DIRECTORY
    )]
    pub root_directory: String,
    /// The Docker Engine endpoint: unix:///path, tcp://host:port or an absolute socket path.
    /// Empty: $DOCKER_HOST, or Docker's default socket.
    #[arg(long, allow_hyphen_values = true, value_name = "ENDPOINT", default_value = DEFAULT_DOCKER_ENDPOINT)]
    pub docker_endpoint: String,
    /// The image whose network/IPC namespaces containers in each pod use. If it is absent and
    /// cannot be pulled, it is built from the pause program embedded in dockershim.
    #[arg(long, allow_hyphen_values = true, value_name = "IMAGE", default_value = DEFAULT_POD_INFRA_IMAGE)]
    pub pod_infra_container_image: String,
    /// `cni`, or `no-op` / empty for Docker's default bridge network. (`kubenet` is not
    /// implemented.)
    #[arg(long, allow_hyphen_values = true, value_name = "NAME", default_value = DEFAULT_NETWORK_PLUGIN)]
    pub network_plugin: String,
    /// MTU for the network plugin; 0 is the plugin's default. As in cri-dockerd only kubenet uses
    /// it: with cni the network config sets the MTU.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "MTU",
        default_value = "0"
    )]
    pub network_plugin_mtu: String,
    /// Comma-separated directories to search for CNI plugin binaries.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DIRS",
        default_value = "/opt/cni/bin"
    )]
    pub cni_bin_dir: String,
    /// Directory holding CNI network configurations.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DIR",
        default_value = "/etc/cni/net.d"
    )]
    pub cni_conf_dir: String,
    /// Directory where CNI caches results.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DIR",
        default_value = "/var/lib/cni/cache"
    )]
    pub cni_cache_dir: String,
    /// Hairpin mode: promiscuous-bridge, hairpin-veth or none. As in cri-dockerd only kubenet
    /// uses it: with cni the bridge config's hairpinMode decides.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "MODE",
        default_value = "none"
    )]
    pub hairpin_mode: String,
    /// Dual-stack pods (two pod CIDRs, one IPv4 and one IPv6).
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        value_parser = parse_go_bool
    )]
    pub ipv6_dual_stack: bool,
    /// Pod CIDR (comma-separated IPv4 and IPv6 ones with --ipv6-dual-stack) for standalone use;
    /// a kubelet in a cluster sets it through UpdateRuntimeConfig.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "CIDR",
        default_value = ""
    )]
    pub pod_cidr: String,
    /// Cancel a pull that made no progress for this long (Go duration, e.g. 1m0s).
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "1m0s"
    )]
    pub image_pull_progress_deadline: String,
    /// Timeout of every Docker request but pulls, logs, exec and attach (Go duration); 0 is
    /// two minutes.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "0s"
    )]
    pub runtime_request_timeout: String,
    /// Absolute name of the cgroup the runtime is expected to run in (recorded, not applied).
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "CGROUP",
        default_value = ""
    )]
    pub runtime_cgroups: String,
    /// Address of the streaming server (exec/attach/port-forward): an IP (a free port is
    /// chosen) or IP:port. Empty: every address, as cri-dockerd's default.
    #[arg(long, allow_hyphen_values = true, value_name = "ADDR", default_value = DEFAULT_STREAMING_BIND_ADDR)]
    pub streaming_bind_addr: String,
    /// Log level: panic, fatal, error, warn, warning, info, debug or trace ($RUST_LOG, when
    /// set, wins).
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "LEVEL",
        default_value = "info"
    )]
    pub log_level: String,
    /// Print the version and exit.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        value_parser = parse_go_bool
    )]
    pub version: bool,
    /// Print the build information and exit.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        value_parser = parse_go_bool
    )]
    pub buildinfo: bool,

    // Ours, not cri-dockerd's.
    /// Close a streaming connection (exec/attach/port-forward) idle this long (Go duration; the
    /// kubelet's flag of the same name).
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "4h"
    )]
    pub streaming_connection_idle_timeout: String,
    /// Concurrent streaming sessions at most; more are refused (503).
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "N",
        default_value = "128"
    )]
    pub streaming_max_sessions: String,
    /// oom_score_adj for sandbox containers (-1000..1000). Upstream uses -998; hosts that cannot
    /// lower oom_score_adj (no CAP_SYS_RESOURCE) fall back to 0 with a warning unless this is
    /// set.
    #[arg(long, allow_hyphen_values = true, value_name = "N")]
    pub sandbox_oom_score_adj: Option<String>,
    /// klog-style verbosity: 2 and up is debug, 5 and up trace (the more verbose of this and
    /// --log-level wins).
    #[arg(
        short = 'v',
        long = "v",
        value_name = "N",
        allow_hyphen_values = true,
        default_value_t = 0
    )]
    pub verbosity: u8,
}

/// A flag value that cannot be used: which flag, what value, why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value {value:?} for --{flag}: {reason}")]
pub struct FlagError {
    /// The flag's long name, without dashes.
    pub flag: &'static str,
    /// The value as given.
    pub value: String,
    /// Why it was rejected.
    pub reason: String,
}

impl FlagError {
    fn new(flag: &'static str, value: &str, reason: impl Into<String>) -> Self {
        FlagError {
            flag,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

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
}

/// Where CNI lives.
#[derive(Debug, Clone)]
pub struct CniSettings {
    pub bin_dirs: Vec<PathBuf>,
    pub conf_dir: PathBuf,
    pub cache_dir: PathBuf,
}

impl ShimConfig {
    /// cri-dockerd's defaults on `endpoint`, except the network: Docker's default bridge (the
    /// Go kubelet's embedded dockershim had no network plugin unless told). The kubelet's
    /// embedded mode and in-process tests start from this and set what they need.
    pub fn with_endpoint(endpoint: impl Into<String>) -> Self {
        let mut cfg = Flags::parse_from(["dockershim"])
            .into_config()
            .expect("the default flags are valid");
        cfg.endpoint = endpoint.into();
        cfg.cni = None;
        cfg
    }

    /// The passed socket the endpoint names, when it is an `fd://` one.
    pub fn fd_selector(&self) -> Result<Option<FdSelector>, activation::ActivationError> {
        activation::parse_fd_endpoint(&self.endpoint)
    }
}

impl Flags {
    /// Checks every flag and resolves them into a [`ShimConfig`]; the first bad value is the
    /// error.
    pub fn into_config(self) -> Result<ShimConfig, FlagError> {
        self.log_level()?;
        let endpoint = check_cri_endpoint(&self.container_runtime_endpoint)?;
        let root = self.root_directory.trim();
        if root.is_empty() {
            return Err(FlagError::new(
                "cri-dockerd-root-directory",
                &self.root_directory,
                "must not be empty",
            ));
        }
        let docker_endpoint = resolve_docker_endpoint(&self.docker_endpoint)?;
        let image = self.pod_infra_container_image.trim();
        if image.is_empty() || image.contains(char::is_whitespace) {
            return Err(FlagError::new(
                "pod-infra-container-image",
                &self.pod_infra_container_image,
                "must be an image reference such as registry.k8s.io/pause:3.6",
            ));
        }
        let cni = match self.network_plugin.trim() {
            "" | "no-op" => None,
            "cni" => Some(self.cni_settings()?),
            "kubenet" => {
                return Err(FlagError::new(
                    "network-plugin",
                    &self.network_plugin,
                    "kubenet is not implemented by this dockershim; use cni (with a bridge network config) or no-op",
                ));
            }
            _ => {
                return Err(FlagError::new(
                    "network-plugin",
                    &self.network_plugin,
                    "unknown network plugin: use cni, or no-op (or empty) for Docker's default bridge",
                ));
            }
        };
        let network_plugin_mtu = parse_mtu(&self.network_plugin_mtu)?;
        let hairpin_mode = HairpinMode::ALL
            .into_iter()
            .find(|m| m.as_str() == self.hairpin_mode)
            .ok_or_else(|| {
                FlagError::new(
                    "hairpin-mode",
                    &self.hairpin_mode,
                    "must be one of promiscuous-bridge, hairpin-veth, none",
                )
            })?;
        let pod_cidr = check_pod_cidr(&self.pod_cidr, self.ipv6_dual_stack)?;
        let image_pull_progress_deadline = flag_duration(
            "image-pull-progress-deadline",
            &self.image_pull_progress_deadline,
        )?;
        if image_pull_progress_deadline.is_zero() {
            return Err(FlagError::new(
                "image-pull-progress-deadline",
                &self.image_pull_progress_deadline,
                "must be more than 0 (a pull that makes no progress for this long is cancelled)",
            ));
        }
        let runtime_request_timeout =
            flag_duration("runtime-request-timeout", &self.runtime_request_timeout)?;
        let runtime_request_timeout = if runtime_request_timeout.is_zero() {
            DEFAULT_RUNTIME_REQUEST_TIMEOUT
        } else if runtime_request_timeout < Duration::from_secs(1) {
            return Err(FlagError::new(
                "runtime-request-timeout",
                &self.runtime_request_timeout,
                "must be 0 (the default of 2m) or at least 1s",
            ));
        } else {
            runtime_request_timeout
        };
        let cgroups = self.runtime_cgroups.trim();
        if !cgroups.is_empty() && !cgroups.starts_with('/') {
            return Err(FlagError::new(
                "runtime-cgroups",
                &self.runtime_cgroups,
                "must be an absolute cgroup name such as /system.slice/cri-docker.service",
            ));
        }
        let streaming_bind_addr = resolve_streaming_bind_addr(&self.streaming_bind_addr)?;
        let streaming_idle_timeout = flag_duration(
            "streaming-connection-idle-timeout",
            &self.streaming_connection_idle_timeout,
        )?;
        if streaming_idle_timeout.is_zero() {
            return Err(FlagError::new(
                "streaming-connection-idle-timeout",
                &self.streaming_connection_idle_timeout,
                "must be more than 0",
            ));
        }
        let streaming_max_sessions = self
            .streaming_max_sessions
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                FlagError::new(
                    "streaming-max-sessions",
                    &self.streaming_max_sessions,
                    "must be a whole number of sessions, 1 or more",
                )
            })?;
        let sandbox_oom_score_adj = match &self.sandbox_oom_score_adj {
            None => None,
            Some(v) => Some(
                v.trim()
                    .parse::<i64>()
                    .ok()
                    .filter(|n| (-1000..=1000).contains(n))
                    .ok_or_else(|| {
                        FlagError::new(
                            "sandbox-oom-score-adj",
                            v,
                            "must be a whole number from -1000 to 1000",
                        )
                    })?,
            ),
        };
        Ok(ShimConfig {
            endpoint,
            docker_endpoint,
            pod_infra_image: image.to_string(),
            cni,
            root_directory: PathBuf::from(root),
            streaming_bind_addr,
            streaming_idle_timeout,
            streaming_max_sessions,
            sandbox_oom_score_adj,
            image_pull_progress_deadline,
            runtime_request_timeout,
            network_plugin_mtu,
            hairpin_mode,
            pod_cidr,
            ipv6_dual_stack: self.ipv6_dual_stack,
            runtime_cgroups: cgroups.to_string(),
        })
    }

    /// The log level `--log-level` and `-v` ask for (the more verbose of the two).
    pub fn log_level(&self) -> Result<LevelFilter, FlagError> {
        let level = match self.log_level.trim().to_ascii_lowercase().as_str() {
            // tracing has no levels above error: logrus's panic and fatal log errors only.
            "panic" | "fatal" | "error" => LevelFilter::ERROR,
            "warn" | "warning" => LevelFilter::WARN,
            "info" => LevelFilter::INFO,
            "debug" => LevelFilter::DEBUG,
            "trace" => LevelFilter::TRACE,
            _ => {
                return Err(FlagError::new(
                    "log-level",
                    &self.log_level,
                    format!("unknown log level: use one of {}", LOG_LEVELS.join(", ")),
                ));
            }
        };
        let from_v = match self.verbosity {
            0 | 1 => LevelFilter::OFF,
            2..=4 => LevelFilter::DEBUG,
            _ => LevelFilter::TRACE,
        };
        Ok(level.max(from_v))
    }

    fn cni_settings(&self) -> Result<CniSettings, FlagError> {
        let bin_dirs: Vec<PathBuf> = self
            .cni_bin_dir
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect();
        if bin_dirs.is_empty() {
            return Err(FlagError::new(
                "cni-bin-dir",
                &self.cni_bin_dir,
                "the cni network plugin needs at least one directory of CNI plugins",
            ));
        }
        for (flag, value) in [
            ("cni-conf-dir", &self.cni_conf_dir),
            ("cni-cache-dir", &self.cni_cache_dir),
        ] {
            if value.trim().is_empty() {
                return Err(FlagError::new(
                    flag,
                    value,
                    "the cni network plugin needs this directory",
                ));
            }
        }
        Ok(CniSettings {
            bin_dirs,
            conf_dir: PathBuf::from(self.cni_conf_dir.trim()),
            cache_dir: PathBuf::from(self.cni_cache_dir.trim()),
        })
    }
}

/// The short form of a clap error, on one line: `invalid value "x" for --flag: reason`, or
/// clap's own first line (`unexpected argument '--foo' found`).
pub fn clap_error_line(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let text = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    if matches!(
        e.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) && let (Some(arg), Some(value)) = (
        text(ContextKind::InvalidArg),
        text(ContextKind::InvalidValue),
    )
        // A missing value reads better in clap's words ("a value is required for ...").
        && !value.is_empty()
    {
        // "--ipv6-dual-stack[=<BOOL>]" or "--v <N>": the flag alone.
        let flag = arg
            .split([' ', '[', '='])
            .next()
            .unwrap_or(&arg)
            .to_string();
        let reason = match (e.kind(), e.get(ContextKind::ValidValue)) {
            (ErrorKind::InvalidValue, Some(ContextValue::Strings(valid))) => {
                format!("must be one of {}", valid.join(", "))
            }
            _ => std::error::Error::source(e)
                .map(|s| s.to_string())
                .unwrap_or_else(|| "not a valid value".to_string()),
        };
        return format!("invalid value {value:?} for {flag}: {reason}");
    }
    let rendered = e.render().to_string();
    let first = rendered
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("invalid command line");
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

fn check_cri_endpoint(value: &str) -> Result<String, FlagError> {
    let flag = "container-runtime-endpoint";
    let endpoint = value.trim();
    if activation::is_fd_endpoint(endpoint) {
        return match activation::parse_fd_endpoint(endpoint) {
            Ok(_) => Ok(endpoint.to_string()),
            Err(activation::ActivationError::InvalidEndpoint { reason, .. }) => {
                Err(FlagError::new(flag, value, reason))
            }
            Err(e) => Err(FlagError::new(flag, value, e.to_string())),
        };
    }
    if let Some((scheme, _)) = endpoint.split_once("://") {
        let reason = match scheme {
            "unix" => None,
            "tcp" => Some(
                "tcp endpoints are not supported (CRI over TCP has no authentication): serve on \
                 unix:///path or a socket passed by systemd (fd://)",
            ),
            "npipe" => Some("Windows named pipes are not supported: use unix:///path or fd://"),
            _ => Some(
                "unsupported scheme: use unix:///path, or fd:// for a socket passed by systemd",
            ),
        };
        if let Some(reason) = reason {
            return Err(FlagError::new(flag, value, reason));
        }
    }
    match cri_proto::parse_endpoint(endpoint) {
        Ok(_) => Ok(endpoint.to_string()),
        Err(cri_proto::TransportError::InvalidEndpoint { reason, .. }) => {
            Err(FlagError::new(flag, value, reason))
        }
        Err(e) => Err(FlagError::new(flag, value, e.to_string())),
    }
}

/// `--docker-endpoint`: empty means `$DOCKER_HOST`, or Docker's default socket.
fn resolve_docker_endpoint(value: &str) -> Result<String, FlagError> {
    let flag = "docker-endpoint";
    let v = value.trim();
    if v.is_empty() {
        return match std::env::var("DOCKER_HOST") {
            Ok(host) if !host.trim().is_empty() => {
                check_docker_endpoint(host.trim()).map_err(|reason| {
                    FlagError::new(flag, value, format!("DOCKER_HOST={host:?}: {reason}"))
                })
            }
            _ => Ok(DEFAULT_DOCKER_ENDPOINT.to_string()),
        };
    }
    check_docker_endpoint(v).map_err(|reason| FlagError::new(flag, value, reason))
}

fn check_docker_endpoint(v: &str) -> Result<String, String> {
    if let Some(path) = v.strip_prefix("unix://") {
        if !path.starts_with('/') {
            return Err("the socket path must be absolute (unix:///var/run/docker.sock)".into());
        }
        return Ok(v.to_string());
    }
    if v.starts_with('/') {
        return Ok(v.to_string());
    }
    for scheme in ["tcp://", "http://"] {
        if let Some(rest) = v.strip_prefix(scheme) {
            let host_port = rest.trim_end_matches('/');
            let ok = match host_port.rsplit_once(':') {
                Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0),
                None => false,
            };
            if !ok || host_port.contains('/') {
                return Err(format!(
                    "expected {scheme}host:port with a port from 1 to 65535"
                ));
            }
            return Ok(v.to_string());
        }
    }
    let reason = match v.split_once("://").map(|(s, _)| s) {
        Some("https") => "TLS to the Docker Engine is not supported: use unix:// or tcp://",
        Some("npipe") => "Windows named pipes are not supported: use unix:///var/run/docker.sock",
        Some("ssh") => "ssh endpoints are not supported: use unix:// or tcp://",
        Some(_) => "unsupported scheme: use unix:///path, tcp://host:port or an absolute path",
        None => "expected unix:///path, tcp://host:port or an absolute socket path",
    };
    Err(reason.into())
}

fn parse_mtu(value: &str) -> Result<u32, FlagError> {
    let bad = |reason: &str| FlagError::new("network-plugin-mtu", value, reason);
    let n: i64 = value
        .trim()
        .parse()
        .map_err(|_| bad("not a whole number"))?;
    match n {
        0 => Ok(0),
        576..=65535 => Ok(n as u32),
        _ => Err(bad("must be 0 (the default) or from 576 to 65535")),
    }
}

/// One CIDR (`10.244.0.0/24`, `fd00::/64`): its address family is IPv4.
fn parse_cidr(s: &str) -> Result<bool, String> {
    let (addr, prefix) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?} is not a CIDR (address/prefix length)"))?;
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| format!("{addr:?} is not an IP address"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    match prefix.parse::<u8>() {
        Ok(p) if p <= max => Ok(addr.is_ipv4()),
        _ => Err(format!(
            "prefix length {prefix:?} of {s:?} must be from 0 to {max}"
        )),
    }
}

fn check_pod_cidr(value: &str, dual_stack: bool) -> Result<String, FlagError> {
    let bad = |reason: String| FlagError::new("pod-cidr", value, reason);
    let v = value.trim();
    if v.is_empty() {
        return Ok(String::new());
    }
    let parts: Vec<&str> = v.split(',').map(str::trim).collect();
    let families = parts
        .iter()
        .map(|p| parse_cidr(p))
        .collect::<Result<Vec<bool>, String>>()
        .map_err(bad)?;
    match families.as_slice() {
        [_] => {}
        [a, b] if a != b && dual_stack => {}
        [a, b] if a != b => {
            return Err(bad("two pod CIDRs need --ipv6-dual-stack=true".to_string()));
        }
        [_, _] => {
            return Err(bad(
                "two pod CIDRs must be one IPv4 and one IPv6".to_string()
            ));
        }
        _ => return Err(bad("at most two pod CIDRs (one IPv4, one IPv6)".to_string())),
    }
    Ok(parts.join(","))
}

/// `--streaming-bind-addr` in cri-dockerd's forms: an IP (the kernel chooses the port), or
/// IP:port (`[v6]:port`); empty means every address. Host names are refused, as cri-dockerd does.
fn resolve_streaming_bind_addr(value: &str) -> Result<String, FlagError> {
    let v = value.trim();
    if v.is_empty() {
        return Ok("0.0.0.0:0".to_string());
    }
    if let Ok(sa) = v.parse::<SocketAddr>() {
        return Ok(sa.to_string());
    }
    let unbracketed = v
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(v);
    if let Ok(ip) = unbracketed.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, 0).to_string());
    }
    let reason = match v.rsplit_once(':') {
        Some((host, port))
            if host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .is_ok() =>
        {
            format!("port {port:?} must be a number from 0 to 65535")
        }
        _ => "must be an IP address (the port is then chosen) or IP:port, e.g. 127.0.0.1 or \
              127.0.0.1:10010; host names are not accepted"
            .to_string(),
    };
    Err(FlagError::new("streaming-bind-addr", value, reason))
}

fn flag_duration(flag: &'static str, value: &str) -> Result<Duration, FlagError> {
    parse_go_duration(value).map_err(|reason| FlagError::new(flag, value, reason))
}

/// Go's `strconv.ParseBool`, which pflag's boolean flags use.
pub fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err("must be true or false (or 1, t, T, TRUE, True, 0, f, F, FALSE, False)".into()),
    }
}

/// A Go duration (`time.ParseDuration`): a sequence of decimal numbers, each with an optional
/// fraction and a unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`), like `4h`, `1h30m`, `1.5s`,
/// `250ms`. A number without a unit is an error, except `0`. Negative durations are refused:
/// no flag here has a use for them. The parser is the kubelet's (`node_common::duration`).
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    node_common::duration::parse_duration(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod duration_tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        for (s, want) in [
            ("4h", Duration::from_secs(4 * 3600)),
            ("1h30m", Duration::from_secs(5400)),
            ("1m0s", Duration::from_secs(60)),
            ("1.5s", Duration::from_millis(1500)),
            (".5s", Duration::from_millis(500)),
            ("1.s", Duration::from_secs(1)),
            ("250ms", Duration::from_millis(250)),
            ("10us", Duration::from_micros(10)),
            ("10µs", Duration::from_micros(10)),
            ("7ns", Duration::from_nanos(7)),
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("-0s", Duration::ZERO),
            ("+5s", Duration::from_secs(5)),
            ("2562047h", Duration::from_secs(2562047 * 3600)),
        ] {
            assert_eq!(parse_go_duration(s), Ok(want), "{s}");
        }
        for (s, why) in [
            ("30", "missing unit"),
            ("1m30", "missing unit"),
            ("5 parsecs", "unknown unit"),
            ("3d", "unknown unit"),
            ("", "invalid duration"),
            (".s", "invalid duration"),
            ("s", "invalid duration"),
            ("-", "invalid duration"),
            ("-1s", "negative"),
            ("3000000h", "too long"),
        ] {
            let e = parse_go_duration(s).unwrap_err();
            assert!(e.contains(why), "{s:?}: {e}");
        }
    }

    #[test]
    fn go_bools_parse() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(t), Ok(true));
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(f), Ok(false));
        }
        assert!(parse_go_bool("yes").is_err());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> Flags {
        Flags::try_parse_from(std::iter::once("dockershim").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    fn config(args: &[&str]) -> ShimConfig {
        flags(args)
            .into_config()
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    fn error(args: &[&str]) -> FlagError {
        match flags(args).into_config() {
            Ok(c) => panic!("{args:?} should be refused, got {c:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn defaults_are_cri_dockerds() {
        let f = flags(&[]);
        assert_eq!(
            f.container_runtime_endpoint,
            "unix:///var/run/cri-dockerd.sock"
        );
        assert_eq!(f.root_directory, "/var/lib/cri-dockerd");
        assert_eq!(f.docker_endpoint, "unix:///var/run/docker.sock");
        assert_eq!(f.pod_infra_container_image, "registry.k8s.io/pause:3.6");
        assert_eq!(f.network_plugin, "cni");
        assert_eq!(f.network_plugin_mtu, "0");
        assert_eq!(f.cni_bin_dir, "/opt/cni/bin");
        assert_eq!(f.cni_conf_dir, "/etc/cni/net.d");
        assert_eq!(f.cni_cache_dir, "/var/lib/cni/cache");
        assert_eq!(f.hairpin_mode, "none");
        assert!(!f.ipv6_dual_stack);
        assert_eq!(f.pod_cidr, "");
        assert_eq!(f.image_pull_progress_deadline, "1m0s");
        assert_eq!(f.runtime_request_timeout, "0s");
        assert_eq!(f.runtime_cgroups, "");
        assert_eq!(f.log_level, "info");
        assert!(!f.version && !f.buildinfo);
        // The one deliberate difference (see DEFAULT_STREAMING_BIND_ADDR).
        assert_eq!(f.streaming_bind_addr, "127.0.0.1");

        let cfg = f.into_config().unwrap();
        assert_eq!(cfg.endpoint, "unix:///var/run/cri-dockerd.sock");
        assert_eq!(cfg.root_directory, PathBuf::from("/var/lib/cri-dockerd"));
        assert_eq!(cfg.docker_endpoint, "unix:///var/run/docker.sock");
        assert_eq!(cfg.pod_infra_image, "registry.k8s.io/pause:3.6");
        let cni = cfg.cni.expect("cni is cri-dockerd's default plugin");
        assert_eq!(cni.bin_dirs, vec![PathBuf::from("/opt/cni/bin")]);
        assert_eq!(cni.conf_dir, PathBuf::from("/etc/cni/net.d"));
        assert_eq!(cni.cache_dir, PathBuf::from("/var/lib/cni/cache"));
        assert_eq!(cfg.network_plugin_mtu, 0);
        assert_eq!(cfg.hairpin_mode, HairpinMode::None);
        assert_eq!(cfg.image_pull_progress_deadline, Duration::from_secs(60));
        assert_eq!(cfg.runtime_request_timeout, DEFAULT_RUNTIME_REQUEST_TIMEOUT);
        assert_eq!(cfg.streaming_bind_addr, "127.0.0.1:0");
        assert_eq!(cfg.streaming_idle_timeout, Duration::from_secs(4 * 3600));
        assert_eq!(cfg.streaming_max_sessions, 128);
        assert_eq!(cfg.sandbox_oom_score_adj, None);
        assert_eq!(flags(&[]).log_level(), Ok(LevelFilter::INFO));
    }

    #[test]
    fn embedded_defaults_keep_dockers_bridge() {
        let cfg = ShimConfig::with_endpoint("unix:///tmp/x.sock");
        assert_eq!(cfg.endpoint, "unix:///tmp/x.sock");
        assert!(cfg.cni.is_none());
        assert_eq!(cfg.streaming_bind_addr, "127.0.0.1:0");
    }

    #[test]
    fn every_cri_dockerd_flag_is_accepted() {
        let cfg = config(&[
            "--container-runtime-endpoint",
            "unix:///run/cri-dockerd.sock",
            "--cri-dockerd-root-directory",
            "/var/lib/x",
            "--docker-endpoint",
            "tcp://127.0.0.1:2375",
            "--pod-infra-container-image",
            "registry.k8s.io/pause:3.9",
            "--network-plugin",
            "cni",
            "--network-plugin-mtu",
            "1450",
            "--cni-bin-dir",
            "/usr/lib/cni,/opt/cni/bin",
            "--cni-conf-dir",
            "/etc/x",
            "--cni-cache-dir",
            "/var/cache/x",
            "--hairpin-mode",
            "hairpin-veth",
            "--ipv6-dual-stack",
            "--pod-cidr",
            "10.244.0.0/24,fd00:10:244::/64",
            "--image-pull-progress-deadline",
            "2m30s",
            "--runtime-request-timeout",
            "30s",
            "--runtime-cgroups",
            "/system.slice/cri-docker.service",
            "--streaming-bind-addr",
            "127.0.0.1:10010",
            "--log-level",
            "debug",
        ]);
        assert_eq!(cfg.endpoint, "unix:///run/cri-dockerd.sock");
        assert_eq!(cfg.root_directory, PathBuf::from("/var/lib/x"));
        assert_eq!(cfg.docker_endpoint, "tcp://127.0.0.1:2375");
        assert_eq!(cfg.pod_infra_image, "registry.k8s.io/pause:3.9");
        let cni = cfg.cni.expect("cni");
        assert_eq!(
            cni.bin_dirs,
            vec![PathBuf::from("/usr/lib/cni"), PathBuf::from("/opt/cni/bin")]
        );
        assert_eq!(cni.conf_dir, PathBuf::from("/etc/x"));
        assert_eq!(cni.cache_dir, PathBuf::from("/var/cache/x"));
        assert_eq!(cfg.network_plugin_mtu, 1450);
        assert_eq!(cfg.hairpin_mode, HairpinMode::HairpinVeth);
        assert!(cfg.ipv6_dual_stack);
        assert_eq!(cfg.pod_cidr, "10.244.0.0/24,fd00:10:244::/64");
        assert_eq!(cfg.image_pull_progress_deadline, Duration::from_secs(150));
        assert_eq!(cfg.runtime_request_timeout, Duration::from_secs(30));
        assert_eq!(cfg.runtime_cgroups, "/system.slice/cri-docker.service");
        assert_eq!(cfg.streaming_bind_addr, "127.0.0.1:10010");
        let f = flags(&["--log-level", "debug"]);
        assert_eq!(f.log_level(), Ok(LevelFilter::DEBUG));
        // pflag's `--flag=value` form, and booleans with a value after `=`.
        let f = flags(&[
            "--ipv6-dual-stack=false",
            "--version=false",
            "--buildinfo=0",
            "--network-plugin=",
        ]);
        assert!(!f.ipv6_dual_stack && !f.version && !f.buildinfo);
        assert!(f.into_config().unwrap().cni.is_none());
        assert!(flags(&["--version"]).version);
        assert!(flags(&["--buildinfo"]).buildinfo);
        assert!(flags(&["--ipv6-dual-stack=T"]).ipv6_dual_stack);
    }

    #[test]
    fn our_own_flags_and_aliases() {
        let cfg = config(&[
            "--root-directory",
            "/var/lib/dockershim",
            "--streaming-connection-idle-timeout",
            "5m",
            "--streaming-max-sessions",
            "4",
            "--sandbox-oom-score-adj",
            "-998",
            "-v",
            "5",
        ]);
        assert_eq!(cfg.root_directory, PathBuf::from("/var/lib/dockershim"));
        assert_eq!(cfg.streaming_idle_timeout, Duration::from_secs(300));
        assert_eq!(cfg.streaming_max_sessions, 4);
        assert_eq!(cfg.sandbox_oom_score_adj, Some(-998));
        assert_eq!(flags(&["-v", "2"]).log_level(), Ok(LevelFilter::DEBUG));
        assert_eq!(
            flags(&["--v=5", "--log-level=warn"]).log_level(),
            Ok(LevelFilter::TRACE)
        );
        // As with pflag, the last of repeated flags wins (a drop-in adding to ExecStart).
        let cfg = config(&["--network-plugin", "cni", "--network-plugin", "no-op"]);
        assert!(cfg.cni.is_none());
    }

    #[test]
    fn log_levels_are_logrus_names() {
        for (name, want) in [
            ("panic", LevelFilter::ERROR),
            ("fatal", LevelFilter::ERROR),
            ("error", LevelFilter::ERROR),
            ("warn", LevelFilter::WARN),
            ("warning", LevelFilter::WARN),
            ("info", LevelFilter::INFO),
            ("debug", LevelFilter::DEBUG),
            ("trace", LevelFilter::TRACE),
            ("DEBUG", LevelFilter::DEBUG),
        ] {
            assert_eq!(
                flags(&["--log-level", name]).log_level(),
                Ok(want),
                "{name}"
            );
        }
    }

    #[test]
    fn endpoints() {
        for ok in [
            "unix:///run/x.sock",
            "/run/x.sock",
            "fd://",
            "fd://3",
            "fd://cri-docker.socket",
        ] {
            assert_eq!(config(&["--container-runtime-endpoint", ok]).endpoint, ok);
        }
        assert_eq!(
            config(&["--container-runtime-endpoint", "fd://"])
                .fd_selector()
                .unwrap(),
            Some(FdSelector::First)
        );
        for ok in [
            "unix:///x.sock",
            "/x.sock",
            "tcp://10.0.0.1:2375",
            "http://h:2375",
        ] {
            assert_eq!(config(&["--docker-endpoint", ok]).docker_endpoint, ok);
        }
    }

    #[test]
    fn streaming_bind_addr_forms() {
        for (given, want) in [
            ("127.0.0.1", "127.0.0.1:0"),
            ("127.0.0.1:10010", "127.0.0.1:10010"),
            ("::1", "[::1]:0"),
            ("[::1]", "[::1]:0"),
            ("[::1]:10010", "[::1]:10010"),
            ("0.0.0.0", "0.0.0.0:0"),
            ("", "0.0.0.0:0"),
        ] {
            assert_eq!(
                config(&["--streaming-bind-addr", given]).streaming_bind_addr,
                want,
                "{given}"
            );
        }
    }

    #[test]
    fn bad_values_name_flag_value_and_reason() {
        for (args, flag, why) in [
            (
                &["--container-runtime-endpoint", "tcp://1.2.3.4:5"][..],
                "container-runtime-endpoint",
                "tcp endpoints are not supported",
            ),
            (
                &["--container-runtime-endpoint", "relative.sock"],
                "container-runtime-endpoint",
                "absolute",
            ),
            (
                &["--container-runtime-endpoint", "fd://1"],
                "container-runtime-endpoint",
                "not a passed socket",
            ),
            (
                &["--container-runtime-endpoint", "npipe:////./pipe/x"],
                "container-runtime-endpoint",
                "named pipes",
            ),
            (
                &["--cri-dockerd-root-directory", ""],
                "cri-dockerd-root-directory",
                "empty",
            ),
            (
                &["--docker-endpoint", "ssh://me@host"],
                "docker-endpoint",
                "ssh",
            ),
            (
                &["--docker-endpoint", "tcp://host"],
                "docker-endpoint",
                "host:port",
            ),
            (
                &["--docker-endpoint", "unix://rel.sock"],
                "docker-endpoint",
                "absolute",
            ),
            (
                &["--pod-infra-container-image", " "],
                "pod-infra-container-image",
                "image reference",
            ),
            (
                &["--network-plugin", "flannel"],
                "network-plugin",
                "unknown network plugin",
            ),
            (
                &["--network-plugin", "kubenet"],
                "network-plugin",
                "kubenet is not implemented",
            ),
            (
                &["--network-plugin-mtu", "abc"],
                "network-plugin-mtu",
                "whole number",
            ),
            (
                &["--network-plugin-mtu", "100"],
                "network-plugin-mtu",
                "576 to 65535",
            ),
            (
                &["--network-plugin-mtu", "70000"],
                "network-plugin-mtu",
                "576 to 65535",
            ),
            (&["--cni-bin-dir", ","], "cni-bin-dir", "at least one"),
            (&["--cni-conf-dir", ""], "cni-conf-dir", "needs this"),
            (&["--cni-cache-dir", ""], "cni-cache-dir", "needs this"),
            (
                &["--hairpin-mode", "hairpin"],
                "hairpin-mode",
                "promiscuous-bridge, hairpin-veth, none",
            ),
            (&["--pod-cidr", "10.0.0.0"], "pod-cidr", "not a CIDR"),
            (&["--pod-cidr", "10.0.0.0/33"], "pod-cidr", "prefix length"),
            (&["--pod-cidr", "x/8"], "pod-cidr", "not an IP address"),
            (
                &["--pod-cidr", "10.0.0.0/8,fd00::/64"],
                "pod-cidr",
                "--ipv6-dual-stack",
            ),
            (
                &["--pod-cidr", "10.0.0.0/8,10.1.0.0/16", "--ipv6-dual-stack"],
                "pod-cidr",
                "one IPv4 and one IPv6",
            ),
            (
                &["--image-pull-progress-deadline", "60"],
                "image-pull-progress-deadline",
                "missing unit",
            ),
            (
                &["--image-pull-progress-deadline", "0"],
                "image-pull-progress-deadline",
                "more than 0",
            ),
            (
                &["--runtime-request-timeout", "2 minutes"],
                "runtime-request-timeout",
                "unknown unit",
            ),
            (
                &["--runtime-request-timeout", "-1s"],
                "runtime-request-timeout",
                "negative",
            ),
            (
                &["--runtime-cgroups", "system.slice"],
                "runtime-cgroups",
                "absolute",
            ),
            (
                &["--streaming-bind-addr", "localhost:10010"],
                "streaming-bind-addr",
                "host names",
            ),
            (
                &["--streaming-bind-addr", "127.0.0.1:99999"],
                "streaming-bind-addr",
                "from 0 to 65535",
            ),
            (
                &["--log-level", "verbose"],
                "log-level",
                "unknown log level",
            ),
            (
                &["--streaming-connection-idle-timeout", "5"],
                "streaming-connection-idle-timeout",
                "missing unit",
            ),
            (
                &["--streaming-max-sessions", "0"],
                "streaming-max-sessions",
                "1 or more",
            ),
            (
                &["--sandbox-oom-score-adj", "-1001"],
                "sandbox-oom-score-adj",
                "-1000 to 1000",
            ),
        ] {
            let e = error(args);
            assert_eq!(e.flag, flag, "{args:?}");
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("invalid value {:?} for --{flag}: ", e.value)),
                "{text}"
            );
            assert!(text.contains(why), "{args:?}: {text}");
            assert!(!text.contains('\n'), "{text}");
        }
    }

    #[test]
    fn clap_errors_are_one_line() {
        let line = |args: &[&str]| {
            let e =
                Flags::try_parse_from(std::iter::once("dockershim").chain(args.iter().copied()))
                    .unwrap_err();
            clap_error_line(&e)
        };
        let l = line(&["--ipv6-dual-stack=maybe"]);
        assert!(
            l.starts_with("invalid value \"maybe\" for --ipv6-dual-stack: must be true or false"),
            "{l}"
        );
        let l = line(&["--no-such-flag"]);
        assert!(l.contains("--no-such-flag"), "{l}");
        let l = line(&["-v", "x"]);
        assert!(l.starts_with("invalid value \"x\" for --v: "), "{l}");
        let l = line(&["--docker-endpoint"]);
        assert!(
            l.starts_with("a value is required for '--docker-endpoint"),
            "{l}"
        );
        assert!(!l.contains('\n'));
    }
}
