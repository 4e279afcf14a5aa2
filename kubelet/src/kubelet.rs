//! The kubelet's main loop (upstream `pkg/kubelet/kubelet.go`: `Run`, `syncLoop`,
//! `syncLoopIteration`, `HandlePod*`, `HandlePodCleanups`). This module owns wiring the pod
//! sources into [`PodConfig`], the pod manager (UID -> desired pod), dispatching work to the
//! [`PodWorkers`] on config updates, PLEG events and the periodic work queue, and housekeeping
//! that terminates pods that are no longer wanted, including pods found on the runtime after a
//! restart that no source knows. State shared with the HTTP server lives in [`KubeletShared`].
//!
//! Why ~800 lines: it is upstream's `kubelet.go` loop — construction wiring every manager, the
//! `syncLoopIteration` handlers and admission — whose parts share the loop's state; the
//! admission handlers are the first candidates to move out (`kubelet/admission.rs`) when it grows.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use parking_lot::RwLock;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::file::FileSource;
use crate::config::http::HttpSource;
use crate::config::podconfig::PodConfig;
use crate::config::{PodOperation, PodUpdate};
use crate::host::KubeletShared;
use crate::kubeletconfig::KubeletConfig;
use crate::kuberuntime::KubeGenericRuntimeManager;
use crate::metrics::Metrics;
use crate::pleg::{GenericPleg, PlegState, PodCache, PodLifecycleEvent, PodLifecycleEventType};
use crate::pod_workers::{PodWork, PodWorkers, SyncContext, WorkerDone};
use crate::prober::ProbeManager;
use crate::status::StatusManager;
use crate::types::{FILE_SOURCE, HTTP_SOURCE, owned_by_node};

/// Upstream `housekeepingPeriod`.
pub const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(2);
/// How often the work queue is checked (upstream `syncCh` ticker).
pub const SYNC_TICK: Duration = Duration::from_secs(1);
/// Sources must have been ready this long before orphans are killed (the first updates may
/// still be in flight).
pub const SOURCES_SETTLE: Duration = Duration::from_secs(2);

/// The kubelet (upstream `Kubelet`).
pub struct Kubelet {
    config: KubeletConfig,
    runtime: KubeGenericRuntimeManager,
    shared: Arc<KubeletShared>,
    /// The API client of API-server mode, when built before [`Self::run`] (the binary builds
    /// it at start-up so that an unusable kubeconfig stops it there).
    api_client: Option<kube::Client>,
}

impl std::fmt::Debug for Kubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubelet")
            .field("config", &self.config)
            .field("runtime", &self.runtime)
            .field("shared", &self.shared)
            .field("api_client", &self.api_client.is_some())
            .finish()
    }
}

impl Kubelet {
    /// A kubelet with `config` talking to `runtime`.
    pub fn new(
        config: KubeletConfig,
        runtime: KubeGenericRuntimeManager,
        metrics: Arc<Metrics>,
    ) -> Self {
        let machine = crate::nodestatus::Machine::read(&config.root_dir);
        let max_pods = u32::try_from(config.max_pods).unwrap_or(0);
        let capacity = crate::nodestatus::capacity(&machine, max_pods);
        let mut reserved = config.node_reservation.clone();
        for (k, v) in crate::eviction::hard_eviction_reservation(&config.eviction, &capacity) {
            let e = reserved.entry(k).or_default();
            *e = e.saturating_add(v);
        }
        let allocatable = crate::resource::allocatable(&capacity, &[&reserved]);
        tracing::info!(?capacity, ?allocatable, "node allocatable");
        let mut node_labels = std::collections::BTreeMap::from([
            (
                "kubernetes.io/hostname".to_string(),
                config.node_name.clone(),
            ),
            ("kubernetes.io/os".to_string(), "linux".to_string()),
            (
                "kubernetes.io/arch".to_string(),
                machine.architecture.clone(),
            ),
            ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
            (
                "beta.kubernetes.io/arch".to_string(),
                machine.architecture.clone(),
            ),
        ]);
        node_labels.extend(config.node_labels.clone());
        let cadvisor = Arc::new(crate::cadvisor::CadvisorState::new(
            crate::cadvisor::CGROUP_ROOT,
        ));
        cadvisor.prime_node();
        let shared = Arc::new(KubeletShared {
            node_labels,
            node_taints: config
                .api
                .as_ref()
                .map(|a| a.register_with_taints.clone())
                .unwrap_or_default(),
            allocatable,
            reserved,
            pods: RwLock::new(HashMap::new()),
            status: StatusManager::default(),
            metrics,
            pleg: Arc::new(PlegState::default()),
            last_sync_loop: RwLock::new(Instant::now()),
            node_name: config.node_name.clone(),
            terminated: RwLock::new(HashMap::new()),
            runtime: runtime.clone(),
            eviction: Arc::default(),
            evicted: RwLock::new(HashSet::new()),
            shutdown: Arc::default(),
            mirrors: Default::default(),
            stats: crate::stats::StatsProvider::with_housekeeping(Arc::clone(&cadvisor)),
            cadvisor,
            node: Default::default(),
        });
        Self {
            config,
            runtime,
            shared,
            api_client: None,
        }
    }

