//! Mirror pods (upstream `pkg/kubelet/pod/mirror_client.go` and the mirror handling of
//! `syncPod` / `HandlePodCleanups`): in API-server mode every static pod gets a read-only copy
//! in the API server, so that `kubectl get pods` shows it. A mirror pod carries the static
//! pod's labels and annotations plus `kubernetes.io/config.mirror` (the static pod's config
//! hash) and is owned by the Node. The API source hands the mirror pods it sees to
//! [`MirrorPods`] instead of running them; each round of the mirror task creates missing ones
//! (so a deleted mirror pod comes back), replaces those whose hash no longer matches, and
//! deletes those whose static pod is gone. Their status is written by the status task.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::{Api, Client};
use parking_lot::RwLock;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::types::{CONFIG_HASH_ANNOTATION, CONFIG_MIRROR_ANNOTATION};

/// How often mirror pods are reconciled.
pub const MIRROR_SYNC_PERIOD: Duration = Duration::from_secs(1);
/// How long after a create or delete the same pod is left alone (the watch catches up).
pub const RETRY_AFTER: Duration = Duration::from_secs(3);

/// `namespace/name`.
pub fn key(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or("default"),
        p.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Is `pod` a mirror pod (upstream `IsMirrorPod`)?
pub fn is_mirror_pod(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(CONFIG_MIRROR_ANNOTATION))
}

/// The mirror pods the API source saw, by `namespace/name`.
#[derive(Debug, Default, Clone)]
pub struct MirrorPods(Arc<RwLock<BTreeMap<String, Pod>>>);

impl MirrorPods {
    /// Replaces the known set (after every change the API source sees).
    pub fn set(&self, pods: BTreeMap<String, Pod>) {
        *self.0.write() = pods;
    }

    /// The mirror pod of `static_pod`, if the API has one.
    pub fn get(&self, static_pod: &Pod) -> Option<Pod> {
        self.0.read().get(&key(static_pod)).cloned()
    }

    pub fn all(&self) -> BTreeMap<String, Pod> {
        self.0.read().clone()
    }
}

fn config_hash(p: &Pod) -> Option<&str> {
    p.metadata
        .annotations
        .as_ref()?
        .get(CONFIG_HASH_ANNOTATION)
        .map(String::as_str)
}

fn mirror_hash(p: &Pod) -> Option<&str> {
    p.metadata
        .annotations
        .as_ref()?
        .get(CONFIG_MIRROR_ANNOTATION)
        .map(String::as_str)
}

/// Upstream `CreateMirrorPod`'s object: the static pod's metadata and spec, the mirror
/// annotation, bound to and owned by the node.
pub fn mirror_of(static_pod: &Pod, node_name: &str, node_uid: Option<&str>) -> Pod {
    let mut annotations = static_pod.metadata.annotations.clone().unwrap_or_default();
    let hash = config_hash(static_pod)
        .map(str::to_string)
        .or_else(|| static_pod.metadata.uid.clone())
        .unwrap_or_default();
    annotations.insert(CONFIG_MIRROR_ANNOTATION.into(), hash);
    let mut pod = Pod::default();
    pod.metadata.name = static_pod.metadata.name.clone();
    pod.metadata.namespace = Some(
        static_pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
    );
    pod.metadata.labels = static_pod.metadata.labels.clone();
    pod.metadata.annotations = Some(annotations);
    if let Some(uid) = node_uid {
        pod.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: node_name.to_string(),
            uid: uid.to_string(),
            controller: Some(true),
            ..Default::default()
        }]);
    }
    let mut spec = static_pod.spec.clone().unwrap_or_default();
    spec.node_name = Some(node_name.to_string());
    pod.spec = Some(spec);
    pod
}

/// What one round must do.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Static pods (by key) whose mirror must be created.
    pub create: Vec<String>,
    /// Mirror pods (key, uid) to delete: orphaned, or outdated (recreated next round).
    pub delete: Vec<(String, String)>,
}

/// Compares the static pods with the mirror pods seen.
pub fn plan(static_pods: &[Pod], mirrors: &BTreeMap<String, Pod>) -> Plan {
    let mut p = Plan::default();
    let wanted: HashMap<String, &Pod> = static_pods.iter().map(|s| (key(s), s)).collect();
    for (k, m) in mirrors {
        let uid = m.metadata.uid.clone().unwrap_or_default();
        // A mirror pod being deleted (gracefully, by a user) is finished off at once, then
        // recreated (upstream `syncPod`: a deleted mirror pod no longer mirrors anything).
        if m.metadata.deletion_timestamp.is_some() {
            p.delete.push((k.clone(), uid));
            continue;
        }
        match wanted.get(k) {
            None => p.delete.push((k.clone(), uid)),
            Some(s) => {
                let want = config_hash(s).or(s.metadata.uid.as_deref());
                if mirror_hash(m) != want {
                    p.delete.push((k.clone(), uid));
                }
            }
        }
    }
    for k in wanted.keys() {
        if !mirrors.contains_key(k) {
            p.create.push(k.clone());
        }
    }
    p.create.sort();
    p
}

