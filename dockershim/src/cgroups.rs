//! CPU and memory statistics read straight from a container's cgroup files instead of Docker's
//! stats API, which costs Docker a round of work per container (a one-shot stats call takes
//! milliseconds; 300 of them make ListContainerStats take seconds). The cgroup of a container
//! is found once from `/proc/<pid>/cgroup` of its init process (so any cgroup parent and driver
//! work, v1 and v2) and remembered by container id; [`CgroupPaths`] knows where the files are and
//! [`read_sample`] turns them into the same shape Docker's stats give, so one conversion serves
//! both sources.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bollard::models::ContainerStatsResponse;
use bollard::models::{ContainerCpuStats, ContainerCpuUsage, ContainerMemoryStats};
use parking_lot::RwLock;

/// Where the cgroup filesystem is mounted.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The cgroup directories of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupPaths {
    /// cgroup v1: the cpuacct and memory controllers' directories.
    V1 { cpuacct: PathBuf, memory: PathBuf },
    /// cgroup v2: the unified directory.
    V2 { dir: PathBuf },
}

/// Finds a process's cgroup directories from the text of `/proc/<pid>/cgroup`.
pub fn paths_from_proc(table: &str, root: &Path) -> Option<CgroupPaths> {
    let mut cpuacct = None;
    let mut memory = None;
    let mut unified = None;
    for line in table.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if controllers.is_empty() {
            unified = Some(root.join(rel));
            continue;
        }
        let names: Vec<&str> = controllers.split(',').collect();
        if names.contains(&"cpuacct") {
            let mount = [root.join(controllers), root.join("cpuacct")]
                .into_iter()
                .find(|m| m.exists())
                .unwrap_or_else(|| root.join("cpuacct"));
            cpuacct = Some(mount.join(rel));
        }
        if names.contains(&"memory") {
            memory = Some(root.join(controllers).join(rel));
        }
    }
    match (cpuacct, memory, unified) {
        (Some(cpuacct), Some(memory), _) => Some(CgroupPaths::V1 { cpuacct, memory }),
        (None, None, Some(dir)) => Some(CgroupPaths::V2 { dir }),
        _ => None,
    }
}

