//! Labels and annotations the kubelet puts on sandboxes and containers (upstream
//! `kuberuntime/labels.go`). This module owns their keys and the helpers that read them back
//! from what the runtime reports, which is how the kubelet recognises its own pods and
//! containers after a restart (uid, name, restart count, spec hash).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, Pod};

pub use crate::types::{CONTAINER_NAME_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL};

/// Container spec hash annotation (hex).
pub const CONTAINER_HASH_LABEL: &str = "io.kubernetes.container.hash";
/// Restart count annotation.
pub const CONTAINER_RESTART_COUNT_LABEL: &str = "io.kubernetes.container.restartCount";
/// Termination message path annotation.
pub const CONTAINER_TERMINATION_MESSAGE_PATH_LABEL: &str =
    "io.kubernetes.container.terminationMessagePath";
/// Termination message policy annotation.
pub const CONTAINER_TERMINATION_MESSAGE_POLICY_LABEL: &str =
    "io.kubernetes.container.terminationMessagePolicy";
/// Pod termination grace period annotation (seconds).
pub const POD_TERMINATION_GRACE_PERIOD_LABEL: &str = "io.kubernetes.pod.terminationGracePeriod";
/// Pod deletion grace period annotation (seconds), set when the pod is being deleted.
pub const POD_DELETION_GRACE_PERIOD_LABEL: &str = "io.kubernetes.pod.deletionGracePeriod";
/// The container's preStop handler (Go JSON of `v1.LifecycleHandler`).
pub const CONTAINER_PRE_STOP_HANDLER_LABEL: &str = "io.kubernetes.container.preStopHandler";
/// Container ports annotation (JSON).
pub const CONTAINER_PORTS_LABEL: &str = "io.kubernetes.container.ports";
/// Label marking a sandbox as created by the kubelet (upstream `kubernetes_docker_type` is
/// dockershim's; this mirrors upstream `types.KubernetesManagedLabel`).
pub const KUBERNETES_MANAGED_LABEL: &str = "io.kubernetes.managed";

fn meta(pod: &Pod) -> (&str, &str, &str) {
    (
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default(),
    )
}

