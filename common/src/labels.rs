//! The label keys the kubelet puts on every pod sandbox and container it asks a runtime for
//! (upstream `pkg/kubelet/types/labels.go`): the pod's name, namespace and uid, and the
//! container's name. The kubelet writes them and reads them back to recognise its own pods
//! after a restart; dockershim passes them through as ordinary CRI labels and sets the
//! container name `POD` on its sandboxes, as upstream dockershim does. The kubelet-only
//! annotations (spec hash, restart count, termination message...) stay in the kubelet.

/// `types.KubernetesPodNameLabel`.
pub const KUBERNETES_POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
/// `types.KubernetesPodNamespaceLabel`.
pub const KUBERNETES_POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
/// `types.KubernetesPodUIDLabel`.
pub const KUBERNETES_POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
/// `types.KubernetesContainerNameLabel`.
pub const KUBERNETES_CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";
