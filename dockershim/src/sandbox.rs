//! Pod sandboxes (upstream `docker_sandbox.go`): a sandbox is a pause container holding the
//! pod's network, IPC and (when pod-shared) PID namespaces, plus a checkpoint under the root
//! directory recording what is needed to tear its network down later (port mappings, host
//! network) even after the pause container is gone or dockershim restarted. This module owns
//! RunPodSandbox, StopPodSandbox, RemovePodSandbox, PodSandboxStatus and ListPodSandbox.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, ContainerInspectResponse, HostConfig, PortBinding};
use cri_proto::runtime::v1 as cri;
use tracing::{info, warn};

use crate::cache::Fact;
use crate::checkpoint::{
    CheckpointData, PodSandboxCheckpoint, PortMapping as CheckpointPortMapping,
};
use crate::creation::NameReservation;
use crate::docker::DockerApi;
use crate::errors::{Result, ShimError};
use crate::filter::{id_matches, matches_selector, may_match_selector, summary_label};
use crate::labels;
use crate::naming::{self, SandboxNameParts};
use crate::network::PodNetwork;
use crate::security::sandbox_ns_options;
use crate::shim::Shim;
use crate::timestamp::{docker_time_ns, now_ns};

fn protocol_name(p: i32) -> &'static str {
    match cri::Protocol::try_from(p) {
        Ok(cri::Protocol::Udp) => "udp",
        Ok(cri::Protocol::Sctp) => "sctp",
        _ => "tcp",
    }
}

fn ns_mode(
    opts: Option<&cri::NamespaceOption>,
    pick: fn(&cri::NamespaceOption) -> i32,
) -> cri::NamespaceMode {
    opts.and_then(|o| cri::NamespaceMode::try_from(pick(o)).ok())
        .unwrap_or(cri::NamespaceMode::Pod)
}

/// The pause container's CPU shares, the least Docker takes (upstream's
/// `defaultSandboxCPUshares`).
pub const DEFAULT_SANDBOX_CPU_SHARES: i64 = 2;

/// Renders a resolv.conf for a sandbox's DNS config.
pub fn resolv_conf(dns: &cri::DnsConfig) -> String {
    let mut out = String::new();
    for s in &dns.servers {
        out.push_str(&format!("nameserver {s}\n"));
    }
    if !dns.searches.is_empty() {
        out.push_str(&format!("search {}\n", dns.searches.join(" ")));
    }
    if !dns.options.is_empty() {
        out.push_str(&format!("options {}\n", dns.options.join(" ")));
    }
    out
}

/// Docker's container state -> CRI sandbox state.
fn sandbox_state(running: bool) -> cri::PodSandboxState {
    if running {
        cri::PodSandboxState::SandboxReady
    } else {
        cri::PodSandboxState::SandboxNotready
    }
}

