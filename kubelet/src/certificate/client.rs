//! Kubeconfig reading for bootstrap, and an API client whose client certificate is the
//! [`CertHolder`]'s current one: the kube-rs stack (base URI, authentication, timeouts) over a
//! rustls config with the holder as its client-certificate resolver, every connection tied to
//! the holder's generation token so that it closes once the certificate is rotated and the
//! next request dials (and authenticates) anew.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use kube::client::ConfigExt as _;
use tokio_rustls::rustls;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::CertError;
use super::holder::CertHolder;
use super::store::KeyPair;

fn kubeconfig_err(path: &Path) -> impl Fn(String) -> CertError + '_ {
    move |reason| CertError::Kubeconfig {
        path: path.to_path_buf(),
        reason,
    }
}

/// The parsed kubeconfig file and the client configuration of its current context.
pub async fn load_kubeconfig(
    path: &Path,
) -> Result<(kube::config::Kubeconfig, kube::Config), CertError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let bad = kubeconfig_err(path);
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kc.clone(), &Default::default())
        .await
        .map_err(|e| bad(e.to_string()))?;
    Ok((kc, config))
}

/// A plain kube-rs client from a kubeconfig file (the bootstrap credentials).
pub async fn client_from_file(path: &Path) -> Result<kube::Client, CertError> {
    let (_, config) = load_kubeconfig(path).await?;
    crate::metrics::rest_client::client(config).map_err(|e| kubeconfig_err(path)(e.to_string()))
}

/// Resolves a path of a kubeconfig relative to the file's directory (as clientcmd does).
pub fn resolve_path(kubeconfig: &Path, p: &str) -> PathBuf {
    let p = PathBuf::from(p);
    if p.is_absolute() {
        p
    } else {
        kubeconfig.parent().unwrap_or(Path::new(".")).join(p)
    }
}

/// The client certificate and key a kubeconfig's current user names (data or files), if any.
pub fn kubeconfig_identity(
    path: &Path,
    kc: &kube::config::Kubeconfig,
) -> Result<Option<KeyPair>, CertError> {
    use base64::Engine as _;
    use secrecy::ExposeSecret as _;
    let bad = kubeconfig_err(path);
    let Some(ctx_name) = kc.current_context.as_deref() else {
        return Ok(None);
    };
    let Some(user) = kc
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.user.clone())
    else {
        return Ok(None);
    };
    let Some(auth) = kc
        .auth_infos
        .iter()
        .find(|a| a.name == user)
        .and_then(|a| a.auth_info.as_ref())
    else {
        return Ok(None);
    };
    let b64 = |s: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .map_err(|e| bad(format!("invalid base64: {e}")))
            .and_then(|d| String::from_utf8(d).map_err(|e| bad(e.to_string())))
    };
    let read = |p: &str| {
        let file = resolve_path(path, p);
        std::fs::read_to_string(&file).map_err(|e| CertError::File {
            path: file,
            source: e,
        })
    };
    let cert = match (&auth.client_certificate_data, &auth.client_certificate) {
        (Some(d), _) if !d.is_empty() => b64(d)?,
        (_, Some(p)) if !p.is_empty() => read(p)?,
        _ => return Ok(None),
    };
    let key = match (&auth.client_key_data, &auth.client_key) {
        (Some(d), _) if !d.expose_secret().is_empty() => b64(d.expose_secret())?,
        (_, Some(p)) if !p.is_empty() => read(p)?,
        _ => return Ok(None),
    };
    KeyPair::from_pem(&cert, &key).map(Some)
}

/// An API client for `config`'s server whose client certificate is `holder`'s current one
/// (authentication other than the certificate, a token, still applies).
pub fn rotating_client(
    config: &kube::Config,
    holder: Arc<CertHolder>,
) -> Result<kube::Client, CertError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for der in config.root_cert.iter().flatten() {
        roots
            .add(rustls::pki_types::CertificateDer::from(der.clone()))
            .map_err(|e| CertError::Invalid(format!("certificate authority: {e}")))?;
    }
    if roots.is_empty() {
        return Err(CertError::Invalid(
            "kubeconfig: certificate rotation needs the cluster's certificate authority (certificate-authority or certificate-authority-data)".into(),
        ));
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| CertError::Invalid(e.to_string()))?
        .with_root_certificates(roots)
        .with_client_cert_resolver(holder.clone());
    // A resumed session would carry the identity of the certificate it was made with: every
    // connection makes a full handshake, presenting the current certificate (client-go keeps
    // no session cache either).
    tls.resumption = rustls::client::Resumption::disabled();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    let closing = ClosingConnector {
        inner: https,
        holder,
    };
    let mut connector = hyper_timeout::TimeoutConnector::new(closing);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    let http_client: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new())
            .build(connector);
    let auth = config
        .auth_layer()
        .map_err(|e| CertError::Invalid(format!("kubeconfig: {e}")))?;
    let headers = config
        .extra_headers_layer()
        .map_err(|e| CertError::Invalid(format!("kubeconfig: {e}")))?;
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .layer(crate::metrics::rest_client::RestClientLayer)
        .option_layer(auth)
        .layer(headers)
        .map_err(|e: hyper_util::client::legacy::Error| {
            Box::new(e) as Box<dyn std::error::Error + Send + Sync>
        })
        .service(http_client);
    Ok(kube::client::ClientBuilder::new(service, config.default_namespace.clone()).build())
}

