//! `[container]` security-context cases: read-only root filesystem, run as user / group and
//! supplemental groups, the image's own user and run_as_username, capabilities (add, drop, drop
//! ALL), masked and read-only paths, and privileged containers (skipped where the host cannot run
//! them).

use cri_proto::runtime::v1 as cri;

use super::common::{container, exec, exec_out, in_sandbox, pull, security, spec};
use crate::conformance::{CaseError, CaseResult, Ctx};
use crate::{ensure, ensure_eq};

pub(super) async fn container_readonly_rootfs(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-ro",
        |_| {},
        |mut ctx, id, cfg| async move {
            let c = container(
                &mut ctx,
                &id,
                &cfg,
                "ro",
                "sleep 3600",
                |c| security(c, |s| s.readonly_rootfs = true),
                true,
            )
            .await?;
            let r = exec(&mut ctx, &c, "touch /should-fail").await?;
            ensure!(
                r.exit_code != 0,
                "writing to a read-only root filesystem succeeded"
            );
            Ok(())
        },
    )
    .await
}

pub(super) async fn container_run_as(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-user",
        |_| {},
        |mut ctx, id, cfg| async move {
            let tweak = |c: &mut cri::ContainerConfig| {
                security(c, |s| {
                    s.run_as_user = Some(cri::Int64Value { value: 1234 });
                    s.run_as_group = Some(cri::Int64Value { value: 2345 });
                    s.supplemental_groups = vec![3456];
                })
            };
            let c = container(&mut ctx, &id, &cfg, "user", "sleep 3600", tweak, true).await?;
            ensure_eq!(
                exec_out(&mut ctx, &c, "id -u").await?,
                "1234".to_string(),
                "uid"
            );
            ensure_eq!(
                exec_out(&mut ctx, &c, "id -g").await?,
                "2345".to_string(),
                "gid"
            );
            let groups = exec_out(&mut ctx, &c, "id -G").await?;
            ensure!(
                groups.split_whitespace().any(|g| g == "3456"),
                "supplemental groups {groups:?}"
            );
            Ok(())
        },
    )
    .await
}

/// `CapEff` of the container's shell, as a number.
async fn cap_eff(ctx: &mut Ctx, id: &str) -> Result<u64, CaseError> {
    let line = exec_out(ctx, id, "grep CapEff /proc/self/status").await?;
    let hex = line.split_whitespace().nth(1).unwrap_or_default();
    u64::from_str_radix(hex, 16).map_err(|e| CaseError::Fail(format!("CapEff {line:?}: {e}")))
}

pub(super) async fn container_capabilities(ctx: Ctx) -> CaseResult {
    // Bits of the capabilities used (linux/capability.h).
    const CHOWN: u64 = 1 << 0;
    const NET_RAW: u64 = 1 << 13;
    const NET_ADMIN: u64 = 1 << 12;
    in_sandbox(
        &ctx,
        "cf-caps",
        |_| {},
        |mut ctx, id, cfg| async move {
            let default =
                container(&mut ctx, &id, &cfg, "default", "sleep 3600", |_| {}, true).await?;
            let d = cap_eff(&mut ctx, &default).await?;
            ensure!(d & CHOWN != 0, "the default set has CHOWN: {d:#x}");
            ensure!(
                d & NET_ADMIN == 0,
                "the default set lacks NET_ADMIN: {d:#x}"
            );
            let changed = container(
                &mut ctx,
                &id,
                &cfg,
                "changed",
                "sleep 3600",
                |c| {
                    security(c, |s| {
                        s.capabilities = Some(cri::Capability {
                            add_capabilities: vec!["NET_ADMIN".into()],
                            drop_capabilities: vec!["NET_RAW".into()],
                            ..Default::default()
                        })
                    })
                },
                true,
            )
            .await?;
            let ch = cap_eff(&mut ctx, &changed).await?;
            ensure!(ch & NET_ADMIN != 0, "NET_ADMIN added: {ch:#x}");
            ensure!(ch & NET_RAW == 0, "NET_RAW dropped: {ch:#x}");
            let minimal = container(
                &mut ctx,
                &id,
                &cfg,
                "minimal",
                "sleep 3600",
                |c| {
                    security(c, |s| {
                        s.capabilities = Some(cri::Capability {
                            add_capabilities: vec!["CHOWN".into()],
                            drop_capabilities: vec!["ALL".into()],
                            ..Default::default()
                        })
                    })
                },
                true,
            )
            .await?;
            ensure_eq!(
                cap_eff(&mut ctx, &minimal).await?,
                CHOWN,
                "drop ALL, add CHOWN"
            );
            Ok(())
        },
    )
    .await
}

