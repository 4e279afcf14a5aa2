//! The pod's API status (upstream `kubelet_pods.go` `generateAPIPodStatus`, `getPhase`,
//! `convertToAPIContainerStatuses`, and `status/status_manager.go`). This module owns turning
//! the runtime's [`container::PodStatus`] plus the last sync's waiting reasons into a
//! Kubernetes `PodStatus` (phase, conditions, container states, IPs, start time; sidecars
//! count for `Initialized` once started and for `Ready` like app containers; ephemeral
//! containers are reported in `ephemeralContainerStatuses`, never ready), and the status manager that keeps the newest status per pod UID for the HTTP server.

pub mod api;

use std::collections::HashMap;
use std::sync::Arc;

use chrono::Utc;
use k8s_openapi::api::core::v1::{
    Container, ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus as ApiContainerStatus, HostIP, Pod, PodCondition, PodIP,
    PodStatus as ApiPodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use parking_lot::RwLock;

use crate::container::{self, ContainerState, PodStatus, restart_policy};
use crate::qos::get_pod_qos;

/// Waiting reasons from the last sync, per container name: (reason, message).
pub type WaitingReasons = HashMap<String, (String, String)>;

fn time(t: Option<chrono::DateTime<Utc>>) -> Option<Time> {
    let ns = t?.timestamp_nanos_opt()?;
    k8s_openapi::jiff::Timestamp::from_nanosecond(i128::from(ns))
        .ok()
        .map(Time)
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

fn terminated(cs: &container::ContainerStatus) -> ContainerStateTerminated {
    let reason = if !cs.reason.is_empty() {
        cs.reason.clone()
    } else if cs.exit_code == 0 {
        "Completed".into()
    } else {
        "Error".into()
    };
    ContainerStateTerminated {
        exit_code: cs.exit_code,
        reason: Some(reason),
        message: (!cs.message.is_empty()).then(|| cs.message.clone()),
        started_at: time(cs.started_at),
        finished_at: time(cs.finished_at),
        container_id: Some(cs.id.to_string()),
        ..Default::default()
    }
}

fn waiting(reason: &str, message: Option<&str>) -> ApiState {
    ApiState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message: message.filter(|m| !m.is_empty()).map(str::to_string),
        }),
        ..Default::default()
    }
}

/// Upstream `convertToAPIContainerStatuses` for one list of containers.
fn container_statuses(
    specs: &[Container],
    status: &PodStatus,
    reasons: &WaitingReasons,
    default_waiting: &str,
) -> Vec<ApiContainerStatus> {
    specs
        .iter()
        .map(|c| {
            let instances: Vec<&container::ContainerStatus> = status
                .container_statuses
                .iter()
                .filter(|s| s.name == c.name)
                .collect();
            let mut out = ApiContainerStatus {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                ready: false,
                started: Some(false),
                ..Default::default()
            };
            let Some(cur) = instances.first() else {
                let (r, m) = reasons
                    .get(&c.name)
                    .map(|(r, m)| (r.as_str(), Some(m.as_str())))
                    .unwrap_or((default_waiting, None));
                out.state = Some(waiting(r, m));
                return out;
            };
            out.container_id = Some(cur.id.to_string());
            out.image_id = if cur.image_ref.is_empty() {
                cur.image_id.clone()
            } else {
                cur.image_ref.clone()
            };
            out.restart_count = cur.restart_count;
            match cur.state {
                ContainerState::Running => {
                    out.state = Some(ApiState {
                        running: Some(ContainerStateRunning {
                            started_at: time(cur.started_at),
                        }),
                        ..Default::default()
                    });
                    out.ready = true;
                    out.started = Some(true);
                    if let Some(prev) = instances
                        .get(1)
                        .filter(|p| p.state == ContainerState::Exited)
                    {
                        out.last_state = Some(ApiState {
                            terminated: Some(terminated(prev)),
                            ..Default::default()
                        });
                    }
                }
                ContainerState::Exited => {
                    let t = terminated(cur);
                    if let Some((r, m)) = reasons.get(&c.name) {
                        // About to be restarted but waiting (back-off, pull error): upstream
                        // shows Waiting with the reason and the exit as lastState.
                        out.state = Some(waiting(r, Some(m)));
                        out.last_state = Some(ApiState {
                            terminated: Some(t),
                            ..Default::default()
                        });
                    } else {
                        out.state = Some(ApiState {
                            terminated: Some(t),
                            ..Default::default()
                        });
                        if let Some(prev) = instances
                            .get(1)
                            .filter(|p| p.state == ContainerState::Exited)
                        {
                            out.last_state = Some(ApiState {
                                terminated: Some(terminated(prev)),
                                ..Default::default()
                            });
                        }
                    }
                }
                ContainerState::Created | ContainerState::Unknown => {
                    let (r, m) = reasons
                        .get(&c.name)
                        .map(|(r, m)| (r.as_str(), Some(m.as_str())))
                        .unwrap_or(("ContainerCreating", None));
                    out.state = Some(waiting(r, m));
                }
            }
            out
        })
        .collect()
}