/// Sandbox labels: the pod's labels plus the kubelet's identity labels (upstream
/// `newPodLabels`).
pub fn new_pod_labels(pod: &Pod) -> HashMap<String, String> {
    let mut labels: HashMap<String, String> = pod
        .metadata
        .labels
        .as_ref()
        .map(|l| l.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let (name, ns, uid) = meta(pod);
    labels.insert(POD_NAME_LABEL.into(), name.into());
    labels.insert(POD_NAMESPACE_LABEL.into(), ns.into());
    labels.insert(POD_UID_LABEL.into(), uid.into());
    labels
}

/// Sandbox annotations: the pod's annotations (upstream `newPodAnnotations`).
pub fn new_pod_annotations(pod: &Pod) -> HashMap<String, String> {
    pod.metadata
        .annotations
        .as_ref()
        .map(|l| l.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

/// Container labels (upstream `newContainerLabels`).
pub fn new_container_labels(container: &Container, pod: &Pod) -> HashMap<String, String> {
    let (name, ns, uid) = meta(pod);
    HashMap::from([
        (POD_NAME_LABEL.to_string(), name.to_string()),
        (POD_NAMESPACE_LABEL.to_string(), ns.to_string()),
        (POD_UID_LABEL.to_string(), uid.to_string()),
        (CONTAINER_NAME_LABEL.to_string(), container.name.clone()),
    ])
}

/// Container annotations (upstream `newContainerAnnotations`).
pub fn new_container_annotations(
    container: &Container,
    pod: &Pod,
    restart_count: i32,
) -> HashMap<String, String> {
    let mut a = HashMap::new();
    a.insert(
        CONTAINER_HASH_LABEL.to_string(),
        format!("{:x}", crate::container::hash_container(container)),
    );
    a.insert(
        CONTAINER_RESTART_COUNT_LABEL.to_string(),
        restart_count.to_string(),
    );
    a.insert(
        CONTAINER_TERMINATION_MESSAGE_PATH_LABEL.to_string(),
        container
            .termination_message_path
            .clone()
            .unwrap_or_default(),
    );
    a.insert(
        CONTAINER_TERMINATION_MESSAGE_POLICY_LABEL.to_string(),
        container
            .termination_message_policy
            .clone()
            .unwrap_or_default(),
    );
    if let Some(g) = pod.metadata.deletion_grace_period_seconds {
        a.insert(POD_DELETION_GRACE_PERIOD_LABEL.to_string(), g.to_string());
    }
    if let Some(g) = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
    {
        a.insert(
            POD_TERMINATION_GRACE_PERIOD_LABEL.to_string(),
            g.to_string(),
        );
    }
    // Both JSON values as Go's encoding/json writes them (field order, omitempty), as the Go
    // kubelet writes and reads them.
    if let Some(pre_stop) = container
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        && let Some(json) = crate::util::hash::marshal_v1("v1.LifecycleHandler", pre_stop)
    {
        a.insert(CONTAINER_PRE_STOP_HANDLER_LABEL.to_string(), json);
    }
    if let Some(ports) = container.ports.as_ref().filter(|p| !p.is_empty())
        && let Some(json) = crate::util::hash::marshal_v1("[]v1.ContainerPort", ports)
    {
        a.insert(CONTAINER_PORTS_LABEL.to_string(), json);
    }
    a
}

/// The spec hash stored on a container, 0 when missing or malformed.
pub fn container_hash(annotations: &HashMap<String, String>) -> u64 {
    annotations
        .get(CONTAINER_HASH_LABEL)
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .unwrap_or(0)
}

/// The restart count stored on a container, 0 when missing or malformed.
pub fn restart_count(annotations: &HashMap<String, String>) -> i32 {
    annotations
        .get(CONTAINER_RESTART_COUNT_LABEL)
        .and_then(|h| h.parse().ok())
        .unwrap_or(0)
}

/// The pod grace period stored on a container, if any.
pub fn termination_grace_period(annotations: &HashMap<String, String>) -> Option<i64> {
    annotations
        .get(POD_TERMINATION_GRACE_PERIOD_LABEL)
        .and_then(|h| h.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_round_trip() {
        let c = Container {
            name: "a".into(),
            image: Some("busybox".into()),
            ..Default::default()
        };
        let pod = Pod::default();
        let a = new_container_annotations(&c, &pod, 3);
        assert_eq!(container_hash(&a), crate::container::hash_container(&c));
        assert_eq!(restart_count(&a), 3);
    }

    /// The values the Go kubelet 1.26 writes for the same container (its `json.Marshal`, as
    /// printed by the oracle described in `util/hash/tests.rs`): Go field order, defaults.
    #[test]
    fn annotations_match_the_go_kubelet() {
        use k8s_openapi::api::core::v1::{
            ContainerPort, ExecAction, Lifecycle, LifecycleHandler, PodSpec,
        };
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        let c = Container {
            name: "nginx".into(),
            image: Some("nginx".into()),
            ports: Some(vec![
                ContainerPort {
                    name: Some("http".into()),
                    container_port: 80,
                    protocol: Some("TCP".into()),
                    ..Default::default()
                },
                ContainerPort {
                    container_port: 53,
                    protocol: Some("UDP".into()),
                    ..Default::default()
                },
            ]),
            lifecycle: Some(Lifecycle {
                pre_stop: Some(LifecycleHandler {
                    exec: Some(ExecAction {
                        command: Some(vec!["sh".into(), "-c".into(), "sleep 1".into()]),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let pod = Pod {
            metadata: ObjectMeta {
                deletion_grace_period_seconds: Some(7),
                ..Default::default()
            },
            spec: Some(PodSpec {
                termination_grace_period_seconds: Some(30),
                ..Default::default()
            }),
            ..Default::default()
        };
        let a = new_container_annotations(&c, &pod, 0);
        assert_eq!(
            a[CONTAINER_PORTS_LABEL],
            r#"[{"name":"http","containerPort":80,"protocol":"TCP"},{"containerPort":53,"protocol":"UDP"}]"#
        );
        assert_eq!(
            a[CONTAINER_PRE_STOP_HANDLER_LABEL],
            r#"{"exec":{"command":["sh","-c","sleep 1"]}}"#
        );
        assert_eq!(a[POD_DELETION_GRACE_PERIOD_LABEL], "7");
        assert_eq!(a[POD_TERMINATION_GRACE_PERIOD_LABEL], "30");
    }
}
