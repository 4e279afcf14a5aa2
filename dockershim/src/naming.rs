//! Docker container names for pod sandboxes and containers, exactly as the Go
//! dockershim (and Mirantis cri-dockerd `core/naming.go`) builds and parses
//! them. The name is what makes sandbox/container creation idempotent: Docker
//! refuses a second container with the same name. Sandboxes are named
//! `k8s_POD_<pod>_<namespace>_<uid>_<attempt>` and containers
//! `k8s_<container>_<pod>_<namespace>_<uid>_<attempt>`; on Docker's
//! name-conflict bug upstream appends `_<8 hex digits>` (`randomizeName`),
//! which the parsers tolerate. This module owns only the string format; it
//! knows nothing about the CRI types (callers copy fields in and out).

use std::fmt;

/// Prefix of every container managed by the kubelet.
pub const KUBE_PREFIX: &str = "k8s";
/// Name of the pod infra (sandbox) container, `config.PodInfraContainerName`.
pub const SANDBOX_CONTAINER_NAME: &str = "POD";
/// Delimiter between the name fields.
pub const NAME_DELIMITER: &str = "_";

/// The sandbox metadata encoded in a Docker container name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct SandboxNameParts {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub attempt: u32,
}

/// The container metadata encoded in a Docker container name, with the
/// metadata of the pod it belongs to (upstream's `parseContainerName` returns
/// only name and attempt; the pod fields are in the same name, so we keep them).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ContainerNameParts {
    pub name: String,
    pub attempt: u32,
    pub pod: SandboxNameParts,
}

/// Why a Docker container name could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Not 6 fields (7 with the random suffix).
    #[error("failed to parse the {kind} name: {name:?}")]
    FieldCount { kind: &'static str, name: String },
    /// First field is not `k8s`.
    #[error("container is not managed by kubernetes: {0:?}")]
    NotKubernetes(String),
    /// A sandbox name whose container field is not `POD`.
    #[error("not a sandbox name: {0:?}")]
    NotSandbox(String),
    /// The attempt field is not a decimal u32.
    #[error("failed to parse the {kind} name {name:?}: invalid attempt {attempt:?}")]
    Attempt {
        kind: &'static str,
        name: String,
        attempt: String,
    },
}

impl fmt::Display for SandboxNameParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&make_sandbox_name(self))
    }
}

impl fmt::Display for ContainerNameParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&make_container_name(self))
    }
}

/// `k8s_POD_<pod>_<namespace>_<uid>_<attempt>` (upstream `makeSandboxName`).
pub fn make_sandbox_name(s: &SandboxNameParts) -> String {
    [
        KUBE_PREFIX,
        SANDBOX_CONTAINER_NAME,
        &s.name,
        &s.namespace,
        &s.uid,
        &s.attempt.to_string(),
    ]
    .join(NAME_DELIMITER)
}

/// `k8s_<container>_<pod>_<namespace>_<uid>_<attempt>` (upstream
/// `makeContainerName`; the attempt is the container's, not the pod's).
pub fn make_container_name(c: &ContainerNameParts) -> String {
    [
        KUBE_PREFIX,
        &c.name,
        &c.pod.name,
        &c.pod.namespace,
        &c.pod.uid,
        &c.attempt.to_string(),
    ]
    .join(NAME_DELIMITER)
}

/// Upstream `randomizeName`: `<name>_<%08x of a random u32>`, used only when
/// Docker reports a name conflict for a container that does not really exist.
pub fn randomize_name(name: &str) -> String {
    randomize_name_with(name, random_u32())
}

/// [`randomize_name`] with a caller-chosen suffix value (deterministic tests).
pub fn randomize_name_with(name: &str, suffix: u32) -> String {
    format!("{name}{NAME_DELIMITER}{suffix:08x}")
}

fn random_u32() -> u32 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.finish() as u32
}