    /// Use `client` for API-server mode (`config.api`) instead of building one from the
    /// kubeconfig in [`Self::run`].
    pub fn with_api_client(mut self, client: kube::Client) -> Self {
        self.api_client = Some(client);
        self
    }

    /// State shared with the HTTP server.
    pub fn shared(&self) -> Arc<KubeletShared> {
        Arc::clone(&self.shared)
    }

    /// Start sources and PLEG, then run the sync loop until `cancel` fires (upstream `Run`).
    /// Pods are left running on exit.
    pub async fn run(self, cancel: CancellationToken) {
        let (pod_config, mut updates) = PodConfig::new(cancel.child_token());
        if let Some(path) = &self.config.static_pod_path {
            tracing::info!(path = %path.display(), "adding static pod path");
            let (src, _errors) = FileSource::new(
                path.clone(),
                self.config.node_name.clone(),
                self.config.file_check_frequency,
                pod_config.channel(FILE_SOURCE),
            );
            tokio::spawn(src.run(cancel.child_token()));
        }
        if let Some(url) = &self.config.static_pod_url {
            tracing::info!(url = %url, "adding pod URL with HTTP source");
            let (src, _errors) = HttpSource::new(
                url.clone(),
                self.config.static_pod_url_header.clone(),
                self.config.node_name.clone(),
                self.config.http_check_frequency,
                pod_config.channel(HTTP_SOURCE),
            );
            tokio::spawn(src.run(cancel.child_token()));
        }
        let mut api_client = None;
        let mut services = None;
        let mut runtime_classes = None;
        let mut recorder = crate::events::EventRecorder::default();
        if let Some(api) = &self.config.api {
            let client = match self.api_client.clone() {
                Some(c) => Ok(c),
                None => crate::apimode::client_from_kubeconfig(&api.kubeconfig).await,
            };
            match client {
                Ok(client) => {
                    api_client = Some(client.clone());
                    let (events_tx, events_rx) = mpsc::unbounded_channel();
                    recorder = crate::events::EventRecorder::new(events_tx);
                    tokio::spawn(crate::events::run(
                        client.clone(),
                        self.config.node_name.clone(),
                        events_rx,
                        cancel.child_token(),
                    ));
                    tracing::info!(kubeconfig = %api.kubeconfig.display(), "adding API server pod source");
                    let src = crate::config::apiserver::ApiSource::new(
                        client.clone(),
                        self.config.node_name.clone(),
                        pod_config.channel(crate::types::API_SOURCE),
                    )
                    .with_mirrors(self.shared.mirrors.clone());
                    tokio::spawn(src.run(cancel.child_token()));
                    let store = crate::envvars::ServiceStore::default();
                    let watch = crate::config::apiserver::watch_services;
                    tokio::spawn(watch(client.clone(), store.clone(), cancel.child_token()));
                    services = Some(store);
                    runtime_classes = Some(crate::runtimeclass::RuntimeClassManager::start(
                        client.clone(),
                        cancel.child_token(),
                    ));
                    tokio::spawn(crate::nodelister::watch_node(
                        client.clone(),
                        self.config.node_name.clone(),
                        self.shared.node.clone(),
                        cancel.child_token(),
                    ));
                    crate::apimode::spawn(
                        client,
                        api.clone(),
                        Arc::clone(&self.shared),
                        self.config.root_dir.clone(),
                        self.runtime.runtime_version(),
                        cancel.child_token(),
                    );
                }
                Err(e) => tracing::error!(error = %e, "API server mode disabled"),
            }
        }
        let housekeeping = crate::cadvisor::Housekeeping::new(
            Arc::clone(&self.shared.cadvisor),
            Arc::new(crate::host::KubeletInventory::new(
                &self.shared,
                self.config.pod_infra_container_image.clone(),
            )),
        );
        tokio::spawn(housekeeping.run(cancel.child_token()));
        let cache = PodCache::default();
        let probe_results = crate::probe::ProbeResults::default();
        let runtime = self
            .runtime
            .clone()
            .with_probe_results(probe_results.clone())
            .with_events(recorder)
            .with_services(services)
            .with_runtime_classes(runtime_classes);
        let (probe_tx, mut probe_rx) = mpsc::unbounded_channel();
        let probes = ProbeManager::new(
            runtime.clone(),
            cache.clone(),
            probe_results.clone(),
            probe_tx,
            cancel.child_token(),
        );
        let (pleg_tx, mut pleg_rx) = mpsc::channel(1000);
        let pleg_tx_evented = pleg_tx.clone();
        let pleg = GenericPleg::new(
            runtime.clone(),
            pleg_tx,
            cache.clone(),
            Arc::clone(&self.shared.pleg),
            Arc::clone(&self.shared.metrics),
        );
        if self.config.evented_pleg {
            let (evented, period) = crate::pleg::evented::EventedPleg::new(
                runtime.clone(),
                pleg_tx_evented,
                cache.clone(),
            );
            tokio::spawn(evented.run(cancel.child_token()));
            tokio::spawn(pleg.run_with_period(cancel.child_token(), period));
        } else {
            tokio::spawn(pleg.run(cancel.child_token()));
        }
        let log_manager = crate::logs::ContainerLogManager::new(
            runtime.runtime_service().clone(),
            crate::logs::LogRotatePolicy {
                max_size: self.config.container_log_max_size,
                max_files: self.config.container_log_max_files,
            },
            self.config.container_log_monitor_interval,
            self.config.node_name.clone(),
        );
        tokio::spawn(log_manager.run(cancel.child_token()));
        let image_gc = crate::images::ImageGcManager::new(
            runtime.clone(),
            crate::images::ImageGcPolicy {
                high_threshold_percent: self.config.image_gc_high_threshold_percent,
                low_threshold_percent: self.config.image_gc_low_threshold_percent,
                min_age: self.config.image_minimum_gc_age,
                ref_prefix: self.config.image_gc_ref_prefix.clone(),
            },
            self.config.pod_infra_container_image.clone(),
        );
        let container_gc = crate::gc::ContainerGc::new(
            runtime.clone(),
            crate::gc::ContainerGcPolicy {
                min_age: self.config.minimum_container_ttl_duration,
                max_per_pod_container: self.config.max_per_pod_container,
                max_containers: self.config.max_containers,
            },
            self.config.node_name.clone(),
        );
        let (evict_tx, mut evict_rx) = mpsc::unbounded_channel();
        let active_pods = {
            let shared = Arc::clone(&self.shared);
            Arc::new(move || {
                let evicted = shared.evicted.read().clone();
                shared
                    .pods
                    .read()
                    .iter()
                    .filter(|(uid, p)| {
                        !evicted.contains(*uid) && p.metadata.deletion_timestamp.is_none()
                    })
                    .map(|(_, p)| p.clone())
                    .collect()
            })
        };
        let (shutdown_tx, mut shutdown_rx) = mpsc::unbounded_channel();
        if self.config.shutdown.enabled() {
            let pleg = Arc::clone(&self.shared.pleg);
            let manager =
                crate::nodeshutdown::ShutdownManager::new(crate::nodeshutdown::ManagerParts {
                    config: self.config.shutdown,
                    state: Arc::clone(&self.shared.shutdown),
                    pods: active_pods.clone(),
                    running: Arc::new(move |uid: &str| {
                        pleg.runtime_pods()
                            .iter()
                            .any(|p| p.id == uid && p.is_running())
                    }),
                    is_critical: Arc::new(crate::eviction::is_critical),
                    kill: shutdown_tx,
                });
            let cancel = cancel.child_token();
            tokio::spawn(async move {
                let logind = match crate::nodeshutdown::logind::DbusLogind::connect().await {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!(error = %e, "graceful node shutdown is configured but systemd-logind cannot be reached; node shutdown will not be graceful");
                        return;
                    }
                };
                if let Err(e) = manager.run(Arc::new(logind), cancel).await {
                    tracing::error!(error = %e, "failed to start the node shutdown manager");
                }
            });
        }
        let eviction = crate::eviction::EvictionManager::new(crate::eviction::ManagerParts {
            config: self.config.eviction.clone(),
            runtime: runtime.runtime_service().clone(),
            images: runtime.image_service().clone(),
            root_dir: self.config.root_dir.clone(),
            state: Arc::clone(&self.shared.eviction),
            pods: active_pods.clone(),
            image_gc: Arc::new(image_gc.clone()),
            container_gc: Arc::new(container_gc.clone()),
            evict: evict_tx,
        })
        .with_metrics(self.shared.metrics.eviction.clone());
        tokio::spawn(eviction.run(cancel.child_token()));
        tokio::spawn(image_gc.run(self.config.image_gc_period, cancel.child_token()));
        let ctx = Arc::new(SyncContext {
            runtime: runtime.clone(),
            status: self.shared.status.clone(),
            cache,
            pleg: Arc::clone(&self.shared.pleg),
            metrics: Arc::clone(&self.shared.metrics),
            node_ip: runtime.node_ip().clone(),
            sync_frequency: self.config.sync_frequency,
            root_dir: self.config.root_dir.clone(),
            probes: probe_results,
            objects: api_client.map(|c| {
                crate::apiobjects::ObjectManager::new(
                    c,
                    self.config.config_map_and_secret_change_detection_strategy,
                )
            }),
            tokens: Default::default(),
        });
        let (done_tx, mut done_rx) = mpsc::unbounded_channel();
        let workers_cancel = cancel.child_token();
        let mut loop_state = SyncLoop {
            shared: Arc::clone(&self.shared),
            probes,
            workers: PodWorkers::new(ctx, done_tx, workers_cancel.clone()),
            work_queue: HashMap::new(),
            pod_config,
            sources_ready_since: None,
            last_gc: Instant::now(),
            finished: HashMap::new(),
            pod_config_has_api: self.config.api.is_some(),
            container_gc,
            container_gc_period: self.config.container_gc_period,
            orphan_cleanup: Arc::default(),
            max_pods: i64::from(self.config.max_pods),
            sysctls: self.config.sysctls.clone(),
            events: runtime.events().clone(),
            sidecar_containers: self.config.sidecar_containers,
        };
        let mut sync_tick = tokio::time::interval(SYNC_TICK);
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING_PERIOD);
        sync_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tracing::info!(node = %self.config.node_name, "starting kubelet main sync loop");
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                u = updates.recv() => match u {
                    Some(u) => loop_state.handle_update(u),
                    None => break,
                },
                Some(e) = pleg_rx.recv() => loop_state.handle_pleg_event(e),
                Some(d) = done_rx.recv() => loop_state.handle_worker_done(d),
                Some(uid) = probe_rx.recv() => loop_state.handle_probe_update(&uid),
                Some(req) = evict_rx.recv() => loop_state.handle_evict(req),
                Some(req) = shutdown_rx.recv() => loop_state.handle_shutdown_kill(req),
                _ = sync_tick.tick() => loop_state.sync_due_pods(),
                _ = housekeeping.tick() => loop_state.housekeeping(),
            }
            *self.shared.last_sync_loop.write() = Instant::now();
        }
        workers_cancel.cancel();
        tracing::info!("kubelet sync loop stopped; pods are left running");
    }
}

