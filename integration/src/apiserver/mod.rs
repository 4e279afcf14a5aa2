//! A Kubernetes API server fixture for testing the kubelet's API-server mode on machines where
//! no kube-apiserver can run. It speaks the wire protocol real clients (kube-rs, kubectl) use —
//! JSON of the API types, `Status` errors, list and watch with resourceVersion, bookmarks and
//! 410 Gone, field selectors on `spec.nodeName`, create / get / update / merge and strategic
//! merge patches / delete with preconditions and graceful pod deletion, the status subresource
//! — over plain HTTP on loopback. The write rules live in `store`, the patch formats in
//! `patch`, the routing of one request in `routes`, watch streams in `watch`, paths and
//! selectors in `request`, responses in `reply`, the shared state in `state` and the TLS
//! fixture's certificates in `pki`; this module owns the listener, the connections and their
//! authentication, plus the test hooks (compact the history, drop every open watch, count
//! requests, the token→user map and allow rules of the review APIs in `reviews`).
//!
//! [`ApiServer::start_tls`] serves HTTPS instead, with a CA of its own, and authenticates every
//! request like the real API server's x509 and token authenticators: a client certificate of
//! its CA or `Authorization: Bearer <token>`, otherwise 401. Not served: discovery.
//! [`ApiServer::start_tls_with`] adds TLS bootstrap: a bootstrap token (`<id>.<secret>`,
//! user `system:bootstrap:<id>`, group `system:bootstrappers`) and, acting as the
//! controller-manager, approval and signing of every `certificatesigningrequests` created
//! with a certificate lifetime of the test's choosing. Each request records its user and
//! client-certificate serial ([`Seen`]).

mod ephemeral;
pub mod patch;
mod pki;
mod reply;
mod request;
pub mod reviews;
mod routes;
mod state;
pub mod store;
mod watch;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::Request;
use hyper::body::Incoming;
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use pki::TlsMaterial;
use pki::make_pki;
use reply::unauthorized;
pub use request::resource_info;
pub use reviews::{AllowRule, ReviewUser};
use routes::handle;
pub use state::{Identity, Seen};
use state::{Shared, Signer};
use store::Store;
pub use watch::BOOKMARK_EVERY;

/// TLS fixture options for TLS bootstrap tests.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// A bootstrap token (`abcdef.0123456789abcdef`) accepted as `system:bootstrap:<id>`.
    pub bootstrap_token: Option<String>,
    /// Approve and sign every CSR, issuing certificates valid for this long.
    pub csr_lifetime: Option<std::time::Duration>,
}

/// A running fixture API server.
pub struct ApiServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
    tls: Option<TlsMaterial>,
    bootstrap_token: Option<String>,
}

/// The bearer tokens a TLS fixture accepts.
#[derive(Clone)]
struct Tokens {
    fixture: String,
    bootstrap: Option<String>,
}

impl Tokens {
    fn identify(&self, bearer: &str) -> Option<Identity> {
        if bearer == self.fixture {
            return Some(Identity {
                user: "system:node:fixture-node".into(),
                groups: vec!["system:nodes".into(), "system:authenticated".into()],
                client_serial: None,
            });
        }
        let boot = self.bootstrap.as_deref()?;
        if bearer != boot {
            return None;
        }
        let id = boot.split('.').next().unwrap_or_default();
        Some(Identity {
            user: format!("system:bootstrap:{id}"),
            groups: vec!["system:bootstrappers".into(), "system:authenticated".into()],
            client_serial: None,
        })
    }
}

