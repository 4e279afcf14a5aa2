//! The pod lifecycle event generator (upstream `pkg/kubelet/pleg/generic.go`): relist the
//! runtime every second, compare each pod's containers and sandboxes with the previous relist,
//! emit [`PodLifecycleEvent`]s, and refresh the pod status cache for pods that changed. It also
//! publishes the last relist's snapshot (used by housekeeping to find orphaned pods) and its
//! health: unhealthy when no relist finished for [`RELIST_THRESHOLD`].

pub mod evented;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::container::{ContainerState, PodStatus};
use crate::kuberuntime::{KubeGenericRuntimeManager, RuntimePod};
use crate::metrics::Metrics;

/// Upstream `relistPeriod`.
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);
/// How long one pod's status read may take during a relist (counted from the moment the read
/// starts, not from the start of the relist).
pub const STATUS_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How many changed pods' statuses one relist reads at once. Upstream reads them one after the
/// other; reading all at once sent, while 110 pods were being created on one Docker, hundreds
/// of status calls in one burst that queued behind the creations, timed out and were sent again
/// by the next relist.
pub const STATUS_READ_CONCURRENCY: usize = 4;
/// Upstream `relistThreshold`.
pub const RELIST_THRESHOLD: Duration = Duration::from_secs(180);

/// Upstream `PodLifeCycleEventType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodLifecycleEventType {
    /// A container (or sandbox) started running.
    ContainerStarted,
    /// A container exited.
    ContainerDied,
    /// A container disappeared from the runtime.
    ContainerRemoved,
    /// A container changed state otherwise.
    ContainerChanged,
}

/// Upstream `PodLifecycleEvent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLifecycleEvent {
    /// Pod UID.
    pub id: String,
    /// What happened.
    pub type_: PodLifecycleEventType,
    /// The container or sandbox id.
    pub data: String,
}

/// The pod status cache (upstream `kubecontainer.Cache`): newest runtime status per pod UID and
/// when its read began; and the pods whose worker is syncing, so reads their status once its
/// changes are made.
#[derive(Debug, Clone, Default)]
pub struct PodCache {
    inner: Arc<RwLock<HashMap<String, (PodStatus, Instant)>>>,
    syncing: Arc<parking_lot::Mutex<HashSet<String>>>,
    /// When the workers of terminated pods finished, until a relist lists after that.
    terminated: Arc<parking_lot::Mutex<HashMap<String, Instant>>>,
}

/// A pod worker's sync in flight ([`PodCache::syncing`]), until dropped.
#[derive(Debug)]
pub struct SyncInFlight {
    syncing: Arc<parking_lot::Mutex<HashSet<String>>>,
    uid: String,
}

impl Drop for SyncInFlight {
    fn drop(&mut self) {
        self.syncing.lock().remove(&self.uid);
    }
}

impl PodCache {
    /// Marks `uid`'s sync as in flight until the returned guard drops. A relist does not read
    /// such a pod's status: the sync reads it after its changes, later than the relist's list,
    /// or else (no changes) its next sync, which the relist's events bring, reads it.
    pub fn syncing(&self, uid: &str) -> SyncInFlight {
        self.syncing.lock().insert(uid.to_string());
        SyncInFlight {
            syncing: Arc::clone(&self.syncing),
            uid: uid.to_string(),
        }
    }

    /// Whether `uid`'s worker is syncing it.
    pub fn is_syncing(&self, uid: &str) -> bool {
        self.syncing.lock().contains(uid)
    }

    /// The cached status of `uid` and when its read began.
    pub fn get(&self, uid: &str) -> Option<(PodStatus, Instant)> {
        self.inner.read().get(uid).cloned()
    }

    /// Upstream `GetNewerThan` without the wait: the cached status of `uid` when its read began
    /// at `t` or later, so that it shows everything done before `t`.
    pub fn get_read_since(&self, uid: &str, t: Instant) -> Option<PodStatus> {
        self.inner
            .read()
            .get(uid)
            .filter(|(_, read_at)| *read_at >= t)
            .map(|(s, _)| s.clone())
    }

    /// Whether the cached status of `uid` was read at `t` or later ([`Self::get_read_since`]
    /// without the copy).
    pub fn is_read_since(&self, uid: &str, t: Instant) -> bool {
        self.inner
            .read()
            .get(uid)
            .is_some_and(|(_, read_at)| *read_at >= t)
    }

