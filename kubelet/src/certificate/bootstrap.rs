//! TLS bootstrap (upstream `pkg/kubelet/certificate/bootstrap` `LoadClientCert`): when
//! `--kubeconfig` is missing or its client certificate is unreadable or expired
//! (`isClientConfigStillValid`), the kubelet asks for a client certificate with the
//! `--bootstrap-kubeconfig` credentials — an ECDSA P-256 key (kept in
//! `<cert-dir>/kubelet-client.key.tmp` until the certificate arrives, so a restart reuses it
//! and finds its `node-csr-<digest>` request again), a CSR for `system:node:<node>` — stores
//! it as `kubelet-client-<timestamp>.pem` with the `kubelet-client-current.pem` symlink, and
//! writes `--kubeconfig` with the bootstrap file's cluster and that file as client
//! certificate and key.

use std::path::Path;
use std::time::{Duration, SystemTime};

use rcgen::PublicKeyData as _;
use tracing::{info, instrument, warn};

use super::client::{client_from_file, kubeconfig_identity, load_kubeconfig, resolve_path};
use super::csr::{self, Template};
use super::store::{FileStore, KeyPair, write_private};
use super::{CLIENT_PREFIX, CertError};

/// Where the key waits for its certificate.
pub const TMP_PRIVATE_KEY_FILE: &str = "kubelet-client.key.tmp";

/// Upstream `isClientConfigStillValid`: the kubeconfig exists, parses, names a client
/// certificate that parses, and that certificate is not expired. Any other answer (no file,
/// a token-only user, an expired certificate) means: bootstrap.
pub async fn is_client_config_still_valid(path: &Path) -> Result<bool, CertError> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => {
            return Err(CertError::File {
                path: path.to_path_buf(),
                source: e,
            });
        }
        Ok(_) => {}
    }
    let kc = match load_kubeconfig(path).await {
        Ok((kc, _)) => kc,
        Err(e) => {
            warn!(error = %e, "unable to read the existing kubeconfig");
            return Ok(false);
        }
    };
    match kubeconfig_identity(path, &kc) {
        Ok(Some(pair)) if !pair.expired_at(SystemTime::now()) => Ok(true),
        Ok(Some(pair)) => {
            warn!(path = %path.display(), not_after = %chrono::DateTime::<chrono::Utc>::from(pair.not_after), "the kubeconfig's client certificate is expired");
            Ok(false)
        }
        Ok(None) => {
            warn!(path = %path.display(), "the kubeconfig names no client certificate");
            Ok(false)
        }
        Err(e) => {
            warn!(error = %e, "the kubeconfig's client certificate is unusable");
            Ok(false)
        }
    }
}

/// What a bootstrap did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `--kubeconfig` was valid: nothing was done.
    StillValid,
    /// A certificate was obtained through this CSR.
    Bootstrapped { csr_name: String },
}

