//! Authorization (upstream `authorizerfactory`: `AlwaysAllow`, and the delegating authorizer,
//! which is the SubjectAccessReview webhook of `k8s.io/apiserver/plugin/pkg/authorizer/webhook`
//! with its response cache): [`CachedAuthorizer`] keeps an allowed answer for the authorized
//! TTL and any other for the unauthorized TTL, keyed by what the review would ask (the user,
//! uid, groups, extra and the resource attributes — not the path); errors are not kept.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::cache::{DEFAULT_CAPACITY, ExpiringCache};
use super::{Attributes, AuthError};

/// An authorizer's answer (upstream `authorizer.Decision` with its reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny(String),
    NoOpinion(String),
}

/// May the request described by the attributes proceed?
#[async_trait]
pub trait Authorizer: Send + Sync {
    async fn authorize(&self, attrs: &Attributes) -> Result<Decision, AuthError>;
}

/// `--authorization-mode=AlwaysAllow`.
pub struct AlwaysAllow;

#[async_trait]
impl Authorizer for AlwaysAllow {
    async fn authorize(&self, _: &Attributes) -> Result<Decision, AuthError> {
        Ok(Decision::Allow)
    }
}

/// What a SubjectAccessReview of `attrs` asks: the cache key.
fn review_key(a: &Attributes) -> String {
    serde_json::json!([
        a.user.name,
        a.user.uid,
        a.user.groups,
        a.user.extra,
        a.namespace,
        a.verb,
        a.api_group,
        a.api_version,
        a.resource,
        a.subresource,
        a.name
    ])
    .to_string()
}

/// An authorizer whose answers are kept (the webhook authorizer's `responseCache`).
pub struct CachedAuthorizer {
    inner: Arc<dyn Authorizer>,
    authorized_ttl: Duration,
    unauthorized_ttl: Duration,
    cache: ExpiringCache<String, Decision>,
}

impl CachedAuthorizer {
    pub fn new(
        inner: Arc<dyn Authorizer>,
        authorized_ttl: Duration,
        unauthorized_ttl: Duration,
    ) -> Self {
        CachedAuthorizer {
            inner,
            authorized_ttl,
            unauthorized_ttl,
            cache: ExpiringCache::new(DEFAULT_CAPACITY),
        }
    }
}

#[async_trait]
impl Authorizer for CachedAuthorizer {
    async fn authorize(&self, attrs: &Attributes) -> Result<Decision, AuthError> {
        let key = review_key(attrs);
        if let Some(d) = self.cache.get(&key) {
            return Ok(d);
        }
        let d = self.inner.authorize(attrs).await?;
        let ttl = if d == Decision::Allow {
            self.authorized_ttl
        } else {
            self.unauthorized_ttl
        };
        self.cache.insert(key, d.clone(), ttl);
        Ok(d)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::server::auth::authn::tests::user;
    use crate::server::auth::request_attributes;
    use parking_lot::Mutex;

    /// Allows the (user, verb, subresource) rules it holds, counting its calls.
    #[derive(Default)]
    pub(crate) struct FakeSar {
        pub allow: Vec<(&'static str, &'static str, &'static str)>,
        pub calls: Mutex<usize>,
        pub fail: bool,
    }

    #[async_trait]
    impl Authorizer for FakeSar {
        async fn authorize(&self, a: &Attributes) -> Result<Decision, AuthError> {
            *self.calls.lock() += 1;
            if self.fail {
                return Err(AuthError::Webhook {
                    review: "SubjectAccessReview",
                    reason: "unreachable".into(),
                });
            }
            let ok = self
                .allow
                .iter()
                .any(|(u, v, s)| *u == a.user.name && *v == a.verb && *s == a.subresource);
            Ok(if ok {
                Decision::Allow
            } else {
                Decision::NoOpinion(String::new())
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn allowed_and_denied_answers_expire_after_their_own_ttls() {
        let inner = Arc::new(FakeSar {
            allow: vec![("alice", "get", "stats")],
            ..Default::default()
        });
        let c = CachedAuthorizer::new(
            inner.clone(),
            Duration::from_secs(300),
            Duration::from_secs(30),
        );
        let alice = user("alice", &[]);
        let stats = request_attributes(&alice, "GET", "/stats/summary", "n");
        let stats_too = request_attributes(&alice, "GET", "/stats/", "n");
        let pods = request_attributes(&alice, "GET", "/pods", "n");
        for _ in 0..3 {
            assert_eq!(c.authorize(&stats).await.unwrap(), Decision::Allow);
            assert_eq!(
                c.authorize(&stats_too).await.unwrap(),
                Decision::Allow,
                "same review, another path"
            );
            assert!(matches!(
                c.authorize(&pods).await.unwrap(),
                Decision::NoOpinion(_)
            ));
        }
        assert_eq!(*inner.calls.lock(), 2, "one review per question");
        tokio::time::advance(Duration::from_secs(30)).await;
        c.authorize(&stats).await.unwrap();
        c.authorize(&pods).await.unwrap();
        assert_eq!(
            *inner.calls.lock(),
            3,
            "the denial expired, the allowance not"
        );
        tokio::time::advance(Duration::from_secs(270)).await;
        c.authorize(&stats).await.unwrap();
        assert_eq!(
            *inner.calls.lock(),
            4,
            "the allowance expired after its TTL"
        );
        // Another user, another question.
        let bob = request_attributes(&user("bob", &[]), "GET", "/stats/summary", "n");
        assert!(matches!(
            c.authorize(&bob).await.unwrap(),
            Decision::NoOpinion(_)
        ));
        assert_eq!(*inner.calls.lock(), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn errors_are_not_cached() {
        let inner = Arc::new(FakeSar {
            fail: true,
            ..Default::default()
        });
        let c = CachedAuthorizer::new(
            inner.clone(),
            Duration::from_secs(300),
            Duration::from_secs(30),
        );
        let a = request_attributes(&user("alice", &[]), "GET", "/pods", "n");
        assert!(c.authorize(&a).await.is_err());
        assert!(c.authorize(&a).await.is_err());
        assert_eq!(*inner.calls.lock(), 2);
    }

    #[tokio::test]
    async fn always_allow_allows_anyone() {
        let a = request_attributes(&user("system:anonymous", &[]), "POST", "/exec/a/b/c", "n");
        assert_eq!(AlwaysAllow.authorize(&a).await.unwrap(), Decision::Allow);
    }
}
