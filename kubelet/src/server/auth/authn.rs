//! Authentication (upstream `authenticatorfactory.DelegatingAuthenticatorConfig` as the
//! kubelet's `BuildAuthn` assembles it): a union of the x509 authenticator (the verified client
//! certificate's CN as the user, its O as groups; the TLS layer verified it against
//! `--client-ca-file`) and the bearer-token authenticator (a [`TokenAuthenticator`], the
//! TokenReview webhook behind a cache), every authenticated user getting
//! `system:authenticated`; the same tokens are also taken from a WebSocket request's
//! `base64url.bearer.authorization.k8s.io.<token>` subprotocol (upstream
//! `websocket.NewProtocolAuthenticator`, for browsers that cannot set headers); then, when
//! `--anonymous-auth`, `system:anonymous` — but only when no authenticator failed (upstream
//! `unionauth.NewFailOnError`): a token the review rejects is a 401, not anonymous.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sha2::Digest;

use super::cache::{DEFAULT_CAPACITY, ExpiringCache};
use super::{ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS, AuthError, UserInfo};

/// The WebSocket subprotocol prefix carrying a bearer token (upstream `bearerProtocolPrefix`).
pub const BEARER_PROTOCOL_PREFIX: &str = "base64url.bearer.authorization.k8s.io.";

/// What a request presents.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// The user of the verified client certificate, when one was presented and names a user.
    pub client_cert: Option<UserInfo>,
    /// The `Authorization` header.
    pub authorization: Option<String>,
    /// The `Sec-WebSocket-Protocol` values of a WebSocket upgrade request (empty otherwise).
    pub websocket_protocols: Vec<String>,
}

impl Credentials {
    /// The credentials of a request: its connection's certificate user and its headers.
    pub fn new(client_cert: Option<UserInfo>, headers: &hyper::HeaderMap) -> Credentials {
        let upgrade_websocket = headers
            .get(hyper::header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
        let websocket_protocols = if upgrade_websocket {
            headers
                .get_all(hyper::header::SEC_WEBSOCKET_PROTOCOL)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_string)
                .collect()
        } else {
            vec![]
        };
        Credentials {
            client_cert,
            authorization: headers
                .get(hyper::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            websocket_protocols,
        }
    }

    /// The bearer token of a WebSocket subprotocol (upstream `ProtocolAuthenticator`): none
    /// without one; an error for two, a bad encoding, or a token that is the only protocol
    /// (one must be left to answer with).
    pub fn websocket_token(&self) -> Result<Option<String>, String> {
        use base64::Engine as _;
        let mut token = None;
        let mut others = 0;
        for p in self
            .websocket_protocols
            .iter()
            .flat_map(|h| h.split(','))
            .map(str::trim)
        {
            let Some(encoded) = p.strip_prefix(BEARER_PROTOCOL_PREFIX) else {
                others += 1;
                continue;
            };
            if token.is_some() {
                return Err("multiple base64.bearer.authorization tokens specified".into());
            }
            let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(encoded)
                .map_err(|_| "invalid base64.bearer.authorization token encoding".to_string())?;
            let t = String::from_utf8(raw)
                .map_err(|_| "invalid base64.bearer.authorization token".to_string())?;
            token = Some(t);
        }
        match token {
            Some(t) if !t.is_empty() && others == 0 => Err("missing additional subprotocol".into()),
            Some(t) if !t.is_empty() => Ok(Some(t)),
            _ => Ok(None),
        }
    }

    /// The bearer token of the `Authorization` header (upstream `bearertoken`): `Bearer <token>`,
    /// the scheme in any case; an empty token is none.
    pub fn bearer_token(&self) -> Option<&str> {
        let auth = self.authorization.as_deref()?.trim();
        let mut parts = auth.splitn(3, ' ');
        let scheme = parts.next()?;
        let token = parts.next()?;
        (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
    }
}

/// Who a request is from: `Ok(None)` is nobody (401).
#[async_trait]
pub trait Authenticator: Send + Sync {
    async fn authenticate(&self, creds: &Credentials) -> Result<Option<UserInfo>, AuthError>;
}

/// Who a bearer token belongs to: `Ok(None)` when it is nobody's.
#[async_trait]
pub trait TokenAuthenticator: Send + Sync {
    async fn authenticate_token(&self, token: &str) -> Result<Option<UserInfo>, AuthError>;
}

/// The user of a client certificate (upstream `x509.CommonNameUserConversion`): its subject's
/// CN, with its O values as groups; none without a CN or when the certificate cannot be read.
pub fn user_from_certificate(der: &[u8]) -> Option<UserInfo> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let cn = subject
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())?
        .to_string();
    if cn.is_empty() {
        return None;
    }
    let groups = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok())
        .map(str::to_string)
        .collect();
    Some(UserInfo {
        name: cn,
        groups,
        ..Default::default()
    })
}

