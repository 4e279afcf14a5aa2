//! What `hollow-bench` counts: API requests classified by verb and resource as the API
//! server's `apiserver_request_total` labels them (from the fixture's request log or the
//! real API server's audit log), the node status and lease writes among them, watches, and
//! the summary figures of one side (this kubelet's hollow nodes, or Go kubelets on
//! `fake-runtime`) of a run.

use std::collections::BTreeMap;

use serde::Serialize;

/// One API request as the bench counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiRequest {
    /// The API server's verb: get, list, watch, create, update, patch, delete, ...
    pub verb: String,
    /// The resource with its subresource (`pods/status`, `leases`, `nodes`).
    pub resource: String,
    /// The node the request was made by, when known (audit log: `system:node:<name>`).
    pub node: Option<String>,
    /// Bytes of the response, when known.
    pub response_bytes: Option<u64>,
}

/// Classifies an HTTP request (method, path, query) as the API server does: the verb
/// (`list`/`watch` for collection GETs, `get` for one object) and the resource with its
/// subresource. `None` for non-resource paths (`/version`, `/healthz`, discovery).
pub fn classify(method: &str, path: &str, query: &str) -> Option<(String, String)> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let rest = match parts.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, name, sub) = match rest {
        [] => return None,
        [resource] => (*resource, None, None),
        [resource, name] => (*resource, Some(*name), None),
        [resource, name, sub, ..] => (*resource, Some(*name), Some(*sub)),
    };
    let watching = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let verb = match (method.to_ascii_uppercase().as_str(), name) {
        ("GET", _) if watching => "watch",
        ("GET", None) => "list",
        ("GET", Some(_)) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", None) => "deletecollection",
        ("DELETE", Some(_)) => "delete",
        _ => return None,
    };
    let resource = match sub {
        Some(sub) => format!("{resource}/{sub}"),
        None => resource.to_string(),
    };
    Some((verb.to_string(), resource))
}

/// Is this a node status write (`patch`/`update` of `nodes/status`)?
pub fn is_node_status_write(r: &ApiRequest) -> bool {
    r.resource == "nodes/status" && (r.verb == "patch" || r.verb == "update")
}

/// Is this a lease write (`update`/`create` of `leases`)?
pub fn is_lease_write(r: &ApiRequest) -> bool {
    r.resource == "leases" && (r.verb == "update" || r.verb == "create" || r.verb == "patch")
}

/// The node's heartbeat: lease and node status reads and writes.
pub fn is_heartbeat(r: &ApiRequest) -> bool {
    r.resource == "leases"
        || r.resource == "nodes/status"
        || (r.resource == "nodes" && r.verb == "get")
}

/// Requests counted by `verb resource`, sorted.
pub fn by_verb_and_resource(requests: &[ApiRequest]) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for r in requests {
        *m.entry(format!("{} {}", r.verb, r.resource)).or_insert(0) += 1;
    }
    m
}

/// The `p`-th percentile (0–100) of `v` by nearest rank; 0 for an empty slice.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

/// One audit event's fields the bench reads (`audit.k8s.io/v1` Event, one JSON per line),
/// counted once per request: a watch at `ResponseStarted` (its `ResponseComplete` comes only
/// when it ends, maybe never while measured), anything else at `ResponseComplete`.
pub fn parse_audit_line(line: &str) -> Option<ApiRequest> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let verb = v.get("verb")?.as_str()?.to_string();
    let counted_stage = if verb == "watch" {
        "ResponseStarted"
    } else {
        "ResponseComplete"
    };
    if v.get("stage").and_then(|s| s.as_str()) != Some(counted_stage) {
        return None;
    }
    let user = v.pointer("/user/username")?.as_str()?;
    let node = user.strip_prefix("system:node:")?.to_string();
    let obj = v.get("objectRef")?;
    let resource = obj.get("resource")?.as_str()?;
    let resource = match obj.get("subresource").and_then(|s| s.as_str()) {
        Some(sub) if !sub.is_empty() => format!("{resource}/{sub}"),
        _ => resource.to_string(),
    };
    Some(ApiRequest {
        verb,
        resource,
        node: Some(node),
        response_bytes: None,
    })
}

