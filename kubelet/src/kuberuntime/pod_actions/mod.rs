//! `computePodActions` (upstream `pkg/kubelet/kuberuntime/kuberuntime_manager.go`). This module
//! owns the pure decision of what `SyncPod` must do to move a pod from what the runtime reports
//! ([`PodStatus`]) to what its spec asks for: kill the pod, (re)create the sandbox and with which
//! attempt number, which init containers to start (the next one, and sidecars to restart: see
//! [`init_containers`]), which ephemeral containers to start (once each, never restarted),
//! which app containers to start, and which containers to kill and why. It performs no I/O;
//! probe results are passed in as [`ProbeFailures`].
//! Its table-driven unit tests are in `tests.rs`.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::container::{
    ContainerID, ContainerState, NamespaceMode, PodStatus, SandboxState, ephemeral_containers,
    hash_container, init_containers, is_host_network_pod, restart_policy,
    should_container_be_restarted,
};
use crate::probe::{ProbeResults, ProbeType};

mod init_containers;
pub use init_containers::compute_init_container_actions;

/// Why a container is killed (upstream `containerKillReason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KillReason {
    /// The spec changed (upstream leaves the reason empty).
    SpecChanged,
    /// Liveness probe failed (`LivenessProbe`).
    LivenessProbe,
    /// Startup probe failed (`StartupProbe`).
    StartupProbe,
    /// State unknown: killed before restart to avoid two instances (`Unknown`).
    Unknown,
}

impl KillReason {
    /// Upstream string form.
    pub fn as_str(&self) -> &'static str {
        match self {
            KillReason::SpecChanged => "",
            KillReason::LivenessProbe => "LivenessProbe",
            KillReason::StartupProbe => "StartupProbe",
            KillReason::Unknown => "Unknown",
        }
    }
}

/// One container to kill (upstream `containerToKillInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerToKill {
    /// Container name.
    pub name: String,
    /// Index in `spec.initContainers` when `init`, else in `spec.containers`.
    pub index: usize,
    /// True for an init container.
    pub init: bool,
    /// Message for the kill event.
    pub message: String,
    /// Reason.
    pub reason: KillReason,
}

/// What `SyncPod` must do (upstream `podActions`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodActions {
    /// Stop all containers and the sandbox.
    pub kill_pod: bool,
    /// Create a new sandbox.
    pub create_sandbox: bool,
    /// The current sandbox id (may be empty), kept so the caller can stop it.
    pub sandbox_id: String,
    /// Attempt number for the new sandbox.
    pub attempt: u32,
    /// Indices into `spec.initContainers` to start, in spec order (upstream
    /// `InitContainersToStart`): the next init container, and sidecars to (re)start.
    pub init_containers_to_start: Vec<usize>,
    /// Indices into `spec.ephemeralContainers` to start (those never started).
    pub ephemeral_containers_to_start: Vec<usize>,
    /// Indices into `spec.containers` to start.
    pub containers_to_start: Vec<usize>,
    /// Containers to kill (when `kill_pod` is false).
    pub containers_to_kill: HashMap<ContainerID, ContainerToKill>,
}

/// Probe results known to the prober managers (upstream `livenessManager`/`startupManager`).
#[derive(Debug, Clone, Default)]
pub struct ProbeFailures {
    /// Containers whose liveness probe is failing.
    pub liveness: HashSet<ContainerID>,
    /// Containers whose startup probe is failing.
    pub startup: HashSet<ContainerID>,
    /// Containers whose startup probe succeeded (a sidecar with a startup probe lets the next
    /// init container start only then; no result yet means wait).
    pub startup_succeeded: HashSet<ContainerID>,
}

fn containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[])
}

fn should_restart_on_failure(pod: &Pod) -> bool {
    restart_policy(pod) != "Never"
}

fn container_succeeded(c: &Container, status: &PodStatus) -> bool {
    status
        .find_container_status_by_name(&c.name)
        .is_some_and(|s| s.state == ContainerState::Exited && s.exit_code == 0)
}

/// Upstream `podSandboxChanged`: (create a new sandbox?, attempt, current sandbox id).
pub fn pod_sandbox_changed(pod: &Pod, status: &PodStatus) -> (bool, u32, String) {
    let Some(newest) = status.sandbox_statuses.first() else {
        tracing::debug!("no sandbox for pod can be found, need to start a new one");
        return (true, 0, String::new());
    };
    let ready = status
        .sandbox_statuses
        .iter()
        .filter(|s| s.state == SandboxState::Ready)
        .count();
    let next = newest.attempt.saturating_add(1);
    if ready > 1 || newest.state != SandboxState::Ready {
        return (true, next, newest.id.clone());
    }
    let want_mode = if is_host_network_pod(pod) {
        NamespaceMode::Node
    } else {
        NamespaceMode::Pod
    };
    if newest.network_namespace_mode != want_mode {
        // Upstream returns an empty sandbox id here.
        return (true, next, String::new());
    }
    if !is_host_network_pod(pod) && newest.ips.iter().all(|ip| ip.is_empty()) {
        return (true, next, newest.id.clone());
    }
    (false, newest.attempt, newest.id.clone())
}

