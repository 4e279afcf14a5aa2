//! Garbage collection of dead containers and sandboxes (upstream
//! `pkg/kubelet/kuberuntime/kuberuntime_gc.go`; unused images are [`crate::images`]'s). The
//! selection is pure ([`select_containers`], [`select_sandboxes`]); [`ContainerGc`] applies
//! it through CRI.
//!
//! Containers: dead containers older than `minAge` are grouped per (pod UID, container name)
//! ("evict units", newest first). Units of pods that no longer exist are removed entirely;
//! then each unit keeps at most `maxPerPodContainer`; then, when more than `maxContainers` dead
//! containers remain, each unit is cut to `maxContainers / units` (at least 1) and the oldest
//! overall go. A removed container's log files go with it. Sandboxes: not ready and without
//! containers; all of a removed pod's go, an existing pod keeps its newest.
//!
//! Deviations (shared test-bed runtimes): only pods whose names end in this node's name are
//! collected (see `types::owned_by_node`), and images can be limited to a repo-tag prefix.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use std::time::Duration;

use chrono::Utc;
use cri_proto::runtime::v1 as cri;

use crate::kuberuntime::KubeGenericRuntimeManager;
use crate::kuberuntime::labels::{CONTAINER_NAME_LABEL, POD_NAME_LABEL, POD_UID_LABEL};
use crate::kuberuntime::manager::RuntimeError;

/// Container GC policy (upstream `GCPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerGcPolicy {
    /// Minimum age of a dead container before it may be collected.
    pub min_age: Duration,
    /// Dead containers kept per (pod, container name); negative = no limit.
    pub max_per_pod_container: i32,
    /// Dead containers kept in total; negative = no limit.
    pub max_containers: i32,
}

/// A container as the GC sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcContainer {
    /// Runtime id.
    pub id: String,
    /// Pod UID.
    pub pod_uid: String,
    /// Container name.
    pub name: String,
    /// Creation time (ns since the epoch).
    pub created_at: i64,
    /// Running (never collected).
    pub running: bool,
    /// Sandbox id.
    pub sandbox_id: String,
}

/// A sandbox as the GC sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcSandbox {
    /// Runtime id.
    pub id: String,
    /// Pod UID.
    pub pod_uid: String,
    /// Creation time (ns).
    pub created_at: i64,
    /// Ready, or has containers: never removed.
    pub active: bool,
}

fn remove_oldest(unit: &mut Vec<&GcContainer>, n: usize, out: &mut Vec<String>) {
    // `unit` is newest first: the oldest are at the end.
    let keep = unit.len().saturating_sub(n);
    for c in unit.drain(keep..) {
        out.push(c.id.clone());
    }
}

/// Upstream `evictContainers`: the ids of dead containers to remove, oldest first within each
/// step. `pod_removed(uid)` says the pod no longer exists.
pub fn select_containers(
    containers: &[GcContainer],
    policy: &ContainerGcPolicy,
    now_ns: i64,
    pod_removed: impl Fn(&str) -> bool,
) -> Vec<String> {
    let min_age = i64::try_from(policy.min_age.as_nanos()).unwrap_or(i64::MAX);
    let newest_gc_time = now_ns.saturating_sub(min_age);
    let mut units: HashMap<(&str, &str), Vec<&GcContainer>> = HashMap::new();
    for c in containers {
        if c.running || c.created_at > newest_gc_time {
            continue;
        }
        units
            .entry((c.pod_uid.as_str(), c.name.as_str()))
            .or_default()
            .push(c);
    }
    for u in units.values_mut() {
        u.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    }
    let mut out = Vec::new();
    let mut keys: Vec<(&str, &str)> = units.keys().copied().collect();
    keys.sort();
    for k in &keys {
        if pod_removed(k.0)
            && let Some(mut u) = units.remove(k)
        {
            let n = u.len();
            remove_oldest(&mut u, n, &mut out);
        }
    }
    let enforce = |units: &mut HashMap<(&str, &str), Vec<&GcContainer>>,
                   max: usize,
                   out: &mut Vec<String>| {
        let mut keys: Vec<(&str, &str)> = units.keys().copied().collect();
        keys.sort();
        for k in keys {
            if let Some(u) = units.get_mut(&k)
                && u.len() > max
            {
                let n = u.len() - max;
                remove_oldest(u, n, out);
            }
        }
    };
    if let Ok(max) = usize::try_from(policy.max_per_pod_container) {
        enforce(&mut units, max, &mut out);
    }
    if let Ok(max) = usize::try_from(policy.max_containers) {
        let total: usize = units.values().map(Vec::len).sum();
        if total > max {
            let per_unit = (max / units.len().max(1)).max(1);
            enforce(&mut units, per_unit, &mut out);
            let mut flat: Vec<&GcContainer> = units.values().flatten().copied().collect();
            if flat.len() > max {
                flat.sort_by_key(|c| std::cmp::Reverse(c.created_at));
                let n = flat.len() - max;
                remove_oldest(&mut flat, n, &mut out);
            }
        }
    }
    out
}

