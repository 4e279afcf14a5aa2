//! CRI security settings as Docker `HostConfig` options (upstream `security_context.go`):
//! seccomp (the `seccomp` field and the deprecated `seccomp_profile_path`, with CRI's meaning of
//! "absent = unconfined"), AppArmor, SELinux labels, capabilities, run-as user/group, and
//! no_new_privs, and the namespace options of a sandbox config. Pure functions; owns no state.

use std::borrow::Cow;

use bollard::models::HostConfig;
use cri_proto::runtime::v1 as cri;

use crate::errors::{Result, ShimError};

/// The namespace options of a sandbox config (absent `linux` section = all pod-scoped).
pub fn sandbox_ns_options(config: &cri::PodSandboxConfig) -> Option<&cri::NamespaceOption> {
    config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref())
}

/// A CRI seccomp profile, from the `seccomp` field or the deprecated `seccomp_profile_path`.
#[derive(Debug, PartialEq, Eq)]
enum Seccomp<'a> {
    Unconfined,
    RuntimeDefault,
    /// The profile's file.
    Localhost(&'a str),
}

const LOCALHOST_PREFIX: &str = "localhost/";

/// Which profile a request asks for. The `seccomp` field wins over the deprecated path; an
/// absent profile and an empty path mean unconfined (as with containerd and upstream
/// dockershim). A deprecated path is `unconfined`, `runtime/default`, `docker/default` or
/// `localhost/<file>`; anything else (a bare file path) is refused, as containerd, upstream
/// dockershim and critest ("should not support a custom seccomp profile without using
/// localhost/ as a prefix") require.
fn seccomp_profile<'a>(
    profile: Option<&'a cri::SecurityProfile>,
    deprecated_path: &'a str,
) -> Result<Seccomp<'a>> {
    use cri::security_profile::ProfileType;
    if let Some(p) = profile {
        return Ok(match ProfileType::try_from(p.profile_type) {
            Ok(ProfileType::RuntimeDefault) => Seccomp::RuntimeDefault,
            // The ref is a file; a `localhost/` prefix is tolerated, as containerd does.
            Ok(ProfileType::Localhost) => Seccomp::Localhost(
                p.localhost_ref
                    .strip_prefix(LOCALHOST_PREFIX)
                    .unwrap_or(&p.localhost_ref),
            ),
            _ => Seccomp::Unconfined,
        });
    }
    match deprecated_path {
        "" | "unconfined" => Ok(Seccomp::Unconfined),
        "runtime/default" | "docker/default" => Ok(Seccomp::RuntimeDefault),
        p => match p.strip_prefix(LOCALHOST_PREFIX) {
            Some(file) => Ok(Seccomp::Localhost(file)),
            None => Err(ShimError::invalid(format!(
                "unknown seccomp profile option {p:?}: a custom profile is given as \"localhost/<path>\""
            ))),
        },
    }
}

/// Appends Docker's `seccomp=` option for a CRI seccomp profile (see [`seccomp_profile`] for
/// what a request may ask). Unconfined = `seccomp=unconfined`; RuntimeDefault = nothing
/// (Docker's default profile); Localhost = the profile file's content, inlined (Docker takes
/// the content, not a path), which must be an absolute path to a readable file. Privileged
/// containers are unconfined whatever they ask (the request is still checked).
pub fn seccomp_opts(
    profile: Option<&cri::SecurityProfile>,
    deprecated_path: &str,
    privileged: bool,
    out: &mut Vec<String>,
) -> Result<()> {
    let wanted = seccomp_profile(profile, deprecated_path)?;
    if privileged {
        out.push("seccomp=unconfined".to_string());
        return Ok(());
    }
    match wanted {
        Seccomp::Unconfined => out.push("seccomp=unconfined".to_string()),
        Seccomp::RuntimeDefault => {}
        Seccomp::Localhost(file) => out.push(format!("seccomp={}", localhost_profile(file)?)),
    }
    Ok(())
}

/// The largest localhost seccomp profile dockershim reads (Docker's default profile is about
/// 20 KiB).
pub const MAX_SECCOMP_PROFILE_BYTES: u64 = 1 << 20;