/// Upstream `computePodActions`.
pub fn compute_pod_actions(pod: &Pod, status: &PodStatus, probes: &ProbeFailures) -> PodActions {
    let (create_sandbox, attempt, sandbox_id) = pod_sandbox_changed(pod, status);
    let mut changes = PodActions {
        kill_pod: create_sandbox,
        create_sandbox,
        sandbox_id,
        attempt,
        ..Default::default()
    };
    let specs = containers(pod);

    if create_sandbox {
        // A pod that must not restart and whose containers already ran is done: don't create a
        // sandbox only to tear it down again. No container statuses means nothing was ever
        // created, so retry the sandbox.
        if !should_restart_on_failure(pod) && attempt != 0 && !status.container_statuses.is_empty()
        {
            changes.create_sandbox = false;
            return changes;
        }
        let to_start: Vec<usize> = specs
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                !(restart_policy(pod) == "OnFailure" && container_succeeded(c, status))
            })
            .map(|(i, _)| i)
            .collect();
        // No app container to start means every one of them succeeded (`OnFailure`), so
        // initialization finished in the past: the pod is done. (Upstream asks
        // `hasAnyRegularContainerCreated`, which is false once they exited; its pod workers
        // stop syncing a terminal pod, ours rely on this.)
        if to_start.is_empty() {
            changes.create_sandbox = false;
            return changes;
        }
        if !init_containers(pod).is_empty() {
            changes.init_containers_to_start = vec![0];
            return changes;
        }
        changes.containers_to_start = to_start;
        return changes;
    }

    // Ephemeral containers start even while initialization is in progress, and only once.
    changes.ephemeral_containers_to_start = ephemeral_containers(pod)
        .iter()
        .enumerate()
        .filter(|(_, c)| status.find_container_status_by_name(&c.name).is_none())
        .map(|(i, _)| i)
        .collect();

    let initialized = compute_init_container_actions(pod, status, probes, &mut changes);
    if changes.kill_pod || !initialized {
        // Initialization failed or in progress: app containers are not looked at.
        return changes;
    }

    let mut keep_count = 0usize;
    for (idx, c) in specs.iter().enumerate() {
        let cs = status.find_container_status_by_name(&c.name);
        let Some(cs) = cs.filter(|s| s.state == ContainerState::Running) else {
            if should_container_be_restarted(c, pod, status) {
                changes.containers_to_start.push(idx);
                if let Some(cs) = cs
                    && cs.state == ContainerState::Unknown
                {
                    changes.containers_to_kill.insert(
                        cs.id.clone(),
                        ContainerToKill {
                            name: cs.name.clone(),
                            index: idx,
                            init: false,
                            message: format!(
                                "Container is in {:?} state, try killing it before restart",
                                cs.state.to_string()
                            ),
                            reason: KillReason::Unknown,
                        },
                    );
                }
            }
            continue;
        };
        let mut restart = should_restart_on_failure(pod);
        let expected = hash_container(c);
        let (mut message, reason) = if cs.hash != expected {
            // A changed spec restarts regardless of the restart policy.
            restart = true;
            (
                format!("Container spec hash changed ({} vs {}).", cs.hash, expected),
                KillReason::SpecChanged,
            )
        } else if probes.liveness.contains(&cs.id) {
            (
                format!("Container {} failed liveness probe", c.name),
                KillReason::LivenessProbe,
            )
        } else if probes.startup.contains(&cs.id) {
            (
                format!("Container {} failed startup probe", c.name),
                KillReason::StartupProbe,
            )
        } else {
            keep_count += 1;
            continue;
        };
        if restart {
            message.push_str(" Container will be killed and recreated.");
            changes.containers_to_start.push(idx);
        }
        changes.containers_to_kill.insert(
            cs.id.clone(),
            ContainerToKill {
                name: cs.name.clone(),
                index: idx,
                init: false,
                message,
                reason,
            },
        );
    }
    if keep_count == 0 && changes.containers_to_start.is_empty() {
        changes.kill_pod = true;
        // Sidecars alone do not keep a pod alive: they are not restarted.
        changes.init_containers_to_start.clear();
    }
    changes
}

/// Failing liveness/startup probes of `status`'s running containers, for
/// [`compute_pod_actions`] (upstream reads `livenessManager` and `startupManager`).
pub fn probe_failures(results: &ProbeResults, status: &PodStatus) -> ProbeFailures {
    let mut f = ProbeFailures::default();
    for c in status.running_container_statuses() {
        if results.get(ProbeType::Liveness, &c.id.id) == Some(false) {
            f.liveness.insert(c.id.clone());
        }
        match results.get(ProbeType::Startup, &c.id.id) {
            Some(false) => {
                f.startup.insert(c.id.clone());
            }
            Some(true) => {
                f.startup_succeeded.insert(c.id.clone());
            }
            None => {}
        }
    }
    f
}

#[cfg(test)]
mod sidecar_tests;
#[cfg(test)]
mod tests;
