//! The kubelet's authenticated HTTPS server on `--port` (upstream `pkg/kubelet/server`
//! `ListenAndServeKubeletServer` with its auth filter): TLS with the serving certificate from
//! `--tls-cert-file`/`--tls-private-key-file`, or a self-signed one made once in `--cert-dir`;
//! every request is authenticated and authorized by [`crate::server::auth`] — a client
//! certificate signed by `--client-ca-file`, a bearer token (TokenReview webhook), or
//! anonymous when `--anonymous-auth`, else 401; then `AlwaysAllow` or a SubjectAccessReview on
//! `nodes/<subresource>` of this node, 403 when not allowed. Besides the read-only endpoints (`/pods`, `/healthz`, `/metrics`) it
//! serves the debugging ones the read-only server refuses: `/containerLogs/...` (only here,
//! as upstream), `/runningpods/`, and `/exec`, `/attach` and `/portForward`, which ask the
//! runtime for a streaming URL (CRI Exec / Attach / PortForward) and proxy the client's
//! upgraded connection to it, so `kubectl exec`, `attach`, `port-forward` and `logs` work
//! through the API server; `/stats/summary` and `/metrics/resource` (the node's, pods' and
//! containers' usage, [`crate::stats`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use cri_proto::runtime::v1 as cri;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;

use crate::host::KubeletShared;
use crate::logs::query_pairs;
use crate::server::auth::authn::{BEARER_PROTOCOL_PREFIX, user_from_certificate};
use crate::server::auth::{Auth, Credentials, Decision, UserInfo, request_attributes};
use crate::server::{Body, json, text};

/// Settings of the secure server (flags of the same names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    /// Where a self-signed serving certificate is kept (`kubelet.crt`, `kubelet.key`).
    pub cert_dir: PathBuf,
    pub client_ca_file: Option<PathBuf>,
    pub anonymous_auth: bool,
    /// `--rotate-certificates` (`rotateCertificates`): renew the client certificate.
    pub rotate_certificates: bool,
    /// `--rotate-server-certificates` (`serverTLSBootstrap`): the serving certificate comes
    /// from a `kubernetes.io/kubelet-serving` CSR.
    pub server_tls_bootstrap: bool,
}

/// Errors setting the server up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("generating a self-signed certificate: {0}")]
    Generate(String),
    #[error("TLS configuration: {0}")]
    Config(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
}

fn file_err(path: &Path) -> impl Fn(String) -> TlsError + '_ {
    move |reason| TlsError::File {
        path: path.to_path_buf(),
        reason,
    }
}