struct SyncLoop {
    shared: Arc<KubeletShared>,
    probes: ProbeManager,
    workers: PodWorkers,
    work_queue: HashMap<String, Instant>,
    pod_config: PodConfig,
    sources_ready_since: Option<Instant>,
    last_gc: Instant,
    /// When the workers of recently terminated pods finished (their containers and sandboxes
    /// removed), until a relist listed the runtime after that.
    finished: HashMap<String, Instant>,
    /// Pods come from an API server too (terminated ones are handed to API-server mode).
    pod_config_has_api: bool,
    container_gc: crate::gc::ContainerGc,
    container_gc_period: Duration,
    /// An orphaned pods' clean-up is running (one at a time).
    orphan_cleanup: Arc<AtomicBool>,
    /// `--max-pods`: admission rejects a pod beyond it (`OutOfpods`).
    max_pods: i64,
    /// The sysctl admit handler's allowlist (`SysctlForbidden`).
    sysctls: crate::sysctl::Allowlist,
    /// Events about pods rejected at admission.
    events: crate::events::EventRecorder,
    /// Feature `SidecarContainers`.
    sidecar_containers: bool,
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

impl SyncLoop {
    fn dispatch(&mut self, pod: Pod, kill: bool, grace_override: Option<i64>) {
        self.workers.update_pod(PodWork {
            pod,
            kill,
            grace_override,
            evict: None,
        });
    }

