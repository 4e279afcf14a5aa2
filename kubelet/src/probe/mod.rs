//! Probing a container once, whatever asks (upstream `pkg/probe` with its `exec`, `http`, `tcp`
//! and `grpc` probers, and `prober/results`): [`run_probe`] runs an exec, `httpGet`,
//! `tcpSocket` or `grpc` handler against a container and says whether it passed; [`results`]
//! keeps the latest liveness, readiness and startup result per container. The exec handler runs
//! through a [`CommandRunner`] the caller provides (the runtime manager implements it), so this
//! package knows nothing of the runtime. The prober's workers ([`crate::prober`]) and lifecycle
//! hooks (`kuberuntime`) both use it.

pub mod results;
pub mod transport;

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub use results::{ProbeResults, ProbeType};

/// Runs a command in a container (upstream `kubecontainer.CommandRunner`).
#[async_trait]
pub trait CommandRunner: Send + Sync {
    /// The command's exit code, or why it could not run.
    async fn run_in_container(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<i32, String>;
}

/// Resolve a probe port: a number, or a named container port.
fn resolve_port(port: &IntOrString, c: &Container) -> Option<u16> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p).ok(),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .or_else(|| name.parse().ok()),
    }
}

/// Run `probe` once against container `id` of a pod with IP `pod_ip` (upstream `prober.runProbe`).
pub async fn run_probe(
    runtime: &(impl CommandRunner + ?Sized),
    probe: &Probe,
    c: &Container,
    id: &str,
    pod_ip: &str,
) -> Result<(), String> {
    let timeout =
        Duration::from_secs(u64::try_from(probe.timeout_seconds.unwrap_or(1).max(1)).unwrap_or(1));
    if let Some(exec) = &probe.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        let code = runtime.run_in_container(id, cmd, timeout).await?;
        return if code == 0 {
            Ok(())
        } else {
            Err(format!("command exited with {code}"))
        };
    }
    if let Some(h) = &probe.http_get {
        let port = resolve_port(&h.port, c).ok_or("invalid port")?;
        let host = h
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| pod_ip.to_string());
        let path = h
            .path
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/".into());
        let https = h
            .scheme
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("https"));
        let headers: Vec<(String, String)> = h
            .http_headers
            .iter()
            .flatten()
            .map(|hd| (hd.name.clone(), hd.value.clone()))
            .collect();
        let code = tokio::time::timeout(
            timeout,
            transport::http_get(&host, port, &path, https, &headers),
        )
        .await
        .map_err(|_| {
            format!(
                "Get {}://{host}:{port}{path}: timeout",
                if https { "https" } else { "http" }
            )
        })??;
        return if (200..400).contains(&code) {
            Ok(())
        } else {
            Err(format!("HTTP probe failed with statuscode: {code}"))
        };
    }
    if let Some(g) = &probe.grpc {
        let port = u16::try_from(g.port).map_err(|_| format!("invalid port {}", g.port))?;
        let service = g.service.clone().unwrap_or_default();
        return tokio::time::timeout(timeout, transport::grpc_health(pod_ip, port, &service))
            .await
            .map_err(|_| {
                format!(
                    "timeout: health rpc did not complete within {}s",
                    timeout.as_secs()
                )
            })?;
    }
    if let Some(t) = &probe.tcp_socket {
        let port = resolve_port(&t.port, c).ok_or("invalid port")?;
        let host = t
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| pod_ip.to_string());
        return tokio::time::timeout(
            timeout,
            tokio::net::TcpStream::connect((host.as_str(), port)),
        )
        .await
        .map_err(|_| "dial timeout".to_string())?
        .map(|_| ())
        .map_err(|e| e.to_string());
    }
    Err("probe has no handler".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerPort;

    #[test]
    fn named_ports() {
        let c = Container {
            name: "c".into(),
            ports: Some(vec![ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert_eq!(
            resolve_port(&IntOrString::String("http".into()), &c),
            Some(8080)
        );
        assert_eq!(resolve_port(&IntOrString::Int(80), &c), Some(80));
        assert_eq!(resolve_port(&IntOrString::String("nope".into()), &c), None);
    }
}
