//! The request cache behind streaming URLs (upstream `request_cache.go`): Exec, Attach and
//! PortForward store their validated request under a random single-use token and hand back a
//! URL carrying it; the streaming server consumes the token on the first request. Tokens expire
//! after a TTL (one minute by default), are never handed out twice, and the cache holds at most
//! a bounded number of pending tokens (further requests are refused, not queued).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine;
use cri_proto::runtime::v1 as cri;
use parking_lot::Mutex;

/// A request waiting for its streaming connection.
#[derive(Debug, Clone)]
pub enum CachedRequest {
    Exec(cri::ExecRequest),
    Attach(cri::AttachRequest),
    PortForward(cri::PortForwardRequest),
}

impl CachedRequest {
    /// The URL path segment for this kind of request.
    pub fn kind(&self) -> &'static str {
        match self {
            CachedRequest::Exec(_) => "exec",
            CachedRequest::Attach(_) => "attach",
            CachedRequest::PortForward(_) => "portforward",
        }
    }
}

/// The cache is full.
#[derive(Debug, thiserror::Error)]
#[error("maximum number of in-flight streaming requests ({0}) exceeded")]
pub struct CacheFull(pub usize);

/// Pending streaming requests by token.
pub struct RequestCache {
    ttl: Duration,
    max_in_flight: usize,
    entries: Mutex<HashMap<String, (Instant, CachedRequest)>>,
}

impl RequestCache {
    pub fn new(ttl: Duration, max_in_flight: usize) -> Self {
        Self {
            ttl,
            max_in_flight,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Stores `req` and returns its fresh token (128 random bits, URL-safe base64).
    pub fn insert(&self, req: CachedRequest) -> Result<String, CacheFull> {
        let mut entries = self.entries.lock();
        let now = Instant::now();
        entries.retain(|_, (expires, _)| *expires > now);
        if entries.len() >= self.max_in_flight {
            return Err(CacheFull(self.max_in_flight));
        }
        loop {
            let token =
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>());
            if !entries.contains_key(&token) {
                entries.insert(token.clone(), (now + self.ttl, req));
                return Ok(token);
            }
        }
    }

    /// Takes the request stored under `token`: `None` when unknown, already used or expired.
    pub fn consume(&self, token: &str) -> Option<CachedRequest> {
        let mut entries = self.entries.lock();
        let (expires, req) = entries.remove(token)?;
        (expires > Instant::now()).then_some(req)
    }

    /// Pending (possibly expired) tokens.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec() -> CachedRequest {
        CachedRequest::Exec(cri::ExecRequest {
            container_id: "c".into(),
            ..Default::default()
        })
    }

    #[test]
    fn a_token_works_once() {
        let cache = RequestCache::new(Duration::from_secs(60), 10);
        let t = cache.insert(exec()).expect("insert");
        assert!(t.len() >= 20);
        assert!(matches!(cache.consume(&t), Some(CachedRequest::Exec(_))));
        assert!(cache.consume(&t).is_none());
        assert!(cache.consume("nope").is_none());
    }

    #[test]
    fn an_expired_token_is_refused() {
        let cache = RequestCache::new(Duration::ZERO, 10);
        let t = cache.insert(exec()).expect("insert");
        assert!(cache.consume(&t).is_none());
    }

    #[test]
    fn the_cache_is_bounded_and_tokens_differ() {
        let cache = RequestCache::new(Duration::from_secs(60), 2);
        let a = cache.insert(exec()).expect("a");
        let b = cache.insert(exec()).expect("b");
        assert_ne!(a, b);
        assert!(cache.insert(exec()).is_err());
        cache.consume(&a);
        assert!(cache.insert(exec()).is_ok());
    }
}