/// Upstream `evictSandboxes`: inactive sandboxes to remove; a pod that still exists keeps its
/// newest sandbox.
pub fn select_sandboxes(
    sandboxes: &[GcSandbox],
    pod_removed: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut by_pod: HashMap<&str, Vec<&GcSandbox>> = HashMap::new();
    for s in sandboxes {
        by_pod.entry(s.pod_uid.as_str()).or_default().push(s);
    }
    let mut pods: Vec<&str> = by_pod.keys().copied().collect();
    pods.sort();
    let mut out = Vec::new();
    for uid in pods {
        let Some(mut list) = by_pod.remove(uid) else {
            continue;
        };
        list.sort_by_key(|s| std::cmp::Reverse(s.created_at));
        let keep = if pod_removed(uid) { 0 } else { 1 };
        for s in list.iter().skip(keep).rev() {
            if !s.active {
                out.push(s.id.clone());
            }
        }
    }
    out
}

/// The container garbage collector (upstream `containerGC`).
#[derive(Debug, Clone)]
pub struct ContainerGc {
    runtime: KubeGenericRuntimeManager,
    policy: ContainerGcPolicy,
    node_name: String,
}

impl ContainerGc {
    /// A collector for `runtime` with `policy`, for the pods of `node_name`.
    pub fn new(
        runtime: KubeGenericRuntimeManager,
        policy: ContainerGcPolicy,
        node_name: String,
    ) -> Self {
        Self {
            runtime,
            policy,
            node_name,
        }
    }

    /// Upstream `GarbageCollect`: pods not in `known` are removed ones.
    pub async fn garbage_collect(&self, known: &HashSet<String>) -> Result<(), RuntimeError> {
        let owned = |labels: &HashMap<String, String>| {
            labels
                .get(POD_NAME_LABEL)
                .is_some_and(|n| crate::types::owned_by_node(n, &self.node_name))
                && labels.contains_key(POD_UID_LABEL)
        };
        let containers: Vec<GcContainer> = self
            .runtime
            .list_containers(HashMap::new())
            .await?
            .into_iter()
            .filter(|c| owned(&c.labels))
            .map(|c| GcContainer {
                pod_uid: c.labels.get(POD_UID_LABEL).cloned().unwrap_or_default(),
                name: c
                    .labels
                    .get(CONTAINER_NAME_LABEL)
                    .cloned()
                    .or_else(|| c.metadata.as_ref().map(|m| m.name.clone()))
                    .unwrap_or_default(),
                running: c.state == cri::ContainerState::ContainerRunning as i32,
                created_at: c.created_at,
                sandbox_id: c.pod_sandbox_id,
                id: c.id,
            })
            .collect();
        let now = Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX);
        let removed = |uid: &str| !known.contains(uid);
        for id in select_containers(&containers, &self.policy, now, removed) {
            // Upstream `removeContainer`: the container's logs go first.
            match self.runtime.container_log_info(&id).await {
                Ok((path, _)) if !path.is_empty() => {
                    crate::logs::remove_container_logs(Path::new(&path))
                }
                _ => {}
            }
            tracing::info!(container = %id, "garbage collecting dead container");
            if let Err(e) = self.runtime.remove_container(&id).await {
                tracing::warn!(container = %id, error = %e, "failed to remove dead container");
            }
        }
        let remaining: HashSet<String> = self
            .runtime
            .list_containers(HashMap::new())
            .await?
            .into_iter()
            .map(|c| c.pod_sandbox_id)
            .collect();
        let sandboxes: Vec<GcSandbox> = self
            .runtime
            .list_sandboxes(HashMap::new())
            .await?
            .into_iter()
            .filter(|s| owned(&s.labels))
            .map(|s| GcSandbox {
                pod_uid: s.labels.get(POD_UID_LABEL).cloned().unwrap_or_default(),
                created_at: s.created_at,
                active: s.state == cri::PodSandboxState::SandboxReady as i32
                    || remaining.contains(&s.id),
                id: s.id,
            })
            .collect();
        for id in select_sandboxes(&sandboxes, removed) {
            tracing::info!(sandbox = %id, "garbage collecting sandbox");
            if let Err(e) = self.runtime.remove_sandbox(&id).await {
                tracing::warn!(sandbox = %id, error = %e, "failed to remove sandbox");
            }
        }
        Ok(())
    }
}

