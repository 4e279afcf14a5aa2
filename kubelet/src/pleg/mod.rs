//! The pod lifecycle event generator (upstream `pkg/kubelet/pleg/generic.go`): relist the
//! runtime every second, compare each pod's containers and sandboxes with the previous relist,
//! emit [`PodLifecycleEvent`]s, and refresh the pod status cache for pods that changed. It also
//! publishes the last relist's snapshot (used by housekeeping to find orphaned pods) and its
//! health: unhealthy when no relist finished for [`RELIST_THRESHOLD`].

pub mod evented;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::container::{ContainerState, PodStatus};
use crate::kuberuntime::{KubeGenericRuntimeManager, RuntimePod};
use crate::metrics::Metrics;

/// Upstream `relistPeriod`.
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);
/// How long one pod's status read may take during a relist.
pub const STATUS_READ_TIMEOUT: Duration = Duration::from_secs(5);
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
/// when it was read.
#[derive(Debug, Clone, Default)]
pub struct PodCache {
    inner: Arc<RwLock<HashMap<String, (PodStatus, Instant)>>>,
}

impl PodCache {
    /// The cached status of `uid` and when it was read.
    pub fn get(&self, uid: &str) -> Option<(PodStatus, Instant)> {
        self.inner.read().ok().and_then(|m| m.get(uid).cloned())
    }

    /// Store `status`.
    pub fn set(&self, uid: &str, status: PodStatus) {
        if let Ok(mut m) = self.inner.write() {
            m.insert(uid.to_string(), (status, Instant::now()));
        }
    }

    /// Forget `uid`.
    pub fn delete(&self, uid: &str) {
        if let Ok(mut m) = self.inner.write() {
            m.remove(uid);
        }
    }
}

/// What the PLEG publishes for the rest of the kubelet.
#[derive(Debug, Default)]
pub struct PlegState {
    last_relist: RwLock<Option<Instant>>,
    pods: RwLock<Vec<RuntimePod>>,
}

impl PlegState {
    /// Upstream `Healthy`: Ok, or the reason it is not.
    pub fn healthy(&self) -> Result<(), String> {
        let last = self.last_relist.read().ok().and_then(|l| *l);
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
        self.pods.read().map(|p| p.clone()).unwrap_or_default()
    }

    /// True once a relist finished.
    pub fn has_relisted(&self) -> bool {
        self.last_relist.read().ok().and_then(|l| *l).is_some()
    }
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
        let running_containers = pods
            .iter()
            .flat_map(|p| &p.containers)
            .filter(|c| c.state == ContainerState::Running)
            .count();
        self.metrics.set_running(
            i64::try_from(running_pods).unwrap_or(i64::MAX),
            i64::try_from(running_containers).unwrap_or(i64::MAX),
        );
        let current: HashMap<String, RuntimePod> =
            pods.iter().map(|p| (p.id.clone(), p.clone())).collect();
        let uids: HashSet<&String> = self.records.keys().chain(current.keys()).collect();
        let mut events = vec![];
        let mut changed = vec![];
        for uid in uids {
            let evs = compute_events(uid, self.records.get(uid), current.get(uid));
            if !evs.is_empty() {
                changed.push(uid.clone());
                events.extend(evs);
            }
        }
        // The changed pods' statuses are read at once, each with its own deadline, so one slow
        // runtime call does not hold up the others; a pod whose read failed keeps its old
        // record and is looked at again on the next relist (upstream `needsReinspection`).
        let reads = changed.iter().filter_map(|uid| {
            let p = current.get(uid)?;
            let rt = self.runtime.clone();
            Some(async move {
                let r = tokio::time::timeout(
                    STATUS_READ_TIMEOUT,
                    rt.get_pod_status(&p.id, &p.name, &p.namespace),
                )
                .await;
                (p, r)
            })
        });
        let mut reinspect = HashSet::new();
        for (p, r) in futures::future::join_all(reads).await {
            match r {
                Ok(Ok(s)) => self.cache.set(&p.id, s),
                Ok(Err(e)) => {
                    tracing::warn!(pod = %p.name, error = %e, "PLEG: cannot read pod status");
                    reinspect.insert(p.id.clone());
                }
                Err(_) => {
                    tracing::warn!(pod = %p.name, "PLEG: reading pod status timed out");
                    reinspect.insert(p.id.clone());
                }
            }
        }
        for uid in changed.iter().filter(|u| !current.contains_key(*u)) {
            self.cache.delete(uid);
        }
        for e in events {
            tracing::debug!(pod_uid = %e.id, event = ?e.type_, data = %e.data, "PLEG event");
            if self.events.try_send(e).is_err() {
                tracing::error!("PLEG event channel is full, discarding event");
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
        if let Ok(mut p) = self.state.pods.write() {
            *p = pods;
        }
        if let Ok(mut l) = self.state.last_relist.write() {
            *l = Some(Instant::now());
        }
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
        if let Ok(mut l) = s.last_relist.write() {
            *l = Instant::now().checked_sub(Duration::from_secs(200));
        }
        assert!(s.healthy().is_err());
    }
}
