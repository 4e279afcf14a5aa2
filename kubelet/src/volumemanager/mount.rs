//! Mount points under the kubelet's directories (upstream `k8s.io/mount-utils`, the parts the
//! volume plugins use): which directories are mounted (`/proc/self/mountinfo`) and unmounting
//! everything under a pod directory before it is removed.

use std::path::{Path, PathBuf};

/// Mount points (from `/proc/self/mountinfo`) at or under `dir`.
pub(super) fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(m.replace("\\040", " ")))
        .filter(|m| m.starts_with(dir))
        .collect()
}

/// Is `dir` a mount point?
pub fn is_mount_point(dir: &Path) -> bool {
    mounts_under(dir).iter().any(|m| m == dir)
}

pub(super) fn c_path(p: &Path) -> Result<std::ffi::CString, String> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(|e| e.to_string())
}

/// Unmount everything mounted under `pod_dir` (deepest first), before the directory is
/// removed (upstream `TearDown` of memory-backed emptyDirs).
pub fn unmount_pod_dir(pod_dir: &Path) {
    let mut mounts = mounts_under(pod_dir);
    mounts.sort_by_key(|m| std::cmp::Reverse(m.as_os_str().len()));
    for m in mounts {
        let Ok(target) = c_path(&m) else { continue };
        // SAFETY: umount2(2) with a valid NUL-terminated path.
        let rc = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        if rc != 0 {
            tracing::warn!(dir = %m.display(), error = %std::io::Error::last_os_error(), "cannot unmount volume");
        } else {
            tracing::info!(dir = %m.display(), "unmounted volume");
        }
    }
}
