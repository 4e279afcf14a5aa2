//! A Kubernetes API server fixture for testing the kubelet's API-server mode on machines where
//! no kube-apiserver can run. It speaks the wire protocol real clients (kube-rs, kubectl) use —
//! JSON of the API types, `Status` errors, list and watch with resourceVersion, bookmarks and
//! 410 Gone, field selectors on `spec.nodeName`, create / get / update / merge and strategic
//! merge patches / delete with preconditions and graceful pod deletion, the status subresource
//! — over plain HTTP on loopback. The write rules live in `store`, the patch formats in
//! `patch`; this module owns the HTTP routing and the watch streams, plus the test hooks
//! (compact the history, drop every open watch, count requests).
//!
//! [`ApiServer::start_tls`] serves HTTPS instead, with a CA of its own, and authenticates every
//! request like the real API server's x509 and token authenticators: a client certificate of
//! its CA or `Authorization: Bearer <token>`, otherwise 401. Not served: discovery.

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

/// What a TLS fixture's clients need: its CA, a client certificate and key it accepts, and a
/// bearer token it accepts (all PEM / text).
#[derive(Debug, Clone)]
pub struct TlsMaterial {
    pub ca_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
    pub token: String,
}

/// A running fixture API server.
pub struct ApiServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
    tls: Option<TlsMaterial>,
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate (for node `user`).
fn make_pki(
    user: &str,
) -> Result<(TlsMaterial, tokio_rustls::rustls::ServerConfig), Box<dyn std::error::Error>> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "fixture-ca");
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let server_key = rcgen::KeyPair::generate()?;
    let server_params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
    let server = server_params.signed_by(&server_key, &issuer)?;
    let client_key = rcgen::KeyPair::generate()?;
    let mut client_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    client_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{user}"));
    client_params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    client_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let client = client_params.signed_by(&client_key, &issuer)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(ca.der().to_vec()))?;
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from(server.der().to_vec())],
            PrivateKeyDer::try_from(server_key.serialize_der())?,
        )?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let token: String = (0..32)
        .map(|_| char::from(b'a' + rand::random_range(0..26u8)))
        .collect();
    Ok((
        TlsMaterial {
            ca_pem: ca.pem(),
            client_cert_pem: client.pem(),
            client_key_pem: client_key.serialize_pem(),
            token,
        },
        config,
    ))
}

fn unauthorized() -> Response<Body> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                      "status": "Failure", "message": "Unauthorized",
                      "reason": "Unauthorized", "code": 401});
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *r.status_mut() = StatusCode::UNAUTHORIZED;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// Serves one connection; `token` set means requests must be authenticated (a verified client
/// certificate, `authenticated`, or that bearer token).
async fn serve_conn<I>(
    io: I,
    shared: Arc<Shared>,
    stop: CancellationToken,
    authenticated: bool,
    token: Option<String>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let s = shared.clone();
        let token = token.clone();
        async move {
            if let Some(t) = token
                && !authenticated
            {
                let bearer = req
                    .headers()
                    .get(hyper::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "));
                if bearer != Some(t.as_str()) {
                    return Ok::<_, Infallible>(unauthorized());
                }
            }
            Ok::<_, Infallible>(handle(s, req).await)
        }
    });
    let io = hyper_util::rt::TokioIo::new(io);
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, svc);
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = conn => {}
    }
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
    /// Starts serving plain HTTP on 127.0.0.1 (a free port), without authentication.
    pub async fn start() -> std::io::Result<ApiServer> {
        Self::serve(None).await
    }

    /// Starts serving HTTPS on 127.0.0.1 with its own CA; every request must present a client
    /// certificate of that CA or the bearer token (see [`ApiServer::tls`]).
    pub async fn start_tls() -> std::io::Result<ApiServer> {
        let (material, config) =
            make_pki("fixture-node").map_err(|e| std::io::Error::other(e.to_string()))?;
        Self::serve(Some((material, config))).await
    }

    /// The CA, client certificate and token of a TLS fixture.
    pub fn tls(&self) -> Option<&TlsMaterial> {
        self.tls.as_ref()
    }

    async fn serve(
        tls: Option<(TlsMaterial, tokio_rustls::rustls::ServerConfig)>,
    ) -> std::io::Result<ApiServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (material, acceptor) = match tls {
            Some((m, c)) => (Some(m), Some(tokio_rustls::TlsAcceptor::from(Arc::new(c)))),
            None => (None, None),
        };
        let token = material.as_ref().map(|m| m.token.clone());
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
                let (s, st, token, acceptor) =
                    (s.clone(), st.clone(), token.clone(), acceptor.clone());
                tokio::spawn(async move {
                    match acceptor {
                        None => serve_conn(tcp, s, st, false, None).await,
                        Some(a) => {
                            let Ok(tls) = a.accept(tcp).await else { return };
                            let authenticated = tls.get_ref().1.peer_certificates().is_some();
                            serve_conn(tls, s, st, authenticated, token).await;
                        }
                    }
                });
            }
        });
        Ok(ApiServer {
            addr,
            shared,
            stop,
            tls: material,
        })
    }

    /// `http://127.0.0.1:port`, or `https://` for a TLS fixture.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    fn kubeconfig_with(&self, user: &str) -> String {
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let ca = self
            .tls
            .as_ref()
            .map(|t| format!("\n    certificate-authority-data: {}", b64(&t.ca_pem)))
            .unwrap_or_default();
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fixture\n  cluster:\n    server: {}{ca}\ncontexts:\n- name: fixture\n  context:\n    cluster: fixture\n    user: kubelet\ncurrent-context: fixture\nusers:\n- name: kubelet\n  user: {user}\n",
            self.url()
        )
    }

    /// A kubeconfig pointing at this server: with a TLS fixture, its CA and client certificate.
    pub fn kubeconfig(&self) -> String {
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        match &self.tls {
            None => self.kubeconfig_with("{}"),
            Some(t) => self.kubeconfig_with(&format!(
                "\n    client-certificate-data: {}\n    client-key-data: {}",
                b64(&t.client_cert_pem),
                b64(&t.client_key_pem)
            )),
        }
    }

    /// A kubeconfig with the bearer token instead of the client certificate (TLS fixture).
    pub fn kubeconfig_token(&self) -> String {
        let token = self
            .tls
            .as_ref()
            .map(|t| t.token.clone())
            .unwrap_or_default();
        self.kubeconfig_with(&format!("\n    token: {token}"))
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