impl<D: DockerApi> Shim<D> {
    /// Builds the Docker create body of a sandbox's pause container.
    pub(crate) fn sandbox_create_body(
        &self,
        config: &cri::PodSandboxConfig,
    ) -> Result<ContainerCreateBody> {
        let ns = sandbox_ns_options(config);
        let host_net = ns_mode(ns, |o| o.network) == cri::NamespaceMode::Node;
        let host_pid = ns_mode(ns, |o| o.pid) == cri::NamespaceMode::Node;
        let host_ipc = ns_mode(ns, |o| o.ipc) == cri::NamespaceMode::Node;

        let mut docker_labels = labels::make_labels(&config.labels, &config.annotations);
        docker_labels.insert(
            labels::CONTAINER_TYPE_LABEL_KEY.to_string(),
            labels::CONTAINER_TYPE_LABEL_SANDBOX.to_string(),
        );

        let mut hc = HostConfig {
            ipc_mode: Some(if host_ipc { "host" } else { "shareable" }.to_string()),
            oom_score_adj: Some(self.sandbox_oom_score_adj),
            cpu_shares: Some(DEFAULT_SANDBOX_CPU_SHARES),
            ..Default::default()
        };
        if host_pid {
            hc.pid_mode = Some("host".to_string());
        }
        let mut exposed: Vec<String> = Vec::new();
        // CNI sets the network up inside an empty namespace: runc's own, with Docker's
        // networking disabled (Docker's network sandbox for `none` would cost a re-executed
        // dockerd per pod; see `sandbox_files`).
        let own_netns = !host_net && self.network.is_some();
        if host_net {
            hc.network_mode = Some("host".to_string());
        } else if own_netns {
            hc.network_mode = Some("none".to_string());
        } else {
            // Docker's default bridge: port mappings are Docker port bindings.
            let mut bindings: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
            for pm in &config.port_mappings {
                let key = format!("{}/{}", pm.container_port, protocol_name(pm.protocol));
                if !exposed.contains(&key) {
                    exposed.push(key.clone());
                }
                if pm.host_port > 0 {
                    bindings
                        .entry(key)
                        .or_insert_with(|| Some(Vec::new()))
                        .get_or_insert_with(Vec::new)
                        .push(PortBinding {
                            host_ip: (!pm.host_ip.is_empty()).then(|| pm.host_ip.clone()),
                            host_port: Some(pm.host_port.to_string()),
                        });
                }
            }
            if !bindings.is_empty() {
                hc.port_bindings = Some(bindings);
            }
        }
        if let Some(linux) = &config.linux {
            if !linux.cgroup_parent.is_empty() {
                hc.cgroup_parent = Some(linux.cgroup_parent.clone());
            }
            if !linux.sysctls.is_empty() {
                hc.sysctls = Some(linux.sysctls.clone());
            }
        }
        let sc = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref());
        let user = crate::security::apply_sandbox_security(sc, &mut hc)?;