/// Wraps each connection of `inner` in [`Closing`] with the holder's current token.
#[derive(Clone)]
struct ClosingConnector<C> {
    inner: C,
    holder: Arc<CertHolder>,
}

impl<C> tower::Service<Uri> for ClosingConnector<C>
where
    C: tower::Service<Uri>,
    C::Future: Send + 'static,
    C::Response: Send,
{
    type Response = Closing<C::Response>;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let token = self.holder.connection_token();
        let fut = self.inner.call(uri);
        Box::pin(async move {
            let io = fut.await?;
            Ok(Closing::new(io, token))
        })
    }
}

/// A connection that fails its reads and writes once its token is cancelled.
struct Closing<T> {
    inner: T,
    closed: Pin<Box<WaitForCancellationFutureOwned>>,
    done: bool,
}

impl<T> Closing<T> {
    fn new(inner: T, token: CancellationToken) -> Self {
        Closing {
            inner,
            closed: Box::pin(token.cancelled_owned()),
            done: false,
        }
    }

    fn check(&mut self, cx: &mut Context<'_>) -> Result<(), io::Error> {
        if !self.done && self.closed.as_mut().poll(cx).is_ready() {
            self.done = true;
        }
        if self.done {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "client certificate rotated",
            ));
        }
        Ok(())
    }
}

impl<T: hyper::rt::Read + Unpin> hyper::rt::Read for Closing<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = this.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<T: hyper::rt::Write + Unpin> hyper::rt::Write for Closing<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Err(e) = this.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<T: Connection> Connection for Closing<T> {
    fn connected(&self) -> Connected {
        self.inner.connected()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn signed(
        issuer: &rcgen::Issuer<'static, rcgen::KeyPair>,
        cn: &str,
        sans: Vec<String>,
        eku: rcgen::ExtendedKeyUsagePurpose,
    ) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut p = rcgen::CertificateParams::new(sans).expect("params");
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.extended_key_usages = vec![eku];
        let cert = p.signed_by(&key, issuer).expect("sign");
        (cert.pem(), key.serialize_pem())
    }

    /// A TLS server requiring a client certificate of `ca`, answering every request with the
    /// common name of the connection's client certificate; counts connections.
    async fn whoami_server(
        ca_der: Vec<u8>,
        server: (String, String),
        connections: Arc<AtomicUsize>,
    ) -> u16 {
        use rustls::pki_types::pem::PemObject;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(rustls::pki_types::CertificateDer::from(ca_der))
            .expect("root");
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .expect("verifier");
        let chain = vec![
            rustls::pki_types::CertificateDer::from_pem_slice(server.0.as_bytes()).expect("cert"),
        ];
        let key =
            rustls::pki_types::PrivateKeyDer::from_pem_slice(server.1.as_bytes()).expect("key");
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let connections = connections.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    connections.fetch_add(1, Ordering::SeqCst);
                    let cn = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(|c| {
                            x509_parser::parse_x509_certificate(c.as_ref())
                                .ok()
                                .and_then(|(_, x)| {
                                    x.subject()
                                        .iter_common_name()
                                        .next()
                                        .and_then(|a| a.as_str().ok().map(str::to_string))
                                })
                        })
                        .unwrap_or_default();
                    let svc = hyper::service::service_fn(move |_req| {
                        let cn = cn.clone();
                        async move {
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                http_body_util::Full::new(bytes::Bytes::from(cn)),
                            ))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        port
    }

    #[tokio::test]
    async fn the_client_presents_the_current_certificate_and_redials_after_a_rotation() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).expect("ca");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let server = signed(
            &issuer,
            "server",
            vec!["127.0.0.1".into()],
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (a_cert, a_key) = signed(
            &issuer,
            "system:node:a",
            vec![],
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        );
        let (b_cert, b_key) = signed(
            &issuer,
            "system:node:b",
            vec![],
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        );
        let connections = Arc::new(AtomicUsize::new(0));
        let port = whoami_server(ca.der().to_vec(), server, connections.clone()).await;
        let mut config =
            kube::Config::new(format!("https://127.0.0.1:{port}").parse().expect("uri"));
        config.root_cert = Some(vec![ca.der().to_vec()]);
        let holder = CertHolder::new(
            "test",
            Some(KeyPair::from_pem(&a_cert, &a_key).expect("pair a")),
        );
        let client = rotating_client(&config, holder.clone()).expect("client");
        let whoami = || async {
            client
                .request_text(http::Request::get("/whoami").body(Vec::new()).expect("req"))
                .await
                .expect("request")
        };
        assert_eq!(whoami().await, "system:node:a");
        assert_eq!(whoami().await, "system:node:a");
        assert_eq!(
            connections.load(Ordering::SeqCst),
            1,
            "the connection is reused"
        );
        holder.set(KeyPair::from_pem(&b_cert, &b_key).expect("pair b"));
        // Let the idle pooled connection see its token cancelled and close.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert_eq!(whoami().await, "system:node:b");
        assert_eq!(
            connections.load(Ordering::SeqCst),
            2,
            "a new connection after the rotation"
        );
    }

    #[test]
    fn rotation_needs_the_clusters_ca() {
        let config = kube::Config::new("https://127.0.0.1:1".parse().expect("uri"));
        let holder = CertHolder::new("test", None);
        assert!(matches!(
            rotating_client(&config, holder),
            Err(CertError::Invalid(m)) if m.contains("certificate authority")
        ));
    }
}
