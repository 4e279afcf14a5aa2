//! The cgroup readers (cAdvisor's libcontainer-based `GetStats` and `GetSpec` of a container):
//! one cgroup's CPU usage (total, user, system), CFS bandwidth figures (periods, throttled
//! periods, throttled time), memory (usage, working set, RSS, page cache, swap, failcnt, page
//! faults), processes and threads, block I/O bytes per device, and its spec (CPU period,
//! quota and shares, memory limit), on cgroup v1 (one hierarchy per controller, as
//! `cpu`/`cpuacct` or a joint `cpu,cpuacct`) and v2 (the unified hierarchy, with v1's figures
//! derived as libcontainer derives them: `cpu.weight` back to shares, `anon` as RSS, `file`
//! as cache). A cgroup is named by its path below the hierarchies (`kubepods/burstable/pod…`,
//! empty for the root).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Cumulative CPU time, nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuUsage {
    pub total: u64,
    pub user: u64,
    pub system: u64,
}

/// CFS bandwidth control's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cfs {
    pub periods: u64,
    pub throttled_periods: u64,
    /// Nanoseconds.
    pub throttled_time: u64,
}

/// Memory figures; the `memory.stat` ones hierarchical (the cgroup and its descendants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Memory {
    pub usage: u64,
    /// Usage minus inactive file pages (cAdvisor's working set).
    pub working_set: u64,
    pub rss: u64,
    pub cache: u64,
    pub swap: u64,
    pub failcnt: u64,
    pub pgfault: u64,
    pub pgmajfault: u64,
    /// The cgroup's own page faults (v1's non-`total_` figures; v2 has only the hierarchical).
    pub container_pgfault: u64,
    pub container_pgmajfault: u64,
}

/// Limits (cAdvisor's `ContainerSpec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Spec {
    /// CFS period, microseconds.
    pub cpu_period: u64,
    /// CFS quota, microseconds; `None` when unlimited.
    pub cpu_quota: Option<u64>,
    pub cpu_shares: u64,
    /// `None` when unlimited.
    pub memory_limit: Option<u64>,
}

/// Bytes read and written on one block device (major, minor).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DiskIo {
    pub read: u64,
    pub write: u64,
}

/// One reading of a cgroup.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CgroupStats {
    pub cpu: Option<CpuUsage>,
    pub cfs: Option<Cfs>,
    pub memory: Option<Memory>,
    /// Processes directly in the cgroup (`cgroup.procs`).
    pub processes: Option<u64>,
    /// Tasks in the cgroup and below (`pids.current`).
    pub threads: Option<u64>,
    /// Block I/O per device, by `(major, minor)`.
    pub disk_io: BTreeMap<(u32, u32), DiskIo>,
    pub spec: Spec,
    /// When the cgroup's directory was made (seconds since the epoch).
    pub created: Option<f64>,
}

/// `key value` lines: the value of `key`.
pub fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(char::is_whitespace)?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn read_u64(path: &Path) -> Option<u64> {
    read(path)?.trim().parse().ok()
}

/// A limit, `None` for "max" or v1's unlimited (near 2^63; cAdvisor's `maxMemorySize` 2^62).
fn limit(v: Option<u64>) -> Option<u64> {
    v.filter(|v| *v < 1 << 62)
}

fn count_lines(path: &Path) -> Option<u64> {
    Some(read(path)?.lines().filter(|l| !l.trim().is_empty()).count() as u64)
}

fn created(dir: &Path) -> Option<f64> {
    let m = std::fs::metadata(dir).ok()?.modified().ok()?;
    Some(m.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_secs_f64())
}

/// Which cgroup layout `root` (the cgroup mount, `/sys/fs/cgroup`) has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hierarchy {
    V1,
    V2,
}

impl Hierarchy {
    pub fn of(root: &Path) -> Hierarchy {
        if root.join("cgroup.controllers").exists() {
            Hierarchy::V2
        } else {
            Hierarchy::V1
        }
    }
}