    fn is_evicted(&self, uid: &str) -> bool {
        self.shared.evicted.read().contains(uid)
    }

    fn set_evicted(&self, uid: &str, on: bool) {
        let mut e = self.shared.evicted.write();
        if on {
            e.insert(uid.to_string());
        } else {
            e.remove(uid);
        }
    }

    /// The eviction manager chose a pod: kill it; it ends Failed / Evicted (upstream
    /// `killPodFunc` with the eviction status function).
    fn handle_evict(&mut self, req: crate::eviction::EvictRequest) {
        let t = crate::pod_workers::Termination::evicted(req.message);
        self.kill_by_kubelet(req.pod, req.grace_seconds, t);
    }

    /// The node shutdown manager wants a pod gone: kill it with the group's grace period; it
    /// ends Failed / `Terminated` (upstream `killPodFunc` with the shutdown status function).
    fn handle_shutdown_kill(&mut self, req: crate::nodeshutdown::ShutdownKill) {
        let t = crate::pod_workers::Termination {
            reason: crate::nodeshutdown::REASON.into(),
            message: crate::nodeshutdown::MESSAGE.into(),
            disruption_target: true,
        };
        self.kill_by_kubelet(req.pod, req.grace_seconds, t);
    }

    /// Upstream `killPodFunc`: the kubelet itself terminates a pod it runs (once), which then
    /// stays Failed with `t`'s reason and message and is never started again.
    fn kill_by_kubelet(
        &mut self,
        pod: Pod,
        grace_seconds: i64,
        t: crate::pod_workers::Termination,
    ) {
        let uid = uid_of(&pod);
        if self.is_evicted(&uid) || self.pod(&uid).is_none() {
            return;
        }
        self.set_evicted(&uid, true);
        self.probes.remove_pod(&uid);
        self.work_queue.remove(&uid);
        let pod = self.pod(&uid).unwrap_or(pod);
        self.workers.update_pod(PodWork {
            pod,
            kill: true,
            grace_override: Some(grace_seconds),
            evict: Some(t),
        });
    }

