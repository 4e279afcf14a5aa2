//! The kubelet's read-only HTTP server (upstream `pkg/kubelet/server`
//! `ListenAndServeKubeletReadOnlyServer`, `--read-only-port`, unauthenticated): `GET /pods` (a
//! v1 `PodList` of the pods this kubelet runs, with live status), `GET /healthz` (`ok`, or 500
//! with the failing check), `GET /metrics` and `GET /metrics/probes` (OpenMetrics or Prometheus
//! text by content negotiation). Like upstream's, it has no
//! debugging handlers: `/containerLogs/`, `/exec/`, `/attach/`, `/portForward/`, `/run/`,
//! `/runningpods/`, `/logs/` and `/debug/pprof/` answer 405 "Debug endpoints are disabled."
//! (upstream `InstallDebuggingDisabledHandlers`); container logs are served only by the
//! authenticated server ([`crate::server::secure`]), through [`container_logs`] (upstream
//! `getContainerLogs`, with `tailLines`, `sinceSeconds`, `sinceTime`, `timestamps`,
//! `limitBytes`, `previous`, `follow`; follow streams). Built on hyper 1; one task per
//! connection; stops when the token is cancelled.

pub mod auth;
pub mod healthz;
pub mod secure;
mod stats;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::host::KubeletShared;
use crate::logs::{LogOptions, RunningCheck};

/// The body of every response.
pub type Body = BoxBody<Bytes, Infallible>;

/// Server errors.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Could not bind.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Address.
        addr: String,
        /// Cause.
        source: std::io::Error,
    },
}

fn response(
    status: StatusCode,
    content_type: &str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

/// The `/pods` body: `{"apiVersion":"v1","kind":"PodList","items":[...],"metadata":{}}`,
/// written straight from the pods (no `serde_json::Value` of them in between: each poll of
/// `/pods` with 110 pods built one).
pub fn pod_list_json(shared: &KubeletShared) -> Vec<u8> {
    serde_json::to_vec(&k8s_openapi::List {
        items: shared.pods_with_status(),
        metadata: Default::default(),
    })
    .unwrap_or_default()
}

/// Route one request; `accept` is its `Accept` header (the metrics' text format).
pub fn handle(
    shared: &KubeletShared,
    method: &Method,
    path: &str,
    accept: &str,
) -> Response<Full<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        return response(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "method not allowed\n",
        );
    }
    match path.trim_end_matches('/') {
        "/pods" => response(StatusCode::OK, "application/json", pod_list_json(shared)),
        "/healthz" => match shared.healthz() {
            Ok(()) => response(StatusCode::OK, "text/plain; charset=utf-8", "ok"),
            Err(e) => response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain; charset=utf-8",
                format!("[-]{e}\nhealthz check failed\n"),
            ),
        },
        "/metrics" => {
            let (content_type, body) = shared.metrics.encode(accept);
            response(StatusCode::OK, content_type, body)
        }
        // Upstream `InstallDefaultHandlers`: the prober's registry, on both servers.
        "/metrics/probes" => {
            let (content_type, body) = shared.metrics.encode_probes(accept);
            response(StatusCode::OK, content_type, body)
        }
        _ => response(StatusCode::NOT_FOUND, "text/plain", "404 page not found\n"),
    }
}

fn boxed(r: Response<Full<Bytes>>) -> Response<Body> {
    r.map(|b| b.boxed())
}

/// A JSON response.
pub(crate) fn json<T: serde::Serialize + ?Sized>(v: &T) -> Response<Body> {
    boxed(response(
        StatusCode::OK,
        "application/json",
        serde_json::to_vec(v).unwrap_or_default(),
    ))
}

/// A plain-text response (a newline added when missing).
pub(crate) fn text(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    let mut b: String = body.into();
    if !b.ends_with('\n') {
        b.push('\n');
    }
    boxed(response(status, "text/plain; charset=utf-8", b))
}

/// A request header as a string (empty when absent or not visible ASCII).
pub(crate) fn header_str<B>(req: &Request<B>, name: hyper::header::HeaderName) -> String {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// A path segment with `%xx` decoded (Go's `url.PathUnescape`; `+` stays).
fn path_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// Upstream `validateContainerLogStatus`: the id of the container instance whose logs to
/// serve, or the reason there is none.
pub fn container_id_for_logs(
    status: Option<&k8s_openapi::api::core::v1::PodStatus>,
    container: &str,
    pod: &str,
    previous: bool,
) -> Result<String, String> {
    let cs = status
        .into_iter()
        .flat_map(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .chain(s.init_container_statuses.iter().flatten())
                .chain(s.ephemeral_container_statuses.iter().flatten())
        })
        .find(|c| c.name == container)
        .ok_or_else(|| format!("container {container:?} in pod {pod:?} is not available"))?;
    let state = cs.state.clone().unwrap_or_default();
    let last = cs
        .last_state
        .as_ref()
        .and_then(|l| l.terminated.as_ref())
        .and_then(|t| t.container_id.clone())
        .filter(|id| !id.is_empty());
    let terminated = || format!("container {container:?} in pod {pod:?} is terminated");
    if previous {
        return last.ok_or_else(|| {
            format!("previous terminated container {container:?} in pod {pod:?} not found")
        });
    }
    if state.running.is_some() {
        return cs.container_id.clone().ok_or_else(terminated);
    }
    if let Some(t) = &state.terminated {
        return t
            .container_id
            .clone()
            .filter(|id| !id.is_empty())
            .or(last)
            .ok_or_else(terminated);
    }
    if cs
        .last_state
        .as_ref()
        .is_some_and(|l| l.terminated.is_some())
    {
        return last.ok_or_else(terminated);
    }
    match state.waiting.and_then(|w| w.reason) {
        Some(r) if r == "ErrImagePull" => Err(format!(
            "container {container:?} in pod {pod:?} is waiting to start: image can't be pulled"
        )),
        Some(r) if r == "ImagePullBackOff" => Err(format!(
            "container {container:?} in pod {pod:?} is waiting to start: trying and failing to pull image"
        )),
        Some(r) => Err(format!(
            "container {container:?} in pod {pod:?} is waiting to start: {r}"
        )),
        None => Err(format!(
            "container {container:?} in pod {pod:?} is waiting to start - no logs yet"
        )),
    }
}