/// Upstream `group.AuthenticatedGroupAdder`: `system:authenticated` added to an authenticated
/// user's groups, unless anonymous or already in one of the two all-users groups.
fn with_authenticated_group(mut u: UserInfo) -> UserInfo {
    let has_all = u
        .groups
        .iter()
        .any(|g| g == ALL_AUTHENTICATED || g == ALL_UNAUTHENTICATED);
    if u.name != ANONYMOUS && !has_all {
        u.groups.push(ALL_AUTHENTICATED.to_string());
    }
    u
}

/// The kubelet's authenticator.
pub struct DelegatingAuthenticator {
    /// Client certificates are verified (`--client-ca-file` given).
    pub x509: bool,
    /// Bearer tokens (`--authentication-token-webhook`).
    pub token: Option<Arc<dyn TokenAuthenticator>>,
    /// `--anonymous-auth`.
    pub anonymous: bool,
}

#[async_trait]
impl Authenticator for DelegatingAuthenticator {
    async fn authenticate(&self, creds: &Credentials) -> Result<Option<UserInfo>, AuthError> {
        if self.x509
            && let Some(u) = &creds.client_cert
        {
            return Ok(Some(with_authenticated_group(u.clone())));
        }
        // Upstream's union: the first authenticator that knows the user wins; when none does,
        // any error is the answer (a 401, even with anonymous allowed).
        let mut error = None;
        if let Some(auth) = &self.token {
            let header = creds.bearer_token().map(|t| Ok(Some(t.to_string())));
            for token in [header, Some(creds.websocket_token())]
                .into_iter()
                .flatten()
            {
                let token = match token {
                    Ok(Some(t)) => t,
                    Ok(None) => continue,
                    Err(reason) => {
                        error = Some(AuthError::WebSocketToken(reason));
                        continue;
                    }
                };
                match auth.authenticate_token(&token).await {
                    Ok(Some(u)) => return Ok(Some(with_authenticated_group(u))),
                    Ok(None) => error = Some(AuthError::InvalidToken),
                    Err(e) => error = Some(e),
                }
            }
        }
        match error {
            Some(e) => Err(e),
            None => Ok(self.anonymous.then(UserInfo::anonymous)),
        }
    }
}

/// Upstream `token/cache.cachedTokenAuthenticator`: answers kept by the token's SHA-256, a
/// user for `success_ttl`, "nobody's" for `failure_ttl`; errors are not kept.
pub struct CachedTokenAuthenticator {
    inner: Arc<dyn TokenAuthenticator>,
    success_ttl: Duration,
    failure_ttl: Duration,
    cache: ExpiringCache<[u8; 32], Option<UserInfo>>,
}

impl CachedTokenAuthenticator {
    pub fn new(
        inner: Arc<dyn TokenAuthenticator>,
        success_ttl: Duration,
        failure_ttl: Duration,
    ) -> Self {
        CachedTokenAuthenticator {
            inner,
            success_ttl,
            failure_ttl,
            cache: ExpiringCache::new(DEFAULT_CAPACITY),
        }
    }
}

