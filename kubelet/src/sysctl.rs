//! The sysctl admission handler (upstream `pkg/kubelet/sysctl`: `allowlist.go`,
//! `safe_sysctls.go`, and `k8s.io/component-helpers/node/util/sysctl` for namespaces). A pod
//! whose `securityContext.sysctls` names a sysctl that is neither on the safe list nor allowed
//! by `--allowed-unsafe-sysctls` (`allowedUnsafeSysctls`) is rejected at admission with reason
//! `SysctlForbidden` and message `forbidden sysctl: "<name>" not allowlisted`; a namespaced
//! sysctl of a namespace the pod shares with the host (`hostNetwork`, `hostIPC`) is refused too.
//! An allowed pattern that is malformed, or names a sysctl the kernel does not namespace, is a
//! configuration error at start-up, as upstream. Vocabulary layer: imports nothing of the crate.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

/// Upstream `ForbiddenReason`.
pub const FORBIDDEN_REASON: &str = "SysctlForbidden";

/// Upstream `SysctlMaxLength`.
const MAX_LENGTH: usize = 253;

/// Kubernetes 1.26's `SafeSysctlAllowlist`: namespaced sysctls that cannot harm other pods.
pub const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
];

/// The kernel namespace a sysctl belongs to (upstream `utilsysctl.Namespace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespace {
    Ipc,
    Net,
}

impl Namespace {
    fn name(self) -> &'static str {
        match self {
            Namespace::Ipc => "ipc",
            Namespace::Net => "net",
        }
    }
}

/// Upstream `NamespacedBy`: the namespace of a sysctl or a sysctl prefix, if the kernel
/// namespaces it.
pub fn namespaced_by(sysctl: &str) -> Option<Namespace> {
    if sysctl == "kernel.sem" {
        return Some(Namespace::Ipc);
    }
    [
        ("kernel.shm", Namespace::Ipc),
        ("kernel.msg", Namespace::Ipc),
        ("fs.mqueue.", Namespace::Ipc),
        ("net.", Namespace::Net),
    ]
    .into_iter()
    .find(|(p, _)| sysctl.starts_with(p))
    .map(|(_, ns)| ns)
}

/// Upstream `ConvertSysctlVariableToDotsSeparator`: a name written with `/` separators
/// (`net/ipv4/conf/eth0.100/forwarding`) in its dotted form (`net.ipv4.conf.eth0/100.forwarding`).
pub fn to_dots(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

/// One segment of a sysctl name: `[a-z0-9]([-_a-z0-9]*[a-z0-9])?`.
fn valid_segment(s: &str) -> bool {
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.starts_with(ok)
        && s.ends_with(ok)
        && s.chars().all(|c| ok(c) || c == '-' || c == '_')
}

/// Upstream `IsValidSysctlPattern`: segments separated by `.` or `/`, optionally ending in
/// `*` (a prefix pattern), at most 253 characters.
pub fn is_valid_pattern(p: &str) -> bool {
    if p.len() > MAX_LENGTH {
        return false;
    }
    let body = match p.strip_suffix('*') {
        // `net.*`: every segment before the star is complete.
        Some("") => return false,
        Some(prefix) => match prefix.strip_suffix(['.', '/']) {
            Some(segments) => segments,
            None => prefix,
        },
        None => p,
    };
    body.split(['.', '/']).all(valid_segment)
}

/// A malformed or non-namespaced entry of `--allowed-unsafe-sysctls`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowlistError {
    #[error(
        "sysctl {0:?} must have at most 253 characters and match regex ([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?\\*?"
    )]
    Malformed(String),
    #[error("the sysctls {0:?} are not known to be namespaced")]
    PrefixNotNamespaced(String),
    #[error("the sysctl {0:?} are not known to be namespaced")]
    NotNamespaced(String),
}

/// Upstream `patternAllowlist`: exact sysctls and prefixes, each with its namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    sysctls: BTreeMap<String, Namespace>,
    prefixes: BTreeMap<String, Namespace>,
}

impl Allowlist {
    /// Upstream `NewAllowlist(append(SafeSysctlAllowlist(), allowedUnsafeSysctls...))`.
    pub fn with_unsafe(allowed_unsafe: &[String]) -> Result<Self, AllowlistError> {
        let patterns = SAFE_SYSCTLS
            .iter()
            .map(|s| s.to_string())
            .chain(allowed_unsafe.iter().cloned());
        Self::new(patterns)
    }

    /// Upstream `NewAllowlist`.
    pub fn new(patterns: impl IntoIterator<Item = String>) -> Result<Self, AllowlistError> {
        let mut w = Allowlist::default();
        for p in patterns {
            if !is_valid_pattern(&p) {
                return Err(AllowlistError::Malformed(p));
            }
            let s = to_dots(&p);
            if let Some(prefix) = s.strip_suffix('*') {
                let ns = namespaced_by(prefix)
                    .ok_or_else(|| AllowlistError::PrefixNotNamespaced(s.clone()))?;
                w.prefixes.insert(prefix.to_string(), ns);
            } else {
                let ns =
                    namespaced_by(&s).ok_or_else(|| AllowlistError::NotNamespaced(s.clone()))?;
                w.sysctls.insert(s, ns);
            }
        }
        Ok(w)
    }