/// Upstream `LoadClientCert`: bootstraps `kubeconfig` from `bootstrap` unless it is still
/// valid. Waits at most `timeout` for the CSR to be issued (upstream: one hour).
#[instrument(skip_all, fields(node = node_name))]
pub async fn load_client_cert(
    kubeconfig: &Path,
    bootstrap: &Path,
    cert_dir: &Path,
    node_name: &str,
    timeout: Duration,
) -> Result<Outcome, CertError> {
    if is_client_config_still_valid(kubeconfig).await? {
        info!(path = %kubeconfig.display(), "kubeconfig exists and is valid, skipping bootstrap");
        return Ok(Outcome::StillValid);
    }
    // An unusable bootstrap kubeconfig is the one line the kubelet exits with.
    let (bootstrap_kc, _) = load_kubeconfig(bootstrap).await?;
    info!(
        "using the bootstrap kubeconfig to generate a TLS client certificate, key and kubeconfig file"
    );
    let client = client_from_file(bootstrap).await?;
    let store = FileStore::new(cert_dir, CLIENT_PREFIX);
    std::fs::create_dir_all(cert_dir).map_err(|e| CertError::File {
        path: cert_dir.to_path_buf(),
        source: e,
    })?;
    // The key of the current (expired) certificate, else the one waiting from an earlier
    // attempt, else a new one, written before the CSR is posted.
    let tmp_key = cert_dir.join(TMP_PRIVATE_KEY_FILE);
    let from_store = store
        .current()
        .ok()
        .flatten()
        .map(|p| p.key_pem)
        .and_then(|pem| rcgen::KeyPair::from_pem(&pem).ok());
    let from_tmp = || {
        std::fs::read_to_string(&tmp_key)
            .ok()
            .and_then(|pem| rcgen::KeyPair::from_pem(&pem).ok())
    };
    let key = match from_store.or_else(from_tmp) {
        Some(k) => k,
        None => {
            let k = csr::generate_key()?;
            write_private(&tmp_key, k.serialize_pem().as_bytes()).map_err(|e| CertError::File {
                path: tmp_key.clone(),
                source: e,
            })?;
            k
        }
    };
    wait_for_server(&client, Duration::from_secs(60)).await;
    let template = Template::client(node_name);
    let name = csr::digested_name(&key.subject_public_key_info(), &template);
    let csr_pem = csr::make_csr(&template, &key)?;
    let (name, uid) =
        csr::request_certificate(client.clone(), Some(&name), &csr_pem, &template).await?;
    info!(csr = %name, "waiting for the client certificate to be issued");
    let cert_pem = csr::wait_for_certificate(client, &name, &uid, timeout).await?;
    let pair = store.update(&cert_pem, &key.serialize_pem())?;
    info!(csr = %name, serial = %pair.serial, not_after = %chrono::DateTime::<chrono::Utc>::from(pair.not_after), "client certificate issued");
    if let Err(e) = std::fs::remove_file(&tmp_key)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        warn!(error = %e, "removing the temporary key");
    }
    write_kubeconfig(kubeconfig, bootstrap, &bootstrap_kc, &store.current_path())?;
    Ok(Outcome::Bootstrapped { csr_name: name })
}

