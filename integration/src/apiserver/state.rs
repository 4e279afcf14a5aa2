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
}

pub(super) struct Shared {
    pub(super) store: Store,
    /// Cancelled to drop every open watch; replaced by a fresh token each time.
    pub(super) watches: Mutex<CancellationToken>,
    pub(super) seen: Mutex<Vec<Seen>>,
    /// The TokenReview and SubjectAccessReview rules, and the reviews received.
    pub(super) reviews: Mutex<Reviews>,
}