    /// Upstream `validateSysctl`: the error message, when `sysctl` may not be set.
    fn validate(&self, sysctl: &str, host_net: bool, host_ipc: bool) -> Result<(), String> {
        let sysctl = to_dots(sysctl);
        let ns = self.sysctls.get(&sysctl).copied().or_else(|| {
            self.prefixes
                .iter()
                .find(|(p, _)| sysctl.starts_with(p.as_str()))
                .map(|(_, ns)| *ns)
        });
        match ns {
            None => Err(format!("{sysctl:?} not allowlisted")),
            Some(ns @ Namespace::Ipc) if host_ipc => Err(format!(
                "{sysctl:?} not allowed with host {} enabled",
                ns.name()
            )),
            Some(ns @ Namespace::Net) if host_net => Err(format!(
                "{sysctl:?} not allowed with host {} enabled",
                ns.name()
            )),
            Some(_) => Ok(()),
        }
    }

    /// Upstream `Admit`: `Err((reason, message))` for the first sysctl the pod may not set.
    pub fn admit(&self, pod: &Pod) -> Result<(), (&'static str, String)> {
        let Some(spec) = pod.spec.as_ref() else {
            return Ok(());
        };
        let sysctls = spec
            .security_context
            .as_ref()
            .and_then(|s| s.sysctls.as_deref())
            .unwrap_or_default();
        let host_net = spec.host_network.unwrap_or(false);
        let host_ipc = spec.host_ipc.unwrap_or(false);
        for s in sysctls {
            self.validate(&s.name, host_net, host_ipc)
                .map_err(|e| (FORBIDDEN_REASON, format!("forbidden sysctl: {e}")))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(sysctls: &[&str], host_net: bool, host_ipc: bool) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {
                "containers": [{"name": "c", "image": "i"}],
                "hostNetwork": host_net,
                "hostIPC": host_ipc,
                "securityContext": {"sysctls": sysctls.iter()
                    .map(|n| serde_json::json!({"name": n, "value": "1"}))
                    .collect::<Vec<_>>()},
            }
        }))
        .expect("pod")
    }

    #[test]
    fn an_unsafe_sysctl_not_allowed_is_forbidden_as_upstream() {
        let w = Allowlist::with_unsafe(&[]).expect("safe list");
        assert_eq!(
            w.admit(&pod(&["kernel.msgmax"], false, false)),
            Err((
                "SysctlForbidden",
                "forbidden sysctl: \"kernel.msgmax\" not allowlisted".to_string()
            ))
        );
        assert_eq!(
            w.admit(&pod(&["kernel.shm_rmid_forced"], false, false)),
            Ok(())
        );
        assert_eq!(w.admit(&pod(&[], false, false)), Ok(()));
    }

    #[test]
    fn allowed_unsafe_sysctls_admit_exact_names_and_prefixes() {
        let w = Allowlist::with_unsafe(&["kernel.msg*".into(), "net.core.somaxconn".into()])
            .expect("allowlist");
        for s in ["kernel.msgmax", "kernel.msgmnb", "net.core.somaxconn"] {
            assert_eq!(w.admit(&pod(&[s], false, false)), Ok(()), "{s}");
        }
        assert!(w.admit(&pod(&["net.core.rmem_max"], false, false)).is_err());
        // A name written with slashes is the same sysctl.
        assert_eq!(w.admit(&pod(&["net/core/somaxconn"], false, false)), Ok(()));
    }

    #[test]
    fn a_namespaced_sysctl_of_a_namespace_shared_with_the_host_is_forbidden() {
        let w = Allowlist::with_unsafe(&["kernel.msg*".into()]).expect("allowlist");
        assert_eq!(
            w.admit(&pod(&["net.ipv4.tcp_syncookies"], true, false)),
            Err((
                "SysctlForbidden",
                "forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host net enabled"
                    .to_string()
            ))
        );
        assert!(w.admit(&pod(&["kernel.msgmax"], false, true)).is_err());
        assert_eq!(
            w.admit(&pod(&["net.ipv4.tcp_syncookies"], false, true)),
            Ok(())
        );
    }

    #[test]
    fn malformed_or_non_namespaced_patterns_are_configuration_errors() {
        assert_eq!(
            Allowlist::with_unsafe(&["kernel.panic".into()]),
            Err(AllowlistError::NotNamespaced("kernel.panic".into()))
        );
        assert_eq!(
            Allowlist::with_unsafe(&["vm.*".into()]),
            Err(AllowlistError::PrefixNotNamespaced("vm.*".into()))
        );
        for bad in ["foo-", "bar..", "*", "Net.core", "a b"] {
            assert!(
                matches!(
                    Allowlist::with_unsafe(&[bad.to_string()]),
                    Err(AllowlistError::Malformed(_))
                ),
                "{bad}"
            );
        }
        assert!(Allowlist::with_unsafe(&["net.*".into(), "kernel.sem".into()]).is_ok());
    }

    #[test]
    fn slash_separated_names_swap_their_separators() {
        assert_eq!(
            to_dots("net/ipv4/conf/eth0.100/forwarding"),
            "net.ipv4.conf.eth0/100.forwarding"
        );
        assert_eq!(to_dots("net.ipv4.ip_forward"), "net.ipv4.ip_forward");
    }
}