fn is_terminated(s: &ApiContainerStatus) -> Option<&ContainerStateTerminated> {
    s.state.as_ref().and_then(|st| st.terminated.as_ref())
}

fn is_running(s: &ApiContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.running.is_some())
}

fn waiting_after_exit(s: &ApiContainerStatus) -> Option<&ContainerStateTerminated> {
    s.state
        .as_ref()
        .is_some_and(|st| st.waiting.is_some())
        .then(|| s.last_state.as_ref().and_then(|l| l.terminated.as_ref()))
        .flatten()
}

/// Upstream `getPhase` (the `SidecarContainers` version): regular init containers must all
/// have succeeded; sidecars count as running app containers once started, and a sidecar that
/// exited does not count at all, so a pod whose app containers completed is `Succeeded` once
/// its sidecars were stopped.
pub fn get_phase(pod: &Pod, init: &[ApiContainerStatus], app: &[ApiContainerStatus]) -> String {
    let policy = restart_policy(pod);
    let init_specs = container::init_containers(pod);
    let find = |name: &str| init.iter().find(|s| s.name == name);
    let (mut pending_init, mut failed_init) = (0, 0);
    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for c in init_specs {
        let Some(s) = find(&c.name) else {
            if container::is_restartable_init_container(c) {
                unknown += 1;
            } else {
                pending_init += 1;
            }
            continue;
        };
        if container::is_restartable_init_container(c) {
            if is_running(s) {
                if s.started != Some(true) {
                    pending_init += 1;
                }
                running += 1;
            } else if is_terminated(s).is_some() || waiting_after_exit(s).is_some() {
                // An exited sidecar does not count for the phase.
            } else if s.state.as_ref().is_some_and(|st| st.waiting.is_some()) {
                pending_init += 1;
                waiting += 1;
            } else {
                pending_init += 1;
                unknown += 1;
            }
            continue;
        }
        if is_running(s) {
            pending_init += 1;
        } else if let Some(t) = is_terminated(s) {
            if t.exit_code != 0 {
                failed_init += 1;
            }
        } else if s.state.as_ref().is_some_and(|st| st.waiting.is_some()) {
            match waiting_after_exit(s) {
                Some(t) if t.exit_code != 0 => failed_init += 1,
                Some(_) => {}
                None => pending_init += 1,
            }
        } else {
            pending_init += 1;
        }
    }
    for s in app {
        if is_running(s) {
            running += 1;
        } else if let Some(t) = is_terminated(s) {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if let Some(t) = waiting_after_exit(s) {
            // Waiting to restart after having run.
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else {
            waiting += 1;
        }
    }
    if failed_init > 0 && policy == "Never" {
        return "Failed".into();
    }
    let any_app_started = app
        .iter()
        .any(|s| is_running(s) || is_terminated(s).is_some() || waiting_after_exit(s).is_some());
    if (pending_init > 0 && !any_app_started) || waiting > 0 {
        return "Pending".into();
    }
    if running > 0 && unknown == 0 {
        return "Running".into();
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        return match policy {
            "Always" => "Running".into(),
            _ if stopped == succeeded => "Succeeded".into(),
            "Never" => "Failed".into(),
            _ => "Running".into(),
        };
    }
    "Pending".into()
}

fn condition(type_: &str, ok: bool, reason: Option<&str>) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: if ok { None } else { reason.map(str::to_string) },
        ..Default::default()
    }
}

