//! The Docker labels dockershim puts on the containers it creates, and the
//! mapping between CRI labels/annotations and Docker labels. Docker has no
//! annotations, so (like upstream `makeLabels`/`extractLabels` in
//! cri-dockerd `core/helpers.go`) a CRI annotation `k` is stored as the Docker
//! label `annotation.k`; the shim's internal labels (`io.kubernetes.docker.type`,
//! `io.kubernetes.container.logpath`, `io.kubernetes.sandbox.id`, and
//! `io.kubernetes.container.name` on sandboxes) are removed again when reading
//! back, so CRI labels and annotations round-trip exactly. This module owns
//! those constants and the two conversions.

use std::collections::HashMap;

/// Internal label telling sandboxes from containers (`containerTypeLabelKey`).
pub const CONTAINER_TYPE_LABEL_KEY: &str = "io.kubernetes.docker.type";
/// Value of [`CONTAINER_TYPE_LABEL_KEY`] for a pod sandbox.
pub const CONTAINER_TYPE_LABEL_SANDBOX: &str = "podsandbox";
/// Value of [`CONTAINER_TYPE_LABEL_KEY`] for an application container.
pub const CONTAINER_TYPE_LABEL_CONTAINER: &str = "container";
/// Internal label holding the container's CRI log path (sandbox log
/// directory joined with the container's `log_path`).
pub const CONTAINER_LOG_PATH_LABEL_KEY: &str = "io.kubernetes.container.logpath";
/// Internal label holding the sandbox id of a container.
pub const SANDBOX_ID_LABEL_KEY: &str = "io.kubernetes.sandbox.id";
/// Prefix of Docker labels that carry CRI annotations.
pub const ANNOTATION_PREFIX: &str = "annotation.";

/// Labels the kubelet sets on every sandbox/container (kubelet `types/labels.go`, shared with
/// the kubelet in `node_common::labels`); they are ordinary CRI labels for the shim and pass
/// through unchanged.
pub use node_common::labels::{
    KUBERNETES_CONTAINER_NAME_LABEL, KUBERNETES_POD_NAME_LABEL, KUBERNETES_POD_NAMESPACE_LABEL,
    KUBERNETES_POD_UID_LABEL,
};
/// Value of [`KUBERNETES_CONTAINER_NAME_LABEL`] the shim sets on sandboxes.
pub const POD_INFRA_CONTAINER_NAME: &str = "POD";

/// Labels used only by the shim (upstream `internalLabelKeys`).
pub const INTERNAL_LABEL_KEYS: [&str; 3] = [
    CONTAINER_TYPE_LABEL_KEY,
    CONTAINER_LOG_PATH_LABEL_KEY,
    SANDBOX_ID_LABEL_KEY,
];

/// Upstream `makeLabels`: the CRI labels plus each annotation `k` as
/// `annotation.k`. Like upstream it assumes no conflict; if a label is
/// literally named `annotation.k`, the annotation wins (deterministically).
pub fn make_labels(
    labels: &HashMap<String, String>,
    annotations: &HashMap<String, String>,
) -> HashMap<String, String> {
    let mut merged = labels.clone();
    for (k, v) in annotations {
        merged.insert(format!("{ANNOTATION_PREFIX}{k}"), v.clone());
    }
    merged
}

/// Docker labels of a sandbox: [`make_labels`] plus the type label and
/// `io.kubernetes.container.name=POD` (cri-dockerd `makeSandboxDockerConfig`).
pub fn make_sandbox_labels(
    labels: &HashMap<String, String>,
    annotations: &HashMap<String, String>,
) -> HashMap<String, String> {
    let mut m = make_labels(labels, annotations);
    m.insert(
        CONTAINER_TYPE_LABEL_KEY.into(),
        CONTAINER_TYPE_LABEL_SANDBOX.into(),
    );
    m.insert(
        KUBERNETES_CONTAINER_NAME_LABEL.into(),
        POD_INFRA_CONTAINER_NAME.into(),
    );
    m
}

