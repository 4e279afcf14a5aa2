//! `[container]` seccomp and no_new_privs cases: no_new_privs; seccomp absent, unconfined and
//! runtime default; a localhost profile; the deprecated `seccomp_profile_path` forms.

use cri_proto::runtime::v1 as cri;

use super::common::{container, exec, exec_out, in_sandbox, security};
use crate::conformance::{CaseError, CaseResult, Ctx};
use crate::{ensure, ensure_eq};

/// A field of `/proc/self/status` in the container.
async fn proc_status(ctx: &mut Ctx, id: &str, field: &str) -> Result<String, CaseError> {
    let line = exec_out(ctx, id, &format!("grep '^{field}:' /proc/self/status")).await?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string())
}

pub(super) async fn container_nnp_seccomp(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-sec",
        |_| {},
        |mut ctx, id, cfg| async move {
            let nnp = container(
                &mut ctx,
                &id,
                &cfg,
                "nnp",
                "sleep 3600",
                |c| security(c, |s| s.no_new_privs = true),
                true,
            )
            .await?;
            ensure_eq!(
                proc_status(&mut ctx, &nnp, "NoNewPrivs").await?,
                "1".to_string(),
                "no_new_privs"
            );
            let profile = |t: cri::security_profile::ProfileType| {
                move |c: &mut cri::ContainerConfig| {
                    security(c, |s| {
                        s.seccomp = Some(cri::SecurityProfile {
                            profile_type: t as i32,
                            localhost_ref: String::new(),
                        })
                    })
                }
            };
            // No security context at all: CRI's default is unconfined, not the runtime's
            // default profile (upstream dockershim and containerd agree).
            let absent = container(
                &mut ctx,
                &id,
                &cfg,
                "absent",
                "sleep 3600",
                |c| {
                    if let Some(l) = c.linux.as_mut() {
                        l.security_context = None;
                    }
                },
                true,
            )
            .await?;
            ensure_eq!(
                proc_status(&mut ctx, &absent, "Seccomp").await?,
                "0".to_string(),
                "seccomp with no security context"
            );
            let unconfined = container(
                &mut ctx,
                &id,
                &cfg,
                "unconfined",
                "sleep 3600",
                profile(cri::security_profile::ProfileType::Unconfined),
                true,
            )
            .await?;
            ensure_eq!(
                proc_status(&mut ctx, &unconfined, "Seccomp").await?,
                "0".to_string(),
                "seccomp unconfined"
            );
            let default = container(
                &mut ctx,
                &id,
                &cfg,
                "rtdefault",
                "sleep 3600",
                profile(cri::security_profile::ProfileType::RuntimeDefault),
                true,
            )
            .await?;
            ensure_eq!(
                proc_status(&mut ctx, &default, "Seccomp").await?,
                "2".to_string(),
                "seccomp runtime/default (filter mode)"
            );
            Ok(())
        },
    )
    .await
}

/// A seccomp profile allowing everything but mkdir/mkdirat (EPERM).
const NO_MKDIR_PROFILE: &str = r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}"#;

pub(super) async fn container_seccomp_localhost(ctx: Ctx) -> CaseResult {
    let dir = ctx.settings.log_root.join("seccomp");
    std::fs::create_dir_all(&dir).map_err(|e| CaseError::Fail(format!("profile dir: {e}")))?;
    let profile = dir.join(format!(
        "no-mkdir-{}.json",
        crate::fixtures::unique_name("p")
    ));
    std::fs::write(&profile, NO_MKDIR_PROFILE)
        .map_err(|e| CaseError::Fail(format!("writing the profile: {e}")))?;
    let path = profile.display().to_string();
    in_sandbox(
        &ctx,
        "cf-seclocal",
        |_| {},
        |mut ctx, id, cfg| async move {
            let c = container(
                &mut ctx,
                &id,
                &cfg,
                "local",
                "sleep 3600",
                |c| {
                    security(c, |s| {
                        s.seccomp = Some(cri::SecurityProfile {
                            profile_type: cri::security_profile::ProfileType::Localhost as i32,
                            localhost_ref: path,
                        })
                    })
                },
                true,
            )
            .await?;
            ensure_eq!(
                proc_status(&mut ctx, &c, "Seccomp").await?,
                "2".to_string(),
                "seccomp filter mode"
            );
            let r = exec(&mut ctx, &c, "mkdir /tmp/denied").await?;
            ensure!(
                r.exit_code != 0,
                "mkdir succeeded under a profile denying it"
            );
            ensure!(
                exec(&mut ctx, &c, "touch /tmp/allowed").await?.exit_code == 0,
                "other syscalls are allowed"
            );
            Ok(())
        },
    )
    .await
}

/// The deprecated `seccomp_profile_path` (what critest v1.26.1 sends): `localhost/<file>`
/// applies the file, in the sandbox too; `unconfined` and `docker/default` mean what they say;
/// a bare file path (critest's "should not support a custom seccomp profile without using
/// localhost/ as a prefix") is refused by CreateContainer.
#[allow(deprecated)]
pub(super) async fn container_seccomp_profile_path(ctx: Ctx) -> CaseResult {
    let dir = ctx.settings.log_root.join("seccomp");
    std::fs::create_dir_all(&dir).map_err(|e| CaseError::Fail(format!("profile dir: {e}")))?;
    let profile = dir.join(format!(
        "no-mkdir-{}.json",
        crate::fixtures::unique_name("p")
    ));
    std::fs::write(&profile, NO_MKDIR_PROFILE)
        .map_err(|e| CaseError::Fail(format!("writing the profile: {e}")))?;
    let path = profile.display().to_string();
    let local = format!("localhost/{path}");
    let sandbox_profile = local.clone();
    in_sandbox(
        &ctx,
        "cf-secpath",
        |c| {
            c.linux
                .get_or_insert_with(Default::default)
                .security_context
                .get_or_insert_with(Default::default)
                .seccomp_profile_path = sandbox_profile;
        },
        |mut ctx, id, cfg| async move {
            let with_path = |p: String| {
                move |c: &mut cri::ContainerConfig| security(c, |s| s.seccomp_profile_path = p)
            };
            let bare = container(
                &mut ctx,
                &id,
                &cfg,
                "bare",
                "sleep 3600",
                with_path(path.clone()),
                false,
            )
            .await;
            ensure!(
                bare.is_err(),
                "CreateContainer with seccomp_profile_path {path:?} (no localhost/) succeeded"
            );
            let c = container(
                &mut ctx,
                &id,
                &cfg,
                "local",
                "sleep 3600",
                with_path(local),
                true,
            )
            .await?;
            ensure_eq!(
                proc_status(&mut ctx, &c, "Seccomp").await?,
                "2".to_string(),
                "seccomp mode under localhost/<file>"
            );
            let r = exec(&mut ctx, &c, "mkdir /tmp/denied").await?;
            ensure!(
                r.exit_code != 0,
                "mkdir succeeded under a profile denying it"
            );
            for (name, p, mode) in [
                ("unconf", "unconfined", "0"),
                ("dockerdef", "docker/default", "2"),
            ] {
                let c = container(
                    &mut ctx,
                    &id,
                    &cfg,
                    name,
                    "sleep 3600",
                    with_path(p.into()),
                    true,
                )
                .await?;
                ensure_eq!(
                    proc_status(&mut ctx, &c, "Seccomp").await?,
                    mode.to_string(),
                    format!("seccomp mode under {p:?}")
                );
            }
            Ok(())
        },
    )
    .await
}
