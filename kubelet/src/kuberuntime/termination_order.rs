//! The order in which a pod's containers stop (upstream `terminationOrdering` in
//! `pkg/kubelet/kuberuntime/kuberuntime_termination_order.go`, feature `SidecarContainers`):
//! app and ephemeral containers stop at once; each sidecar (an init container with
//! `restartPolicy: Always`) waits until every app container stopped and every sidecar declared
//! after it stopped, so sidecars stop in reverse order, after the containers they serve. The
//! wait is bounded by the container's grace period and uses it up: what remains is given to
//! `StopContainer`. Containers that are not running count as stopped from the start.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::container::{init_containers, is_restartable_init_container};

/// Who waits for whom while a pod's containers stop (upstream `terminationOrdering`).
#[derive(Debug)]
pub struct TerminationOrdering {
    /// Container name → the containers that must stop before it.
    prereqs: HashMap<String, Vec<String>>,
    /// Names of the containers that stopped (or never ran).
    terminated: watch::Sender<HashSet<String>>,
}

impl TerminationOrdering {
    /// The ordering for `pod`, of which the containers named in `running` are running.
    pub fn new<'a>(pod: &Pod, running: impl IntoIterator<Item = &'a str>) -> Self {
        let running: HashSet<&str> = running.into_iter().collect();
        let mut prereqs: HashMap<String, Vec<String>> = HashMap::new();
        let mains: Vec<String> = pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .map(|c| c.name.clone())
            .collect();
        let mut later_sidecar: Option<&str> = None;
        for ic in init_containers(pod).iter().rev() {
            if !is_restartable_init_container(ic) {
                continue;
            }
            let mut waits = mains.clone();
            waits.extend(later_sidecar.map(str::to_string));
            prereqs.insert(ic.name.clone(), waits);
            later_sidecar = Some(&ic.name);
        }
        let stopped: HashSet<String> = prereqs
            .values()
            .flatten()
            .filter(|n| !running.contains(n.as_str()))
            .cloned()
            .collect();
        Self {
            prereqs,
            terminated: watch::channel(stopped).0,
        }
    }

    /// Upstream `waitForTurn`: wait (at most `grace_secs`) until every container `name` must
    /// outlive has stopped; returns how long it waited.
    pub async fn wait_for_turn(&self, name: &str, grace_secs: i64) -> Duration {
        let start = Instant::now();
        let Some(waits) = self.prereqs.get(name).filter(|w| !w.is_empty()) else {
            return Duration::ZERO;
        };
        let budget = Duration::from_secs(u64::try_from(grace_secs).unwrap_or(0));
        let mut rx = self.terminated.subscribe();
        let done = rx.wait_for(|stopped| waits.iter().all(|w| stopped.contains(w)));
        if tokio::time::timeout(budget, done).await.is_err() {
            tracing::info!(container = %name, "the containers it waits for did not stop in its grace period");
        }
        start.elapsed()
    }

    /// Upstream `containerTerminated`: `name` stopped, those waiting for it may go on.
    pub fn container_terminated(&self, name: &str) {
        self.terminated.send_modify(|s| {
            s.insert(name.to_string());
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    fn c(name: &str, sidecar: bool) -> Container {
        Container {
            name: name.into(),
            restart_policy: sidecar.then(|| "Always".to_string()),
            ..Default::default()
        }
    }

    fn pod() -> Pod {
        Pod {
            spec: Some(PodSpec {
                init_containers: Some(vec![c("s1", true), c("init", false), c("s2", true)]),
                containers: vec![c("main", false)],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn sidecars_wait_for_the_app_and_for_later_sidecars() {
        let order = std::sync::Arc::new(TerminationOrdering::new(&pod(), ["main", "s1", "s2"]));
        assert_eq!(order.wait_for_turn("main", 30).await, Duration::ZERO);
        let s1 = tokio::spawn({
            let o = order.clone();
            async move { o.wait_for_turn("s1", 30).await }
        });
        let s2 = tokio::spawn({
            let o = order.clone();
            async move { o.wait_for_turn("s2", 30).await }
        });
        tokio::task::yield_now().await;
        assert!(!s1.is_finished() && !s2.is_finished());
        order.container_terminated("main");
        tokio::task::yield_now().await;
        s2.await.expect("s2");
        assert!(!s1.is_finished(), "s1 waits for s2, declared after it");
        order.container_terminated("s2");
        s1.await.expect("s1");
    }

    #[tokio::test(start_paused = true)]
    async fn stopped_containers_do_not_hold_anyone_and_the_wait_is_bounded() {
        // main is not running: s2 goes at once; s1 waits for s2 at most its grace period.
        let order = TerminationOrdering::new(&pod(), ["s1", "s2"]);
        assert_eq!(order.wait_for_turn("s2", 30).await, Duration::ZERO);
        assert_eq!(order.wait_for_turn("s1", 5).await, Duration::from_secs(5));
    }
}
