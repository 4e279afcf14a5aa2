//! Pod validation as the kubelet applies it to static pods (a subset of upstream
//! `pkg/apis/core/validation` `ValidatePodCreate`). This module owns the checks an operator
//! writing a manifest expects: DNS-1123 names for the pod, namespace and containers, at least
//! one container, unique container names across init and app containers, a non-empty image,
//! container/host port ranges, unique and well-formed port names, port protocols and the
//! restart policy. Every problem becomes a [`ValidationError`] with the field path, and all of
//! them are collected so a manifest's author sees everything at once.

use std::collections::HashSet;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, Pod};

/// The kind of a validation problem (upstream `field.ErrorType`), rendered like upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// `Required value`.
    Required,
    /// `Invalid value: "<value>": <detail>`.
    Invalid {
        /// The offending value.
        value: String,
        /// Why.
        detail: String,
    },
    /// `Duplicate value: "<value>"`.
    Duplicate(String),
    /// `Unsupported value: "<value>": supported values: ...`.
    NotSupported {
        /// The offending value.
        value: String,
        /// Allowed values.
        supported: Vec<&'static str>,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Required => f.write_str("Required value"),
            Reason::Invalid { value, detail } => write!(f, "Invalid value: {value:?}: {detail}"),
            Reason::Duplicate(v) => write!(f, "Duplicate value: {v:?}"),
            Reason::NotSupported { value, supported } => {
                let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
                write!(
                    f,
                    "Unsupported value: {value:?}: supported values: {}",
                    list.join(", ")
                )
            }
        }
    }
}

/// One validation problem: the field path and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ValidationError {
    /// Field path, e.g. `spec.containers[1].image`.
    pub field: String,
    /// What is wrong.
    pub reason: Reason,
}

fn err(field: impl Into<String>, reason: Reason) -> ValidationError {
    ValidationError {
        field: field.into(),
        reason,
    }
}

fn invalid(field: impl Into<String>, value: &str, detail: impl Into<String>) -> ValidationError {
    err(
        field,
        Reason::Invalid {
            value: value.to_string(),
            detail: detail.into(),
        },
    )
}

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