/// Keeps mirror pods in step with the static pods until `cancel`.
pub async fn run(
    client: Client,
    node_name: String,
    mirrors: MirrorPods,
    static_pods: Arc<dyn Fn() -> Vec<Pod> + Send + Sync>,
    cancel: CancellationToken,
) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut node_uid: Option<String> = None;
    let mut recent: HashMap<String, Instant> = HashMap::new();
    let mut tick = tokio::time::interval(MIRROR_SYNC_PERIOD);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let statics = static_pods();
        if node_uid.is_none() && !statics.is_empty() {
            node_uid = nodes
                .get_opt(&node_name)
                .await
                .ok()
                .flatten()
                .and_then(|n| n.metadata.uid);
        }
        recent.retain(|_, at| at.elapsed() < RETRY_AFTER);
        let plan = plan(&statics, &mirrors.all());
        for (k, uid) in plan.delete {
            if recent.contains_key(&k) {
                continue;
            }
            let Some((ns, name)) = k.split_once('/') else {
                continue;
            };
            let api: Api<Pod> = Api::namespaced(client.clone(), ns);
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match api.delete(name, &dp).await {
                Ok(_) => info!(pod = %k, "mirror pod deleted"),
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => warn!(pod = %k, error = %e, "deleting mirror pod failed"),
            }
            recent.insert(k, Instant::now());
        }
        for k in plan.create {
            // Upstream needs the Node's UID for the owner reference: not registered yet means
            // not yet.
            if recent.contains_key(&k) || node_uid.is_none() {
                continue;
            }
            let Some(s) = statics.iter().find(|s| key(s) == k) else {
                continue;
            };
            let mirror = mirror_of(s, &node_name, node_uid.as_deref());
            let ns = mirror.metadata.namespace.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            match api.create(&PostParams::default(), &mirror).await {
                Ok(_) => info!(pod = %k, "mirror pod created"),
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => warn!(pod = %k, error = %e, "creating mirror pod failed"),
            }
            recent.insert(k, Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn static_pod(name: &str, hash: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = Some(hash.into());
        p.metadata.labels = Some([("app".to_string(), "x".to_string())].into());
        p.metadata.annotations = Some(
            [
                (CONFIG_HASH_ANNOTATION.to_string(), hash.to_string()),
                (
                    "kubernetes.io/config.source".to_string(),
                    "file".to_string(),
                ),
            ]
            .into(),
        );
        p.spec = Some(Default::default());
        p
    }

    #[test]
    fn mirrors_copy_the_static_pod_and_are_owned_by_the_node() {
        let m = mirror_of(&static_pod("web-n1", "h1"), "n1", Some("node-uid"));
        let ann = m.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[CONFIG_MIRROR_ANNOTATION], "h1");
        assert_eq!(ann["kubernetes.io/config.source"], "file");
        assert!(is_mirror_pod(&m));
        assert_eq!(m.metadata.uid, None);
        assert_eq!(m.metadata.labels.as_ref().unwrap()["app"], "x");
        let owner = &m.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Node", "n1"));
        assert_eq!(owner.uid, "node-uid");
        assert_eq!(m.spec.unwrap().node_name.as_deref(), Some("n1"));
    }

    #[test]
    fn plan_creates_missing_replaces_outdated_and_deletes_orphans() {
        let statics = vec![static_pod("a-n1", "h1"), static_pod("b-n1", "h2")];
        let mut mirrors = BTreeMap::new();
        let mut ma = mirror_of(&statics[0], "n1", None);
        ma.metadata.uid = Some("ua".into());
        mirrors.insert("default/a-n1".to_string(), ma.clone());
        let mut orphan = mirror_of(&static_pod("gone-n1", "h9"), "n1", None);
        orphan.metadata.uid = Some("uo".into());
        mirrors.insert("default/gone-n1".to_string(), orphan);
        let p = plan(&statics, &mirrors);
        assert_eq!(p.create, vec!["default/b-n1".to_string()]);
        assert_eq!(
            p.delete,
            vec![("default/gone-n1".to_string(), "uo".to_string())]
        );
        // The static pod changed: its mirror is replaced.
        let changed = vec![static_pod("a-n1", "h1b")];
        let mirrors: BTreeMap<String, Pod> = [("default/a-n1".to_string(), ma)].into();
        let p = plan(&changed, &mirrors);
        assert_eq!(
            p.delete,
            vec![("default/a-n1".to_string(), "ua".to_string())]
        );
        assert!(p.create.is_empty(), "recreated once the old one is gone");
        // A mirror pod deleted gracefully by a user is removed at once.
        let mut deleting = mirror_of(&static_pod("a-n1", "h1"), "n1", None);
        deleting.metadata.uid = Some("ud".into());
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        let mirrors: BTreeMap<String, Pod> = [("default/a-n1".to_string(), deleting)].into();
        let p = plan(&[static_pod("a-n1", "h1")], &mirrors);
        assert_eq!(
            p.delete,
            vec![("default/a-n1".to_string(), "ud".to_string())]
        );
    }
}
