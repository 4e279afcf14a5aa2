//! The two reviews, posted to the API server with the kubelet's own client (upstream
//! `plugin/pkg/authenticator/token/webhook` and `plugin/pkg/authorizer/webhook` built from a
//! client, as `BuildAuth` does): a `TokenReview` (authentication.k8s.io/v1) of a bearer token,
//! a `SubjectAccessReview` (authorization.k8s.io/v1) of a request's attributes. A failed post
//! is retried like upstream's `DefaultAuthWebhookRetryBackoff` (5 tries, 500 ms growing
//! ×1.5) when the failure may pass (a transport error, 429 or 5xx); each try has 10 s.

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use super::authn::TokenAuthenticator;
use super::authz::{Authorizer, Decision};
use super::{Attributes, AuthError, UserInfo};

const TRIES: u32 = 5;
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const TRY_TIMEOUT: Duration = Duration::from_secs(10);

/// Might a retry succeed where `e` failed?
fn retriable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// Posts `obj` to `api`, retrying as upstream's webhooks do.
async fn create_with_retries<K>(api: &Api<K>, obj: &K, review: &'static str) -> Result<K, AuthError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let mut backoff = FIRST_BACKOFF;
    let mut attempt = 1;
    loop {
        let err = match tokio::time::timeout(TRY_TIMEOUT, api.create(&PostParams::default(), obj))
            .await
        {
            Ok(Ok(o)) => return Ok(o),
            Ok(Err(e)) if attempt < TRIES && retriable(&e) => e.to_string(),
            Ok(Err(e)) => {
                return Err(AuthError::Webhook {
                    review,
                    reason: e.to_string(),
                });
            }
            Err(_) if attempt < TRIES => "timed out".to_string(),
            Err(_) => {
                return Err(AuthError::Webhook {
                    review,
                    reason: format!("timed out after {TRY_TIMEOUT:?}"),
                });
            }
        };
        tracing::debug!(review, attempt, error = %err, "review failed, retrying");
        tokio::time::sleep(backoff).await;
        backoff = backoff.mul_f64(1.5);
        attempt += 1;
    }
}

/// Bearer tokens checked by TokenReviews (no audiences, like the kubelet's).
pub struct TokenReviewWebhook {
    api: Api<TokenReview>,
}

impl TokenReviewWebhook {
    pub fn new(client: kube::Client) -> Self {
        TokenReviewWebhook {
            api: Api::all(client),
        }
    }
}

/// The review of `token`.
pub fn token_review(token: &str) -> TokenReview {
    TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_string()),
            audiences: None,
        },
        ..Default::default()
    }
}

/// The user a TokenReview's answer names (`Ok(None)`: not authenticated; not authenticated
/// with an `error` is that error, as upstream's — the API server answers an unknown token so).
pub fn token_review_user(r: &TokenReview) -> Result<Option<UserInfo>, AuthError> {
    let Some(status) = &r.status else {
        return Ok(None);
    };
    if status.authenticated != Some(true) {
        return match status.error.as_deref().filter(|e| !e.is_empty()) {
            Some(e) => Err(AuthError::Webhook {
                review: "TokenReview",
                reason: e.to_string(),
            }),
            None => Ok(None),
        };
    }
    let u = status.user.clone().unwrap_or_default();
    Ok(Some(UserInfo {
        name: u.username.unwrap_or_default(),
        uid: u.uid.unwrap_or_default(),
        groups: u.groups.unwrap_or_default(),
        extra: u.extra.unwrap_or_default(),
    }))
}

#[async_trait]
impl TokenAuthenticator for TokenReviewWebhook {
    #[tracing::instrument(name = "token_review", skip_all)]
    async fn authenticate_token(&self, token: &str) -> Result<Option<UserInfo>, AuthError> {
        let answer = create_with_retries(&self.api, &token_review(token), "TokenReview").await?;
        let user = token_review_user(&answer)?;
        tracing::debug!(
            user = user.as_ref().map(|u| u.name.as_str()),
            "token reviewed"
        );
        Ok(user)
    }
}

/// Requests authorized by SubjectAccessReviews.
pub struct SubjectAccessReviewWebhook {
    api: Api<SubjectAccessReview>,
}

