//! A pod cgroup's CPU and memory, read as cAdvisor reads a container's (upstream takes a pod's
//! CPU and memory from cAdvisor's stats of its pod cgroup, the pause container and exited
//! containers included): cumulative CPU from `cpu.stat` `usage_usec` (cgroup v2) or
//! `cpuacct.usage` (v1); memory usage, working set (usage minus inactive file pages), RSS and
//! page faults from `memory.current`/`memory.usage_in_bytes` and the hierarchical
//! `memory.stat` figures; the limit when one is set.

use std::path::{Path, PathBuf};

use super::node::flat_keyed;

/// One sample of a cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CgroupSample {
    /// Cumulative CPU usage, core-nanoseconds.
    pub cpu: u64,
    pub memory_usage: u64,
    pub working_set: u64,
    pub rss: Option<u64>,
    pub page_faults: Option<u64>,
    pub major_page_faults: Option<u64>,
    /// The memory limit, when one is set.
    pub memory_limit: Option<u64>,
}

/// The directory of a cgroup the kubelet names as it gives it to the runtime: a cgroupfs path,
/// or a systemd slice (`kubepods-besteffort-pod<uid>.slice` lives under `kubepods.slice/
/// kubepods-besteffort.slice/`).
pub fn cgroup_dir(name: &str) -> PathBuf {
    let name = name.trim_start_matches('/');
    let Some(stem) = name.strip_suffix(".slice").filter(|_| !name.contains('/')) else {
        return PathBuf::from(name);
    };
    let mut dir = PathBuf::new();
    let mut prefix = String::new();
    for part in stem.split('-') {
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(part);
        dir.push(format!("{prefix}.slice"));
    }
    dir
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A limit file's value, `None` for "max" or a value no one sets (v1's unlimited is near 2^63).
fn limit(path: &Path) -> Option<u64> {
    read_u64(path).filter(|v| *v < 1 << 62)
}

/// Reads the cgroup `dir` (relative to the hierarchies) under the cgroup mount `root`.
pub fn read(root: &Path, dir: &Path) -> Option<CgroupSample> {
    if root.join("cgroup.controllers").exists() {
        let d = root.join(dir);
        let cpu = flat_keyed(
            &std::fs::read_to_string(d.join("cpu.stat")).ok()?,
            "usage_usec",
        )?;
        let usage = read_u64(&d.join("memory.current"))?;
        let stat = std::fs::read_to_string(d.join("memory.stat")).ok()?;
        let inactive = flat_keyed(&stat, "inactive_file").unwrap_or(0);
        return Some(CgroupSample {
            cpu: cpu.saturating_mul(1000),
            memory_usage: usage,
            working_set: usage.saturating_sub(inactive),
            rss: flat_keyed(&stat, "anon"),
            page_faults: flat_keyed(&stat, "pgfault"),
            major_page_faults: flat_keyed(&stat, "pgmajfault"),
            memory_limit: limit(&d.join("memory.max")),
        });
    }
    let cpu = ["cpuacct", "cpu,cpuacct", "cpuacct,cpu"]
        .iter()
        .find_map(|c| read_u64(&root.join(c).join(dir).join("cpuacct.usage")))?;
    let m = root.join("memory").join(dir);
    let usage = read_u64(&m.join("memory.usage_in_bytes"))?;
    let stat = std::fs::read_to_string(m.join("memory.stat")).ok()?;
    let inactive = flat_keyed(&stat, "total_inactive_file").unwrap_or(0);
    Some(CgroupSample {
        cpu,
        memory_usage: usage,
        working_set: usage.saturating_sub(inactive),
        rss: flat_keyed(&stat, "total_rss"),
        page_faults: flat_keyed(&stat, "total_pgfault"),
        major_page_faults: flat_keyed(&stat, "total_pgmajfault"),
        memory_limit: limit(&m.join("memory.limit_in_bytes")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemd_slices_nest_by_their_prefixes() {
        assert_eq!(
            cgroup_dir("kubepods-besteffort-pod1_2.slice"),
            PathBuf::from(
                "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1_2.slice"
            )
        );
        assert_eq!(
            cgroup_dir("/kubepods/besteffort/pod1-2"),
            PathBuf::from("kubepods/besteffort/pod1-2")
        );
    }

    #[test]
    fn v1_hierarchies_give_cadvisors_figures() {
        let root = tempfile::tempdir().unwrap();
        let dir = Path::new("kubepods/besteffort/podu1");
        let cpu = root.path().join("cpuacct").join(dir);
        let mem = root.path().join("memory").join(dir);
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::create_dir_all(&mem).unwrap();
        std::fs::write(cpu.join("cpuacct.usage"), "5000000000\n").unwrap();
        std::fs::write(mem.join("memory.usage_in_bytes"), "10000\n").unwrap();
        std::fs::write(mem.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        std::fs::write(
            mem.join("memory.stat"),
            "inactive_file 1\nrss 2\ntotal_inactive_file 3000\ntotal_rss 4000\ntotal_pgfault 5\ntotal_pgmajfault 6\n",
        )
        .unwrap();
        assert_eq!(
            read(root.path(), dir),
            Some(CgroupSample {
                cpu: 5_000_000_000,
                memory_usage: 10000,
                working_set: 7000,
                rss: Some(4000),
                page_faults: Some(5),
                major_page_faults: Some(6),
                memory_limit: None,
            })
        );
        assert_eq!(read(root.path(), Path::new("kubepods/podgone")), None);
    }

    #[test]
    fn the_v2_hierarchy_gives_cadvisors_figures() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cgroup.controllers"), "cpu memory\n").unwrap();
        let dir = Path::new("kubepods/podu1");
        let d = root.path().join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cpu.stat"), "usage_usec 2500\nuser_usec 2000\n").unwrap();
        std::fs::write(d.join("memory.current"), "8192\n").unwrap();
        std::fs::write(d.join("memory.max"), "65536\n").unwrap();
        std::fs::write(
            d.join("memory.stat"),
            "anon 1024\nfile 4096\ninactive_file 4096\npgfault 9\npgmajfault 1\n",
        )
        .unwrap();
        assert_eq!(
            read(root.path(), dir),
            Some(CgroupSample {
                cpu: 2_500_000,
                memory_usage: 8192,
                working_set: 4096,
                rss: Some(1024),
                page_faults: Some(9),
                major_page_faults: Some(1),
                memory_limit: Some(65536),
            })
        );
    }
}