    /// Upstream's active deadline handler: a running pod past `activeDeadlineSeconds` (since
    /// its start time) is killed with its grace period and ends Failed / `DeadlineExceeded`,
    /// with a Normal event.
    fn kill_pods_past_active_deadline(&mut self) {
        let now = k8s_openapi::jiff::Timestamp::now();
        let past: Vec<Pod> = self
            .shared
            .pods
            .read()
            .values()
            .filter(|p| {
                p.spec
                    .as_ref()
                    .is_some_and(|s| s.active_deadline_seconds.is_some())
            })
            .filter(|p| {
                let uid = uid_of(p);
                let start = self
                    .shared
                    .status
                    .get_pod_status(&uid)
                    .and_then(|s| s.start_time)
                    .or_else(|| p.status.as_ref().and_then(|s| s.start_time.clone()));
                !self.is_evicted(&uid)
                    && !self.workers.is_terminating(&uid)
                    && crate::active_deadline::past_active_deadline(p, start.as_ref(), now)
            })
            .cloned()
            .collect();
        for pod in past {
            let (reason, message) = (
                crate::active_deadline::REASON,
                crate::active_deadline::MESSAGE,
            );
            tracing::info!(pod = %crate::container::pod_full_name(&pod), "pod past its active deadline");
            self.events.event(
                &pod,
                None,
                crate::events::EventType::Normal,
                reason,
                message.to_string(),
            );
            let grace = pod
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(30);
            let t = crate::pod_workers::Termination {
                reason: reason.into(),
                message: message.into(),
                disruption_target: false,
            };
            self.kill_by_kubelet(pod, grace, t);
        }
    }

    /// Upstream `filterOutInactivePods` over the pod manager's pods other than `except`: those
    /// not rejected or evicted, and not terminal unless still terminating.
    fn active_pods(&self, except: &str) -> Vec<Pod> {
        let evicted = self.shared.evicted.read().clone();
        let uids: Vec<String> = self.shared.pods.read().keys().cloned().collect();
        uids.iter()
            .filter(|uid| uid.as_str() != except && !evicted.contains(*uid))
            .filter(|uid| {
                self.workers.is_terminating(uid)
                    || !self
                        .shared
                        .status
                        .get_pod_status(uid)
                        .is_some_and(|s| matches!(s.phase.as_deref(), Some("Succeeded" | "Failed")))
            })
            .filter_map(|uid| self.pod(uid))
            .collect()
    }

    /// Upstream `canAdmitPod`: the shutdown and eviction admit handlers, the sysctl allowlist
    /// (`SysctlForbidden`), then the predicate admit handler: the pod's OS
    /// (`PodOSSelectorNodeLabelDoesNotMatch`, `PodOSNotSupported`), its pod count
    /// (`--max-pods`), CPU and memory requests against allocatable. A
    /// rejected pod never starts and is Failed with reason `NodeShutdown`, `Evicted`, or
    /// `OutOfpods` / `OutOfcpu` / `OutOfmemory` with message "Pod Node didn't have enough
    /// resource: pods, requested: 1, used: N, capacity: M" and a Warning event (upstream
    /// `rejectPod`). Deviation: upstream treats
    /// static pods as critical and first tries to preempt non-critical pods for them.
    fn admit(&mut self, pod: &Pod) -> bool {
        let uid = uid_of(pod);
        if let Err((reason, message)) = self.shared.shutdown.admit() {
            self.reject_pod(pod, reason, message);
            return false;
        }
        let Err(message) = self.shared.eviction.admit(pod) else {
            if let Err((reason, message)) = self.sysctls.admit(pod) {
                self.reject_pod(pod, reason, &message);
                return false;
            }
            if let Some((reason, message)) = crate::predicate::pod_os_rejection(pod) {
                self.reject_pod(pod, reason, message);
                return false;
            }
            return self.admit_resources(pod);
        };
        tracing::warn!(pod = %crate::container::pod_full_name(pod), message = %message, "pod rejected at admission");
        self.set_evicted(&uid, true);
        let mut status = k8s_openapi::api::core::v1::PodStatus {
            qos_class: Some(crate::qos::get_pod_qos(pod).into()),
            ..Default::default()
        };
        crate::pod_workers::evicted_status(&mut status, crate::eviction::REASON, &message, true);
        self.shared.status.set_pod_status(&uid, status);
        false
    }

