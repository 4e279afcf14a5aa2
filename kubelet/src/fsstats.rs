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
