//! The kubelet's own Node as the API server has it (upstream `kubelet.go`'s `nodeLister`, an
//! informer on `metadata.name=<node>`): labels and taints others put on the node — an
//! operator's `kubectl label`, a benchmark's node selector, the node controller's taints —
//! which admission matches pods against (upstream `getNodeAnyWay`). Until the watch has seen
//! the node, callers fall back on what the kubelet registered.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use crate::util::informer::Informer;

/// The node's latest state from its watch (an informer of one object).
#[derive(Clone, Debug, Default)]
pub struct NodeLister {
    node: Informer<Node>,
}

impl NodeLister {
    /// One event of the node's watch.
    pub fn apply_event(&self, event: &watcher::Event<Node>) {
        self.node.apply_event(event);
    }

    /// The node, once its watch has seen it.
    pub fn get(&self) -> Option<Arc<Node>> {
        self.node.first()
    }

    /// The node's labels as the API server has them, or `fallback` before the watch saw it.
    pub fn labels_or(&self, fallback: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        match self.get() {
            Some(n) => n.metadata.labels.clone().unwrap_or_default(),
            None => fallback.clone(),
        }
    }

    /// The node's taints as the API server has them, or `fallback` before the watch saw it.
    pub fn taints_or(&self, fallback: &[Taint]) -> Vec<Taint> {
        match self.get() {
            Some(n) => n
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default(),
            None => fallback.to_vec(),
        }
    }
}

/// Keeps `lister` equal to node `name` until `cancel` fires (a broken watch is resumed).
pub async fn watch_node(
    client: Client,
    name: String,
    lister: NodeLister,
    cancel: CancellationToken,
) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    lister.node.run(Api::all(client), config, cancel).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(labels: &[(&str, &str)], taint: Option<&str>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::NodeSpec {
                taints: taint.map(|k| {
                    vec![Taint {
                        key: k.into(),
                        effect: "NoExecute".into(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Before the watch saw the node, the registered labels and taints; after, the API
    /// server's — a label added by someone else is there, a removed one is gone.
    #[test]
    fn labels_and_taints_come_from_the_watched_node_once_seen() {
        let lister = NodeLister::default();
        let registered = BTreeMap::from([("kubernetes.io/hostname".to_string(), "n1".to_string())]);
        assert_eq!(lister.labels_or(&registered), registered);
        assert!(lister.taints_or(&[]).is_empty());
        lister.apply_event(&watcher::Event::Apply(node(
            &[("kubernetes.io/hostname", "n1"), ("side", "a")],
            Some("dedicated"),
        )));
        let labels = lister.labels_or(&registered);
        assert_eq!(labels.get("side").map(String::as_str), Some("a"));
        assert_eq!(lister.taints_or(&[])[0].key, "dedicated");
        lister.apply_event(&watcher::Event::Apply(node(
            &[("kubernetes.io/hostname", "n1")],
            None,
        )));
        assert!(!lister.labels_or(&registered).contains_key("side"));
        assert!(lister.taints_or(&[]).is_empty());
    }
}
