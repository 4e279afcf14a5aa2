//! Container probes (upstream `pkg/kubelet/prober`: `prober_manager.go`, `worker.go`,
//! `prober.go`, `results`). This module owns one tokio task per (pod, container, probe type)
//! that runs the container's liveness, readiness or startup probe every `periodSeconds`
//! (exec through CRI `ExecSync`, `httpGet`, `tcpSocket`), applies the success/failure
//! thresholds, and publishes results per container id in [`ProbeResults`]. A changed result
//! is sent to the sync loop, which re-syncs the pod: failed liveness/startup probes make
//! `computePodActions` restart the container, readiness feeds the `Ready` condition. App
//! containers and sidecars (init containers with `restartPolicy: Always`) are probed.

use std::collections::HashMap;

use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::container::{ContainerState, pod_full_name};
use crate::kuberuntime::KubeGenericRuntimeManager;
use crate::metrics::prober::{ProbeRecorder, ProbeTarget};
use crate::pleg::PodCache;
use crate::probe::{ProbeResults, ProbeType, run_probe};

fn probe_of(c: &Container, kind: ProbeType) -> Option<&Probe> {
    match kind {
        ProbeType::Liveness => c.liveness_probe.as_ref(),
        ProbeType::Readiness => c.readiness_probe.as_ref(),
        ProbeType::Startup => c.startup_probe.as_ref(),
    }
}

/// Upstream `UpdatePodStatus` for one container status: a running container with a readiness
/// probe is ready only once it succeeded; with a startup probe it is started (and can be
/// ready) only once that succeeded.
fn apply_probe_results(
    cs: &mut k8s_openapi::api::core::v1::ContainerStatus,
    spec: &Container,
    results: &ProbeResults,
) {
    let running = cs.state.as_ref().is_some_and(|s| s.running.is_some());
    let id = cs
        .container_id
        .as_deref()
        .and_then(|i| i.split_once("://"))
        .map(|(_, id)| id)
        .unwrap_or_default();
    let started = spec.startup_probe.is_none() || results.get(ProbeType::Startup, id) == Some(true);
    cs.started = Some(running && started);
    let ready_probe =
        spec.readiness_probe.is_none() || results.get(ProbeType::Readiness, id) == Some(true);
    cs.ready = running && started && ready_probe;
}

/// Apply readiness/startup results to an API status (upstream `UpdatePodStatus`), for the app
/// containers and the sidecars (regular init containers are ready once they succeeded), then
/// recompute the `Initialized`, `ContainersReady` and `Ready` conditions.
pub fn update_pod_status(
    pod: &Pod,
    status: &mut k8s_openapi::api::core::v1::PodStatus,
    results: &ProbeResults,
) {
    let specs = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[]);
    for cs in status.container_statuses.iter_mut().flatten() {
        if let Some(spec) = specs.iter().find(|c| c.name == cs.name) {
            apply_probe_results(cs, spec, results);
        }
    }
    let inits = crate::container::init_containers(pod);
    for cs in status.init_container_statuses.iter_mut().flatten() {
        if let Some(spec) = inits
            .iter()
            .find(|c| c.name == cs.name && crate::container::is_restartable_init_container(c))
        {
            apply_probe_results(cs, spec, results);
        }
    }
    crate::status::set_pod_conditions(pod, status);
}

/// The containers of `pod` that are probed: app containers and sidecars.
fn probed_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    spec.into_iter().flat_map(|s| {
        s.containers.iter().chain(
            s.init_containers
                .iter()
                .flatten()
                .filter(|c| crate::container::is_restartable_init_container(c)),
        )
    })
}

struct ProbeWorker {
    uid: String,
    pod: Pod,
    container: Container,
    kind: ProbeType,
    runtime: KubeGenericRuntimeManager,
    cache: PodCache,
    results: ProbeResults,
    updates: mpsc::UnboundedSender<String>,
    /// `prober_probe_total`, `prober_probe_duration_seconds` (`/metrics/probes`).
    metrics: ProbeRecorder,
}