        Ok(ContainerCreateBody {
            image: Some(self.config.pod_infra_image.clone()),
            hostname: (!host_net && !config.hostname.is_empty()).then(|| config.hostname.clone()),
            labels: Some(docker_labels),
            exposed_ports: (!exposed.is_empty()).then_some(exposed),
            network_disabled: own_netns.then_some(true),
            user,
            host_config: Some(hc),
            ..Default::default()
        })
    }

    /// RunPodSandbox: pause container, checkpoint, DNS, network.
    pub async fn run_pod_sandbox(&self, req: cri::RunPodSandboxRequest) -> Result<String> {
        let config = req
            .config
            .ok_or_else(|| ShimError::invalid("RunPodSandbox: config is required"))?;
        let meta = config
            .metadata
            .as_ref()
            .ok_or_else(|| ShimError::invalid("RunPodSandbox: config.metadata is required"))?;
        if meta.name.is_empty() || meta.namespace.is_empty() || meta.uid.is_empty() {
            return Err(ShimError::invalid(
                "RunPodSandbox: metadata name, namespace and uid are required",
            ));
        }
        for (what, value) in [
            ("metadata.name", &meta.name),
            ("metadata.namespace", &meta.namespace),
            ("metadata.uid", &meta.uid),
        ] {
            naming::check_field(what, value)
                .map_err(|e| ShimError::invalid(format!("RunPodSandbox: {e}")))?;
        }
        if !req.runtime_handler.is_empty() && req.runtime_handler != "docker" {
            return Err(ShimError::invalid(format!(
                "RuntimeHandler {:?} not supported",
                req.runtime_handler
            )));
        }
        self.ensure_pod_infra_image().await?;

        let name = naming::make_sandbox_name(&SandboxNameParts {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            attempt: meta.attempt,
        });
        let body = self.sandbox_create_body(&config)?;
        let own_files = body.network_disabled == Some(true);
        // Held until the sandbox runs: a concurrent RunPodSandbox with the same metadata would
        // otherwise find our container still "created" and race us for the name.
        let _reserved = NameReservation::take(&name)?;
        let id = self.create_named(&name, body).await?;
        self.facts.learn(&id, Fact::Sandbox { own_files });

        let ns = sandbox_ns_options(&config);
        let host_net = ns_mode(ns, |o| o.network) == cri::NamespaceMode::Node;
        let mut checkpoint = PodSandboxCheckpoint::new(
            &meta.namespace,
            &meta.name,
            CheckpointData {
                // Go appends to a nil slice: no ports is nil, which the checksum tells
                // apart from an empty slice (and the file cannot: both are omitted).
                port_mappings: (!config.port_mappings.is_empty()).then(|| {
                    config
                        .port_mappings
                        .iter()
                        .map(|pm| CheckpointPortMapping {
                            protocol: Some(protocol_name(pm.protocol).to_string()),
                            container_port: Some(pm.container_port),
                            host_port: Some(pm.host_port),
                            host_ip: pm.host_ip.clone(),
                        })
                        .collect()
                }),
                host_network: host_net,
            },
        );
        self.checkpoints
            .write(&id, &mut checkpoint)
            .map_err(ShimError::internal)?;

        // Written before the pod runs anything, so every container finds them.
        if own_files {
            let resolv = match &config.dns_config {
                Some(dns) => resolv_conf(dns),
                None => crate::sandbox_files::resolv_conf_from_host(
                    &std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
                ),
            };
            self.files
                .write(&id, &resolv)
                .map_err(|e| ShimError::internal(format!("sandbox {id}'s files: {e}")))?;
        }
        if let Err(e) = self.docker.start_container(&id).await {
            return Err(ShimError::internal(format!(
                "failed to start sandbox container {id} for pod {:?}: {e}",
                meta.name
            )));
        }
        let inspect = self.docker.inspect_container(&id).await?;
        if let Some(dns) = config.dns_config.as_ref().filter(|_| !own_files)
            && let Some(path) = inspect.resolv_conf_path.as_deref()
            && !path.is_empty()
        {
            std::fs::write(path, resolv_conf(dns))
                .map_err(|e| ShimError::internal(format!("rewrite resolv.conf {path}: {e}")))?;
        }

        if !host_net && let Some(net) = &self.network {
            let pid = inspect.state.as_ref().and_then(|s| s.pid).unwrap_or(0);
            let pod = PodNetwork {
                name: meta.name.clone(),
                namespace: meta.namespace.clone(),
                uid: meta.uid.clone(),
                sandbox_id: id.clone(),
                netns: format!("/proc/{pid}/ns/net"),
                port_mappings: config
                    .port_mappings
                    .iter()
                    .map(crate::network::port_mapping)
                    .collect(),
            };
            if let Err(e) = net.setup(&pod).await {
                warn!(sandbox = %id, pod = %meta.name, error = %e, "network setup failed; stopping sandbox");
                let _ = net.teardown(&pod).await;
                let _ = self.docker.stop_container(&id, 0).await;
                return Err(ShimError::Network(format!(
                    "failed to set up sandbox container {id} network for pod {:?}: {e}",
                    meta.name
                )));
            }
        }
        info!(sandbox = %id, pod = %meta.name, namespace = %meta.namespace, "sandbox running");
        Ok(id)
    }

    /// StopPodSandbox: network down, every container of the pod stopped, pause stopped.
    /// Stopping what is gone succeeds.
    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        if id.is_empty() {
            return Err(ShimError::invalid("pod sandbox id is required"));
        }
        let inspect = match self.inspect_sandbox(id).await {
            Ok(c) => Some(c),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        let full_id = inspect
            .as_ref()
            .and_then(|c| c.id.clone())
            .unwrap_or_else(|| id.to_string());
        let checkpoint = self.checkpoints.get(&full_id).ok();
        if inspect.is_none() && checkpoint.is_none() {
            return Ok(());
        }
        let (name, namespace, uid, host_net) = match (&inspect, &checkpoint) {
            (Some(c), _) => {
                let parts = c
                    .name
                    .as_deref()
                    .and_then(|n| naming::parse_sandbox_name(n).ok());
                let host = c
                    .host_config
                    .as_ref()
                    .and_then(|h| h.network_mode.as_deref())
                    == Some("host");
                match parts {
                    Some(p) => (p.name, p.namespace, p.uid, host),
                    None => (String::new(), String::new(), String::new(), host),
                }
            }
            (None, Some(cp)) => (
                cp.name.clone(),
                cp.namespace.clone(),
                String::new(),
                cp.data.as_ref().map(|d| d.host_network).unwrap_or(false),
            ),
            (None, None) => return Ok(()),
        };

        // Whatever still runs in the pod is killed at once, like containerd: the kubelet has
        // already stopped the containers it cares about with their grace periods.
        for c in self.sandbox_container_ids(&full_id).await? {
            match self.docker.stop_container(&c, 0).await {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }

        // The network is torn down while the pause container stops, not before it: CNI's DEL
        // must succeed when the namespace goes away (the bridge and loopback plugins return
        // early on a missing netns, IPAM and portmap work by container id), and the two are
        // independent work of CNI and Docker. A DEL that fails is reported, and the retry
        // finds the sandbox stopped and runs DEL without a netns, which frees its address.
        // The plugins get the namespace through a descriptor of ours, opened before the
        // stop begins: it stays the pod's namespace while the pause process exits, where
        // `/proc/<pid>/ns/net` could by then name another process's.
        let network = self.network.as_ref().filter(|_| !host_net);
        let netns = inspect
            .as_ref()
            .filter(|_| network.is_some())
            .and_then(|c| c.state.as_ref())
            .filter(|s| s.running == Some(true))
            .and_then(|s| s.pid)
            .filter(|pid| *pid > 0)
            .and_then(|pid| std::fs::File::open(format!("/proc/{pid}/ns/net")).ok());
        let teardown = async {
            let Some(net) = network else {
                return Ok(());
            };
            let pod = PodNetwork {
                name,
                namespace,
                uid,
                sandbox_id: full_id.clone(),
                netns: netns
                    .as_ref()
                    .map(|f| {
                        use std::os::fd::AsRawFd;
                        format!("/proc/{}/fd/{}", std::process::id(), f.as_raw_fd())
                    })
                    .unwrap_or_default(),
                port_mappings: checkpoint
                    .as_ref()
                    .and_then(|c| c.data.as_ref())
                    .and_then(|d| d.port_mappings.as_ref())
                    .map(|pms| {
                        pms.iter()
                            .map(crate::network::checkpoint_port_mapping)
                            .collect()
                    })
                    .unwrap_or_default(),
            };
            net.teardown(&pod).await.map_err(|e| {
                ShimError::Network(format!("failed to tear down pod {full_id} network: {e}"))
            })
        };
        let stop_pause = async {
            if inspect.is_some() {
                match self.docker.stop_container(&full_id, 10).await {
                    Ok(()) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(ShimError::from(e)),
                }
            }
            Ok(())
        };
        let (teardown, stopped) = tokio::join!(teardown, stop_pause);
        drop(netns);
        teardown?;
        stopped?;
        Ok(())
    }

    /// Ids of the (non-sandbox) containers that belong to sandbox `id` (a full id): from the
    /// listing cache while it can be trusted, else from Docker listing only them (a label
    /// filter on the sandbox id, so Docker describes the pod's few containers, not all of ours).
    pub(crate) async fn sandbox_container_ids(&self, id: &str) -> Result<Vec<String>> {
        let of_sandbox = |c: &bollard::models::ContainerSummary| {
            summary_label(c, labels::SANDBOX_ID_LABEL_KEY) == Some(id)
        };
        if let Some(list) = self.listing.get() {
            return Ok(list
                .iter()
                .filter(|c| of_sandbox(c))
                .filter_map(|c| c.id.clone())
                .collect());
        }
        let filters = HashMap::from([(
            "label".to_string(),
            vec![
                labels::CONTAINER_TYPE_LABEL_KEY.to_string(),
                format!("{}={id}", labels::SANDBOX_ID_LABEL_KEY),
            ],
        )]);
        Ok(self
            .docker
            .list_containers(filters)
            .await?
            .into_iter()
            .filter(|c| of_sandbox(c))
            .filter_map(|c| c.id)
            .collect())
    }

    /// RemovePodSandbox: its containers, the pause container and the checkpoint. Removing what
    /// is gone succeeds. Given a full id (what the kubelet sends), nothing is inspected: the
    /// pod's containers are listed by their sandbox label, then removed with the pause
    /// container (forced, with volumes), like cri-dockerd; a short id is resolved first.
    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        if id.is_empty() {
            return Err(ShimError::invalid("pod sandbox id is required"));
        }
        let full_id = if naming::is_full_container_id(id) {
            id.to_string()
        } else {
            match self.inspect_sandbox(id).await {
                Ok(c) => c.id.unwrap_or_else(|| id.to_string()),
                Err(e) if e.is_not_found() => id.to_string(),
                Err(e) => return Err(e),
            }
        };
        for c in self.sandbox_container_ids(&full_id).await? {
            self.remove_container_by_full_id(&c).await?;
        }
        // The checkpoint and the sandbox's files go while Docker removes the pause container:
        // the network was torn down by StopPodSandbox, so nothing needs them any more, and a
        // removal Docker fails is asked again by the kubelet (both removals are idempotent).
        let (checkpoints, files, id) = (
            self.checkpoints.clone(),
            self.files.clone(),
            full_id.clone(),
        );
        let our_files = tokio::task::spawn_blocking(move || {
            checkpoints.remove(&id).map_err(ShimError::internal)?;
            files
                .remove(&id)
                .map_err(|e| ShimError::internal(format!("sandbox {id}'s files: {e}")))
        });
        let (docker, ours) = tokio::join!(self.docker.remove_container(&full_id), our_files);
        match docker {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
        self.facts.forget(&full_id);
        ours.map_err(|e| ShimError::internal(format!("removing sandbox {full_id}'s files: {e}")))?
    }

    /// The CRI status of a sandbox from its inspect data.
    pub(crate) async fn sandbox_status_of(
        &self,
        c: &ContainerInspectResponse,
    ) -> cri::PodSandboxStatus {
        let id = c.id.clone().unwrap_or_default();
        let name = c.name.as_deref().unwrap_or_default();
        let parts = naming::parse_sandbox_name(name).ok();
        let docker_labels = c
            .config
            .as_ref()
            .and_then(|cfg| cfg.labels.clone())
            .unwrap_or_default();
        let (labels, annotations) = labels::extract_labels(&docker_labels);
        let running = c.state.as_ref().and_then(|s| s.running).unwrap_or(false);
        let hc = c.host_config.as_ref();
        let mode_of = |v: Option<&String>| {
            if v.map(String::as_str) == Some("host") {
                cri::NamespaceMode::Node as i32
            } else {
                cri::NamespaceMode::Pod as i32
            }
        };
        let host_net = hc.and_then(|h| h.network_mode.as_ref()).map(String::as_str) == Some("host");
        let ns = cri::NamespaceOption {
            network: mode_of(hc.and_then(|h| h.network_mode.as_ref())),
            pid: if hc.and_then(|h| h.pid_mode.as_ref()).map(String::as_str) == Some("host") {
                cri::NamespaceMode::Node as i32
            } else {
                cri::NamespaceMode::Container as i32
            },
            ipc: mode_of(hc.and_then(|h| h.ipc_mode.as_ref())),
            ..Default::default()
        };
        let (ip, additional) = if host_net || !running {
            (String::new(), Vec::new())
        } else if let Some(net) = &self.network {
            let ips = net.pod_ips(&id);
            let mut it = ips.into_iter();
            (
                it.next().unwrap_or_default(),
                it.map(|ip| cri::PodIp { ip }).collect(),
            )
        } else {
            let ip = c
                .network_settings
                .as_ref()
                .and_then(|n| n.networks.as_ref())
                .and_then(|n| {
                    n.values()
                        .find_map(|e| e.ip_address.clone().filter(|s| !s.is_empty()))
                })
                .unwrap_or_default();
            (ip, Vec::new())
        };
        cri::PodSandboxStatus {
            id,
            metadata: parts.map(|p| cri::PodSandboxMetadata {
                name: p.name,
                uid: p.uid,
                namespace: p.namespace,
                attempt: p.attempt,
            }),
            state: sandbox_state(running) as i32,
            created_at: docker_time_ns(c.created.as_deref()),
            network: Some(cri::PodSandboxNetworkStatus {
                ip,
                additional_ips: additional,
            }),
            linux: Some(cri::LinuxPodSandboxStatus {
                namespaces: Some(cri::Namespace { options: Some(ns) }),
            }),
            labels,
            annotations,
            runtime_handler: String::new(),
        }
    }

    /// PodSandboxStatus.
    pub async fn pod_sandbox_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> Result<cri::PodSandboxStatusResponse> {
        let c = self.inspect_sandbox(id).await?;
        let status = self.sandbox_status_of(&c).await;
        let mut info = HashMap::new();
        if verbose {
            let pid = c.state.as_ref().and_then(|s| s.pid).unwrap_or(0);
            let checkpoint = self.checkpoints.get(&status.id).ok();
            info.insert(
                "info".to_string(),
                serde_json::json!({
                    "pid": pid,
                    "image": self.config.pod_infra_image,
                    "checkpoint": checkpoint,
                    "networkMode": c.host_config.as_ref().and_then(|h| h.network_mode.clone()),
                })
                .to_string(),
            );
        }
        Ok(cri::PodSandboxStatusResponse {
            status: Some(status),
            info,
            containers_statuses: Vec::new(),
            timestamp: now_ns(),
        })
    }

    /// ListPodSandbox, with every filter (id or unique id prefix, state, labels). Sandboxes whose
    /// pause container is gone but whose checkpoint remains are listed NOTREADY, like upstream.
    pub async fn list_pod_sandbox(
        &self,
        filter: Option<cri::PodSandboxFilter>,
    ) -> Result<Vec<cri::PodSandbox>> {
        let filter = filter.unwrap_or_default();
        let list = self.our_containers_labelled(&filter.label_selector).await?;
        let mut out = Vec::with_capacity(list.len());
        let mut seen = std::collections::HashSet::new();
        let no_labels = HashMap::new();
        for c in list.iter().filter(|c| {
            summary_label(c, labels::CONTAINER_TYPE_LABEL_KEY)
                == Some(labels::CONTAINER_TYPE_LABEL_SANDBOX)
                && id_matches(c, &filter.id)
                && may_match_selector(c, &filter.label_selector)
        }) {
            let Some(id) = c.id.clone() else { continue };
            let Some(parts) = c
                .names
                .as_ref()
                .and_then(|n| n.first())
                .and_then(|n| naming::parse_sandbox_name(n).ok())
            else {
                continue;
            };
            seen.insert(id.clone());
            let (labels, annotations) =
                labels::extract_labels(c.labels.as_ref().unwrap_or(&no_labels));
            let running = c.state.as_ref().map(|s| s.to_string()) == Some("running".to_string());
            out.push(cri::PodSandbox {
                id,
                metadata: Some(cri::PodSandboxMetadata {
                    name: parts.name,
                    uid: parts.uid,
                    namespace: parts.namespace,
                    attempt: parts.attempt,
                }),
                state: sandbox_state(running) as i32,
                created_at: c.created.unwrap_or(0).saturating_mul(1_000_000_000),
                labels,
                annotations,
                runtime_handler: String::new(),
            });
        }
        // Checkpointed sandboxes whose container is gone: not ready and without labels, so
        // a filter on labels or on the ready state never matches them and their checkpoints
        // are not read (the kubelet lists each pod's sandboxes by its UID label).
        let only_ready = filter
            .state
            .as_ref()
            .is_some_and(|st| st.state == cri::PodSandboxState::SandboxReady as i32);
        let checkpointed = if filter.label_selector.is_empty() && !only_ready {
            self.checkpoints.list().unwrap_or_default()
        } else {
            Vec::new()
        };
        for id in checkpointed {
            if seen.contains(&id) || (!filter.id.is_empty() && !id.starts_with(&filter.id)) {
                continue;
            }
            if let Ok(cp) = self.checkpoints.get(&id) {
                out.push(cri::PodSandbox {
                    id,
                    metadata: Some(cri::PodSandboxMetadata {
                        name: cp.name.clone(),
                        namespace: cp.namespace.clone(),
                        ..Default::default()
                    }),
                    state: cri::PodSandboxState::SandboxNotready as i32,
                    ..Default::default()
                });
            }
        }
        out.retain(|s| {
            filter.state.as_ref().is_none_or(|st| st.state == s.state)
                && matches_selector(&s.labels, &filter.label_selector)
        });
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_has_servers_searches_and_options() {
        let dns = cri::DnsConfig {
            servers: vec!["10.0.0.10".into(), "8.8.8.8".into()],
            searches: vec!["ns.svc.cluster.local".into(), "svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        };
        assert_eq!(
            resolv_conf(&dns),
            "nameserver 10.0.0.10\nnameserver 8.8.8.8\nsearch ns.svc.cluster.local svc.cluster.local\noptions ndots:5\n"
        );
    }
}