/// Upstream `kubecontainer.GetContainerSpec` is not nil: `pod` has a container `name` among
/// its containers, init containers or ephemeral containers (`kubectl debug`'s, whose logs the
/// API server's `pods/<name>/log?container=<name>` asks for like any other's).
pub fn has_container(pod: &k8s_openapi::api::core::v1::Pod, name: &str) -> bool {
    pod.spec.as_ref().is_some_and(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .map(|c| c.name.as_str())
            .chain(
                s.ephemeral_containers
                    .iter()
                    .flatten()
                    .map(|c| c.name.as_str()),
            )
            .any(|n| n == name)
    })
}

/// `GET /containerLogs/<ns>/<pod>/<container>?<query>` (upstream `getContainerLogs` and
/// `GetKubeletContainerLogs`).
pub async fn container_logs(shared: &KubeletShared, rest: &str, query: &str) -> Response<Body> {
    let parts: Vec<String> = rest.split('/').map(path_decode).collect();
    let [ns, pod_name, container] = parts.as_slice() else {
        return text(
            StatusCode::BAD_REQUEST,
            "expected /containerLogs/<namespace>/<pod>/<container>",
        );
    };
    if container.is_empty() {
        return text(StatusCode::BAD_REQUEST, "Missing container name");
    }
    let opts = match LogOptions::from_query(query, chrono::Utc::now()) {
        Ok(o) => o,
        Err(e) => return text(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let pod = shared
        .pods
        .read()
        .values()
        .find(|p| {
            p.metadata.name.as_deref() == Some(pod_name.as_str())
                && p.metadata.namespace.as_deref().unwrap_or("default") == ns.as_str()
        })
        .cloned();
    let Some(pod) = pod else {
        return text(
            StatusCode::NOT_FOUND,
            format!("pod {pod_name:?} does not exist"),
        );
    };
    if !has_container(&pod, container) {
        return text(
            StatusCode::NOT_FOUND,
            format!("container {container:?} not found in pod {pod_name:?}"),
        );
    }
    let status = pod
        .metadata
        .uid
        .as_deref()
        .and_then(|u| shared.status.get_pod_status(u));
    let full_name = crate::container::pod_full_name(&pod);
    let id = match container_id_for_logs(status.as_ref(), container, &full_name, opts.previous)
        .and_then(|id| {
            crate::container::ContainerID::parse(&id)
                .map(|c| c.id)
                .map_err(|e| e.to_string())
        }) {
        Ok(id) => id,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let log_path = match shared.runtime.container_log_info(&id).await {
        Ok((p, _)) if !p.is_empty() => std::path::PathBuf::from(p),
        Ok(_) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("container {id:?} has no log path"),
            );
        }
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("failed to get container status {id:?}: {e}"),
            );
        }
    };
    if !opts.follow {
        return match crate::logs::read_logs_to_vec(&log_path, &opts).await {
            Ok(b) => {
                let mut r = Response::new(flushed_body(Bytes::from(b)));
                r.headers_mut().insert(
                    hyper::header::CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static("text/plain"),
                );
                r
            }
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        };
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let rt = shared.runtime.clone();
    let running: RunningCheck = Arc::new(move || {
        let rt = rt.clone();
        let id = id.clone();
        Box::pin(async move {
            rt.container_log_info(&id)
                .await
                .map(|(_, running)| running)
                .unwrap_or(false)
        })
    });
    tokio::spawn(async move {
        if let Err(e) = crate::logs::read_logs(&log_path, &opts, tx, Some(running)).await {
            tracing::warn!(path = %log_path.display(), error = %e, "following container log failed");
        }
    });
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) })
            .map(|b| Ok::<_, Infallible>(Frame::data(b)));
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    if let Ok(v) = hyper::header::HeaderValue::from_str("text/plain") {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

/// A log answer as upstream's (`Transfer-Encoding: chunked` through a `flushwriter`): the data
/// flushed in chunks of its own, the end of the stream after. A Go client (the API server
/// proxying `pods/log`) then reads the data before the EOF; read together, as from a
/// `Content-Length` body or a last chunk sharing a TLS record with the terminating chunk, Go's
/// `net/http` returns the data with `io.EOF`, and the API server's websocket stream
/// (`wsstream.messageCopy`) drops data that comes with EOF: the websocket log read was empty.
pub(crate) fn flushed_body(data: Bytes) -> Body {
    let data = futures::stream::iter((!data.is_empty()).then(|| Ok(Frame::data(data))));
    // One `Pending` before the end: hyper flushes what it wrote before the terminating chunk.
    let flush = futures::stream::once(tokio::task::yield_now()).filter_map(|()| async { None });
    BodyExt::boxed(StreamBody::new(data.chain(flush)))
}

/// The debugging endpoints' paths (upstream `InstallDebuggingDisabledHandlers`): the read-only
/// server answers them 405, whatever follows the prefix.
pub const DEBUG_PATHS: [&str; 8] = [
    "/run/",
    "/exec/",
    "/attach/",
    "/portForward/",
    "/containerLogs/",
    "/runningpods/",
    "/debug/pprof/",
    "/logs/",
];

/// Is `path` one of the debugging endpoints (a prefix of [`DEBUG_PATHS`], with or without its
/// trailing slash)?
pub fn is_debug_path(path: &str) -> bool {
    DEBUG_PATHS
        .iter()
        .any(|p| path.starts_with(p) || path == p.trim_end_matches('/'))
}

/// Route one request of the read-only server: the debugging endpoints are disabled; the
/// default handlers, stats included, are served.
pub async fn route(
    shared: &KubeletShared,
    root_dir: &std::path::Path,
    method: &Method,
    path: &str,
    query: &str,
    accept: &str,
) -> Response<Body> {
    if is_debug_path(path) {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "Debug endpoints are disabled.",
        );
    }
    let get = method == Method::GET || method == Method::HEAD;
    match path.trim_end_matches('/') {
        "/stats/summary" if get => stats::stats_summary(shared, root_dir, query).await,
        "/metrics/resource" if get => stats::resource_metrics(shared, root_dir).await,
        "/metrics/cadvisor" if get => stats::cadvisor_metrics(shared).await,
        _ => boxed(handle(shared, method, path, accept)),
    }
}