impl ProbeWorker {
    fn target(&self) -> ProbeTarget {
        ProbeTarget {
            probe_type: match self.kind {
                ProbeType::Liveness => "Liveness",
                ProbeType::Readiness => "Readiness",
                ProbeType::Startup => "Startup",
            },
            container: self.container.name.clone(),
            pod: self.pod.metadata.name.clone().unwrap_or_default(),
            namespace: self.pod.metadata.namespace.clone().unwrap_or_default(),
            pod_uid: self.uid.clone(),
        }
    }

    /// Upstream `worker.run` / `doProbe`.
    async fn run(self, cancel: CancellationToken) {
        let Some(probe) = probe_of(&self.container, self.kind).cloned() else {
            return;
        };
        let period = Duration::from_secs(
            u64::try_from(probe.period_seconds.unwrap_or(10).max(1)).unwrap_or(10),
        );
        let success_threshold = probe.success_threshold.unwrap_or(1).max(1);
        let failure_threshold = probe.failure_threshold.unwrap_or(3).max(1);
        let initial_delay = i64::from(probe.initial_delay_seconds.unwrap_or(0));
        let (mut current_id, mut successes, mut failures) = (String::new(), 0, 0);
        // Host-network pods are probed on the node's address (their podIP upstream).
        let host_network = crate::container::is_host_network_pod(&self.pod);
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let target = self.target();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => {
                    // Upstream `worker.stop`: the worker's series go with it.
                    self.metrics.forget(&target);
                    return;
                }
                _ = tick.tick() => {}
            }
            let Some((status, _)) = self.cache.get(&self.uid) else {
                continue;
            };
            let Some(cs) = status
                .find_container_status_by_name(&self.container.name)
                .filter(|c| c.state == ContainerState::Running)
                .cloned()
            else {
                continue;
            };
            if cs.id.id != current_id {
                // A new container instance: start over (upstream: liveness starts as success,
                // readiness as failure, startup unknown).
                if !current_id.is_empty() {
                    self.results.remove(&current_id);
                }
                current_id.clone_from(&cs.id.id);
                successes = 0;
                failures = 0;
                match self.kind {
                    ProbeType::Liveness => self.results.set(self.kind, &current_id, true),
                    ProbeType::Readiness => self.results.set(self.kind, &current_id, false),
                    ProbeType::Startup => false,
                };
            }
            let started_for = cs
                .started_at
                .map(|t| (Utc::now() - t).num_seconds())
                .unwrap_or(0);
            if started_for < initial_delay {
                continue;
            }
            if self.kind == ProbeType::Startup
                && self.results.get(ProbeType::Startup, &current_id) == Some(true)
            {
                continue;
            }
            if self.kind != ProbeType::Startup
                && self.container.startup_probe.is_some()
                && self.results.get(ProbeType::Startup, &current_id) != Some(true)
            {
                continue;
            }
            let pod_ip = if host_network {
                self.runtime.node_ip().get()
            } else {
                status.ips.first().cloned().unwrap_or_default()
            };
            let began = std::time::Instant::now();
            let outcome =
                run_probe(&self.runtime, &probe, &self.container, &current_id, &pod_ip).await;
            let result = if outcome.is_ok() {
                "successful"
            } else {
                "failed"
            };
            self.metrics.observe(&target, result, began.elapsed());
            let result = match outcome {
                Ok(()) => {
                    successes += 1;
                    failures = 0;
                    (successes >= success_threshold).then_some(true)
                }
                Err(e) => {
                    tracing::debug!(error = %e, "probe failed");
                    failures += 1;
                    successes = 0;
                    let kind = match self.kind {
                        ProbeType::Liveness => "Liveness",
                        ProbeType::Readiness => "Readiness",
                        ProbeType::Startup => "Startup",
                    };
                    self.runtime.events().event(
                        &self.pod,
                        Some(&self.container.name),
                        crate::events::EventType::Warning,
                        "Unhealthy",
                        format!("{kind} probe failed: {e}"),
                    );
                    (failures >= failure_threshold).then_some(false)
                }
            };
            if let Some(ok) = result
                && self.results.set(self.kind, &current_id, ok)
            {
                tracing::info!(ok, "probe result changed");
                if self.updates.send(self.uid.clone()).is_err() {
                    return;
                }
            }
        }
    }
}