fn read_u64(path: &Path) -> std::io::Result<u64> {
    let text = std::fs::read_to_string(path)?;
    let t = text.trim();
    if t == "max" {
        return Ok(u64::MAX);
    }
    t.parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// `key value` lines (memory.stat, cpu.stat) as a map.
pub fn parse_flat_keyed(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// One sample of a container's CPU and memory, shaped like Docker's stats.
pub fn read_sample(paths: &CgroupPaths) -> std::io::Result<ContainerStatsResponse> {
    let (cpu_ns, usage, limit, stats) = match paths {
        CgroupPaths::V1 { cpuacct, memory } => {
            let cpu = read_u64(&cpuacct.join("cpuacct.usage"))?;
            let usage = read_u64(&memory.join("memory.usage_in_bytes"))?;
            let limit = read_u64(&memory.join("memory.limit_in_bytes"))?;
            let stats = parse_flat_keyed(&std::fs::read_to_string(memory.join("memory.stat"))?);
            (cpu, usage, limit, stats)
        }
        CgroupPaths::V2 { dir } => {
            let cpu_stat = parse_flat_keyed(&std::fs::read_to_string(dir.join("cpu.stat"))?);
            let cpu = cpu_stat
                .get("usage_usec")
                .copied()
                .unwrap_or(0)
                .saturating_mul(1000);
            let usage = read_u64(&dir.join("memory.current"))?;
            let limit = read_u64(&dir.join("memory.max")).unwrap_or(u64::MAX);
            let stats = parse_flat_keyed(&std::fs::read_to_string(dir.join("memory.stat"))?);
            (cpu, usage, limit, stats)
        }
    };
    Ok(ContainerStatsResponse {
        cpu_stats: Some(ContainerCpuStats {
            cpu_usage: Some(ContainerCpuUsage {
                total_usage: Some(cpu_ns),
                ..Default::default()
            }),
            ..Default::default()
        }),
        memory_stats: Some(ContainerMemoryStats {
            usage: Some(usage),
            limit: Some(limit),
            stats: Some(stats),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The cgroup directories of the containers seen so far, by container id.
#[derive(Default)]
pub struct CgroupCache {
    paths: RwLock<HashMap<String, CgroupPaths>>,
}

impl CgroupCache {
    /// The remembered directories of `id`.
    pub fn get(&self, id: &str) -> Option<CgroupPaths> {
        self.paths.read().get(id).cloned()
    }

    /// Finds `id`'s directories through its init process `pid` and remembers them.
    pub fn resolve(&self, id: &str, pid: i64) -> Option<CgroupPaths> {
        let table = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let paths = paths_from_proc(&table, Path::new(CGROUP_ROOT))?;
        self.paths.write().insert(id.to_string(), paths.clone());
        Some(paths)
    }

    /// Forgets `id` (its cgroup is gone).
    pub fn forget(&self, id: &str) {
        self.paths.write().remove(id);
    }

    /// Keeps only the containers `alive` says exist.
    pub fn retain(&self, alive: impl Fn(&str) -> bool) {
        self.paths.write().retain(|id, _| alive(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "12:name=systemd:/docker/abc\n4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n0::/docker/abc\n";
    const V2: &str = "0::/system.slice/docker-abc.scope\n";

    #[test]
    fn v1_tables_give_controller_directories() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(root.path().join("cpu,cpuacct")).expect("mkdir");
        let p = paths_from_proc(V1, root.path()).expect("paths");
        assert_eq!(
            p,
            CgroupPaths::V1 {
                cpuacct: root.path().join("cpu,cpuacct/docker/abc"),
                memory: root.path().join("memory/docker/abc"),
            }
        );
    }

    #[test]
    fn v2_tables_give_the_unified_directory() {
        let p = paths_from_proc(V2, Path::new("/sys/fs/cgroup")).expect("paths");
        assert_eq!(
            p,
            CgroupPaths::V2 {
                dir: PathBuf::from("/sys/fs/cgroup/system.slice/docker-abc.scope")
            }
        );
        assert_eq!(paths_from_proc("garbage", Path::new("/x")), None);
    }

    #[test]
    fn v1_files_become_a_docker_shaped_sample() {
        let root = tempfile::tempdir().expect("tempdir");
        let cpu = root.path().join("cpuacct");
        let mem = root.path().join("memory");
        std::fs::create_dir_all(&cpu).expect("mkdir");
        std::fs::create_dir_all(&mem).expect("mkdir");
        std::fs::write(cpu.join("cpuacct.usage"), "123456789\n").expect("write");
        std::fs::write(mem.join("memory.usage_in_bytes"), "1000\n").expect("write");
        std::fs::write(mem.join("memory.limit_in_bytes"), "9223372036854771712\n").expect("write");
        std::fs::write(
            mem.join("memory.stat"),
            "rss 300\ntotal_inactive_file 200\npgfault 7\n",
        )
        .expect("write");
        let s = read_sample(&CgroupPaths::V1 {
            cpuacct: cpu,
            memory: mem,
        })
        .expect("sample");
        assert_eq!(
            s.cpu_stats
                .and_then(|c| c.cpu_usage)
                .and_then(|u| u.total_usage),
            Some(123456789)
        );
        let m = s.memory_stats.expect("memory");
        assert_eq!(m.usage, Some(1000));
        assert_eq!(
            m.stats.and_then(|s| s.get("total_inactive_file").copied()),
            Some(200)
        );
    }

    #[test]
    fn v2_files_become_a_docker_shaped_sample() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("cpu.stat"), "usage_usec 5\nuser_usec 3\n").expect("w");
        std::fs::write(dir.path().join("memory.current"), "4096\n").expect("w");
        std::fs::write(dir.path().join("memory.max"), "max\n").expect("w");
        std::fs::write(
            dir.path().join("memory.stat"),
            "anon 1024\ninactive_file 2048\n",
        )
        .expect("w");
        let s = read_sample(&CgroupPaths::V2 {
            dir: dir.path().to_path_buf(),
        })
        .expect("sample");
        assert_eq!(
            s.cpu_stats
                .and_then(|c| c.cpu_usage)
                .and_then(|u| u.total_usage),
            Some(5000)
        );
        assert_eq!(s.memory_stats.and_then(|m| m.limit), Some(u64::MAX));
    }

    #[test]
    fn a_missing_cgroup_is_an_error() {
        let gone = CgroupPaths::V2 {
            dir: PathBuf::from("/nonexistent/cgroup"),
        };
        assert!(read_sample(&gone).is_err());
    }
}
