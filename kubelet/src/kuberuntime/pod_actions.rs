//! `computePodActions` (upstream `pkg/kubelet/kuberuntime/kuberuntime_manager.go`). This module
//! owns the pure decision of what `SyncPod` must do to move a pod from what the runtime reports
//! ([`PodStatus`]) to what its spec asks for: kill the pod, (re)create the sandbox and with which
//! attempt number, which init container to start next (one per sync), which app containers to
//! start, and which containers to kill and why. It performs no I/O; probe results are passed in
//! as [`ProbeFailures`]. Ephemeral containers are ignored.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::container::{
    ContainerID, ContainerState, ContainerStatus, NamespaceMode, PodStatus, SandboxState,
    hash_container, is_host_network_pod, restart_policy, should_container_be_restarted,
};
use crate::probe::{ProbeResults, ProbeType};

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
    /// Index into `spec.initContainers` of the init container to start next.
    pub next_init_container_to_start: Option<usize>,
    /// Indices into `spec.containers` to start.
    pub containers_to_start: Vec<usize>,
    /// Containers to kill (when `kill_pod` is false).
    pub containers_to_kill: HashMap<ContainerID, ContainerToKill>,
}

/// Probe failures known to the prober managers (upstream `livenessManager`/`startupManager`).
#[derive(Debug, Clone, Default)]
pub struct ProbeFailures {
    /// Containers whose liveness probe is failing.
    pub liveness: HashSet<ContainerID>,
    /// Containers whose startup probe is failing.
    pub startup: HashSet<ContainerID>,
}

fn containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[])
}

fn init_containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
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

/// Upstream `isInitContainerFailed`.
fn is_init_container_failed(s: &ContainerStatus) -> bool {
    s.reason == "OOMKilled"
        || (s.state == ContainerState::Exited && s.exit_code != 0)
        || s.state == ContainerState::Unknown
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

/// Result of upstream `findNextInitContainerToRun`.
#[derive(Debug, Clone, PartialEq)]
pub struct NextInit<'a> {
    /// Status of the last failed init container, if any.
    pub last_failed: Option<&'a ContainerStatus>,
    /// Index of the init container to run next.
    pub next: Option<usize>,
    /// Initialization complete.
    pub done: bool,
}

