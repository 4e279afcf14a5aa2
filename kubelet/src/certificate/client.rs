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
    kube::Client::try_from(config).map_err(|e| kubeconfig_err(path)(e.to_string()))
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
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| CertError::Invalid(e.to_string()))?
        .with_root_certificates(roots)
        .with_client_cert_resolver(holder.clone());
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
