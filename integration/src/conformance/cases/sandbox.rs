//! `[sandbox]` cases: RunPodSandbox / status / stop / remove round-trip, ListPodSandbox filters,
//! hostname, DNS config, namespaced sysctls, pod and host network, host PID / IPC namespaces and a
//! pod-shared PID namespace, port mappings (with and without a host port), and one sandbox for one
//! metadata.

use std::time::Duration;

use cri_proto::runtime::v1 as cri;

use super::common::{container, exec_out, in_sandbox, labels, pull, security, spec};
use crate::conformance::{CaseError, CaseResult, Ctx};
use crate::fixtures::cleanup_sandboxes;
use crate::{ensure, ensure_eq};

async fn sandbox_status(ctx: &mut Ctx, id: &str) -> Result<cri::PodSandboxStatus, CaseError> {
    ctx.runtime
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: false,
        })
        .await?
        .into_inner()
        .status
        .ok_or_else(|| CaseError::Fail("PodSandboxStatus without status".into()))
}

pub(super) async fn sandbox_lifecycle(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-sb",
        |_| {},
        |mut ctx, id, cfg| async move {
            let st = sandbox_status(&mut ctx, &id).await?;
            ensure_eq!(st.id, id, "status id");
            ensure_eq!(st.metadata, cfg.metadata, "metadata");
            ensure_eq!(st.labels, cfg.labels, "labels");
            ensure_eq!(st.annotations, cfg.annotations, "annotations");
            ensure_eq!(st.state, cri::PodSandboxState::SandboxReady as i32, "state");
            ensure!(st.created_at > 0, "created_at is 0");
            ctx.runtime
                .stop_pod_sandbox(cri::StopPodSandboxRequest {
                    pod_sandbox_id: id.clone(),
                })
                .await?;
            let st = sandbox_status(&mut ctx, &id).await?;
            ensure_eq!(
                st.state,
                cri::PodSandboxState::SandboxNotready as i32,
                "state after stop"
            );
            ctx.runtime
                .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                    pod_sandbox_id: id.clone(),
                })
                .await?;
            let gone = ctx
                .runtime
                .pod_sandbox_status(cri::PodSandboxStatusRequest {
                    pod_sandbox_id: id.clone(),
                    verbose: false,
                })
                .await;
            ensure!(
                gone.as_ref().err().map(|s| s.code()) == Some(tonic::Code::NotFound),
                "status after remove: {gone:?}"
            );
            Ok(())
        },
    )
    .await
}

async fn list_sandboxes(
    ctx: &mut Ctx,
    filter: cri::PodSandboxFilter,
) -> Result<Vec<cri::PodSandbox>, CaseError> {
    Ok(ctx
        .runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest {
            filter: Some(filter),
        })
        .await?
        .into_inner()
        .items)
}

pub(super) async fn sandbox_list_filters(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-sblist",
        |_| {},
        |mut ctx, id, cfg| async move {
            let by_id = list_sandboxes(
                &mut ctx,
                cri::PodSandboxFilter {
                    id: id.clone(),
                    ..Default::default()
                },
            )
            .await?;
            ensure!(by_id.len() == 1 && by_id[0].id == id, "by id: {by_id:?}");
            let by_prefix = list_sandboxes(
                &mut ctx,
                cri::PodSandboxFilter {
                    id: id[..12].to_string(),
                    ..Default::default()
                },
            )
            .await?;
            ensure!(
                by_prefix.iter().any(|s| s.id == id),
                "by id prefix: {by_prefix:?}"
            );
            let pod = cfg.labels.get("pod").cloned().unwrap_or_default();
            let by_label = list_sandboxes(
                &mut ctx,
                cri::PodSandboxFilter {
                    label_selector: labels(&[("pod", &pod)]),
                    ..Default::default()
                },
            )
            .await?;
            ensure!(
                by_label.len() == 1 && by_label[0].id == id,
                "by label: {by_label:?}"
            );
            ensure_eq!(by_label[0].metadata, cfg.metadata, "listed metadata");
            let ready = list_sandboxes(
                &mut ctx,
                cri::PodSandboxFilter {
                    id: id.clone(),
                    state: Some(cri::PodSandboxStateValue {
                        state: cri::PodSandboxState::SandboxReady as i32,
                    }),
                    ..Default::default()
                },
            )
            .await?;
            ensure!(ready.len() == 1, "ready filter: {ready:?}");
            let notready = list_sandboxes(
                &mut ctx,
                cri::PodSandboxFilter {
                    id: id.clone(),
                    state: Some(cri::PodSandboxStateValue {
                        state: cri::PodSandboxState::SandboxNotready as i32,
                    }),
                    ..Default::default()
                },
            )
            .await?;
            ensure!(
                notready.is_empty(),
                "not-ready filter matched a ready sandbox: {notready:?}"
            );
            let none = list_sandboxes(
                &mut ctx,
                cri::PodSandboxFilter {
                    label_selector: labels(&[("pod", "no-such-pod")]),
                    ..Default::default()
                },
            )
            .await?;
            ensure!(none.is_empty(), "label filter for nothing matched {none:?}");
            Ok(())
        },
    )
    .await
}

