//! What `hollow-bench` counts: API requests classified by verb and resource as the API
//! server's `apiserver_request_total` labels them (from the fixture's request log or the
//! real API server's audit log), the node status and lease writes among them, watches, bytes
//! each way (from `byteproxy`'s counts), the startup split into phases, and the summary
//! figures of one side (this kubelet's hollow nodes, or Go kubelets on `fake-runtime`) of a
//! run.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::byteproxy::ByteCounts;

/// One API request as the bench counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiRequest {
    /// The API server's verb: get, list, watch, create, update, patch, delete, ...
    pub verb: String,
    /// The resource with its subresource (`pods/status`, `leases`, `nodes`).
    pub resource: String,
    /// The node the request was made by, when known (audit log: `system:node:<name>`).
    pub node: Option<String>,
    /// When the API server received it, in milliseconds since the epoch, when known (audit
    /// log: `requestReceivedTimestamp`).
    pub at_ms: Option<i64>,
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

/// The lines of the log at `path` that start in the byte range `[from, to)`: the cursors
/// are the file's length when taken (a metadata call, where counting lines meant reading a
/// file of hundreds of megabytes at each cursor, which lengthened a measured window by the
/// seconds that took). A line being written when a cursor was taken belongs to the window
/// it started in.
pub fn log_lines_between(
    path: &std::path::Path,
    from: u64,
    to: u64,
) -> std::io::Result<Vec<String>> {
    use std::io::{BufRead, Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let mut skip_first = false;
    if from > 0 {
        f.seek(SeekFrom::Start(from - 1))?;
        let mut prev = [0u8; 1];
        f.read_exact(&mut prev)?;
        skip_first = prev[0] != b'\n';
    }
    let mut r = std::io::BufReader::new(f);
    let mut at = from;
    let mut out = Vec::new();
    let mut line = Vec::new();
    while at < to {
        line.clear();
        let n = r.read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        at += n as u64;
        if std::mem::take(&mut skip_first) {
            continue;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        out.push(String::from_utf8_lossy(&line).into_owned());
    }
    Ok(out)
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
    let at_ms = v
        .get("requestReceivedTimestamp")
        .and_then(|t| t.as_str())
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.timestamp_millis());
    Some(ApiRequest {
        verb,
        resource,
        node: Some(node),
        at_ms,
    })
}

/// The median, over the nodes, of each node's median time between two lease writes (seconds),
/// from the requests' times: the renewal period itself, where a count of writes in a
/// 60-second window is 5 or 6 by the phase of the renewals (and one phase for all the nodes
/// of a side started together). `None` without times or without two writes of a node.
pub fn lease_renewal_seconds(requests: &[ApiRequest]) -> Option<f64> {
    let mut by_node: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for r in requests.iter().filter(|r| is_lease_write(r)) {
        if let (Some(node), Some(at)) = (r.node.as_deref(), r.at_ms) {
            by_node.entry(node).or_default().push(at);
        }
    }
    let medians: Vec<f64> = by_node
        .into_values()
        .filter_map(|mut times| {
            times.sort_unstable();
            let gaps: Vec<f64> = times
                .windows(2)
                .map(|w| (w[1] - w[0]) as f64 / 1000.0)
                .collect();
            (!gaps.is_empty()).then(|| percentile(&gaps, 50.0))
        })
        .collect();
    (!medians.is_empty()).then(|| percentile(&medians, 50.0))
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
    /// The lease renewal period over the whole run ([`lease_renewal_seconds`]); `None` where
    /// the requests carry no times (the fixture).
    pub lease_renewal_seconds: Option<f64>,
    /// All requests per node per minute in the idle window.
    pub idle_requests_per_node_minute: f64,
    /// Watches opened per node over the whole run.
    pub watches_per_node: f64,
    /// Bytes the API server sent to the side's nodes, per node, over the whole run (from
    /// the first node started to the last pod gone), as a byte-counting proxy between them
    /// saw them: TLS records, HTTP headers and bodies, watch streams.
    pub bytes_to_nodes_per_node: f64,
    /// Bytes the nodes sent to the API server, per node, over the whole run.
    pub bytes_from_nodes_per_node: f64,
    /// Bytes the API server sent per node per minute in the idle window.
    pub idle_bytes_to_nodes_per_node_minute: f64,
    /// Bytes the nodes sent per node per minute in the idle window.
    pub idle_bytes_from_nodes_per_node_minute: f64,
    /// Response body bytes per node over the whole run as the API server logged them (the
    /// fixture counts them; the real API server's audit log has no sizes): a cross-check of
    /// the proxy's figure, which also counts headers and framing.
    pub api_logged_response_bytes_per_node: Option<f64>,
    /// Where the startup time went, on a real control plane: p50/p99 (s) of each phase.
    pub startup_phases: Option<StartupPhases>,
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
        self.lease_renewal_seconds = lease_renewal_seconds(all);
        self.idle_requests_per_node_minute = per_node_minute(idle.len());
        self.watches_per_node = all.iter().filter(|r| r.verb == "watch").count() as f64 / nodes;
    }

    /// Fills the byte figures from the proxy's counts over the whole run and over the idle
    /// window of `idle_minutes`.
    pub fn count_bytes(&mut self, whole: &ByteCounts, idle: &ByteCounts, idle_minutes: f64) {
        let nodes = self.nodes.max(1) as f64;
        self.bytes_to_nodes_per_node = whole.to_clients as f64 / nodes;
        self.bytes_from_nodes_per_node = whole.to_upstream as f64 / nodes;
        let per_node_minute = |b: u64| b as f64 / nodes / idle_minutes.max(1e-9);
        self.idle_bytes_to_nodes_per_node_minute = per_node_minute(idle.to_clients);
        self.idle_bytes_from_nodes_per_node_minute = per_node_minute(idle.to_upstream);
    }
}

