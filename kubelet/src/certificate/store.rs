//! The certificate files in `--cert-dir` (upstream `client-go/util/certificate` `FileStore`):
//! every certificate the kubelet obtains is written, certificate then key in one PEM file, as
//! `<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` (mode 0600), and the symlink `<prefix>-current.pem` is
//! switched to it atomically (a new link renamed over the old one). `kubelet-client` and
//! `kubelet-server` are the two prefixes the kubelet uses.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::CertError;

/// A certificate and its key, parsed: what the TLS stacks and the rotation loop need.
#[derive(Clone)]
pub struct KeyPair {
    pub cert_pem: String,
    pub key_pem: String,
    pub chain: Vec<CertificateDer<'static>>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    /// Subject common name and organizations of the leaf.
    pub common_name: String,
    pub organizations: Vec<String>,
    /// DNS names and IP addresses of the leaf's SANs (as text).
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<String>,
    /// The leaf's serial number, hex.
    pub serial: String,
    /// Ready for rustls (a signing key of the ring provider).
    pub certified: Arc<rustls::sign::CertifiedKey>,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair")
            .field("common_name", &self.common_name)
            .field("serial", &self.serial)
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

fn bad(what: &str, reason: impl std::fmt::Display) -> CertError {
    CertError::Invalid(format!("{what}: {reason}"))
}

impl KeyPair {
    /// Parses a PEM certificate chain (leaf first) and a PEM private key.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<KeyPair, CertError> {
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| bad("certificate PEM", e))?;
        let leaf = chain
            .first()
            .ok_or_else(|| bad("certificate PEM", "no certificate"))?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| bad("private key PEM", e))?;
        let (_, x509) = x509_parser::parse_x509_certificate(leaf.as_ref())
            .map_err(|e| bad("certificate", e))?;
        let to_system = |t: x509_parser::time::ASN1Time| {
            let secs = t.timestamp();
            if secs >= 0 {
                SystemTime::UNIX_EPOCH + Duration::from_secs(secs.unsigned_abs())
            } else {
                SystemTime::UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
            }
        };
        let subject = x509.subject();
        let common_name = subject
            .iter_common_name()
            .filter_map(|a| a.as_str().ok())
            .next()
            .unwrap_or_default()
            .to_string();
        let organizations = subject
            .iter_organization()
            .filter_map(|a| a.as_str().ok().map(str::to_string))
            .collect();
        let (mut dns_names, mut ip_addresses) = (Vec::new(), Vec::new());
        if let Ok(Some(san)) = x509.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    x509_parser::extensions::GeneralName::DNSName(d) => {
                        dns_names.push(d.to_string())
                    }
                    x509_parser::extensions::GeneralName::IPAddress(ip) => {
                        let addr = match ip.len() {
                            4 => <[u8; 4]>::try_from(*ip)
                                .ok()
                                .map(|b| std::net::IpAddr::from(b).to_string()),
                            16 => <[u8; 16]>::try_from(*ip)
                                .ok()
                                .map(|b| std::net::IpAddr::from(b).to_string()),
                            _ => None,
                        };
                        ip_addresses.extend(addr);
                    }
                    _ => {}
                }
            }
        }
        let provider = rustls::crypto::ring::default_provider();
        let signing = provider
            .key_provider
            .load_private_key(key)
            .map_err(|e| bad("private key", e))?;
        let certified = rustls::sign::CertifiedKey::new(chain.clone(), signing);
        certified
            .keys_match()
            .map_err(|e| bad("certificate and key", e))?;
        Ok(KeyPair {
            cert_pem: cert_pem.to_string(),
            key_pem: key_pem.to_string(),
            not_before: to_system(x509.validity().not_before),
            not_after: to_system(x509.validity().not_after),
            common_name,
            organizations,
            dns_names,
            ip_addresses,
            serial: x509.raw_serial_as_string().replace(':', ""),
            chain,
            certified: Arc::new(certified),
        })
    }

    /// Reads a PEM file holding both the certificate chain and the key.
    pub fn from_combined_file(path: &Path) -> Result<KeyPair, CertError> {
        let text = std::fs::read_to_string(path).map_err(|e| CertError::File {
            path: path.to_path_buf(),
            source: e,
        })?;
        Self::from_pem(&text, &text)
    }

    /// Is `now` past the certificate's NotAfter?
    pub fn expired_at(&self, now: SystemTime) -> bool {
        now > self.not_after
    }
}

/// The pem files of one prefix in a directory.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
    prefix: String,
}

