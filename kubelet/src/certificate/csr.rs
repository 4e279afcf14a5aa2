//! Certificate signing requests (upstream `client-go/util/certificate/csr`): the template of
//! what the kubelet asks for (client: CN `system:node:<node>`, O `system:nodes`; serving: the
//! same subject with the node's hostnames and IPs as SANs), the PEM request made with an
//! ECDSA P-256 key, the `certificates.k8s.io/v1` object posted (named `node-csr-<digest>` at
//! bootstrap like upstream's `digestedName`, `csr-<random>` when rotating), and the wait for it
//! to be approved and issued (denied or failed ends it; bounded by a timeout, upstream 1h).

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use sha2::Digest as _;
use tracing::{info, instrument};

use super::CertError;
use super::store::KeyPair;

/// Signer of kubelet client certificates.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Signer of kubelet serving certificates.
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// How long the kubelet waits for a CSR to be issued (upstream 3600 s).
pub const ISSUE_TIMEOUT: Duration = Duration::from_secs(3600);
/// How often a pending CSR is looked at.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// What a certificate is asked for with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub signer_name: String,
    /// Key usages of the CSR object, in upstream's order.
    pub usages: Vec<String>,
}

impl Template {
    /// The client certificate (upstream 1.26 `NewKubeletClientCertificateManager` and
    /// `requestNodeCertificate`: digital signature, key encipherment, client auth).
    pub fn client(node_name: &str) -> Template {
        Template {
            common_name: format!("system:node:{node_name}"),
            organizations: vec!["system:nodes".to_string()],
            dns_names: Vec::new(),
            ip_addresses: Vec::new(),
            signer_name: CLIENT_SIGNER.to_string(),
            usages: ["digital signature", "key encipherment", "client auth"]
                .map(String::from)
                .to_vec(),
        }
    }

    /// The serving certificate for the node's hostnames and IPs (upstream
    /// `NewKubeletServerCertificateManager`; usages digital signature, key encipherment,
    /// server auth).
    pub fn serving(node_name: &str, hostnames: &[String], ips: &[IpAddr]) -> Template {
        let mut dns_names: Vec<String> = Vec::new();
        for h in hostnames {
            if !h.is_empty() && !dns_names.contains(h) {
                dns_names.push(h.clone());
            }
        }
        let mut ip_addresses: Vec<IpAddr> = Vec::new();
        for ip in ips {
            if !ip_addresses.contains(ip) {
                ip_addresses.push(*ip);
            }
        }
        Template {
            common_name: format!("system:node:{node_name}"),
            organizations: vec!["system:nodes".to_string()],
            dns_names,
            ip_addresses,
            signer_name: SERVING_SIGNER.to_string(),
            usages: ["digital signature", "key encipherment", "server auth"]
                .map(String::from)
                .to_vec(),
        }
    }

    /// Does `pair` carry this template's subject and SANs (upstream
    /// `certSatisfiesTemplateLocked`)?
    pub fn satisfied_by(&self, pair: &KeyPair) -> bool {
        let mut want_orgs = self.organizations.clone();
        let mut have_orgs = pair.organizations.clone();
        want_orgs.sort();
        have_orgs.sort();
        let mut want_dns = self.dns_names.clone();
        let mut have_dns = pair.dns_names.clone();
        want_dns.sort();
        have_dns.sort();
        let mut want_ips: Vec<String> = self.ip_addresses.iter().map(|i| i.to_string()).collect();
        let mut have_ips = pair.ip_addresses.clone();
        want_ips.sort();
        have_ips.sort();
        pair.common_name == self.common_name
            && want_orgs == have_orgs
            && want_dns == have_dns
            && want_ips == have_ips
    }
}

/// A fresh ECDSA P-256 key.
pub fn generate_key() -> Result<rcgen::KeyPair, CertError> {
    rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| CertError::Csr(format!("generating a key: {e}")))
}