/// Checks that one CRI metadata field (pod name, namespace, uid or container name) can be
/// carried in a Docker container name and read back unchanged. Docker allows
/// `[a-zA-Z0-9][a-zA-Z0-9_.-]*`, and `_` separates our fields, so a field may hold only ASCII
/// letters, digits, `.` and `-` (Kubernetes' own names and UIDs always do). dockershim refuses
/// anything else with InvalidArgument instead of creating a container whose name parses back
/// into other metadata (see docs/conformance.md). `what` names the field in the message.
pub fn check_field(what: &str, value: &str) -> Result<(), String> {
    let bad = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '.' || *c == '-'));
    match bad {
        None => Ok(()),
        Some('_') => Err(format!(
            "{what} {value:?} contains '_', which separates the fields of Docker container \
             names (k8s_POD_<name>_<namespace>_<uid>_<attempt>): it could not be read back"
        )),
        Some(c) => Err(format!(
            "{what} {value:?} contains {c:?}, which a Docker container name cannot hold \
             (allowed: ASCII letters, digits, '.' and '-')"
        )),
    }
}

fn split_fields<'a>(kind: &'static str, name: &'a str) -> Result<Vec<&'a str>, NameError> {
    // Docker adds a "/" prefix to names: trim one, like strings.TrimPrefix.
    let name = name.strip_prefix('/').unwrap_or(name);
    let parts: Vec<&str> = name.split(NAME_DELIMITER).collect();
    // Tolerate the random suffix.
    if parts.len() != 6 && parts.len() != 7 {
        return Err(NameError::FieldCount {
            kind,
            name: name.to_string(),
        });
    }
    if parts[0] != KUBE_PREFIX {
        return Err(NameError::NotKubernetes(name.to_string()));
    }
    Ok(parts)
}

/// Go's `strconv.ParseUint(s, 10, 32)`: ASCII digits only, no sign.
fn parse_attempt(kind: &'static str, name: &str, s: &str) -> Result<u32, NameError> {
    let err = || NameError::Attempt {
        kind,
        name: name.trim_start_matches('/').to_string(),
        attempt: s.to_string(),
    };
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err());
    }
    s.parse::<u32>().map_err(|_| err())
}

/// Upstream `parseSandboxName`. Like upstream, it does not insist that the
/// second field is `POD` (use [`parse_sandbox_name_strict`] for that).
pub fn parse_sandbox_name(name: &str) -> Result<SandboxNameParts, NameError> {
    let parts = split_fields("sandbox", name)?;
    Ok(SandboxNameParts {
        name: parts[2].to_string(),
        namespace: parts[3].to_string(),
        uid: parts[4].to_string(),
        attempt: parse_attempt("sandbox", name, parts[5])?,
    })
}

/// [`parse_sandbox_name`] that also requires the container field to be `POD`.
pub fn parse_sandbox_name_strict(name: &str) -> Result<SandboxNameParts, NameError> {
    let parts = split_fields("sandbox", name)?;
    if parts[1] != SANDBOX_CONTAINER_NAME {
        return Err(NameError::NotSandbox(
            name.trim_start_matches('/').to_string(),
        ));
    }
    parse_sandbox_name(name)
}

/// Upstream `parseContainerName`, also returning the pod fields. The pod's
/// attempt is not in a container name, so `pod.attempt` is 0.
pub fn parse_container_name(name: &str) -> Result<ContainerNameParts, NameError> {
    let parts = split_fields("container", name)?;
    Ok(ContainerNameParts {
        name: parts[1].to_string(),
        attempt: parse_attempt("container", name, parts[5])?,
        pod: SandboxNameParts {
            name: parts[2].to_string(),
            namespace: parts[3].to_string(),
            uid: parts[4].to_string(),
            attempt: 0,
        },
    })
}

