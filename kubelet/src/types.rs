//! The kubelet's own vocabulary (upstream `pkg/kubelet/types`): pod source names, the
//! `kubernetes.io/config.*` annotations, and which pods a node owns by name. Vocabulary layer:
//! imports nothing from the crate.

/// Source name of the file source (upstream `kubetypes.FileSource`).
pub const FILE_SOURCE: &str = "file";
/// Source name of the http source (upstream `kubetypes.HTTPSource`).
pub const HTTP_SOURCE: &str = "http";
/// Source name of the apiserver source (upstream `kubetypes.ApiserverSource`).
pub const API_SOURCE: &str = "api";
/// Pseudo-source meaning "every source" (upstream `kubetypes.AllSource`).
pub const ALL_SOURCE: &str = "*";

/// Annotation naming the source a pod came from.
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// Annotation holding the static pod's content hash (its UID).
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// Annotation with the time the kubelet first saw the pod.
pub const CONFIG_FIRST_SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";
/// Annotation marking a mirror pod.
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Is the runtime pod called `pod_name` this node's? Deviation from upstream, which owns the
/// whole runtime: several kubelets may share one runtime (the test bed), and this kubelet only
/// runs static pods, whose names all end in `-<node name>`; housekeeping and garbage collection
/// leave other pods alone.
pub fn owned_by_node(pod_name: &str, node_name: &str) -> bool {
    pod_name
        .strip_suffix(node_name)
        .is_some_and(|rest| rest.ends_with('-') && rest.len() > 1)
}

/// Upstream `IsStaticPod`: a pod from a source other than the API server (file, http).
pub fn is_static_pod(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_SOURCE_ANNOTATION))
        .is_some_and(|s| s != API_SOURCE)
}

// Labels the kubelet puts on every sandbox and container (upstream `pkg/kubelet/types/labels.go`),
// shared with dockershim through node-common.
pub use node_common::labels::{
    KUBERNETES_CONTAINER_NAME_LABEL as CONTAINER_NAME_LABEL,
    KUBERNETES_POD_NAME_LABEL as POD_NAME_LABEL,
    KUBERNETES_POD_NAMESPACE_LABEL as POD_NAMESPACE_LABEL,
    KUBERNETES_POD_UID_LABEL as POD_UID_LABEL,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership_by_node_suffix() {
        assert!(owned_by_node("web-node1", "node1"));
        assert!(!owned_by_node("web-node12", "node1"));
        assert!(!owned_by_node("webnode1", "node1"));
        assert!(!owned_by_node("-node1", "node1"));
        assert!(!owned_by_node("", "node1"));
    }
}
