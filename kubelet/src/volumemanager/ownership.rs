//! Volume ownership for a pod's `securityContext.fsGroup` (upstream `SetVolumeOwnership` in
//! `pkg/volume/volume_linux.go`): every file and directory of the volume gets the group
//! `fsGroup` (`lchown -1:fsGroup`), files `mode | 0440` on read-only volumes (secret,
//! configMap, downwardAPI, projected) or `mode | 0660` on writable ones (emptyDir), directories
//! additionally setgid and `| 0110`; symlinks are not chmodded. Chown and chmod failures are
//! logged, as upstream, not returned; a directory that cannot be read is an error.
//! [`requires_permission_change`] is upstream's `OnRootMismatch` check: the volume's root
//! already has the group, the mask bits and setgid.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// Group read/write for writable volumes (upstream `rwMask`).
const RW_MASK: u32 = 0o660;
/// Group read for read-only volumes (upstream `roMask`).
const RO_MASK: u32 = 0o440;
/// Search for user and group on directories (upstream `execMask`).
const EXEC_MASK: u32 = 0o110;
/// The setgid bit, so that new files inherit the group.
const SETGID: u32 = 0o2000;

/// The pod's `securityContext.fsGroup`.
pub(super) fn pod_fs_group(pod: &k8s_openapi::api::core::v1::Pod) -> Option<u32> {
    pod.spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|sc| sc.fs_group)
        .and_then(|g| u32::try_from(g).ok())
}

/// Upstream `SetVolumeOwnership` (with a nil `fsGroupChangePolicy`: always recursive).
pub(super) fn set_volume_ownership(
    dir: &Path,
    fs_group: Option<u32>,
    read_only: bool,
) -> Result<(), String> {
    let Some(gid) = fs_group else {
        return Ok(());
    };
    let md = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    walk(dir, &md, gid, read_only)?;
    tracing::debug!(dir = %dir.display(), gid, read_only, "set volume ownership");
    Ok(())
}

/// Upstream `walkDeep`: children first, then the directory itself.
fn walk(path: &Path, md: &std::fs::Metadata, gid: u32, read_only: bool) -> Result<(), String> {
    if md.is_dir() {
        let rd = std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for entry in rd {
            let entry = entry.map_err(|e| format!("{}: {e}", path.display()))?;
            let child = entry.path();
            let cmd = std::fs::symlink_metadata(&child)
                .map_err(|e| format!("{}: {e}", child.display()))?;
            walk(&child, &cmd, gid, read_only)?;
        }
    }
    change_file_permission(path, md, gid, read_only);
    Ok(())
}

/// Upstream `changeFilePermission`.
fn change_file_permission(path: &Path, md: &std::fs::Metadata, gid: u32, read_only: bool) {
    if let Err(e) = std::os::unix::fs::lchown(path, None, Some(gid)) {
        tracing::error!(path = %path.display(), error = %e, "Lchown failed");
    }
    if md.file_type().is_symlink() {
        return;
    }
    let mut mask = if read_only { RO_MASK } else { RW_MASK };
    if md.is_dir() {
        mask |= SETGID | EXEC_MASK;
    }
    let mode = (md.mode() & 0o7777) | mask;
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
        tracing::error!(path = %path.display(), error = %e, "chmod failed");
    }
}

/// Upstream `requiresPermissionChange`: false only when the root directory already has the
/// group `gid`, the mask's permission bits and setgid.
pub(super) fn requires_permission_change(root: &Path, gid: u32, read_only: bool) -> bool {
    let Ok(md) = std::fs::metadata(root) else {
        return true;
    };
    if md.gid() != gid || !md.is_dir() {
        return true;
    }
    let perms = (if read_only { RO_MASK } else { RW_MASK }) | EXEC_MASK;
    md.mode() & perms != perms || md.mode() & SETGID == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).expect("stat").mode() & 0o7777
    }

    #[test]
    fn no_fs_group_changes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("f");
        std::fs::write(&f, b"x").expect("write");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o400)).expect("chmod");
        set_volume_ownership(dir.path(), None, true).expect("ownership");
        assert_eq!(mode(&f), 0o400);
    }

    #[test]
    fn masks_for_read_only_and_writable_volumes() {
        // The group is the test's own (chown to it needs no privilege); the root-only gid
        // case is tested in the plugins' tests.
        let dir = tempfile::tempdir().expect("tempdir");
        let gid = std::fs::metadata(dir.path()).expect("stat").gid();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).expect("mkdir");
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let f = sub.join("f");
        std::fs::write(&f, b"x").expect("write");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o400)).expect("chmod");
        std::os::unix::fs::symlink("sub/f", dir.path().join("link")).expect("symlink");
        assert!(requires_permission_change(dir.path(), gid, true));
        set_volume_ownership(dir.path(), Some(gid), true).expect("ownership");
        assert_eq!(mode(&f), 0o440);
        assert_eq!(mode(&sub), 0o2750);
        assert!(!requires_permission_change(dir.path(), gid, true));
        // A writable volume: group read-write.
        set_volume_ownership(dir.path(), Some(gid), false).expect("ownership");
        assert_eq!(mode(&f), 0o660);
        assert_eq!(mode(&sub), 0o2770);
        assert!(!requires_permission_change(dir.path(), gid, false));
        assert!(requires_permission_change(dir.path(), gid + 1, false));
    }
}