/// The prober manager (upstream `prober.Manager`): starts and stops probe workers per pod.
#[derive(Debug)]
pub struct ProbeManager {
    runtime: KubeGenericRuntimeManager,
    cache: PodCache,
    results: ProbeResults,
    updates: mpsc::UnboundedSender<String>,
    workers: HashMap<(String, String, ProbeType), CancellationToken>,
    cancel: CancellationToken,
}

impl ProbeManager {
    /// A manager whose workers report changed results (pod UIDs) on `updates`.
    pub fn new(
        runtime: KubeGenericRuntimeManager,
        cache: PodCache,
        results: ProbeResults,
        updates: mpsc::UnboundedSender<String>,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            runtime,
            cache,
            results,
            updates,
            workers: HashMap::new(),
            cancel,
        }
    }

    /// Start workers for the pod's probes (upstream `AddPod`); existing ones are kept unless
    /// the container's spec changed.
    pub fn add_pod(&mut self, pod: &Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        for c in probed_containers(pod) {
            for kind in [
                ProbeType::Liveness,
                ProbeType::Readiness,
                ProbeType::Startup,
            ] {
                let key = (uid.clone(), c.name.clone(), kind);
                if probe_of(c, kind).is_none() {
                    if let Some(t) = self.workers.remove(&key) {
                        t.cancel();
                    }
                    continue;
                }
                if let Some(t) = self.workers.remove(&key) {
                    // Restart the worker so it probes with the current spec.
                    t.cancel();
                }
                let token = self.cancel.child_token();
                let w = ProbeWorker {
                    uid: uid.clone(),
                    pod: pod.clone(),
                    container: c.clone(),
                    kind,
                    runtime: self.runtime.clone(),
                    cache: self.cache.clone(),
                    results: self.results.clone(),
                    updates: self.updates.clone(),
                    metrics: self.runtime.metrics().prober.recorder(),
                };
                let span = tracing::info_span!(
                    "probe_worker",
                    pod = %pod_full_name(&w.pod),
                    container = %w.container.name,
                    probe = ?w.kind
                );
                tokio::spawn(tracing::Instrument::instrument(w.run(token.clone()), span));
                self.workers.insert(key, token);
            }
        }
    }

    /// Stop the pod's workers (upstream `RemovePod`).
    pub fn remove_pod(&mut self, uid: &str) {
        self.workers.retain(|(u, _, _), t| {
            if u == uid {
                t.cancel();
                false
            } else {
                true
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::PodStatus;
    use k8s_openapi::api::core::v1::{ExecAction, PodSpec};

    #[test]
    fn a_sidecars_readiness_gates_ready() {
        let probe = Probe::default();
        let pod = Pod {
            spec: Some(PodSpec {
                init_containers: Some(vec![Container {
                    name: "proxy".into(),
                    restart_policy: Some("Always".into()),
                    readiness_probe: Some(probe.clone()),
                    startup_probe: Some(probe),
                    ..Default::default()
                }]),
                containers: vec![Container {
                    name: "a".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let cs = |name: &str| crate::container::ContainerStatus {
            id: crate::container::ContainerID::new("containerd", format!("id-{name}")),
            name: name.into(),
            state: ContainerState::Running,
            ..Default::default()
        };
        let st = PodStatus {
            container_statuses: vec![cs("a"), cs("proxy")],
            ..Default::default()
        };
        let mut api = crate::status::generate_api_pod_status(
            &pod,
            &st,
            &crate::status::WaitingReasons::new(),
            "h",
        );
        let ready = |api: &k8s_openapi::api::core::v1::PodStatus| {
            let c = api.conditions.iter().flatten().find(|c| c.type_ == "Ready");
            c.map(|c| c.status.clone())
        };
        let results = ProbeResults::default();
        update_pod_status(&pod, &mut api, &results);
        let proxy = &api.init_container_statuses.as_ref().expect("init")[0];
        assert_eq!((proxy.started, proxy.ready), (Some(false), false));
        assert_eq!(ready(&api).as_deref(), Some("False"));
        results.set(ProbeType::Startup, "id-proxy", true);
        update_pod_status(&pod, &mut api, &results);
        let proxy = &api.init_container_statuses.as_ref().expect("init")[0];
        assert_eq!((proxy.started, proxy.ready), (Some(true), false));
        results.set(ProbeType::Readiness, "id-proxy", true);
        update_pod_status(&pod, &mut api, &results);
        assert!(api.init_container_statuses.as_ref().expect("init")[0].ready);
        assert_eq!(ready(&api).as_deref(), Some("True"));
    }

    #[test]
    fn readiness_gates_ready() {
        let probe = Probe {
            exec: Some(ExecAction {
                command: Some(vec!["true".into()]),
            }),
            ..Default::default()
        };
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "a".into(),
                    readiness_probe: Some(probe),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let st = PodStatus {
            container_statuses: vec![crate::container::ContainerStatus {
                id: crate::container::ContainerID::new("containerd", "x1"),
                name: "a".into(),
                state: ContainerState::Running,
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut api = crate::status::generate_api_pod_status(
            &pod,
            &st,
            &crate::status::WaitingReasons::new(),
            "h",
        );
        let results = ProbeResults::default();
        update_pod_status(&pod, &mut api, &results);
        let ready = |api: &k8s_openapi::api::core::v1::PodStatus| {
            api.conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "Ready")
                .map(|c| c.status.clone())
        };
        assert_eq!(ready(&api).as_deref(), Some("False"));
        results.set(ProbeType::Readiness, "x1", true);
        update_pod_status(&pod, &mut api, &results);
        assert_eq!(ready(&api).as_deref(), Some("True"));
        results.set(ProbeType::Liveness, "x1", false);
        let failures = crate::kuberuntime::pod_actions::probe_failures(&results, &st);
        assert_eq!(failures.liveness.len(), 1);
    }
}

#[cfg(test)]
mod metrics_tests {
    //! The probe workers' `/metrics/probes` series on the fake runtime.

    use super::*;
    use k8s_openapi::api::core::v1::ExecAction;

    fn series(text: &str, name: &str, result: &str) -> Option<f64> {
        let prefix = format!(
            "{name}{{probe_type=\"Readiness\",result=\"{result}\",container=\"app\",pod=\"m1-node1\",namespace=\"default\",pod_uid=\"m1\"}} "
        );
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.parse().ok())
    }

    #[tokio::test(start_paused = true)]
    async fn each_probe_run_is_counted_by_result_and_timed_until_its_worker_stops() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (fake, runtime) = KubeGenericRuntimeManager::fake(dir.path()).await;
        let metrics = std::sync::Arc::new(crate::metrics::Metrics::new("node1"));
        let runtime = runtime.with_metrics(metrics.clone());
        let mut pod =
            crate::kuberuntime::manager::testing::run_pod(&runtime, "m1", "busybox:1", "Always")
                .await;
        if let Some(c) = pod.spec.as_mut().and_then(|s| s.containers.first_mut()) {
            c.readiness_probe = Some(Probe {
                exec: Some(ExecAction {
                    command: Some(vec!["true".into()]),
                }),
                period_seconds: Some(1),
                ..Default::default()
            });
        }
        // The first run succeeds, the second fails (exit code 1), the rest succeed.
        fake.push_exec_result(cri_proto::runtime::v1::ExecSyncResponse::default());
        fake.push_exec_result(cri_proto::runtime::v1::ExecSyncResponse {
            exit_code: 1,
            ..Default::default()
        });
        let cache = PodCache::default();
        let status = runtime
            .get_pod_status("m1", "m1-node1", "default")
            .await
            .expect("status");
        cache.set("m1", status, std::time::Instant::now());
        let (tx, _rx) = mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        let mut manager =
            ProbeManager::new(runtime, cache, ProbeResults::default(), tx, cancel.clone());
        manager.add_pod(&pod);
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let (_, text) = metrics.encode_probes("");
        assert_eq!(
            series(&text, "prober_probe_total", "successful"),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            series(&text, "prober_probe_total", "failed"),
            Some(1.0),
            "{text}"
        );
        assert!(
            text.contains(
                "prober_probe_duration_seconds_count{probe_type=\"Readiness\",container=\"app\",pod=\"m1-node1\",namespace=\"default\"} 2"
            ),
            "{text}"
        );
        manager.remove_pod("m1");
        tokio::time::sleep(Duration::from_millis(10)).await;
        let (_, text) = metrics.encode_probes("");
        assert!(!text.contains("pod_uid=\"m1\""), "{text}");
        cancel.cancel();
    }
}