/// The content of a localhost seccomp profile (upstream's messages for a relative path and for
/// a file it cannot read). Only a regular file of at most [`MAX_SECCOMP_PROFILE_BYTES`] is
/// read: upstream reads whatever the path names, so `/dev/zero` fills its memory and a FIFO
/// blocks the RPC forever; here both are InvalidArgument.
fn localhost_profile(path: &str) -> Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    if !path.starts_with('/') {
        return Err(ShimError::invalid(format!(
            "seccomp profile path must be absolute, but got relative path {path:?}"
        )));
    }
    let cannot =
        |e: String| ShimError::invalid(format!("cannot load seccomp profile {path:?}: {e}"));
    // Non-blocking, so that opening a FIFO does not wait for a writer.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| cannot(e.to_string()))?;
    let meta = file.metadata().map_err(|e| cannot(e.to_string()))?;
    if !meta.is_file() {
        return Err(cannot("not a regular file".to_string()));
    }
    let mut content = String::new();
    file.take(MAX_SECCOMP_PROFILE_BYTES + 1)
        .read_to_string(&mut content)
        .map_err(|e| cannot(e.to_string()))?;
    if content.len() as u64 > MAX_SECCOMP_PROFILE_BYTES {
        return Err(cannot(format!(
            "over the limit of {MAX_SECCOMP_PROFILE_BYTES} bytes"
        )));
    }
    Ok(content)
}

/// Is AppArmor enabled on this host?
fn apparmor_enabled() -> bool {
    std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .map(|s| s.trim() == "Y")
        .unwrap_or(false)
}

/// Appends Docker's `apparmor=` option. Nothing is set on hosts without AppArmor.
pub fn apparmor_opts(
    profile: Option<&cri::SecurityProfile>,
    deprecated: &str,
    out: &mut Vec<String>,
) {
    if !apparmor_enabled() {
        return;
    }
    if let Some(p) = profile {
        match cri::security_profile::ProfileType::try_from(p.profile_type) {
            Ok(cri::security_profile::ProfileType::Unconfined) => {
                out.push("apparmor=unconfined".to_string())
            }
            Ok(cri::security_profile::ProfileType::Localhost) => {
                let name = p.localhost_ref.trim_start_matches("localhost/");
                out.push(format!("apparmor={name}"));
            }
            _ => {}
        }
        return;
    }
    match deprecated {
        "unconfined" => out.push("apparmor=unconfined".to_string()),
        p if p.starts_with("localhost/") => out.push(format!("apparmor={}", &p[10..])),
        _ => {}
    }
}

/// Docker's capability names: CRI sends `CAP_X` or `X`; `ALL` stays `ALL`.
fn cap_name(c: &str) -> String {
    if c.eq_ignore_ascii_case("ALL") {
        "ALL".to_string()
    } else if c.starts_with("CAP_") {
        c.to_string()
    } else {
        format!("CAP_{c}")
    }
}

/// What container and sandbox security contexts share: privileged, read-only rootfs and
/// supplemental groups.
fn apply_common(privileged: bool, readonly_rootfs: bool, groups: &[i64], hc: &mut HostConfig) {
    if privileged {
        hc.privileged = Some(true);
    }
    hc.readonly_rootfs = Some(readonly_rootfs);
    if !groups.is_empty() {
        hc.group_add = Some(groups.iter().map(|g| g.to_string()).collect());
    }
}

/// Applies a sandbox security context to the pause container's host config; returns its user
/// (`uid` or `uid:gid`), if one is set. No context means CRI's defaults (seccomp unconfined,
/// like upstream dockershim and containerd), not Docker's. An invalid seccomp profile is
/// refused (as containerd refuses the sandbox).
#[allow(deprecated)] // seccomp_profile_path: CRI still sends it; we honour both fields.
pub fn apply_sandbox_security(
    sc: Option<&cri::LinuxSandboxSecurityContext>,
    hc: &mut HostConfig,
) -> Result<Option<String>> {
    let sc = sc.map_or_else(|| Cow::Owned(Default::default()), Cow::Borrowed);
    apply_common(
        sc.privileged,
        sc.readonly_rootfs,
        &sc.supplemental_groups,
        hc,
    );
    let mut opts = Vec::new();
    seccomp_opts(
        sc.seccomp.as_ref(),
        &sc.seccomp_profile_path,
        sc.privileged,
        &mut opts,
    )?;
    apparmor_opts(sc.apparmor.as_ref(), "", &mut opts);
    if !opts.is_empty() {
        hc.security_opt = Some(opts);
    }
    Ok(sc
        .run_as_user
        .as_ref()
        .map(|u| docker_user(u.value, sc.run_as_group.as_ref())))
}

/// Docker's `User`: `user` or `user:group`.
fn docker_user(user: impl std::fmt::Display, group: Option<&cri::Int64Value>) -> String {
    match group {
        Some(g) => format!("{user}:{}", g.value),
        None => user.to_string(),
    }
}