impl SubjectAccessReviewWebhook {
    pub fn new(client: kube::Client) -> Self {
        SubjectAccessReviewWebhook {
            api: Api::all(client),
        }
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// The review of `a` (upstream `WebhookAuthorizer.Authorize` of a resource request).
pub fn subject_access_review(a: &Attributes) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: non_empty(&a.user.name),
            uid: non_empty(&a.user.uid),
            groups: (!a.user.groups.is_empty()).then(|| a.user.groups.clone()),
            extra: (!a.user.extra.is_empty()).then(|| a.user.extra.clone()),
            resource_attributes: Some(ResourceAttributes {
                namespace: non_empty(&a.namespace),
                verb: non_empty(&a.verb),
                group: non_empty(&a.api_group),
                version: non_empty(&a.api_version),
                resource: non_empty(&a.resource),
                subresource: non_empty(&a.subresource),
                name: non_empty(&a.name),
                ..Default::default()
            }),
            non_resource_attributes: None,
        },
        ..Default::default()
    }
}

/// The decision of a SubjectAccessReview's answer (both allowed and denied is an error).
pub fn review_decision(r: &SubjectAccessReview) -> Result<Decision, AuthError> {
    let s = r.status.clone().unwrap_or_default();
    let reason = s.reason.unwrap_or_default();
    match (s.allowed, s.denied == Some(true)) {
        (true, true) => Err(AuthError::Webhook {
            review: "SubjectAccessReview",
            reason: "webhook subject access review returned both allow and deny response"
                .to_string(),
        }),
        (_, true) => Ok(Decision::Deny(reason)),
        (true, false) => Ok(Decision::Allow),
        (false, false) => Ok(Decision::NoOpinion(reason)),
    }
}

#[async_trait]
impl Authorizer for SubjectAccessReviewWebhook {
    #[tracing::instrument(name = "subject_access_review", skip_all, fields(user = %a.user.name, verb = %a.verb, subresource = %a.subresource))]
    async fn authorize(&self, a: &Attributes) -> Result<Decision, AuthError> {
        let answer =
            create_with_retries(&self.api, &subject_access_review(a), "SubjectAccessReview")
                .await?;
        let d = review_decision(&answer)?;
        tracing::debug!(decision = ?d, "access reviewed");
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::auth::request_attributes;

    #[test]
    fn the_review_carries_the_user_and_the_node_attributes() {
        let mut u = crate::server::auth::authn::tests::user("alice", &["devs"]);
        u.uid = "u-1".into();
        u.extra.insert("scopes".into(), vec!["a".into()]);
        let r = subject_access_review(&request_attributes(&u, "POST", "/exec/ns/p/c", "node-a"));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v["spec"],
            serde_json::json!({
                "user": "alice", "uid": "u-1", "groups": ["devs"], "extra": {"scopes": ["a"]},
                "resourceAttributes": {"verb": "create", "version": "v1", "resource": "nodes",
                                       "subresource": "proxy", "name": "node-a"}
            })
        );
        assert_eq!(v["kind"], "SubjectAccessReview");
        assert_eq!(v["apiVersion"], "authorization.k8s.io/v1");
    }

    #[test]
    fn answers_are_decoded_like_upstream() {
        let sar = |status: serde_json::Value| -> SubjectAccessReview {
            serde_json::from_value(serde_json::json!({"spec": {}, "status": status})).unwrap()
        };
        assert_eq!(
            review_decision(&sar(serde_json::json!({"allowed": true}))).unwrap(),
            Decision::Allow
        );
        assert_eq!(
            review_decision(&sar(serde_json::json!({"allowed": false, "reason": "no"}))).unwrap(),
            Decision::NoOpinion("no".into())
        );
        assert_eq!(
            review_decision(&sar(serde_json::json!({"allowed": false, "denied": true}))).unwrap(),
            Decision::Deny(String::new())
        );
        assert!(
            review_decision(&sar(serde_json::json!({"allowed": true, "denied": true}))).is_err()
        );

        let tr = |status: serde_json::Value| -> TokenReview {
            serde_json::from_value(serde_json::json!({"spec": {}, "status": status})).unwrap()
        };
        let u = token_review_user(&tr(serde_json::json!({"authenticated": true,
            "user": {"username": "system:serviceaccount:ns:sa", "uid": "9",
                     "groups": ["system:serviceaccounts", "system:authenticated"]}})))
        .unwrap()
        .unwrap();
        assert_eq!(u.name, "system:serviceaccount:ns:sa");
        assert_eq!(u.uid, "9");
        assert_eq!(u.groups.len(), 2);
        assert_eq!(
            token_review_user(&tr(serde_json::json!({"authenticated": false}))).unwrap(),
            None
        );
        assert!(token_review_user(&tr(serde_json::json!({"error": "boom"}))).is_err());
        let v = serde_json::to_value(token_review("t0k")).unwrap();
        assert_eq!(v["spec"], serde_json::json!({"token": "t0k"}));
        assert_eq!(v["apiVersion"], "authentication.k8s.io/v1");
    }
}
