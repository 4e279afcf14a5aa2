//! Checks of single flag values, each a [`FlagError`] naming the flag, the value and the reason:
//! the CRI and Docker endpoints, the MTU, pod CIDRs, the streaming bind address, Go durations
//! (`time.ParseDuration`, via `node_common::duration`) and Go booleans (`strconv.ParseBool`).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use cri_proto::activation;

use super::DEFAULT_DOCKER_ENDPOINT;

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
    pub(super) fn new(flag: &'static str, value: &str, reason: impl Into<String>) -> Self {
        FlagError {
            flag,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

pub(super) fn check_cri_endpoint(value: &str) -> Result<String, FlagError> {
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
pub(super) fn resolve_docker_endpoint(value: &str) -> Result<String, FlagError> {
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

pub(super) fn parse_mtu(value: &str) -> Result<u32, FlagError> {
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

pub(super) fn check_pod_cidr(value: &str, dual_stack: bool) -> Result<String, FlagError> {
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
pub(super) fn resolve_streaming_bind_addr(value: &str) -> Result<String, FlagError> {
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

pub(super) fn flag_duration(flag: &'static str, value: &str) -> Result<Duration, FlagError> {
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