/// Is `id` a whole Docker container id (64 hex digits), not a prefix to resolve?
pub fn is_full_container_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_container_ids_are_told_from_prefixes() {
        assert!(is_full_container_id(&"ab12".repeat(16)));
        assert!(!is_full_container_id(&"ab12".repeat(3)));
        assert!(!is_full_container_id(&"zz".repeat(32)));
    }

    fn pod() -> SandboxNameParts {
        SandboxNameParts {
            name: "nginx-7c".into(),
            namespace: "default".into(),
            uid: "0b1c2d3e-aaaa-bbbb-cccc-0123456789ab".into(),
            attempt: 2,
        }
    }

    #[test]
    fn sandbox_name_format_and_roundtrip() {
        let n = make_sandbox_name(&pod());
        assert_eq!(
            n,
            "k8s_POD_nginx-7c_default_0b1c2d3e-aaaa-bbbb-cccc-0123456789ab_2"
        );
        assert_eq!(parse_sandbox_name(&n).unwrap(), pod());
        assert_eq!(parse_sandbox_name(&format!("/{n}")).unwrap(), pod());
        assert_eq!(parse_sandbox_name_strict(&n).unwrap(), pod());
        assert_eq!(pod().to_string(), n);
    }

    #[test]
    fn container_name_format_and_roundtrip() {
        let c = ContainerNameParts {
            name: "web".into(),
            attempt: 5,
            pod: SandboxNameParts {
                attempt: 0,
                ..pod()
            },
        };
        let n = make_container_name(&c);
        assert_eq!(
            n,
            "k8s_web_nginx-7c_default_0b1c2d3e-aaaa-bbbb-cccc-0123456789ab_5"
        );
        assert_eq!(parse_container_name(&format!("/{n}")).unwrap(), c);
    }

    #[test]
    fn random_suffix_tolerated() {
        let n = randomize_name_with(&make_sandbox_name(&pod()), 0xab);
        assert!(n.ends_with("_2_000000ab"), "{n}");
        assert_eq!(parse_sandbox_name(&n).unwrap(), pod());
        let r = randomize_name("k8s_a_b_c_d_0");
        assert_eq!(r.len(), "k8s_a_b_c_d_0".len() + 9);
        assert_eq!(parse_container_name(&r).unwrap().name, "a");
    }

    #[test]
    fn fields_docker_names_cannot_carry_are_refused() {
        for ok in [
            "nginx-7c",
            "kube-system",
            "0b1c2d3e-aaaa-bbbb-cccc-0123456789ab",
            "a.b",
            "A9",
        ] {
            assert_eq!(check_field("metadata.name", ok), Ok(()), "{ok}");
        }
        let e = check_field("metadata.namespace", "my_ns").unwrap_err();
        assert!(
            e.contains("metadata.namespace \"my_ns\" contains '_'"),
            "{e}"
        );
        for bad in ["a b", "a/b", "a:b", "ü", "a%b"] {
            assert!(check_field("metadata.uid", bad).is_err(), "{bad}");
        }
        // Why: a field with '_' parses back as other metadata (or a randomized name).
        let p = SandboxNameParts {
            name: "a_b".into(),
            namespace: "ns".into(),
            uid: "1".into(),
            attempt: 0,
        };
        let back = parse_sandbox_name(&make_sandbox_name(&p)).unwrap();
        assert_eq!(
            (back.name.as_str(), back.namespace.as_str(), back.attempt),
            ("a", "b", 1)
        );
    }

    #[test]
    fn parse_errors_are_typed() {
        assert!(matches!(
            parse_sandbox_name("k8s_POD_a_b_c"),
            Err(NameError::FieldCount { .. })
        ));
        assert!(matches!(
            parse_sandbox_name("k8s_POD_a_b_c_1_2_3"),
            Err(NameError::FieldCount { .. })
        ));
        assert!(matches!(
            parse_container_name("/foo_web_a_b_c_1"),
            Err(NameError::NotKubernetes(_))
        ));
        for bad in ["x", "-1", "+1", "4294967296", ""] {
            assert!(
                matches!(
                    parse_container_name(&format!("k8s_web_a_b_c_{bad}")),
                    Err(NameError::Attempt { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_sandbox_name_strict("k8s_web_a_b_c_1"),
            Err(NameError::NotSandbox(_))
        ));
        // Only one leading slash is trimmed, like strings.TrimPrefix.
        assert!(parse_sandbox_name("//k8s_POD_a_b_c_1").is_err());
    }
}
