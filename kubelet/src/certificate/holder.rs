//! The current certificate of one manager, shared with the TLS stacks that use it: rustls asks
//! it for the certificate at every handshake (client and server resolvers), and the API
//! client's connections watch its generation token, which is cancelled when a new certificate
//! is set so that they close and reconnect with it (upstream closes all connections of its
//! dialer after a rotation, `connrotation`).

use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tokio_rustls::rustls;
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;

use super::store::KeyPair;

/// The current certificate and key of a manager.
pub struct CertHolder {
    name: String,
    current: RwLock<Option<KeyPair>>,
    connections: Mutex<CancellationToken>,
}

impl std::fmt::Debug for CertHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertHolder")
            .field("name", &self.name)
            .field("current", &*self.current.read())
            .finish()
    }
}

impl CertHolder {
    /// A holder named `name` (for logs), holding `initial` if any.
    pub fn new(name: &str, initial: Option<KeyPair>) -> Arc<CertHolder> {
        Arc::new(CertHolder {
            name: name.to_string(),
            current: RwLock::new(initial),
            connections: Mutex::new(CancellationToken::new()),
        })
    }

    /// The current pair.
    pub fn current(&self) -> Option<KeyPair> {
        self.current.read().clone()
    }

    /// Installs a new pair and ends the connections made with the previous one.
    pub fn set(&self, pair: KeyPair) {
        tracing::info!(holder = %self.name, serial = %pair.serial, "using the new certificate");
        *self.current.write() = Some(pair);
        let old = std::mem::replace(&mut *self.connections.lock(), CancellationToken::new());
        old.cancel();
    }

    /// Cancelled when the certificate is next replaced.
    pub fn connection_token(&self) -> CancellationToken {
        self.connections.lock().clone()
    }

    fn certified(&self) -> Option<Arc<CertifiedKey>> {
        self.current.read().as_ref().map(|p| p.certified.clone())
    }
}

impl rustls::client::ResolvesClientCert for CertHolder {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.certified()
    }

    fn has_certs(&self) -> bool {
        self.current.read().is_some()
    }
}

impl rustls::server::ResolvesServerCert for CertHolder {
    /// No certificate yet (a serving CSR not issued): the handshake fails, as upstream's
    /// `GetCertificate` answering "no serving certificate available for the kubelet".
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.certified()
    }
}