    /// The predicate admit handler's resource fit: a pod beyond `--max-pods`, or asking for more
    /// CPU or memory than the admitted pods leave of allocatable, is rejected.
    fn admit_resources(&mut self, pod: &Pod) -> bool {
        let uid = uid_of(pod);
        let active = self.active_pods(&uid);
        let used: crate::resource::Resources =
            active.iter().map(crate::resource::pod_requests).sum();
        let allocatable = crate::resource::Resources {
            milli_cpu: self.shared.allocatable.get("cpu").copied().unwrap_or(0),
            memory: self.shared.allocatable.get("memory").copied().unwrap_or(0),
        };
        let fit = crate::resource::fit_pod_count(active.len(), self.max_pods).and_then(|()| {
            crate::resource::fit_requests(crate::resource::pod_requests(pod), used, allocatable)
        });
        let (reason, message) = match fit {
            Err(e) => (e.reason(), e.to_string()),
            Ok(()) => {
                let s = &self.shared;
                // Upstream `getNodeAnyWay`: the API server's node once seen (labels and
                // taints set by others count), else the registered one.
                let labels = s.node.labels_or(&s.node_labels);
                let taints = s.node.taints_or(&s.node_taints);
                let (reason, message) =
                    if !crate::predicate::node_affinity_matches(pod, &s.node_name, &labels) {
                        crate::predicate::NODE_AFFINITY
                    } else if !crate::types::is_static_pod(pod)
                        && crate::predicate::untolerated_no_execute(pod, &taints).is_some()
                    {
                        crate::predicate::TAINT
                    } else {
                        return true;
                    };
                (reason.to_string(), message.to_string())
            }
        };
        self.reject_pod(pod, &reason, &message);
        false
    }

    /// Upstream `rejectPod`: a Warning event, and the pod Failed with `reason` and "Pod " +
    /// `message`; it never starts.
    fn reject_pod(&mut self, pod: &Pod, reason: &str, message: &str) {
        tracing::warn!(pod = %crate::container::pod_full_name(pod), reason, message, "pod rejected at admission");
        self.events.event(
            pod,
            None,
            crate::events::EventType::Warning,
            reason,
            message.to_string(),
        );
        let uid = uid_of(pod);
        self.set_evicted(&uid, true);
        self.shared
            .status
            .set_pod_status(&uid, rejected_status(pod, reason, message));
    }

    /// Upstream `HandlePodAdditions` / `Updates` / `Removes` / `Reconcile`.
    fn handle_update(&mut self, u: PodUpdate) {
        tracing::info!(op = %u.op, source = %u.source, pods = ?u.pods.iter().map(crate::container::pod_full_name).collect::<Vec<_>>(), "pod update");
        for mut pod in u.pods {
            crate::kubeletconfig::features::drop_disabled_pod_fields(
                &mut pod,
                self.sidecar_containers,
            );
            let uid = uid_of(&pod);
            match u.op {
                PodOperation::Add | PodOperation::Update => {
                    if u.op == PodOperation::Add {
                        let created = pod
                            .metadata
                            .creation_timestamp
                            .as_ref()
                            .map(|t| std::time::SystemTime::from(t.0));
                        self.shared.metrics.pod_seen_created(&uid, created);
                        self.shared.metrics.containers_per_pod(
                            pod.spec.as_ref().map_or(0, |s| s.containers.len()),
                        );
                    }
                    self.set_pod(&uid, pod.clone());
                    if self.is_evicted(&uid)
                        || (u.op == PodOperation::Add
                            && !self.workers.is_known(&uid)
                            && !self.admit(&pod))
                    {
                        continue;
                    }
                    self.probes.add_pod(&pod);
                    self.dispatch(pod, false, None);
                }
                PodOperation::Reconcile => {
                    // Upstream `HandlePodReconcile`: a readiness gate's condition changed.
                    let resync = crate::status::need_to_reconcile_pod_readiness(&pod);
                    self.set_pod(&uid, pod.clone());
                    if resync && !self.workers.is_terminating(&uid) && !self.is_evicted(&uid) {
                        self.dispatch(pod, false, None);
                    }
                }
                PodOperation::Delete => {
                    self.set_evicted(&uid, false);
                    self.probes.remove_pod(&uid);
                    let grace = pod.metadata.deletion_grace_period_seconds;
                    self.set_pod(&uid, pod.clone());
                    self.dispatch(pod, true, grace);
                }
                PodOperation::Remove => {
                    if self.is_evicted(&uid) {
                        self.set_evicted(&uid, false);
                        self.shared.status.remove(&uid);
                    }
                    self.shared.metrics.pod_forgotten(&uid);
                    self.probes.remove_pod(&uid);
                    self.shared.pods.write().remove(&uid);
                    self.work_queue.remove(&uid);
                    self.dispatch(pod, true, None);
                }
                PodOperation::Set => {}
            }
        }
    }

    fn set_pod(&self, uid: &str, pod: Pod) {
        self.shared.pods.write().insert(uid.to_string(), pod);
    }

    fn pod(&self, uid: &str) -> Option<Pod> {
        self.shared.pods.read().get(uid).cloned()
    }

    /// PLEG events re-sync the pod (upstream `handlePodSyncs` for non-removed events).
    fn handle_pleg_event(&mut self, e: PodLifecycleEvent) {
        if e.type_ == PodLifecycleEventType::ContainerRemoved {
            return;
        }
        if let Some(pod) = self.pod(&e.id)
            && !self.workers.is_terminating(&e.id)
            && !self.is_evicted(&e.id)
        {
            self.dispatch(pod, false, None);
        }
    }

