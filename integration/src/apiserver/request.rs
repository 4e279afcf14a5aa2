//! What a request names and selects: the resources served (`resource_info`), the path parsed
//! into resource, namespace, name and subresource (`Target`), the query string, and field and
//! label selectors matched against an object.

use std::collections::HashMap;

use serde_json::Value;

/// The kind, apiVersion and whether namespaced, of the resources served.
pub fn resource_info(resource: &str) -> Option<(&'static str, &'static str, bool)> {
    Some(match resource {
        "pods" => ("Pod", "v1", true),
        "nodes" => ("Node", "v1", false),
        "namespaces" => ("Namespace", "v1", false),
        "configmaps" => ("ConfigMap", "v1", true),
        "secrets" => ("Secret", "v1", true),
        "services" => ("Service", "v1", true),
        "runtimeclasses" => ("RuntimeClass", "node.k8s.io/v1", false),
        "serviceaccounts" => ("ServiceAccount", "v1", true),
        "events" => ("Event", "v1", true),
        "persistentvolumeclaims" => ("PersistentVolumeClaim", "v1", true),
        "persistentvolumes" => ("PersistentVolume", "v1", false),
        "leases" => ("Lease", "coordination.k8s.io/v1", true),
        "certificatesigningrequests" => {
            ("CertificateSigningRequest", "certificates.k8s.io/v1", false)
        }
        _ => return None,
    })
}

/// What a request path names.
#[derive(Debug, PartialEq)]
pub(super) struct Target {
    pub(super) resource: String,
    /// Some for namespaced paths; None for cluster-scoped or all-namespaces collections.
    pub(super) namespace: Option<String>,
    pub(super) name: Option<String>,
    pub(super) subresource: Option<String>,
}

pub(super) fn parse_path(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segs.as_slice() {
        ["api", "v1", rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, r, more @ ..] => (Some(ns.to_string()), {
            let mut v = vec![*r];
            v.extend_from_slice(more);
            v
        }),
        other => (None, other.to_vec()),
    };
    let (resource, name, subresource) = match rest.as_slice() {
        [r] => (*r, None, None),
        [r, n] => (*r, Some(n.to_string()), None),
        [r, n, s] => (*r, Some(n.to_string()), Some(s.to_string())),
        _ => return None,
    };
    Some(Target {
        resource: resource.to_string(),
        namespace,
        name,
        subresource,
    })
}

pub(super) fn query_map(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or(())
                {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A field or label selector: `k=v`, `k==v`, `k!=v` terms (labels also `k` and `!k`).
fn selector_matches(selector: &str, get: &dyn Fn(&str) -> Option<String>) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        if let Some((k, v)) = term.split_once("!=") {
            get(k.trim()).as_deref() != Some(v.trim())
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            get(k.trim()).unwrap_or_default() == v.trim()
        } else if let Some(k) = term.strip_prefix('!') {
            get(k.trim()).is_none()
        } else {
            get(term.trim()).is_some()
        }
    })
}

fn field_of(obj: &Value, field: &str) -> Option<String> {
    let pointer = format!("/{}", field.replace('.', "/"));
    match obj.pointer(&pointer) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Null) | None => Some(String::new()),
        Some(v) => Some(v.to_string()),
    }
}

pub(super) fn matches(obj: &Value, q: &HashMap<String, String>) -> bool {
    let fields_ok = q
        .get("fieldSelector")
        .is_none_or(|s| selector_matches(s, &|f| field_of(obj, f)));
    let labels_ok = q.get("labelSelector").is_none_or(|s| {
        selector_matches(s, &|l| {
            obj.pointer("/metadata/labels")
                .and_then(|m| m.get(l))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
    });
    fields_ok && labels_ok
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn paths_name_resources() {
        assert_eq!(
            parse_path("/api/v1/namespaces/default/pods/p/status"),
            Some(Target {
                resource: "pods".into(),
                namespace: Some("default".into()),
                name: Some("p".into()),
                subresource: Some("status".into()),
            })
        );
        assert_eq!(
            parse_path("/api/v1/nodes/n1"),
            Some(Target {
                resource: "nodes".into(),
                namespace: None,
                name: Some("n1".into()),
                subresource: None,
            })
        );
        assert_eq!(
            parse_path("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"),
            Some(Target {
                resource: "leases".into(),
                namespace: Some("kube-node-lease".into()),
                name: None,
                subresource: None,
            })
        );
        assert_eq!(parse_path("/healthz"), None);
    }

    #[test]
    fn selectors_select() {
        let pod =
            json!({"metadata": {"name": "a", "labels": {"app": "x"}}, "spec": {"nodeName": "n1"}});
        let q = |k: &str, v: &str| HashMap::from([(k.to_string(), v.to_string())]);
        assert!(matches(&pod, &q("fieldSelector", "spec.nodeName=n1")));
        assert!(!matches(&pod, &q("fieldSelector", "spec.nodeName=n2")));
        assert!(matches(
            &pod,
            &q("fieldSelector", "spec.nodeName!=n2,metadata.name=a")
        ));
        assert!(matches(&pod, &q("labelSelector", "app=x")));
        assert!(!matches(&pod, &q("labelSelector", "app,tier")));
        assert_eq!(decode("spec.nodeName%3Dn1"), "spec.nodeName=n1");
    }
}