/// The figures of one side of a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SideResult {
    pub name: String,
    pub nodes: usize,
    pub pods: usize,
    /// Seconds from the first node started to every node Ready.
    pub nodes_ready_seconds: f64,
    /// Pods reaching Running per second, from the first created to the last Running.
    pub pods_per_second: f64,
    pub startup_p50_seconds: f64,
    pub startup_p99_seconds: f64,
    /// Requests the nodes made from the first pod created to the last pod gone, per pod
    /// (heartbeats — lease and node status — left out: they are per node and minute).
    pub requests_per_pod: f64,
    /// The same by `verb resource`, per pod.
    pub requests_per_pod_by_kind: BTreeMap<String, f64>,
    /// Node status writes per node per minute in the idle window (no pod changes).
    pub node_status_writes_per_node_minute: f64,
    /// Lease writes per node per minute in the idle window.
    pub lease_writes_per_node_minute: f64,
    /// All requests per node per minute in the idle window.
    pub idle_requests_per_node_minute: f64,
    /// Watches opened per node over the whole run.
    pub watches_per_node: f64,
    /// Response bytes per node over the whole run, when the API server's log has them.
    pub bytes_per_node: Option<f64>,
    /// Resident memory per node (MiB) with the pods running.
    pub rss_mib_per_node: f64,
    /// CPU per node over the run (milli-cores).
    pub cpu_millicores_per_node: f64,
}

impl SideResult {
    /// Fills the request figures from `churn` (first pod created to last gone) and `idle`
    /// (an idle window of `idle_minutes`), and the watches from `all`.
    pub fn count_requests(
        &mut self,
        churn: &[ApiRequest],
        idle: &[ApiRequest],
        idle_minutes: f64,
        all: &[ApiRequest],
    ) {
        let pods = self.pods.max(1) as f64;
        let nodes = self.nodes.max(1) as f64;
        // The node's own heartbeat (lease, node status) depends on how long the churn took,
        // not on the pods: it is counted per node and minute instead.
        let churn: Vec<ApiRequest> = churn.iter().filter(|r| !is_heartbeat(r)).cloned().collect();
        self.requests_per_pod = churn.len() as f64 / pods;
        self.requests_per_pod_by_kind = by_verb_and_resource(&churn)
            .into_iter()
            .map(|(k, n)| (k, n as f64 / pods))
            .collect();
        let per_node_minute = |n: usize| n as f64 / nodes / idle_minutes.max(1e-9);
        self.node_status_writes_per_node_minute =
            per_node_minute(idle.iter().filter(|r| is_node_status_write(r)).count());
        self.lease_writes_per_node_minute =
            per_node_minute(idle.iter().filter(|r| is_lease_write(r)).count());
        self.idle_requests_per_node_minute = per_node_minute(idle.len());
        self.watches_per_node = all.iter().filter(|r| r.verb == "watch").count() as f64 / nodes;
        let bytes: Option<u64> = all.iter().map(|r| r.response_bytes).sum();
        self.bytes_per_node = bytes.map(|b| b as f64 / nodes);
    }
}

/// How a table row renders one side.
type Row = Box<dyn Fn(&SideResult) -> String>;

