//! `PodConfig`: the merge of all pod sources (upstream `pkg/kubelet/config/config.go`,
//! `podStorage.merge` in incremental notification mode). This module owns, per source, the
//! last known pods keyed by UID, and turns each update from a source into the incremental
//! operations the sync loop consumes: `ADD` (new pod), `UPDATE` (spec, labels, annotations or
//! deletion fields changed), `DELETE` (the change sets a deletionTimestamp), `RECONCILE` (only
//! the status changed) and `REMOVE` (gone from the source). It drops duplicate pod full names
//! within a source (first wins), stamps the `config.source`/`config.seen` annotations, and
//! remembers which sources have delivered a first snapshot ([`PodConfig::all_sources_ready`]).
//! [`PodStorage`] is the pure state machine; [`PodConfig`] runs it as a tokio task.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{
    CONFIG_FIRST_SEEN_ANNOTATION, CONFIG_MIRROR_ANNOTATION, CONFIG_SOURCE_ANNOTATION, PodOperation,
    PodUpdate, SourceSender,
};
use crate::container::pod_full_name;

const LOCAL_ANNOTATIONS: [&str; 3] = [
    CONFIG_SOURCE_ANNOTATION,
    CONFIG_MIRROR_ANNOTATION,
    CONFIG_FIRST_SEEN_ANNOTATION,
];

fn uid_key(pod: &Pod) -> String {
    match pod.metadata.uid.as_deref() {
        Some(u) if !u.is_empty() => u.to_string(),
        // Should not happen (static pods get a UID, API pods have one); key by name instead.
        _ => format!("name:{}", pod_full_name(pod)),
    }
}