/// One pod's way to Running on a real control plane, in seconds since the Unix epoch: the
/// API server's times (`creationTimestamp`, the `PodScheduled` condition's transition, the
/// kubelet's `status.startTime`, all whole seconds) and the bench's watch seeing it Running.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PodTimeline {
    pub created: f64,
    pub scheduled: f64,
    /// When the kubelet acknowledged the pod (`status.startTime`, which it sets at its first
    /// sync of the pod).
    pub kubelet_saw: f64,
    /// When the bench's watch saw the pod Running (the kubelet's status patch applied).
    pub running_seen: f64,
}

/// p50 and p99 (s) of each phase of the startup (upstream's pod startup SLI spans them all).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct StartupPhases {
    /// `creationTimestamp` → `PodScheduled` (the scheduler's queue and binding).
    pub created_to_scheduled: [f64; 2],
    /// `PodScheduled` → `status.startTime` (the bind reaching the kubelet's watch, its
    /// admission and first sync).
    pub scheduled_to_kubelet: [f64; 2],
    /// `status.startTime` → Running seen by a watch (sandbox, container start, the status
    /// manager's patch).
    pub kubelet_to_running: [f64; 2],
    /// `creationTimestamp` → Running seen, as the server's clock has it (whole seconds at
    /// the start: up to a second longer than the bench's own figure).
    pub created_to_running: [f64; 2],
}

impl StartupPhases {
    /// The phases' percentiles over `pods`; `None` for no pods.
    pub fn of(pods: &[PodTimeline]) -> Option<StartupPhases> {
        if pods.is_empty() {
            return None;
        }
        let p = |f: &dyn Fn(&PodTimeline) -> f64| {
            let v: Vec<f64> = pods.iter().map(|t| f(t).max(0.0)).collect();
            [percentile(&v, 50.0), percentile(&v, 99.0)]
        };
        Some(StartupPhases {
            created_to_scheduled: p(&|t| t.scheduled - t.created),
            scheduled_to_kubelet: p(&|t| t.kubelet_saw - t.scheduled),
            kubelet_to_running: p(&|t| t.running_seen - t.kubelet_saw),
            created_to_running: p(&|t| t.running_seen - t.created),
        })
    }
}

/// How a table row renders one side.
type Row = Box<dyn Fn(&SideResult) -> String>;

