//! The kubelet's read-only HTTP server (upstream `pkg/kubelet/server`, the `--read-only-port`
//! endpoints): `GET /pods` (a v1 `PodList` of the pods this kubelet runs, with live status),
//! `GET /healthz` (`ok`, or 500 with the failing check) and `GET /metrics` (Prometheus text).
//! Built on hyper 1; one task per connection; stops when the token is cancelled.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::kubelet::KubeletShared;

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

/// The `/pods` body: `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[...]}`.
pub fn pod_list_json(shared: &KubeletShared) -> Vec<u8> {
    let list = serde_json::json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": shared.pods_with_status(),
    });
    serde_json::to_vec(&list).unwrap_or_default()
}

/// Route one request.
pub fn handle(shared: &KubeletShared, method: &Method, path: &str) -> Response<Full<Bytes>> {
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
        "/metrics" => response(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            shared.metrics.render(),
        ),
        _ => response(StatusCode::NOT_FOUND, "text/plain", "404 page not found\n"),
    }
}

/// Bind `addr` (`host:port`); returns the listener's local address and the serving future.
pub async fn serve(
    addr: &str,
    shared: Arc<KubeletShared>,
    cancel: CancellationToken,
) -> Result<(SocketAddr, impl Future<Output = ()> + use<>), ServerError> {
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
    let fut = async move {
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
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let r = handle(&shared, req.method(), req.uri().path());
                    async move { Ok::<_, Infallible>(r) }
                });
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await
                {
                    tracing::debug!(error = %e, "http connection error");
                }
            });
        }
    };
    Ok((local, fut))
}