/// Waits until the API server answers `/version`, at most `limit` (upstream `waitForServer`;
/// an unreachable server is reported by the request that follows).
async fn wait_for_server(client: &kube::Client, limit: Duration) {
    let wait = async {
        loop {
            match client.apiserver_version().await {
                Ok(_) => return,
                Err(e) => warn!(error = %e, "waiting for the API server"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    let _ = tokio::time::timeout(limit, wait).await;
}

/// YAML string quoting (JSON strings are YAML).
fn quote(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// Upstream `writeKubeconfigFromBootstrapping`: cluster `default-cluster` (the bootstrap
/// file's server and CA: the CA file when it names one, else its data), user `default-auth`
/// with `client-certificate` and `client-key` both the current pem, context
/// `default-context` (namespace `default`).
pub fn write_kubeconfig(
    path: &Path,
    bootstrap: &Path,
    bootstrap_kc: &kube::config::Kubeconfig,
    pem_path: &Path,
) -> Result<(), CertError> {
    let bad = |reason: &str| CertError::Kubeconfig {
        path: bootstrap.to_path_buf(),
        reason: reason.to_string(),
    };
    let ctx = bootstrap_kc
        .current_context
        .as_deref()
        .ok_or_else(|| bad("no current-context is set"))?;
    let cluster_name = bootstrap_kc
        .contexts
        .iter()
        .find(|c| c.name == ctx)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .ok_or_else(|| bad("the current context is missing"))?;
    let cluster = bootstrap_kc
        .clusters
        .iter()
        .find(|c| c.name == cluster_name)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| bad("the current context's cluster is missing"))?;
    let server = cluster
        .server
        .as_deref()
        .ok_or_else(|| bad("the cluster has no server"))?;
    let mut cluster_yaml = String::new();
    match (
        &cluster.certificate_authority,
        &cluster.certificate_authority_data,
    ) {
        (Some(file), _) if !file.is_empty() => {
            let abs = resolve_path(bootstrap, file);
            cluster_yaml.push_str(&format!(
                "    certificate-authority: {}\n",
                quote(&abs.to_string_lossy())
            ));
        }
        (_, Some(data)) if !data.is_empty() => {
            cluster_yaml.push_str(&format!("    certificate-authority-data: {data}\n"));
        }
        _ => {}
    }
    if cluster.insecure_skip_tls_verify == Some(true) {
        cluster_yaml.push_str("    insecure-skip-tls-verify: true\n");
    }
    cluster_yaml.push_str(&format!("    server: {}\n", quote(server)));
    let pem = quote(&pem_path.to_string_lossy());
    let text = format!(
        "apiVersion: v1\nclusters:\n- cluster:\n{cluster_yaml}  name: default-cluster\ncontexts:\n- context:\n    cluster: default-cluster\n    namespace: default\n    user: default-auth\n  name: default-context\ncurrent-context: default-context\nkind: Config\npreferences: {{}}\nusers:\n- name: default-auth\n  user:\n    client-certificate: {pem}\n    client-key: {pem}\n"
    );
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir).map_err(|e| CertError::File {
            path: dir.to_path_buf(),
            source: e,
        })?;
    }
    write_private(path, text.as_bytes()).map_err(|e| CertError::File {
        path: path.to_path_buf(),
        source: e,
    })?;
    info!(path = %path.display(), "wrote the kubeconfig");
    Ok(())
}

/// The first certificate of a rotation manager: the store's current one, else the
/// kubeconfig's (upstream seeds the manager with the bootstrap certificate).
pub async fn initial_client_pair(
    store: &FileStore,
    kubeconfig: &Path,
) -> Result<Option<KeyPair>, CertError> {
    if let Some(p) = store.current()? {
        return Ok(Some(p));
    }
    let (kc, _) = load_kubeconfig(kubeconfig).await?;
    kubeconfig_identity(kubeconfig, &kc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_kubeconfig_is_still_valid_only_with_an_unexpired_certificate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing");
        assert!(!is_client_config_still_valid(&missing).await.expect("ok"));
        let store = FileStore::new(dir.path(), CLIENT_PREFIX);
        let (c, k) = crate::certificate::store::tests::self_signed("system:node:n", 3600);
        store.update(&c, &k).expect("update");
        std::fs::write(dir.path().join("ca.crt"), &c).expect("ca");
        let boot = dir.path().join("bootstrap.kubeconfig");
        std::fs::write(
            &boot,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority: ca.crt\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\nusers:\n- name: u\n  user: {token: abcdef.0123456789abcdef}\n",
        )
        .expect("write");
        // A token-only kubeconfig is not "still valid": it would be bootstrapped.
        assert!(!is_client_config_still_valid(&boot).await.expect("ok"));
        let (kc, _) = load_kubeconfig(&boot).await.expect("load");
        let out = dir.path().join("sub/kubelet.conf");
        write_kubeconfig(&out, &boot, &kc, &store.current_path()).expect("write");
        let text = std::fs::read_to_string(&out).expect("read");
        let ca = dir.path().join("ca.crt");
        assert!(
            text.contains(&format!("certificate-authority: \"{}\"", ca.display())),
            "{text}"
        );
        assert!(text.contains("current-context: default-context"), "{text}");
        let pem = store.current_path();
        assert!(
            text.contains(&format!("client-key: \"{}\"", pem.display())),
            "{text}"
        );
        assert!(is_client_config_still_valid(&out).await.expect("ok"));
        // Expired: bootstrap again.
        let (c, k) = crate::certificate::store::tests::self_signed("system:node:n", -10);
        store.update(&c, &k).expect("update");
        assert!(!is_client_config_still_valid(&out).await.expect("ok"));
    }
}