/// Upstream's condition messages: "containers with unknown status: [a b], containers with
/// <what> status: [c]" (Go prints a `[]string` as `[a b]`); `None` when both lists are empty.
fn unready_message(unknown: &[&str], not_ok: &[&str], what: &str) -> Option<String> {
    let mut parts = Vec::new();
    if !unknown.is_empty() {
        parts.push(format!(
            "containers with unknown status: [{}]",
            unknown.join(" ")
        ));
    }
    if !not_ok.is_empty() {
        parts.push(format!(
            "containers with {what} status: [{}]",
            not_ok.join(" ")
        ));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// A `False` condition with reason and message.
fn not_true(type_: &str, reason: &str, message: Option<String>) -> PodCondition {
    PodCondition {
        message,
        ..condition(type_, false, Some(reason))
    }
}

/// Upstream `GeneratePodInitializedCondition`: every regular init container succeeded and every
/// sidecar started, or an app container already started (sidecars restarting later do not
/// take it back). Not initialized: reason `ContainersNotInitialized`, message "containers with
/// incomplete status: [init1 init2]"; a Succeeded pod whose init containers are all known:
/// `True` with reason `PodCompleted`.
fn initialized_condition(
    pod: &Pod,
    init: &[ApiContainerStatus],
    app: &[ApiContainerStatus],
    succeeded: bool,
) -> PodCondition {
    let specs = container::init_containers(pod);
    let (mut unknown, mut incomplete) = (Vec::new(), Vec::new());
    for c in specs {
        match init.iter().find(|s| s.name == c.name) {
            None => unknown.push(c.name.as_str()),
            Some(s) if container::is_restartable_init_container(c) => {
                if s.started != Some(true) {
                    incomplete.push(c.name.as_str());
                }
            }
            Some(s) => {
                if is_terminated(s).is_none_or(|t| t.exit_code != 0) {
                    incomplete.push(c.name.as_str());
                }
            }
        }
    }
    if !specs.is_empty() && succeeded && unknown.is_empty() {
        return PodCondition {
            reason: Some("PodCompleted".into()),
            ..condition("Initialized", true, None)
        };
    }
    let app_started = app
        .iter()
        .any(|s| is_running(s) || is_terminated(s).is_some() || waiting_after_exit(s).is_some());
    match unready_message(&unknown, &incomplete, "incomplete") {
        Some(message) if !app_started => {
            not_true("Initialized", "ContainersNotInitialized", Some(message))
        }
        _ => condition("Initialized", true, None),
    }
}

/// Upstream `GenerateContainersReadyCondition`: every app container and every sidecar ready.
/// Otherwise reason `ContainersNotReady` with "containers with unready status: [a]", or
/// `PodCompleted` for a Succeeded pod.
fn containers_ready_condition(
    pod: &Pod,
    init: &[ApiContainerStatus],
    app: &[ApiContainerStatus],
    succeeded: bool,
) -> PodCondition {
    let (mut unknown, mut unready) = (Vec::new(), Vec::new());
    let sidecars = container::init_containers(pod)
        .iter()
        .filter(|c| container::is_restartable_init_container(c))
        .map(|c| (c, init));
    let regular = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| (c, app));
    for (c, statuses) in sidecars.chain(regular) {
        match statuses.iter().find(|s| s.name == c.name) {
            None => unknown.push(c.name.as_str()),
            Some(s) if !s.ready => unready.push(c.name.as_str()),
            Some(_) => {}
        }
    }
    if succeeded && unknown.is_empty() {
        return not_true("ContainersReady", "PodCompleted", None);
    }
    match unready_message(&unknown, &unready, "unready") {
        Some(message) => not_true("ContainersReady", "ContainersNotReady", Some(message)),
        None if app.is_empty() => not_true("ContainersReady", "ContainersNotReady", None),
        None => condition("ContainersReady", true, None),
    }
}

/// Upstream `GeneratePodReadyCondition`: `ContainersReady`'s status, reason and message when it
/// is not `True`; otherwise every readiness gate's condition (set by someone else on the API
/// pod, `conditions`) must be `True`, or `Ready` is `False` with reason
/// `ReadinessGatesNotReady`.
fn pod_ready_condition(
    pod: &Pod,
    containers_ready: &PodCondition,
    conditions: &[PodCondition],
) -> PodCondition {
    if containers_ready.status != "True" {
        return PodCondition {
            type_: "Ready".into(),
            ..containers_ready.clone()
        };
    }
    let gates = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_deref())
        .unwrap_or_default();
    let unready: Vec<String> = gates
        .iter()
        .filter_map(|g| {
            let t = &g.condition_type;
            match conditions.iter().find(|c| &c.type_ == t) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate {t:?} does not exist."
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate {t:?} is not \"True\", but {}",
                    c.status
                )),
                Some(_) => None,
            }
        })
        .collect();
    if unready.is_empty() {
        return condition("Ready", true, None);
    }
    not_true("Ready", "ReadinessGatesNotReady", Some(unready.join(", ")))
}

