//! Building a pod's CRI `PodSandboxConfig` (upstream `kuberuntime_sandbox.go`
//! `generatePodSandboxConfig` and `dns.go`). This module owns the translation of a pod spec
//! into sandbox metadata, hostname, log directory, labels, port mappings, namespace options and
//! DNS configuration. It performs no RPCs; reading the host's resolv.conf is its only I/O.

use std::path::PathBuf;

use cri_proto::runtime::v1 as cri;
use k8s_openapi::api::core::v1::Pod;

use super::labels::{new_pod_annotations, new_pod_labels};

/// Where pod logs live (upstream `podLogsRootDirectory`).
pub const POD_LOGS_ROOT_DIRECTORY: &str = "/var/log/pods";
/// The host resolver config used for `Default` DNS.
pub const HOST_RESOLV_CONF: &str = "/etc/resolv.conf";

/// `/var/log/pods/<ns>_<name>_<uid>` (upstream `BuildPodLogsDirectory`).
pub fn build_pod_logs_directory(namespace: &str, name: &str, uid: &str) -> PathBuf {
    PathBuf::from(POD_LOGS_ROOT_DIRECTORY).join(format!("{namespace}_{name}_{uid}"))
}

/// The pod's log directory.
pub fn pod_logs_directory(pod: &Pod) -> PathBuf {
    build_pod_logs_directory(
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default(),
    )
}

/// Parse resolv.conf text into (servers, searches, options) (upstream `parseResolvConf`).
pub fn parse_resolv_conf(text: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut servers, mut searches, mut options) = (vec![], vec![], vec![]);
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or_default();
        let mut f = line.split_whitespace();
        match f.next() {
            Some("nameserver") => servers.extend(f.next().map(str::to_string)),
            Some("search") => searches = f.map(str::to_string).collect(),
            Some("options") => options.extend(f.map(str::to_string)),
            _ => {}
        }
    }
    (servers, searches, options)
}

fn host_dns() -> cri::DnsConfig {
    let text = std::fs::read_to_string(HOST_RESOLV_CONF).unwrap_or_default();
    let (servers, searches, options) = parse_resolv_conf(&text);
    cri::DnsConfig {
        servers,
        searches,
        options,
    }
}

/// DNS config for the pod (upstream `GetPodDNS`). With no cluster DNS configured, `ClusterFirst`
/// and `ClusterFirstWithHostNet` fall back to `Default` (the host's resolv.conf) like upstream;
/// `None` uses only the pod's `dnsConfig`. The pod's `dnsConfig` is merged in.
pub fn pod_dns_config(pod: &Pod) -> cri::DnsConfig {
    let spec = pod.spec.as_ref();
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let mut dns = if policy == "None" {
        cri::DnsConfig::default()
    } else {
        host_dns()
    };
    if let Some(cfg) = spec.and_then(|s| s.dns_config.as_ref()) {
        for s in cfg.nameservers.iter().flatten() {
            if !dns.servers.contains(s) {
                dns.servers.push(s.clone());
            }
        }
        for s in cfg.searches.iter().flatten() {
            if !dns.searches.contains(s) {
                dns.searches.push(s.clone());
            }
        }
        for o in cfg.options.iter().flatten() {
            let o = match &o.value {
                Some(v) => format!("{}:{v}", o.name.as_deref().unwrap_or_default()),
                None => o.name.clone().unwrap_or_default(),
            };
            if !o.is_empty() && !dns.options.contains(&o) {
                dns.options.push(o);
            }
        }
    }
    dns
}

fn protocol(p: Option<&str>) -> i32 {
    match p {
        Some("UDP") => cri::Protocol::Udp as i32,
        Some("SCTP") => cri::Protocol::Sctp as i32,
        _ => cri::Protocol::Tcp as i32,
    }
}

/// Namespace options from hostNetwork/hostPID/hostIPC (upstream `namespacesForPod`).
pub fn namespaces_for_pod(pod: &Pod) -> cri::NamespaceOption {
    let spec = pod.spec.as_ref();
    let mode = |host: Option<bool>, default: cri::NamespaceMode| {
        if host.unwrap_or(false) {
            cri::NamespaceMode::Node as i32
        } else {
            default as i32
        }
    };
    cri::NamespaceOption {
        network: mode(spec.and_then(|s| s.host_network), cri::NamespaceMode::Pod),
        pid: mode(spec.and_then(|s| s.host_pid), cri::NamespaceMode::Container),
        ipc: mode(spec.and_then(|s| s.host_ipc), cri::NamespaceMode::Pod),
        ..Default::default()
    }
}

