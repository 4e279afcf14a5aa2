//! One request, routed by method, path and subresource to the store: list (or watch), create
//! (with generateName and pod defaulting), get, update, the three patch formats (retried on a
//! concurrent write unless the patch pins a resourceVersion), delete with preconditions and
//! grace, a service account's TokenRequest, TokenReviews and SubjectAccessReviews
//! ([`super::reviews`]), a pod's `ephemeralcontainers` subresource, and `/version`. Every
//! request is recorded first.

use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use super::reply::{Body, error, full, status_error};
use super::request::{matches, parse_path, query_map, resource_info};
use super::state::{Identity, Seen, Shared};
use super::store::{Key, StoreError};
use super::watch::watch_response;
use super::{ephemeral, patch};

pub(super) async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    identity: Identity,
) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    shared.seen.lock().push(Seen {
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
        user: identity.user.clone(),
        client_serial: identity.client_serial.clone(),
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
    if method == Method::POST
        && (path == "/apis/authentication.k8s.io/v1/tokenreviews"
            || path == "/apis/authorization.k8s.io/v1/subjectaccessreviews")
    {
        let obj: Value = match serde_json::from_slice(&body) {
            Ok(o) => o,
            Err(e) => {
                return status_error(400, "BadRequest", &format!("invalid JSON body: {e}"));
            }
        };
        let mut reviews = shared.reviews.lock();
        let answer = if path.ends_with("tokenreviews") {
            reviews.token_review(&obj)
        } else {
            reviews.access_review(&obj)
        };
        return full(StatusCode::CREATED, &answer);
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
            if t.resource == "certificatesigningrequests" {
                // The API server records who asked (spec.username, spec.groups).
                if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.insert("username".into(), json!(identity.user));
                    spec.insert("groups".into(), json!(identity.groups));
                }
            }
            match store.create(key(&name), obj) {
                Ok(o) => {
                    if t.resource == "certificatesigningrequests" {
                        approve_and_sign(&shared, &key(&name), &o);
                    }
                    full(StatusCode::CREATED, &o)
                }
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
        (&Method::GET, Some(name), Some("status" | "ephemeralcontainers")) => {
            match store.get(&key(name)) {
                Ok(o) => full(StatusCode::OK, &o),
                Err(e) => error(&e),
            }
        }
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
        (&Method::PUT, Some(name), Some("ephemeralcontainers")) if t.resource == "pods" => {
            let wanted = match parse_body() {
                Ok(o) => o,
                Err(r) => return *r,
            };
            let current = match store.get(&key(name)) {
                Ok(o) => o,
                Err(e) => return error(&e),
            };
            match ephemeral::update(&current, &wanted) {
                Ok(o) => match store.update(&key(name), o, false) {
                    Ok(o) => full(StatusCode::OK, &o),
                    Err(e) => error(&e),
                },
                Err(msg) => status_error(422, "Invalid", &msg),
            }
        }
        (&Method::PATCH, Some(name), sub @ (None | Some("status" | "ephemeralcontainers")))
            if sub != Some("ephemeralcontainers") || t.resource == "pods" =>
        {
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
                let mut patched = match patch::apply(kind, &current, &p) {
                    Ok(o) => o,
                    Err(msg) => return status_error(422, "Invalid", &msg),
                };
                if sub == Some("ephemeralcontainers") {
                    patched = match ephemeral::update(&current, &patched) {
                        Ok(o) => o,
                        Err(msg) => return status_error(422, "Invalid", &msg),
                    };
                }
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

/// The controller-manager's part, when the fixture plays it: approve the CSR and issue its
/// certificate (a status update after the create, so watchers see it pending first).
fn approve_and_sign(shared: &Shared, key: &super::store::Key, csr: &Value) {
    let Some(signer) = &shared.signer else { return };
    let Some(lifetime) = *signer.lifetime.lock() else {
        return;
    };
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let request = csr
        .pointer("/spec/request")
        .and_then(Value::as_str)
        .and_then(|r| b64.decode(r).ok())
        .and_then(|r| String::from_utf8(r).ok())
        .unwrap_or_default();
    let usages: Vec<String> = csr
        .pointer("/spec/usages")
        .and_then(Value::as_array)
        .map(|u| {
            u.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let (conditions, certificate) =
        match super::pki::sign_csr(&signer.issuer, &request, &usages, lifetime) {
            Ok(pem) => (
                json!([{"type": "Approved", "status": "True", "reason": "AutoApproved",
                        "message": "Auto approving the fixture's CSR.",
                        "lastUpdateTime": now, "lastTransitionTime": now}]),
                Some(b64.encode(pem)),
            ),
            Err(msg) => (
                json!([{"type": "Failed", "status": "True", "reason": "SignerValidationFailure",
                        "message": msg, "lastUpdateTime": now, "lastTransitionTime": now}]),
                None,
            ),
        };
    let mut updated = csr.clone();
    let mut status = json!({"conditions": conditions});
    if let Some(c) = certificate {
        status["certificate"] = json!(c);
    }
    updated["status"] = status;
    if let Err(e) = shared.store.update(key, updated, true) {
        tracing::warn!(error = %e, "fixture: signing the CSR");
    }
}