/// Docker labels of a container: [`make_labels`] plus the type, sandbox id
/// and log path labels (cri-dockerd `CreateContainer`). `log_path` is the
/// sandbox log directory joined with the container's log path; pass "" when
/// the container has no log path (upstream then still joins, giving the dir).
pub fn make_container_labels(
    labels: &HashMap<String, String>,
    annotations: &HashMap<String, String>,
    sandbox_id: &str,
    log_path: &str,
) -> HashMap<String, String> {
    let mut m = make_labels(labels, annotations);
    m.insert(
        CONTAINER_TYPE_LABEL_KEY.into(),
        CONTAINER_TYPE_LABEL_CONTAINER.into(),
    );
    m.insert(CONTAINER_LOG_PATH_LABEL_KEY.into(), log_path.into());
    m.insert(SANDBOX_ID_LABEL_KEY.into(), sandbox_id.into());
    m
}

/// Upstream `extractLabels`: split Docker labels back into (CRI labels, CRI
/// annotations), dropping the shim's internal labels and, on sandboxes, the
/// `io.kubernetes.container.name` label the shim added.
pub fn extract_labels(
    docker_labels: &HashMap<String, String>,
) -> (HashMap<String, String>, HashMap<String, String>) {
    let is_sandbox = docker_labels
        .get(CONTAINER_TYPE_LABEL_KEY)
        .is_some_and(|v| v == CONTAINER_TYPE_LABEL_SANDBOX);
    let mut labels = HashMap::new();
    let mut annotations = HashMap::new();
    for (k, v) in docker_labels {
        if INTERNAL_LABEL_KEYS.contains(&k.as_str()) {
            continue;
        }
        if is_sandbox && k == KUBERNETES_CONTAINER_NAME_LABEL {
            continue;
        }
        if let Some(a) = k.strip_prefix(ANNOTATION_PREFIX) {
            annotations.insert(a.to_string(), v.clone());
            continue;
        }
        labels.insert(k.clone(), v.clone());
    }
    (labels, annotations)
}

/// The container type recorded in Docker labels, if any.
pub fn container_type(docker_labels: &HashMap<String, String>) -> Option<&str> {
    docker_labels
        .get(CONTAINER_TYPE_LABEL_KEY)
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn annotations_become_prefixed_labels() {
        let l = m(&[("app", "web")]);
        let a = m(&[("io.kubernetes.container.hash", "ad01c60e")]);
        let d = make_labels(&l, &a);
        assert_eq!(
            d,
            m(&[
                ("app", "web"),
                ("annotation.io.kubernetes.container.hash", "ad01c60e")
            ])
        );
    }

    #[test]
    fn container_roundtrip_exact() {
        let l = m(&[
            (KUBERNETES_POD_NAME_LABEL, "p"),
            (KUBERNETES_POD_NAMESPACE_LABEL, "ns"),
            (KUBERNETES_POD_UID_LABEL, "u"),
            (KUBERNETES_CONTAINER_NAME_LABEL, "web"),
            ("x", ""),
        ]);
        let a = m(&[("k", "v"), ("annotation.nested", "n"), ("", "empty-key")]);
        let d = make_container_labels(&l, &a, "sb1", "/var/log/pods/x/web/0.log");
        assert_eq!(d[CONTAINER_TYPE_LABEL_KEY], CONTAINER_TYPE_LABEL_CONTAINER);
        assert_eq!(d[SANDBOX_ID_LABEL_KEY], "sb1");
        assert_eq!(d[CONTAINER_LOG_PATH_LABEL_KEY], "/var/log/pods/x/web/0.log");
        assert_eq!(d["annotation.annotation.nested"], "n");
        assert_eq!(container_type(&d), Some("container"));
        let (l2, a2) = extract_labels(&d);
        assert_eq!(l2, l);
        assert_eq!(a2, a);
    }

    #[test]
    fn sandbox_roundtrip_drops_container_name() {
        let l = m(&[(KUBERNETES_POD_NAME_LABEL, "p"), ("tier", "db")]);
        let a = m(&[("kubernetes.io/config.source", "api")]);
        let d = make_sandbox_labels(&l, &a);
        assert_eq!(d[KUBERNETES_CONTAINER_NAME_LABEL], "POD");
        assert_eq!(d[CONTAINER_TYPE_LABEL_KEY], "podsandbox");
        let (l2, a2) = extract_labels(&d);
        assert_eq!(l2, l);
        assert_eq!(a2, a);
    }
}