/// One phase's `p50 / p99` cell, `n/a` without phases (the fixture schedules nothing).
fn phase(s: &SideResult, f: fn(&StartupPhases) -> [f64; 2]) -> String {
    s.startup_phases.as_ref().map_or("n/a".to_string(), |p| {
        let [p50, p99] = f(p);
        format!("{p50:.1} / {p99:.1}")
    })
}

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
            "lease renewal period, median (s)",
            Box::new(|s| {
                s.lease_renewal_seconds
                    .map_or("n/a".into(), |v| format!("{v:.2}"))
            }),
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
            "KiB API server → node, whole run",
            Box::new(|s| format!("{:.1}", s.bytes_to_nodes_per_node / 1024.0)),
        ),
        (
            "KiB node → API server, whole run",
            Box::new(|s| format!("{:.1}", s.bytes_from_nodes_per_node / 1024.0)),
        ),
        (
            "KiB/min API server → node (idle)",
            Box::new(|s| format!("{:.2}", s.idle_bytes_to_nodes_per_node_minute / 1024.0)),
        ),
        (
            "KiB/min node → API server (idle)",
            Box::new(|s| format!("{:.2}", s.idle_bytes_from_nodes_per_node_minute / 1024.0)),
        ),
        (
            "KiB response bodies logged by the API server",
            Box::new(|s| {
                s.api_logged_response_bytes_per_node
                    .map_or("n/a".to_string(), |b| format!("{:.1}", b / 1024.0))
            }),
        ),
        (
            "phase p50/p99 (s): created → scheduled",
            Box::new(|s| phase(s, |p| p.created_to_scheduled)),
        ),
        (
            "phase p50/p99 (s): scheduled → kubelet saw it",
            Box::new(|s| phase(s, |p| p.scheduled_to_kubelet)),
        ),
        (
            "phase p50/p99 (s): kubelet saw it → Running seen",
            Box::new(|s| phase(s, |p| p.kubelet_to_running)),
        ),
        (
            "phase p50/p99 (s): created → Running seen (server clock)",
            Box::new(|s| phase(s, |p| p.created_to_running)),
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

    #[test]
    fn log_lines_are_taken_by_where_they_start() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("audit.log");
        std::fs::write(&p, "one\ntwo\nthree\nfour").unwrap();
        let len = std::fs::metadata(&p).unwrap().len();
        assert_eq!(log_lines_between(&p, 0, 4).unwrap(), ["one"]);
        assert_eq!(
            log_lines_between(&p, 4, len).unwrap(),
            ["two", "three", "four"]
        );
        // A cursor inside "two" (written half when taken): "two" is the earlier window's,
        // read whole there.
        assert_eq!(log_lines_between(&p, 0, 6).unwrap(), ["one", "two"]);
        assert_eq!(log_lines_between(&p, 6, 14).unwrap(), ["three"]);
        assert!(log_lines_between(&p, len, len).unwrap().is_empty());
    }

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
            at_ms: None,
        };
        assert!(is_node_status_write(&r("patch", "nodes/status")));
        assert!(!is_node_status_write(&r("get", "nodes")));
        assert!(is_lease_write(&r("update", "leases")));
        assert!(!is_lease_write(&r("get", "leases")));
    }

    #[test]
    fn the_lease_renewal_period_is_the_median_gap_of_each_nodes_writes() {
        let w = |node: &str, at_ms: Option<i64>| ApiRequest {
            verb: "update".into(),
            resource: "leases".into(),
            node: Some(node.into()),
            at_ms,
        };
        let mut v = Vec::new();
        // n1 renews every 10.2 s, n2 every 10.4 s with one 30 s gap (a kill), n3 once.
        for k in 0..7 {
            v.push(w("n1", Some(k * 10_200)));
            v.push(w(
                "n2",
                Some(5_000 + k * 10_400 + if k > 3 { 19_600 } else { 0 }),
            ));
        }
        v.push(w("n3", Some(1_000)));
        v.push(ApiRequest {
            verb: "get".into(),
            ..w("n1", Some(1))
        });
        let got = lease_renewal_seconds(&v).expect("a period");
        assert!((got - 10.2).abs() < 1e-9, "{got}");
        assert_eq!(lease_renewal_seconds(&[w("n1", None), w("n1", None)]), None);
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
        let line = r#"{"kind":"Event","stage":"ResponseComplete","verb":"patch","user":{"username":"system:node:h1"},"objectRef":{"resource":"pods","subresource":"status","namespace":"ns","name":"p"},"requestReceivedTimestamp":"2026-12-06T16:55:01.250000Z"}"#;
        assert_eq!(
            parse_audit_line(line),
            Some(ApiRequest {
                verb: "patch".into(),
                resource: "pods/status".into(),
                node: Some("h1".into()),
                at_ms: Some(1_796_576_101_250),
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
            at_ms: None,
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
        let whole = ByteCounts {
            to_upstream: 2000,
            to_clients: 8000,
            connections: 4,
        };
        let idle = ByteCounts {
            to_upstream: 100,
            to_clients: 300,
            connections: 0,
        };
        s.count_bytes(&whole, &idle, 0.5);
        assert_eq!(s.bytes_to_nodes_per_node, 4000.0);
        assert_eq!(s.bytes_from_nodes_per_node, 1000.0);
        assert_eq!(s.idle_bytes_to_nodes_per_node_minute, 300.0);
        assert_eq!(s.idle_bytes_from_nodes_per_node_minute, 100.0);
        assert!(table(&[s]).contains("| KiB API server → node, whole run | 3.9 |"));
    }

    #[test]
    fn startup_time_is_split_into_phases() {
        let t = |created, scheduled, kubelet_saw, running_seen| PodTimeline {
            created,
            scheduled,
            kubelet_saw,
            running_seen,
        };
        let pods = vec![t(100.0, 101.0, 103.0, 103.5), t(100.0, 100.0, 100.0, 100.5)];
        let p = StartupPhases::of(&pods).expect("phases");
        assert_eq!(p.created_to_scheduled, [0.0, 1.0]);
        assert_eq!(p.scheduled_to_kubelet, [0.0, 2.0]);
        assert_eq!(p.kubelet_to_running, [0.5, 0.5]);
        assert_eq!(p.created_to_running, [0.5, 3.5]);
        assert_eq!(StartupPhases::of(&[]), None);
    }
}
