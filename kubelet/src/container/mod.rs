//! Runtime-neutral container types (upstream `pkg/kubelet/container`). This module owns the
//! kubelet's view of what the runtime reports about a pod ([`PodStatus`], [`ContainerStatus`],
//! [`SandboxStatus`]), container identity ([`ContainerID`]), the spec hash used to notice a
//! changed container definition ([`hash_container`]) and the small helpers upstream keeps in
//! `helpers.go` (`ShouldContainerBeRestarted`, `GetPodFullName`). It deliberately has no CRI
//! dependency: the runtime manager converts CRI messages into these types.

use std::fmt;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};

/// A container's identity as `<type>://<id>` (upstream `kubecontainer.ContainerID`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ContainerID {
    /// Runtime type, e.g. `docker` or `containerd`.
    pub type_: String,
    /// The runtime's own id.
    pub id: String,
}

/// Error for a malformed `type://id` string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid container ID: {0:?}")]
pub struct ParseContainerIDError(pub String);

impl ContainerID {
    /// Build from parts.
    pub fn new(type_: impl Into<String>, id: impl Into<String>) -> Self {
        Self {
            type_: type_.into(),
            id: id.into(),
        }
    }

    /// Parse `type://id` (upstream `ParseContainerID`).
    pub fn parse(s: &str) -> Result<Self, ParseContainerIDError> {
        match s.split_once("://") {
            Some((t, id)) if !t.is_empty() && !id.is_empty() => Ok(Self::new(t, id)),
            _ => Err(ParseContainerIDError(s.to_string())),
        }
    }

    /// True for the zero value.
    pub fn is_empty(&self) -> bool {
        self.type_.is_empty() && self.id.is_empty()
    }
}

impl fmt::Display for ContainerID {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.type_, self.id)
    }
}

/// Container state (upstream `kubecontainer.State`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ContainerState {
    /// Created but not started.
    Created,
    /// Running.
    Running,
    /// Exited (see `exit_code`).
    Exited,
    /// The runtime does not know.
    #[default]
    Unknown,
}

impl fmt::Display for ContainerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ContainerState::Created => "created",
            ContainerState::Running => "running",
            ContainerState::Exited => "exited",
            ContainerState::Unknown => "unknown",
        })
    }
}

/// One container as reported by the runtime (upstream `kubecontainer.Status`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ContainerStatus {
    /// Runtime id.
    pub id: ContainerID,
    /// Container name from the pod spec.
    pub name: String,
    /// State.
    pub state: ContainerState,
    /// When created.
    pub created_at: Option<DateTime<Utc>>,
    /// When started.
    pub started_at: Option<DateTime<Utc>>,
    /// When finished.
    pub finished_at: Option<DateTime<Utc>>,
    /// Exit code (meaningful when exited).
    pub exit_code: i32,
    /// Image as given in the spec.
    pub image: String,
    /// Image id (digest) the runtime resolved.
    pub image_id: String,
    /// Image reference the runtime used.
    pub image_ref: String,
    /// [`hash_container`] of the spec the container was created from.
    pub hash: u64,
    /// How many times the container was restarted.
    pub restart_count: i32,
    /// Short machine-readable reason (e.g. `OOMKilled`, `Error`, `Completed`).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// Sandbox state (CRI `PodSandboxState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SandboxState {
    /// Ready: namespaces set up.
    Ready,
    /// Not ready (stopped or failed).
    #[default]
    NotReady,
}

/// Which network namespace a sandbox uses (CRI `NamespaceMode` for network).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum NamespaceMode {
    /// A namespace of the pod's own.
    #[default]
    Pod,
    /// The node's namespace (`hostNetwork: true`).
    Node,
}

/// One sandbox of a pod (the subset of CRI `PodSandboxStatus` the kubelet decides on).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SandboxStatus {
    /// Sandbox id.
    pub id: String,
    /// Ready or not.
    pub state: SandboxState,
    /// Attempt number from the sandbox metadata.
    pub attempt: u32,
    /// Network namespace mode.
    pub network_namespace_mode: NamespaceMode,
    /// IPs (primary first); empty when the network was not set up.
    pub ips: Vec<String>,
    /// When created.
    pub created_at: Option<DateTime<Utc>>,
}

/// What the runtime knows about one pod (upstream `kubecontainer.PodStatus`).
/// `sandbox_statuses` is sorted newest first, as upstream's runtime manager returns it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodStatus {
    /// Pod UID.
    pub id: String,
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// Pod IPs.
    pub ips: Vec<String>,
    /// Sandboxes, newest first.
    pub sandbox_statuses: Vec<SandboxStatus>,
    /// Containers, newest first per name.
    pub container_statuses: Vec<ContainerStatus>,
}

impl PodStatus {
    /// The newest status of the container called `name` (upstream `FindContainerStatusByName`).
    pub fn find_container_status_by_name(&self, name: &str) -> Option<&ContainerStatus> {
        self.container_statuses.iter().find(|c| c.name == name)
    }

