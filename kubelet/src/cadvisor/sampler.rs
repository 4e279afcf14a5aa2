//! The housekeeping task (cAdvisor's per-container `housekeeping` loop, 10 s by default): it
//! owns nothing but a handle on [`CadvisorState`], takes the inventory from its
//! [`InventorySource`], reads every cgroup in it, and keeps each one's last two samples, so
//! that CPU rates (`usageNanoCores`) exist without anyone asking first. The first round runs at
//! start-up and the second [`FIRST_RESAMPLE`] after it, so rates exist within a second of the
//! kubelet starting; then every [`HOUSEKEEPING_INTERVAL`]. It stops when its
//! `CancellationToken` is cancelled.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::cgroup::{CgroupStats, read_cgroup};
use super::inventory::Entry;

/// cAdvisor's default housekeeping interval (`--housekeeping_interval`).
pub const HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(10);
/// How long after the first round the second is taken (the first rates).
pub const FIRST_RESAMPLE: Duration = Duration::from_secs(1);

/// One reading of one cgroup.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// When (monotonic, for rates).
    pub at: Instant,
    /// When (nanoseconds since the epoch, for the summary's `time`).
    pub wall_ns: i64,
    pub stats: CgroupStats,
}

#[derive(Debug, Clone)]
struct Series {
    prev: Option<Sample>,
    last: Sample,
}

/// What housekeeping last found: the inventory and each cgroup's last two samples, by id.
#[derive(Debug)]
pub struct CadvisorState {
    root: PathBuf,
    inventory: RwLock<Arc<Vec<Entry>>>,
    series: RwLock<HashMap<String, Series>>,
    /// Runtime container id → cgroup id.
    by_runtime_id: RwLock<HashMap<String, String>>,
    /// Pod UID → its cgroup's id.
    by_pod_uid: RwLock<HashMap<String, String>>,
    rounds: std::sync::atomic::AtomicU64,
}

impl CadvisorState {
    /// State for the cgroup mount `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            inventory: RwLock::default(),
            series: RwLock::default(),
            by_runtime_id: RwLock::default(),
            by_pod_uid: RwLock::default(),
            rounds: Default::default(),
        }
    }

    /// How many rounds have been recorded.
    pub fn rounds(&self) -> u64 {
        self.rounds.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The cgroup mount.
    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// The inventory of the last round.
    pub fn inventory(&self) -> Arc<Vec<Entry>> {
        Arc::clone(&self.inventory.read())
    }

    /// One round: reads every cgroup of `inventory` at `at` (`wall_ns`), keeping the previous
    /// sample of each; cgroups no longer in the inventory (or gone) are forgotten.
    pub fn record(&self, inventory: Vec<Entry>, at: Instant, wall_ns: i64) {
        let readings: Vec<(String, CgroupStats)> = inventory
            .iter()
            .filter_map(|e| Some((e.id.clone(), read_cgroup(&self.root, &e.dir)?)))
            .collect();
        let mut series = self.series.write();
        let mut next = HashMap::with_capacity(readings.len());
        for (id, stats) in readings {
            let last = Sample { at, wall_ns, stats };
            let prev = series.remove(&id).map(|s| s.last);
            next.insert(id, Series { prev, last });
        }
        *series = next;
        drop(series);
        *self.by_runtime_id.write() = inventory
            .iter()
            .filter_map(|e| Some((e.runtime_id.clone()?, e.id.clone())))
            .collect();
        *self.by_pod_uid.write() = inventory
            .iter()
            .filter_map(|e| Some((e.pod_uid.clone()?, e.id.clone())))
            .collect();
        *self.inventory.write() = Arc::new(inventory);
        self.rounds
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// A first round of only the node's root cgroup (when the kubelet is made, before its
    /// servers: the node's first rate can be taken against it).
    pub fn prime_node(&self) {
        let node = Entry {
            id: "/".into(),
            dir: PathBuf::new(),
            kind: super::inventory::Kind::Node,
            labels: Default::default(),
            start_time: None,
            runtime_id: None,
            pod_uid: None,
        };
        let wall_ns = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0);
        self.record(vec![node], Instant::now(), wall_ns);
    }

    /// The last sample of cgroup `id`.
    pub fn last(&self, id: &str) -> Option<Sample> {
        self.series.read().get(id).map(|s| s.last.clone())
    }

    /// The mean CPU usage of cgroup `id` between its last two samples, in nanocores; `None`
    /// before the second sample or when the counter went backwards.
    pub fn usage_nano_cores(&self, id: &str) -> Option<u64> {
        let series = self.series.read();
        let s = series.get(id)?;
        let prev = s.prev.as_ref()?;
        let used = s.last.stats.cpu?.total.checked_sub(prev.stats.cpu?.total)?;
        let interval = s.last.at.checked_duration_since(prev.at)?.as_nanos();
        if interval == 0 {
            return None;
        }
        u64::try_from(u128::from(used) * 1_000_000_000 / interval).ok()
    }

    /// [`Self::usage_nano_cores`] of the container the runtime calls `runtime_id`.
    pub fn container_usage_nano_cores(&self, runtime_id: &str) -> Option<u64> {
        let id = self.by_runtime_id.read().get(runtime_id)?.clone();
        self.usage_nano_cores(&id)
    }

    /// [`Self::usage_nano_cores`] of the cgroup of the pod `uid`.
    pub fn pod_usage_nano_cores(&self, uid: &str) -> Option<u64> {
        let id = self.by_pod_uid.read().get(uid)?.clone();
        self.usage_nano_cores(&id)
    }
}

/// Where housekeeping learns which containers exist.
#[async_trait::async_trait]
pub trait InventorySource: Send + Sync {
    async fn inventory(&self) -> Vec<Entry>;
}

