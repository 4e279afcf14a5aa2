//! The `process_*` series of client_golang's process collector (component-base registers it in
//! every component's registry), read from `/proc/self` on each scrape: CPU seconds, resident
//! and virtual memory, start time, open and maximum file descriptors.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// One reading of `/proc/self`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessStats {
    /// User plus system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Resident set, bytes.
    pub resident_bytes: f64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: f64,
    /// Start time since the Unix epoch, seconds.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: f64,
    /// The soft limit on open file descriptors.
    pub max_fds: f64,
}

/// Parses `/proc/<pid>/stat` (fields after the parenthesised command name, which may hold
/// spaces), with the clock tick rate, the page size and the boot time (`btime` of `/proc/stat`).
pub fn parse_stat(stat: &str, ticks: f64, page: f64, boot_time: f64) -> Option<ProcessStats> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime 15, starttime 22, vsize 23,
    // rss 24 (1-based, as proc(5) numbers them).
    let field = |n: usize| f.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    Some(ProcessStats {
        cpu_seconds: (field(14)? + field(15)?) / ticks,
        start_time_seconds: boot_time + field(22)? / ticks,
        virtual_bytes: field(23)?,
        resident_bytes: field(24)? * page,
        ..Default::default()
    })
}

/// The soft `Max open files` limit of `/proc/<pid>/limits`.
pub fn parse_max_fds(limits: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line
        .trim_start_matches("Max open files")
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        return Some(f64::INFINITY);
    }
    soft.parse().ok()
}

/// `btime` of `/proc/stat`.
fn boot_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// Reads this process's figures; `None` when `/proc` is not readable.
pub fn read_self() -> Option<ProcessStats> {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let mut s = parse_stat(
        &stat,
        ticks.max(1) as f64,
        page.max(1) as f64,
        boot_time().unwrap_or_default(),
    )?;
    s.open_fds = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count() as f64)
        .unwrap_or_default();
    s.max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| parse_max_fds(&l))
        .unwrap_or_default();
    Some(s)
}

/// The collector registered in the `/metrics` registry.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = read_self() else {
            return Ok(());
        };
        encoder
            .encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                MetricType::Counter,
            )?
            .encode_counter::<NoLabelSet, _, u64>(&s.cpu_seconds, None)?;
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                s.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                s.virtual_bytes,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                s.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                s.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                s.max_fds,
            ),
        ];
        for (name, help, v) in gauges {
            encoder
                .encode_descriptor(name, help, None, MetricType::Gauge)?
                .encode_gauge(&v)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat_with_spaces_in_the_name() {
        let stat = "4242 (kube let) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 \
                    1000 123456789 2048 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        let s = parse_stat(stat, 100.0, 4096.0, 1_700_000_000.0).expect("parsed");
        assert_eq!(s.cpu_seconds, 3.0);
        assert_eq!(s.start_time_seconds, 1_700_000_010.0);
        assert_eq!(s.virtual_bytes, 123_456_789.0);
        assert_eq!(s.resident_bytes, 2048.0 * 4096.0);
    }

    #[test]
    fn parses_limits() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(parse_max_fds(limits), Some(1024.0));
    }

    #[test]
    fn reads_this_process() {
        let s = read_self().expect("/proc/self");
        assert!(s.resident_bytes > 0.0 && s.open_fds > 0.0 && s.start_time_seconds > 0.0);
    }
}