/// The serving certificate chain and key: the given files, or `<cert-dir>/kubelet.{crt,key}`,
/// made self-signed for `hosts` when absent (upstream `certutil.GenerateSelfSignedCertKey`).
pub fn serving_cert(
    c: &TlsConfig,
    hosts: &[String],
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let (cert, key) = match (&c.tls_cert_file, &c.tls_private_key_file) {
        (Some(cert), Some(key)) => (cert.clone(), key.clone()),
        _ => {
            let cert = c.cert_dir.join("kubelet.crt");
            let key = c.cert_dir.join("kubelet.key");
            if !cert.exists() || !key.exists() {
                std::fs::create_dir_all(&c.cert_dir)
                    .map_err(|e| file_err(&c.cert_dir)(e.to_string()))?;
                let generated = rcgen::generate_simple_self_signed(hosts.to_vec())
                    .map_err(|e| TlsError::Generate(e.to_string()))?;
                std::fs::write(&cert, generated.cert.pem())
                    .map_err(|e| file_err(&cert)(e.to_string()))?;
                write_private(&key, generated.signing_key.serialize_pem().as_bytes())?;
                tracing::info!(cert = %cert.display(), "generated a self-signed serving certificate");
            }
            (cert, key)
        }
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .map_err(|e| file_err(&cert)(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_err(&cert)(e.to_string()))?;
    if chain.is_empty() {
        return Err(file_err(&cert)("no certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_file(&key).map_err(|e| file_err(&key)(e.to_string()))?;
    Ok((chain, key))
}

fn write_private(path: &Path, data: &[u8]) -> Result<(), TlsError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| file_err(path)(e.to_string()))?;
    f.write_all(data).map_err(|e| file_err(path)(e.to_string()))
}

/// The rustls server configuration: client certificates verified against `--client-ca-file`
/// when presented; the serving certificate from [`serving_cert`].
pub fn server_config(c: &TlsConfig, hosts: &[String]) -> Result<rustls::ServerConfig, TlsError> {
    let (chain, key) = serving_cert(c, hosts)?;
    let mut config = builder(c)?
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The rustls server configuration with the serving certificate of `resolver`, asked at every
/// handshake (`--rotate-server-certificates`: the certificate manager's current one).
pub fn server_config_with_resolver(
    c: &TlsConfig,
    resolver: Arc<dyn rustls::server::ResolvesServerCert>,
) -> Result<rustls::ServerConfig, TlsError> {
    let mut config = builder(c)?.with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// TLS versions and client authentication of the secure server.
fn builder(
    c: &TlsConfig,
) -> Result<rustls::ConfigBuilder<rustls::ServerConfig, rustls::server::WantsServerCert>, TlsError>
{
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &c.client_ca_file {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in
                CertificateDer::pem_file_iter(ca).map_err(|e| file_err(ca)(e.to_string()))?
            {
                let cert = cert.map_err(|e| file_err(ca)(e.to_string()))?;
                roots.add(cert).map_err(|e| file_err(ca)(e.to_string()))?;
            }
            // Like upstream (`tls.RequestClientCert`): a certificate is asked for, not
            // required, so a request without one gets a 401 rather than a failed handshake.
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .allow_unauthenticated()
            .build()
            .map_err(|e| TlsError::Config(e.to_string()))?;
            builder.with_client_cert_verifier(v)
        }
        None => builder.with_no_client_auth(),
    };
    Ok(builder)
}

/// Is one of `names` set to a true value (Go's `strconv.ParseBool`, empty is true)?
fn flag(pairs: &[(String, String)], names: &[&str]) -> bool {
    pairs
        .iter()
        .any(|(k, v)| names.contains(&k.as_str()) && crate::logs::parse_bool(k, v).unwrap_or(false))
}

/// The pod (by namespace and name) the kubelet runs: its UID.
fn pod_uid(shared: &KubeletShared, ns: &str, name: &str) -> Option<String> {
    shared
        .pods
        .read()
        .values()
        .find(|p| {
            p.metadata.namespace.as_deref().unwrap_or("default") == ns
                && p.metadata.name.as_deref() == Some(name)
        })
        .and_then(|p| p.metadata.uid.clone())
}

/// The running container `container` of pod `ns/name`, and the pod's ready sandbox.
async fn find_target(
    shared: &KubeletShared,
    ns: &str,
    name: &str,
    container: Option<&str>,
) -> Result<(String, String), Response<Body>> {
    let uid = pod_uid(shared, ns, name).ok_or_else(|| {
        text(
            StatusCode::NOT_FOUND,
            format!("pod {ns}/{name} not found\n"),
        )
    })?;
    let status = shared
        .runtime
        .get_pod_status(&uid, name, ns)
        .await
        .map_err(|e| text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")))?;
    let sandbox = status
        .sandbox_statuses
        .iter()
        .find(|s| s.state == crate::container::SandboxState::Ready)
        .map(|s| s.id.clone())
        .unwrap_or_default();
    let container_id = match container {
        None => String::new(),
        Some(c) => status
            .container_statuses
            .iter()
            .find(|s| s.name == c && s.state == crate::container::ContainerState::Running)
            .map(|s| s.id.id.clone())
            .ok_or_else(|| {
                text(
                    StatusCode::NOT_FOUND,
                    format!("container {c} is not running in pod {ns}/{name}\n"),
                )
            })?,
    };
    Ok((sandbox, container_id))
}

/// `/exec/<ns>/<pod>/<container>`, `/attach/...` and `/portForward/<ns>/<pod>`: the CRI
/// streaming URL for the request.
async fn streaming_url(
    shared: &KubeletShared,
    kind: &str,
    rest: &str,
    query: &str,
) -> Result<String, Response<Body>> {
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    let pairs = query_pairs(query);
    let stdin = flag(&pairs, &["input", "stdin"]);
    let stdout = flag(&pairs, &["output", "stdout"]);
    let stderr = flag(&pairs, &["error", "stderr"]);
    let tty = flag(&pairs, &["tty"]);
    let rt = &shared.runtime;
    let url = match (kind, parts.as_slice()) {
        ("exec", [ns, pod, container]) | ("exec", [ns, pod, _, container]) => {
            let (_, id) = find_target(shared, ns, pod, Some(container)).await?;
            let cmd: Vec<String> = pairs
                .iter()
                .filter(|(k, _)| k == "command")
                .map(|(_, v)| v.clone())
                .collect();
            if cmd.is_empty() {
                return Err(text(StatusCode::BAD_REQUEST, "missing command\n"));
            }
            let req = cri::ExecRequest {
                container_id: id,
                cmd,
                tty,
                stdin,
                stdout,
                stderr: stderr && !tty,
                ..Default::default()
            };
            rt.runtime_service().exec(req).await
        }
        ("attach", [ns, pod, container]) | ("attach", [ns, pod, _, container]) => {
            let (_, id) = find_target(shared, ns, pod, Some(container)).await?;
            let req = cri::AttachRequest {
                container_id: id,
                stdin,
                tty,
                stdout,
                stderr: stderr && !tty,
                ..Default::default()
            };
            rt.runtime_service().attach(req).await
        }
        ("portForward", [ns, pod]) | ("portForward", [ns, pod, _]) => {
            let (sandbox, _) = find_target(shared, ns, pod, None).await?;
            let port = pairs
                .iter()
                .filter(|(k, _)| k == "port")
                .filter_map(|(_, v)| v.parse().ok())
                .collect();
            let req = cri::PortForwardRequest {
                pod_sandbox_id: sandbox,
                port,
            };
            rt.runtime_service().port_forward(req).await
        }
        _ => return Err(text(StatusCode::NOT_FOUND, "404 page not found\n")),
    };
    url.map_err(|e| text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")))
}

/// Proxies `req` (an upgrade request) to the runtime's streaming `url` (upstream
/// `proxyStream`): the request goes to the runtime with its headers, the runtime's answer comes
/// back, and once both sides switched protocols the bytes flow both ways untouched.
async fn proxy_upgrade(req: Request<Incoming>, url: &str) -> Response<Body> {
    let Some(rest) = url.strip_prefix("http://") else {
        return text(
            StatusCode::BAD_GATEWAY,
            format!("unsupported streaming URL {url}\n"),
        );
    };
    let (authority, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(a, p)| (a, format!("/{p}")));
    let mut backend = match tokio::net::TcpStream::connect(authority).await {
        Ok(s) => s,
        Err(e) => return text(StatusCode::BAD_GATEWAY, format!("dial {authority}: {e}\n")),
    };
    let mut head = format!("{} {path} HTTP/1.1\r\nHost: {authority}\r\n", req.method());
    for (k, v) in req.headers() {
        if k == hyper::header::HOST || k == hyper::header::AUTHORIZATION {
            continue;
        }
        let Ok(v) = v.to_str() else { continue };
        if k == hyper::header::SEC_WEBSOCKET_PROTOCOL {
            // The token's subprotocol stays here (upstream removes it once authenticated).
            let kept: Vec<&str> = v
                .split(',')
                .map(str::trim)
                .filter(|p| !p.starts_with(BEARER_PROTOCOL_PREFIX))
                .collect();
            if !kept.is_empty() {
                head.push_str(&format!("{k}: {}\r\n", kept.join(", ")));
            }
            continue;
        }
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    if let Err(e) = backend.write_all(head.as_bytes()).await {
        return text(StatusCode::BAD_GATEWAY, format!("{e}\n"));
    }
    // The runtime's response head.
    let mut buf = Vec::new();
    let end = loop {
        let mut chunk = [0u8; 4096];
        let n = match backend.read(&mut chunk).await {
            Ok(0) | Err(_) => return text(StatusCode::BAD_GATEWAY, "streaming server closed\n"),
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 64 * 1024 {
            return text(StatusCode::BAD_GATEWAY, "oversized response head\n");
        }
    };
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Response::new(&mut headers);
    if !matches!(parsed.parse(&buf[..end]), Ok(httparse::Status::Complete(_))) {
        return text(
            StatusCode::BAD_GATEWAY,
            "malformed response from the streaming server\n",
        );
    }
    let code = parsed.code.unwrap_or(502);
    let mut resp = Response::builder().status(code);
    for h in parsed.headers.iter() {
        resp = resp.header(h.name, h.value);
    }
    let leftover = Bytes::copy_from_slice(&buf[end..]);
    if code != 101 {
        // Not upgraded: relay the body the runtime sent (an error message).
        let mut body = leftover.to_vec();
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            backend.read_to_end(&mut body),
        )
        .await;
        return resp
            .body(Full::new(Bytes::from(body)).boxed())
            .unwrap_or_else(|_| text(StatusCode::BAD_GATEWAY, "bad response\n"));
    }
    tokio::spawn(async move {
        match hyper::upgrade::on(req).await {
            Ok(upgraded) => {
                let mut client = TokioIo::new(upgraded);
                if !leftover.is_empty() && client.write_all(&leftover).await.is_err() {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
            }
            Err(e) => tracing::debug!(error = %e, "client upgrade failed"),
        }
    });
    resp.body(Full::new(Bytes::new()).boxed())
        .unwrap_or_else(|_| text(StatusCode::BAD_GATEWAY, "bad response\n"))
}

/// `/runningpods/`: the pods the runtime runs, as a v1 PodList (upstream `getRunningPods`).
/// Like housekeeping, only this kubelet's pods: those it was given, or named for its node
/// (the test bed shares one runtime between kubelets).
fn running_pods(shared: &KubeletShared) -> serde_json::Value {
    let known: std::collections::HashSet<String> = shared.pods.read().keys().cloned().collect();
    let items: Vec<serde_json::Value> = shared
        .pleg
        .runtime_pods()
        .into_iter()
        .filter(|p| {
            p.is_running()
                && (known.contains(&p.id)
                    || crate::types::owned_by_node(&p.name, &shared.node_name))
        })
        .map(|p| {
            serde_json::json!({
                "metadata": {"name": p.name, "namespace": p.namespace, "uid": p.id},
                "spec": {"containers": p.containers.iter()
                    .filter(|c| c.state == crate::container::ContainerState::Running)
                    .map(|c| serde_json::json!({"name": c.name}))
                    .collect::<Vec<_>>()},
                "status": {}
            })
        })
        .collect();
    serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
}

async fn route(
    shared: Arc<KubeletShared>,
    root_dir: Arc<PathBuf>,
    req: Request<Incoming>,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    for kind in ["exec", "attach", "portForward"] {
        if let Some(rest) = path.strip_prefix(&format!("/{kind}/")) {
            return match streaming_url(&shared, kind, rest, &query).await {
                Ok(url) => proxy_upgrade(req, &url).await,
                Err(r) => r,
            };
        }
    }
    if let Some(rest) = path.strip_prefix("/containerLogs/") {
        // Upstream's GETOnlyRestfulFilter.
        if req.method() != hyper::Method::GET && req.method() != hyper::Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        }
        return crate::server::container_logs(&shared, rest, &query).await;
    }
    match path.trim_end_matches('/') {
        "/runningpods" => json(&running_pods(&shared)),
        "/stats/summary" => super::stats::stats_summary(&shared, &root_dir, &query).await,
        "/metrics/resource" => super::stats::resource_metrics(&shared, &root_dir).await,
        "/metrics/cadvisor" => super::stats::cadvisor_metrics(&shared).await,
        _ => {
            let accept = crate::server::header_str(&req, hyper::header::ACCEPT);
            crate::server::handle(&shared, req.method(), &path, &accept).map(|b| b.boxed())
        }
    }
}

/// A plain-text response with exactly `body` (upstream `WriteErrorString`).
fn plain(status: StatusCode, body: String) -> Response<Body> {
    crate::server::response(status, "text/plain", body).map(|b| b.boxed())
}

/// Upstream `InstallAuthFilter`: authenticate the request (401 `Unauthorized` when nobody or on
/// an error), then authorize its attributes (403 `Forbidden (user=…, verb=…, resource=…,
/// subresource=…)` unless allowed, 500 `Authorization error (…)` when the authorizer failed).
/// The user on success.
pub async fn authorize_request(
    auth: &Auth,
    creds: &Credentials,
    method: &str,
    path: &str,
) -> Result<UserInfo, Response<Body>> {
    let unauthorized = || plain(StatusCode::UNAUTHORIZED, "Unauthorized".to_string());
    let user = match auth.authenticator.authenticate(creds).await {
        Ok(Some(u)) => u,
        Ok(None) => return Err(unauthorized()),
        Err(e) => {
            tracing::error!(error = %e, "Unable to authenticate the request due to an error");
            return Err(unauthorized());
        }
    };
    let a = request_attributes(&user, method, path, &auth.node_name);
    let what = format!(
        "user={}, verb={}, resource={}, subresource={}",
        a.user.name, a.verb, a.resource, a.subresource
    );
    match auth.authorizer.authorize(&a).await {
        Ok(Decision::Allow) => Ok(user),
        Ok(_) => {
            tracing::debug!(user = %a.user.name, verb = %a.verb, resource = %a.resource, subresource = %a.subresource, "Forbidden");
            Err(plain(StatusCode::FORBIDDEN, format!("Forbidden ({what})")))
        }
        Err(e) => {
            tracing::error!(error = %e, user = %a.user.name, verb = %a.verb, resource = %a.resource, subresource = %a.subresource, "Authorization error");
            Err(plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("Authorization error ({what})"),
            ))
        }
    }
}

/// Binds `addr` and serves until `cancel`: TLS, then authentication and authorization
/// ([`authorize_request`]), then the routes.
pub async fn serve(
    addr: &str,
    tls: rustls::ServerConfig,
    auth: Auth,
    shared: Arc<KubeletShared>,
    root_dir: PathBuf,
    cancel: CancellationToken,
) -> Result<(SocketAddr, impl Future<Output = ()> + use<>), TlsError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| TlsError::Bind {
            addr: addr.to_string(),
            source,
        })?;
    let local = listener.local_addr().map_err(|source| TlsError::Bind {
        addr: addr.to_string(),
        source,
    })?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let root_dir = Arc::new(root_dir);
    let auth = Arc::new(auth);
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
            let (acceptor, shared, root_dir, auth) = (
                acceptor.clone(),
                shared.clone(),
                root_dir.clone(),
                auth.clone(),
            );
            tokio::spawn(async move {
                let tls = match acceptor.accept(stream).await {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::debug!(error = %e, "TLS handshake failed");
                        return;
                    }
                };
                // The TLS layer verified the chain against --client-ca-file.
                let cert_user = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|c| user_from_certificate(c.as_ref()));
                let svc = service_fn(move |req: Request<Incoming>| {
                    let (shared, root_dir, auth) = (shared.clone(), root_dir.clone(), auth.clone());
                    let creds = Credentials::new(cert_user.clone(), req.headers());
                    async move {
                        let path = req.uri().path().to_string();
                        if let Err(r) =
                            authorize_request(&auth, &creds, req.method().as_str(), &path).await
                        {
                            return Ok::<_, Infallible>(r);
                        }
                        Ok(route(shared, root_dir, req).await)
                    }
                });
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .with_upgrades()
                    .await
                {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
            });
        }
    };
    Ok((local, fut))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_certificate_is_made_once_with_a_private_key() {
        let d = tempfile::tempdir().unwrap();
        let c = TlsConfig {
            tls_cert_file: None,
            tls_private_key_file: None,
            cert_dir: d.path().join("pki"),
            client_ca_file: None,
            anonymous_auth: false,
            rotate_certificates: false,
            server_tls_bootstrap: false,
        };
        let (chain, _) = serving_cert(&c, &["node-a".into(), "127.0.0.1".into()]).unwrap();
        assert_eq!(chain.len(), 1);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.path().join("pki/kubelet.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = serving_cert(&c, &["node-a".into()]).unwrap().0;
        assert_eq!(again, chain, "kept, not regenerated");
        assert!(server_config(&c, &["node-a".into()]).is_ok());
    }

    async fn body(r: Response<Body>) -> (u16, String) {
        let code = r.status().as_u16();
        let b = r.into_body().collect().await.expect("body").to_bytes();
        (code, String::from_utf8_lossy(&b).into_owned())
    }

    #[tokio::test]
    async fn the_filter_answers_401_403_and_500_with_upstream_texts() {
        use crate::server::auth::authn::tests::{FakeTokens, user};
        use crate::server::auth::authz::tests::FakeSar;
        use crate::server::auth::{DelegatingAuthenticator, UserInfo};
        let tokens = Arc::new(FakeTokens {
            users: vec![("t-alice".into(), user("alice", &[]))],
            ..Default::default()
        });
        let sar = Arc::new(FakeSar {
            allow: vec![
                ("alice", "get", "stats"),
                ("kubelet-client", "create", "proxy"),
            ],
            ..Default::default()
        });
        let auth = Auth {
            authenticator: Arc::new(DelegatingAuthenticator {
                x509: true,
                token: Some(tokens),
                anonymous: false,
            }),
            authorizer: sar.clone(),
            node_name: "node-a".into(),
        };
        let bearer = |t: &str| Credentials {
            client_cert: None,
            authorization: Some(format!("Bearer {t}")),
            websocket_protocols: vec![],
        };
        let u = authorize_request(&auth, &bearer("t-alice"), "GET", "/stats/summary")
            .await
            .expect("allowed");
        assert_eq!(u.name, "alice");
        let r = authorize_request(&auth, &bearer("t-alice"), "GET", "/pods")
            .await
            .expect_err("forbidden");
        assert_eq!(
            body(r).await,
            (
                403,
                "Forbidden (user=alice, verb=get, resource=nodes, subresource=proxy)".into()
            )
        );
        let r = authorize_request(&auth, &bearer("t-nobody"), "GET", "/pods")
            .await
            .expect_err("unknown token");
        assert_eq!(body(r).await, (401, "Unauthorized".into()));
        let r = authorize_request(&auth, &Credentials::default(), "GET", "/pods")
            .await
            .expect_err("nobody");
        assert_eq!(body(r).await, (401, "Unauthorized".into()));
        let cert = Credentials {
            client_cert: Some(UserInfo {
                name: "kubelet-client".into(),
                ..Default::default()
            }),
            authorization: None,
            websocket_protocols: vec![],
        };
        assert!(
            authorize_request(&auth, &cert, "POST", "/exec/ns/p/c")
                .await
                .is_ok()
        );
        let failing = Auth {
            authorizer: Arc::new(FakeSar {
                fail: true,
                ..Default::default()
            }),
            ..auth
        };
        let r = authorize_request(&failing, &cert, "GET", "/metrics")
            .await
            .expect_err("error");
        assert_eq!(
            body(r).await,
            (
                500,
                "Authorization error (user=kubelet-client, verb=get, resource=nodes, subresource=metrics)".into()
            )
        );
    }

    #[test]
    fn queries_keep_repeated_commands_and_flags() {
        let q = query_pairs("command=sh&command=-c&command=echo%20hi&input=1&tty=true&output=0");
        let cmd: Vec<&str> = q
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(cmd, ["sh", "-c", "echo hi"]);
        assert!(flag(&q, &["input", "stdin"]));
        assert!(flag(&q, &["tty"]));
        assert!(!flag(&q, &["output", "stdout"]));
    }
}
