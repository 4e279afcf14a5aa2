//! Graceful node shutdown (upstream `pkg/kubelet/nodeshutdown`, feature `GracefulNodeShutdown`,
//! `shutdownGracePeriod` / `shutdownGracePeriodCriticalPods`). When the grace period is set, the
//! manager takes a systemd-logind *delay* inhibitor lock for shutdown, making sure logind's
//! `InhibitDelayMaxSec` is at least the grace period (a drop-in under
//! `/etc/systemd/logind.conf.d/` and a logind reload when it is not). When logind announces
//! `PrepareForShutdown(true)` the node is marked shutting down (its Ready condition turns False,
//! new pods are rejected with reason `NodeShutdown`), the regular pods are killed with
//! `shutdownGracePeriod - shutdownGracePeriodCriticalPods`, then the critical ones with
//! `shutdownGracePeriodCriticalPods`; each ends Failed with reason `Terminated`. Then the lock is
//! released and the shutdown goes on. `PrepareForShutdown(false)` (a cancelled shutdown) takes
//! the lock again. Without logind on the system bus the kubelet says so in one warning and runs
//! on without graceful shutdown, as upstream does.
//!
//! The manager gets what it needs from above as closures and a channel (the active pods, whether
//! a pod still runs, where kills go) and logind through the [`Logind`] trait ([`logind`] is the
//! D-Bus implementation), so its decisions are unit-tested without either.

pub mod logind;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Upstream `nodeShutdownReason`: the reason of a pod killed for the shutdown.
pub const REASON: &str = "Terminated";
/// Upstream `nodeShutdownMessage`.
pub const MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
/// Upstream `nodeShutdownNotAdmittedReason`: pods offered while shutting down.
pub const NOT_ADMITTED_REASON: &str = "NodeShutdown";
/// Upstream `nodeShutdownNotAdmittedMessage`.
pub const NOT_ADMITTED_MESSAGE: &str = "Pod was rejected as the node is shutting down.";
/// The Ready condition's message while shutting down (upstream `ShutdownStatus`).
pub const NOT_READY_MESSAGE: &str = "node is shutting down";
/// How often the manager looks whether a group's pods are gone.
const POLL: Duration = Duration::from_millis(200);

/// The shutdown grace periods (upstream `ShutdownGracePeriod*`); zero disables the manager.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShutdownConfig {
    /// `shutdownGracePeriod`: the whole delay the kubelet asks of the shutdown.
    pub grace_period: Duration,
    /// `shutdownGracePeriodCriticalPods`: the part of it reserved for critical pods.
    pub grace_period_critical_pods: Duration,
}

impl ShutdownConfig {
    /// True when graceful shutdown is on.
    pub fn enabled(&self) -> bool {
        !self.grace_period.is_zero()
    }
}

/// Whether the node is shutting down; shared with the node status and admission.
#[derive(Debug, Default)]
pub struct ShutdownState {
    shutting_down: AtomicBool,
}

impl ShutdownState {
    /// True between `PrepareForShutdown(true)` and a cancelled shutdown.
    pub fn shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    fn set(&self, on: bool) {
        self.shutting_down.store(on, Ordering::SeqCst);
    }

    /// Upstream's shutdown admit handler: `Err((reason, message))` while shutting down.
    pub fn admit(&self) -> Result<(), (&'static str, &'static str)> {
        if self.shutting_down() {
            Err((NOT_ADMITTED_REASON, NOT_ADMITTED_MESSAGE))
        } else {
            Ok(())
        }
    }
}

/// A pod the shutdown manager wants gone, with its grace period.
#[derive(Debug, Clone)]
pub struct ShutdownKill {
    /// The pod.
    pub pod: Pod,
    /// Its grace period in seconds.
    pub grace_seconds: i64,
}

/// The lock logind holds the shutdown for; dropping it releases it.
pub type InhibitLock = Box<dyn std::fmt::Debug + Send + Sync>;

