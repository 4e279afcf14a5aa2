//! CPU usage in nanocores from cumulative samples (upstream `criStatsProvider`'s
//! `cpuUsageCache`): a runtime whose CRI stats carry no `usage_nano_cores` (containerd 1.6,
//! cri-dockerd) gives only `usage_core_nano_seconds`, so the kubelet keeps each container's
//! previous sample and reports the mean rate since it. The node's usage (read from its root
//! cgroup, as cAdvisor does) is rated the same way under the id `/`.

use parking_lot::Mutex;
use std::collections::HashMap;

/// The id the node's own usage is kept under (cAdvisor's name of the root container).
pub const NODE: &str = "/";

/// One cumulative CPU sample: when (nanoseconds since the epoch) and how much CPU had been
/// used by then (core-nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSample {
    pub timestamp: i64,
    pub usage_core_nano_seconds: u64,
}

/// The mean usage in nanocores (core-nanoseconds per second) from `prev` to `cur`; `None` when
/// the interval is not positive or the counter went backwards.
pub fn nano_cores_between(prev: CpuSample, cur: CpuSample) -> Option<u64> {
    let interval = cur.timestamp.checked_sub(prev.timestamp)?;
    let used = cur
        .usage_core_nano_seconds
        .checked_sub(prev.usage_core_nano_seconds)?;
    if interval <= 0 {
        return None;
    }
    u64::try_from(u128::from(used) * 1_000_000_000 / interval as u128).ok()
}

#[derive(Debug, Clone, Copy)]
struct Record {
    sample: CpuSample,
    usage_nano_cores: Option<u64>,
}

/// The previous sample of each container (and of the node), and the rate last computed.
#[derive(Debug, Default)]
pub struct CpuUsageCache {
    records: Mutex<HashMap<String, Record>>,
}

impl CpuUsageCache {
    /// Upstream `getAndUpdateContainerUsageNanoCores`: the rate of `id` since its cached sample,
    /// which `cur` replaces. `None` when there is no cached sample or the counter went
    /// backwards (`cur` is cached, to rate the next one against) and when `cur` is not newer
    /// than the cached sample (nothing changes).
    pub fn update(&self, id: &str, cur: CpuSample) -> Option<u64> {
        let mut records = self.records.lock();
        let prev = records.get(id).copied();
        if let Some(prev) = prev
            && cur.timestamp <= prev.sample.timestamp
        {
            return None;
        }
        let usage_nano_cores = prev.and_then(|p| nano_cores_between(p.sample, cur));
        records.insert(
            id.to_string(),
            Record {
                sample: cur,
                usage_nano_cores,
            },
        );
        usage_nano_cores
    }

    /// Upstream `getContainerUsageNanoCores`: the rate last computed for `id`, without taking
    /// a new sample.
    pub fn cached(&self, id: &str) -> Option<u64> {
        self.records.lock().get(id)?.usage_nano_cores
    }

    /// Keeps only the ids `alive` says still exist.
    pub fn retain(&self, alive: impl Fn(&str) -> bool) {
        self.records.lock().retain(|id, _| alive(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn at(seconds: i64, usage_core_nano_seconds: u64) -> CpuSample {
        CpuSample {
            timestamp: seconds * S,
            usage_core_nano_seconds,
        }
    }

    #[test]
    fn the_rate_is_the_usage_between_two_samples_over_their_interval() {
        assert_eq!(
            nano_cores_between(at(10, 0), at(15, 5 * S as u64)),
            Some(S as u64),
            "5 core-seconds in 5 s is one core"
        );
        assert_eq!(
            nano_cores_between(at(0, 0), at(4, 3 * S as u64 / 2)),
            Some(375_000_000)
        );
        assert_eq!(nano_cores_between(at(1, 0), at(1, 9)), None);
        assert_eq!(nano_cores_between(at(2, 0), at(1, 9)), None);
        assert_eq!(nano_cores_between(at(1, 9), at(2, 0)), None);
    }

    #[test]
    fn each_update_rates_against_the_previous_sample_and_keeps_the_rate() {
        let c = CpuUsageCache::default();
        assert_eq!(c.update("a", at(1, 0)), None, "nothing to compare with");
        assert_eq!(c.cached("a"), None);
        assert_eq!(c.update("a", at(3, S as u64)), Some(S as u64 / 2));
        assert_eq!(c.cached("a"), Some(S as u64 / 2), "kept for readers");
        assert_eq!(c.update("a", at(4, 3 * S as u64)), Some(2 * S as u64));
        // A sample not newer than the cached one changes nothing.
        assert_eq!(c.update("a", at(4, 9 * S as u64)), None);
        assert_eq!(c.cached("a"), Some(2 * S as u64));
        // A counter that went backwards (a new cgroup) starts over.
        assert_eq!(c.update("a", at(5, 1)), None);
        assert_eq!(c.cached("a"), None);
        assert_eq!(c.update("a", at(7, 1 + S as u64)), Some(S as u64 / 2));
        // Ids are apart, and forgotten when gone.
        assert_eq!(c.update(NODE, at(7, 0)), None);
        c.retain(|id| id == NODE);
        assert_eq!(c.cached("a"), None);
        assert_eq!(c.update("a", at(8, 2 * S as u64)), None);
    }
}
