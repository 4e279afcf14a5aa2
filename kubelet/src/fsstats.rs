//! What the node's filesystems and memory hold (upstream cAdvisor's `fs` and `machine` info, as
//! far as the kubelet needs it): statvfs(3) of a filesystem, the disk use of a directory tree,
//! and `/proc/meminfo` fields. Vocabulary layer: imports nothing from the crate.

use std::path::Path;

/// One field of a `/proc/meminfo` text (`MemTotal`, `MemAvailable`, …), in bytes.
pub fn meminfo_field(meminfo: &str, name: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes (0 when missing).
pub fn mem_total(meminfo: &str) -> u64 {
    meminfo_field(meminfo, "MemTotal").unwrap_or(0)
}

/// The node's `/proc/meminfo` (empty when unreadable).
pub fn read_meminfo() -> String {
    std::fs::read_to_string("/proc/meminfo").unwrap_or_default()
}

/// What statvfs(3) says of a filesystem: bytes and inodes, total and available.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsStats {
    pub capacity: u64,
    pub available: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// The filesystem holding `path` (statvfs).
pub fn fs_stats(path: &Path) -> Option<FsStats> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs(3) with a valid NUL-terminated path and a zeroed out-struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: see above; `st` outlives the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize;
    Some(FsStats {
        capacity: st.f_blocks * frsize,
        available: st.f_bavail * frsize,
        inodes: st.f_files,
        inodes_free: st.f_favail,
    })
}

/// (capacity, available) bytes of the filesystem holding `path` (statvfs).
pub fn fs_capacity(path: &Path) -> Option<(u64, u64)> {
    fs_stats(path).map(|s| (s.capacity, s.available))
}

/// The device number of the filesystem holding `path`.
pub fn device_of(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.dev())
}

/// Bytes and files under `dir`, not crossing into other filesystems (a Memory emptyDir
/// counts as memory, not disk).
pub fn dir_usage(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let Some(dev) = device_of(dir) else {
        return (0, 0);
    };
    let (mut bytes, mut files) = (0u64, 0u64);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(m) = e.path().symlink_metadata() else {
                continue;
            };
            if m.dev() != dev {
                continue;
            }
            files += 1;
            bytes += m.blocks() * 512;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    (bytes, files)
}

/// Upstream `MetricsStatFS` (`pkg/volume/metrics_statfs.go`, through `fs.Info`): statfs(2) of
/// the volume's path, in bytes and inodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeFsStats {
    /// `f_blocks * f_bsize`.
    pub capacity: u64,
    /// `f_bavail * f_bsize`.
    pub available: u64,
    /// `(f_blocks - f_bfree) * f_bsize`.
    pub used: u64,
    /// `f_files`.
    pub inodes: u64,
    /// `f_ffree`.
    pub inodes_free: u64,
    /// `f_files - f_ffree`.
    pub inodes_used: u64,
}

impl VolumeFsStats {
    /// The figures of one statfs(2) answer, as upstream's `fs.Info` computes them.
    pub fn from_statfs(
        blocks: u64,
        bfree: u64,
        bavail: u64,
        bsize: u64,
        files: u64,
        ffree: u64,
    ) -> Self {
        Self {
            capacity: blocks.saturating_mul(bsize),
            available: bavail.saturating_mul(bsize),
            used: blocks.saturating_sub(bfree).saturating_mul(bsize),
            inodes: files,
            inodes_free: ffree,
            inodes_used: files.saturating_sub(ffree),
        }
    }
}

/// [`VolumeFsStats`] of the filesystem holding `path` (statfs(2)); `None` when it cannot be
/// read.
pub fn volume_fs_stats(path: &Path) -> Option<VolumeFsStats> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs(2) with a valid NUL-terminated path and a zeroed out-struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: see above; `st` outlives the call.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    Some(VolumeFsStats::from_statfs(
        st.f_blocks as u64,
        st.f_bfree as u64,
        st.f_bavail as u64,
        n(st.f_bsize as i64),
        st.f_files as u64,
        st.f_ffree as u64,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_stats_follow_upstreams_statfs_arithmetic() {
        // 2048 blocks of 4 KiB, 100 free of which 90 available to users; 1000 inodes, 990 free.
        let s = VolumeFsStats::from_statfs(2048, 100, 90, 4096, 1000, 990);
        assert_eq!(s.capacity, 2048 * 4096);
        assert_eq!(s.available, 90 * 4096);
        assert_eq!(s.used, (2048 - 100) * 4096);
        assert_eq!((s.inodes, s.inodes_free, s.inodes_used), (1000, 990, 10));
    }

    #[test]
    fn volume_stats_of_a_real_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = volume_fs_stats(dir.path()).expect("statfs");
        assert!(s.capacity > 0 && s.available <= s.capacity && s.used <= s.capacity);
        assert_eq!(s.inodes_used, s.inodes - s.inodes_free);
        assert_eq!(volume_fs_stats(&dir.path().join("missing")), None);
    }
}
