//! `[container]` mount cases: bind mounts (read-write and read-only), a symlinked host path, and
//! mount propagation private / rslave / rshared, with the mount(2) helpers they need on the host.

use cri_proto::runtime::v1 as cri;

use super::common::{container, cstatus, exec, exec_out, in_sandbox};
use crate::conformance::{CaseError, CaseResult, Ctx};
use crate::{ensure, ensure_eq};

pub(super) async fn container_mounts(ctx: Ctx) -> CaseResult {
    let dir = tempfile::tempdir().map_err(|e| CaseError::Fail(e.to_string()))?;
    std::fs::write(dir.path().join("hello.txt"), "from the host")
        .map_err(|e| CaseError::Fail(e.to_string()))?;
    let host = dir.path().to_string_lossy().into_owned();
    in_sandbox(
        &ctx,
        "cf-mnt",
        |_| {},
        |mut ctx, id, cfg| async move {
            let tweak = |c: &mut cri::ContainerConfig| {
                c.mounts = vec![
                    cri::Mount {
                        container_path: "/rw".into(),
                        host_path: host.clone(),
                        ..Default::default()
                    },
                    cri::Mount {
                        container_path: "/ro".into(),
                        host_path: host.clone(),
                        readonly: true,
                        ..Default::default()
                    },
                ]
            };
            let c = container(&mut ctx, &id, &cfg, "m", "sleep 3600", tweak, true).await?;
            ensure_eq!(
                exec_out(&mut ctx, &c, "cat /ro/hello.txt").await?,
                "from the host".to_string(),
                "file via read-only mount"
            );
            let r = exec(&mut ctx, &c, "touch /ro/x").await?;
            ensure!(
                r.exit_code != 0,
                "writing through a read-only mount succeeded"
            );
            exec_out(&mut ctx, &c, "echo back > /rw/back.txt").await?;
            let back = std::fs::read_to_string(dir.path().join("back.txt")).unwrap_or_default();
            ensure_eq!(
                back.trim(),
                "back",
                "file written through the read-write mount"
            );
            let st = cstatus(&mut ctx, &c).await?;
            let ro = st.mounts.iter().find(|m| m.container_path == "/ro");
            ensure!(
                ro.is_some_and(|m| m.readonly),
                "status mounts lack read-only /ro: {:?}",
                st.mounts
            );
            Ok(())
        },
    )
    .await
}

fn cstr(p: &std::path::Path) -> Result<std::ffi::CString, CaseError> {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
        .map_err(|e| CaseError::Fail(format!("{}: {e}", p.display())))
}

/// mount(2) with no data, as a case error on failure.
fn mount(
    src: &std::path::Path,
    dst: &std::path::Path,
    fstype: &str,
    flags: libc::c_ulong,
) -> Result<(), CaseError> {
    let (s, d, t) = (
        cstr(src)?,
        cstr(dst)?,
        std::ffi::CString::new(fstype).unwrap_or_default(),
    );
    // SAFETY: mount(2) with NUL-terminated strings that outlive the call and no data.
    let rc = unsafe { libc::mount(s.as_ptr(), d.as_ptr(), t.as_ptr(), flags, std::ptr::null()) };
    if rc != 0 {
        return Err(CaseError::Fail(format!(
            "mount {} on {}: {}",
            src.display(),
            dst.display(),
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

fn umount(p: &std::path::Path) {
    if let Ok(c) = cstr(p) {
        // SAFETY: umount2(2) on a NUL-terminated path; failure is harmless here.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Mounts from the host: through a symlinked host path, and with each propagation mode; a
/// mount made on the host afterwards shows in rslave and rshared mounts, not in private ones.
pub(super) async fn container_mount_propagation(ctx: Ctx) -> CaseResult {
    let dir = tempfile::tempdir().map_err(|e| CaseError::Fail(e.to_string()))?;
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("later")).map_err(|e| CaseError::Fail(e.to_string()))?;
    std::fs::write(src.join("hello.txt"), "via the link")
        .map_err(|e| CaseError::Fail(e.to_string()))?;
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&src, &link).map_err(|e| CaseError::Fail(e.to_string()))?;
    // Propagation needs a shared source: make `src` a shared mount of its own.
    mount(&src, &src, "", libc::MS_BIND)?;
    let result = async {
        mount(
            std::path::Path::new("none"),
            &src,
            "",
            libc::MS_SHARED | libc::MS_REC,
        )?;
        let host = src.display().to_string();
        let link_s = link.display().to_string();
        let later = src.join("later");
        in_sandbox(
            &ctx,
            "cf-prop",
            |_| {},
            |mut ctx, id, cfg| async move {
                let m = |path: &str, host_path: &str, p: cri::MountPropagation| cri::Mount {
                    container_path: path.into(),
                    host_path: host_path.into(),
                    propagation: p as i32,
                    ..Default::default()
                };
                let mounts = vec![
                    m(
                        "/linked",
                        &link_s,
                        cri::MountPropagation::PropagationPrivate,
                    ),
                    m("/private", &host, cri::MountPropagation::PropagationPrivate),
                    m(
                        "/slave",
                        &host,
                        cri::MountPropagation::PropagationHostToContainer,
                    ),
                    m(
                        "/shared",
                        &host,
                        cri::MountPropagation::PropagationBidirectional,
                    ),
                ];
                let c = container(
                    &mut ctx,
                    &id,
                    &cfg,
                    "prop",
                    "sleep 3600",
                    |c| c.mounts = mounts,
                    true,
                )
                .await?;
                ensure_eq!(
                    exec_out(&mut ctx, &c, "cat /linked/hello.txt").await?,
                    "via the link".to_string(),
                    "file through a symlinked host path"
                );
                let st = cstatus(&mut ctx, &c).await?;
                for (path, want) in [
                    ("/private", cri::MountPropagation::PropagationPrivate),
                    ("/slave", cri::MountPropagation::PropagationHostToContainer),
                    ("/shared", cri::MountPropagation::PropagationBidirectional),
                ] {
                    let got = st
                        .mounts
                        .iter()
                        .find(|m| m.container_path == path)
                        .map(|m| m.propagation);
                    ensure_eq!(
                        got,
                        Some(want as i32),
                        format!("status propagation of {path}")
                    );
                }
                // A mount made on the host now.
                mount(std::path::Path::new("tmpfs"), &later, "tmpfs", 0)?;
                std::fs::write(later.join("marker"), "propagated")
                    .map_err(|e| CaseError::Fail(e.to_string()))?;
                let slave = exec(&mut ctx, &c, "cat /slave/later/marker").await;
                let shared = exec(&mut ctx, &c, "cat /shared/later/marker").await;
                let private = exec(&mut ctx, &c, "cat /private/later/marker").await;
                umount(&later);
                for (what, r) in [("rslave", slave?), ("rshared", shared?)] {
                    let out = String::from_utf8_lossy(&r.stdout).trim().to_string();
                    ensure_eq!(
                        out,
                        "propagated".to_string(),
                        format!("{what} mount sees the host's new mount")
                    );
                }
                ensure!(
                    private?.exit_code != 0,
                    "a private mount saw the host's new mount"
                );
                Ok(())
            },
        )
        .await
    }
    .await;
    umount(&src.join("later"));
    umount(&src);
    result
}