#[async_trait]
impl TokenAuthenticator for CachedTokenAuthenticator {
    async fn authenticate_token(&self, token: &str) -> Result<Option<UserInfo>, AuthError> {
        let key: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
        if let Some(hit) = self.cache.get(&key) {
            return Ok(hit);
        }
        let answer = self.inner.authenticate_token(token).await?;
        let ttl = if answer.is_some() {
            self.success_ttl
        } else {
            self.failure_ttl
        };
        self.cache.insert(key, answer.clone(), ttl);
        Ok(answer)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use parking_lot::Mutex;

    /// A token authenticator of a fixed token→user map, counting its calls.
    #[derive(Default)]
    pub(crate) struct FakeTokens {
        pub users: Vec<(String, UserInfo)>,
        pub calls: Mutex<usize>,
        pub fail: bool,
    }

    #[async_trait]
    impl TokenAuthenticator for FakeTokens {
        async fn authenticate_token(&self, token: &str) -> Result<Option<UserInfo>, AuthError> {
            *self.calls.lock() += 1;
            if self.fail {
                return Err(AuthError::Webhook {
                    review: "TokenReview",
                    reason: "unreachable".into(),
                });
            }
            Ok(self
                .users
                .iter()
                .find(|(t, _)| t == token)
                .map(|(_, u)| u.clone()))
        }
    }

    pub(crate) fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        }
    }

    fn creds(cert: Option<UserInfo>, auth: Option<&str>) -> Credentials {
        Credentials {
            client_cert: cert,
            authorization: auth.map(str::to_string),
            websocket_protocols: vec![],
        }
    }

    fn ws(protocols: &str) -> Credentials {
        let mut h = hyper::HeaderMap::new();
        h.insert(hyper::header::UPGRADE, "websocket".parse().unwrap());
        h.insert(
            hyper::header::SEC_WEBSOCKET_PROTOCOL,
            protocols.parse().unwrap(),
        );
        Credentials::new(None, &h)
    }

    #[test]
    fn websocket_tokens_are_parsed_like_upstream() {
        // "good" in base64url without padding: Z29vZA
        let p = BEARER_PROTOCOL_PREFIX;
        assert_eq!(
            ws(&format!("v4.channel.k8s.io, {p}Z29vZA")).websocket_token(),
            Ok(Some("good".into()))
        );
        assert_eq!(ws("v4.channel.k8s.io").websocket_token(), Ok(None));
        assert_eq!(
            ws(&format!("{p}Z29vZA")).websocket_token(),
            Err("missing additional subprotocol".into())
        );
        assert_eq!(
            ws(&format!("x, {p}Z29vZA, {p}Z29vZA")).websocket_token(),
            Err("multiple base64.bearer.authorization tokens specified".into())
        );
        assert_eq!(
            ws(&format!("x, {p}***")).websocket_token(),
            Err("invalid base64.bearer.authorization token encoding".into())
        );
        // Not a WebSocket upgrade: the header is not looked at.
        let mut h = hyper::HeaderMap::new();
        h.insert(
            hyper::header::SEC_WEBSOCKET_PROTOCOL,
            format!("x, {p}Z29vZA").parse().unwrap(),
        );
        assert_eq!(Credentials::new(None, &h).websocket_token(), Ok(None));
    }

    #[tokio::test]
    async fn a_websocket_token_authenticates_and_a_bad_one_is_an_error() {
        let tokens = Arc::new(FakeTokens {
            users: vec![("good".into(), user("alice", &[]))],
            ..Default::default()
        });
        let a = DelegatingAuthenticator {
            x509: false,
            token: Some(tokens),
            anonymous: true,
        };
        let p = BEARER_PROTOCOL_PREFIX;
        let u = a
            .authenticate(&ws(&format!("v4.channel.k8s.io, {p}Z29vZA")))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(u.name, "alice");
        // "bad": YmFk
        assert!(matches!(
            a.authenticate(&ws(&format!("v4.channel.k8s.io, {p}YmFk")))
                .await,
            Err(AuthError::InvalidToken)
        ));
        assert!(matches!(
            a.authenticate(&ws(&format!("{p}Z29vZA"))).await,
            Err(AuthError::WebSocketToken(_))
        ));
        // A bad header token, a good protocol token: the union takes the good one.
        let mut c = ws(&format!("v4.channel.k8s.io, {p}Z29vZA"));
        c.authorization = Some("Bearer bad".into());
        assert_eq!(a.authenticate(&c).await.unwrap().unwrap().name, "alice");
    }

    #[test]
    fn bearer_tokens_are_parsed_like_upstream() {
        for (header, want) in [
            ("Bearer abc", Some("abc")),
            ("bearer abc", Some("abc")),
            ("  Bearer abc  ", Some("abc")),
            ("Bearer abc extra", Some("abc")),
            ("Bearer  abc", None),
            ("Bearer", None),
            ("Basic abc", None),
            ("", None),
        ] {
            assert_eq!(creds(None, Some(header)).bearer_token(), want, "{header:?}");
        }
    }

    #[tokio::test]
    async fn certificate_then_token_then_anonymous() {
        let tokens = Arc::new(FakeTokens {
            users: vec![(
                "good".into(),
                user("system:serviceaccount:ns:sa", &["system:serviceaccounts"]),
            )],
            ..Default::default()
        });
        let a = DelegatingAuthenticator {
            x509: true,
            token: Some(tokens.clone()),
            anonymous: true,
        };
        let cert = user("admin", &["system:masters"]);
        // A certificate wins; the token is not looked at.
        let u = a
            .authenticate(&creds(Some(cert.clone()), Some("Bearer good")))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(u, user("admin", &["system:masters", ALL_AUTHENTICATED]));
        assert_eq!(*tokens.calls.lock(), 0);
        let u = a
            .authenticate(&creds(None, Some("Bearer good")))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(u.name, "system:serviceaccount:ns:sa");
        assert_eq!(u.groups, ["system:serviceaccounts", ALL_AUTHENTICATED]);
        // A token nobody owns is an error, not anonymous.
        let e = a
            .authenticate(&creds(None, Some("Bearer bad")))
            .await
            .unwrap_err();
        assert!(matches!(e, AuthError::InvalidToken));
        // Nothing presented: anonymous.
        let u = a.authenticate(&creds(None, None)).await.unwrap().unwrap();
        assert_eq!(u, user(ANONYMOUS, &[ALL_UNAUTHENTICATED]));
        // Without anonymous: nobody.
        let a = DelegatingAuthenticator {
            anonymous: false,
            ..a
        };
        assert_eq!(a.authenticate(&creds(None, None)).await.unwrap(), None);
        // Without the token webhook a bearer token is not looked at.
        let a = DelegatingAuthenticator {
            token: None,
            x509: false,
            anonymous: false,
        };
        assert_eq!(
            a.authenticate(&creds(Some(cert), Some("Bearer good")))
                .await
                .unwrap(),
            None,
            "no x509 without a client CA, no tokens without the webhook"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn token_answers_are_cached_for_their_ttls_and_errors_not_at_all() {
        let inner = Arc::new(FakeTokens {
            users: vec![("good".into(), user("alice", &[]))],
            ..Default::default()
        });
        let c = CachedTokenAuthenticator::new(
            inner.clone(),
            Duration::from_secs(120),
            Duration::from_secs(10),
        );
        for _ in 0..3 {
            assert_eq!(
                c.authenticate_token("good").await.unwrap(),
                Some(user("alice", &[]))
            );
            assert_eq!(c.authenticate_token("bad").await.unwrap(), None);
        }
        assert_eq!(*inner.calls.lock(), 2, "one review per token");
        tokio::time::advance(Duration::from_secs(10)).await;
        c.authenticate_token("good").await.unwrap();
        c.authenticate_token("bad").await.unwrap();
        assert_eq!(
            *inner.calls.lock(),
            3,
            "the failure expired, the success not"
        );
        tokio::time::advance(Duration::from_secs(110)).await;
        c.authenticate_token("good").await.unwrap();
        assert_eq!(*inner.calls.lock(), 4, "the success expired after its TTL");

        let failing = Arc::new(FakeTokens {
            fail: true,
            ..Default::default()
        });
        let c = CachedTokenAuthenticator::new(
            failing.clone(),
            Duration::from_secs(120),
            Duration::from_secs(120),
        );
        assert!(c.authenticate_token("t").await.is_err());
        assert!(c.authenticate_token("t").await.is_err());
        assert_eq!(*failing.calls.lock(), 2, "errors are asked again");
    }

    #[test]
    fn a_certificate_names_its_cn_and_organizations() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:node-a");
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        let cert = p.self_signed(&key).unwrap();
        assert_eq!(
            user_from_certificate(cert.der()),
            Some(user("system:node:node-a", &["system:nodes"]))
        );
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        let cert = p.self_signed(&key).unwrap();
        assert_eq!(user_from_certificate(cert.der()), None, "no CN, no user");
    }
}