/// The directory of controller `controller`'s hierarchy that holds `dir` on v1 (its own
/// mount, or a joint one such as `cpu,cpuacct`); the unified directory on v2.
pub fn controller_dir(root: &Path, controller: &str, dir: &Path) -> Option<PathBuf> {
    if Hierarchy::of(root) == Hierarchy::V2 {
        return Some(root.join(dir));
    }
    let joint: &[&str] = match controller {
        "cpu" | "cpuacct" => &["cpu,cpuacct", "cpuacct,cpu"],
        _ => &[],
    };
    std::iter::once(controller)
        .chain(joint.iter().copied())
        .map(|c| root.join(c).join(dir))
        .find(|d| d.is_dir())
}

/// Nanoseconds per USER_HZ tick (`cpuacct.stat`'s unit).
fn ns_per_tick() -> u64 {
    // SAFETY: sysconf(3) has no preconditions.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(tck)
        .ok()
        .filter(|t| *t > 0)
        .map_or(10_000_000, |t| 1_000_000_000 / t)
}

/// `blkio.throttle.io_service_bytes` lines (`8:0 Read 4096`) by device.
fn v1_disk_io(text: &str) -> BTreeMap<(u32, u32), DiskIo> {
    let mut out: BTreeMap<(u32, u32), DiskIo> = BTreeMap::new();
    for l in text.lines() {
        let mut f = l.split_whitespace();
        let (Some(dev), Some(op), Some(v)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let (Some((ma, mi)), Ok(v)) = (dev.split_once(':'), v.parse::<u64>()) else {
            continue;
        };
        let (Ok(ma), Ok(mi)) = (ma.parse(), mi.parse()) else {
            continue;
        };
        let e = out.entry((ma, mi)).or_default();
        match op {
            "Read" => e.read = v,
            "Write" => e.write = v,
            _ => {}
        }
    }
    out
}

/// `io.stat` lines (`8:0 rbytes=4096 wbytes=0 …`) by device.
fn v2_disk_io(text: &str) -> BTreeMap<(u32, u32), DiskIo> {
    let mut out = BTreeMap::new();
    for l in text.lines() {
        let mut f = l.split_whitespace();
        let Some((ma, mi)) = f.next().and_then(|d| d.split_once(':')) else {
            continue;
        };
        let (Ok(ma), Ok(mi)) = (ma.parse(), mi.parse()) else {
            continue;
        };
        let mut io = DiskIo::default();
        for kv in f {
            match kv.split_once('=') {
                Some(("rbytes", v)) => io.read = v.parse().unwrap_or(0),
                Some(("wbytes", v)) => io.write = v.parse().unwrap_or(0),
                _ => {}
            }
        }
        out.insert((ma, mi), io);
    }
    out
}

/// cgroup v2's `cpu.weight` as v1 shares (libcontainer's `ConvertCPUSharesToCgroupV2Value`
/// inverted, as cAdvisor reports it).
fn weight_to_shares(weight: u64) -> u64 {
    if weight == 0 {
        return 0;
    }
    2 + (weight - 1) * 262142 / 9999
}

/// Reads cgroup `dir` under the cgroup mount `root`; `None` when it does not exist.
pub fn read_cgroup(root: &Path, dir: &Path) -> Option<CgroupStats> {
    match Hierarchy::of(root) {
        Hierarchy::V2 => read_v2(root, dir),
        Hierarchy::V1 => read_v1(root, dir),
    }
}

fn read_v1(root: &Path, dir: &Path) -> Option<CgroupStats> {
    let cpuacct = controller_dir(root, "cpuacct", dir);
    let cpu_dir = controller_dir(root, "cpu", dir);
    let mem = controller_dir(root, "memory", dir);
    if cpuacct.is_none() && cpu_dir.is_none() && mem.is_none() {
        return None;
    }
    let mut s = CgroupStats::default();
    if let Some(d) = &cpuacct {
        let stat = read(&d.join("cpuacct.stat")).unwrap_or_default();
        let tick = ns_per_tick();
        s.cpu = read_u64(&d.join("cpuacct.usage")).map(|total| CpuUsage {
            total,
            user: keyed(&stat, "user").unwrap_or(0).saturating_mul(tick),
            system: keyed(&stat, "system").unwrap_or(0).saturating_mul(tick),
        });
        s.created = created(d);
    }
    if let Some(d) = &cpu_dir {
        if let Some(stat) = read(&d.join("cpu.stat")) {
            s.cfs = Some(Cfs {
                periods: keyed(&stat, "nr_periods").unwrap_or(0),
                throttled_periods: keyed(&stat, "nr_throttled").unwrap_or(0),
                throttled_time: keyed(&stat, "throttled_time").unwrap_or(0),
            });
        }
        let quota = read(&d.join("cpu.cfs_quota_us")).and_then(|q| q.trim().parse::<i64>().ok());
        s.spec.cpu_period = read_u64(&d.join("cpu.cfs_period_us")).unwrap_or(0);
        s.spec.cpu_quota = quota.and_then(|q| u64::try_from(q).ok());
        s.spec.cpu_shares = read_u64(&d.join("cpu.shares")).unwrap_or(0);
        s.processes = count_lines(&d.join("cgroup.procs"));
    }
    if let Some(d) = &mem
        && let Some(usage) = read_u64(&d.join("memory.usage_in_bytes"))
    {
        let stat = read(&d.join("memory.stat")).unwrap_or_default();
        let k = |key| keyed(&stat, key).unwrap_or(0);
        let swap = read_u64(&d.join("memory.memsw.usage_in_bytes"))
            .map_or(0, |memsw| memsw.saturating_sub(usage));
        s.memory = Some(Memory {
            usage,
            working_set: usage.saturating_sub(k("total_inactive_file")),
            rss: k("total_rss"),
            cache: k("total_cache"),
            swap,
            failcnt: read_u64(&d.join("memory.failcnt")).unwrap_or(0),
            pgfault: k("total_pgfault"),
            pgmajfault: k("total_pgmajfault"),
            container_pgfault: k("pgfault"),
            container_pgmajfault: k("pgmajfault"),
        });
        s.spec.memory_limit = limit(read_u64(&d.join("memory.limit_in_bytes")));
    }
    if let Some(d) = controller_dir(root, "pids", dir) {
        s.threads = read_u64(&d.join("pids.current"));
    }
    if let Some(d) = controller_dir(root, "blkio", dir) {
        s.disk_io =
            v1_disk_io(&read(&d.join("blkio.throttle.io_service_bytes")).unwrap_or_default());
    }
    Some(s)
}

fn read_v2(root: &Path, dir: &Path) -> Option<CgroupStats> {
    let d = root.join(dir);
    if !d.is_dir() {
        return None;
    }
    let mut s = CgroupStats {
        created: created(&d),
        ..Default::default()
    };
    if let Some(stat) = read(&d.join("cpu.stat")) {
        let k = |key| keyed(&stat, key).unwrap_or(0).saturating_mul(1000);
        s.cpu = keyed(&stat, "usage_usec").map(|_| CpuUsage {
            total: k("usage_usec"),
            user: k("user_usec"),
            system: k("system_usec"),
        });
        if keyed(&stat, "nr_periods").is_some() {
            s.cfs = Some(Cfs {
                periods: keyed(&stat, "nr_periods").unwrap_or(0),
                throttled_periods: keyed(&stat, "nr_throttled").unwrap_or(0),
                throttled_time: k("throttled_usec"),
            });
        }
    }
    if let Some(max) = read(&d.join("cpu.max")) {
        let mut f = max.split_whitespace();
        s.spec.cpu_quota = f.next().and_then(|q| q.parse().ok());
        s.spec.cpu_period = f.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    }
    s.spec.cpu_shares = read_u64(&d.join("cpu.weight")).map_or(0, weight_to_shares);
    if let Some(usage) = read_u64(&d.join("memory.current")) {
        let stat = read(&d.join("memory.stat")).unwrap_or_default();
        let k = |key| keyed(&stat, key).unwrap_or(0);
        let events = read(&d.join("memory.events")).unwrap_or_default();
        s.memory = Some(Memory {
            usage,
            working_set: usage.saturating_sub(k("inactive_file")),
            rss: k("anon"),
            cache: k("file"),
            swap: read_u64(&d.join("memory.swap.current")).unwrap_or(0),
            failcnt: keyed(&events, "max").unwrap_or(0),
            pgfault: k("pgfault"),
            pgmajfault: k("pgmajfault"),
            container_pgfault: k("pgfault"),
            container_pgmajfault: k("pgmajfault"),
        });
        s.spec.memory_limit = limit(read_u64(&d.join("memory.max")));
    }
    s.processes = count_lines(&d.join("cgroup.procs"));
    s.threads = read_u64(&d.join("pids.current"));
    s.disk_io = v2_disk_io(&read(&d.join("io.stat")).unwrap_or_default());
    Some(s)
}

/// The first process of cgroup `dir` (for its network namespace), from `cgroup.procs`.
pub fn first_pid(root: &Path, dir: &Path) -> Option<i64> {
    let d = controller_dir(root, "cpu", dir)?;
    read(&d.join("cgroup.procs"))?
        .lines()
        .find_map(|l| l.trim().parse().ok())
}

/// The children of cgroup `dir` (their names), as one hierarchy lists them.
pub fn children(root: &Path, dir: &Path) -> Vec<String> {
    let Some(d) = controller_dir(root, "cpu", dir) else {
        return Vec::new();
    };
    std::fs::read_dir(d)
        .map(|it| {
            it.filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A block device's name (`/dev/sda`) from its numbers, through `/sys/dev/block`.
pub fn device_name(major: u32, minor: u32) -> String {
    let link = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    std::fs::read_link(&link)
        .ok()
        .and_then(|p| {
            p.file_name()
                .map(|n| format!("/dev/{}", n.to_string_lossy()))
        })
        .unwrap_or_else(|| format!("{major}:{minor}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: PathBuf, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// A v1 tree with separate `cpu` and `cpuacct` mounts (this host's layout).
    pub(crate) fn v1_tree(root: &Path, dir: &str, usage: u64, throttled: u64) {
        let r = |c: &str, f: &str| root.join(c).join(dir).join(f);
        write(r("cpuacct", "cpuacct.usage"), &format!("{usage}\n"));
        write(r("cpuacct", "cpuacct.stat"), "user 70\nsystem 30\n");
        write(
            r("cpu", "cpu.stat"),
            &format!("nr_periods 100\nnr_throttled {throttled}\nthrottled_time 5000000\n"),
        );
        write(r("cpu", "cpu.cfs_quota_us"), "30000\n");
        write(r("cpu", "cpu.cfs_period_us"), "100000\n");
        write(r("cpu", "cpu.shares"), "307\n");
        write(r("cpu", "cgroup.procs"), "41\n42\n");
        write(r("memory", "memory.usage_in_bytes"), "10000\n");
        write(r("memory", "memory.memsw.usage_in_bytes"), "10100\n");
        write(r("memory", "memory.failcnt"), "3\n");
        write(
            r("memory", "memory.limit_in_bytes"),
            "9223372036854771712\n",
        );
        write(
            r("memory", "memory.stat"),
            "pgfault 1\npgmajfault 0\ntotal_cache 2000\ntotal_rss 6000\ntotal_inactive_file 1500\ntotal_pgfault 11\ntotal_pgmajfault 2\n",
        );
        write(r("pids", "pids.current"), "5\n");
        write(
            r("blkio", "blkio.throttle.io_service_bytes"),
            "8:0 Read 4096\n8:0 Write 512\n8:0 Total 4608\nTotal 4608\n",
        );
    }

    #[test]
    fn v1_hierarchies_give_cadvisors_figures() {
        let root = tempfile::tempdir().unwrap();
        v1_tree(root.path(), "kubepods/podu1/c1", 5_000_000_000, 40);
        let s = read_cgroup(root.path(), Path::new("kubepods/podu1/c1")).unwrap();
        let tick = ns_per_tick();
        assert_eq!(
            s.cpu,
            Some(CpuUsage {
                total: 5_000_000_000,
                user: 70 * tick,
                system: 30 * tick
            })
        );
        assert_eq!(
            s.cfs,
            Some(Cfs {
                periods: 100,
                throttled_periods: 40,
                throttled_time: 5_000_000
            })
        );
        let m = s.memory.unwrap();
        assert_eq!(
            (m.usage, m.working_set, m.rss, m.cache, m.swap, m.failcnt),
            (10000, 8500, 6000, 2000, 100, 3)
        );
        assert_eq!((m.pgfault, m.pgmajfault, m.container_pgfault), (11, 2, 1));
        assert_eq!(
            s.spec,
            Spec {
                cpu_period: 100_000,
                cpu_quota: Some(30_000),
                cpu_shares: 307,
                memory_limit: None
            }
        );
        assert_eq!((s.processes, s.threads), (Some(2), Some(5)));
        assert_eq!(
            s.disk_io.get(&(8, 0)),
            Some(&DiskIo {
                read: 4096,
                write: 512
            })
        );
        assert!(s.created.is_some());
        assert_eq!(
            first_pid(root.path(), Path::new("kubepods/podu1/c1")),
            Some(41)
        );
        assert_eq!(children(root.path(), Path::new("kubepods/podu1")), ["c1"]);
        assert_eq!(read_cgroup(root.path(), Path::new("kubepods/gone")), None);
    }

    #[test]
    fn a_joint_cpu_cpuacct_mount_is_found_for_both() {
        let root = tempfile::tempdir().unwrap();
        write(root.path().join("cpu,cpuacct/a/cpuacct.usage"), "7\n");
        write(root.path().join("cpu,cpuacct/a/cpu.shares"), "2\n");
        let s = read_cgroup(root.path(), Path::new("a")).unwrap();
        assert_eq!(s.cpu.map(|c| c.total), Some(7));
        assert_eq!(s.spec.cpu_shares, 2);
        assert_eq!(s.spec.cpu_quota, None);
    }

    #[test]
    fn the_v2_hierarchy_gives_cadvisors_figures() {
        let root = tempfile::tempdir().unwrap();
        write(
            root.path().join("cgroup.controllers"),
            "cpu memory io pids\n",
        );
        let d = root
            .path()
            .join("kubepods.slice/pod.slice/cri-containerd-abc.scope");
        write(
            d.join("cpu.stat"),
            "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\nnr_periods 10\nnr_throttled 4\nthrottled_usec 300\n",
        );
        write(d.join("cpu.max"), "30000 100000\n");
        write(d.join("cpu.weight"), "12\n");
        write(d.join("memory.current"), "8192\n");
        write(d.join("memory.max"), "65536\n");
        write(d.join("memory.swap.current"), "0\n");
        write(d.join("memory.events"), "low 0\nhigh 0\nmax 6\noom 1\n");
        write(
            d.join("memory.stat"),
            "anon 1024\nfile 4096\ninactive_file 4000\npgfault 9\npgmajfault 1\n",
        );
        write(d.join("cgroup.procs"), "7\n");
        write(d.join("pids.current"), "3\n");
        write(
            d.join("io.stat"),
            "8:0 rbytes=100 wbytes=200 rios=1 wios=2\n",
        );
        let s = read_cgroup(
            root.path(),
            Path::new("kubepods.slice/pod.slice/cri-containerd-abc.scope"),
        )
        .unwrap();
        assert_eq!(
            s.cpu,
            Some(CpuUsage {
                total: 2_500_000,
                user: 2_000_000,
                system: 500_000
            })
        );
        assert_eq!(
            s.cfs,
            Some(Cfs {
                periods: 10,
                throttled_periods: 4,
                throttled_time: 300_000
            })
        );
        let m = s.memory.unwrap();
        assert_eq!(
            (m.usage, m.working_set, m.rss, m.cache, m.failcnt, m.pgfault),
            (8192, 4192, 1024, 4096, 6, 9)
        );
        assert_eq!(
            s.spec,
            Spec {
                cpu_period: 100_000,
                cpu_quota: Some(30_000),
                // cAdvisor's `convertCPUWeightToCPULimit`: weight 12 (from 307 shares) is 290.
                cpu_shares: 290,
                memory_limit: Some(65536)
            }
        );
        assert_eq!((s.processes, s.threads), (Some(1), Some(3)));
        assert_eq!(
            s.disk_io.get(&(8, 0)),
            Some(&DiskIo {
                read: 100,
                write: 200
            })
        );
        // "max" quota: unlimited.
        write(d.join("cpu.max"), "max 100000\n");
        let s = read_cgroup(
            root.path(),
            Path::new("kubepods.slice/pod.slice/cri-containerd-abc.scope"),
        )
        .unwrap();
        assert_eq!((s.spec.cpu_quota, s.spec.cpu_period), (None, 100_000));
    }
}