    /// Whether a status of `uid` is cached.
    pub fn contains(&self, uid: &str) -> bool {
        self.inner.read().contains_key(uid)
    }

    /// Whether the cached status of `uid` shows what a relist listed for it: the same
    /// sandboxes and containers, each in the same state. Reading it again would show nothing
    /// new that the relist can see.
    pub fn shows(&self, uid: &str, listed: &RuntimePod) -> bool {
        self.inner
            .read()
            .get(uid)
            .is_some_and(|(s, _)| status_shows(s, listed))
    }

    /// Store `status`, whose read began at `read_at`. An older read than the cached one does
    /// not replace it.
    pub fn set(&self, uid: &str, status: PodStatus, read_at: Instant) {
        let mut inner = self.inner.write();
        if inner.get(uid).is_some_and(|(_, t)| *t > read_at) {
            return;
        }
        inner.insert(uid.to_string(), (status, read_at));
    }

    /// Forget `uid`.
    pub fn delete(&self, uid: &str) {
        self.inner.write().remove(uid);
    }

    /// Forget `uid`, whose worker terminated it now: until a relist lists the runtime after
    /// this, a listing without the pod does not show that nothing of it is left
    /// ([`Self::terminated_since`]).
    pub fn delete_terminated(&self, uid: &str) {
        self.delete(uid);
        self.terminated
            .lock()
            .insert(uid.to_string(), Instant::now());
    }

    /// Whether a worker of `uid` terminated it at `t` or later.
    pub fn terminated_since(&self, uid: &str, t: Instant) -> bool {
        self.terminated.lock().get(uid).is_some_and(|at| *at >= t)
    }

    /// A relist listed the runtime at `t`: terminations before that are in its listing.
    fn forget_terminations_before(&self, t: Instant) {
        self.terminated.lock().retain(|_, at| *at >= t);
    }
}

/// What the PLEG publishes for the rest of the kubelet.
#[derive(Debug, Default)]
pub struct PlegState {
    last_relist: RwLock<Option<Instant>>,
    /// The pods of the last relist and when the runtime was asked for them.
    pods: RwLock<(Vec<RuntimePod>, Option<Instant>)>,
}

impl PlegState {
    /// Upstream `Healthy`: Ok, or the reason it is not.
    pub fn healthy(&self) -> Result<(), String> {
        let last = *self.last_relist.read();
        match last {
            // Not relisted yet: healthy during start-up like upstream (relistTime zero).
            None => Ok(()),
            Some(t) if t.elapsed() > RELIST_THRESHOLD => Err(format!(
                "pleg was last seen active {:?} ago; threshold is {RELIST_THRESHOLD:?}",
                t.elapsed()
            )),
            Some(_) => Ok(()),
        }
    }

    /// The pods of the last relist.
    pub fn runtime_pods(&self) -> Vec<RuntimePod> {
        self.pods.read().0.clone()
    }

    /// The pods of the last relist and when the runtime was listed for them (`None` before
    /// the first relist): a pod terminated after that time may still be in the list.
    pub fn runtime_pods_listed(&self) -> (Vec<RuntimePod>, Option<Instant>) {
        self.pods.read().clone()
    }

    /// True once a relist finished.
    pub fn has_relisted(&self) -> bool {
        self.last_relist.read().is_some()
    }

    /// Whether the last relist's listing (sorted by pod UID) had anything of pod `uid`, and
    /// when the runtime was listed (`None` before the first relist).
    pub fn listed(&self, uid: &str) -> Option<(bool, Instant)> {
        let pods = self.pods.read();
        let at = pods.1?;
        Some((
            pods.0.binary_search_by(|p| p.id.as_str().cmp(uid)).is_ok(),
            at,
        ))
    }
}

/// Whether `status` has exactly the sandboxes and containers of `listed`, each in the listed
/// state (a listed sandbox is `Running` when ready).
fn status_shows(status: &PodStatus, listed: &RuntimePod) -> bool {
    use crate::container::SandboxState;
    let sandboxes_match = status.sandbox_statuses.len() == listed.sandboxes.len()
        && listed.sandboxes.iter().all(|l| {
            status.sandbox_statuses.iter().any(|s| {
                s.id == l.id
                    && (s.state == SandboxState::Ready) == (l.state == ContainerState::Running)
            })
        });
    sandboxes_match
        && status.container_statuses.len() == listed.containers.len()
        && listed.containers.iter().all(|l| {
            status
                .container_statuses
                .iter()
                .any(|c| c.id.id == l.id && c.state == l.state)
        })
}

