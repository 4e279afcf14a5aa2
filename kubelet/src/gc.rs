//! Garbage collection of dead containers, sandboxes and unused images (upstream
//! `pkg/kubelet/kuberuntime/kuberuntime_gc.go` and `pkg/kubelet/images/image_gc_manager.go`).
//! The selection is pure ([`select_containers`], [`select_sandboxes`], [`select_images`]);
//! [`ContainerGc`] and [`ImageGcManager`] apply it through CRI.
//!
//! Containers: dead containers older than `minAge` are grouped per (pod UID, container name)
//! ("evict units", newest first). Units of pods that no longer exist are removed entirely;
//! then each unit keeps at most `maxPerPodContainer`; then, when more than `maxContainers` dead
//! containers remain, each unit is cut to `maxContainers / units` (at least 1) and the oldest
//! overall go. A removed container's log files go with it. Sandboxes: not ready and without
//! containers; all of a removed pod's go, an existing pod keeps its newest.
//!
//! Images: when the image filesystem's usage reaches the high threshold, unused images are
//! removed, least recently used first (then first detected), until usage is down to the low
//! threshold; images in use by any container, the sandbox image, pinned images and images
//! first seen less than `minAge` ago are kept.
//!
//! Deviations (shared test-bed runtimes): only pods whose names end in this node's name are
//! collected (see `types::owned_by_node`), and images can be limited to a repo-tag prefix.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
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

/// Image GC policy (upstream `ImageGCPolicy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageGcPolicy {
    /// Usage percent at or above which GC runs.
    pub high_threshold_percent: i32,
    /// Usage percent GC frees down to.
    pub low_threshold_percent: i32,
    /// Minimum time since an image was first detected.
    pub min_age: Duration,
    /// Only images with a repo tag starting with this are candidates (empty: all).
    pub ref_prefix: String,
}

/// What the image GC knows about one image (upstream `imageRecord`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRecord {
    /// When the GC first saw it.
    pub first_detected: DateTime<Utc>,
    /// When a container last used it (None: never seen in use).
    pub last_used: Option<DateTime<Utc>>,
    /// Size in bytes.
    pub size: u64,
}

/// An image as the runtime lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcImage {
    /// Image id.
    pub id: String,
    /// Repo tags.
    pub repo_tags: Vec<String>,
    /// Pinned by the runtime (never collected).
    pub pinned: bool,
}

/// Bytes to free to get from `available` of `capacity` down to `low` percent usage, when usage
/// is at or above `high` percent (upstream `GarbageCollect`); None when under the threshold.
pub fn bytes_to_free(capacity: u64, available: u64, high: i32, low: i32) -> Option<u64> {
    if capacity == 0 {
        return None;
    }
    let available = available.min(capacity);
    let usage_percent = 100 - (u128::from(available) * 100 / u128::from(capacity)) as i64;
    if usage_percent < i64::from(high) {
        return None;
    }
    let low = u64::try_from(low.clamp(0, 100)).unwrap_or(0);
    let target_available = capacity / 100 * (100 - low) + capacity % 100 * (100 - low) / 100;
    Some(target_available.saturating_sub(available))
}

/// Upstream `freeSpace` selection: unused images to remove, least recently used first, until
/// `to_free` bytes are reached.
pub fn select_images(
    images: &[GcImage],
    records: &HashMap<String, ImageRecord>,
    in_use: &HashSet<String>,
    policy: &ImageGcPolicy,
    now: DateTime<Utc>,
    to_free: u64,
) -> Vec<(String, u64)> {
    let min_age = chrono::Duration::from_std(policy.min_age).unwrap_or(chrono::Duration::MAX);
    let mut candidates: Vec<(&GcImage, &ImageRecord)> = images
        .iter()
        .filter(|i| !i.pinned && !in_use.contains(&i.id))
        .filter(|i| {
            policy.ref_prefix.is_empty()
                || i.repo_tags
                    .iter()
                    .any(|t| t.starts_with(&policy.ref_prefix))
        })
        .filter_map(|i| records.get(&i.id).map(|r| (i, r)))
        .filter(|(_, r)| now - r.first_detected >= min_age)
        .collect();
    candidates.sort_by(|a, b| {
        (a.1.last_used, a.1.first_detected, &a.0.id).cmp(&(
            b.1.last_used,
            b.1.first_detected,
            &b.0.id,
        ))
    });
    let mut freed = 0u64;
    let mut out = Vec::new();
    for (i, r) in candidates {
        if freed >= to_free {
            break;
        }
        freed += r.size;
        out.push((i.id.clone(), r.size));
    }
    out
}

