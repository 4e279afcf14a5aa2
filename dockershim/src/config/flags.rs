//! The command line of the `dockershim` binary: cri-dockerd v0.3.7's flags with their names,
//! syntax and defaults, then our own ([`Flags`], parsed by clap), and their resolution into a
//! [`ShimConfig`] ([`Flags::into_config`]), every value checked with `validate`. Also clap's
//! errors on one line ([`clap_error_line`]).

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use tracing::level_filters::LevelFilter;

use super::validate::{
    FlagError, check_cri_endpoint, check_pod_cidr, flag_duration, parse_go_bool, parse_mtu,
    resolve_docker_endpoint, resolve_streaming_bind_addr,
};
use super::{
    CniSettings, DEFAULT_DOCKER_ENDPOINT, DEFAULT_ENDPOINT, DEFAULT_NETWORK_PLUGIN,
    DEFAULT_POD_INFRA_IMAGE, DEFAULT_ROOT_DIRECTORY, DEFAULT_RUNTIME_REQUEST_TIMEOUT,
    DEFAULT_STREAMING_BIND_ADDR, HairpinMode, LOG_LEVELS, ShimConfig,
};

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
    /// `--cni-bin-dir`, `--cni-conf-dir`, `--cni-cache-dir` (shared with the kubelet).
    #[command(flatten)]
    pub cni: node_common::cni::CniDirFlags,
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
            pull_progress: None,
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
        let bin_dirs: Vec<PathBuf> = self.cni.bin_dirs();
        if bin_dirs.is_empty() {
            return Err(FlagError::new(
                "cni-bin-dir",
                &self.cni.cni_bin_dir,
                "the cni network plugin needs at least one directory of CNI plugins",
            ));
        }
        for (flag, value) in [
            ("cni-conf-dir", &self.cni.cni_conf_dir),
            ("cni-cache-dir", &self.cni.cni_cache_dir),
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
            conf_dir: PathBuf::from(self.cni.cni_conf_dir.trim()),
            cache_dir: PathBuf::from(self.cni.cni_cache_dir.trim()),
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