/// Upstream `generatePodSandboxConfig`.
pub fn generate_pod_sandbox_config(pod: &Pod, attempt: u32) -> cri::PodSandboxConfig {
    let spec = pod.spec.as_ref();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let hostname = spec
        .and_then(|s| s.hostname.clone())
        .unwrap_or_else(|| name.clone());
    // Hostnames are at most 63 characters (upstream truncates the pod name).
    let hostname: String = hostname.chars().take(63).collect();
    let hostname = hostname.trim_end_matches(['-', '.']).to_string();
    let mut port_mappings = vec![];
    for c in spec.map(|s| s.containers.as_slice()).unwrap_or(&[]) {
        for p in c.ports.iter().flatten() {
            let Some(host_port) = p.host_port.filter(|h| *h > 0) else {
                continue;
            };
            port_mappings.push(cri::PortMapping {
                protocol: protocol(p.protocol.as_deref()),
                container_port: p.container_port,
                host_port,
                host_ip: p.host_ip.clone().unwrap_or_default(),
            });
        }
    }
    let sc = spec.and_then(|s| s.security_context.as_ref());
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name,
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            attempt,
        }),
        hostname: if crate::container::is_host_network_pod(pod) {
            String::new()
        } else {
            hostname
        },
        log_directory: pod_logs_directory(pod).to_string_lossy().into_owned(),
        dns_config: Some(pod_dns_config(pod)),
        port_mappings,
        labels: new_pod_labels(pod),
        annotations: new_pod_annotations(pod),
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces_for_pod(pod)),
                run_as_user: sc
                    .and_then(|s| s.run_as_user)
                    .map(|value| cri::Int64Value { value }),
                run_as_group: sc
                    .and_then(|s| s.run_as_group)
                    .map(|value| cri::Int64Value { value }),
                supplemental_groups: sc
                    .and_then(|s| s.supplemental_groups.clone())
                    .unwrap_or_default(),
                ..Default::default()
            }),
            sysctls: sc
                .and_then(|s| s.sysctls.as_ref())
                .map(|v| {
                    v.iter()
                        .map(|s| (s.name.clone(), s.value.clone()))
                        .collect()
                })
                .unwrap_or_default(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec};

    fn pod() -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("web-node1".into());
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = Some("u1".into());
        p.spec = Some(PodSpec {
            host_network: Some(true),
            containers: vec![Container {
                name: "c".into(),
                ports: Some(vec![ContainerPort {
                    container_port: 80,
                    host_port: Some(8080),
                    ..Default::default()
                }]),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    #[test]
    fn sandbox_config() {
        let c = generate_pod_sandbox_config(&pod(), 2);
        let m = c.metadata.as_ref().expect("metadata");
        assert_eq!(
            (m.name.as_str(), m.uid.as_str(), m.attempt),
            ("web-node1", "u1", 2)
        );
        assert_eq!(c.log_directory, "/var/log/pods/default_web-node1_u1");
        assert_eq!(
            c.labels.get("io.kubernetes.pod.uid").map(String::as_str),
            Some("u1")
        );
        assert_eq!(c.port_mappings.len(), 1);
        let ns = c
            .linux
            .and_then(|l| l.security_context)
            .and_then(|s| s.namespace_options)
            .expect("ns");
        assert_eq!(ns.network, cri::NamespaceMode::Node as i32);
        assert_eq!(ns.pid, cri::NamespaceMode::Container as i32);
    }

    #[test]
    fn resolv_conf() {
        let (s, q, o) = parse_resolv_conf(
            "nameserver 1.1.1.1\n# x\nsearch a b\noptions ndots:5\nnameserver 8.8.8.8",
        );
        assert_eq!(s, vec!["1.1.1.1", "8.8.8.8"]);
        assert_eq!(q, vec!["a", "b"]);
        assert_eq!(o, vec!["ndots:5"]);
    }
}