/// Applies a container security context to the create body's user and host config. No
/// context means CRI's defaults (seccomp unconfined), not Docker's.
#[allow(deprecated)] // seccomp_profile_path / apparmor_profile: CRI still sends them.
pub fn apply_container_security(
    sc: Option<&cri::LinuxContainerSecurityContext>,
    user: &mut Option<String>,
    hc: &mut HostConfig,
) -> Result<()> {
    let sc = sc.map_or_else(|| Cow::Owned(Default::default()), Cow::Borrowed);
    if let Some(uid) = &sc.run_as_user {
        *user = Some(docker_user(uid.value, sc.run_as_group.as_ref()));
    } else if !sc.run_as_username.is_empty() {
        *user = Some(docker_user(&sc.run_as_username, sc.run_as_group.as_ref()));
    } else if sc.run_as_group.is_some() {
        return Err(ShimError::invalid(
            "run_as_group is set without run_as_user or run_as_username",
        ));
    }
    apply_common(
        sc.privileged,
        sc.readonly_rootfs,
        &sc.supplemental_groups,
        hc,
    );
    if let Some(caps) = &sc.capabilities {
        if !caps.add_capabilities.is_empty() {
            hc.cap_add = Some(caps.add_capabilities.iter().map(|c| cap_name(c)).collect());
        }
        if !caps.drop_capabilities.is_empty() {
            hc.cap_drop = Some(caps.drop_capabilities.iter().map(|c| cap_name(c)).collect());
        }
    }
    let mut opts = Vec::new();
    seccomp_opts(
        sc.seccomp.as_ref(),
        &sc.seccomp_profile_path,
        sc.privileged,
        &mut opts,
    )?;
    apparmor_opts(sc.apparmor.as_ref(), &sc.apparmor_profile, &mut opts);
    if sc.no_new_privs {
        opts.push("no-new-privileges".to_string());
    }
    if let Some(se) = &sc.selinux_options {
        for (k, v) in [
            ("user", &se.user),
            ("role", &se.role),
            ("type", &se.r#type),
            ("level", &se.level),
        ] {
            if !v.is_empty() {
                opts.push(format!("label={k}:{v}"));
            }
        }
    }
    if !opts.is_empty() {
        hc.security_opt = Some(opts);
    }
    if !sc.privileged {
        if !sc.masked_paths.is_empty() {
            hc.masked_paths = Some(sc.masked_paths.clone());
        }
        if !sc.readonly_paths.is_empty() {
            hc.readonly_paths = Some(sc.readonly_paths.clone());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(t: cri::security_profile::ProfileType, r: &str) -> cri::SecurityProfile {
        cri::SecurityProfile {
            profile_type: t as i32,
            localhost_ref: r.to_string(),
        }
    }

    fn opts(profile: Option<&cri::SecurityProfile>, path: &str, privileged: bool) -> Vec<String> {
        let mut o = Vec::new();
        seccomp_opts(profile, path, privileged, &mut o).unwrap();
        o
    }

    #[test]
    fn seccomp_follows_cri_meaning() {
        use cri::security_profile::ProfileType::*;
        assert_eq!(opts(None, "", false), ["seccomp=unconfined"]);
        assert_eq!(opts(None, "unconfined", false), ["seccomp=unconfined"]);
        assert!(opts(Some(&profile(RuntimeDefault, "")), "", false).is_empty());
        assert!(opts(None, "runtime/default", false).is_empty());
        assert!(opts(None, "docker/default", false).is_empty());
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.json");
        std::fs::write(&p, r#"{"defaultAction":"SCMP_ACT_ALLOW"}"#).unwrap();
        let inlined = [r#"seccomp={"defaultAction":"SCMP_ACT_ALLOW"}"#];
        let path = p.to_str().unwrap();
        assert_eq!(opts(Some(&profile(Localhost, path)), "", false), inlined);
        assert_eq!(
            opts(
                Some(&profile(Localhost, &format!("localhost/{path}"))),
                "",
                false
            ),
            inlined
        );
        assert_eq!(opts(None, &format!("localhost/{path}"), false), inlined);
        // The field wins over the deprecated path.
        assert!(opts(Some(&profile(RuntimeDefault, "")), "unconfined", false).is_empty());
        // Privileged containers are unconfined.
        assert_eq!(
            opts(None, &format!("localhost/{path}"), true),
            ["seccomp=unconfined"]
        );
    }

    #[test]
    fn seccomp_refuses_what_upstream_refuses() {
        use cri::security_profile::ProfileType::*;
        let err = |profile: Option<&cri::SecurityProfile>, path: &str, privileged: bool| {
            let mut o = Vec::new();
            match seccomp_opts(profile, path, privileged, &mut o) {
                Err(e @ ShimError::InvalidArgument(_)) => e.to_string(),
                other => panic!("{profile:?} {path:?}: {other:?} {o:?}"),
            }
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.json");
        std::fs::write(&p, "{}").unwrap();
        let path = p.to_str().unwrap();
        // critest: "should not support a custom seccomp profile without using localhost/".
        assert!(err(None, path, false).contains("localhost/"));
        assert!(err(None, path, true).contains("localhost/"));
        assert!(err(None, "foo/bar", false).contains("unknown seccomp profile"));
        // A relative or unreadable localhost profile.
        assert!(err(None, "localhost/p.json", false).contains("must be absolute"));
        assert!(err(Some(&profile(Localhost, "p.json")), "", false).contains("must be absolute"));
        let missing = dir.path().join("missing.json");
        let missing = missing.to_str().unwrap();
        assert!(
            err(Some(&profile(Localhost, missing)), "", false)
                .contains("cannot load seccomp profile")
        );
        // Only a regular file, and not a huge one: /dev/zero would fill memory, a FIFO block.
        for special in ["/dev/zero", "/dev/null"] {
            assert!(
                err(Some(&profile(Localhost, special)), "", false).contains("not a regular file"),
                "{special}"
            );
        }
        let fifo = dir.path().join("fifo");
        let c_fifo = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) }, 0);
        assert!(
            err(Some(&profile(Localhost, fifo.to_str().unwrap())), "", false)
                .contains("not a regular file")
        );
        let big = dir.path().join("big.json");
        std::fs::write(&big, vec![b' '; MAX_SECCOMP_PROFILE_BYTES as usize + 1]).unwrap();
        assert!(
            err(Some(&profile(Localhost, big.to_str().unwrap())), "", false)
                .contains("over the limit")
        );
        // Both security contexts refuse it.
        let mut hc = HostConfig::default();
        let sc = cri::LinuxSandboxSecurityContext {
            #[allow(deprecated)]
            seccomp_profile_path: path.to_string(),
            ..Default::default()
        };
        assert!(apply_sandbox_security(Some(&sc), &mut hc).is_err());
        let sc = cri::LinuxContainerSecurityContext {
            #[allow(deprecated)]
            seccomp_profile_path: path.to_string(),
            ..Default::default()
        };
        assert!(apply_container_security(Some(&sc), &mut None, &mut hc).is_err());
    }

    #[test]
    fn users_groups_and_caps() {
        let sc = cri::LinuxContainerSecurityContext {
            run_as_user: Some(cri::Int64Value { value: 1000 }),
            run_as_group: Some(cri::Int64Value { value: 2000 }),
            supplemental_groups: vec![5, 6],
            capabilities: Some(cri::Capability {
                add_capabilities: vec!["NET_ADMIN".into()],
                drop_capabilities: vec!["ALL".into()],
                ..Default::default()
            }),
            no_new_privs: true,
            ..Default::default()
        };
        let mut user = None;
        let mut hc = HostConfig::default();
        apply_container_security(Some(&sc), &mut user, &mut hc).unwrap();
        assert_eq!(user.as_deref(), Some("1000:2000"));
        assert_eq!(hc.group_add, Some(vec!["5".to_string(), "6".to_string()]));
        assert_eq!(hc.cap_add, Some(vec!["CAP_NET_ADMIN".to_string()]));
        assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]));
        assert!(
            hc.security_opt
                .unwrap()
                .contains(&"no-new-privileges".to_string())
        );
    }

    #[test]
    fn an_absent_sandbox_context_is_unconfined() {
        let mut hc = HostConfig::default();
        let user = apply_sandbox_security(None, &mut hc).unwrap();
        assert_eq!(user, None);
        assert_eq!(
            hc.security_opt,
            Some(vec!["seccomp=unconfined".to_string()])
        );
        let mut hc = HostConfig::default();
        let mut user = None;
        apply_container_security(None, &mut user, &mut hc).unwrap();
        assert!(
            hc.security_opt
                .unwrap_or_default()
                .contains(&"seccomp=unconfined".to_string())
        );
    }

    #[test]
    fn group_without_user_is_invalid() {
        let sc = cri::LinuxContainerSecurityContext {
            run_as_group: Some(cri::Int64Value { value: 1 }),
            ..Default::default()
        };
        let mut user = None;
        let mut hc = HostConfig::default();
        assert!(apply_container_security(Some(&sc), &mut user, &mut hc).is_err());
    }
}
