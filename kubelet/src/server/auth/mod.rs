//! Authentication and authorization of the secure port (upstream `pkg/kubelet/server/auth.go`,
//! `cmd/kubelet/app/auth.go` `BuildAuth`, and the `k8s.io/apiserver` pieces it assembles):
//! - [`authn`]: who is asking — a client certificate of `--client-ca-file` (its CN and O), a
//!   bearer token verified by a `TokenReview` (`--authentication-token-webhook`, results kept
//!   `--authentication-token-webhook-cache-ttl`), else `system:anonymous` when
//!   `--anonymous-auth`, else nobody (401);
//! - [`authz`]: may they — `AlwaysAllow`, or a `SubjectAccessReview` on `nodes/<subresource>`
//!   of this node (`--authorization-mode=Webhook`, allowed answers kept
//!   `--authorization-webhook-cache-authorized-ttl`, denied ones
//!   `--authorization-webhook-cache-unauthorized-ttl`);
//! - [`request_attributes`]: what a request to the kubelet API counts as (upstream
//!   `GetRequestAttributes`);
//! - [`webhook`]: the two reviews posted with the kubelet's own API client;
//! - [`cache`]: the expiring cache both use.
//!
//! The HTTP layer holds an [`Auth`] of two trait objects, so tests use fakes.

pub mod authn;
pub mod authz;
pub mod cache;
pub mod webhook;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub use authn::{Authenticator, Credentials, DelegatingAuthenticator, TokenAuthenticator};
pub use authz::{AlwaysAllow, Authorizer, CachedAuthorizer, Decision};

/// The authenticated user (upstream `user.Info`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Serialize)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Upstream `user.Anonymous`.
pub const ANONYMOUS: &str = "system:anonymous";
/// Upstream `user.AllUnauthenticated`.
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
/// Upstream `user.AllAuthenticated`.
pub const ALL_AUTHENTICATED: &str = "system:authenticated";

impl UserInfo {
    /// Upstream's anonymous authenticator's user.
    pub fn anonymous() -> UserInfo {
        UserInfo {
            name: ANONYMOUS.to_string(),
            groups: vec![ALL_UNAUTHENTICATED.to_string()],
            ..Default::default()
        }
    }
}

/// What a request asks for, in the API's terms (upstream `authorizer.AttributesRecord` of a
/// resource request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    pub user: UserInfo,
    pub verb: String,
    pub namespace: String,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    pub path: String,
}

/// Is `subpath` `path` or below it (upstream `isSubpath`; a trailing `/` of `path` ignored)?
fn is_subpath(subpath: &str, path: &str) -> bool {
    let path = path.trim_end_matches('/');
    subpath == path
        || (subpath.starts_with(path) && subpath.as_bytes().get(path.len()) == Some(&b'/'))
}

/// The attributes of a request to the kubelet API (upstream
/// `nodeAuthorizerAttributesGetter.GetRequestAttributes`): the `nodes` resource named after this
/// node, the verb from the HTTP method (an unknown method has none), and the subresource from
/// the path — `stats`, `metrics`, `log` or `spec` for those trees, `proxy` for everything else.
pub fn request_attributes(user: &UserInfo, method: &str, path: &str, node: &str) -> Attributes {
    let verb = match method {
        "POST" => "create",
        "GET" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    };
    let subresource = if is_subpath(path, "/stats/") {
        "stats"
    } else if is_subpath(path, "/metrics") {
        "metrics"
    } else if is_subpath(path, "/logs/") {
        "log"
    } else if is_subpath(path, "/spec/") {
        "spec"
    } else {
        "proxy"
    };
    Attributes {
        user: user.clone(),
        verb: verb.to_string(),
        namespace: String::new(),
        api_group: String::new(),
        api_version: "v1".to_string(),
        resource: "nodes".to_string(),
        subresource: subresource.to_string(),
        name: node.to_string(),
        path: path.to_string(),
    }
}

