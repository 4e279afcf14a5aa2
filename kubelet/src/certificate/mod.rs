//! TLS bootstrap and certificate rotation (upstream `pkg/kubelet/certificate` and
//! `client-go/util/certificate`): [`bootstrap`] obtains the first client certificate with the
//! `--bootstrap-kubeconfig` credentials and writes `--kubeconfig`; [`manager`] renews a
//! certificate at a random point in 70–90 % of its lifetime through a new CSR ([`csr`]),
//! writes it to `--cert-dir` ([`store`]) and swaps it into a [`holder::CertHolder`], which the
//! API client ([`client`]) and the secure server read per connection. A layer-2 module: it
//! imports nothing of the crate.

pub mod bootstrap;
pub mod client;
pub mod csr;
pub mod holder;
pub mod manager;
pub mod store;

use std::path::PathBuf;

pub use holder::CertHolder;
pub use manager::Manager;
pub use store::{FileStore, KeyPair};

/// The file-name prefix of client certificates in `--cert-dir`.
pub const CLIENT_PREFIX: &str = "kubelet-client";
/// The file-name prefix of serving certificates in `--cert-dir`.
pub const SERVER_PREFIX: &str = "kubelet-server";

/// Errors of TLS bootstrap and rotation.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid {0}")]
    Invalid(String),
    #[error("{path}: {reason}")]
    Kubeconfig { path: PathBuf, reason: String },
    #[error("certificate signing request: {0}")]
    Csr(String),
    #[error("API server: {0}")]
    Api(String),
}

impl CertError {
    pub(crate) fn api(e: kube::Error) -> CertError {
        CertError::Api(e.to_string())
    }
}
