//! The patch formats of the fixture API server — JSON merge patch (RFC 7386) and JSON patch
//! (RFC 6902) from the `json-patch` crate, strategic merge patch (lists with a merge key merged
//! element by element, `$patch: delete` / `replace` directives, `$setElementOrder` and
//! `$retainKeys` accepted; no crate has it) — and the pod defaulting the API server applies on
//! create.

use serde_json::{Map, Value, json};

/// A PATCH request's content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Merge,
    Strategic,
    Json,
}

/// Applies `patch` of `kind` to `current`.
pub fn apply(kind: Kind, current: &Value, patch: &Value) -> Result<Value, String> {
    match kind {
        Kind::Merge => Ok(merge(current, patch)),
        Kind::Strategic => Ok(strategic(current, patch, "")),
        Kind::Json => json_patch(current, patch),
    }
}

/// RFC 7386 (the `json-patch` crate's).
pub fn merge(target: &Value, patch: &Value) -> Value {
    let mut doc = target.clone();
    json_patch::merge(&mut doc, patch);
    doc
}

fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "conditions" => "type",
        "containerStatuses" | "initContainerStatuses" | "ephemeralContainerStatuses" => "name",
        "containers" | "initContainers" | "ephemeralContainers" | "volumes" => "name",
        "env" => "name",
        "volumeMounts" => "mountPath",
        "ports" => "containerPort",
        "podIPs" | "hostIPs" => "ip",
        "addresses" => "type",
        "ownerReferences" => "uid",
        "finalizers" => return None,
        _ => return None,
    })
}

/// Strategic merge patch: like a merge patch, except that lists with a merge key merge by it.
pub fn strategic(target: &Value, patch: &Value, _field: &str) -> Value {
    let Value::Object(p) = patch else {
        return patch.clone();
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut r = p.clone();
        r.remove("$patch");
        return Value::Object(r);
    }
    let mut out = match target {
        Value::Object(t) => t.clone(),
        _ => Map::new(),
    };
    for (k, v) in p {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue;
        }
        if v.is_null() {
            out.remove(k);
            continue;
        }
        let merged = match (merge_key(k), out.get(k), v) {
            (Some(key), Some(Value::Array(cur)), Value::Array(items)) => {
                Value::Array(merge_list(cur, items, key))
            }
            (Some(key), None, Value::Array(items)) => Value::Array(merge_list(&[], items, key)),
            (_, cur, Value::Object(_)) => strategic(cur.unwrap_or(&Value::Null), v, k),
            _ => v.clone(),
        };
        out.insert(k.clone(), merged);
    }
    Value::Object(out)
}

fn merge_list(current: &[Value], patch: &[Value], key: &str) -> Vec<Value> {
    let mut out: Vec<Value> = current.to_vec();
    for item in patch {
        let id = item.get(key).cloned();
        let pos = id
            .as_ref()
            .and_then(|id| out.iter().position(|e| e.get(key) == Some(id)));
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(i) = pos {
                out.remove(i);
            }
            continue;
        }
        match pos {
            Some(i) => {
                let merged = strategic(&out[i], item, "");
                out[i] = merged;
            }
            None => out.push(strategic(&Value::Null, item, "")),
        }
    }
    out
}

/// RFC 6902 (the `json-patch` crate's): add, remove, replace, move, copy and test.
pub fn json_patch(current: &Value, patch: &Value) -> Result<Value, String> {
    let ops: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| format!("invalid JSON patch: {e}"))?;
    let mut doc = current.clone();
    json_patch::patch(&mut doc, &ops).map_err(|e| e.to_string())?;
    Ok(doc)
}

fn default_field(obj: &mut Map<String, Value>, k: &str, v: Value) {
    obj.entry(k.to_string()).or_insert(v);
}

/// The defaults the API server gives a pod on create (the ones the kubelet relies on).
pub fn default_pod(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    default_field(spec, "restartPolicy", json!("Always"));
    default_field(spec, "terminationGracePeriodSeconds", json!(30));
    default_field(spec, "dnsPolicy", json!("ClusterFirst"));
    default_field(spec, "schedulerName", json!("default-scheduler"));
    default_field(spec, "securityContext", json!({}));
    default_field(spec, "enableServiceLinks", json!(true));
    for list in ["initContainers", "containers"] {
        let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in cs.iter_mut().filter_map(Value::as_object_mut) {
            let image = c
                .get("image")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let last = image.rsplit('/').next().unwrap_or("");
            let tag = if image.contains('@') {
                "digest"
            } else {
                last.split_once(':').map(|(_, t)| t).unwrap_or("latest")
            };
            let policy = if tag == "latest" {
                "Always"
            } else {
                "IfNotPresent"
            };
            default_field(c, "imagePullPolicy", json!(policy));
            default_field(c, "terminationMessagePath", json!("/dev/termination-log"));
            default_field(c, "terminationMessagePolicy", json!("File"));
            default_field(c, "resources", json!({}));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patches_replace_lists_and_drop_nulls() {
        let cur = json!({"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2]});
        let got = merge(&cur, &json!({"a": null, "b": {"c": 5}, "l": [3]}));
        assert_eq!(got, json!({"b": {"c": 5, "d": 3}, "l": [3]}));
    }

    #[test]
    fn strategic_patches_merge_conditions_by_type() {
        let cur = json!({"status": {"phase": "Pending", "conditions": [
            {"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}});
        let p = json!({"status": {
            "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "PodScheduled"}],
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}});
        let got = apply(Kind::Strategic, &cur, &p).expect("patch");
        assert_eq!(
            got,
            json!({"status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}})
        );
        let del = json!({"status": {"conditions": [{"type": "Ready", "$patch": "delete"}]}});
        let got = apply(Kind::Strategic, &got, &del).expect("patch");
        assert_eq!(
            got["status"]["conditions"].as_array().map(Vec::len),
            Some(1)
        );
    }

    #[test]
    fn json_patches_apply_in_order() {
        let cur = json!({"metadata": {"labels": {"a": "1"}}, "l": [1]});
        let p = json!([
            {"op": "test", "path": "/metadata/labels/a", "value": "1"},
            {"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
            {"op": "add", "path": "/l/-", "value": 2},
            {"op": "remove", "path": "/metadata/labels/a"}
        ]);
        let got = apply(Kind::Json, &cur, &p).expect("patch");
        assert_eq!(
            got,
            json!({"metadata": {"labels": {"b/c": "2"}}, "l": [1, 2]})
        );
        assert!(
            apply(
                Kind::Json,
                &cur,
                &json!([{"op": "test", "path": "/l/0", "value": 9}])
            )
            .is_err()
        );
    }

    #[test]
    fn pods_get_api_defaults() {
        let mut pod = json!({"spec": {"containers": [
            {"name": "a", "image": "busybox"}, {"name": "b", "image": "r/x:1.0"}]}});
        default_pod(&mut pod);
        assert_eq!(pod["spec"]["restartPolicy"], "Always");
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(
            pod["spec"]["containers"][1]["imagePullPolicy"],
            "IfNotPresent"
        );
    }
}