/// Errors of authentication and authorization.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuthError {
    /// A bearer token the TokenReview did not accept (upstream `invalidToken`).
    #[error("invalid bearer token")]
    InvalidToken,
    /// A malformed WebSocket bearer-token subprotocol.
    #[error("{0}")]
    WebSocketToken(String),
    /// The review could not be made or answered an error.
    #[error("{review}: {reason}")]
    Webhook {
        review: &'static str,
        reason: String,
    },
    /// A webhook mode without an API client (upstream `BuildAuth`).
    #[error(
        "no client provided, cannot use webhook {0} (it needs the API server: give --kubeconfig, or turn it off with {1})"
    )]
    NoClient(&'static str, &'static str),
}

/// `--authorization-mode` / `authorization.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationMode {
    AlwaysAllow,
    Webhook,
}

impl std::str::FromStr for AuthorizationMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "AlwaysAllow" => Ok(AuthorizationMode::AlwaysAllow),
            "Webhook" => Ok(AuthorizationMode::Webhook),
            "" => Err("no authorization mode specified".to_string()),
            other => Err(format!("unknown authorization mode {other}")),
        }
    }
}

/// The webhook settings of the secure port (flags and config fields of the same names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    /// `--authentication-token-webhook` / `authentication.webhook.enabled`.
    pub token_webhook: bool,
    /// `--authentication-token-webhook-cache-ttl` / `authentication.webhook.cacheTTL`.
    pub token_cache_ttl: Duration,
    /// `--authorization-mode` / `authorization.mode`.
    pub mode: AuthorizationMode,
    /// `--authorization-webhook-cache-authorized-ttl`.
    pub authorized_ttl: Duration,
    /// `--authorization-webhook-cache-unauthorized-ttl`.
    pub unauthorized_ttl: Duration,
}

impl Default for AuthConfig {
    /// The flags' defaults (upstream's legacy defaults: no token webhook, AlwaysAllow).
    fn default() -> Self {
        AuthConfig {
            token_webhook: false,
            token_cache_ttl: Duration::from_secs(120),
            mode: AuthorizationMode::AlwaysAllow,
            authorized_ttl: Duration::from_secs(300),
            unauthorized_ttl: Duration::from_secs(30),
        }
    }
}