/// The PEM certificate request for `template`, signed by `key`.
pub fn make_csr(template: &Template, key: &rcgen::KeyPair) -> Result<String, CertError> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())
        .map_err(|e| CertError::Csr(e.to_string()))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    for o in &template.organizations {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, o.as_str());
    }
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, template.common_name.as_str());
    for d in &template.dns_names {
        let name = d
            .clone()
            .try_into()
            .map_err(|e| CertError::Csr(format!("DNS name {d:?}: {e}")))?;
        params.subject_alt_names.push(rcgen::SanType::DnsName(name));
    }
    for ip in &template.ip_addresses {
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress(*ip));
    }
    params
        .serialize_request(key)
        .and_then(|r| r.pem())
        .map_err(|e| CertError::Csr(e.to_string()))
}

/// Upstream's `digestedName`: `node-csr-` and the base64url (no padding) SHA-512/256 of the
/// public key (DER SubjectPublicKeyInfo), common name, organizations and usages, each
/// base64url-encoded and followed by `|`. The same key and template give the same name, so a
/// kubelet restarted mid-bootstrap finds its own request again.
pub fn digested_name(public_key_der: &[u8], template: &Template) -> String {
    use base64::Engine as _;
    let encode = |d: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(d);
    let mut hash = sha2::Sha512_256::new();
    let mut write = |d: &[u8]| {
        hash.update(encode(d).as_bytes());
        hash.update(b"|");
    };
    write(public_key_der);
    write(template.common_name.as_bytes());
    for o in &template.organizations {
        write(o.as_bytes());
    }
    for u in &template.usages {
        write(u.as_bytes());
    }
    format!("node-csr-{}", encode(&hash.finalize()))
}

/// Posts the CSR: named `name`, or `csr-<random>` (generateName) when `None`. An existing
/// request of that name is reused when it asks for the same signer and usages (upstream
/// `ensureCompatible`); its UID is returned so the wait follows the right object.
#[instrument(skip_all, fields(signer = %template.signer_name))]
pub async fn request_certificate(
    client: kube::Client,
    name: Option<&str>,
    csr_pem: &str,
    template: &Template,
) -> Result<(String, String), CertError> {
    let api: Api<CertificateSigningRequest> = Api::all(client);
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: name.map(str::to_string),
            generate_name: name.is_none().then(|| "csr-".to_string()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(csr_pem.as_bytes().to_vec()),
            signer_name: template.signer_name.clone(),
            usages: Some(template.usages.clone()),
            ..Default::default()
        },
        status: None,
    };
    let created = match api.create(&PostParams::default(), &csr).await {
        Ok(c) => c,
        Err(kube::Error::Api(s)) if s.code == 409 && name.is_some() => {
            let name = name.unwrap_or_default();
            let existing = api.get(name).await.map_err(CertError::api)?;
            if existing.spec.signer_name != template.signer_name
                || existing.spec.usages.as_deref() != Some(template.usages.as_slice())
            {
                return Err(CertError::Csr(format!(
                    "certificate signing request {name} exists and asks for something else"
                )));
            }
            info!(
                csr = name,
                "reusing the existing certificate signing request"
            );
            existing
        }
        Err(e) => return Err(CertError::api(e)),
    };
    let name = created.metadata.name.unwrap_or_default();
    let uid = created.metadata.uid.unwrap_or_default();
    info!(csr = %name, "certificate signing request posted");
    Ok((name, uid))
}

