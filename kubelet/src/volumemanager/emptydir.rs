//! The emptyDir volume plugin (upstream `pkg/volume/emptydir`): a world-writable directory
//! under the pod directory, or for medium `Memory` a tmpfs mounted there (`size=<sizeLimit>`).

use std::path::Path;

use k8s_openapi::api::core::v1::EmptyDirVolumeSource;

use super::mount::{c_path, is_mount_point};

/// The emptyDir plugin's directory name (upstream `kubernetes.io~empty-dir`).
pub const EMPTY_DIR_PLUGIN: &str = "kubernetes.io~empty-dir";

/// Upstream `setupTmpfs`: mount a tmpfs at `dir` (`size=` when a size limit is given).
fn mount_tmpfs(dir: &Path, size: Option<u64>) -> Result<(), String> {
    if is_mount_point(dir) {
        return Ok(());
    }
    let target = c_path(dir)?;
    let opts = size.map(|s| format!("size={s}")).unwrap_or_default();
    let data = std::ffi::CString::new(opts).map_err(|e| e.to_string())?;
    let fstype = c"tmpfs";
    // SAFETY: mount(2) with valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "mount tmpfs on {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        ));
    }
    tracing::info!(dir = %dir.display(), ?size, "mounted tmpfs for a memory-backed emptyDir");
    Ok(())
}

/// Upstream `SetUp` of the emptyDir plugin: the directory (or tmpfs) with mode 0777, then the
/// pod's `fsGroup` applied to it (upstream once, when the volume is set up; here on every sync
/// whose root does not already have the group, mask and setgid: upstream's `OnRootMismatch`
/// check, so that the containers' files are not walked again).
pub(super) fn set_up(
    ed: &EmptyDirVolumeSource,
    path: &Path,
    fs_group: Option<u32>,
) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path).map_err(|e| e.to_string())?;
    if ed.medium.as_deref() == Some("Memory") {
        let size = ed
            .size_limit
            .as_ref()
            .and_then(|q| crate::resource::parse_quantity_scaled(&q.0, 1.0))
            .and_then(|v| u64::try_from(v).ok())
            .filter(|v| *v > 0);
        mount_tmpfs(path, size)?;
    } else if let Some(m) = ed.medium.as_deref().filter(|m| !m.is_empty()) {
        return Err(format!("emptyDir medium {m:?} is not supported"));
    }
    // Upstream emptyDir directories are world-writable (`setupDir`: chmod only when the
    // permission bits differ, which keeps the setgid bit of an fsGroup).
    let perm = std::fs::metadata(path)
        .map_err(|e| e.to_string())?
        .permissions()
        .mode();
    if perm & 0o777 != 0o777 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))
            .map_err(|e| e.to_string())?;
    }
    match fs_group {
        Some(gid) if super::ownership::requires_permission_change(path, gid, false) => {
            super::ownership::set_volume_ownership(path, fs_group, false)
        }
        _ => Ok(()),
    }
}