    /// A probe result changed: re-sync the pod (upstream `handleProbeSync`).
    fn handle_probe_update(&mut self, uid: &str) {
        if let Some(pod) = self.pod(uid)
            && !self.workers.is_terminating(uid)
            && !self.is_evicted(uid)
        {
            self.dispatch(pod, false, None);
        }
    }

    fn handle_worker_done(&mut self, d: WorkerDone) {
        if d.terminated {
            self.finished.insert(d.uid.clone(), Instant::now());
            self.workers.forget(&d.uid);
            self.probes.remove_pod(&d.uid);
            self.work_queue.remove(&d.uid);
            // A gracefully deleted pod is forgotten once terminated.
            let mut pods = self.shared.pods.write();
            if pods
                .get(&d.uid)
                .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
                && let Some(pod) = pods.remove(&d.uid)
                && self.pod_config_has_api
            {
                self.shared.terminated.write().insert(d.uid.clone(), pod);
            }
            return;
        }
        self.work_queue
            .insert(d.uid, Instant::now() + d.requeue_after);
    }

    /// Sync pods whose time in the work queue has come (upstream `getPodsToSync`); terminate
    /// pods past their active deadline first.
    fn sync_due_pods(&mut self) {
        self.kill_pods_past_active_deadline();
        let now = Instant::now();
        let due: Vec<String> = self
            .work_queue
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(u, _)| u.clone())
            .collect();
        for uid in due {
            self.work_queue.remove(&uid);
            if let Some(pod) = self.pod(&uid)
                && !self.workers.is_terminating(&uid)
                && !self.is_evicted(&uid)
            {
                self.dispatch(pod, false, None);
            }
        }
    }

    /// Upstream `HandlePodCleanups`: terminate pods with a worker but no longer desired, and
    /// pods running on the runtime that no source knows; periodically collect dead containers.
    fn housekeeping(&mut self) {
        if !self.pod_config.all_sources_ready() {
            return;
        }
        let ready_since = *self.sources_ready_since.get_or_insert_with(Instant::now);
        if ready_since.elapsed() < SOURCES_SETTLE || !self.shared.pleg.has_relisted() {
            return;
        }
        let desired: HashSet<String> = self.shared.pods.read().keys().cloned().collect();
        for uid in self.workers.uids() {
            if !desired.contains(&uid) && !self.workers.is_terminating(&uid) {
                let mut pod = Pod::default();
                pod.metadata.uid = Some(uid);
                self.dispatch(pod, true, None);
            }
        }
        // Desired pods without a worker (re-added while their previous incarnation was being
        // terminated) get one again.
        let evicted = self.shared.evicted.read().clone();
        let unserved: Vec<Pod> = self
            .shared
            .pods
            .read()
            .iter()
            .filter(|(uid, p)| {
                !self.workers.is_known(uid)
                    && !evicted.contains(*uid)
                    && p.metadata.deletion_timestamp.is_none()
            })
            .map(|(_, p)| p.clone())
            .collect();
        for pod in unserved {
            if !self.work_queue.contains_key(&uid_of(&pod)) {
                self.probes.add_pod(&pod);
                self.dispatch(pod, false, None);
            }
        }
        let (runtime_pods, listed_at) = self.shared.pleg.runtime_pods_listed();
        // Upstream `cleanupOrphanedPodDirs` and `cleanupOrphanedPodCgroups`: what is left of
        // pods this kubelet ran (a directory under its root) that no source, worker or
        // runtime listing knows, their termination cut short.
        if listed_at.is_some() && !self.orphan_cleanup.swap(true, Ordering::AcqRel) {
            let mut known = desired.clone();
            known.extend(self.workers.uids());
            known.extend(runtime_pods.iter().map(|rp| rp.id.clone()));
            let (gc, running) = (self.container_gc.clone(), self.orphan_cleanup.clone());
            tokio::task::spawn_blocking(move || {
                gc.clean_up_orphaned_pods(&known);
                running.store(false, Ordering::Release);
            });
        }
        let orphans = orphaned_runtime_pods(runtime_pods, listed_at, &mut self.finished, |rp| {
            desired.contains(&rp.id)
                || self.workers.is_known(&rp.id)
                || !owned_by_node(&rp.name, &self.shared.node_name)
        });
        for rp in orphans {
            tracing::info!(pod = %rp.name, pod_uid = %rp.id, running = rp.is_running(), "cleaning up a pod no source knows");
            let grace = rp.containers.iter().filter_map(|c| c.grace_period).max();
            let mut pod = Pod::default();
            pod.metadata.uid = Some(rp.id.clone());
            pod.metadata.name = Some(rp.name.clone());
            pod.metadata.namespace = Some(rp.namespace.clone());
            self.dispatch(
                pod,
                true,
                Some(grace.unwrap_or(crate::kuberuntime::manager::DEFAULT_GRACE_PERIOD_SECONDS)),
            );
        }
        if self.last_gc.elapsed() >= self.container_gc_period {
            self.last_gc = Instant::now();
            let gc = self.container_gc.clone();
            // A pod whose worker is still terminating it is not a removed pod yet (upstream
            // `ShouldPodContentBeRemoved` is false until the worker finished): its worker
            // removes its containers and sandboxes itself, the GC must not race it.
            let mut known = desired;
            known.extend(self.workers.uids());
            tokio::spawn(async move {
                if let Err(e) = gc.garbage_collect(&known).await {
                    tracing::warn!(error = %e, "container garbage collection failed");
                }
            });
        }
    }
}