/// Upstream `findNextInitContainerToRun`.
pub fn find_next_init_container_to_run<'a>(pod: &Pod, status: &'a PodStatus) -> NextInit<'a> {
    let inits = init_containers(pod);
    let done = NextInit {
        last_failed: None,
        next: None,
        done: true,
    };
    if inits.is_empty() {
        return done;
    }
    // A running app container means init ran in the past (its containers may be GC'd since).
    if containers(pod).iter().any(|c| {
        status
            .find_container_status_by_name(&c.name)
            .is_some_and(|s| s.state == ContainerState::Running)
    }) {
        return done;
    }
    // The last failed init container, if any.
    for (i, c) in inits.iter().enumerate().rev() {
        if let Some(s) = status.find_container_status_by_name(&c.name)
            && is_init_container_failed(s)
        {
            return NextInit {
                last_failed: Some(s),
                next: Some(i),
                done: false,
            };
        }
    }
    for (i, c) in inits.iter().enumerate().rev() {
        let Some(s) = status.find_container_status_by_name(&c.name) else {
            continue;
        };
        match s.state {
            ContainerState::Running => {
                return NextInit {
                    last_failed: None,
                    next: None,
                    done: false,
                };
            }
            ContainerState::Exited => {
                if i == inits.len() - 1 {
                    return done;
                }
                return NextInit {
                    last_failed: None,
                    next: Some(i + 1),
                    done: false,
                };
            }
            _ => {}
        }
    }
    NextInit {
        last_failed: None,
        next: Some(0),
        done: false,
    }
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
        if to_start.is_empty() && find_next_init_container_to_run(pod, status).done {
            changes.create_sandbox = false;
            return changes;
        }
        if !init_containers(pod).is_empty() {
            changes.next_init_container_to_start = Some(0);
            return changes;
        }
        changes.containers_to_start = to_start;
        return changes;
    }

    let init = find_next_init_container_to_run(pod, status);
    if !init.done {
        if let Some(next) = init.next {
            let failed = init.last_failed.is_some_and(is_init_container_failed);
            if failed && !should_restart_on_failure(pod) {
                changes.kill_pod = true;
            } else {
                if let Some(last) = init.last_failed
                    && last.state == ContainerState::Unknown
                {
                    changes.containers_to_kill.insert(
                        last.id.clone(),
                        ContainerToKill {
                            name: last.name.clone(),
                            index: next,
                            init: true,
                            message: format!(
                                "Init container is in {:?} state, try killing it before restart",
                                last.state.to_string()
                            ),
                            reason: KillReason::Unknown,
                        },
                    );
                }
                changes.next_init_container_to_start = Some(next);
            }
        }
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
        if results.get(ProbeType::Startup, &c.id.id) == Some(false) {
            f.startup.insert(c.id.clone());
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::SandboxStatus;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn c(name: &str) -> Container {
        Container {
            name: name.into(),
            image: Some(format!("img-{name}")),
            ..Default::default()
        }
    }

    fn pod(policy: &str, init: &[&str], apps: &[&str]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("default".into()),
                uid: Some("uid".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                init_containers: if init.is_empty() {
                    None
                } else {
                    Some(init.iter().map(|n| c(n)).collect())
                },
                containers: apps.iter().map(|n| c(n)).collect(),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn sandbox(attempt: u32, ready: bool) -> SandboxStatus {
        SandboxStatus {
            id: format!("sb{attempt}"),
            state: if ready {
                SandboxState::Ready
            } else {
                SandboxState::NotReady
            },
            attempt,
            network_namespace_mode: NamespaceMode::Pod,
            ips: vec!["10.0.0.2".into()],
            created_at: None,
        }
    }

    /// A status for container `name` of `pod` (hash matches its spec).
    fn cs(pod: &Pod, name: &str, state: ContainerState, exit: i32) -> ContainerStatus {
        let spec = pod
            .spec
            .iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .find(|c| c.name == name)
            .cloned()
            .unwrap_or_else(|| c(name));
        ContainerStatus {
            id: ContainerID::new("docker", format!("id-{name}")),
            name: name.into(),
            state,
            exit_code: exit,
            hash: hash_container(&spec),
            ..Default::default()
        }
    }

    fn status(sandboxes: Vec<SandboxStatus>, containers: Vec<ContainerStatus>) -> PodStatus {
        PodStatus {
            id: "uid".into(),
            name: "p".into(),
            namespace: "default".into(),
            ips: vec![],
            sandbox_statuses: sandboxes,
            container_statuses: containers,
        }
    }

    fn id(name: &str) -> ContainerID {
        ContainerID::new("docker", format!("id-{name}"))
    }

    struct Want {
        kill_pod: bool,
        create_sandbox: bool,
        attempt: u32,
        sandbox_id: &'static str,
        next_init: Option<usize>,
        start: Vec<usize>,
        kill: Vec<(&'static str, KillReason)>,
    }

    fn keep_all() -> Want {
        Want {
            kill_pod: false,
            create_sandbox: false,
            attempt: 1,
            sandbox_id: "sb1",
            next_init: None,
            start: vec![],
            kill: vec![],
        }
    }

    fn new_sandbox(attempt: u32, id: &'static str) -> Want {
        Want {
            kill_pod: true,
            create_sandbox: true,
            attempt,
            sandbox_id: id,
            next_init: None,
            start: vec![],
            kill: vec![],
        }
    }

    use ContainerState::*;

    #[allow(clippy::type_complexity)]
    fn cases() -> Vec<(
        &'static str,
        Box<dyn Fn() -> (Pod, PodStatus, ProbeFailures)>,
        Want,
    )> {
        let none = ProbeFailures::default;
        vec![
            (
                "no sandbox: create with attempt 0, start all",
                Box::new(move || {
                    let p = pod("Always", &[], &["a", "b"]);
                    (p, status(vec![], vec![]), none())
                }),
                Want {
                    start: vec![0, 1],
                    ..new_sandbox(0, "")
                },
            ),
            (
                "no sandbox with init containers: first init only",
                Box::new(move || {
                    let p = pod("Always", &["i1", "i2"], &["a"]);
                    (p, status(vec![], vec![]), none())
                }),
                Want {
                    next_init: Some(0),
                    ..new_sandbox(0, "")
                },
            ),
            (
                "sandbox not ready: attempt+1, keep id to stop it",
                Box::new(move || {
                    let p = pod("Always", &[], &["a"]);
                    let s = status(vec![sandbox(1, false)], vec![cs(&p, "a", Exited, 0)]);
                    (p, s, none())
                }),
                Want {
                    start: vec![0],
                    ..new_sandbox(2, "sb1")
                },
            ),
            (
                "two ready sandboxes: recreate",
                Box::new(move || {
                    let p = pod("Always", &[], &["a"]);
                    let s = status(
                        vec![sandbox(3, true), sandbox(2, true)],
                        vec![cs(&p, "a", Running, 0)],
                    );
                    (p, s, none())
                }),
                Want {
                    start: vec![0],
                    ..new_sandbox(4, "sb3")
                },
            ),
            (
                "network namespace mode changed: recreate, empty sandbox id",
                Box::new(move || {
                    let mut p = pod("Always", &[], &["a"]);
                    if let Some(s) = p.spec.as_mut() {
                        s.host_network = Some(true);
                    }
                    let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Running, 0)]);
                    (p, s, none())
                }),
                Want {
                    start: vec![0],
                    ..new_sandbox(2, "")
                },
            ),
            (
                "no IP for a pod-network sandbox: recreate",
                Box::new(move || {
                    let p = pod("Always", &[], &["a"]);
                    let mut sb = sandbox(1, true);
                    sb.ips.clear();
                    let s = status(vec![sb], vec![cs(&p, "a", Running, 0)]);
                    (p, s, none())
                }),
                Want {
                    start: vec![0],
                    ..new_sandbox(2, "sb1")
                },
            ),
            (
                "host network without IP is fine",
                Box::new(move || {
                    let mut p = pod("Always", &[], &["a"]);
                    if let Some(s) = p.spec.as_mut() {
                        s.host_network = Some(true);
                    }
                    let mut sb = sandbox(1, true);
                    sb.ips.clear();
                    sb.network_namespace_mode = NamespaceMode::Node;
                    let s = status(vec![sb], vec![cs(&p, "a", Running, 0)]);
                    (p, s, none())
                }),
                keep_all(),
            ),
            (
                "Never policy, sandbox dead, containers ran: don't recreate",
                Box::new(move || {
                    let p = pod("Never", &[], &["a"]);
                    let s = status(vec![sandbox(1, false)], vec![cs(&p, "a", Exited, 1)]);
                    (p, s, none())
                }),
                Want {
                    create_sandbox: false,
                    ..new_sandbox(2, "sb1")
                },
            ),
            (
                "Never policy, sandbox dead, no container ever created: retry sandbox",
                Box::new(move || {
                    let p = pod("Never", &[], &["a"]);
                    let s = status(vec![sandbox(1, false)], vec![]);
                    (p, s, none())
                }),
                Want {
                    start: vec![0],
                    ..new_sandbox(2, "sb1")
                },
            ),
            (
                "OnFailure, sandbox dead: skip succeeded containers",
                Box::new(move || {
                    let p = pod("OnFailure", &[], &["a", "b"]);
                    let s = status(
                        vec![sandbox(1, false)],
                        vec![cs(&p, "a", Exited, 0), cs(&p, "b", Exited, 2)],
                    );
                    (p, s, none())
                }),
                Want {
                    start: vec![1],
                    ..new_sandbox(2, "sb1")
                },
            ),
            (
                "OnFailure, sandbox dead, all succeeded, no init: nothing to do",
                Box::new(move || {
                    let p = pod("OnFailure", &[], &["a"]);
                    let s = status(vec![sandbox(1, false)], vec![cs(&p, "a", Exited, 0)]);
                    (p, s, none())
                }),
                Want {
                    create_sandbox: false,
                    ..new_sandbox(2, "sb1")
                },
            ),
            (
                "all running and unchanged: keep",
                Box::new(move || {
                    let p = pod("Always", &[], &["a", "b"]);
                    let s = status(
                        vec![sandbox(1, true)],
                        vec![cs(&p, "a", Running, 0), cs(&p, "b", Running, 0)],
                    );
                    (p, s, none())
                }),
                keep_all(),
            ),
            (
                "spec hash changed: kill and restart even under Never",
                Box::new(move || {
                    let p = pod("Never", &[], &["a"]);
                    let mut a = cs(&p, "a", Running, 0);
                    a.hash ^= 1;
                    let s = status(vec![sandbox(1, true)], vec![a]);
                    (p, s, none())
                }),
                Want {
                    start: vec![0],
                    kill: vec![("a", KillReason::SpecChanged)],
                    ..keep_all()
                },
            ),
            (
                "liveness failed under Always: kill and restart",
                Box::new(move || {
                    let p = pod("Always", &[], &["a", "b"]);
                    let s = status(
                        vec![sandbox(1, true)],
                        vec![cs(&p, "a", Running, 0), cs(&p, "b", Running, 0)],
                    );
                    let mut pf = ProbeFailures::default();
                    pf.liveness.insert(id("a"));
                    (p, s, pf)
                }),
                Want {
                    start: vec![0],
                    kill: vec![("a", KillReason::LivenessProbe)],
                    ..keep_all()
                },
            ),
            (
                "liveness failed under Never, only container: kill it and the pod",
                Box::new(move || {
                    let p = pod("Never", &[], &["a"]);
                    let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Running, 0)]);
                    let mut pf = ProbeFailures::default();
                    pf.liveness.insert(id("a"));
                    (p, s, pf)
                }),
                Want {
                    kill_pod: true,
                    kill: vec![("a", KillReason::LivenessProbe)],
                    ..keep_all()
                },
            ),
            (
                "startup probe failed: kill and restart",
                Box::new(move || {
                    let p = pod("OnFailure", &[], &["a"]);
                    let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Running, 0)]);
                    let mut pf = ProbeFailures::default();
                    pf.startup.insert(id("a"));
                    (p, s, pf)
                }),
                Want {
                    start: vec![0],
                    kill: vec![("a", KillReason::StartupProbe)],
                    ..keep_all()
                },
            ),
            (
                "exited under Always: restart, keep the running one",
                Box::new(move || {
                    let p = pod("Always", &[], &["a", "b"]);
                    let s = status(
                        vec![sandbox(1, true)],
                        vec![cs(&p, "a", Exited, 0), cs(&p, "b", Running, 0)],
                    );
                    (p, s, none())
                }),
                Want {
                    start: vec![0],
                    ..keep_all()
                },
            ),
            (
                "exited 0 under OnFailure with another running: leave it",
                Box::new(move || {
                    let p = pod("OnFailure", &[], &["a", "b"]);
                    let s = status(
                        vec![sandbox(1, true)],
                        vec![cs(&p, "a", Exited, 0), cs(&p, "b", Running, 0)],
                    );
                    (p, s, none())
                }),
                keep_all(),
            ),
            (
                "exited 1 under OnFailure: restart",
                Box::new(move || {
                    let p = pod("OnFailure", &[], &["a"]);
                    let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Exited, 1)]);
                    (p, s, none())
                }),
                Want {
                    start: vec![0],
                    ..keep_all()
                },
            ),
            (
                "all exited under Never: kill pod",
                Box::new(move || {
                    let p = pod("Never", &[], &["a", "b"]);
                    let s = status(
                        vec![sandbox(1, true)],
                        vec![cs(&p, "a", Exited, 0), cs(&p, "b", Exited, 1)],
                    );
                    (p, s, none())
                }),
                Want {
                    kill_pod: true,
                    ..keep_all()
                },
            ),
            (
                "unknown state: kill then restart",
                Box::new(move || {
                    let p = pod("Never", &[], &["a"]);
                    let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Unknown, 0)]);
                    (p, s, none())
                }),
                Want {
                    start: vec![0],
                    kill: vec![("a", KillReason::Unknown)],
                    ..keep_all()
                },
            ),
            (
                "created but never started: start it",
                Box::new(move || {
                    let p = pod("Never", &[], &["a"]);
                    let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Created, 0)]);
                    (p, s, none())
                }),
                Want {
                    start: vec![0],
                    ..keep_all()
                },
            ),
            (
                "missing app container in ready sandbox: start it",
                Box::new(move || {
                    let p = pod("Always", &[], &["a", "b"]);
                    let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Running, 0)]);
                    (p, s, none())
                }),
                Want {
                    start: vec![1],
                    ..keep_all()
                },
            ),
            (
                "deletion timestamp set: no restarts, kill pod",
                Box::new(move || {
                    let mut p = pod("Always", &[], &["a"]);
                    p.metadata.deletion_timestamp =
                        Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
                    let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Exited, 1)]);
                    (p, s, none())
                }),
                Want {
                    kill_pod: true,
                    ..keep_all()
                },
            ),
            (
                "init: first done, start the second",
                Box::new(move || {
                    let p = pod("Always", &["i1", "i2"], &["a"]);
                    let s = status(vec![sandbox(1, true)], vec![cs(&p, "i1", Exited, 0)]);
                    (p, s, none())
                }),
                Want {
                    next_init: Some(1),
                    ..keep_all()
                },
            ),
            (
                "init: none started yet in ready sandbox: start first",
                Box::new(move || {
                    let p = pod("Always", &["i1", "i2"], &["a"]);
                    (p, status(vec![sandbox(1, true)], vec![]), none())
                }),
                Want {
                    next_init: Some(0),
                    ..keep_all()
                },
            ),
            (
                "init: one running, wait",
                Box::new(move || {
                    let p = pod("Always", &["i1", "i2"], &["a"]);
                    let s = status(
                        vec![sandbox(1, true)],
                        vec![cs(&p, "i2", Running, 0), cs(&p, "i1", Exited, 0)],
                    );
                    (p, s, none())
                }),
                keep_all(),
            ),
            (
                "init: failed under Always: restart it",
                Box::new(move || {
                    let p = pod("Always", &["i1", "i2"], &["a"]);
                    let s = status(
                        vec![sandbox(1, true)],
                        vec![cs(&p, "i2", Exited, 1), cs(&p, "i1", Exited, 0)],
                    );
                    (p, s, none())
                }),
                Want {
                    next_init: Some(1),
                    ..keep_all()
                },
            ),
            (
                "init: OOMKilled counts as failed even with exit 0",
                Box::new(move || {
                    let p = pod("Never", &["i1"], &["a"]);
                    let mut i1 = cs(&p, "i1", Exited, 0);
                    i1.reason = "OOMKilled".into();
                    let s = status(vec![sandbox(1, true)], vec![i1]);
                    (p, s, none())
                }),
                Want {
                    kill_pod: true,
                    ..keep_all()
                },
            ),
            (
                "init: failed under Never: kill pod",
                Box::new(move || {
                    let p = pod("Never", &["i1"], &["a"]);
                    let s = status(vec![sandbox(1, true)], vec![cs(&p, "i1", Exited, 1)]);
                    (p, s, none())
                }),
                Want {
                    kill_pod: true,
                    ..keep_all()
                },
            ),
            (
                "init: unknown state under OnFailure: kill it and restart it",
                Box::new(move || {
                    let p = pod("OnFailure", &["i1"], &["a"]);
                    let s = status(vec![sandbox(1, true)], vec![cs(&p, "i1", Unknown, 0)]);
                    (p, s, none())
                }),
                Want {
                    next_init: Some(0),
                    kill: vec![("i1", KillReason::Unknown)],
                    ..keep_all()
                },
            ),
            (
                "init: all done, start app containers",
                Box::new(move || {
                    let p = pod("Always", &["i1", "i2"], &["a", "b"]);
                    let s = status(
                        vec![sandbox(1, true)],
                        vec![cs(&p, "i2", Exited, 0), cs(&p, "i1", Exited, 0)],
                    );
                    (p, s, none())
                }),
                Want {
                    start: vec![0, 1],
                    ..keep_all()
                },
            ),
            (
                "init: app container running means init done even if GC'd",
                Box::new(move || {
                    let p = pod("Always", &["i1"], &["a"]);
                    let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Running, 0)]);
                    (p, s, none())
                }),
                keep_all(),
            ),
            (
                "sandbox dead with init containers, apps exited under Always: first init",
                Box::new(move || {
                    let p = pod("Always", &["i1"], &["a"]);
                    let s = status(
                        vec![sandbox(1, false)],
                        vec![cs(&p, "a", Exited, 0), cs(&p, "i1", Exited, 0)],
                    );
                    (p, s, none())
                }),
                Want {
                    next_init: Some(0),
                    ..new_sandbox(2, "sb1")
                },
            ),
        ]
    }

    #[test]
    fn compute_pod_actions_table() {
        let all = cases();
        assert!(all.len() >= 20);
        for (name, build, want) in all {
            let (p, s, probes) = build();
            let got = compute_pod_actions(&p, &s, &probes);
            assert_eq!(got.kill_pod, want.kill_pod, "{name}: kill_pod");
            assert_eq!(
                got.create_sandbox, want.create_sandbox,
                "{name}: create_sandbox"
            );
            assert_eq!(got.attempt, want.attempt, "{name}: attempt");
            assert_eq!(got.sandbox_id, want.sandbox_id, "{name}: sandbox_id");
            assert_eq!(
                got.next_init_container_to_start, want.next_init,
                "{name}: next init"
            );
            assert_eq!(got.containers_to_start, want.start, "{name}: start");
            let mut kill: Vec<(String, KillReason)> = got
                .containers_to_kill
                .values()
                .map(|k| (k.name.clone(), k.reason))
                .collect();
            kill.sort_by(|a, b| a.0.cmp(&b.0));
            let want_kill: Vec<(String, KillReason)> =
                want.kill.iter().map(|(n, r)| (n.to_string(), *r)).collect();
            assert_eq!(kill, want_kill, "{name}: kill");
        }
    }

    #[test]
    fn kill_messages() {
        let p = pod("Always", &[], &["a"]);
        let mut a = cs(&p, "a", Running, 0);
        a.hash = 7;
        let s = status(vec![sandbox(1, true)], vec![a]);
        let got = compute_pod_actions(&p, &s, &ProbeFailures::default());
        let k = got.containers_to_kill.get(&id("a")).expect("killed");
        assert!(k.message.starts_with("Container spec hash changed (7 vs "));
        assert!(
            k.message
                .ends_with("Container will be killed and recreated.")
        );
        assert_eq!(k.index, 0);
        assert!(!k.init);
    }
}