/// Accepts plain HTTP/1 connections on `listener` until `cancel`, each request answered by
/// `handler` (the read-only server and the healthz server).
pub(crate) async fn serve_http1<H, F, B>(
    listener: TcpListener,
    cancel: CancellationToken,
    handler: H,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    loop {
        let (stream, _) = tokio::select! {
            _ = cancel.cancelled() => return,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let r = handler(req);
                async move { Ok::<_, Infallible>(r.await) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                tracing::debug!(error = %e, "http connection error");
            }
        });
    }
}

/// Bind `addr` (`host:port`); returns the listener's local address and the serving future.
pub async fn serve(
    addr: &str,
    shared: Arc<KubeletShared>,
    root_dir: std::path::PathBuf,
    cancel: CancellationToken,
) -> Result<(SocketAddr, impl Future<Output = ()> + use<>), ServerError> {
    let root_dir = Arc::new(root_dir);
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind {
            addr: addr.to_string(),
            source,
        })?;
    let local = listener.local_addr().map_err(|source| ServerError::Bind {
        addr: addr.to_string(),
        source,
    })?;
    let fut = serve_http1(listener, cancel, move |req: Request<Incoming>| {
        let shared = Arc::clone(&shared);
        let root_dir = Arc::clone(&root_dir);
        async move {
            let path = req.uri().path().to_string();
            let query = req.uri().query().unwrap_or_default().to_string();
            let accept = header_str(&req, hyper::header::ACCEPT);
            route(&shared, &root_dir, req.method(), &path, &query, &accept).await
        }
    });
    Ok((local, fut))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_of_every_kind_have_logs() {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [{"name": "main"}],
                "initContainers": [{"name": "init"}],
                "ephemeralContainers": [{"name": "debugger", "targetContainerName": "main"}]
            }
        }))
        .expect("pod");
        for name in ["main", "init", "debugger"] {
            assert!(has_container(&pod, name), "{name}");
        }
        assert!(!has_container(&pod, "other"));
        assert!(!has_container(&Default::default(), "main"));
    }

    #[test]
    fn debugging_endpoints_are_not_read_only() {
        for p in [
            "/containerLogs/default/web/main",
            "/containerLogs/default/web/main?follow=true",
            "/containerLogs",
            "/exec/default/web/main",
            "/attach/default/web/main",
            "/portForward/default/web",
            "/run/default/web/main",
            "/runningpods/",
            "/runningpods",
            "/logs/",
            "/logs/syslog",
            "/debug/pprof/heap",
        ] {
            assert!(is_debug_path(p), "{p}");
        }
        for p in [
            "/pods",
            "/healthz",
            "/metrics",
            "/stats/summary",
            "/containerLogsX",
            "/",
        ] {
            assert!(!is_debug_path(p), "{p}");
        }
    }
}