/// The pods of a relist (listed at `listed_at`) that housekeeping must terminate: those not
/// `known`, except pods whose worker finished terminating after the list was taken (`finished`):
/// the list predates their removal, and terminating them again would redo their whole
/// termination (upstream's `HandlePodCleanups` lists the runtime afresh for the same reason).
/// Terminations that a list taken after them has caught up with are forgotten.
fn orphaned_runtime_pods(
    pods: Vec<crate::kuberuntime::RuntimePod>,
    listed_at: Option<Instant>,
    finished: &mut HashMap<String, Instant>,
    known: impl Fn(&crate::kuberuntime::RuntimePod) -> bool,
) -> Vec<crate::kuberuntime::RuntimePod> {
    let Some(listed_at) = listed_at else {
        return Vec::new();
    };
    finished.retain(|_, done| *done >= listed_at);
    pods.into_iter()
        .filter(|rp| !known(rp) && !finished.contains_key(&rp.id))
        .collect()
}

/// Upstream `rejectPod`'s status: Failed with `reason` and "Pod " + `message`.
pub fn rejected_status(
    pod: &Pod,
    reason: &str,
    message: &str,
) -> k8s_openapi::api::core::v1::PodStatus {
    k8s_openapi::api::core::v1::PodStatus {
        phase: Some("Failed".into()),
        reason: Some(reason.into()),
        message: Some(format!("Pod {message}")),
        qos_class: Some(crate::qos::get_pod_qos(pod).into()),
        ..Default::default()
    }
}

/// The image GC manager frees disk for the eviction manager (wired here, so neither imports
/// the other).
#[async_trait::async_trait]
impl crate::eviction::ImageGc for crate::images::ImageGcManager {
    async fn delete_unused_images(&self) -> Result<u64, String> {
        crate::images::ImageGcManager::delete_unused_images(self)
            .await
            .map_err(|e| e.to_string())
    }
}

/// The container GC removes dead containers for the eviction manager.
#[async_trait::async_trait]
impl crate::eviction::ContainerGc for crate::gc::ContainerGc {
    async fn delete_all_unused_containers(&self, active: &HashSet<String>) -> Result<(), String> {
        self.garbage_collect(active)
            .await
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime_pod(uid: &str) -> crate::kuberuntime::RuntimePod {
        crate::kuberuntime::RuntimePod {
            id: uid.into(),
            name: format!("pod-{uid}"),
            ..Default::default()
        }
    }

    #[test]
    fn a_relist_older_than_a_finished_termination_does_not_terminate_the_pod_again() {
        let t0 = Instant::now();
        let later = |s| t0 + Duration::from_secs(s);
        // "a" finished terminating at t0+2, "b" at t0+5.
        let mut finished =
            HashMap::from([("a".to_string(), later(2)), ("b".to_string(), later(5))]);
        let pods = || {
            vec![
                runtime_pod("a"),
                runtime_pod("b"),
                runtime_pod("c"),
                runtime_pod("k"),
            ]
        };
        let known = |rp: &crate::kuberuntime::RuntimePod| rp.id == "k";
        // Listed at t0+1, before both finished: only the unknown "c" is an orphan.
        let o = orphaned_runtime_pods(pods(), Some(later(1)), &mut finished, known);
        assert_eq!(o.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), ["c"]);
        assert_eq!(finished.len(), 2);
        // Listed at t0+3: "a" is still on the runtime after its worker removed it, so it is
        // cleaned up; "b" is still newer than the list.
        let o = orphaned_runtime_pods(pods(), Some(later(3)), &mut finished, known);
        assert_eq!(
            o.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(),
            ["a", "c"]
        );
        assert_eq!(finished.keys().collect::<Vec<_>>(), ["b"]);
        // No relist yet: nothing is known about the runtime.
        assert!(orphaned_runtime_pods(pods(), None, &mut finished, known).is_empty());
    }

    #[test]
    fn a_pod_beyond_max_pods_is_failed_out_of_pods() {
        let e = crate::resource::fit_pod_count(3, 3).unwrap_err();
        let s = rejected_status(&Pod::default(), &e.reason(), &e.to_string());
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(s.reason.as_deref(), Some("OutOfpods"));
        assert_eq!(
            s.message.as_deref(),
            Some("Pod Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3")
        );
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    }
}