/// Waits for the CSR `name` (of `uid`) to be approved and issued: its PEM certificate. A
/// denied or failed request, one replaced by another object of the same name, or `timeout`
/// ends the wait with an error.
#[instrument(skip(client))]
pub async fn wait_for_certificate(
    client: kube::Client,
    name: &str,
    uid: &str,
    timeout: Duration,
) -> Result<String, CertError> {
    let api: Api<CertificateSigningRequest> = Api::all(client);
    let poll = async {
        loop {
            match api.get_opt(name).await {
                Ok(Some(csr)) => {
                    if !uid.is_empty() && csr.metadata.uid.as_deref() != Some(uid) {
                        return Err(CertError::Csr(format!(
                            "certificate signing request {name} was replaced"
                        )));
                    }
                    let status = csr.status.unwrap_or_default();
                    let conditions = status.conditions.unwrap_or_default();
                    for c in &conditions {
                        if c.type_ == "Denied" || c.type_ == "Failed" {
                            return Err(CertError::Csr(format!(
                                "certificate signing request {name} is {}: {} {}",
                                c.type_.to_lowercase(),
                                c.reason.clone().unwrap_or_default(),
                                c.message.clone().unwrap_or_default()
                            )));
                        }
                    }
                    let approved = conditions.iter().any(|c| c.type_ == "Approved");
                    if let Some(cert) = status.certificate.filter(|c| !c.0.is_empty())
                        && approved
                    {
                        info!(csr = name, "certificate signing request issued");
                        return String::from_utf8(cert.0).map_err(|_| {
                            CertError::Csr(format!("{name}: the certificate is not PEM"))
                        });
                    }
                }
                Ok(None) => {
                    return Err(CertError::Csr(format!(
                        "certificate signing request {name} was deleted"
                    )));
                }
                Err(e) => tracing::debug!(error = %e, "reading the certificate signing request"),
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    };
    tokio::time::timeout(timeout, poll)
        .await
        .map_err(|_| CertError::Csr(format!("timed out waiting for {name} to be issued")))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::PublicKeyData as _;
    use x509_parser::prelude::FromDer as _;

    #[test]
    fn the_client_template_is_upstreams() {
        let t = Template::client("n1");
        assert_eq!(t.common_name, "system:node:n1");
        assert_eq!(t.organizations, vec!["system:nodes"]);
        assert_eq!(t.signer_name, "kubernetes.io/kube-apiserver-client-kubelet");
        assert_eq!(
            t.usages,
            vec!["digital signature", "key encipherment", "client auth"]
        );
    }

    #[test]
    fn the_request_carries_the_subject_and_sans() {
        let key = generate_key().expect("key");
        let ip: IpAddr = "10.1.2.3".parse().expect("ip");
        let t = Template::serving("n1", &["n1".into(), "n1".into()], &[ip, ip]);
        assert_eq!(t.dns_names, vec!["n1"]);
        assert_eq!(t.ip_addresses, vec![ip]);
        let pem = make_csr(&t, &key).expect("csr");
        assert!(
            pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----"),
            "{pem}"
        );
        let (_, der) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).expect("pem");
        let (_, req) =
            x509_parser::certification_request::X509CertificationRequest::from_der(&der.contents)
                .expect("parse");
        let subject = &req.certification_request_info.subject;
        let cn: Vec<&str> = subject
            .iter_common_name()
            .filter_map(|a| a.as_str().ok())
            .collect();
        assert_eq!(cn, vec!["system:node:n1"]);
        let o: Vec<&str> = subject
            .iter_organization()
            .filter_map(|a| a.as_str().ok())
            .collect();
        assert_eq!(o, vec!["system:nodes"]);
        req.verify_signature().expect("signed by the key");
    }

    #[test]
    fn the_digested_name_depends_on_key_subject_and_usages() {
        let key = generate_key().expect("key");
        let other = generate_key().expect("key");
        let t = Template::client("n1");
        let name = digested_name(&key.subject_public_key_info(), &t);
        assert!(name.starts_with("node-csr-"), "{name}");
        // 32 bytes of SHA-512/256, base64url without padding: 43 characters.
        assert_eq!(name.len(), "node-csr-".len() + 43);
        assert_eq!(name, digested_name(&key.subject_public_key_info(), &t));
        assert_ne!(name, digested_name(&other.subject_public_key_info(), &t));
        assert_ne!(
            name,
            digested_name(&key.subject_public_key_info(), &Template::client("n2"))
        );
    }
}
