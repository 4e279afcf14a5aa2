//! dockershim's settings: the command-line flags (cri-dockerd's names and defaults) and the
//! resolved [`ShimConfig`] the service runs with. The kubelet's embedded mode builds a
//! `ShimConfig` directly.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// The pod infra ("pause") image used when no flag says otherwise, as upstream.
pub const DEFAULT_POD_INFRA_IMAGE: &str = "registry.k8s.io/pause:3.9";
/// Where dockershim listens by default.
pub const DEFAULT_ENDPOINT: &str = "unix:///var/run/dockershim.sock";
/// Docker's default socket.
pub const DEFAULT_DOCKER_ENDPOINT: &str = "unix:///var/run/docker.sock";

/// Command-line flags of the `dockershim` binary.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "dockershim",
    version,
    about = "A CRI runtime.v1 server on the Docker Engine"
)]
pub struct Flags {
    /// The endpoint to serve CRI on (unix socket).
    #[arg(long, default_value = DEFAULT_ENDPOINT)]
    pub container_runtime_endpoint: String,
    /// The Docker Engine endpoint.
    #[arg(long, default_value = DEFAULT_DOCKER_ENDPOINT)]
    pub docker_endpoint: String,
    /// The image whose network/IPC namespaces containers in each pod use.
    #[arg(long, default_value = DEFAULT_POD_INFRA_IMAGE)]
    pub pod_infra_container_image: String,
    /// `cni`, or empty for Docker's default bridge.
    #[arg(long, default_value = "")]
    pub network_plugin: String,
    /// Directories to search for CNI plugin binaries (comma separated).
    #[arg(long, default_value = "/opt/cni/bin")]
    pub cni_bin_dir: String,
    /// Directory holding CNI network configurations.
    #[arg(long, default_value = "/etc/cni/net.d")]
    pub cni_conf_dir: PathBuf,
    /// Directory where CNI caches results.
    #[arg(long, default_value = "/var/lib/cni/cache")]
    pub cni_cache_dir: PathBuf,
    /// Directory for dockershim's own state (sandbox checkpoints).
    #[arg(long, default_value = "/var/lib/dockershim")]
    pub root_directory: PathBuf,
    /// Address of the streaming server (exec/attach/port-forward).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub streaming_bind_addr: String,
    /// Close a streaming connection (exec/attach/port-forward) idle this long (the kubelet's
    /// flag of the same name; Go duration syntax).
    #[arg(long, default_value = "4h", value_parser = parse_duration)]
    pub streaming_connection_idle_timeout: Duration,
    /// Concurrent streaming sessions at most; more are refused (503).
    #[arg(long, default_value_t = 128)]
    pub streaming_max_sessions: usize,
    /// Cgroup dockershim puts itself in (informational here).
    #[arg(long, default_value = "")]
    pub runtime_cgroups: String,
    /// oom_score_adj for sandbox containers. Upstream uses -998; hosts that cannot lower
    /// oom_score_adj (no CAP_SYS_RESOURCE) fall back to 0 with a warning unless this is set.
    #[arg(long)]
    pub sandbox_oom_score_adj: Option<i64>,
    /// Give up a pull that made no progress for this long (seconds).
    #[arg(long, default_value_t = 60)]
    pub image_pull_progress_deadline: u64,
    /// Log verbosity (klog-style levels: 0 info, 2 and up debug, 5 and up trace).
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: u8,
}

/// What the service runs with.
#[derive(Debug, Clone)]
pub struct ShimConfig {
    pub endpoint: String,
    pub docker_endpoint: String,
    pub pod_infra_image: String,
    /// `Some` in CNI mode.
    pub cni: Option<CniSettings>,
    pub root_directory: PathBuf,
    pub streaming_bind_addr: String,
    pub streaming_idle_timeout: Duration,
    pub streaming_max_sessions: usize,
    pub sandbox_oom_score_adj: Option<i64>,
    pub image_pull_progress_deadline: Duration,
}

/// A Go duration (`4h`, `1h30m`, `90s`, `500ms`); a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("missing unit in duration {s:?}"))?;
        let (num, tail) = rest.split_at(digits);
        let value: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale = match unit {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return Err(format!("unknown unit {unit:?} in duration {s:?}")),
        };
        total += Duration::from_secs_f64(value * scale);
        rest = next;
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    Ok(total)
}

/// Where CNI lives.
#[derive(Debug, Clone)]
pub struct CniSettings {
    pub bin_dirs: Vec<PathBuf>,
    pub conf_dir: PathBuf,
    pub cache_dir: PathBuf,
}

impl ShimConfig {
    /// Defaults for an endpoint, as the flags would give them.
    pub fn with_endpoint(endpoint: impl Into<String>) -> Self {
        let mut cfg = Flags::parse_from(["dockershim"]).into_config();
        cfg.endpoint = endpoint.into();
        cfg
    }
}

impl Flags {
    /// Resolves the flags into a [`ShimConfig`].
    pub fn into_config(self) -> ShimConfig {
        let cni = (self.network_plugin == "cni").then(|| CniSettings {
            bin_dirs: self
                .cni_bin_dir
                .split(',')
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
                .collect(),
            conf_dir: self.cni_conf_dir.clone(),
            cache_dir: self.cni_cache_dir.clone(),
        });
        ShimConfig {
            endpoint: self.container_runtime_endpoint,
            docker_endpoint: self.docker_endpoint,
            pod_infra_image: self.pod_infra_container_image,
            cni,
            root_directory: self.root_directory,
            streaming_bind_addr: self.streaming_bind_addr,
            streaming_idle_timeout: self.streaming_connection_idle_timeout,
            streaming_max_sessions: self.streaming_max_sessions,
            sandbox_oom_score_adj: self.sandbox_oom_score_adj,
            image_pull_progress_deadline: Duration::from_secs(self.image_pull_progress_deadline),
        }
    }
}

#[cfg(test)]
mod duration_tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_duration("4h"), Ok(Duration::from_secs(4 * 3600)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
        let f = Flags::parse_from([
            "dockershim",
            "--streaming-connection-idle-timeout",
            "5m",
            "--streaming-max-sessions",
            "4",
        ])
        .into_config();
        assert_eq!(f.streaming_idle_timeout, Duration::from_secs(300));
        assert_eq!(f.streaming_max_sessions, 4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_cri_dockerds() {
        let cfg = Flags::parse_from(["dockershim"]).into_config();
        assert_eq!(cfg.endpoint, "unix:///var/run/dockershim.sock");
        assert_eq!(cfg.pod_infra_image, "registry.k8s.io/pause:3.9");
        assert_eq!(cfg.root_directory, PathBuf::from("/var/lib/dockershim"));
        assert!(cfg.cni.is_none());
    }

    #[test]
    fn cni_mode_takes_the_directories() {
        let cfg = Flags::parse_from([
            "dockershim",
            "--network-plugin=cni",
            "--cni-bin-dir=/usr/lib/cni,/opt/cni/bin",
            "--cni-conf-dir=/etc/x",
        ])
        .into_config();
        let cni = cfg.cni.expect("cni mode");
        assert_eq!(cni.bin_dirs.len(), 2);
        assert_eq!(cni.conf_dir, PathBuf::from("/etc/x"));
    }
}