/// The readable table: one column per side.
pub fn table(sides: &[SideResult]) -> String {
    let mut out = String::from("| figure |");
    for s in sides {
        out.push_str(&format!(" {} |", s.name));
    }
    out.push_str("\n|---|");
    for _ in sides {
        out.push_str("---:|");
    }
    out.push('\n');
    let rows: Vec<(&str, Row)> = vec![
        (
            "nodes × pods",
            Box::new(|s| format!("{} × {}", s.nodes, s.pods / s.nodes.max(1))),
        ),
        (
            "nodes Ready (s)",
            Box::new(|s| format!("{:.1}", s.nodes_ready_seconds)),
        ),
        (
            "pods/s to Running",
            Box::new(|s| format!("{:.1}", s.pods_per_second)),
        ),
        (
            "startup p50 (s)",
            Box::new(|s| format!("{:.2}", s.startup_p50_seconds)),
        ),
        (
            "startup p99 (s)",
            Box::new(|s| format!("{:.2}", s.startup_p99_seconds)),
        ),
        (
            "API requests per pod lifecycle",
            Box::new(|s| format!("{:.1}", s.requests_per_pod)),
        ),
        (
            "node status writes /node/min (idle)",
            Box::new(|s| format!("{:.2}", s.node_status_writes_per_node_minute)),
        ),
        (
            "lease writes /node/min (idle)",
            Box::new(|s| format!("{:.2}", s.lease_writes_per_node_minute)),
        ),
        (
            "all requests /node/min (idle)",
            Box::new(|s| format!("{:.2}", s.idle_requests_per_node_minute)),
        ),
        (
            "watches opened per node",
            Box::new(|s| format!("{:.1}", s.watches_per_node)),
        ),
        (
            "bytes sent per node",
            Box::new(|s| {
                s.bytes_per_node
                    .map_or("n/a".to_string(), |b| format!("{b:.0}"))
            }),
        ),
        (
            "RSS per node (MiB)",
            Box::new(|s| format!("{:.1}", s.rss_mib_per_node)),
        ),
        (
            "CPU per node (millicores)",
            Box::new(|s| format!("{:.1}", s.cpu_millicores_per_node)),
        ),
    ];
    for (label, f) in rows {
        out.push_str(&format!("| {label} |"));
        for s in sides {
            out.push_str(&format!(" {} |", f(s)));
        }
        out.push('\n');
    }
    let mut kinds: Vec<&String> = sides
        .iter()
        .flat_map(|s| s.requests_per_pod_by_kind.keys())
        .collect();
    kinds.sort();
    kinds.dedup();
    for k in kinds {
        out.push_str(&format!("| per pod: {k} |"));
        for s in sides {
            let v = s.requests_per_pod_by_kind.get(k).copied().unwrap_or(0.0);
            out.push_str(&format!(" {v:.2} |"));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_classified_as_the_api_server_labels_them() {
        let c = |m, p, q| classify(m, p, q).map(|(v, r)| format!("{v} {r}"));
        assert_eq!(
            c("GET", "/api/v1/pods", "fieldSelector=spec.nodeName%3Dn1"),
            Some("list pods".into())
        );
        assert_eq!(
            c("GET", "/api/v1/pods", "watch=true&resourceVersion=5"),
            Some("watch pods".into())
        );
        assert_eq!(
            c("PATCH", "/api/v1/nodes/n1/status", ""),
            Some("patch nodes/status".into())
        );
        assert_eq!(
            c("PATCH", "/api/v1/namespaces/ns/pods/p/status", ""),
            Some("patch pods/status".into())
        );
        assert_eq!(
            c(
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
                ""
            ),
            Some("update leases".into())
        );
        assert_eq!(
            c("POST", "/api/v1/namespaces/ns/events", ""),
            Some("create events".into())
        );
        assert_eq!(
            c("DELETE", "/api/v1/namespaces/ns/pods/p", ""),
            Some("delete pods".into())
        );
        assert_eq!(
            c("GET", "/api/v1/namespaces/ns/configmaps/c", ""),
            Some("get configmaps".into())
        );
        assert_eq!(
            c("GET", "/api/v1/namespaces", ""),
            Some("list namespaces".into())
        );
        assert_eq!(c("GET", "/version", ""), None);
        assert_eq!(c("GET", "/api/v1", ""), None);
    }

    #[test]
    fn node_status_and_lease_writes_are_told_apart() {
        let r = |verb: &str, resource: &str| ApiRequest {
            verb: verb.into(),
            resource: resource.into(),
            node: None,
            response_bytes: None,
        };
        assert!(is_node_status_write(&r("patch", "nodes/status")));
        assert!(!is_node_status_write(&r("get", "nodes")));
        assert!(is_lease_write(&r("update", "leases")));
        assert!(!is_lease_write(&r("get", "leases")));
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[3.0], 99.0), 3.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn audit_events_of_nodes_are_read_once_per_request() {
        let line = r#"{"kind":"Event","stage":"ResponseComplete","verb":"patch","user":{"username":"system:node:h1"},"objectRef":{"resource":"pods","subresource":"status","namespace":"ns","name":"p"}}"#;
        assert_eq!(
            parse_audit_line(line),
            Some(ApiRequest {
                verb: "patch".into(),
                resource: "pods/status".into(),
                node: Some("h1".into()),
                response_bytes: None,
            })
        );
        let started = line.replace("ResponseComplete", "RequestReceived");
        assert_eq!(parse_audit_line(&started), None);
        let scheduler = line.replace("system:node:h1", "system:kube-scheduler");
        assert_eq!(parse_audit_line(&scheduler), None);
        // A watch counts when it starts (it completes only when it ends).
        let watch = line
            .replace(r#""verb":"patch""#, r#""verb":"watch""#)
            .replace(r#","subresource":"status""#, "");
        assert_eq!(parse_audit_line(&watch), None);
        let started = watch.replace("ResponseComplete", "ResponseStarted");
        assert_eq!(
            parse_audit_line(&started).map(|r| (r.verb, r.resource)),
            Some(("watch".into(), "pods".into()))
        );
    }

    #[test]
    fn request_figures_are_per_pod_and_per_node_minute() {
        let r = |verb: &str, resource: &str| ApiRequest {
            verb: verb.into(),
            resource: resource.into(),
            node: None,
            response_bytes: None,
        };
        let mut s = SideResult {
            nodes: 2,
            pods: 4,
            ..Default::default()
        };
        let mut churn = vec![r("patch", "pods/status"); 8];
        churn.push(r("update", "leases"));
        let idle = vec![
            r("update", "leases"),
            r("update", "leases"),
            r("patch", "nodes/status"),
        ];
        let all = vec![r("watch", "pods"), r("watch", "pods")];
        s.count_requests(&churn, &idle, 0.5, &all);
        assert_eq!(s.requests_per_pod, 2.0);
        assert_eq!(s.requests_per_pod_by_kind["patch pods/status"], 2.0);
        assert_eq!(s.lease_writes_per_node_minute, 2.0);
        assert_eq!(s.node_status_writes_per_node_minute, 1.0);
        assert_eq!(s.watches_per_node, 1.0);
        assert_eq!(s.bytes_per_node, None);
    }
}