/// (capacity, available) of the filesystem holding `path` or its nearest existing ancestor.
fn fs_of(path: &Path) -> Option<(u64, u64)> {
    path.ancestors()
        .find(|p| p.exists())
        .and_then(crate::fsstats::fs_capacity)
}

/// The image garbage collector (upstream `realImageGCManager`).
#[derive(Debug, Clone)]
pub struct ImageGcManager {
    runtime: KubeGenericRuntimeManager,
    policy: ImageGcPolicy,
    sandbox_image: String,
    records: Arc<Mutex<HashMap<String, ImageRecord>>>,
}

impl ImageGcManager {
    /// A manager for `runtime`; `sandbox_image` is always considered in use.
    pub fn new(
        runtime: KubeGenericRuntimeManager,
        policy: ImageGcPolicy,
        sandbox_image: String,
    ) -> Self {
        Self {
            runtime,
            policy,
            sandbox_image,
            records: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Upstream `detectImages`: record new images, mark used ones; returns the images and the
    /// ids in use.
    pub async fn detect_images(
        &self,
        now: DateTime<Utc>,
    ) -> Result<(Vec<GcImage>, HashSet<String>), RuntimeError> {
        let list = self.runtime.image_service().list_images(None).await?;
        let containers = self.runtime.list_containers(HashMap::new()).await?;
        let mut used_refs: HashSet<String> = HashSet::new();
        for c in &containers {
            used_refs.insert(c.image_ref.clone());
            if let Some(i) = &c.image {
                used_refs.insert(i.image.clone());
            }
        }
        used_refs.insert(self.sandbox_image.clone());
        let sandbox_image = cri::ImageSpec {
            image: self.sandbox_image.clone(),
            ..Default::default()
        };
        if let Ok(Some(i)) = self
            .runtime
            .image_service()
            .image_status(sandbox_image)
            .await
        {
            used_refs.insert(i.id);
        }
        let mut images = Vec::new();
        let mut in_use = HashSet::new();
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let mut present = HashSet::new();
        for i in list {
            let used = used_refs.contains(&i.id)
                || i.repo_tags.iter().any(|t| used_refs.contains(t))
                || i.repo_digests.iter().any(|d| used_refs.contains(d));
            let r = records.entry(i.id.clone()).or_insert(ImageRecord {
                first_detected: now,
                last_used: None,
                size: i.size,
            });
            r.size = i.size;
            if used {
                r.last_used = Some(now);
                in_use.insert(i.id.clone());
            }
            present.insert(i.id.clone());
            images.push(GcImage {
                id: i.id,
                repo_tags: i.repo_tags,
                pinned: i.pinned,
            });
        }
        records.retain(|id, _| present.contains(id));
        Ok((images, in_use))
    }

    /// Upstream `GarbageCollect`: free space when the image filesystem is over the threshold.
    pub async fn garbage_collect(&self) -> Result<(), RuntimeError> {
        let now = Utc::now();
        let (images, in_use) = self.detect_images(now).await?;
        let mountpoint = self
            .runtime
            .image_fs()
            .await?
            .and_then(|f| f.fs_id)
            .map(|f| f.mountpoint)
            .unwrap_or_default();
        let Some((capacity, available)) = fs_of(Path::new(if mountpoint.is_empty() {
            "/"
        } else {
            &mountpoint
        })) else {
            tracing::warn!(mountpoint = %mountpoint, "image GC: cannot stat the image filesystem");
            return Ok(());
        };
        let Some(to_free) = bytes_to_free(
            capacity,
            available,
            self.policy.high_threshold_percent,
            self.policy.low_threshold_percent,
        ) else {
            return Ok(());
        };
        tracing::info!(
            capacity,
            available,
            to_free,
            "image filesystem over the high threshold, freeing space"
        );
        let freed = self.free_space(&images, &in_use, now, to_free).await;
        if freed < to_free {
            tracing::warn!(freed, to_free, "image GC could not free the wanted space");
        }
        Ok(())
    }

    /// Upstream `DeleteUnusedImages` (the eviction manager's node-level reclaim): every unused
    /// image past the minimum age goes. Returns the bytes freed.
    pub async fn delete_unused_images(&self) -> Result<u64, RuntimeError> {
        let now = Utc::now();
        let (images, in_use) = self.detect_images(now).await?;
        Ok(self.free_space(&images, &in_use, now, u64::MAX).await)
    }

    /// Removes unused images, oldest first, until `to_free` bytes are freed; returns the bytes
    /// freed.
    async fn free_space(
        &self,
        images: &[GcImage],
        in_use: &HashSet<String>,
        now: DateTime<Utc>,
        to_free: u64,
    ) -> u64 {
        let victims = {
            let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
            select_images(images, &records, in_use, &self.policy, now, to_free)
        };
        let mut freed = 0u64;
        for (id, size) in victims {
            tracing::info!(image = %id, size, "removing unused image");
            let spec = cri::ImageSpec {
                image: id.clone(),
                ..Default::default()
            };
            match self.runtime.image_service().remove_image(spec).await {
                Ok(_) => {
                    freed += size;
                    if let Ok(mut r) = self.records.lock() {
                        r.remove(&id);
                    }
                }
                Err(e) => tracing::warn!(image = %id, error = %e, "failed to remove image"),
            }
        }
        freed
    }

    /// Detect images now and run GC every `period` until cancelled.
    pub async fn run(self, period: Duration, cancel: tokio_util::sync::CancellationToken) {
        if let Err(e) = self.detect_images(Utc::now()).await {
            tracing::warn!(error = %e, "image GC: cannot list images");
        }
        let mut tick = tokio::time::interval(period.max(Duration::from_millis(100)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {
                    if let Err(e) = self.garbage_collect().await {
                        tracing::warn!(error = %e, "image garbage collection failed");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn image_selection_and_thresholds() {
        assert_eq!(bytes_to_free(1000, 200, 85, 80), None, "80% used < 85%");
        assert_eq!(
            bytes_to_free(1000, 100, 85, 80),
            Some(100),
            "90% used: free to 80%"
        );
        assert_eq!(
            bytes_to_free(1000, 100, 1, 0),
            Some(900),
            "free everything used"
        );
        assert_eq!(bytes_to_free(0, 0, 1, 0), None);
        let t0 = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).expect("t0");
        let min = |m: i64| t0 + chrono::Duration::minutes(m);
        let img = |id: &str, tag: &str, pinned: bool| GcImage {
            id: id.into(),
            repo_tags: vec![tag.into()],
            pinned,
        };
        let images = vec![
            img("old", "reg/a:1", false),
            img("older-used", "reg/b:1", false),
            img("inuse", "reg/c:1", false),
            img("pinned", "reg/d:1", false),
            img("young", "reg/e:1", false),
            img("pin", "reg/f:1", true),
        ];
        let rec = |first: i64, used: Option<i64>, size: u64| ImageRecord {
            first_detected: min(first),
            last_used: used.map(min),
            size,
        };
        let records: HashMap<String, ImageRecord> = [
            ("old", rec(0, None, 10)),
            ("older-used", rec(0, Some(1), 20)),
            ("inuse", rec(0, Some(9), 30)),
            ("pinned", rec(0, None, 40)),
            ("young", rec(9, None, 50)),
            ("pin", rec(0, None, 60)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let in_use = HashSet::from(["inuse".to_string(), "pinned".to_string()]);
        let policy = ImageGcPolicy {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::from_secs(120),
            ref_prefix: String::new(),
        };
        let now = min(10);
        let ids = |v: Vec<(String, u64)>| v.into_iter().map(|(i, _)| i).collect::<Vec<_>>();
        // Never used sorts before used; young, in-use and pinned images are kept.
        assert_eq!(
            ids(select_images(
                &images, &records, &in_use, &policy, now, 1000
            )),
            vec!["old", "older-used"]
        );
        assert_eq!(
            ids(select_images(&images, &records, &in_use, &policy, now, 5)),
            vec!["old"],
            "stops once enough is freed"
        );
        let only_b = ImageGcPolicy {
            ref_prefix: "reg/b".into(),
            ..policy.clone()
        };
        assert_eq!(
            ids(select_images(
                &images, &records, &in_use, &only_b, now, 1000
            )),
            vec!["older-used"]
        );
    }
}