impl ContainerGc {
    /// Upstream `cleanupOrphanedPodDirs` and `cleanupOrphanedPodCgroups`: every pod with a
    /// directory under the kubelet's root that is not in `known` (no source, no worker,
    /// nothing on the runtime) loses its cgroups, log directories and pod directory
    /// (blocking: run off the async threads).
    pub fn clean_up_orphaned_pods(&self, known: &HashSet<String>) {
        for uid in self.runtime.pod_dir_uids() {
            if !known.contains(&uid) {
                self.runtime.clean_up_orphaned_pod(&uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kuberuntime::labels::POD_UID_LABEL;

    fn c(id: &str, pod: &str, name: &str, t: i64, running: bool) -> GcContainer {
        GcContainer {
            id: id.into(),
            pod_uid: pod.into(),
            name: name.into(),
            created_at: t,
            running,
            sandbox_id: String::new(),
        }
    }

    fn policy(min_age: u64, per: i32, max: i32) -> ContainerGcPolicy {
        ContainerGcPolicy {
            min_age: Duration::from_nanos(min_age),
            max_per_pod_container: per,
            max_containers: max,
        }
    }

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    #[test]
    fn container_selection() {
        let cs = vec![
            c("a1", "p", "a", 1, false),
            c("a2", "p", "a", 2, false),
            c("a3", "p", "a", 3, false),
            c("a4", "p", "a", 4, true),
            c("b1", "p", "b", 5, false),
            c("gone1", "q", "x", 6, false),
            c("gone2", "q", "x", 7, false),
            c("young", "p", "c", 100, false),
        ];
        let known = |uid: &str| uid == "q";
        // Default policy: keep 1 dead per container; removed pods lose everything; minAge
        // protects young ones.
        assert_eq!(
            sorted(select_containers(&cs, &policy(50, 1, -1), 100, known)),
            vec!["a1", "a2", "gone1", "gone2"]
        );
        // Keep 2 per container.
        assert_eq!(
            sorted(select_containers(&cs, &policy(50, 2, -1), 100, |_| false)),
            vec!["a1"]
        );
        // No per-container limit, at most 2 in total: per unit max(2/2,1)=1, then oldest.
        assert_eq!(
            sorted(select_containers(&cs, &policy(50, -1, 2), 100, |u| u == "q")),
            vec!["a1", "a2", "gone1", "gone2"]
        );
        // At most 1 in total over 2 units: 1 per unit, then the oldest overall goes.
        assert_eq!(
            sorted(select_containers(&cs, &policy(50, -1, 1), 100, |u| u == "q")),
            vec!["a1", "a2", "a3", "gone1", "gone2"]
        );
        // No limits at all: only removed pods.
        assert_eq!(
            sorted(select_containers(&cs, &policy(0, -1, -1), 100, |u| u == "q")),
            vec!["gone1", "gone2"]
        );
        // Zero per container: every dead container of existing pods goes (not the running one).
        assert_eq!(
            sorted(select_containers(&cs, &policy(0, 0, -1), 1000, |_| false)),
            vec!["a1", "a2", "a3", "b1", "gone1", "gone2", "young"]
        );
    }

    #[test]
    fn sandbox_selection() {
        let s = |id: &str, pod: &str, t: i64, active: bool| GcSandbox {
            id: id.into(),
            pod_uid: pod.into(),
            created_at: t,
            active,
        };
        let sbs = vec![
            s("p1", "p", 1, false),
            s("p2", "p", 2, false),
            s("p3", "p", 3, true),
            s("q1", "q", 1, false),
            s("q2", "q", 2, true),
            s("r1", "r", 1, false),
            s("r2", "r", 2, false),
        ];
        // p exists: its newest (active) stays, older inactive go. q removed: inactive go,
        // active stay. r exists: newest dead one kept.
        assert_eq!(
            sorted(select_sandboxes(&sbs, |u| u == "q")),
            vec!["p1", "p2", "q1", "r1"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn dead_containers_go_when_their_pod_is_gone() {
        use crate::cri::RuntimeService;
        let dir = tempfile::tempdir().expect("tempdir");
        let (fake, runtime) = KubeGenericRuntimeManager::fake(dir.path()).await;
        let gc = ContainerGc::new(runtime.clone(), policy(0, 1, -1), "node1".into());
        crate::kuberuntime::manager::testing::run_pod(&runtime, "g1", "busybox:1", "Never").await;
        let id = fake.containers()[0].1.id.clone();
        fake.exit_container(&id, 0);
        // The pod still exists: its one dead container is kept (maxPerPodContainer 1).
        gc.garbage_collect(&HashSet::from(["g1".to_string()]))
            .await
            .expect("gc");
        assert_eq!(fake.containers().len(), 1);
        // The pod is gone and its sandbox stopped: container and sandbox go.
        let sandbox = fake.sandboxes()[0].id.clone();
        fake.stop_pod_sandbox(&sandbox).await.expect("stop");
        gc.garbage_collect(&HashSet::new()).await.expect("gc");
        assert!(fake.containers().is_empty());
        assert!(fake.sandboxes().is_empty());
    }

    /// Upstream `removeSandbox`: a removed pod's sandbox that nothing stopped (its
    /// termination failed while the runtime was down) is stopped before it is removed, so its
    /// network (pod IP, CNI state) is torn down; when the stop fails it is kept for the next
    /// collection.
    #[tokio::test(start_paused = true)]
    async fn a_sandbox_is_stopped_before_it_is_removed() {
        use crate::cri::RuntimeService;
        let dir = tempfile::tempdir().expect("tempdir");
        let (fake, runtime) = KubeGenericRuntimeManager::fake(dir.path()).await;
        let gc = ContainerGc::new(runtime.clone(), policy(0, 1, -1), "node1".into());
        crate::kuberuntime::manager::testing::run_pod(&runtime, "g4", "busybox:1", "Never").await;
        let id = fake.containers()[0].1.id.clone();
        fake.exit_container(&id, 0);
        let sandbox = fake.sandboxes()[0].id.clone();
        // A sandbox that died with the runtime reads not ready, though never stopped.
        fake.stop_pod_sandbox(&sandbox).await.expect("stop");
        fake.clear_calls();
        fake.inject_error(
            "stop_podsandbox",
            tonic::Status::unavailable("runtime down"),
        );
        gc.garbage_collect(&HashSet::new()).await.expect("gc");
        assert_eq!(fake.sandboxes().len(), 1, "kept when the stop fails");
        assert_eq!(fake.call_count("remove_podsandbox"), 0);
        gc.garbage_collect(&HashSet::new()).await.expect("gc");
        assert!(fake.sandboxes().is_empty());
        let calls: Vec<String> = fake
            .calls()
            .into_iter()
            .filter(|c| c == "stop_podsandbox" || c == "remove_podsandbox")
            .collect();
        assert_eq!(
            calls,
            vec!["stop_podsandbox", "stop_podsandbox", "remove_podsandbox"],
            "stopped, then removed"
        );
    }

    /// A pod whose termination was cut short after the runtime's removal (the kubelet killed)
    /// leaves its pod directory: housekeeping removes those of pods nothing knows.
    #[tokio::test(start_paused = true)]
    async fn orphaned_pod_directories_go_known_ones_stay() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_fake, runtime) = KubeGenericRuntimeManager::fake(dir.path()).await;
        let gc = ContainerGc::new(runtime.clone(), policy(0, 1, -1), "node1".into());
        for uid in ["known", "gone"] {
            std::fs::create_dir_all(runtime.pod_dir(uid).join("volumes")).expect("mkdir");
        }
        gc.clean_up_orphaned_pods(&HashSet::from(["known".to_string()]));
        assert!(runtime.pod_dir("known").exists());
        assert!(!runtime.pod_dir("gone").exists());
    }

    #[tokio::test(start_paused = true)]
    async fn running_containers_and_other_nodes_pods_are_never_collected() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (fake, runtime) = KubeGenericRuntimeManager::fake(dir.path()).await;
        crate::kuberuntime::manager::testing::run_pod(&runtime, "g2", "busybox:1", "Always").await;
        // Another node's collector does not own `g2-node1`.
        let other = ContainerGc::new(runtime.clone(), policy(0, 0, 0), "node2".into());
        let id = fake.containers()[0].1.id.clone();
        fake.exit_container(&id, 1);
        other.garbage_collect(&HashSet::new()).await.expect("gc");
        assert_eq!(fake.containers().len(), 1);
        // This node's collector keeps the running one.
        crate::kuberuntime::manager::testing::run_pod(&runtime, "g3", "busybox:1", "Always").await;
        let gc = ContainerGc::new(runtime.clone(), policy(0, 0, 0), "node1".into());
        gc.garbage_collect(&HashSet::new()).await.expect("gc");
        let left: Vec<String> = fake
            .containers()
            .into_iter()
            .filter_map(|(_, c)| c.labels.get(POD_UID_LABEL).cloned())
            .collect();
        assert_eq!(
            left,
            vec!["g3".to_string()],
            "only the running container stays"
        );
    }
}
