//! The two review APIs a kubelet's webhooks post to, answered from rules a test sets
//! ([`Reviews`]): `TokenReview` (authentication.k8s.io/v1) from a token→user map — an unknown
//! token is answered like the real API server's, not authenticated with an `error` — and
//! `SubjectAccessReview` (authorization.k8s.io/v1) allowed when a rule names the user (or one of
//! its groups), the verb and the subresource of a `nodes` request, else not allowed with no
//! opinion (as RBAC answers). Every review received is kept, to count and inspect.

use std::collections::HashMap;

use serde_json::{Value, json};

/// A user a token stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewUser {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

/// One rule of the authorizer: `subject` (a user or group name) may `verb` on
/// `nodes/<subresource>`; `*` matches any verb or subresource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowRule {
    pub subject: String,
    pub verb: String,
    pub subresource: String,
}

/// The rules and what was asked.
#[derive(Debug, Default)]
pub struct Reviews {
    pub tokens: HashMap<String, ReviewUser>,
    pub rules: Vec<AllowRule>,
    /// The `spec` of every TokenReview received.
    pub token_reviews: Vec<Value>,
    /// The `spec` of every SubjectAccessReview received.
    pub access_reviews: Vec<Value>,
}

impl Reviews {
    /// The answer to a TokenReview `body` (an object of kind TokenReview).
    pub fn token_review(&mut self, body: &Value) -> Value {
        let spec = body.get("spec").cloned().unwrap_or(json!({}));
        self.token_reviews.push(spec.clone());
        let token = spec.get("token").and_then(Value::as_str).unwrap_or("");
        let status = match self.tokens.get(token) {
            Some(u) => {
                let mut groups = u.groups.clone();
                groups.push("system:authenticated".to_string());
                json!({"authenticated": true,
                       "user": {"username": u.name, "uid": u.uid, "groups": groups}})
            }
            None => json!({"user": {}, "error": "invalid bearer token"}),
        };
        json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
               "metadata": {"creationTimestamp": null}, "spec": spec, "status": status})
    }

    /// The answer to a SubjectAccessReview `body`.
    pub fn access_review(&mut self, body: &Value) -> Value {
        let spec = body.get("spec").cloned().unwrap_or(json!({}));
        self.access_reviews.push(spec.clone());
        let str_of = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
        let user = str_of(spec.get("user"));
        let groups: Vec<String> = spec
            .get("groups")
            .and_then(Value::as_array)
            .map(|g| {
                g.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        let attrs = spec.get("resourceAttributes");
        let field = |k: &str| str_of(attrs.and_then(|a| a.get(k)));
        let (verb, resource, sub) = (field("verb"), field("resource"), field("subresource"));
        let rule = self.rules.iter().find(|r| {
            (r.subject == user || groups.contains(&r.subject))
                && (r.verb == "*" || r.verb == verb)
                && (r.subresource == "*" || r.subresource == sub)
                && resource == "nodes"
        });
        let status = match rule {
            Some(r) => json!({"allowed": true,
                              "reason": format!("fixture: {} may {} nodes/{}", r.subject, r.verb, r.subresource)}),
            None => json!({"allowed": false}),
        };
        json!({"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
               "metadata": {"creationTimestamp": null}, "spec": spec, "status": status})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_rules_answer_like_the_api_server() {
        let mut r = Reviews::default();
        r.tokens.insert(
            "t1".into(),
            ReviewUser {
                name: "alice".into(),
                uid: "u1".into(),
                groups: vec!["devs".into()],
            },
        );
        r.rules.push(AllowRule {
            subject: "devs".into(),
            verb: "get".into(),
            subresource: "stats".into(),
        });
        let ok = r.token_review(&json!({"spec": {"token": "t1"}}));
        assert_eq!(ok["status"]["authenticated"], true);
        assert_eq!(ok["status"]["user"]["username"], "alice");
        assert_eq!(
            ok["status"]["user"]["groups"],
            json!(["devs", "system:authenticated"])
        );
        let bad = r.token_review(&json!({"spec": {"token": "t2"}}));
        assert_eq!(bad["status"]["authenticated"], Value::Null);
        assert_eq!(bad["status"]["error"], "invalid bearer token");
        let sar = |user: &str, groups: Value, verb: &str, sub: &str| {
            json!({"spec": {"user": user, "groups": groups, "resourceAttributes":
                {"verb": verb, "resource": "nodes", "subresource": sub, "name": "n"}}})
        };
        assert_eq!(
            r.access_review(&sar("alice", json!(["devs"]), "get", "stats"))["status"]["allowed"],
            true
        );
        assert_eq!(
            r.access_review(&sar("alice", json!(["devs"]), "get", "proxy"))["status"]["allowed"],
            false
        );
        assert_eq!(
            r.access_review(&sar("bob", json!([]), "get", "stats"))["status"]["allowed"],
            false
        );
        assert_eq!((r.token_reviews.len(), r.access_reviews.len()), (2, 3));
    }
}
