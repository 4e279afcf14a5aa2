//! Init container actions (upstream `computeInitContainerActions` in
//! `kuberuntime_container.go`, the `SidecarContainers` version). Init containers run one after
//! the other; a sidecar (an init container with `restartPolicy: Always`, KEP-753) counts as done
//! for the next one as soon as it runs (and its startup probe, if any, succeeded), and is kept
//! running afterwards: restarted when it exits, when its liveness or startup probe fails, or when
//! its spec changed, whatever the pod's restart policy.
//!
//! Like upstream, the init containers are walked from the last one backwards: completed init
//! containers may have been removed from the runtime, so the last one the runtime still knows
//! tells how far initialization got; every init container before it is "previously
//! initialized", and of those only sidecars still need anything (to be kept running).

use k8s_openapi::api::core::v1::Pod;

use super::{ContainerToKill, KillReason, PodActions, ProbeFailures, should_restart_on_failure};
use crate::container::{
    ContainerState, ContainerStatus, PodStatus, has_any_regular_container_created, hash_container,
    init_containers, is_restartable_init_container,
};

/// Upstream `isInitContainerFailed`.
pub(super) fn is_init_container_failed(s: &ContainerStatus) -> bool {
    s.reason == "OOMKilled"
        || (s.state == ContainerState::Exited && s.exit_code != 0)
        || s.state == ContainerState::Unknown
}

fn kill(
    changes: &mut PodActions,
    s: &ContainerStatus,
    index: usize,
    message: String,
    reason: KillReason,
) {
    changes.containers_to_kill.insert(
        s.id.clone(),
        ContainerToKill {
            name: s.name.clone(),
            index,
            init: true,
            message,
            reason,
        },
    );
}

/// Upstream `computeInitContainerActions`: fills `changes.init_containers_to_start` (in spec
/// order) and the init containers to kill, or sets `kill_pod` when an init container failed and
/// the pod must not restart. Returns true when the pod is initialized (app containers may run).
pub fn compute_init_container_actions(
    pod: &Pod,
    status: &PodStatus,
    probes: &ProbeFailures,
    changes: &mut PodActions,
) -> bool {
    let inits = init_containers(pod);
    if inits.is_empty() {
        return true;
    }
    // A created or running app container means initialization finished in the past (its init
    // containers may have been garbage-collected since).
    let mut pod_has_initialized = has_any_regular_container_created(pod, status);
    let mut previously_initialized = pod_has_initialized;
    let restart_on_failure = should_restart_on_failure(pod);
    let last = inits.len() - 1;
    let mut to_start = Vec::new();

    for (i, c) in inits.iter().enumerate().rev() {
        let sidecar = is_restartable_init_container(c);
        let Some(s) = status.find_container_status_by_name(&c.name) else {
            // Gone from the runtime: a sidecar that must run again.
            if previously_initialized && sidecar {
                to_start.push(i);
            }
            continue;
        };
        if previously_initialized && !sidecar {
            // After initialization only sidecars need to be kept running.
            continue;
        }
        match s.state {
            // Created but not started: the runtime likely failed to start it; start anew.
            ContainerState::Created => to_start.push(i),
            ContainerState::Running if !sidecar => {
                // A regular init container: wait for it to finish.
            }
            ContainerState::Running => 'sidecar: {
                if c.startup_probe.is_some() {
                    if probes.startup.contains(&s.id) {
                        kill(
                            changes,
                            s,
                            i,
                            format!("Init container {} failed startup probe", c.name),
                            KillReason::StartupProbe,
                        );
                        to_start.push(i);
                        break 'sidecar;
                    }
                    if !probes.startup_succeeded.contains(&s.id) {
                        // Not started yet: the next init container waits.
                        break 'sidecar;
                    }
                }
                if i == last {
                    pod_has_initialized = true;
                } else if !previously_initialized {
                    // Started for the first time: on to the next init container.
                    to_start.push(i + 1);
                }
                let expected = hash_container(c);
                if s.hash != expected {
                    kill(
                        changes,
                        s,
                        i,
                        format!("Init container {} definition changed", c.name),
                        KillReason::SpecChanged,
                    );
                    to_start.push(i);
                    break 'sidecar;
                }
                // Liveness does not hold back the next init container, only restarts this one.
                if c.liveness_probe.is_some() && probes.liveness.contains(&s.id) {
                    kill(
                        changes,
                        s,
                        i,
                        format!("Init container {} failed liveness probe", c.name),
                        KillReason::LivenessProbe,
                    );
                    to_start.push(i);
                }
            }
            ContainerState::Exited if sidecar => to_start.push(i),
            ContainerState::Exited => {
                if is_init_container_failed(s) {
                    if !restart_on_failure {
                        changes.kill_pod = true;
                        changes.init_containers_to_start.clear();
                        return false;
                    }
                    to_start.push(i);
                } else if i == last {
                    pod_has_initialized = true;
                } else {
                    to_start.push(i + 1);
                }
            }
            ContainerState::Unknown => {
                if !sidecar && !restart_on_failure {
                    changes.kill_pod = true;
                    changes.init_containers_to_start.clear();
                    return false;
                }
                kill(
                    changes,
                    s,
                    i,
                    format!(
                        "Init container is in {:?} state, try killing it before restart",
                        s.state.to_string()
                    ),
                    KillReason::Unknown,
                );
                to_start.push(i);
            }
        }
        // Everything before the last init container the runtime knows has run.
        previously_initialized = true;
    }
    if !previously_initialized {
        // No init container ever ran: start the first.
        to_start.push(0);
    }
    to_start.reverse();
    changes.init_containers_to_start = to_start;
    pod_has_initialized
}
