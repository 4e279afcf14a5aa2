//! A Kubernetes API server fixture for testing the kubelet's API-server mode on machines where
//! no kube-apiserver can run. It speaks the wire protocol real clients (kube-rs, kubectl) use —
//! JSON of the API types, `Status` errors, list and watch with resourceVersion, bookmarks and
//! 410 Gone, field selectors on `spec.nodeName`, create / get / update / merge and strategic
//! merge patches / delete with preconditions and graceful pod deletion, the status subresource
//! — over plain HTTP on loopback. The write rules live in `store`, the patch formats in
//! `patch`; this module owns the HTTP routing and the watch streams, plus the test hooks
//! (compact the history, drop every open watch, count requests).
//!
//! Not served yet: TLS and client-certificate authentication, TokenRequest, discovery.

pub mod patch;
pub mod store;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use store::{Change, Key, Store, StoreError};

type Body = BoxBody<Bytes, Infallible>;

/// How often a watch that asked for bookmarks gets one.
pub const BOOKMARK_EVERY: Duration = Duration::from_secs(5);

/// One request as the fixture saw it (for counting what a client sends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: String,
}

struct Shared {
    store: Store,
    /// Cancelled to drop every open watch; replaced by a fresh token each time.
    watches: Mutex<CancellationToken>,
    seen: Mutex<Vec<Seen>>,
}

/// A running fixture API server.
pub struct ApiServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The kind, apiVersion and whether namespaced, of the resources served.
pub fn resource_info(resource: &str) -> Option<(&'static str, &'static str, bool)> {
    Some(match resource {
        "pods" => ("Pod", "v1", true),
        "nodes" => ("Node", "v1", false),
        "namespaces" => ("Namespace", "v1", false),
        "configmaps" => ("ConfigMap", "v1", true),
        "secrets" => ("Secret", "v1", true),
        "services" => ("Service", "v1", true),
        "serviceaccounts" => ("ServiceAccount", "v1", true),
        "events" => ("Event", "v1", true),
        "leases" => ("Lease", "coordination.k8s.io/v1", true),
        _ => return None,
    })
}

impl ApiServer {
    /// Starts serving on 127.0.0.1 (a free port).
    pub async fn start() -> std::io::Result<ApiServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            store: Store::new(),
            watches: Mutex::new(CancellationToken::new()),
            seen: Mutex::new(Vec::new()),
        });
        let stop = CancellationToken::new();
        let (s, st) = (shared.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let conn = tokio::select! {
                    _ = st.cancelled() => return,
                    c = listener.accept() => c,
                };
                let Ok((tcp, _)) = conn else { continue };
                let s = s.clone();
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let s = s.clone();
                        async move { Ok::<_, Infallible>(handle(s, req).await) }
                    });
                    let io = hyper_util::rt::TokioIo::new(tcp);
                    let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, svc);
                    tokio::select! {
                        _ = st.cancelled() => {}
                        _ = conn => {}
                    }
                });
            }
        });
        Ok(ApiServer { addr, shared, stop })
    }

    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig pointing at this server (no credentials: the fixture does not
    /// authenticate yet).
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fixture\n  cluster:\n    server: {}\ncontexts:\n- name: fixture\n  context:\n    cluster: fixture\n    user: kubelet\ncurrent-context: fixture\nusers:\n- name: kubelet\n  user: {{}}\n",
            self.url()
        )
    }

    /// The object store (to create or inspect objects directly).
    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// Forgets the watch history: resuming watches get 410 Gone.
    pub fn compact(&self) {
        self.shared.store.compact();
    }

    /// Ends every open watch (as a dropped connection or an API server restart would).
    pub fn drop_watches(&self) {
        let mut w = self
            .shared
            .watches
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        w.cancel();
        *w = CancellationToken::new();
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.shared
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

fn full(status: StatusCode, body: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

fn error(e: &StoreError) -> Response<Body> {
    let (code, _) = e.code_reason();
    full(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &e.status(),
    )
}

fn status_error(code: u16, reason: &str, message: &str) -> Response<Body> {
    full(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code}),
    )
}

