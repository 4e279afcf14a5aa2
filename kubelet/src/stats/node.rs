//! What the node's own figures are read from, where upstream asks cAdvisor about the root
//! container: the root cgroup's cumulative CPU usage (`cpu.stat` `usage_usec` on cgroup v2,
//! `cpuacct.usage` on v1; `/proc/stat`'s busy time when neither is readable), the boot time,
//! the host network namespace's interfaces (`/proc/net/dev`, without the devices cAdvisor
//! ignores), page faults (`/proc/vmstat`) and the task limits (upstream `pidlimit.Stats`).

use std::path::Path;

use super::types::InterfaceStats;

/// Where the cgroup filesystem is mounted.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// `key value` lines (`cpu.stat`, `memory.stat`, `/proc/vmstat`): the value of `key`.
pub fn flat_keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(char::is_whitespace)?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// The node's cumulative CPU usage in core-nanoseconds, from the root cgroup under `root` (a
/// cgroup v2 `cpu.stat`, else a v1 cpuacct hierarchy's `cpuacct.usage`).
pub fn root_cgroup_cpu_usage(root: &Path) -> Option<u64> {
    if root.join("cgroup.controllers").exists() {
        let text = std::fs::read_to_string(root.join("cpu.stat")).ok()?;
        return flat_keyed(&text, "usage_usec").map(|us| us.saturating_mul(1000));
    }
    ["cpuacct", "cpu,cpuacct", "cpuacct,cpu"]
        .iter()
        .find_map(|d| std::fs::read_to_string(root.join(d).join("cpuacct.usage")).ok())
        .and_then(|t| t.trim().parse().ok())
}

/// The busy time of the `cpu` line of a `/proc/stat` text (user, nice, system, irq, softirq,
/// steal; guest time is inside user), in core-nanoseconds for `ticks_per_second` (`CLK_TCK`).
pub fn proc_stat_cpu_usage(stat: &str, ticks_per_second: u64) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    if f.len() < 8 || ticks_per_second == 0 {
        return None;
    }
    let ticks = f[0] + f[1] + f[2] + f[5] + f[6] + f[7];
    Some(ticks.saturating_mul(1_000_000_000 / ticks_per_second))
}

/// The node's cumulative CPU usage (core-nanoseconds): the root cgroup's, else `/proc/stat`'s.
pub fn cpu_usage() -> Option<u64> {
    root_cgroup_cpu_usage(Path::new(CGROUP_ROOT)).or_else(|| {
        // SAFETY: sysconf(3) has no preconditions.
        let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        proc_stat_cpu_usage(&stat, u64::try_from(tck).ok()?)
    })
}

/// The boot time (`btime` of `/proc/stat`), in nanoseconds since the epoch.
pub fn boot_time() -> Option<i64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let secs = flat_keyed(&stat, "btime")?;
    i64::try_from(secs).ok()?.checked_mul(1_000_000_000)
}

/// The summary's figures of one interface as cAdvisor reads it.
fn interface_stats(i: crate::cadvisor::network::Interface) -> InterfaceStats {
    InterfaceStats {
        name: i.name,
        rx_bytes: Some(i.rx_bytes),
        rx_errors: Some(i.rx_errors),
        tx_bytes: Some(i.tx_bytes),
        tx_errors: Some(i.tx_errors),
    }
}

/// The interfaces of a `/proc/net/dev` table, without those cAdvisor ignores, by name (the
/// table as [`crate::cadvisor::network`] reads it).
pub fn net_dev_interfaces(table: &str) -> Vec<InterfaceStats> {
    crate::cadvisor::network::parse_net_dev(table)
        .into_iter()
        .map(interface_stats)
        .collect()
}

/// The node's interfaces (the host network namespace's).
pub fn interfaces() -> Vec<InterfaceStats> {
    interfaces_of(None)
}

/// The interfaces of the network namespace of process `pid` (the host's for `None`); none
/// when they cannot be read (the process is gone).
pub fn interfaces_of(pid: Option<i64>) -> Vec<InterfaceStats> {
    crate::cadvisor::network::interfaces(pid)
        .into_iter()
        .map(interface_stats)
        .collect()
}

/// (page faults, major page faults) since boot (`/proc/vmstat`).
pub fn page_faults() -> (Option<u64>, Option<u64>) {
    let text = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
    (
        flat_keyed(&text, "pgfault"),
        flat_keyed(&text, "pgmajfault"),
    )
}

/// Upstream `pidlimit.Stats`: (the task limit: the lower of `kernel.pid_max` and
/// `kernel.threads-max`; the number of tasks, from `/proc/loadavg`).
pub fn task_limits() -> (Option<i64>, Option<i64>) {
    let read = |p: &str| -> Option<i64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    let max = [
        read("/proc/sys/kernel/pid_max"),
        read("/proc/sys/kernel/threads-max"),
    ]
    .into_iter()
    .flatten()
    .min();
    let tasks = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| loadavg_tasks(&t));
    (max, tasks)
}

/// The total of the `running/total` field of a `/proc/loadavg` text.
pub fn loadavg_tasks(text: &str) -> Option<i64> {
    text.split_whitespace()
        .nth(3)?
        .split_once('/')?
        .1
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_cgroup_gives_the_nodes_cpu_usage_on_v1_and_v2() {
        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(v2.path().join("cgroup.controllers"), "cpu memory\n").unwrap();
        std::fs::write(
            v2.path().join("cpu.stat"),
            "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n",
        )
        .unwrap();
        assert_eq!(root_cgroup_cpu_usage(v2.path()), Some(1_234_567_000));

        let v1 = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(v1.path().join("cpu,cpuacct")).unwrap();
        std::fs::write(v1.path().join("cpu,cpuacct/cpuacct.usage"), "987654321\n").unwrap();
        assert_eq!(root_cgroup_cpu_usage(v1.path()), Some(987_654_321));

        let none = tempfile::tempdir().unwrap();
        assert_eq!(root_cgroup_cpu_usage(none.path()), None);
    }

    #[test]
    fn proc_stat_busy_time_leaves_out_idle_iowait_and_guest() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let stat =
            "cpu  100 20 30 5000 40 5 6 7 50 0\ncpu0 1 2 3 4 5 6 7 8 9 0\nbtime 1700000000\n";
        assert_eq!(proc_stat_cpu_usage(stat, 100), Some(168 * 10_000_000));
        assert_eq!(flat_keyed(stat, "btime"), Some(1_700_000_000));
        assert_eq!(proc_stat_cpu_usage("intr 1\n", 100), None);
    }

    #[test]
    fn net_dev_leaves_out_loopback_and_container_ends() {
        let table = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0
vethab12:     1       1    0    0    0     0          0         0        1       1    0    0    0     0       0          0
docker0:     1       1    0    0    0     0          0         0        1       1    0    0    0     0       0          0
  eth0:    2048      20    3    0    0     0          0         0     1024      10    4    0    0     0       0          0
  cni0:      10       1    0    0    0     0          0         0       20       2    0    0    0     0       0          0
";
        let names: Vec<String> = net_dev_interfaces(table)
            .into_iter()
            .map(|i| i.name)
            .collect();
        assert_eq!(names, ["cni0", "eth0"]);
        let eth0 = net_dev_interfaces(table).remove(1);
        assert_eq!(
            (eth0.rx_bytes, eth0.rx_errors, eth0.tx_bytes, eth0.tx_errors),
            (Some(2048), Some(3), Some(1024), Some(4))
        );
        assert_eq!(loadavg_tasks("0.10 0.20 0.30 2/345 6789\n"), Some(345));
    }
}
