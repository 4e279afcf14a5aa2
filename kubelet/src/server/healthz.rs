//! The healthz server (upstream `cmd/kubelet/app/server.go`: `healthzBindAddress:healthzPort`,
//! 127.0.0.1:10248 by default, port 0 turns it off), apart from the read-only and secure
//! ports. `GET /healthz` answers `ok` while the kubelet's checks pass: `syncloop` (the sync
//! loop iterated within the last 30 s, upstream's `syncLoopHealthCheck`) and `pleg` (the PLEG
//! relisted recently, upstream's "PLEG is not healthy"); otherwise 500 with the failing check.
//! `?verbose` lists the checks like upstream (`[+]ping ok`). `/healthz/ping` always answers.
//! As upstream, a port that cannot be bound is logged and retried every 5 s; the kubelet runs
//! on.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::host::KubeletShared;

/// Upstream's retry period of the healthz listener.
pub const RETRY: Duration = Duration::from_secs(5);

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut().insert(
        "X-Content-Type-Options",
        hyper::header::HeaderValue::from_static("nosniff"),
    );
    r
}

/// Answer one request from the result of the kubelet's checks.
pub fn handle(
    method: &Method,
    path: &str,
    query: &str,
    checks: Result<(), String>,
) -> Response<Full<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed\n".into(),
        );
    }
    let verbose = query
        .split('&')
        .any(|p| p == "verbose" || p.starts_with("verbose="));
    match path.trim_end_matches('/') {
        "/healthz/ping" => reply(StatusCode::OK, "ok".into()),
        "/healthz" => {
            let (sync, pleg) = match &checks {
                Ok(()) => (Ok(()), Ok(())),
                Err(e) if e.starts_with("pleg") => (Ok(()), Err(e.clone())),
                Err(e) => (Err(e.clone()), Ok(())),
            };
            let line = |name: &str, r: &Result<(), String>| match r {
                Ok(()) => format!("[+]{name} ok\n"),
                Err(_) => format!("[-]{name} failed: reason withheld\n"),
            };
            let list = format!(
                "[+]ping ok\n{}{}",
                line("syncloop", &sync),
                line("pleg", &pleg)
            );
            match checks {
                Ok(()) if verbose => reply(StatusCode::OK, format!("{list}healthz check passed\n")),
                Ok(()) => reply(StatusCode::OK, "ok".into()),
                Err(e) => {
                    tracing::info!(check = %e, "healthz check failed");
                    reply(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("{list}healthz check failed\n"),
                    )
                }
            }
        }
        _ => reply(StatusCode::NOT_FOUND, "404 page not found\n".into()),
    }
}

async fn serve_listener(
    listener: TcpListener,
    shared: Arc<KubeletShared>,
    cancel: CancellationToken,
) {
    crate::server::serve_http1(listener, cancel, move |req: Request<Incoming>| {
        let r = handle(
            req.method(),
            req.uri().path(),
            req.uri().query().unwrap_or_default(),
            shared.healthz(),
        );
        async move { r }
    })
    .await
}

/// Serve healthz on `addr` (`host:port`) until `cancel`; a bind failure is logged and retried
/// every [`RETRY`], as upstream's `wait.Until(ListenAndServe)`.
pub async fn run(addr: String, shared: Arc<KubeletShared>, cancel: CancellationToken) {
    loop {
        match TcpListener::bind(&addr).await {
            Ok(l) => {
                tracing::info!(address = %l.local_addr().map(|a| a.to_string()).unwrap_or(addr.clone()), "healthz server listening");
                serve_listener(l, shared, cancel).await;
                return;
            }
            Err(e) => {
                tracing::error!(address = %addr, error = %e, "Failed to start healthz server")
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(RETRY) => {}
        }
    }
}

/// `host:port` for the listener (IPv6 hosts bracketed).
pub fn join_host_port(host: &str, port: i32) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body(r: Response<Full<Bytes>>) -> (u16, String) {
        let code = r.status().as_u16();
        let b = r.into_body().collect().await.expect("body").to_bytes();
        (code, String::from_utf8_lossy(&b).into_owned())
    }

    #[tokio::test]
    async fn answers_like_upstream() {
        let get = Method::GET;
        assert_eq!(
            body(handle(&get, "/healthz", "", Ok(()))).await,
            (200, "ok".into())
        );
        let (code, text) = body(handle(&get, "/healthz", "verbose", Ok(()))).await;
        assert_eq!(code, 200);
        assert!(text.contains("[+]syncloop ok") && text.ends_with("healthz check passed\n"));
        let (code, text) = body(handle(&get, "/healthz", "", Err("pleg: stuck".into()))).await;
        assert_eq!(code, 500);
        assert!(
            text.contains("[-]pleg failed") && text.contains("[+]syncloop ok"),
            "{text}"
        );
        let (code, _) = body(handle(&get, "/healthz/ping", "", Err("syncloop: x".into()))).await;
        assert_eq!(code, 200);
        assert_eq!(body(handle(&get, "/pods", "", Ok(()))).await.0, 404);
        assert_eq!(
            body(handle(&Method::POST, "/healthz", "", Ok(()))).await.0,
            405
        );
        assert_eq!(join_host_port("::1", 10248), "[::1]:10248");
        assert_eq!(join_host_port("127.0.0.1", 10248), "127.0.0.1:10248");
    }
}