impl FileStore {
    /// `kubelet-client` or `kubelet-server` files in `dir`.
    pub fn new(dir: &Path, prefix: &str) -> FileStore {
        FileStore {
            dir: dir.to_path_buf(),
            prefix: prefix.to_string(),
        }
    }

    /// `<dir>/<prefix>-current.pem` (what kubeconfigs and the server point at).
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.prefix))
    }

    /// The current pair, if the symlink (or file) exists. A file that exists but does not
    /// parse is an error.
    pub fn current(&self) -> Result<Option<KeyPair>, CertError> {
        let path = self.current_path();
        if !path.exists() {
            return Ok(None);
        }
        KeyPair::from_combined_file(&path).map(Some)
    }

    /// Writes a new pair (certificate chain PEM, then key PEM) under a timestamped name and
    /// points the `-current` symlink at it. Returns the parsed pair.
    pub fn update(&self, cert_pem: &str, key_pem: &str) -> Result<KeyPair, CertError> {
        let pair = KeyPair::from_pem(cert_pem, key_pem)?;
        let file_err = |path: &Path| {
            let path = path.to_path_buf();
            move |e| CertError::File { path, source: e }
        };
        std::fs::create_dir_all(&self.dir).map_err(file_err(&self.dir))?;
        let stamp = chrono::Utc::now().format("%Y-%m-%d-%H-%M-%S");
        let mut name = format!("{}-{stamp}.pem", self.prefix);
        // Two rotations within one second: keep both files.
        let mut n = 1;
        while self.dir.join(&name).exists() {
            name = format!("{}-{stamp}.{n}.pem", self.prefix);
            n += 1;
        }
        let file = self.dir.join(&name);
        let mut data = cert_pem.trim_end().to_string();
        data.push('\n');
        data.push_str(key_pem.trim_end());
        data.push('\n');
        write_private(&file, data.as_bytes()).map_err(file_err(&file))?;
        let tmp = self.dir.join(format!(".{}-current.pem.tmp", self.prefix));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&file, &tmp).map_err(file_err(&tmp))?;
        let current = self.current_path();
        std::fs::rename(&tmp, &current).map_err(file_err(&current))?;
        Ok(pair)
    }
}

/// Writes `data` to `path` readable by the owner only.
pub fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(data)?;
    f.sync_all()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A self-signed certificate for `cn` (O system:nodes, SANs n1 and 10.0.0.5) valid from
    /// now for `secs`.
    pub(crate) fn self_signed(cn: &str, secs: i64) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut p = rcgen::CertificateParams::new(vec!["n1".to_string(), "10.0.0.5".to_string()])
            .expect("params");
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        let now = time::OffsetDateTime::now_utc();
        p.not_before = now;
        p.not_after = now + time::Duration::seconds(secs);
        let cert = p.self_signed(&key).expect("cert");
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn update_writes_a_timestamped_file_and_switches_the_symlink() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::new(dir.path(), "kubelet-client");
        assert!(store.current().expect("current").is_none());
        let (c1, k1) = self_signed("system:node:a", 3600);
        let p1 = store.update(&c1, &k1).expect("update");
        assert_eq!(p1.common_name, "system:node:a");
        assert_eq!(p1.organizations, vec!["system:nodes".to_string()]);
        assert_eq!(p1.dns_names, vec!["n1".to_string()]);
        assert_eq!(p1.ip_addresses, vec!["10.0.0.5".to_string()]);
        let (c2, k2) = self_signed("system:node:b", 3600);
        store.update(&c2, &k2).expect("update");
        let link = std::fs::read_link(store.current_path()).expect("symlink");
        let name = link
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        assert!(
            name.starts_with("kubelet-client-") && name.ends_with(".pem"),
            "{name}"
        );
        assert_eq!(
            store.current().expect("current").map(|p| p.common_name),
            Some("system:node:b".to_string())
        );
        let files = std::fs::read_dir(dir.path())
            .expect("read_dir")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".pem"))
            .count();
        assert_eq!(files, 3, "two pem files and the symlink");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&link).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let text = std::fs::read_to_string(&link).expect("read");
        assert!(text.starts_with("-----BEGIN CERTIFICATE-----"), "{text}");
        assert!(text.contains("PRIVATE KEY-----"), "{text}");
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused() {
        let (c1, _) = self_signed("a", 60);
        let (_, k2) = self_signed("b", 60);
        assert!(KeyPair::from_pem(&c1, &k2).is_err());
    }
}