pub(super) async fn container_image_user(ctx: Ctx) -> CaseResult {
    let registry = ctx.settings.registry.clone();
    in_sandbox(
        &ctx,
        "cf-iuser",
        |_| {},
        |mut ctx, id, cfg| async move {
            // (image tag, `id -u`, `id -g`) the image's own user gives.
            for (tag, uid, gid) in [
                ("uid-gid", "1004", "1005"),
                ("name", "1003", "1003"),
                ("name-group", "1003", "1006"),
            ] {
                let image = format!("{registry}/busybox-user:{tag}");
                pull(&mut ctx, &image, None).await?;
                let c = container(
                    &mut ctx,
                    &id,
                    &cfg,
                    &format!("u-{tag}"),
                    "sleep 3600",
                    |c| {
                        c.image = spec(&image);
                    },
                    true,
                )
                .await?;
                ensure_eq!(
                    exec_out(&mut ctx, &c, "id -u").await?,
                    uid.to_string(),
                    format!("uid in {image}")
                );
                ensure_eq!(
                    exec_out(&mut ctx, &c, "id -g").await?,
                    gid.to_string(),
                    format!("gid in {image}")
                );
            }
            // run_as_username: a user of the image's /etc/passwd.
            let c = container(
                &mut ctx,
                &id,
                &cfg,
                "by-name",
                "sleep 3600",
                |c| security(c, |s| s.run_as_username = "nobody".into()),
                true,
            )
            .await?;
            ensure_eq!(
                exec_out(&mut ctx, &c, "id -u").await?,
                "65534".to_string(),
                "run_as_username nobody"
            );
            Ok(())
        },
    )
    .await
}

pub(super) async fn container_masked_readonly_paths(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-paths",
        |_| {},
        |mut ctx, id, cfg| async move {
            let c = container(
                &mut ctx,
                &id,
                &cfg,
                "paths",
                "sleep 3600",
                |c| {
                    security(c, |s| {
                        s.masked_paths = vec!["/etc/group".into()];
                        s.readonly_paths = vec!["/tmp".into()];
                    })
                },
                true,
            )
            .await?;
            ensure_eq!(
                exec_out(&mut ctx, &c, "cat /etc/group | wc -c").await?,
                "0".to_string(),
                "a masked file reads empty"
            );
            let r = exec(&mut ctx, &c, "touch /tmp/x").await?;
            ensure!(r.exit_code != 0, "writing under a read-only path succeeded");
            Ok(())
        },
    )
    .await
}

/// What the test bed's host-limit probe says the host cannot do (none outside the test bed).
fn host_cannot(what: &str) -> bool {
    std::fs::read_to_string("/run/cri-testbed/hostlimits").is_ok_and(|s| {
        s.lines()
            .any(|l| l.trim() == format!("CRI_TESTBED_{what}=false"))
    })
}

pub(super) async fn container_privileged(ctx: Ctx) -> CaseResult {
    if host_cannot("CAN_RUN_PRIVILEGED") {
        return Err(CaseError::Skip(
            "this host cannot run privileged containers (test bed probe: Docker's `unable to apply caps`)".into(),
        ));
    }
    in_sandbox(
        &ctx,
        "cf-priv",
        |c| {
            let linux = c.linux.get_or_insert_with(Default::default);
            linux
                .security_context
                .get_or_insert_with(Default::default)
                .privileged = true;
        },
        |mut ctx, id, cfg| async move {
            let c = container(
                &mut ctx,
                &id,
                &cfg,
                "priv",
                "sleep 3600",
                |c| security(c, |s| s.privileged = true),
                true,
            )
            .await?;
            // Every capability, and the host's devices.
            let eff = cap_eff(&mut ctx, &c).await?;
            ensure!(eff.count_ones() >= 38, "privileged CapEff {eff:#x}");
            exec_out(&mut ctx, &c, "ls /dev/kmsg").await?;
            Ok(())
        },
    )
    .await
}