pub(super) async fn sandbox_hostname(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-host",
        |c| c.hostname = "cf-hostname".into(),
        |mut ctx, id, cfg| async move {
            let c = container(&mut ctx, &id, &cfg, "h", "sleep 3600", |_| {}, true).await?;
            let h = exec_out(&mut ctx, &c, "hostname").await?;
            ensure_eq!(h, "cf-hostname".to_string(), "hostname in the container");
            Ok(())
        },
    )
    .await
}

pub(super) async fn sandbox_dns(ctx: Ctx) -> CaseResult {
    let tweak = |c: &mut cri::PodSandboxConfig| {
        c.dns_config = Some(cri::DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec!["ns.svc.cluster.local".into(), "svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        })
    };
    in_sandbox(&ctx, "cf-dns", tweak, |mut ctx, id, cfg| async move {
        let c = container(&mut ctx, &id, &cfg, "dns", "sleep 3600", |_| {}, true).await?;
        let conf = exec_out(&mut ctx, &c, "cat /etc/resolv.conf").await?;
        for want in [
            "nameserver 10.96.0.10",
            "search ns.svc.cluster.local svc.cluster.local",
            "options ndots:5",
        ] {
            ensure!(conf.contains(want), "resolv.conf lacks {want:?}: {conf:?}");
        }
        Ok(())
    })
    .await
}

pub(super) async fn sandbox_sysctls(ctx: Ctx) -> CaseResult {
    let tweak = |c: &mut cri::PodSandboxConfig| {
        if let Some(l) = c.linux.as_mut() {
            l.sysctls = labels(&[("kernel.shm_rmid_forced", "1")]);
        }
    };
    in_sandbox(&ctx, "cf-sysctl", tweak, |mut ctx, id, cfg| async move {
        let c = container(&mut ctx, &id, &cfg, "s", "sleep 3600", |_| {}, true).await?;
        let v = exec_out(&mut ctx, &c, "cat /proc/sys/kernel/shm_rmid_forced").await?;
        ensure_eq!(v, "1".to_string(), "kernel.shm_rmid_forced in the pod");
        Ok(())
    })
    .await
}

pub(super) async fn sandbox_network(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-net",
        |_| {},
        |mut ctx, id, _| async move {
            let st = sandbox_status(&mut ctx, &id).await?;
            let ip = st.network.map(|n| n.ip).unwrap_or_default();
            ensure!(
                ip.parse::<std::net::IpAddr>().is_ok(),
                "pod IP {ip:?} is not an IP"
            );
            ensure_eq!(
                st.linux
                    .and_then(|l| l.namespaces)
                    .and_then(|n| n.options)
                    .map(|o| o.network),
                Some(cri::NamespaceMode::Pod as i32),
                "network namespace mode"
            );
            Ok(())
        },
    )
    .await?;
    let host = |c: &mut cri::PodSandboxConfig| {
        // A host-network pod has the node's UTS namespace: no hostname of its own.
        c.hostname = String::new();
        c.linux = Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: cri::NamespaceMode::Node as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    };
    in_sandbox(&ctx, "cf-hostnet", host, |mut ctx, id, cfg| async move {
        let st = sandbox_status(&mut ctx, &id).await?;
        ensure_eq!(
            st.linux
                .and_then(|l| l.namespaces)
                .and_then(|n| n.options)
                .map(|o| o.network),
            Some(cri::NamespaceMode::Node as i32),
            "host network namespace mode"
        );
        let c = container(&mut ctx, &id, &cfg, "hn", "sleep 3600", |_| {}, true).await?;
        let ifaces = exec_out(&mut ctx, &c, "cat /proc/net/dev").await?;
        let host_ifaces = std::fs::read_to_string("/proc/net/dev").unwrap_or_default();
        let first_host = host_ifaces
            .lines()
            .skip(2)
            .filter_map(|l| l.split(':').next())
            .map(str::trim)
            .find(|n| *n != "lo")
            .unwrap_or("lo")
            .to_string();
        ensure!(
            ifaces.contains(&format!("{first_host}:")),
            "host interface {first_host} not visible in a host-network container"
        );
        Ok(())
    })
    .await
}

/// One (name, namespace, uid, attempt) never stands for two live sandboxes: the second
/// RunPodSandbox fails (containerd: "name is reserved"; dockershim: AlreadyExists).
pub(super) async fn sandbox_same_metadata_twice(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-sbtwice",
        |_| {},
        |mut ctx, id, cfg| async move {
            let again = ctx
                .runtime
                .run_pod_sandbox(cri::RunPodSandboxRequest {
                    config: Some(cfg.clone()),
                    runtime_handler: String::new(),
                })
                .await;
            let pod = cfg.labels.get("pod").cloned().unwrap_or_default();
            let listed = list_sandboxes(
                &mut ctx,
                cri::PodSandboxFilter {
                    label_selector: labels(&[("pod", &pod)]),
                    ..Default::default()
                },
            )
            .await?;
            let extra: Vec<String> = listed
                .iter()
                .map(|s| s.id.clone())
                .filter(|s| *s != id)
                .collect();
            cleanup_sandboxes(&mut ctx.runtime, &extra).await;
            match again {
                Ok(r) => {
                    return Err(CaseError::Fail(format!(
                        "the same RunPodSandbox twice succeeded: {id} and {}",
                        r.into_inner().pod_sandbox_id
                    )));
                }
                Err(s)
                    if matches!(
                        s.code(),
                        tonic::Code::Unimplemented | tonic::Code::Unavailable
                    ) =>
                {
                    return Err(CaseError::from(s));
                }
                Err(_) => {}
            }
            ensure!(
                listed.len() == 1 && listed[0].id == id,
                "one sandbox for one metadata: {listed:?}"
            );
            ensure_eq!(
                listed[0].state,
                cri::PodSandboxState::SandboxReady as i32,
                "state of the first sandbox"
            );
            Ok(())
        },
    )
    .await
}