/// The conditions of the API pod as someone else set them (readiness gates read these).
fn api_conditions(pod: &Pod) -> &[PodCondition] {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

/// The `Initialized`, `ContainersReady` and `Ready` conditions of `status` from its container
/// statuses (computed again once probe results adjusted `started` and `ready`) and, for
/// `Ready`, the pod's readiness gates.
pub fn set_pod_conditions(pod: &Pod, status: &mut ApiPodStatus) {
    let init = status.init_container_statuses.as_deref().unwrap_or(&[]);
    let app = status.container_statuses.as_deref().unwrap_or(&[]);
    let succeeded = status.phase.as_deref() == Some("Succeeded");
    let initialized = initialized_condition(pod, init, app, succeeded);
    let containers_ready = containers_ready_condition(pod, init, app, succeeded);
    let ready = pod_ready_condition(pod, &containers_ready, api_conditions(pod));
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    for c in [initialized, containers_ready, ready] {
        match conditions.iter_mut().find(|x| x.type_ == c.type_) {
            Some(x) => *x = c,
            None => conditions.push(c),
        }
    }
}

/// Upstream `NeedToReconcilePodReadiness`: the API pod has readiness gates and its `Ready`
/// condition is not what its own conditions and container statuses now give (someone set a
/// gate's condition), so the pod must be synced again to write `Ready`.
pub fn need_to_reconcile_pod_readiness(pod: &Pod) -> bool {
    let has_gates = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|g| !g.is_empty());
    let Some(status) = pod.status.as_ref().filter(|_| has_gates) else {
        return false;
    };
    let Some(current) = api_conditions(pod).iter().find(|c| c.type_ == "Ready") else {
        return false;
    };
    let init = status.init_container_statuses.as_deref().unwrap_or(&[]);
    let app = status.container_statuses.as_deref().unwrap_or(&[]);
    let succeeded = status.phase.as_deref() == Some("Succeeded");
    let containers_ready = containers_ready_condition(pod, init, app, succeeded);
    let want = pod_ready_condition(pod, &containers_ready, api_conditions(pod));
    current.status != want.status || current.message != want.message
}