/// What a request path names.
#[derive(Debug, PartialEq)]
struct Target {
    resource: String,
    /// Some for namespaced paths; None for cluster-scoped or all-namespaces collections.
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

fn parse_path(path: &str) -> Option<Target> {
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

fn query_map(q: &str) -> HashMap<String, String> {
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

fn matches(obj: &Value, q: &HashMap<String, String>) -> bool {
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

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    shared
        .seen
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Seen {
            method: method.to_string(),
            path: path.clone(),
            query: query.clone(),
        });
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return status_error(400, "BadRequest", "cannot read body"),
    };
    if path == "/version" {
        return full(
            StatusCode::OK,
            &json!({"major": "1", "minor": "34", "gitVersion": "v1.34.0-fixture",
                    "platform": "linux/amd64"}),
        );
    }
    let Some(t) = parse_path(&path) else {
        return status_error(
            404,
            "NotFound",
            &format!("the server could not find {path}"),
        );
    };
    let Some((kind, api_version, namespaced)) = resource_info(&t.resource) else {
        return status_error(404, "NotFound", &format!("unknown resource {}", t.resource));
    };
    let q = query_map(&query);
    let parse_body = || -> Result<Value, Box<Response<Body>>> {
        serde_json::from_slice(&body).map_err(|e| {
            Box::new(status_error(
                400,
                "BadRequest",
                &format!("invalid JSON body: {e}"),
            ))
        })
    };
    let key = |name: &str| Key {
        resource: t.resource.clone(),
        namespace: if namespaced {
            t.namespace.clone().unwrap_or_default()
        } else {
            String::new()
        },
        name: name.to_string(),
    };
    let store = &shared.store;
    match (&method, t.name.as_deref(), t.subresource.as_deref()) {
        (&Method::GET, None, None) => {
            let watch = q.get("watch").is_some_and(|w| w == "true" || w == "1");
            if watch {
                return watch_response(shared.clone(), &t, kind, api_version, &q);
            }
            let (items, rv) = store.list(&t.resource, t.namespace.as_deref());
            let items: Vec<Value> = items.into_iter().filter(|o| matches(o, &q)).collect();
            full(
                StatusCode::OK,
                &json!({"kind": format!("{kind}List"), "apiVersion": api_version,
                        "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
            )
        }
        (&Method::POST, None, None) => {
            let mut obj = match parse_body() {
                Ok(o) => o,
                Err(r) => return *r,
            };
            let mut name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if name.is_empty()
                && let Some(prefix) = obj
                    .pointer("/metadata/generateName")
                    .and_then(Value::as_str)
            {
                let n = store.resource_version();
                name = format!("{prefix}{:05x}", (n * 2_654_435_761) & 0xfffff);
            }
            if let Some(m) = obj.as_object_mut() {
                m.insert("kind".into(), json!(kind));
                m.insert("apiVersion".into(), json!(api_version));
            }
            if t.resource == "pods" {
                patch::default_pod(&mut obj);
            }
            match store.create(key(&name), obj) {
                Ok(o) => full(StatusCode::CREATED, &o),
                Err(e) => error(&e),
            }
        }
        (&Method::POST, Some(name), Some("token")) if t.resource == "serviceaccounts" => {
            let req = parse_body().unwrap_or(json!({}));
            let secs = req
                .pointer("/spec/expirationSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(3600);
            let exp = chrono::Utc::now() + chrono::Duration::seconds(secs);
            let ns = t.namespace.clone().unwrap_or_default();
            let token = format!("fixture.{ns}.{name}.{}", store.resource_version());
            full(
                StatusCode::CREATED,
                &json!({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                        "metadata": {"name": name, "namespace": ns},
                        "spec": req.get("spec").cloned().unwrap_or(json!({})),
                        "status": {"token": token,
                                   "expirationTimestamp": exp.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)}}),
            )
        }
        (&Method::GET, Some(name), None) => match store.get(&key(name)) {
            Ok(o) => full(StatusCode::OK, &o),
            Err(e) => error(&e),
        },
        (&Method::GET, Some(name), Some("status")) => match store.get(&key(name)) {
            Ok(o) => full(StatusCode::OK, &o),
            Err(e) => error(&e),
        },
        (&Method::PUT, Some(name), sub @ (None | Some("status"))) => {
            let obj = match parse_body() {
                Ok(o) => o,
                Err(r) => return *r,
            };
            match store.update(&key(name), obj, sub == Some("status")) {
                Ok(o) => full(StatusCode::OK, &o),
                Err(e) => error(&e),
            }
        }
        (&Method::PATCH, Some(name), sub @ (None | Some("status"))) => {
            let p = match parse_body() {
                Ok(o) => o,
                Err(r) => return *r,
            };
            let kind = match content_type.split(';').next().unwrap_or("").trim() {
                "application/merge-patch+json" => patch::Kind::Merge,
                "application/strategic-merge-patch+json" => patch::Kind::Strategic,
                "application/json-patch+json" => patch::Kind::Json,
                other => {
                    return status_error(
                        415,
                        "UnsupportedMediaType",
                        &format!(
                            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {other})"
                        ),
                    );
                }
            };
            // Retry on a concurrent write unless the patch itself names a resourceVersion.
            let pinned = p.pointer("/metadata/resourceVersion").is_some();
            for _ in 0..10 {
                let current = match store.get(&key(name)) {
                    Ok(o) => o,
                    Err(e) => return error(&e),
                };
                let patched = match patch::apply(kind, &current, &p) {
                    Ok(o) => o,
                    Err(msg) => return status_error(422, "Invalid", &msg),
                };
                match store.update(&key(name), patched, sub == Some("status")) {
                    Ok(o) => return full(StatusCode::OK, &o),
                    Err(StoreError::Conflict { .. }) if !pinned => continue,
                    Err(e) => return error(&e),
                }
            }
            status_error(409, "Conflict", "too many concurrent writes")
        }
        (&Method::DELETE, Some(name), None) => {
            let opts: Value = serde_json::from_slice(&body).unwrap_or(json!({}));
            let grace = q
                .get("gracePeriodSeconds")
                .and_then(|g| g.parse().ok())
                .or_else(|| opts.get("gracePeriodSeconds").and_then(Value::as_i64));
            let uid = opts.pointer("/preconditions/uid").and_then(Value::as_str);
            let rv = opts
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str);
            match store.delete(&key(name), grace, uid, rv) {
                Ok(o) => full(StatusCode::OK, &o),
                Err(e) => error(&e),
            }
        }
        _ => status_error(
            405,
            "MethodNotAllowed",
            &format!("{method} is not supported on {path}"),
        ),
    }
}

fn event_line(typ: &str, object: &Value) -> Bytes {
    let mut s = json!({"type": typ, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

/// A watch: the changes after the requested resourceVersion (or, without one, every current
/// object as ADDED first), then live changes, bookmarks when asked, until timeoutSeconds, the
/// client leaves, or the test drops watches. A resourceVersion older than the history gets an
/// ERROR event with a 410 Status, as from the real API server.
fn watch_response(
    shared: Arc<Shared>,
    t: &Target,
    kind: &'static str,
    api_version: &'static str,
    q: &HashMap<String, String>,
) -> Response<Body> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(256);
    let resource = t.resource.clone();
    let namespace = t.namespace.clone();
    let q_outer = q.clone();
    let q = q.clone();
    let dropped = shared
        .watches
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|b| b == "true");
    let relevant = move |c: &Change| {
        c.key.resource == resource
            && namespace.as_deref().is_none_or(|n| c.key.namespace == n)
            && matches(&c.object, &q)
    };
    // With a resourceVersion: the changes after it. Without (or "0"): every current object as
    // ADDED, then the changes after that listing.
    let (initial, from_rv) = match q_outer.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => {
            let (items, rv) = shared.store.list(&t.resource, t.namespace.as_deref());
            let items = items.into_iter().filter(|o| matches(o, &q_outer)).collect();
            (items, rv)
        }
        Some(v) => match v.parse::<u64>() {
            Ok(rv) => (Vec::new(), rv),
            Err(_) => {
                return status_error(400, "BadRequest", &format!("invalid resourceVersion {v:?}"));
            }
        },
    };
    let watch = shared.store.watch_from(from_rv, &relevant);
    tokio::spawn(async move {
        let (past, mut live) = match watch {
            Ok(w) => w,
            Err(e) => {
                let _ = tx.send(event_line("ERROR", &e.status())).await;
                return;
            }
        };
        let mut last = from_rv;
        for obj in initial {
            if tx.send(event_line("ADDED", &obj)).await.is_err() {
                return;
            }
        }
        for c in past {
            last = c.rv;
            if tx.send(event_line(c.kind, &c.object)).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(BOOKMARK_EVERY);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                _ = dropped.cancelled() => return,
                _ = tx.closed() => return,
                _ = tick.tick(), if bookmarks => {
                    let rv = shared.store.resource_version().max(last);
                    let b = json!({"kind": kind, "apiVersion": api_version,
                                   "metadata": {"resourceVersion": rv.to_string()}});
                    if tx.send(event_line("BOOKMARK", &b)).await.is_err() {
                        return;
                    }
                }
                c = live.recv() => match c {
                    Ok(c) => {
                        if c.rv <= last || !relevant(&c) {
                            continue;
                        }
                        last = c.rv;
                        if tx.send(event_line(c.kind, &c.object)).await.is_err() {
                            return;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        let e = StoreError::Gone { requested: last, oldest: last + 1 };
                        let _ = tx.send(event_line("ERROR", &e.status())).await;
                        return;
                    }
                    Err(_) => return,
                }
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .header("transfer-encoding", "chunked")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

#[cfg(test)]
mod tests {
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