fn states(p: Option<&RuntimePod>) -> HashMap<&str, ContainerState> {
    p.map(|p| {
        p.sandboxes
            .iter()
            .chain(&p.containers)
            .map(|c| (c.id.as_str(), c.state))
            .collect()
    })
    .unwrap_or_default()
}

/// Upstream `generateEvents` over all containers of one pod.
pub fn compute_events(
    uid: &str,
    old: Option<&RuntimePod>,
    new: Option<&RuntimePod>,
) -> Vec<PodLifecycleEvent> {
    use PodLifecycleEventType::*;
    let (o, n) = (states(old), states(new));
    let mut ids: Vec<&str> = o.keys().chain(n.keys()).copied().collect();
    ids.sort_unstable();
    ids.dedup();
    let mut out = vec![];
    let mut ev = |t, id: &str| {
        out.push(PodLifecycleEvent {
            id: uid.to_string(),
            type_: t,
            data: id.to_string(),
        })
    };
    for id in ids {
        let (was, is) = (o.get(id).copied(), n.get(id).copied());
        if was == is {
            continue;
        }
        match is {
            Some(ContainerState::Running) => ev(ContainerStarted, id),
            Some(ContainerState::Exited) => ev(ContainerDied, id),
            Some(_) => ev(ContainerChanged, id),
            None => {
                if was == Some(ContainerState::Running) {
                    ev(ContainerDied, id);
                }
                ev(ContainerRemoved, id);
            }
        }
    }
    out
}

/// The generic, polling PLEG (upstream `GenericPLEG`).
#[derive(Debug)]
pub struct GenericPleg {
    runtime: KubeGenericRuntimeManager,
    records: HashMap<String, RuntimePod>,
    events: mpsc::Sender<PodLifecycleEvent>,
    cache: PodCache,
    state: Arc<PlegState>,
    metrics: Arc<Metrics>,
}