/// What the manager asks of systemd-logind (upstream `systemd.DBusCon`).
#[async_trait]
pub trait Logind: Send + Sync {
    /// logind's `InhibitDelayMaxUSec`.
    async fn inhibit_delay_max(&self) -> Result<Duration, String>;
    /// Makes `InhibitDelayMaxSec` at least `delay` (a drop-in, then a logind reload).
    async fn override_inhibit_delay(&self, delay: Duration) -> Result<(), String>;
    /// Takes a delay inhibitor lock for shutdown.
    async fn inhibit_shutdown(&self) -> Result<InhibitLock, String>;
    /// `PrepareForShutdown` signals: true when a shutdown starts, false when cancelled.
    async fn shutdown_events(&self) -> Result<BoxStream<'static, bool>, String>;
}

/// The pods of a shutdown, in the order they are killed: regular pods, then critical ones,
/// each group with its grace period (upstream `groupByPriority` without
/// `shutdownGracePeriodByPodPriority`).
pub fn kill_groups(
    pods: Vec<Pod>,
    config: &ShutdownConfig,
    is_critical: impl Fn(&Pod) -> bool,
) -> Vec<(Vec<Pod>, Duration)> {
    let critical_grace = config.grace_period_critical_pods.min(config.grace_period);
    let regular_grace = config.grace_period - critical_grace;
    let (critical, regular): (Vec<Pod>, Vec<Pod>) = pods.into_iter().partition(|p| is_critical(p));
    vec![(regular, regular_grace), (critical, critical_grace)]
}

/// The graceful node shutdown manager (upstream `managerImpl`).
pub struct ShutdownManager {
    config: ShutdownConfig,
    state: Arc<ShutdownState>,
    /// The pods the kubelet runs (upstream `getPods`).
    pods: Arc<dyn Fn() -> Vec<Pod> + Send + Sync>,
    /// Whether the pod with this UID still has running containers or a ready sandbox.
    running: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    /// Is this pod critical (upstream `IsCriticalPod`).
    is_critical: Arc<dyn Fn(&Pod) -> bool + Send + Sync>,
    /// Where kills go (upstream `killPodFunc`).
    kill: mpsc::UnboundedSender<ShutdownKill>,
}

impl std::fmt::Debug for ShutdownManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShutdownManager")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What the shutdown manager needs from the kubelet.
pub struct ManagerParts {
    pub config: ShutdownConfig,
    pub state: Arc<ShutdownState>,
    pub pods: Arc<dyn Fn() -> Vec<Pod> + Send + Sync>,
    pub running: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    pub is_critical: Arc<dyn Fn(&Pod) -> bool + Send + Sync>,
    pub kill: mpsc::UnboundedSender<ShutdownKill>,
}

impl ShutdownManager {
    /// A manager from its parts.
    pub fn new(p: ManagerParts) -> Self {
        Self {
            config: p.config,
            state: p.state,
            pods: p.pods,
            running: p.running,
            is_critical: p.is_critical,
            kill: p.kill,
        }
    }

