//! The kubelet's admission predicates besides resources (upstream
//! `pkg/kubelet/lifecycle/predicate.go` `generalFilter` and its taint check): does the pod's
//! `nodeSelector` and required node affinity match this node's labels, and does it tolerate the
//! node's `NoExecute` taints (not asked of static pods). Failures carry upstream's reasons and
//! messages (`NodeAffinity` / "Predicate NodeAffinity failed", `Taint` / "Predicate
//! TaintToleration failed"), and does the pod's OS (its `kubernetes.io/os` label, its
//! `spec.os`) match this node's (`PodOSSelectorNodeLabelDoesNotMatch`, `PodOSNotSupported`).
//! Vocabulary layer: imports nothing of the crate.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, Pod, Taint, Toleration};

/// Upstream's rejection for a node affinity mismatch: (reason, message).
pub const NODE_AFFINITY: (&str, &str) = ("NodeAffinity", "Predicate NodeAffinity failed");
/// Upstream's rejection for an untolerated `NoExecute` taint.
pub const TAINT: (&str, &str) = ("Taint", "Predicate TaintToleration failed");
/// Upstream's rejection of a pod whose `kubernetes.io/os` label is not the node's OS.
pub const POD_OS_SELECTOR: (&str, &str) = (
    "PodOSSelectorNodeLabelDoesNotMatch",
    "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
);
/// Upstream's rejection of a pod whose `spec.os.name` is not the node's OS.
pub const POD_OS_NOT_SUPPORTED: (&str, &str) = (
    "PodOSNotSupported",
    "Failed to admit pod as the OS field doesn't match node OS",
);

/// The well-known OS label (`v1.LabelOSStable`).
const LABEL_OS: &str = "kubernetes.io/os";

/// Upstream `rejectPodAdmissionBasedOnOSSelector` and `rejectPodAdmissionBasedOnOSField`,
/// checked before anything else at admission: a pod labelled `kubernetes.io/os` with another
/// value than this OS (upstream corrects a node label that says otherwise to this OS first),
/// or whose `spec.os.name` is not this OS.
pub fn pod_os_rejection(pod: &Pod) -> Option<(&'static str, &'static str)> {
    let host_os = std::env::consts::OS;
    let pod_label = pod.metadata.labels.as_ref().and_then(|l| l.get(LABEL_OS));
    if pod_label.is_some_and(|os| os != host_os) {
        return Some(POD_OS_SELECTOR);
    }
    let pod_os = pod.spec.as_ref().and_then(|s| s.os.as_ref());
    pod_os
        .is_some_and(|os| os.name != host_os)
        .then_some(POD_OS_NOT_SUPPORTED)
}

fn requirement_matches(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let value = labels.get(&r.key);
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => !value.is_some_and(|v| values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) = (
                value.and_then(|v| number(v)),
                values.first().and_then(|b| number(b)),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// Upstream `nodeaffinity` `GetRequiredNodeAffinity(pod).Match(node)`: every `nodeSelector`
/// entry equals the node's label, and (when given) one of the required node selector terms has
/// all its label expressions true. Field selectors (`matchFields`) match `metadata.name` only.
pub fn node_affinity_matches(
    pod: &Pod,
    node_name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    if spec
        .node_selector
        .iter()
        .flatten()
        .any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    let Some(required) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    else {
        return true;
    };
    let fields = BTreeMap::from([("metadata.name".to_string(), node_name.to_string())]);
    required.node_selector_terms.iter().any(|t| {
        let exprs = t.match_expressions.as_deref().unwrap_or_default();
        let flds = t.match_fields.as_deref().unwrap_or_default();
        (!exprs.is_empty() || !flds.is_empty())
            && exprs.iter().all(|r| requirement_matches(r, labels))
            && flds.iter().all(|r| requirement_matches(r, &fields))
    })
}

fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if t.effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != taint.effect)
    {
        return false;
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => t
            .key
            .as_deref()
            .is_none_or(|k| k.is_empty() || k == taint.key),
        _ => {
            t.key.as_deref() == Some(taint.key.as_str())
                && t.value.as_deref().unwrap_or_default()
                    == taint.value.as_deref().unwrap_or_default()
        }
    }
}