/// Upstream `generateAPIPodStatus`.
pub fn generate_api_pod_status(
    pod: &Pod,
    status: &PodStatus,
    reasons: &WaitingReasons,
    host_ip: &str,
) -> ApiPodStatus {
    let spec = pod.spec.as_ref();
    let init_specs = container::init_containers(pod);
    let app_specs = spec.map(|s| s.containers.as_slice()).unwrap_or(&[]);
    let mut init = container_statuses(init_specs, status, reasons, "PodInitializing");
    for (s, c) in init.iter_mut().zip(init_specs) {
        // A regular init container is ready once it succeeded; a sidecar like an app
        // container (the prober adjusts both with probe results).
        if !container::is_restartable_init_container(c) {
            s.ready = is_terminated(s).is_some_and(|t| t.exit_code == 0);
        }
    }
    let app = container_statuses(
        app_specs,
        status,
        reasons,
        // Upstream `convertToAPIContainerStatuses(…, hasInitContainers)`: an app container
        // not created yet waits `PodInitializing` in any pod with init containers.
        if init_specs.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        },
    );
    let ephemeral_specs = container::ephemeral_containers(pod);
    let mut ephemeral = container_statuses(&ephemeral_specs, status, reasons, "ContainerCreating");
    for s in &mut ephemeral {
        // Ephemeral containers are never ready (upstream: no probes, not serving).
        s.ready = false;
    }
    let phase = get_phase(pod, &init, &app);
    let ips: Vec<String> = if container::is_host_network_pod(pod) {
        vec![host_ip.to_string()]
    } else {
        status.ips.clone()
    };
    let mut out = ApiPodStatus {
        phase: Some(phase),
        conditions: Some(vec![condition("PodScheduled", true, None)]),
        host_ip: Some(host_ip.to_string()),
        host_ips: Some(vec![HostIP {
            ip: host_ip.to_string(),
        }]),
        pod_ip: ips.first().cloned(),
        pod_ips: (!ips.is_empty()).then(|| ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect()),
        container_statuses: Some(app),
        init_container_statuses: (!init_specs.is_empty()).then_some(init),
        ephemeral_container_statuses: (!ephemeral_specs.is_empty()).then_some(ephemeral),
        qos_class: Some(get_pod_qos(pod).into()),
        ..Default::default()
    };
    set_pod_conditions(pod, &mut out);
    out
}

/// The status manager (upstream `status.Manager` without the API server side): newest status
/// per pod UID, keeping the first start time.
#[derive(Debug, Clone, Default)]
pub struct StatusManager {
    statuses: Arc<RwLock<HashMap<String, ApiPodStatus>>>,
    /// Signalled when a status changed (upstream `podStatusChannel`): API-server mode writes
    /// at once instead of waiting for its periodic batch.
    changed: Arc<tokio::sync::Notify>,
}

impl StatusManager {
    /// Record `status` for `uid` (upstream `SetPodStatus`); the start time is set once.
    pub fn set_pod_status(&self, uid: &str, mut status: ApiPodStatus) {
        let mut m = self.statuses.write();
        let start = m
            .get(uid)
            .and_then(|s| s.start_time.clone())
            .unwrap_or_else(now);
        status.start_time = Some(start);
        // Keep condition transition times stable while the status does not change.
        if let Some(old) = m.get(uid) {
            let now = now();
            for c in status.conditions.iter_mut().flatten() {
                let prev = old.conditions.iter().flatten().find(|o| o.type_ == c.type_);
                c.last_transition_time = match prev {
                    Some(p) if p.status == c.status => p.last_transition_time.clone(),
                    _ => Some(now.clone()),
                };
            }
        } else {
            for c in status.conditions.iter_mut().flatten() {
                c.last_transition_time = status.start_time.clone();
            }
        }
        if m.get(uid) != Some(&status) {
            self.changed.notify_one();
        }
        m.insert(uid.to_string(), status);
    }

    /// Resolves when a status changed since the last call.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// The status of `uid`.
    pub fn get_pod_status(&self, uid: &str) -> Option<ApiPodStatus> {
        self.statuses.read().get(uid).cloned()
    }