/// The housekeeping task.
pub struct Housekeeping {
    state: Arc<CadvisorState>,
    source: Arc<dyn InventorySource>,
    interval: Duration,
}

impl Housekeeping {
    pub fn new(state: Arc<CadvisorState>, source: Arc<dyn InventorySource>) -> Self {
        Self {
            state,
            source,
            interval: HOUSEKEEPING_INTERVAL,
        }
    }

    /// Another interval than [`HOUSEKEEPING_INTERVAL`].
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    async fn round(&self) {
        let inventory = self.source.inventory().await;
        let state = Arc::clone(&self.state);
        let at = Instant::now();
        let wall_ns = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0);
        // File reads: off the async workers.
        let done = tokio::task::spawn_blocking(move || state.record(inventory, at, wall_ns));
        if let Err(e) = done.await {
            tracing::warn!(error = %e, "housekeeping round failed");
        }
    }

    /// Samples now, again after [`FIRST_RESAMPLE`], then every interval until `cancel`.
    pub async fn run(self, cancel: CancellationToken) {
        let mut wait = FIRST_RESAMPLE.min(self.interval);
        loop {
            self.round().await;
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            wait = self.interval;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cadvisor::inventory::{Kind, Labels};
    use parking_lot::Mutex;

    struct Fixed(Mutex<Vec<Entry>>);

    #[async_trait::async_trait]
    impl InventorySource for Fixed {
        async fn inventory(&self) -> Vec<Entry> {
            self.0.lock().clone()
        }
    }

    fn entry(id: &str, dir: &str, runtime_id: Option<&str>) -> Entry {
        Entry {
            id: id.into(),
            dir: dir.into(),
            kind: Kind::Container,
            labels: Labels::default(),
            start_time: None,
            runtime_id: runtime_id.map(String::from),
            pod_uid: None,
        }
    }

    fn set_usage(root: &std::path::Path, dir: &str, ns: u64) {
        let d = root.join("cpuacct").join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cpuacct.usage"), format!("{ns}\n")).unwrap();
    }

    /// Until `state` has recorded `n` rounds, without advancing the paused clock (the reads
    /// run on the blocking pool, in real time).
    async fn rounds(state: &CadvisorState, n: u64) {
        for _ in 0..10_000 {
            if state.rounds() >= n {
                return;
            }
            tokio::task::yield_now().await;
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("round {n} not recorded: {}", state.rounds());
    }

    #[tokio::test(start_paused = true)]
    async fn rates_exist_a_second_after_start_and_follow_each_round() {
        let root = tempfile::tempdir().unwrap();
        set_usage(root.path(), "", 0);
        set_usage(root.path(), "kubepods/podu1/c1", 0);
        let state = Arc::new(CadvisorState::new(root.path()));
        let source = Arc::new(Fixed(Mutex::new(vec![
            entry("/", "", None),
            entry("/kubepods/podu1/c1", "kubepods/podu1/c1", Some("c1")),
        ])));
        let cancel = CancellationToken::new();
        let task =
            tokio::spawn(Housekeeping::new(Arc::clone(&state), source.clone()).run(cancel.clone()));
        rounds(&state, 1).await;
        assert!(state.last("/").is_some(), "sampled at start-up");
        assert_eq!(state.usage_nano_cores("/"), None, "one sample: no rate yet");

        // 0.5 core-seconds used by the node and 0.3 by the container in the second until the
        // second round.
        set_usage(root.path(), "", 500_000_000);
        set_usage(root.path(), "kubepods/podu1/c1", 300_000_000);
        tokio::time::sleep(FIRST_RESAMPLE).await;
        rounds(&state, 2).await;
        assert_eq!(state.usage_nano_cores("/"), Some(500_000_000));
        assert_eq!(state.container_usage_nano_cores("c1"), Some(300_000_000));

        // The next round is a full interval later; until then the rate stays.
        set_usage(
            root.path(),
            "kubepods/podu1/c1",
            300_000_000 + 10_000_000_000,
        );
        tokio::time::sleep(HOUSEKEEPING_INTERVAL / 2).await;
        assert_eq!(state.rounds(), 2);
        assert_eq!(state.container_usage_nano_cores("c1"), Some(300_000_000));
        tokio::time::sleep(HOUSEKEEPING_INTERVAL / 2).await;
        rounds(&state, 3).await;
        assert_eq!(state.container_usage_nano_cores("c1"), Some(1_000_000_000));

        // A container that is gone is forgotten.
        source.0.lock().truncate(1);
        tokio::time::sleep(HOUSEKEEPING_INTERVAL).await;
        rounds(&state, 4).await;
        assert_eq!(state.container_usage_nano_cores("c1"), None);
        assert!(state.last("/kubepods/podu1/c1").is_none());

        cancel.cancel();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_counter_that_went_backwards_gives_no_rate() {
        let root = tempfile::tempdir().unwrap();
        set_usage(root.path(), "a", 900);
        let state = CadvisorState::new(root.path());
        let inv = || vec![entry("/a", "a", None)];
        state.record(inv(), Instant::now(), 0);
        tokio::time::advance(Duration::from_secs(1)).await;
        set_usage(root.path(), "a", 100);
        state.record(inv(), Instant::now(), 0);
        assert_eq!(state.usage_nano_cores("/a"), None);
        tokio::time::advance(Duration::from_secs(2)).await;
        set_usage(root.path(), "a", 100 + 2_000_000_000);
        state.record(inv(), Instant::now(), 0);
        assert_eq!(state.usage_nano_cores("/a"), Some(1_000_000_000));
    }
}