    /// Upstream `Start`: checks logind's delay, takes the lock, then follows the shutdown
    /// signals until `cancel`. Returns an error when logind cannot be used (the caller logs it;
    /// the kubelet runs on without graceful shutdown).
    pub async fn run(
        self,
        logind: Arc<dyn Logind>,
        cancel: CancellationToken,
    ) -> Result<(), String> {
        if !self.config.enabled() {
            return Ok(());
        }
        let want = self.config.grace_period;
        let current = logind.inhibit_delay_max().await?;
        if current < want {
            logind.override_inhibit_delay(want).await?;
            let now = logind.inhibit_delay_max().await?;
            if now < want {
                return Err(format!(
                    "node shutdown manager was unable to update logind InhibitDelayMaxSec to {want:?} (ShutdownGracePeriod), current value of InhibitDelayMaxSec ({now:?}) is less than requested ShutdownGracePeriod"
                ));
            }
        }
        let mut events = logind.shutdown_events().await?;
        let mut lock = Some(logind.inhibit_shutdown().await?);
        tracing::info!(grace = ?want, critical = ?self.config.grace_period_critical_pods, "graceful node shutdown: holding a delay inhibitor lock");
        loop {
            let start = tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                e = events.next() => match e {
                    Some(s) => s,
                    None => return Err("logind's PrepareForShutdown signal stream ended".into()),
                },
            };
            if start {
                tracing::info!("graceful node shutdown: shutdown event received, terminating pods");
                self.state.set(true);
                self.process_shutdown(&cancel).await;
                tracing::info!(
                    "graceful node shutdown: pods terminated, releasing the inhibitor lock"
                );
                lock = None;
            } else {
                tracing::info!("graceful node shutdown: shutdown cancelled");
                self.state.set(false);
                if lock.is_none() {
                    lock = Some(logind.inhibit_shutdown().await?);
                }
            }
            let _ = &lock;
        }
    }

    /// Upstream `processShutdownEvent`: each group killed in turn, waiting for it at most its
    /// grace period.
    async fn process_shutdown(&self, cancel: &CancellationToken) {
        let groups = kill_groups((self.pods)(), &self.config, |p| (self.is_critical)(p));
        for (pods, grace) in groups {
            if pods.is_empty() {
                continue;
            }
            let grace_seconds = i64::try_from(grace.as_secs()).unwrap_or(i64::MAX);
            let uids: Vec<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
            for pod in pods {
                tracing::info!(pod = %crate::container::pod_full_name(&pod), grace_seconds, "graceful node shutdown: killing pod");
                let _ = self.kill.send(ShutdownKill { pod, grace_seconds });
            }
            let deadline = tokio::time::Instant::now() + grace;
            while uids.iter().any(|u| (self.running)(u)) && tokio::time::Instant::now() < deadline {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(POLL) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use parking_lot::Mutex;

    fn pod(uid: &str, critical: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                name: Some(uid.into()),
                namespace: Some("default".into()),
                labels: critical.then(|| [("critical".to_string(), "y".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn critical(p: &Pod) -> bool {
        p.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("critical"))
    }

    fn config(total: u64, crit: u64) -> ShutdownConfig {
        ShutdownConfig {
            grace_period: Duration::from_secs(total),
            grace_period_critical_pods: Duration::from_secs(crit),
        }
    }

    #[test]
    fn regular_pods_go_first_with_what_critical_pods_leave() {
        let groups = kill_groups(
            vec![pod("a", true), pod("b", false)],
            &config(30, 10),
            critical,
        );
        let uids = |g: &Vec<Pod>| {
            g.iter()
                .filter_map(|p| p.metadata.uid.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(groups.len(), 2);
        assert_eq!(uids(&groups[0].0), vec!["b"]);
        assert_eq!(groups[0].1, Duration::from_secs(20));
        assert_eq!(uids(&groups[1].0), vec!["a"]);
        assert_eq!(groups[1].1, Duration::from_secs(10));
    }

    #[test]
    fn shutting_down_rejects_new_pods() {
        let s = ShutdownState::default();
        assert!(s.admit().is_ok());
        s.set(true);
        assert_eq!(s.admit(), Err((NOT_ADMITTED_REASON, NOT_ADMITTED_MESSAGE)));
    }

    /// A logind in memory: a delay, an inhibitor whose release is seen, and a signal sender.
    #[derive(Default)]
    struct FakeLogind {
        delay: Mutex<Duration>,
        overridable: bool,
        locks: Arc<Mutex<u32>>,
        events: Mutex<Option<mpsc::UnboundedReceiver<bool>>>,
    }

    #[derive(Debug)]
    struct Lock(Arc<Mutex<u32>>);
    impl Drop for Lock {
        fn drop(&mut self) {
            *self.0.lock() -= 1;
        }
    }

    #[async_trait]
    impl Logind for FakeLogind {
        async fn inhibit_delay_max(&self) -> Result<Duration, String> {
            Ok(*self.delay.lock())
        }
        async fn override_inhibit_delay(&self, delay: Duration) -> Result<(), String> {
            if self.overridable {
                *self.delay.lock() = delay;
            }
            Ok(())
        }
        async fn inhibit_shutdown(&self) -> Result<InhibitLock, String> {
            *self.locks.lock() += 1;
            Ok(Box::new(Lock(Arc::clone(&self.locks))))
        }
        async fn shutdown_events(&self) -> Result<BoxStream<'static, bool>, String> {
            let rx = self.events.lock().take().ok_or("once")?;
            Ok(tokio_stream_from(rx))
        }
    }

    fn tokio_stream_from(rx: mpsc::UnboundedReceiver<bool>) -> BoxStream<'static, bool> {
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
            .boxed()
    }

    struct Bed {
        logind: Arc<FakeLogind>,
        signals: mpsc::UnboundedSender<bool>,
        kills: mpsc::UnboundedReceiver<ShutdownKill>,
        running: Arc<Mutex<HashSet<String>>>,
        state: Arc<ShutdownState>,
        cancel: CancellationToken,
        task: tokio::task::JoinHandle<Result<(), String>>,
    }

    fn start(delay: u64, overridable: bool, pods: Vec<Pod>) -> Bed {
        let (signals, rx) = mpsc::unbounded_channel();
        let logind = Arc::new(FakeLogind {
            delay: Mutex::new(Duration::from_secs(delay)),
            overridable,
            events: Mutex::new(Some(rx)),
            ..Default::default()
        });
        let running: Arc<Mutex<HashSet<String>>> = Arc::new(Mutex::new(
            pods.iter().filter_map(|p| p.metadata.uid.clone()).collect(),
        ));
        let (kill, kills) = mpsc::unbounded_channel();
        let state = Arc::new(ShutdownState::default());
        let r = Arc::clone(&running);
        let manager = ShutdownManager::new(ManagerParts {
            config: config(30, 10),
            state: Arc::clone(&state),
            pods: Arc::new(move || pods.clone()),
            running: Arc::new(move |uid| r.lock().contains(uid)),
            is_critical: Arc::new(critical),
            kill,
        });
        let cancel = CancellationToken::new();
        let task = tokio::spawn(manager.run(logind.clone(), cancel.clone()));
        Bed {
            logind,
            signals,
            kills,
            running,
            state,
            cancel,
            task,
        }
    }

    fn locks(b: &Bed) -> u32 {
        *b.logind.locks.lock()
    }

    #[tokio::test(start_paused = true)]
    async fn a_shutdown_kills_regular_then_critical_pods_then_releases_the_lock() {
        let mut b = start(60, false, vec![pod("crit", true), pod("reg", false)]);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(locks(&b), 1, "the lock is held while running");
        let _ = b.signals.send(true);
        let first = b.kills.recv().await.expect("a kill");
        assert_eq!(first.pod.metadata.uid.as_deref(), Some("reg"));
        assert_eq!(first.grace_seconds, 20);
        assert!(b.state.shutting_down());
        // The critical pod waits until the regular one is gone.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(b.kills.try_recv().is_err());
        b.running.lock().remove("reg");
        let second = b.kills.recv().await.expect("a kill");
        assert_eq!(second.pod.metadata.uid.as_deref(), Some("crit"));
        assert_eq!(second.grace_seconds, 10);
        assert_eq!(locks(&b), 1, "held until the critical pods are gone too");
        b.running.lock().remove("crit");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(locks(&b), 0, "released once every pod is gone");
        // A cancelled shutdown takes the lock again.
        let _ = b.signals.send(false);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(locks(&b), 1);
        assert!(!b.state.shutting_down());
        b.cancel.cancel();
        assert_eq!(b.task.await.ok(), Some(Ok(())));
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_that_outlives_its_grace_does_not_hold_the_shutdown() {
        let mut b = start(60, false, vec![pod("stuck", false)]);
        tokio::time::sleep(Duration::from_millis(10)).await;
        let _ = b.signals.send(true);
        assert!(b.kills.recv().await.is_some());
        tokio::time::sleep(Duration::from_secs(21)).await;
        assert_eq!(locks(&b), 0, "released after the group's 20 s");
        b.cancel.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_inhibit_delay_is_raised_or_refused() {
        let b = start(5, true, vec![]);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            b.logind.inhibit_delay_max().await,
            Ok(Duration::from_secs(30))
        );
        assert_eq!(locks(&b), 1);
        b.cancel.cancel();
        let b = start(5, false, vec![]);
        let logind = Arc::clone(&b.logind);
        let r = b.task.await.expect("joined");
        assert!(
            r.as_ref()
                .is_err_and(|e| e.contains("unable to update logind InhibitDelayMaxSec")),
            "{r:?}"
        );
        assert_eq!(*logind.locks.lock(), 0);
    }
}
