//! The state every connection of one fixture shares: the object store, the token whose
//! cancellation drops every open watch, the requests seen so far (`Seen`, for tests that
//! count what a client sends) and the review rules.

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::reviews::Reviews;
use super::store::Store;

/// One request as the fixture saw it (for counting what a client sends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: String,
    /// The authenticated user (empty over plain HTTP).
    pub user: String,
    /// The serial number (hex) of the client certificate the connection presented.
    pub client_serial: Option<String>,
}

/// Who a request authenticated as (the real API server's `user.Info`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub groups: Vec<String>,
    /// The client certificate's serial number (hex), if one authenticated the request.
    pub client_serial: Option<String>,
}

/// The fixture acting as the controller-manager's CSR approver and signer: every
/// `certificatesigningrequests` created is approved and signed with the fixture's CA for
/// `lifetime`.
pub(super) struct Signer {
    pub(super) issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pub(super) lifetime: Mutex<Option<std::time::Duration>>,
}

pub(super) struct Shared {
    pub(super) store: Store,
    /// Cancelled to drop every open watch; replaced by a fresh token each time.
    pub(super) watches: Mutex<CancellationToken>,
    pub(super) seen: Mutex<Vec<Seen>>,
    /// The TokenReview and SubjectAccessReview rules, and the reviews received.
    pub(super) reviews: Mutex<Reviews>,
    pub(super) signer: Option<Signer>,
    /// Bytes of every response body sent so far (watch streams as they are sent).
    pub(super) response_body_bytes: std::sync::atomic::AtomicU64,
}