/// Upstream's kubelet taint check: a `NoExecute` taint of the node the pod does not tolerate.
pub fn untolerated_no_execute<'a>(pod: &Pod, taints: &'a [Taint]) -> Option<&'a Taint> {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    taints
        .iter()
        .filter(|t| t.effect == "NoExecute")
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec}))
            .expect("pod")
    }

    fn labels() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("kubernetes.io/hostname".to_string(), "n1".to_string()),
            ("disk".to_string(), "ssd".to_string()),
            ("cores".to_string(), "8".to_string()),
        ])
    }

    #[test]
    fn a_pod_for_another_os_is_rejected_as_upstream() {
        let with = |v: serde_json::Value| -> Pod { serde_json::from_value(v).expect("pod") };
        assert_eq!(
            pod_os_rejection(&pod(serde_json::json!({"containers": []}))),
            None
        );
        assert_eq!(
            pod_os_rejection(&pod(
                serde_json::json!({"containers": [], "os": {"name": "linux"}})
            )),
            None
        );
        assert_eq!(
            pod_os_rejection(&pod(
                serde_json::json!({"containers": [], "os": {"name": "windows"}})
            )),
            Some(POD_OS_NOT_SUPPORTED)
        );
        let labelled = |os: &str| {
            with(
                serde_json::json!({"metadata": {"name": "p", "labels": {"kubernetes.io/os": os}},
                "spec": {"containers": []}}),
            )
        };
        assert_eq!(pod_os_rejection(&labelled("linux")), None);
        assert_eq!(
            pod_os_rejection(&labelled("windows")),
            Some(POD_OS_SELECTOR)
        );
    }

    #[test]
    fn node_selector_and_required_affinity() {
        let ok = |spec| node_affinity_matches(&pod(spec), "n1", &labels());
        assert!(ok(serde_json::json!({"containers": []})));
        assert!(ok(
            serde_json::json!({"containers": [], "nodeSelector": {"disk": "ssd"}})
        ));
        assert!(!ok(
            serde_json::json!({"containers": [], "nodeSelector": {"disk": "hdd"}})
        ));
        let affinity = |exprs: serde_json::Value| {
            serde_json::json!({"containers": [], "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": exprs}]}}}})
        };
        assert!(ok(affinity(
            serde_json::json!([{"key": "disk", "operator": "In", "values": ["ssd", "nvme"]}])
        )));
        assert!(!ok(affinity(
            serde_json::json!([{"key": "disk", "operator": "NotIn", "values": ["ssd"]}])
        )));
        assert!(ok(affinity(
            serde_json::json!([{"key": "gpu", "operator": "DoesNotExist"}])
        )));
        assert!(ok(affinity(
            serde_json::json!([{"key": "cores", "operator": "Gt", "values": ["4"]}])
        )));
        assert!(!ok(affinity(
            serde_json::json!([{"key": "cores", "operator": "Lt", "values": ["4"]}])
        )));
        assert!(ok(
            serde_json::json!({"containers": [], "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}})
        ));
        // An empty term matches nothing.
        assert!(!ok(
            serde_json::json!({"containers": [], "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}})
        ));
    }

    #[test]
    fn no_execute_taints_need_a_toleration() {
        let taints: Vec<Taint> = serde_json::from_value(serde_json::json!([
            {"key": "dedicated", "value": "db", "effect": "NoExecute"},
            {"key": "soft", "effect": "NoSchedule"}
        ]))
        .expect("taints");
        let bare = pod(serde_json::json!({"containers": []}));
        assert_eq!(
            untolerated_no_execute(&bare, &taints).map(|t| t.key.as_str()),
            Some("dedicated")
        );
        let tolerant = pod(serde_json::json!({"containers": [], "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoExecute"}]}));
        assert!(untolerated_no_execute(&tolerant, &taints).is_none());
        let exists =
            pod(serde_json::json!({"containers": [], "tolerations": [{"operator": "Exists"}]}));
        assert!(untolerated_no_execute(&exists, &taints).is_none());
        let wrong = pod(serde_json::json!({"containers": [], "tolerations": [
            {"key": "dedicated", "value": "web", "effect": "NoExecute"}]}));
        assert!(untolerated_no_execute(&wrong, &taints).is_some());
    }
}