fn namespaces(
    pid: cri::NamespaceMode,
    ipc: cri::NamespaceMode,
) -> impl FnOnce(&mut cri::PodSandboxConfig) {
    move |c: &mut cri::PodSandboxConfig| {
        let linux = c.linux.get_or_insert_with(Default::default);
        let sc = linux.security_context.get_or_insert_with(Default::default);
        sc.namespace_options = Some(cri::NamespaceOption {
            network: cri::NamespaceMode::Pod as i32,
            pid: pid as i32,
            ipc: ipc as i32,
            ..Default::default()
        });
    }
}

/// With host PID and IPC the container sees the host's namespaces; without, its own.
pub(super) async fn sandbox_host_pid_ipc(ctx: Ctx) -> CaseResult {
    // This process runs in the host's namespaces.
    let host_pid = std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.display().to_string())
        .map_err(|e| CaseError::Fail(format!("reading the host's pid namespace: {e}")))?;
    let host_ipc = std::fs::read_link("/proc/self/ns/ipc")
        .map(|p| p.display().to_string())
        .map_err(|e| CaseError::Fail(format!("reading the host's ipc namespace: {e}")))?;
    for host in [true, false] {
        let mode = if host {
            cri::NamespaceMode::Node
        } else {
            cri::NamespaceMode::Pod
        };
        let (hp, hi) = (host_pid.clone(), host_ipc.clone());
        in_sandbox(
            &ctx,
            "cf-ns",
            namespaces(mode, mode),
            |mut ctx, id, cfg| async move {
                let c = container(&mut ctx, &id, &cfg, "ns", "sleep 3600", |_| {}, true).await?;
                let pid = exec_out(&mut ctx, &c, "readlink /proc/self/ns/pid").await?;
                let ipc = exec_out(&mut ctx, &c, "readlink /proc/self/ns/ipc").await?;
                ensure_eq!(
                    pid == hp,
                    host,
                    format!("pid namespace {pid} (host {hp}), host_pid={host}")
                );
                ensure_eq!(
                    ipc == hi,
                    host,
                    format!("ipc namespace {ipc} (host {hi}), host_ipc={host}")
                );
                Ok(())
            },
        )
        .await?;
    }
    Ok(())
}