    /// Statuses of running containers.
    pub fn running_container_statuses(&self) -> impl Iterator<Item = &ContainerStatus> {
        self.container_statuses
            .iter()
            .filter(|c| c.state == ContainerState::Running)
    }
}

/// Upstream `HashContainer`: FNV-1a (32 bit) over spew's print of the container's Go JSON,
/// bit for bit what the Go kubelet 1.26 computes (see [`crate::util::hash`]), so containers
/// either kubelet created match the other's spec hash. Any change to the spec changes it.
pub fn hash_container(container: &Container) -> u64 {
    crate::util::hash::hash_container(container)
}

/// `<name>_<namespace>` (upstream `GetPodFullName`).
pub fn pod_full_name(pod: &Pod) -> String {
    build_pod_full_name(
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
    )
}

/// `<name>_<namespace>` from parts (upstream `BuildPodFullName`).
pub fn build_pod_full_name(name: &str, namespace: &str) -> String {
    format!("{name}_{namespace}")
}

/// The pod's restart policy, defaulting to `Always` like the API server.
pub fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

/// Upstream `IsRestartableInitContainer`: an init container with `restartPolicy: Always` is a
/// sidecar (KEP-753): started in order with the init containers, then kept running.
pub fn is_restartable_init_container(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The pod's init containers (empty without a spec).
pub fn init_containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[])
}

/// An ephemeral container as the container it runs as (upstream converts
/// `EphemeralContainerCommon` to `v1.Container`: the fields are the same).
pub fn ephemeral_as_container(e: &EphemeralContainer) -> Container {
    Container {
        name: e.name.clone(),
        image: e.image.clone(),
        command: e.command.clone(),
        args: e.args.clone(),
        working_dir: e.working_dir.clone(),
        env: e.env.clone(),
        env_from: e.env_from.clone(),
        image_pull_policy: e.image_pull_policy.clone(),
        resources: e.resources.clone(),
        volume_mounts: e.volume_mounts.clone(),
        volume_devices: e.volume_devices.clone(),
        security_context: e.security_context.clone(),
        stdin: e.stdin,
        stdin_once: e.stdin_once,
        tty: e.tty,
        termination_message_path: e.termination_message_path.clone(),
        termination_message_policy: e.termination_message_policy.clone(),
        ..Default::default()
    }
}

/// The pod's ephemeral containers as containers, in spec order.
pub fn ephemeral_containers(pod: &Pod) -> Vec<Container> {
    pod.spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_deref())
        .unwrap_or(&[])
        .iter()
        .map(ephemeral_as_container)
        .collect()
}

/// Upstream `hasAnyRegularContainerCreated`: has any app container been created (it is
/// running, or was created and not yet started)? Then initialization finished in the past.
pub fn has_any_regular_container_created(pod: &Pod, status: &PodStatus) -> bool {
    pod.spec.iter().flat_map(|s| &s.containers).any(|c| {
        status
            .find_container_status_by_name(&c.name)
            .is_some_and(|s| matches!(s.state, ContainerState::Created | ContainerState::Running))
    })
}

/// True when `hostNetwork: true` (upstream `IsHostNetworkPod`).
pub fn is_host_network_pod(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// Upstream `ShouldContainerBeRestarted`: should `container` (not running) be (re)started?
pub fn should_container_be_restarted(container: &Container, pod: &Pod, status: &PodStatus) -> bool {
    // A pod marked for deletion is never restarted.
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(cs) = status.find_container_status_by_name(&container.name) else {
        // Never started (or all instances garbage-collected): start it.
        return true;
    };
    match cs.state {
        ContainerState::Running => false,
        ContainerState::Unknown | ContainerState::Created => true,
        ContainerState::Exited => match restart_policy(pod) {
            "Never" => false,
            "OnFailure" => cs.exit_code != 0,
            _ => true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(name: &str, image: &str) -> Container {
        Container {
            name: name.into(),
            image: Some(image.into()),
            ..Default::default()
        }
    }

    #[test]
    fn hash_is_stable_and_sensitive() {
        let a = container("a", "busybox");
        assert_eq!(hash_container(&a), hash_container(&a.clone()));
        let b = container("a", "busybox:1");
        assert_ne!(hash_container(&a), hash_container(&b));
    }

    #[test]
    fn container_id_round_trip() {
        let id = ContainerID::parse("docker://abc").expect("valid");
        assert_eq!(id, ContainerID::new("docker", "abc"));
        assert_eq!(id.to_string(), "docker://abc");
        assert!(ContainerID::parse("abc").is_err());
        assert!(ContainerID::parse("://abc").is_err());
    }

    #[test]
    fn find_newest_by_name() {
        let st = PodStatus {
            container_statuses: vec![
                ContainerStatus {
                    name: "a".into(),
                    restart_count: 2,
                    ..Default::default()
                },
                ContainerStatus {
                    name: "a".into(),
                    restart_count: 1,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(
            st.find_container_status_by_name("a")
                .map(|c| c.restart_count),
            Some(2)
        );
        assert!(st.find_container_status_by_name("b").is_none());
    }
}