/// Upstream `isAnnotationMapEqual`: equal ignoring kubelet-local annotations.
fn annotations_equal(
    a: Option<&BTreeMap<String, String>>,
    b: Option<&BTreeMap<String, String>>,
) -> bool {
    let strip = |m: Option<&BTreeMap<String, String>>| -> BTreeMap<String, String> {
        m.into_iter()
            .flatten()
            .filter(|(k, _)| !LOCAL_ANNOTATIONS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    strip(a) == strip(b)
}

/// Upstream `podsDifferSemantically`.
fn pods_differ_semantically(existing: &Pod, new: &Pod) -> bool {
    existing.spec != new.spec
        || existing.metadata.labels != new.metadata.labels
        || existing.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || existing.metadata.deletion_grace_period_seconds
            != new.metadata.deletion_grace_period_seconds
        || !annotations_equal(
            existing.metadata.annotations.as_ref(),
            new.metadata.annotations.as_ref(),
        )
}

/// What [`check_and_update_pod`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    None,
    Update,
    Reconcile,
    GracefulDelete,
}

/// Upstream `checkAndUpdatePod`: fold `new` into `existing` and classify the change.
fn check_and_update_pod(existing: &mut Pod, mut new: Pod) -> Change {
    if !pods_differ_semantically(existing, &new) {
        if existing.status != new.status {
            existing.status = new.status;
            return Change::Reconcile;
        }
        return Change::None;
    }
    let m = &mut existing.metadata;
    m.labels = new.metadata.labels.take();
    m.deletion_timestamp = new.metadata.deletion_timestamp.take();
    m.deletion_grace_period_seconds = new.metadata.deletion_grace_period_seconds;
    m.generation = new.metadata.generation;
    // Keep the kubelet-local annotations of the existing pod (upstream updateAnnotations).
    let mut ann = new.metadata.annotations.take().unwrap_or_default();
    for k in LOCAL_ANNOTATIONS {
        match m.annotations.as_ref().and_then(|a| a.get(k)) {
            Some(v) => {
                ann.insert(k.to_string(), v.clone());
            }
            None => {
                ann.remove(k);
            }
        }
    }
    m.annotations = Some(ann);
    existing.spec = new.spec;
    existing.status = new.status;
    if existing.metadata.deletion_timestamp.is_some() {
        Change::GracefulDelete
    } else {
        Change::Update
    }
}

fn first_seen_now() -> String {
    // Upstream kubetypes.NewTimestamp().GetString(): RFC3339 with nanoseconds.
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

/// Per-source pod state and the merge algorithm (upstream `podStorage`), without I/O.
#[derive(Debug, Default)]
pub struct PodStorage {
    pods: HashMap<String, BTreeMap<String, Pod>>,
    sources_seen: BTreeSet<String>,
}

impl PodStorage {
    /// Empty storage.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sources that have sent at least one `SET`.
    pub fn sources_seen(&self) -> &BTreeSet<String> {
        &self.sources_seen
    }

    /// All pods currently known, across sources.
    pub fn all_pods(&self) -> Vec<Pod> {
        self.pods
            .values()
            .flat_map(|m| m.values().cloned())
            .collect()
    }

    /// Apply `update` from its source and return the incremental updates to emit, in
    /// upstream's order: REMOVE, ADD, UPDATE, DELETE, (empty ADD on a source's first SET when
    /// nothing else was emitted), RECONCILE. Empty batches are not returned.
    pub fn merge(&mut self, update: PodUpdate) -> Vec<PodUpdate> {
        let source = update.source.clone();
        let seen_before = self.sources_seen.contains(&source);
        let mut adds = Vec::new();
        let mut updates = Vec::new();
        let mut deletes = Vec::new();
        let mut removes = Vec::new();
        let mut reconciles = Vec::new();
        let mut pods = self.pods.remove(&source).unwrap_or_default();

        // updatePodsFunc: fold new pods into `target`, taking existing ones from `old`.
        let mut fold = |new_pods: Vec<Pod>,
                        old: &mut BTreeMap<String, Pod>,
                        target: &mut BTreeMap<String, Pod>| {
            let mut names = HashSet::new();
            for mut pod in new_pods {
                let full = pod_full_name(&pod);
                if !names.insert(full.clone()) {
                    tracing::warn!(pod = %full, source = %source, "pod failed validation due to duplicate pod name, ignoring");
                    continue;
                }
                pod.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(CONFIG_SOURCE_ANNOTATION.into(), source.clone());
                let key = uid_key(&pod);
                if let Some(mut existing) = old.remove(&key) {
                    match check_and_update_pod(&mut existing, pod) {
                        Change::Update => updates.push(existing.clone()),
                        Change::Reconcile => reconciles.push(existing.clone()),
                        Change::GracefulDelete => deletes.push(existing.clone()),
                        Change::None => {}
                    }
                    target.insert(key, existing);
                    continue;
                }
                if target.contains_key(&key) {
                    // Same UID twice in one batch under different names: keep the first.
                    continue;
                }
                pod.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(CONFIG_FIRST_SEEN_ANNOTATION.into(), first_seen_now());
                target.insert(key, pod.clone());
                adds.push(pod);
            }
        };

        match update.op {
            PodOperation::Add | PodOperation::Update | PodOperation::Delete => {
                tracing::debug!(source = %source, op = %update.op, n = update.pods.len(), "pods from source");
                let mut target = std::mem::take(&mut pods);
                let mut old = target.clone();
                // Existing pods are looked up in `old`; untouched ones stay in `target`.
                target.retain(|k, _| !update.pods.iter().any(|p| &uid_key(p) == k));
                fold(update.pods, &mut old, &mut target);
                pods = target;
            }
            PodOperation::Remove => {
                for p in &update.pods {
                    if let Some(existing) = pods.remove(&uid_key(p)) {
                        removes.push(existing);
                    }
                }
            }
            PodOperation::Set => {
                self.sources_seen.insert(source.clone());
                let mut old = std::mem::take(&mut pods);
                fold(update.pods, &mut old, &mut pods);
                removes.extend(old.into_values());
            }
            PodOperation::Reconcile => {
                tracing::warn!(source = %source, "received invalid update type RECONCILE from a source");
            }
        }
        self.pods.insert(source.clone(), pods);

        let first_set = !seen_before && self.sources_seen.contains(&source);
        let mut out = Vec::new();
        let mk = |op, pods| PodUpdate {
            op,
            source: source.clone(),
            pods,
        };
        let nothing_else = adds.is_empty() && updates.is_empty() && deletes.is_empty();
        if !removes.is_empty() {
            out.push(mk(PodOperation::Remove, removes));
        }
        if !adds.is_empty() || (first_set && nothing_else) {
            // An empty ADD on the first SET tells the kubelet the source is ready.
            out.push(mk(PodOperation::Add, adds));
        }
        if !updates.is_empty() {
            out.push(mk(PodOperation::Update, updates));
        }
        if !deletes.is_empty() {
            out.push(mk(PodOperation::Delete, deletes));
        }
        if !reconciles.is_empty() {
            out.push(mk(PodOperation::Reconcile, reconciles));
        }
        out
    }
}

/// The merge of all sources, running as a tokio task (upstream `PodConfig`).
#[derive(Debug, Clone)]
pub struct PodConfig {
    input: mpsc::Sender<PodUpdate>,
    registered: Arc<Mutex<BTreeSet<String>>>,
    seen: Arc<Mutex<BTreeSet<String>>>,
}

impl PodConfig {
    /// Start the merge task (must be called inside a tokio runtime). Returns the handle and the
    /// channel of merged updates; the task stops when `cancel` fires or the output is dropped.
    pub fn new(cancel: CancellationToken) -> (Self, mpsc::Receiver<PodUpdate>) {
        let (input, mut rx) = mpsc::channel::<PodUpdate>(64);
        let (out_tx, out_rx) = mpsc::channel::<PodUpdate>(64);
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let seen_task = Arc::clone(&seen);
        tokio::spawn(async move {
            let mut storage = PodStorage::new();
            loop {
                let update = tokio::select! {
                    _ = cancel.cancelled() => break,
                    u = rx.recv() => match u { Some(u) => u, None => break },
                };
                let merged = storage.merge(update);
                seen_task.lock().clone_from(storage.sources_seen());
                for m in merged {
                    if out_tx.send(m).await.is_err() {
                        return;
                    }
                }
            }
        });
        let cfg = Self {
            input,
            registered: Arc::new(Mutex::new(BTreeSet::new())),
            seen,
        };
        (cfg, out_rx)
    }

    /// Register `source` and get its sender (upstream `PodConfig.Channel`).
    pub fn channel(&self, source: &str) -> SourceSender {
        self.registered.lock().insert(source.to_string());
        SourceSender::new(source, self.input.clone())
    }

    /// True once every given source has delivered a snapshot (upstream `SeenAllSources`).
    pub fn seen_all_sources<'a>(&self, sources: impl IntoIterator<Item = &'a str>) -> bool {
        let seen = self.seen.lock();
        sources.into_iter().all(|s| seen.contains(s))
    }

    /// True once every registered source has delivered a snapshot.
    pub fn all_sources_ready(&self) -> bool {
        let registered: Vec<String> = self.registered.lock().iter().cloned().collect();
        self.seen_all_sources(registered.iter().map(String::as_str))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn pod(name: &str, uid: &str, image: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    image: Some(image.into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        }
    }

    fn set(source: &str, pods: Vec<Pod>) -> PodUpdate {
        PodUpdate {
            op: PodOperation::Set,
            source: source.into(),
            pods,
        }
    }

    fn summary(out: &[PodUpdate]) -> Vec<(PodOperation, Vec<String>)> {
        out.iter()
            .map(|u| {
                (
                    u.op,
                    u.pods
                        .iter()
                        .map(|p| p.metadata.name.clone().unwrap_or_default())
                        .collect(),
                )
            })
            .collect()
    }

    use PodOperation::*;

    #[test]
    fn first_empty_set_marks_source_seen() {
        let mut s = PodStorage::new();
        let out = s.merge(set("file", vec![]));
        assert_eq!(summary(&out), vec![(Add, vec![])]);
        assert!(s.sources_seen().contains("file"));
        assert!(s.merge(set("file", vec![])).is_empty());
    }

    #[test]
    fn add_then_noop_then_update_then_remove() {
        let mut s = PodStorage::new();
        let out = s.merge(set("file", vec![pod("a", "1", "x"), pod("b", "2", "x")]));
        assert_eq!(summary(&out), vec![(Add, vec!["a".into(), "b".into()])]);
        let added = &out[0].pods[0];
        let ann = added.metadata.annotations.as_ref().expect("ann");
        assert_eq!(
            ann.get(CONFIG_SOURCE_ANNOTATION).map(String::as_str),
            Some("file")
        );
        let seen = ann
            .get(CONFIG_FIRST_SEEN_ANNOTATION)
            .cloned()
            .expect("seen");

        assert!(
            s.merge(set("file", vec![pod("a", "1", "x"), pod("b", "2", "x")]))
                .is_empty()
        );

        let out = s.merge(set("file", vec![pod("a", "1", "y"), pod("b", "2", "x")]));
        assert_eq!(summary(&out), vec![(Update, vec!["a".into()])]);
        let upd = &out[0].pods[0];
        assert_eq!(
            upd.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(CONFIG_FIRST_SEEN_ANNOTATION)),
            Some(&seen),
            "first-seen time is kept across updates"
        );

        let out = s.merge(set("file", vec![pod("b", "2", "x")]));
        assert_eq!(summary(&out), vec![(Remove, vec!["a".into()])]);
    }

    #[test]
    fn label_and_annotation_changes_are_updates_but_local_ones_are_not() {
        let mut s = PodStorage::new();
        s.merge(set("api", vec![pod("a", "1", "x")]));
        let mut p = pod("a", "1", "x");
        p.metadata.annotations =
            Some([(CONFIG_MIRROR_ANNOTATION.to_string(), "m".to_string())].into());
        assert!(s.merge(set("api", vec![p])).is_empty());
        let mut p = pod("a", "1", "x");
        p.metadata.labels = Some([("k".to_string(), "v".to_string())].into());
        assert_eq!(
            summary(&s.merge(set("api", vec![p]))),
            vec![(Update, vec!["a".into()])]
        );
        let mut p = pod("a", "1", "x");
        p.metadata.annotations = Some([("user".to_string(), "v".to_string())].into());
        assert_eq!(
            summary(&s.merge(set("api", vec![p]))),
            vec![(Update, vec!["a".into()])]
        );
    }

    #[test]
    fn status_only_change_is_reconcile() {
        let mut s = PodStorage::new();
        s.merge(set("api", vec![pod("a", "1", "x")]));
        let mut p = pod("a", "1", "x");
        p.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        let out = s.merge(set("api", vec![p]));
        assert_eq!(summary(&out), vec![(Reconcile, vec!["a".into()])]);
        assert_eq!(
            out[0].pods[0]
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref()),
            Some("Running")
        );
    }

    #[test]
    fn deletion_timestamp_is_delete() {
        let mut s = PodStorage::new();
        s.merge(set("api", vec![pod("a", "1", "x")]));
        let mut p = pod("a", "1", "x");
        p.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        p.metadata.deletion_grace_period_seconds = Some(30);
        let out = s.merge(set("api", vec![p.clone()]));
        assert_eq!(summary(&out), vec![(Delete, vec!["a".into()])]);
        // Same again: nothing new.
        assert!(s.merge(set("api", vec![p])).is_empty());
    }

    #[test]
    fn duplicate_full_names_first_wins() {
        let mut s = PodStorage::new();
        let out = s.merge(set("file", vec![pod("a", "1", "x"), pod("a", "2", "y")]));
        assert_eq!(summary(&out), vec![(Add, vec!["a".into()])]);
        assert_eq!(out[0].pods[0].metadata.uid.as_deref(), Some("1"));
    }

    #[test]
    fn sources_are_independent() {
        let mut s = PodStorage::new();
        s.merge(set("file", vec![pod("a", "1", "x")]));
        let out = s.merge(set("http", vec![pod("b", "2", "x")]));
        assert_eq!(summary(&out), vec![(Add, vec!["b".into()])]);
        assert!(s.merge(set("http", vec![pod("b", "2", "x")])).is_empty());
        assert_eq!(s.all_pods().len(), 2);
    }

    #[test]
    fn incremental_ops() {
        let mut s = PodStorage::new();
        let op = |op, pods| PodUpdate {
            op,
            source: "api".into(),
            pods,
        };
        assert_eq!(
            summary(&s.merge(op(Add, vec![pod("a", "1", "x")]))),
            vec![(Add, vec!["a".into()])]
        );
        assert_eq!(
            summary(&s.merge(op(Add, vec![pod("b", "2", "x")]))),
            vec![(Add, vec!["b".into()])]
        );
        assert_eq!(
            summary(&s.merge(op(Update, vec![pod("a", "1", "z")]))),
            vec![(Update, vec!["a".into()])]
        );
        assert_eq!(
            summary(&s.merge(op(Remove, vec![pod("b", "2", "x")]))),
            vec![(Remove, vec!["b".into()])]
        );
        assert!(s.merge(op(Remove, vec![pod("b", "2", "x")])).is_empty());
        assert!(
            !s.sources_seen().contains("api"),
            "only SET marks a source seen"
        );
        assert_eq!(s.all_pods().len(), 1);
    }

    #[tokio::test]
    async fn pod_config_task() {
        let cancel = CancellationToken::new();
        let (cfg, mut out) = PodConfig::new(cancel.clone());
        let file = cfg.channel("file");
        let http = cfg.channel("http");
        assert!(!cfg.all_sources_ready());
        file.send(Set, vec![pod("a", "1", "x")])
            .await
            .expect("send");
        let u = out.recv().await.expect("update");
        assert_eq!((u.op, u.source.as_str(), u.pods.len()), (Add, "file", 1));
        assert!(cfg.seen_all_sources(["file"]));
        assert!(!cfg.all_sources_ready());
        http.send(Set, vec![]).await.expect("send");
        let u = out.recv().await.expect("update");
        assert_eq!((u.op, u.source.as_str(), u.pods.len()), (Add, "http", 0));
        assert!(cfg.all_sources_ready());
        cancel.cancel();
        assert!(out.recv().await.is_none());
    }
}