/// GET / on `addr` (plain HTTP/1.0), retried for up to 20 s; the response text.
async fn http_get_retry(addr: std::net::SocketAddr) -> Result<String, CaseError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut last = String::new();
    for _ in 0..100 {
        let attempt = async {
            let mut s = tokio::net::TcpStream::connect(addr).await?;
            s.write_all(b"GET / HTTP/1.0\r\n\r\n").await?;
            let mut buf = Vec::new();
            s.read_to_end(&mut buf).await?;
            Ok::<_, std::io::Error>(String::from_utf8_lossy(&buf).into_owned())
        };
        match tokio::time::timeout(Duration::from_secs(2), attempt).await {
            Ok(Ok(text)) if text.contains("200") => return Ok(text),
            Ok(Ok(text)) => last = text,
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "timed out".into(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(CaseError::Fail(format!(
        "GET http://{addr}/ failed: {last}"
    )))
}

pub(super) async fn sandbox_port_mapping(ctx: Ctx) -> CaseResult {
    let host_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| CaseError::Fail(format!("no free port: {e}")))?;
    let image = format!("{}/web:1", ctx.settings.registry);
    let mapping = move |c: &mut cri::PodSandboxConfig| {
        c.port_mappings = vec![
            cri::PortMapping {
                protocol: cri::Protocol::Tcp as i32,
                container_port: 80,
                host_port: i32::from(host_port),
                host_ip: String::new(),
            },
            // Declared without a host port: only the pod's own address serves it.
            cri::PortMapping {
                protocol: cri::Protocol::Tcp as i32,
                container_port: 8081,
                host_port: 0,
                host_ip: String::new(),
            },
        ];
    };
    in_sandbox(&ctx, "cf-ports", mapping, |mut ctx, id, cfg| async move {
        pull(&mut ctx, &image, None).await?;
        std::fs::create_dir_all(std::path::Path::new(&cfg.log_directory).join("web"))
            .map_err(|e| CaseError::Fail(format!("log dir: {e}")))?;
        // The image's own command: busybox httpd on port 80.
        let cid = ctx
            .runtime
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: id.clone(),
                config: Some(cri::ContainerConfig {
                    metadata: Some(cri::ContainerMetadata {
                        name: "web".into(),
                        attempt: 0,
                    }),
                    image: spec(&image),
                    log_path: "web/0.log".into(),
                    linux: Some(cri::LinuxContainerConfig::default()),
                    ..Default::default()
                }),
                sandbox_config: Some(cfg.clone()),
            })
            .await?
            .into_inner()
            .container_id;
        ctx.runtime
            .start_container(cri::StartContainerRequest { container_id: cid })
            .await?;
        let st = sandbox_status(&mut ctx, &id).await?;
        let ip: std::net::IpAddr = st
            .network
            .map(|n| n.ip)
            .unwrap_or_default()
            .parse()
            .map_err(|e| CaseError::Fail(format!("pod IP: {e}")))?;
        let body = http_get_retry(std::net::SocketAddr::new(ip, 80)).await?;
        ensure!(
            body.contains("hello from the cri-testbed web image"),
            "pod port 80 served {body:?}"
        );
        let body = http_get_retry(std::net::SocketAddr::from(([127, 0, 0, 1], host_port))).await?;
        ensure!(
            body.contains("hello from the cri-testbed web image"),
            "host port {host_port} served {body:?}"
        );
        Ok(())
    })
    .await
}

pub(super) async fn sandbox_pid_sharing(ctx: Ctx) -> CaseResult {
    for (mode, shared) in [
        (cri::NamespaceMode::Pod, true),
        (cri::NamespaceMode::Container, false),
    ] {
        in_sandbox(
            &ctx,
            "cf-pid",
            namespaces(mode, cri::NamespaceMode::Pod),
            |mut ctx, id, cfg| async move {
                // Containers carry the pod's namespace options (as the kubelet sets them).
                let ns = move |c: &mut cri::ContainerConfig| {
                    security(c, |s| {
                        s.namespace_options = Some(cri::NamespaceOption {
                            network: cri::NamespaceMode::Pod as i32,
                            pid: mode as i32,
                            ipc: cri::NamespaceMode::Pod as i32,
                            ..Default::default()
                        })
                    })
                };
                container(&mut ctx, &id, &cfg, "first", "sleep 3601", ns, true).await?;
                let second =
                    container(&mut ctx, &id, &cfg, "second", "sleep 3602", ns, true).await?;
                let ps = exec_out(&mut ctx, &second, "ps -o args").await?;
                ensure_eq!(
                    ps.contains("sleep 3601"),
                    shared,
                    format!("the other container's process seen with pid={mode:?} (ps: {ps:?})")
                );
                Ok(())
            },
        )
        .await?;
    }
    Ok(())
}