impl GenericPleg {
    /// A PLEG sending on `events`.
    pub fn new(
        runtime: KubeGenericRuntimeManager,
        events: mpsc::Sender<PodLifecycleEvent>,
        cache: PodCache,
        state: Arc<PlegState>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            runtime,
            records: HashMap::new(),
            events,
            cache,
            state,
            metrics,
        }
    }

    /// Hands a pod's events to the sync loop.
    fn send(&self, events: Vec<PodLifecycleEvent>) {
        for e in events {
            tracing::debug!(pod_uid = %e.id, event = ?e.type_, data = %e.data, "PLEG event");
            if self.events.try_send(e).is_err() {
                self.metrics.pleg_discarded(1);
                tracing::error!("PLEG event channel is full, discarding event");
            }
        }
    }

    /// One relist (upstream `Relist`).
    pub async fn relist(&mut self) {
        let start = Instant::now();
        let pods = match self.runtime.get_pods(true).await {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "PLEG: unable to retrieve pods");
                return;
            }
        };
        let running_pods = pods
            .iter()
            .filter(|p| {
                p.sandboxes
                    .iter()
                    .any(|s| s.state == ContainerState::Running)
            })
            .count();
        // Upstream `updateRunningContainerMetrics`: containers counted per state.
        let mut by_state: Vec<(&str, i64)> = Vec::new();
        for c in pods.iter().flat_map(|p| &p.containers) {
            let state = match c.state {
                ContainerState::Created => "created",
                ContainerState::Running => "running",
                ContainerState::Exited => "exited",
                _ => "unknown",
            };
            match by_state.iter_mut().find(|(s, _)| *s == state) {
                Some((_, n)) => *n += 1,
                None => by_state.push((state, 1)),
            }
        }
        self.metrics
            .set_running(i64::try_from(running_pods).unwrap_or(i64::MAX), &by_state);
        let current: HashMap<String, RuntimePod> =
            pods.iter().map(|p| (p.id.clone(), p.clone())).collect();
        let uids: HashSet<&String> = self.records.keys().chain(current.keys()).collect();
        let mut events: HashMap<String, Vec<PodLifecycleEvent>> = HashMap::new();
        for uid in uids {
            let evs = compute_events(uid, self.records.get(uid), current.get(uid));
            if !evs.is_empty() {
                events.insert(uid.clone(), evs);
            }
        }
        // Pods gone from the runtime have no status to read: their events go at once.
        let gone: Vec<String> = events
            .keys()
            .filter(|u| !current.contains_key(*u))
            .cloned()
            .collect();
        for uid in gone {
            self.cache.delete(&uid);
            self.send(events.remove(&uid).unwrap_or_default());
        }
        // The changed pods' statuses are read [`STATUS_READ_CONCURRENCY`] at a time, each with
        // its own deadline from when its read starts, so one slow runtime call does not hold up
        // the others and a busy runtime is not flooded. Each pod's events go as soon as its
        // status is in the cache (as upstream sends them pod by pod), not after the whole
        // batch: with many pods changing at once their workers start while the rest is read.
        // A pod whose read failed keeps its old record, its events are held back, and it is
        // looked at again on the next relist, which generates them anew (upstream "Ignoring
        // events for pod" + `needsReinspection`).
        // A cached status that shows what the list saw (read after this relist listed the
        // runtime, or before with the same sandboxes and containers in the same states: a pod
        // worker's read after its sync's changes) is not read again; nor is a pod whose worker
        // is syncing it (it reads after its changes; see `PodCache::syncing`).
        let reads: Vec<_> = events
            .keys()
            .filter_map(|uid| current.get(uid).cloned())
            .map(|p| {
                let rt = self.runtime.clone();
                let cache = self.cache.clone();
                async move {
                    if cache.is_read_since(&p.id, start)
                        || cache.shows(&p.id, &p)
                        || cache.is_syncing(&p.id)
                    {
                        return (p, None);
                    }
                    let read_at = Instant::now();
                    let r = tokio::time::timeout(
                        STATUS_READ_TIMEOUT,
                        rt.get_pod_status(&p.id, &p.name, &p.namespace),
                    )
                    .await;
                    (p, Some((read_at, r)))
                }
            })
            .collect();
        let mut reinspect = HashSet::new();
        let mut results = futures::StreamExt::buffer_unordered(
            futures::stream::iter(reads),
            STATUS_READ_CONCURRENCY,
        );
        while let Some((p, read)) = futures::StreamExt::next(&mut results).await {
            match read {
                // Already read since the list: the cache has it.
                None => self.send(events.remove(&p.id).unwrap_or_default()),
                Some((read_at, Ok(Ok(s)))) => {
                    self.cache.set(&p.id, s, read_at);
                    self.send(events.remove(&p.id).unwrap_or_default());
                }
                Some((_, Ok(Err(e)))) => {
                    tracing::warn!(pod = %p.name, error = %e, "PLEG: cannot read pod status");
                    reinspect.insert(p.id.clone());
                }
                Some((_, Err(_))) => {
                    tracing::warn!(pod = %p.name, "PLEG: reading pod status timed out");
                    reinspect.insert(p.id.clone());
                }
            }
        }
        let mut current = current;
        for uid in &reinspect {
            match self.records.get(uid) {
                Some(old) => {
                    current.insert(uid.clone(), old.clone());
                }
                None => {
                    current.remove(uid);
                }
            }
        }
        self.records = current;
        *self.state.pods.write() = (pods, Some(start));
        self.cache.forget_terminations_before(start);
        *self.state.last_relist.write() = Some(Instant::now());
        self.metrics.observe_relist(start.elapsed());
    }

    /// Relist every [`RELIST_PERIOD`] until cancelled.
    pub async fn run(self, cancel: CancellationToken) {
        let (_keep, period) = tokio::sync::watch::channel(RELIST_PERIOD);
        self.run_with_period(cancel, period).await;
    }

    /// Relist every `period` (which the evented PLEG lengthens while its stream is healthy)
    /// until cancelled.
    pub async fn run_with_period(
        mut self,
        cancel: CancellationToken,
        mut period: tokio::sync::watch::Receiver<Duration>,
    ) {
        let mut every = *period.borrow_and_update();
        let mut next = tokio::time::Instant::now();
        // Once the sender is gone the period stays where it is.
        let mut following = true;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep_until(next) => {
                    self.relist().await;
                    next = tokio::time::Instant::now() + every;
                }
                changed = period.changed(), if following => {
                    if changed.is_err() {
                        following = false;
                        every = RELIST_PERIOD;
                        next = next.min(tokio::time::Instant::now() + every);
                        continue;
                    }
                    every = *period.borrow_and_update();
                    next = if every == RELIST_PERIOD {
                        // The event stream failed: relist now, events may have been missed.
                        tokio::time::Instant::now()
                    } else {
                        tokio::time::Instant::now() + every
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cache keeps the read that began last, and hands a status out only to a caller
    /// whose last sync had settled when that read began.
    #[test]
    fn the_pod_cache_keeps_the_newest_read_and_tells_its_age() {
        let cache = PodCache::default();
        let early = Instant::now();
        let late = early + Duration::from_millis(5);
        let named = |name: &str| PodStatus {
            name: name.into(),
            ..Default::default()
        };
        cache.set("p", named("late"), late);
        cache.set("p", named("early"), early);
        assert_eq!(
            cache.get("p").map(|(s, t)| (s.name, t)),
            Some(("late".into(), late))
        );
        assert_eq!(
            cache.get_read_since("p", early).map(|s| s.name).as_deref(),
            Some("late")
        );
        assert!(
            cache.get_read_since("p", late).is_some(),
            "read at that very time"
        );
        assert!(
            cache
                .get_read_since("p", late + Duration::from_nanos(1))
                .is_none()
        );
        assert!(cache.get_read_since("q", early).is_none());
    }

    use crate::kuberuntime::manager::RuntimeContainer;

    fn pod(cs: &[(&str, ContainerState)]) -> RuntimePod {
        RuntimePod {
            id: "u".into(),
            containers: cs
                .iter()
                .map(|(id, s)| RuntimeContainer {
                    id: id.to_string(),
                    name: id.to_string(),
                    state: *s,
                    grace_period: None,
                    created_at: 0,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn events() {
        use PodLifecycleEventType::*;
        let a = pod(&[
            ("c1", ContainerState::Running),
            ("c2", ContainerState::Running),
        ]);
        let b = pod(&[
            ("c1", ContainerState::Exited),
            ("c3", ContainerState::Running),
        ]);
        let ev: Vec<_> = compute_events("u", Some(&a), Some(&b))
            .into_iter()
            .map(|e| (e.data, e.type_))
            .collect();
        assert_eq!(
            ev,
            vec![
                ("c1".to_string(), ContainerDied),
                ("c2".to_string(), ContainerDied),
                ("c2".to_string(), ContainerRemoved),
                ("c3".to_string(), ContainerStarted),
            ]
        );
        assert!(compute_events("u", Some(&a), Some(&a)).is_empty());
    }

    #[test]
    fn health() {
        let s = PlegState::default();
        assert!(s.healthy().is_ok());
        *s.last_relist.write() = Instant::now().checked_sub(Duration::from_secs(200));
        assert!(s.healthy().is_err());
    }

    /// A relisting PLEG on the fake runtime, and a way to start a pod on it.
    mod on_fake_runtime {
        use super::*;
        use crate::cri::RuntimeService;
        use crate::cri::fake::FakeRuntime;

        struct Bed {
            fake: Arc<FakeRuntime>,
            runtime: KubeGenericRuntimeManager,
            pleg: GenericPleg,
            events: mpsc::Receiver<PodLifecycleEvent>,
            cache: PodCache,
            state: Arc<PlegState>,
            metrics: Arc<Metrics>,
            _dir: tempfile::TempDir,
        }

        async fn bed() -> Bed {
            let dir = tempfile::tempdir().expect("tempdir");
            let (fake, runtime) = KubeGenericRuntimeManager::fake(dir.path()).await;
            let (tx, events) = mpsc::channel(100);
            let cache = PodCache::default();
            let state = Arc::new(PlegState::default());
            let metrics = Arc::new(Metrics::new("node1"));
            let pleg = GenericPleg::new(
                runtime.clone(),
                tx,
                cache.clone(),
                Arc::clone(&state),
                Arc::clone(&metrics),
            );
            Bed {
                fake,
                runtime,
                pleg,
                events,
                cache,
                state,
                metrics,
                _dir: dir,
            }
        }

        async fn start_pod(b: &Bed, uid: &str) {
            crate::kuberuntime::manager::testing::run_pod(&b.runtime, uid, "busybox:1", "Always")
                .await;
        }

        /// Pod `uid`'s status as the runtime has it now.
        async fn read_status(b: &Bed, uid: &str) -> PodStatus {
            b.runtime
                .get_pod_status(uid, &format!("pod-{uid}"), "default")
                .await
                .expect("status")
        }

        /// Asserts how many PodSandboxStatus calls (one per pod status read) the fake got.
        fn assert_sandbox_reads(b: &Bed, n: usize) {
            assert_eq!(
                b.fake.call_count("podsandbox_status"),
                n,
                "{:?}",
                b.fake.calls()
            );
        }

        fn drain(b: &mut Bed) -> Vec<(String, PodLifecycleEventType)> {
            let mut out = vec![];
            while let Ok(e) = b.events.try_recv() {
                out.push((e.id, e.type_));
            }
            out
        }

        fn app_id(b: &Bed) -> String {
            b.fake
                .containers()
                .into_iter()
                .find(|(_, c)| c.metadata.as_ref().is_some_and(|m| m.name == "app"))
                .map(|(_, c)| c.id)
                .unwrap_or_default()
        }

        fn app_id_running(b: &Bed) -> String {
            b.fake
                .containers()
                .into_iter()
                .find(|(_, c)| {
                    c.metadata.as_ref().is_some_and(|m| m.name == "app")
                        && c.state
                            == cri_proto::runtime::v1::ContainerState::ContainerRunning as i32
                })
                .map(|(_, c)| c.id)
                .unwrap_or_default()
        }

        /// A changed pod whose cached status shows what the relist listed is not read again:
        /// its events go with that status. That is a status read after the relist listed the
        /// runtime (a pod worker's read after its changes), or one read before that already
        /// has the same sandboxes and containers in the same states. Any other is read.
        #[tokio::test(start_paused = true)]
        async fn a_cached_status_that_shows_the_listing_is_not_read_again() {
            let mut b = bed().await;
            start_pod(&b, "p1").await;
            b.pleg.relist().await;
            drain(&mut b);
            // Read while the container ran; the relist lists it exited: read again.
            let running = read_status(&b, "p1").await;
            b.cache.set("p1", running, Instant::now());
            b.fake.exit_container(&app_id(&b), 1);
            b.fake.clear_calls();
            b.pleg.relist().await;
            assert_sandbox_reads(&b, 1);
            assert_eq!(
                drain(&mut b),
                vec![("p1".to_string(), PodLifecycleEventType::ContainerDied)]
            );
            // Read (before the relist lists) after a new container started: it shows the
            // listing, no read.
            start_pod(&b, "p1").await;
            let shows = read_status(&b, "p1").await;
            b.cache.set("p1", shows, Instant::now());
            b.fake.clear_calls();
            b.pleg.relist().await;
            assert_sandbox_reads(&b, 0);
            assert!(
                drain(&mut b)
                    .iter()
                    .any(|(u, t)| u == "p1" && *t == PodLifecycleEventType::ContainerStarted),
                "the events still go"
            );
            // A read the cache says began after the relist's list (stamped ahead here), with
            // the container since gone from it: not read either.
            let mut stale = b.cache.get("p1").expect("cached").0;
            b.fake.exit_container(&app_id_running(&b), 2);
            stale.container_statuses.clear();
            b.cache
                .set("p1", stale, Instant::now() + Duration::from_secs(1));
            b.fake.clear_calls();
            b.pleg.relist().await;
            assert_sandbox_reads(&b, 0);
        }

        /// A pod whose worker is syncing is left to it: the relist sends its events without
        /// reading its status; once the sync is over, a change is read again.
        #[tokio::test(start_paused = true)]
        async fn a_pod_being_synced_is_not_read_by_a_relist() {
            let mut b = bed().await;
            let in_flight = b.cache.syncing("p3");
            start_pod(&b, "p3").await;
            b.fake.clear_calls();
            b.pleg.relist().await;
            assert_sandbox_reads(&b, 0);
            assert_eq!(drain(&mut b).len(), 2, "sandbox and container started");
            assert!(b.cache.get("p3").is_none());
            drop(in_flight);
            assert!(!b.cache.is_syncing("p3"));
            b.fake.exit_container(&app_id(&b), 1);
            b.pleg.relist().await;
            assert_sandbox_reads(&b, 1);
            assert!(b.cache.get("p3").is_some());
        }

        /// The cache compares sandboxes and containers by id and state, and their number.
        #[test]
        fn a_status_shows_a_listing_with_the_same_ids_and_states() {
            use crate::container::{ContainerID, ContainerStatus, SandboxState, SandboxStatus};
            let listed = RuntimePod {
                id: "u".into(),
                sandboxes: vec![RuntimeContainer {
                    id: "s1".into(),
                    name: String::new(),
                    state: ContainerState::Running,
                    grace_period: None,
                    created_at: 0,
                }],
                ..pod(&[("c1", ContainerState::Running)])
            };
            let status = |sandbox: SandboxState, c: &[(&str, ContainerState)]| PodStatus {
                sandbox_statuses: vec![SandboxStatus {
                    id: "s1".into(),
                    state: sandbox,
                    ..Default::default()
                }],
                container_statuses: c
                    .iter()
                    .map(|(id, state)| ContainerStatus {
                        id: ContainerID::new("fake", *id),
                        state: *state,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            };
            let cache = PodCache::default();
            let check = |s: PodStatus| {
                cache.delete("u");
                cache.set("u", s, Instant::now());
                cache.shows("u", &listed)
            };
            assert!(check(status(
                SandboxState::Ready,
                &[("c1", ContainerState::Running)]
            )));
            assert!(!check(status(
                SandboxState::NotReady,
                &[("c1", ContainerState::Running)]
            )));
            assert!(!check(status(
                SandboxState::Ready,
                &[("c1", ContainerState::Exited)]
            )));
            assert!(!check(status(
                SandboxState::Ready,
                &[("c2", ContainerState::Running)]
            )));
            assert!(!check(status(SandboxState::Ready, &[])));
            assert!(!check(status(
                SandboxState::Ready,
                &[
                    ("c1", ContainerState::Running),
                    ("c0", ContainerState::Exited)
                ]
            )));
            assert!(!PodCache::default().shows("u", &listed), "nothing cached");
        }

        #[tokio::test(start_paused = true)]
        async fn a_relist_reports_started_died_and_removed_containers() {
            let mut b = bed().await;
            assert!(!b.state.has_relisted());
            start_pod(&b, "p1").await;
            b.pleg.relist().await;
            assert!(b.state.has_relisted());
            let evs = drain(&mut b);
            // The sandbox and the app container started.
            assert_eq!(
                evs.iter()
                    .filter(|(u, t)| u == "p1" && *t == PodLifecycleEventType::ContainerStarted)
                    .count(),
                2,
                "{evs:?}"
            );
            assert!(b.cache.get("p1").is_some());
            // Nothing changed: no events.
            b.pleg.relist().await;
            assert!(drain(&mut b).is_empty());
            let app = app_id(&b);
            b.fake.exit_container(&app, 1);
            b.pleg.relist().await;
            assert_eq!(
                drain(&mut b),
                vec![("p1".to_string(), PodLifecycleEventType::ContainerDied)]
            );
            let cached = b.cache.get("p1").map(|(s, _)| s).expect("cached");
            assert!(
                cached
                    .container_statuses
                    .iter()
                    .any(|c| c.name == "app" && c.state == ContainerState::Exited)
            );
            b.runtime.remove_pod("p1").await.expect("remove exited");
            b.fake
                .stop_pod_sandbox(&b.fake.sandboxes()[0].id)
                .await
                .expect("stop");
            b.runtime.remove_pod("p1").await.expect("remove");
            b.pleg.relist().await;
            let evs = drain(&mut b);
            assert!(evs.contains(&("p1".to_string(), PodLifecycleEventType::ContainerRemoved)));
            assert!(
                b.cache.get("p1").is_none(),
                "a removed pod leaves the cache"
            );
        }

        /// Upstream `updateRunningPodAndContainerMetrics` and the relist timings.
        #[tokio::test(start_paused = true)]
        async fn a_relist_sets_the_running_gauges_and_its_timings() {
            let mut b = bed().await;
            start_pod(&b, "p1").await;
            start_pod(&b, "p2").await;
            b.fake.exit_container(&app_id(&b), 1);
            b.pleg.relist().await;
            b.pleg.relist().await;
            drain(&mut b);
            let text = b.metrics.render();
            for line in [
                "kubelet_running_pods 2",
                "kubelet_running_containers{container_state=\"running\"} 1",
                "kubelet_running_containers{container_state=\"exited\"} 1",
                "kubelet_pleg_relist_duration_seconds_count 2",
                "kubelet_pleg_relist_interval_seconds_count 1",
            ] {
                assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
            }
            let last_seen = text
                .lines()
                .find_map(|l| l.strip_prefix("kubelet_pleg_last_seen_seconds "))
                .and_then(|v| v.parse::<f64>().ok())
                .expect("kubelet_pleg_last_seen_seconds");
            assert!(last_seen > 1.0e9, "a Unix timestamp: {last_seen}");
        }

        #[tokio::test(start_paused = true)]
        async fn a_relist_reads_a_bounded_number_of_statuses_at_once_each_with_its_own_deadline() {
            let mut b = bed().await;
            let n = STATUS_READ_CONCURRENCY * 3;
            for i in 0..n {
                start_pod(&b, &format!("c{i}")).await;
            }
            // Each read takes 3 s: all at once, the last ones would still be read in time; one
            // deadline for the whole relist would fail most of them.
            b.fake.set_sandbox_status_latency(Duration::from_secs(3));
            let started = tokio::time::Instant::now();
            b.pleg.relist().await;
            assert_eq!(
                b.fake.sandbox_status_max_in_flight(),
                STATUS_READ_CONCURRENCY
            );
            // Three rounds of 3 s: every read got its own 5 s, none timed out.
            assert!(started.elapsed() >= Duration::from_secs(9));
            for i in 0..n {
                assert!(b.cache.get(&format!("c{i}")).is_some(), "c{i} was read");
            }
            assert_eq!(drain(&mut b).len(), 2 * n);
        }

        /// A pod's events go as soon as its status is read, not after the whole batch: with
        /// 3 s per read and four at a time, the first four pods' events are out after the
        /// first round, while the relist still reads the rest.
        #[tokio::test(start_paused = true)]
        async fn each_pods_events_go_once_its_status_is_read() {
            let b = bed().await;
            let n = STATUS_READ_CONCURRENCY * 3;
            for i in 0..n {
                start_pod(&b, &format!("e{i}")).await;
            }
            b.fake.set_sandbox_status_latency(Duration::from_secs(3));
            let Bed {
                mut pleg,
                mut events,
                ..
            } = b;
            let relist = tokio::spawn(async move { pleg.relist().await });
            tokio::time::sleep(Duration::from_millis(3500)).await;
            let mut early = 0;
            while events.try_recv().is_ok() {
                early += 1;
            }
            assert!(!relist.is_finished(), "the relist is still reading");
            assert_eq!(
                early,
                2 * STATUS_READ_CONCURRENCY,
                "sandbox and container started, for each pod read in the first round"
            );
            relist.await.expect("relist");
            let mut rest = 0;
            while events.try_recv().is_ok() {
                rest += 1;
            }
            assert_eq!(early + rest, 2 * n);
        }

        #[tokio::test(start_paused = true)]
        async fn a_failed_status_read_is_retried_on_the_next_relist() {
            let mut b = bed().await;
            start_pod(&b, "p2").await;
            b.fake.inject_error(
                "list_podsandbox",
                tonic::Status::unavailable("runtime busy"),
            );
            // The listing itself fails: nothing is recorded, no event.
            b.pleg.relist().await;
            assert!(drain(&mut b).is_empty());
            assert!(!b.state.has_relisted());
            // The listing works but reading the pod's status fails (its second
            // ListPodSandbox): its events are held back and it is not cached.
            b.fake.inject_error_after(
                "list_podsandbox",
                1,
                tonic::Status::unavailable("runtime busy"),
            );
            b.pleg.relist().await;
            assert!(drain(&mut b).is_empty(), "no events for an unread pod");
            assert!(b.cache.get("p2").is_none());
            // The next relist reads it again although nothing changed on the runtime, and
            // sends its events once.
            b.pleg.relist().await;
            let evs = drain(&mut b);
            assert_eq!(evs.len(), 2, "{evs:?}");
            assert!(b.cache.get("p2").is_some());
            b.pleg.relist().await;
            assert!(drain(&mut b).is_empty(), "no duplicate events");
        }
    }
}
