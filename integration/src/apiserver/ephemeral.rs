//! The pods' `ephemeralcontainers` subresource (upstream `EphemeralContainersREST`, what
//! `kubectl debug` writes): a PUT or PATCH of it changes only `spec.ephemeralContainers` of the
//! stored pod. Like upstream's `ValidatePodEphemeralContainersUpdate`, containers already there
//! may not change or go away, names must be new in the pod, and static (mirror) pods get none.
//! New entries get the API defaults of a container.

use serde_json::{Value, json};

const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

fn names_of(spec: &Value, list: &str) -> Vec<String> {
    spec.get(list)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// The stored pod `current` with the ephemeral containers of `wanted` (a whole pod, from PUT
/// or from a patch applied to `current`), or the 422 message why not.
pub fn update(current: &Value, wanted: &Value) -> Result<Value, String> {
    let path = "spec.ephemeralContainers";
    let old: Vec<Value> = current
        .pointer("/spec/ephemeralContainers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut new: Vec<Value> = wanted
        .pointer("/spec/ephemeralContainers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if new.len() > old.len()
        && current
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(MIRROR_ANNOTATION))
            .is_some()
    {
        return Err(format!(
            "{path}: Forbidden: static pods do not support ephemeral containers"
        ));
    }
    for o in &old {
        let name = o.get("name").and_then(Value::as_str).unwrap_or_default();
        let kept = new
            .iter()
            .find(|n| n.get("name").and_then(Value::as_str) == Some(name));
        if kept != Some(o) {
            return Err(format!(
                "{path}: Forbidden: existing ephemeral containers \"{name}\" may not be changed"
            ));
        }
    }
    let spec = current.get("spec").cloned().unwrap_or(json!({}));
    let mut taken: Vec<String> = names_of(&spec, "containers");
    taken.extend(names_of(&spec, "initContainers"));
    let old_names = names_of(&spec, "ephemeralContainers");
    for (i, c) in new.iter_mut().enumerate() {
        let name = c
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if old_names.contains(&name) {
            continue;
        }
        if name.is_empty() {
            return Err(format!("{path}[{i}].name: Required value"));
        }
        if c.get("image")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(format!("{path}[{i}].image: Required value"));
        }
        if taken.contains(&name) {
            return Err(format!("{path}[{i}].name: Duplicate value: \"{name}\""));
        }
        taken.push(name);
        if let Some(m) = c.as_object_mut() {
            for (k, v) in [
                ("imagePullPolicy", json!("IfNotPresent")),
                ("terminationMessagePath", json!("/dev/termination-log")),
                ("terminationMessagePolicy", json!("File")),
            ] {
                m.entry(k).or_insert(v);
            }
        }
    }
    let mut out = current.clone();
    if let Some(s) = out.get_mut("spec").and_then(Value::as_object_mut) {
        s.insert("ephemeralContainers".into(), Value::Array(new));
    }
    // The writer's resourceVersion, if any, is its precondition.
    if let (Some(rv), Some(m)) = (
        wanted.pointer("/metadata/resourceVersion").cloned(),
        out.get_mut("metadata").and_then(Value::as_object_mut),
    ) {
        m.insert("resourceVersion".into(), rv);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(eph: Value, annotations: Value) -> Value {
        json!({"metadata": {"name": "p", "annotations": annotations, "resourceVersion": "5"},
               "spec": {"containers": [{"name": "app", "image": "busybox"}],
                        "ephemeralContainers": eph}})
    }

    #[test]
    fn adds_keeps_and_refuses_like_the_api_server() {
        let cur = pod(json!([]), json!({}));
        let want = pod(
            json!([{"name": "debug", "image": "busybox", "targetContainerName": "app"}]),
            json!({}),
        );
        let out = update(&cur, &want).expect("added");
        assert_eq!(
            out.pointer("/spec/ephemeralContainers/0/terminationMessagePolicy"),
            Some(&json!("File"))
        );
        assert_eq!(
            out.pointer("/spec/containers"),
            cur.pointer("/spec/containers")
        );
        // Changing or removing one is refused; a duplicate name too.
        let changed = pod(json!([{"name": "debug", "image": "alpine"}]), json!({}));
        assert!(
            update(&out, &changed)
                .expect_err("changed")
                .contains("may not be changed")
        );
        assert!(update(&out, &pod(json!([]), json!({}))).is_err());
        let dup = pod(json!([{"name": "app", "image": "busybox"}]), json!({}));
        assert!(
            update(&cur, &dup)
                .expect_err("dup")
                .contains("Duplicate value")
        );
        let mirror = pod(json!([]), json!({MIRROR_ANNOTATION: "x"}));
        assert!(
            update(&mirror, &want)
                .expect_err("static")
                .contains("static pods")
        );
    }
}
