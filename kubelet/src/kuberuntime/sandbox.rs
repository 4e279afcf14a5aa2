//! Building a pod's CRI `PodSandboxConfig` (upstream `kuberuntime_sandbox.go`
//! `generatePodSandboxConfig` and `dns.go`). This module owns the translation of a pod spec
//! into sandbox metadata, hostname, log directory, labels, port mappings, namespace options;
//! the DNS configuration comes from [`crate::dns`]. It performs no RPCs and no I/O.

use std::path::PathBuf;

use cri_proto::runtime::v1 as cri;
use k8s_openapi::api::core::v1::Pod;

use super::labels::{new_pod_annotations, new_pod_labels};

/// Where pod logs live (upstream `podLogsRootDirectory`).
pub const POD_LOGS_ROOT_DIRECTORY: &str = "/var/log/pods";

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

/// Upstream `kubecontainer.HasPrivilegedContainer`: whether any init, app or
/// ephemeral container asks for `securityContext.privileged`. The sandbox must
/// then be privileged too, or runtimes such as containerd refuse the container
/// ("no privileged container allowed in sandbox").
pub fn has_privileged_container(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let privileged = |sc: Option<&k8s_openapi::api::core::v1::SecurityContext>| {
        sc.and_then(|sc| sc.privileged).unwrap_or(false)
    };
    spec.init_containers
        .iter()
        .flatten()
        .any(|c| privileged(c.security_context.as_ref()))
        || spec
            .containers
            .iter()
            .any(|c| privileged(c.security_context.as_ref()))
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| privileged(c.security_context.as_ref()))
}

/// Upstream `generatePodSandboxConfig`; `dns` is the pod's DNS from
/// [`crate::dns::DnsConfigurer::get_pod_dns`].
pub fn generate_pod_sandbox_config(
    pod: &Pod,
    attempt: u32,
    dns: cri::DnsConfig,
) -> cri::PodSandboxConfig {
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
        dns_config: Some(dns),
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
                // Upstream: the pod's fsGroup first, then its supplementalGroups.
                supplemental_groups: sc
                    .into_iter()
                    .flat_map(|s| {
                        s.fs_group
                            .into_iter()
                            .chain(s.supplemental_groups.iter().flatten().copied())
                    })
                    .collect(),
                privileged: has_privileged_container(pod),
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
        let c = generate_pod_sandbox_config(&pod(), 2, cri::DnsConfig::default());
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

    fn sandbox_privileged(p: &Pod) -> bool {
        generate_pod_sandbox_config(p, 0, cri::DnsConfig::default())
            .linux
            .and_then(|l| l.security_context)
            .map(|s| s.privileged)
            .expect("security context")
    }

    #[test]
    fn sandbox_is_privileged_when_any_container_is() {
        use k8s_openapi::api::core::v1::{EphemeralContainer, SecurityContext};
        let privileged = || {
            Some(SecurityContext {
                privileged: Some(true),
                ..Default::default()
            })
        };
        let p = pod();
        assert!(!sandbox_privileged(&p));

        let mut app = pod();
        app.spec.as_mut().expect("spec").containers[0].security_context = privileged();
        assert!(sandbox_privileged(&app));

        let mut init = pod();
        init.spec.as_mut().expect("spec").init_containers = Some(vec![Container {
            name: "init".into(),
            security_context: privileged(),
            ..Default::default()
        }]);
        assert!(sandbox_privileged(&init));

        let mut eph = pod();
        eph.spec.as_mut().expect("spec").ephemeral_containers = Some(vec![EphemeralContainer {
            name: "debug".into(),
            security_context: privileged(),
            ..Default::default()
        }]);
        assert!(sandbox_privileged(&eph));

        let mut unprivileged = pod();
        unprivileged.spec.as_mut().expect("spec").containers[0].security_context =
            Some(SecurityContext {
                privileged: Some(false),
                ..Default::default()
            });
        assert!(!sandbox_privileged(&unprivileged));
    }
}
