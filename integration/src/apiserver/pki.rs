//! The TLS fixture's PKI: a CA of its own, a server certificate for 127.0.0.1 signed by it, a
//! client certificate for a node user, and a random bearer token; the rustls server config that
//! asks for (but does not require) a client certificate of that CA.

use std::sync::Arc;

/// What a TLS fixture's clients need: its CA, a client certificate and key it accepts, and a
/// bearer token it accepts (all PEM / text).
#[derive(Debug, Clone)]
pub struct TlsMaterial {
    pub ca_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
    pub token: String,
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate (for node `user`).
/// What [`make_pki`] makes: the clients' material, the server's TLS config and the CA as an
/// issuer (to sign CSRs with).
pub(super) type Pki = (
    TlsMaterial,
    tokio_rustls::rustls::ServerConfig,
    rcgen::Issuer<'static, rcgen::KeyPair>,
);

pub(super) fn make_pki(user: &str) -> Result<Pki, Box<dyn std::error::Error>> {
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
        issuer,
    ))
}

/// Signs a PEM certificate request as the controller-manager's signers do: the request's
/// subject and SANs, valid from now for `lifetime`, key usages digital signature and key
/// encipherment, and the extended usages named by `usages` (`client auth`, `server auth`).
pub(super) fn sign_csr(
    issuer: &rcgen::Issuer<'static, rcgen::KeyPair>,
    csr_pem: &str,
    usages: &[String],
    lifetime: std::time::Duration,
) -> Result<String, String> {
    let mut req = rcgen::CertificateSigningRequestParams::from_pem(csr_pem)
        .map_err(|e| format!("invalid certificate request: {e}"))?;
    let now = time::OffsetDateTime::now_utc();
    req.params.not_before = now;
    req.params.not_after =
        now + time::Duration::try_from(lifetime).map_err(|e| format!("lifetime: {e}"))?;
    let serial: [u8; 16] = rand::random();
    req.params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
    req.params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    req.params.extended_key_usages = usages
        .iter()
        .filter_map(|u| match u.as_str() {
            "client auth" => Some(rcgen::ExtendedKeyUsagePurpose::ClientAuth),
            "server auth" => Some(rcgen::ExtendedKeyUsagePurpose::ServerAuth),
            _ => None,
        })
        .collect();
    req.signed_by(issuer)
        .map(|c| c.pem())
        .map_err(|e| format!("signing: {e}"))
}

/// The subject common name, organizations and serial number (hex) of a DER certificate.
pub(super) fn describe_cert(der: &[u8]) -> Option<(String, Vec<String>, String)> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert
        .subject()
        .iter_common_name()
        .filter_map(|a| a.as_str().ok())
        .next()
        .unwrap_or_default()
        .to_string();
    let orgs = cert
        .subject()
        .iter_organization()
        .filter_map(|a| a.as_str().ok().map(str::to_string))
        .collect();
    Some((cn, orgs, cert.raw_serial_as_string().replace(':', "")))
}
