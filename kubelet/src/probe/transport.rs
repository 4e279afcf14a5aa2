//! The network side of probes (upstream `pkg/probe/http`, `pkg/probe/grpc`): one HTTP(S) GET
//! on a fresh connection (HTTPS without certificate verification, like upstream's probes,
//! which trust whatever the container serves) and one `grpc.health.v1.Health/Check` call.
//! It owns no state; the prober decides timeouts and what the answers mean.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::rustls;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::{DigitallySignedStruct, SignatureScheme};

/// The probe's User-Agent, like upstream's `kube-probe/<major>.<minor>`.
pub const USER_AGENT: &str = "kube-probe/1.34";

/// Accepts any server certificate (upstream probes set `InsecureSkipVerify`), still checking
/// the handshake signatures.
#[derive(Debug)]
struct AcceptAnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A TLS client configuration that accepts any server certificate, presenting `identity`
/// (a certificate chain and its key) when given.
pub fn insecure_client_config(
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider)));
    match identity {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| e.to_string()),
        None => Ok(builder.with_no_client_auth()),
    }
}

fn tls_connector() -> Result<tokio_rustls::TlsConnector, String> {
    Ok(tokio_rustls::TlsConnector::from(Arc::new(
        insecure_client_config(None)?,
    )))
}

async fn send<I>(io: I, req: hyper::Request<Empty<Bytes>>) -> Result<u16, String>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    Ok(resp.status().as_u16())
}

/// `GET <scheme>://host:port<path>` with `headers`; the status code.
pub async fn http_get(
    host: &str,
    port: u16,
    path: &str,
    https: bool,
    headers: &[(String, String)],
) -> Result<u16, String> {
    let scheme = if https { "https" } else { "http" };
    let url = format!("{scheme}://{host}:{port}{path}");
    let fail = |e: String| format!("Get \"{url}\": {e}");
    let mut req = hyper::Request::get(path)
        .header(hyper::header::HOST, format!("{host}:{port}"))
        .header(hyper::header::USER_AGENT, USER_AGENT)
        .header(hyper::header::ACCEPT, "*/*");
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req.body(Empty::new()).map_err(|e| fail(e.to_string()))?;
    let tcp = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| fail(e.to_string()))?;
    if https {
        let name = ServerName::try_from(host.to_string()).map_err(|e| fail(e.to_string()))?;
        let tls = tls_connector()
            .map_err(fail)?
            .connect(name, tcp)
            .await
            .map_err(|e| fail(e.to_string()))?;
        send(tls, req).await.map_err(fail)
    } else {
        send(tcp, req).await.map_err(fail)
    }
}

/// `grpc.health.v1.Health/Check` of `service` at `host:port` (plaintext, like upstream).
pub async fn grpc_health(host: &str, port: u16, service: &str) -> Result<(), String> {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let addr = format!("http://{host}:{port}");
    let channel = tonic::transport::Endpoint::from_shared(addr.clone())
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| {
            format!("failed to connect service \"{host}:{port}\" within the timeout: {e}")
        })?;
    let resp = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.to_string(),
        })
        .await
        .map_err(|s| format!("health rpc probe failed: {}", s.message()))?
        .into_inner();
    match ServingStatus::try_from(resp.status) {
        Ok(ServingStatus::Serving) => Ok(()),
        Ok(s) => Err(format!(
            "service unhealthy (responded with \"{}\")",
            s.as_str_name()
        )),
        Err(_) => Err(format!(
            "service unhealthy (responded with {})",
            resp.status
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-shot HTTPS server with a self-signed certificate answering `code`.
    async fn https_server(code: u16) -> u16 {
        let key = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cert = CertificateDer::from(key.cert.der().to_vec());
        let pkey =
            rustls::pki_types::PrivateKeyDer::try_from(key.signing_key.serialize_der()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], pkey)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let tls = acceptor.accept(tcp).await.unwrap();
            let svc =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let ua = req
                        .headers()
                        .get(hyper::header::USER_AGENT)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    let custom = req.headers().contains_key("x-probe");
                    async move {
                        let status = if ua == USER_AGENT && custom {
                            code
                        } else {
                            400
                        };
                        hyper::Response::builder()
                            .status(status)
                            .body(Empty::<Bytes>::new())
                    }
                });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), svc)
                .await;
        });
        port
    }

    #[tokio::test]
    async fn https_probes_accept_a_self_signed_certificate() {
        let headers = vec![("X-Probe".to_string(), "1".to_string())];
        let port = https_server(204).await;
        assert_eq!(
            http_get("127.0.0.1", port, "/healthz", true, &headers).await,
            Ok(204)
        );
        let port = https_server(503).await;
        assert_eq!(
            http_get("127.0.0.1", port, "/healthz", true, &headers).await,
            Ok(503)
        );
    }

    #[tokio::test]
    async fn grpc_health_reports_serving_and_not_serving() {
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("up", tonic_health::ServingStatus::Serving)
            .await;
        reporter
            .set_service_status("down", tonic_health::ServingStatus::NotServing)
            .await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        assert_eq!(grpc_health("127.0.0.1", port, "up").await, Ok(()));
        let e = grpc_health("127.0.0.1", port, "down").await.unwrap_err();
        assert!(e.contains("NOT_SERVING"), "{e}");
        let e = grpc_health("127.0.0.1", port, "unknown").await.unwrap_err();
        assert!(e.contains("health rpc probe failed"), "{e}");
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        assert!(grpc_health("127.0.0.1", closed, "").await.is_err());
    }
}