/// What the secure port checks each request with.
#[derive(Clone)]
pub struct Auth {
    pub authenticator: Arc<dyn Authenticator>,
    pub authorizer: Arc<dyn Authorizer>,
    /// The node the attributes name.
    pub node_name: String,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

/// Upstream `BuildAuth`: the authenticator (x509 when a client CA is configured, the token
/// webhook, anonymous) and the authorizer of `config`; a webhook without `client` is an error.
pub fn build(
    config: &AuthConfig,
    x509: bool,
    anonymous: bool,
    client: Option<kube::Client>,
    node_name: &str,
) -> Result<Auth, AuthError> {
    let token: Option<Arc<dyn TokenAuthenticator>> = if config.token_webhook {
        let Some(c) = client.clone() else {
            return Err(AuthError::NoClient(
                "authentication",
                "--authentication-token-webhook=false",
            ));
        };
        let review: Arc<dyn TokenAuthenticator> = Arc::new(webhook::TokenReviewWebhook::new(c));
        Some(if config.token_cache_ttl > Duration::ZERO {
            Arc::new(authn::CachedTokenAuthenticator::new(
                review,
                config.token_cache_ttl,
                config.token_cache_ttl,
            ))
        } else {
            review
        })
    } else {
        None
    };
    let authorizer: Arc<dyn Authorizer> = match config.mode {
        AuthorizationMode::AlwaysAllow => Arc::new(AlwaysAllow),
        AuthorizationMode::Webhook => {
            let Some(c) = client else {
                return Err(AuthError::NoClient(
                    "authorization",
                    "--authorization-mode=AlwaysAllow",
                ));
            };
            Arc::new(CachedAuthorizer::new(
                Arc::new(webhook::SubjectAccessReviewWebhook::new(c)),
                config.authorized_ttl,
                config.unauthorized_ttl,
            ))
        }
    };
    Ok(Auth {
        authenticator: Arc::new(DelegatingAuthenticator {
            x509,
            token,
            anonymous,
        }),
        authorizer,
        node_name: node_name.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_follow_upstream_get_request_attributes() {
        let u = UserInfo {
            name: "alice".into(),
            ..Default::default()
        };
        // (method, path, verb, subresource)
        let table = [
            ("GET", "/stats/summary", "get", "stats"),
            ("GET", "/stats", "get", "stats"),
            ("GET", "/stats/", "get", "stats"),
            ("GET", "/statsfoo", "get", "proxy"),
            ("GET", "/metrics", "get", "metrics"),
            ("GET", "/metrics/cadvisor", "get", "metrics"),
            ("GET", "/metrics/resource", "get", "metrics"),
            ("GET", "/metricsX", "get", "proxy"),
            ("GET", "/logs/", "get", "log"),
            ("GET", "/logs/syslog", "get", "log"),
            ("GET", "/logs", "get", "log"),
            ("GET", "/spec/", "get", "spec"),
            ("GET", "/pods", "get", "proxy"),
            ("GET", "/runningpods/", "get", "proxy"),
            ("GET", "/healthz", "get", "proxy"),
            ("GET", "/containerLogs/default/web/main", "get", "proxy"),
            ("POST", "/exec/default/web/main", "create", "proxy"),
            ("GET", "/exec/default/web/main", "get", "proxy"),
            ("POST", "/attach/default/web/main", "create", "proxy"),
            ("POST", "/portForward/default/web", "create", "proxy"),
            ("POST", "/run/default/web/main", "create", "proxy"),
            ("PUT", "/pods", "update", "proxy"),
            ("PATCH", "/pods", "patch", "proxy"),
            ("DELETE", "/pods", "delete", "proxy"),
            ("HEAD", "/pods", "", "proxy"),
            ("OPTIONS", "/stats/summary", "", "stats"),
        ];
        for (method, path, verb, sub) in table {
            let a = request_attributes(&u, method, path, "node-a");
            assert_eq!(
                (a.verb.as_str(), a.subresource.as_str()),
                (verb, sub),
                "{method} {path}"
            );
            assert_eq!(a.resource, "nodes");
            assert_eq!(a.name, "node-a");
            assert_eq!(a.api_version, "v1");
            assert_eq!(a.api_group, "");
            assert_eq!(a.namespace, "");
            assert_eq!(a.path, path);
            assert_eq!(a.user.name, "alice");
        }
    }

    #[test]
    fn modes_parse_like_upstream() {
        assert_eq!("Webhook".parse(), Ok(AuthorizationMode::Webhook));
        assert_eq!("AlwaysAllow".parse(), Ok(AuthorizationMode::AlwaysAllow));
        assert_eq!(
            "".parse::<AuthorizationMode>(),
            Err("no authorization mode specified".into())
        );
        assert_eq!(
            "RBAC".parse::<AuthorizationMode>(),
            Err("unknown authorization mode RBAC".into())
        );
    }

    #[test]
    fn webhooks_without_an_api_client_are_refused() {
        let mut c = AuthConfig {
            token_webhook: true,
            ..Default::default()
        };
        let e = build(&c, false, false, None, "n").expect_err("token webhook");
        assert!(
            e.to_string()
                .starts_with("no client provided, cannot use webhook authentication"),
            "{e}"
        );
        c.token_webhook = false;
        c.mode = AuthorizationMode::Webhook;
        let e = build(&c, false, false, None, "n").expect_err("authz webhook");
        assert!(
            e.to_string()
                .starts_with("no client provided, cannot use webhook authorization"),
            "{e}"
        );
        c.mode = AuthorizationMode::AlwaysAllow;
        assert!(build(&c, true, true, None, "n").is_ok());
    }
}