/// Serves one connection; `tokens` set means requests must be authenticated (a verified
/// client certificate, `cert_identity`, or one of those bearer tokens).
async fn serve_conn<I>(
    io: I,
    shared: Arc<Shared>,
    stop: CancellationToken,
    cert_identity: Option<Identity>,
    tokens: Option<Tokens>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let s = shared.clone();
        let tokens = tokens.clone();
        let cert_identity = cert_identity.clone();
        async move {
            let identity = match (cert_identity, tokens) {
                (_, None) => Identity::default(),
                (Some(id), Some(_)) => id,
                (None, Some(t)) => {
                    let bearer = req
                        .headers()
                        .get(hyper::header::AUTHORIZATION)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.strip_prefix("Bearer "));
                    match bearer.and_then(|b| t.identify(b)) {
                        Some(id) => id,
                        None => return Ok::<_, Infallible>(unauthorized()),
                    }
                }
            };
            let counted = s.clone();
            let resp = handle(s, req, identity).await.map(|body| {
                use http_body_util::BodyExt as _;
                body.map_frame(move |f| {
                    if let Some(d) = f.data_ref() {
                        counted
                            .response_body_bytes
                            .fetch_add(d.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    }
                    f
                })
                .boxed()
            });
            Ok::<_, Infallible>(resp)
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

impl ApiServer {
    /// Starts serving plain HTTP on 127.0.0.1 (a free port), without authentication.
    pub async fn start() -> std::io::Result<ApiServer> {
        Self::serve(None, None, None).await
    }

    /// Starts serving HTTPS on 127.0.0.1 with its own CA; every request must present a client
    /// certificate of that CA or the bearer token (see [`ApiServer::tls`]).
    pub async fn start_tls() -> std::io::Result<ApiServer> {
        Self::start_tls_with(TlsOptions::default()).await
    }

    /// [`ApiServer::start_tls`] with TLS bootstrap support (see [`TlsOptions`]).
    pub async fn start_tls_with(opts: TlsOptions) -> std::io::Result<ApiServer> {
        let (material, config, issuer) =
            make_pki("fixture-node").map_err(|e| std::io::Error::other(e.to_string()))?;
        let signer = Signer {
            issuer,
            lifetime: Mutex::new(opts.csr_lifetime),
        };
        Self::serve(Some((material, config)), Some(signer), opts.bootstrap_token).await
    }

    /// Changes the lifetime of the certificates the fixture signs (None: it stops approving).
    pub fn set_csr_lifetime(&self, lifetime: Option<std::time::Duration>) {
        if let Some(s) = &self.shared.signer {
            *s.lifetime.lock() = lifetime;
        }
    }

    /// A kubeconfig with the bootstrap token (as `kubeadm join` writes
    /// `bootstrap-kubelet.conf`); empty token when none was configured.
    pub fn bootstrap_kubeconfig(&self) -> String {
        self.kubeconfig_with(&format!(
            "\n    token: {}",
            self.bootstrap_token.clone().unwrap_or_default()
        ))
    }

    /// The CA, client certificate and token of a TLS fixture.
    pub fn tls(&self) -> Option<&TlsMaterial> {
        self.tls.as_ref()
    }

    async fn serve(
        tls: Option<(TlsMaterial, tokio_rustls::rustls::ServerConfig)>,
        signer: Option<Signer>,
        bootstrap_token: Option<String>,
    ) -> std::io::Result<ApiServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (material, acceptor) = match tls {
            Some((m, c)) => (Some(m), Some(tokio_rustls::TlsAcceptor::from(Arc::new(c)))),
            None => (None, None),
        };
        let token = material.as_ref().map(|m| Tokens {
            fixture: m.token.clone(),
            bootstrap: bootstrap_token.clone(),
        });
        let shared = Arc::new(Shared {
            store: Store::new(),
            watches: Mutex::new(CancellationToken::new()),
            seen: Mutex::new(Vec::new()),
            reviews: Mutex::new(Default::default()),
            signer,
            response_body_bytes: Default::default(),
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
                        None => serve_conn(tcp, s, st, None, None).await,
                        Some(a) => {
                            let Ok(tls) = a.accept(tcp).await else { return };
                            let cert_identity = tls
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|c| c.first())
                                .and_then(|c| pki::describe_cert(c.as_ref()))
                                .map(|(cn, orgs, serial)| {
                                    let mut groups = orgs;
                                    groups.push("system:authenticated".into());
                                    Identity {
                                        user: cn,
                                        groups,
                                        client_serial: Some(serial),
                                    }
                                });
                            serve_conn(tls, s, st, cert_identity, token).await;
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
            bootstrap_token,
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
        let mut w = self.shared.watches.lock();
        w.cancel();
        *w = CancellationToken::new();
    }

    /// Bytes of the response bodies sent so far (headers and framing not counted).
    pub fn response_body_bytes(&self) -> u64 {
        self.shared
            .response_body_bytes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.shared.seen.lock().clone()
    }

    /// Makes `token` a bearer token of `user` (with `groups`) for TokenReviews.
    pub fn add_token(&self, token: &str, user: &str, groups: &[&str]) {
        self.shared.reviews.lock().tokens.insert(
            token.to_string(),
            ReviewUser {
                name: user.to_string(),
                uid: format!("uid-{user}"),
                groups: groups.iter().map(|g| g.to_string()).collect(),
            },
        );
    }

    /// Lets `subject` (a user or group) `verb` on `nodes/<subresource>` in SubjectAccessReviews
    /// (`*` for any verb or subresource).
    pub fn allow(&self, subject: &str, verb: &str, subresource: &str) {
        self.shared.reviews.lock().rules.push(AllowRule {
            subject: subject.to_string(),
            verb: verb.to_string(),
            subresource: subresource.to_string(),
        });
    }

    /// The `spec` of every TokenReview received so far.
    pub fn token_reviews(&self) -> Vec<serde_json::Value> {
        self.shared.reviews.lock().token_reviews.clone()
    }

    /// The `spec` of every SubjectAccessReview received so far.
    pub fn access_reviews(&self) -> Vec<serde_json::Value> {
        self.shared.reviews.lock().access_reviews.clone()
    }
}