fn is_alnum_lower(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` of any length.
fn is_dns1123_label_shape(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_alnum_lower(b[0])
        && is_alnum_lower(b[b.len() - 1])
        && b.iter().all(|&c| is_alnum_lower(c) || c == b'-')
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && is_dns1123_label_shape(s)
}

/// Dot-separated DNS-1123 labels, at most 253 characters in all. As upstream's
/// `IsDNS1123Subdomain`, the parts between dots are not limited to 63 characters each: a pod
/// name of 64 characters without a dot is valid.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label_shape)
}

/// IANA service name (port names): 1-15 chars of `[a-z0-9-]`, at least one letter, no leading,
/// trailing or doubled hyphen.
pub fn is_iana_svc_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 15
        && b.iter().all(|&c| is_alnum_lower(c) || c == b'-')
        && b.iter().any(u8::is_ascii_lowercase)
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--")
}

fn validate_container(
    c: &Container,
    path: &str,
    names: &mut HashSet<String>,
    errs: &mut Vec<ValidationError>,
) {
    let name_path = format!("{path}.name");
    if c.name.is_empty() {
        errs.push(err(name_path, Reason::Required));
    } else if !is_dns1123_label(&c.name) {
        errs.push(invalid(name_path, &c.name, DNS1123_LABEL_MSG));
    } else if !names.insert(c.name.clone()) {
        errs.push(err(name_path, Reason::Duplicate(c.name.clone())));
    }
    if c.image.as_deref().is_none_or(|i| i.trim().is_empty()) {
        errs.push(err(format!("{path}.image"), Reason::Required));
    }
    let mut port_names = HashSet::new();
    for (i, p) in c.ports.iter().flatten().enumerate() {
        let pp = format!("{path}.ports[{i}]");
        if let Some(n) = p.name.as_deref() {
            if !is_iana_svc_name(n) {
                errs.push(invalid(
                    format!("{pp}.name"),
                    n,
                    "must be no more than 15 characters, contain only lowercase alphanumerics or '-', contain at least one letter, and not begin, end with or contain consecutive '-'",
                ));
            } else if !port_names.insert(n.to_string()) {
                errs.push(err(format!("{pp}.name"), Reason::Duplicate(n.to_string())));
            }
        }
        if !(1..=65535).contains(&p.container_port) {
            errs.push(invalid(
                format!("{pp}.containerPort"),
                &p.container_port.to_string(),
                "must be between 1 and 65535, inclusive",
            ));
        }
        if let Some(hp) = p.host_port
            && hp != 0
            && !(1..=65535).contains(&hp)
        {
            errs.push(invalid(
                format!("{pp}.hostPort"),
                &hp.to_string(),
                "must be between 1 and 65535, inclusive",
            ));
        }
        if let Some(proto) = p.protocol.as_deref()
            && !["TCP", "UDP", "SCTP"].contains(&proto)
        {
            errs.push(err(
                format!("{pp}.protocol"),
                Reason::NotSupported {
                    value: proto.to_string(),
                    supported: vec!["SCTP", "TCP", "UDP"],
                },
            ));
        }
    }
}

/// Validate `pod`; an empty list means valid.
pub fn validate_pod(pod: &Pod) -> Vec<ValidationError> {
    let mut errs = Vec::new();
    match pod.metadata.name.as_deref() {
        None | Some("") => errs.push(err("metadata.name", Reason::Required)),
        Some(n) if !is_dns1123_subdomain(n) => {
            errs.push(invalid("metadata.name", n, DNS1123_SUBDOMAIN_MSG))
        }
        _ => {}
    }
    match pod.metadata.namespace.as_deref() {
        None | Some("") => errs.push(err("metadata.namespace", Reason::Required)),
        Some(n) if !is_dns1123_label(n) => {
            errs.push(invalid("metadata.namespace", n, DNS1123_LABEL_MSG))
        }
        _ => {}
    }
    let Some(spec) = pod.spec.as_ref() else {
        errs.push(err("spec", Reason::Required));
        return errs;
    };
    let mut names = HashSet::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        validate_container(
            c,
            &format!("spec.initContainers[{i}]"),
            &mut names,
            &mut errs,
        );
    }
    if spec.containers.is_empty() {
        errs.push(err("spec.containers", Reason::Required));
    }
    for (i, c) in spec.containers.iter().enumerate() {
        validate_container(c, &format!("spec.containers[{i}]"), &mut names, &mut errs);
    }
    if let Some(rp) = spec.restart_policy.as_deref()
        && !["Always", "OnFailure", "Never"].contains(&rp)
    {
        errs.push(err(
            "spec.restartPolicy",
            Reason::NotSupported {
                value: rp.to_string(),
                supported: vec!["Always", "OnFailure", "Never"],
            },
        ));
    }
    if let Some(dp) = spec.dns_policy.as_deref()
        && !["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"].contains(&dp)
    {
        errs.push(err(
            "spec.dnsPolicy",
            Reason::NotSupported {
                value: dp.to_string(),
                supported: vec!["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"],
            },
        ));
    }
    if let Some(g) = spec.termination_grace_period_seconds
        && g < 0
    {
        errs.push(invalid(
            "spec.terminationGracePeriodSeconds",
            &g.to_string(),
            "must be greater than or equal to 0",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn c(name: &str, image: Option<&str>) -> Container {
        Container {
            name: name.into(),
            image: image.map(Into::into),
            ..Default::default()
        }
    }

    fn pod(containers: Vec<Container>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-node1".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers,
                restart_policy: Some("Always".into()),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn rendered(p: &Pod) -> Vec<String> {
        validate_pod(p).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn valid_pod() {
        assert!(validate_pod(&pod(vec![c("a", Some("nginx"))])).is_empty());
    }

    #[test]
    fn names() {
        assert!(is_dns1123_label("a-1"));
        assert!(!is_dns1123_label("A"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_subdomain(&"a".repeat(64)));
        assert!(is_dns1123_subdomain(&format!("{}.b", "a".repeat(100))));
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(is_dns1123_subdomain("a.b-c"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(is_iana_svc_name("http"));
        assert!(!is_iana_svc_name("80"));
        assert!(!is_iana_svc_name("a--b"));
        let mut p = pod(vec![c("a", Some("x"))]);
        p.metadata.name = Some("Bad_Name".into());
        p.metadata.namespace = None;
        let e = validate_pod(&p);
        assert_eq!(e[0].field, "metadata.name");
        assert!(matches!(e[0].reason, Reason::Invalid { .. }));
        assert_eq!(e[1].to_string(), "metadata.namespace: Required value");
    }

    #[test]
    fn containers() {
        assert_eq!(
            rendered(&pod(vec![])),
            vec!["spec.containers: Required value"]
        );
        let mut p = pod(vec![c("a", Some("x")), c("b", None), c("a", Some(""))]);
        if let Some(s) = p.spec.as_mut() {
            s.init_containers = Some(vec![c("b", Some("x"))]);
        }
        assert_eq!(
            rendered(&p),
            vec![
                "spec.containers[1].name: Duplicate value: \"b\"",
                "spec.containers[1].image: Required value",
                "spec.containers[2].name: Duplicate value: \"a\"",
                "spec.containers[2].image: Required value",
            ]
        );
    }

    #[test]
    fn ports_and_policy() {
        let mut a = c("a", Some("x"));
        a.ports = Some(vec![
            ContainerPort {
                name: Some("http".into()),
                container_port: 0,
                host_port: Some(70000),
                ..Default::default()
            },
            ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                protocol: Some("ICMP".into()),
                ..Default::default()
            },
        ]);
        let mut p = pod(vec![a]);
        if let Some(s) = p.spec.as_mut() {
            s.restart_policy = Some("Sometimes".into());
        }
        let fields: Vec<String> = validate_pod(&p).into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            vec![
                "spec.containers[0].ports[0].containerPort",
                "spec.containers[0].ports[0].hostPort",
                "spec.containers[0].ports[1].name",
                "spec.containers[0].ports[1].protocol",
                "spec.restartPolicy",
            ]
        );
    }
}
