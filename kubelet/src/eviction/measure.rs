//! Measuring the node's signals (upstream `makeSignalObservations` over the summary
//! provider): memory from `/proc/meminfo`, nodefs and imagefs from `statvfs`, PIDs from
//! `pid_max` and `/proc/loadavg`.

use std::path::Path;

use super::api::{Observation, Observations, Signal};
use crate::fsstats::{fs_stats, meminfo_field};

/// `MemTotal` and `MemAvailable` of `/proc/meminfo`, in bytes.
pub fn parse_meminfo(text: &str) -> Option<Observation> {
    Some(Observation {
        available: meminfo_field(text, "MemAvailable")?,
        capacity: meminfo_field(text, "MemTotal")?,
    })
}

/// (bytes, inodes) observations of the filesystem holding `path`.
fn statvfs(path: &Path) -> Option<(Observation, Observation)> {
    let s = fs_stats(path)?;
    Some((
        Observation {
            available: s.available,
            capacity: s.capacity,
        },
        Observation {
            available: s.inodes_free,
            capacity: s.inodes,
        },
    ))
}

/// Signals of the node: memory from `/proc/meminfo`, nodefs from the kubelet's root
/// directory, imagefs from the runtime's image filesystem mountpoint (the nodefs when
/// unknown), PIDs from `pid_max` and the task count of `/proc/loadavg`.
pub fn observe(root_dir: &Path, imagefs: Option<&Path>) -> Observations {
    let mut obs = Observations::new();
    if let Some(m) = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .as_deref()
        .and_then(parse_meminfo)
    {
        obs.insert(Signal::MemoryAvailable, m);
    }
    if let Some((bytes, inodes)) = statvfs(root_dir) {
        obs.insert(Signal::NodeFsAvailable, bytes);
        obs.insert(Signal::NodeFsInodesFree, inodes);
    }
    if let Some((bytes, inodes)) = imagefs.and_then(statvfs).or_else(|| statvfs(root_dir)) {
        obs.insert(Signal::ImageFsAvailable, bytes);
        obs.insert(Signal::ImageFsInodesFree, inodes);
    }
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    let tasks = std::fs::read_to_string("/proc/loadavg").ok().and_then(|s| {
        s.split_whitespace()
            .nth(3)?
            .split_once('/')?
            .1
            .parse::<u64>()
            .ok()
    });
    if let (Some(max), Some(n)) = (pid_max, tasks) {
        obs.insert(
            Signal::PidAvailable,
            Observation {
                available: max.saturating_sub(n),
                capacity: max,
            },
        );
    }
    obs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsstats::dir_usage;

    #[test]
    fn meminfo_parses() {
        let o =
            parse_meminfo("MemTotal:       16384 kB\nMemFree: 1 kB\nMemAvailable:    8192 kB\n")
                .unwrap();
        assert_eq!(o.capacity, 16384 * 1024);
        assert_eq!(o.available, 8192 * 1024);
    }

    #[test]
    fn dir_usage_counts_files() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), vec![1u8; 10000]).unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/b"), b"x").unwrap();
        let (bytes, files) = dir_usage(d.path());
        assert_eq!(files, 3);
        assert!(bytes >= 10000, "{bytes}");
    }
}