    /// Forget `uid`.
    pub fn remove(&self, uid: &str) {
        self.statuses.write().remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::ContainerID;
    use k8s_openapi::api::core::v1::PodSpec;

    fn pod(policy: &str) -> Pod {
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                containers: vec![
                    Container {
                        name: "a".into(),
                        image: Some("busybox".into()),
                        ..Default::default()
                    },
                    Container {
                        name: "b".into(),
                        image: Some("busybox".into()),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn cs(name: &str, state: ContainerState, exit: i32) -> container::ContainerStatus {
        container::ContainerStatus {
            id: ContainerID::new("containerd", format!("id-{name}")),
            name: name.into(),
            state,
            exit_code: exit,
            ..Default::default()
        }
    }

    fn condition_of<'a>(s: &'a ApiPodStatus, type_: &str) -> &'a PodCondition {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == type_)
            .expect("condition")
    }

    fn with_init(policy: &str, init: &[&str]) -> Pod {
        let mut p = pod(policy);
        if let Some(spec) = p.spec.as_mut() {
            spec.init_containers = Some(
                init.iter()
                    .map(|n| Container {
                        name: n.to_string(),
                        ..Default::default()
                    })
                    .collect(),
            );
        }
        p
    }

    #[test]
    fn a_failed_init_container_leaves_the_pod_not_initialized_with_upstreams_message() {
        // init1 failed and waits to restart, init2 never ran: both are incomplete.
        let p = with_init("Always", &["init1", "init2"]);
        let st = PodStatus {
            container_statuses: vec![cs("init1", ContainerState::Exited, 1)],
            ..Default::default()
        };
        let s = generate_api_pod_status(&p, &st, &WaitingReasons::new(), "h");
        let init = condition_of(&s, "Initialized");
        assert_eq!(init.status, "False");
        assert_eq!(init.reason.as_deref(), Some("ContainersNotInitialized"));
        assert_eq!(
            init.message.as_deref(),
            Some("containers with incomplete status: [init1 init2]")
        );
        let ready = condition_of(&s, "ContainersReady");
        assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some("containers with unready status: [a b]")
        );
        assert_eq!(condition_of(&s, "Ready").message, ready.message);
        // init1 succeeded, init2 failed: only init2 is incomplete.
        let st = PodStatus {
            container_statuses: vec![
                cs("init1", ContainerState::Exited, 0),
                cs("init2", ContainerState::Exited, 1),
            ],
            ..Default::default()
        };
        let s = generate_api_pod_status(
            &with_init("Never", &["init1", "init2"]),
            &st,
            &WaitingReasons::new(),
            "h",
        );
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(
            condition_of(&s, "Initialized").message.as_deref(),
            Some("containers with incomplete status: [init2]")
        );
    }

    #[test]
    fn a_succeeded_pod_is_completed_not_ready() {
        let st = PodStatus {
            container_statuses: vec![
                cs("init1", ContainerState::Exited, 0),
                cs("a", ContainerState::Exited, 0),
                cs("b", ContainerState::Exited, 0),
            ],
            ..Default::default()
        };
        let s = generate_api_pod_status(
            &with_init("Never", &["init1"]),
            &st,
            &WaitingReasons::new(),
            "h",
        );
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
        let init = condition_of(&s, "Initialized");
        assert_eq!(
            (init.status.as_str(), init.reason.as_deref()),
            ("True", Some("PodCompleted"))
        );
        for t in ["ContainersReady", "Ready"] {
            let c = condition_of(&s, t);
            assert_eq!(
                (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
                ("False", Some("PodCompleted"), None),
                "{t}"
            );
        }
    }

    fn gated(conditions: &[(&str, &str)]) -> Pod {
        let mut p = pod("Always");
        if let Some(spec) = p.spec.as_mut() {
            spec.readiness_gates = Some(
                ["k8s.io/test-condition1", "k8s.io/test-condition2"]
                    .iter()
                    .map(|t| k8s_openapi::api::core::v1::PodReadinessGate {
                        condition_type: t.to_string(),
                    })
                    .collect(),
            );
        }
        p.status = Some(ApiPodStatus {
            conditions: Some(
                conditions
                    .iter()
                    .map(|(t, st)| PodCondition {
                        type_: t.to_string(),
                        status: st.to_string(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        });
        p
    }

    #[test]
    fn ready_waits_for_every_readiness_gate() {
        let st = PodStatus {
            container_statuses: vec![
                cs("a", ContainerState::Running, 0),
                cs("b", ContainerState::Running, 0),
            ],
            ..Default::default()
        };
        let status = |p: &Pod| generate_api_pod_status(p, &st, &WaitingReasons::new(), "h");
        let s = status(&gated(&[]));
        assert_eq!(condition_of(&s, "ContainersReady").status, "True");
        let ready = condition_of(&s, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("ReadinessGatesNotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some(
                "corresponding condition of pod readiness gate \"k8s.io/test-condition1\" does not exist., corresponding condition of pod readiness gate \"k8s.io/test-condition2\" does not exist."
            )
        );
        let s = status(&gated(&[
            ("k8s.io/test-condition1", "True"),
            ("k8s.io/test-condition2", "False"),
        ]));
        assert_eq!(
            condition_of(&s, "Ready").message.as_deref(),
            Some(
                "the status of pod readiness gate \"k8s.io/test-condition2\" is not \"True\", but False"
            )
        );
        let s = status(&gated(&[
            ("k8s.io/test-condition1", "True"),
            ("k8s.io/test-condition2", "True"),
        ]));
        assert_eq!(condition_of(&s, "Ready").status, "True");
    }

    #[test]
    fn a_gate_set_on_the_api_pod_asks_for_a_sync() {
        let st = PodStatus {
            container_statuses: vec![
                cs("a", ContainerState::Running, 0),
                cs("b", ContainerState::Running, 0),
            ],
            ..Default::default()
        };
        // The kubelet wrote Ready False (gates missing); then both gates were set True.
        let written = generate_api_pod_status(&gated(&[]), &st, &WaitingReasons::new(), "h");
        let mut p = gated(&[
            ("k8s.io/test-condition1", "True"),
            ("k8s.io/test-condition2", "True"),
        ]);
        if let Some(api) = p.status.as_mut() {
            api.container_statuses = written.container_statuses.clone();
            api.conditions
                .get_or_insert_with(Vec::new)
                .extend(written.conditions.clone().unwrap_or_default());
        }
        assert!(need_to_reconcile_pod_readiness(&p));
        // Once Ready says what the gates give, nothing more to do.
        let again = generate_api_pod_status(&p, &st, &WaitingReasons::new(), "h");
        if let Some(api) = p.status.as_mut() {
            let conditions = api.conditions.get_or_insert_with(Vec::new);
            conditions.retain(|c| c.type_.starts_with("k8s.io/"));
            conditions.extend(again.conditions.unwrap_or_default());
        }
        assert!(!need_to_reconcile_pod_readiness(&p));
        // A pod without gates never asks.
        assert!(!need_to_reconcile_pod_readiness(&pod("Always")));
    }

    #[test]
    fn running_and_ready() {
        let st = PodStatus {
            ips: vec!["10.88.0.5".into()],
            container_statuses: vec![
                cs("a", ContainerState::Running, 0),
                cs("b", ContainerState::Running, 0),
            ],
            ..Default::default()
        };
        let s = generate_api_pod_status(&pod("Always"), &st, &WaitingReasons::new(), "1.2.3.4");
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.88.0.5"));
        let ready = s
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.status.clone());
        assert_eq!(ready.as_deref(), Some("True"));
        let cid = s
            .container_statuses
            .as_ref()
            .and_then(|v| v[0].container_id.clone());
        assert_eq!(cid.as_deref(), Some("containerd://id-a"));
    }

    #[test]
    fn pending_and_crashloop() {
        let st = PodStatus {
            container_statuses: vec![cs("a", ContainerState::Running, 0)],
            ..Default::default()
        };
        let s = generate_api_pod_status(&pod("Always"), &st, &WaitingReasons::new(), "h");
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let st = PodStatus {
            container_statuses: vec![
                cs("a", ContainerState::Exited, 1),
                cs("b", ContainerState::Running, 0),
            ],
            ..Default::default()
        };
        let reasons = WaitingReasons::from([(
            "a".to_string(),
            ("CrashLoopBackOff".to_string(), "back-off".to_string()),
        )]);
        let s = generate_api_pod_status(&pod("Always"), &st, &reasons, "h");
        assert_eq!(s.phase.as_deref(), Some("Running"));
        let a = &s.container_statuses.as_ref().expect("statuses")[0];
        let w = a
            .state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .expect("waiting");
        assert_eq!(w.reason.as_deref(), Some("CrashLoopBackOff"));
        assert!(
            a.last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .is_some()
        );
    }

    #[test]
    fn qos() {
        use k8s_openapi::api::core::v1::ResourceRequirements;
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let mut p = pod("Always");
        assert_eq!(get_pod_qos(&p), "BestEffort");
        let limits = std::collections::BTreeMap::from([
            ("cpu".to_string(), Quantity("1".into())),
            ("memory".to_string(), Quantity("64Mi".into())),
        ]);
        if let Some(spec) = p.spec.as_mut() {
            for c in &mut spec.containers {
                c.resources = Some(ResourceRequirements {
                    limits: Some(limits.clone()),
                    ..Default::default()
                });
            }
        }
        assert_eq!(get_pod_qos(&p), "Guaranteed");
        if let Some(spec) = p.spec.as_mut() {
            spec.containers[1].resources = None;
        }
        assert_eq!(get_pod_qos(&p), "Burstable");
    }

    fn sidecar_pod(policy: &str) -> Pod {
        let mut p = pod(policy);
        if let Some(s) = p.spec.as_mut() {
            s.containers.truncate(1);
            s.init_containers = Some(vec![Container {
                name: "proxy".into(),
                image: Some("busybox".into()),
                restart_policy: Some("Always".into()),
                readiness_probe: Some(Default::default()),
                ..Default::default()
            }]);
            s.ephemeral_containers = Some(vec![k8s_openapi::api::core::v1::EphemeralContainer {
                name: "debug".into(),
                image: Some("busybox".into()),
                ..Default::default()
            }]);
        }
        p
    }

    fn cond(s: &ApiPodStatus, t: &str) -> Option<String> {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == t)
            .map(|c| c.status.clone())
    }

    #[test]
    fn sidecars_count_for_initialized_ready_and_phase() {
        let p = sidecar_pod("Never");
        // The sidecar runs, the app not yet: initialized, Pending.
        let st = PodStatus {
            container_statuses: vec![cs("proxy", ContainerState::Running, 0)],
            ..Default::default()
        };
        let s = generate_api_pod_status(&p, &st, &WaitingReasons::new(), "h");
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(cond(&s, "Initialized").as_deref(), Some("True"));
        let init = &s.init_container_statuses.as_ref().expect("init")[0];
        assert_eq!(init.started, Some(true));
        // Both run; the sidecar's readiness probe has not succeeded: Running, not Ready.
        let st = PodStatus {
            container_statuses: vec![
                cs("a", ContainerState::Running, 0),
                cs("proxy", ContainerState::Running, 0),
                cs("debug", ContainerState::Running, 0),
            ],
            ..Default::default()
        };
        let mut s = generate_api_pod_status(&p, &st, &WaitingReasons::new(), "h");
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s, "Ready").as_deref(), Some("True"));
        // The sidecar not ready (its readiness probe, applied by the prober): not Ready.
        if let Some(init) = s.init_container_statuses.as_mut() {
            init[0].ready = false;
        }
        set_pod_conditions(&p, &mut s);
        assert_eq!(cond(&s, "Ready").as_deref(), Some("False"));
        assert_eq!(cond(&s, "ContainersReady").as_deref(), Some("False"));
        // The ephemeral container is reported, never ready.
        let eph = s.ephemeral_container_statuses.as_ref().expect("ephemeral");
        assert_eq!(eph[0].name, "debug");
        assert!(eph[0].state.as_ref().is_some_and(|s| s.running.is_some()));
        assert!(!eph[0].ready);
        // The app completed, the sidecar still runs: Running until it is stopped, then
        // Succeeded (its exit code does not count).
        let st = PodStatus {
            container_statuses: vec![
                cs("a", ContainerState::Exited, 0),
                cs("proxy", ContainerState::Running, 0),
            ],
            ..Default::default()
        };
        let s = generate_api_pod_status(&p, &st, &WaitingReasons::new(), "h");
        assert_eq!(s.phase.as_deref(), Some("Running"));
        let st = PodStatus {
            container_statuses: vec![
                cs("a", ContainerState::Exited, 0),
                cs("proxy", ContainerState::Exited, 137),
            ],
            ..Default::default()
        };
        let s = generate_api_pod_status(&p, &st, &WaitingReasons::new(), "h");
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
    }

    #[test]
    fn succeeded_and_failed() {
        let done = PodStatus {
            container_statuses: vec![
                cs("a", ContainerState::Exited, 0),
                cs("b", ContainerState::Exited, 0),
            ],
            ..Default::default()
        };
        let s = generate_api_pod_status(&pod("Never"), &done, &WaitingReasons::new(), "h");
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
        let failed = PodStatus {
            container_statuses: vec![
                cs("a", ContainerState::Exited, 0),
                cs("b", ContainerState::Exited, 2),
            ],
            ..Default::default()
        };
        let s = generate_api_pod_status(&pod("Never"), &failed, &WaitingReasons::new(), "h");
        assert_eq!(s.phase.as_deref(), Some("Failed"));
    }
}
