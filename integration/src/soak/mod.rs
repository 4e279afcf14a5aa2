//! The soak (binary `soak`): for a set time, pods are churned on a node of the soak's own —
//! the `kubelet` binary on a private containerd, or on a standalone `dockershim` on a private
//! dockerd (`node`) — while, at random moments from a seeded generator, the kubelet, dockershim,
//! dockerd or containerd is killed with SIGKILL and started again. After each kill the soak
//! waits for the untouched pods ("keepers") to run again and compares their containers with
//! those before the kill (`pods`): after a kill of the kubelet or dockershim nothing may have
//! been restarted; after a kill of the runtime itself restarts are expected (Docker without
//! `--live-restore` stops every container when it comes back) and counted apart. At the end
//! every pod is deleted and nothing of any may be left (`leaks`); the kubelet's and
//! dockershim's RSS are sampled throughout (`rss`). The report is a readable table and JSON.
//! It asserts nothing about time.

pub mod leaks;
pub mod network;
pub mod node;
pub mod pods;
pub mod rss;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::testbed::Testbed;
use leaks::Leak;
use node::{Node, Pids, SoakRuntime, Target};
use pods::{Churn, ChurnCounts, KeeperState};

/// What to run.
#[derive(Debug, Clone)]
pub struct Settings {
    pub runtime: SoakRuntime,
    /// How long pods are churned and processes killed.
    pub duration: Duration,
    /// Seeds every random choice (the kills' moments and targets, the churn).
    pub seed: u64,
    /// Pods no one touches.
    pub keepers: usize,
    /// At most this many churned pods at once.
    pub churn_pods: usize,
    /// Seconds between two churn steps: uniform in this range.
    pub churn_interval_s: (f64, f64),
    /// Seconds between a recovery and the next kill: uniform in this range.
    pub kill_interval_s: (f64, f64),
    /// The longest a killed process stays down, in ms (uniform from 0).
    pub max_downtime_ms: u64,
    /// How often RSS is sampled.
    pub rss_interval: Duration,
    /// How long after a restart the keepers are first looked at: the kubelet's `/pods` still
    /// shows containers a killed dockerd took with it until its next relists, and a kill's
    /// consequences must be counted against that kill.
    pub settle: Duration,
    /// How long the keepers may take to run again after a kill, and every pod to go at the end.
    /// Longer than the kubelet's crash-loop back-off cap (upstream `MaxContainerBackOff`, 5 min):
    /// each dockerd kill stops the keepers, their restarts are backed off like any other, and
    /// the back-off only resets after 10 min without one, so with dockerd killed every few
    /// minutes a keeper waits up to 5 min (as under the Go kubelet).
    pub recovery_timeout: Duration,
    /// How long the kubelet may take to clean up after the last pod is gone from the runtime.
    pub cleanup_timeout: Duration,
    /// dockerd with `--live-restore`.
    pub live_restore: bool,
    /// Where the soak's directories go (a fresh temporary directory inside).
    pub work_dir: PathBuf,
    /// Keep the directory (logs) at the end.
    pub keep_dir: bool,
}

impl Settings {
    /// The defaults for `runtime` over `duration`.
    pub fn new(runtime: SoakRuntime, duration: Duration, seed: u64) -> Settings {
        Settings {
            runtime,
            duration,
            seed,
            keepers: 3,
            churn_pods: 5,
            churn_interval_s: (1.0, 5.0),
            kill_interval_s: (20.0, 90.0),
            max_downtime_ms: 3000,
            rss_interval: Duration::from_secs(10),
            settle: Duration::from_secs(10),
            recovery_timeout: Duration::from_secs(360),
            cleanup_timeout: Duration::from_secs(90),
            live_restore: false,
            work_dir: std::env::temp_dir(),
            keep_dir: false,
        }
    }
}

/// One kill.
#[derive(Debug, Clone, Serialize)]
pub struct KillEvent {
    /// Seconds since the start.
    pub t_s: f64,
    pub target: Target,
    pub downtime_ms: u64,
    /// Seconds from the restart until every keeper ran again (at least the settle time).
    pub recovered_s: Option<f64>,
    /// Keepers whose containers changed (ids or restart counts).
    pub keepers_restarted: usize,
    /// Whether those restarts were expected (the runtime itself was killed).
    pub expected: bool,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub runtime: SoakRuntime,
    pub seed: u64,
    pub live_restore: bool,
    pub duration_s: f64,
    pub keepers: usize,
    /// Kills by target.
    pub kills: BTreeMap<String, u64>,
    pub kill_events: Vec<KillEvent>,
    pub churn: ChurnCounts,
    /// Keeper restarts after kills of the runtime itself.
    pub expected_restarts: usize,
    /// Keeper restarts after kills of the kubelet or dockershim, or with no kill: each
    /// described.
    pub unexpected_restarts: Vec<String>,
    /// What was left once every pod was deleted.
    pub leaks: Vec<Leak>,
    /// The kinds of thing the leak checks found with the keepers running, before the churn:
    /// a check that finds nothing then would find no leak either.
    pub seen_with_pods: Vec<String>,
    /// Anything else that went wrong (keepers not running again in time, a process that would
    /// not start again).
    pub failures: Vec<String>,
    pub rss_samples: Vec<rss::Sample>,
    pub kubelet_rss: Option<rss::Summary>,
    pub dockershim_rss: Option<rss::Summary>,
    /// The soak's directory when kept.
    pub dir: Option<PathBuf>,
}

impl Report {
    /// No leak, no unexpected restart, no failure.
    pub fn clean(&self) -> bool {
        self.leaks.is_empty() && self.unexpected_restarts.is_empty() && self.failures.is_empty()
    }

    /// The readable report: markdown tables.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "## Soak on {}{}: {:.0} s, seed {}\n",
            self.runtime.name(),
            if self.live_restore {
                " (dockerd --live-restore)"
            } else {
                ""
            },
            self.duration_s,
            self.seed
        );
        let _ = writeln!(s, "| kills | count |\n|---|---|");
        for (t, n) in &self.kills {
            let _ = writeln!(s, "| {t} | {n} |");
        }
        let recovered: Vec<f64> = self
            .kill_events
            .iter()
            .filter_map(|e| e.recovered_s)
            .collect();
        let _ = writeln!(
            s,
            "\nPods churned: {} ({} added, {} deleted, {} edited); {} keepers.",
            self.churn.total(),
            self.churn.added,
            self.churn.deleted,
            self.churn.edited,
            self.keepers
        );
        let _ = writeln!(
            s,
            "Keepers back after a kill: median {:.1} s, max {:.1} s.",
            crate::kubelet_proc::median(recovered.clone()),
            recovered.iter().copied().fold(0.0, f64::max)
        );
        let _ = writeln!(
            s,
            "Keeper restarts: {} expected (after kills of the runtime itself, or of keepers it had stopped), {} unexpected.",
            self.expected_restarts,
            self.unexpected_restarts.len()
        );
        for u in &self.unexpected_restarts {
            let _ = writeln!(s, "- unexpected: {u}");
        }
        let _ = writeln!(
            s,
            "Leaks: {} (the checks saw {} with the keepers running).",
            self.leaks.len(),
            self.seen_with_pods.join(", ")
        );
        for l in &self.leaks {
            let _ = writeln!(s, "- {}: {}", l.kind, l.what);
        }
        let _ = writeln!(s, "Failures: {}.", self.failures.len());
        for f in &self.failures {
            let _ = writeln!(s, "- {f}");
        }
        let _ = writeln!(s, "\n| RSS (MiB) | start | max | end |\n|---|---|---|---|");
        for (name, sum) in [
            ("kubelet", self.kubelet_rss),
            ("dockershim", self.dockershim_rss),
        ] {
            if let Some(x) = sum {
                let _ = writeln!(
                    s,
                    "| {name} | {:.1} | {:.1} | {:.1} |",
                    x.start_mib, x.max_mib, x.end_mib
                );
            }
        }
        let _ = writeln!(
            s,
            "\n| t (s) | kubelet RSS (MiB) | dockershim RSS (MiB) | kills since the row before |\n|---|---|---|---|"
        );
        let rows = rss::thin(&self.rss_samples, 30);
        let mut prev = 0.0;
        let fmt = |v: Option<f64>| v.map(|m| format!("{m:.1}")).unwrap_or_else(|| "-".into());
        for r in rows {
            let kills: Vec<&str> = self
                .kill_events
                .iter()
                .filter(|e| e.t_s > prev && e.t_s <= r.t_s)
                .map(|e| e.target.name())
                .collect();
            prev = r.t_s;
            let _ = writeln!(
                s,
                "| {:.0} | {} | {} | {} |",
                r.t_s,
                fmt(r.kubelet_mib),
                fmt(r.dockershim_mib),
                kills.join(", ")
            );
        }
        if let Some(d) = &self.dir {
            let _ = writeln!(s, "\nLogs kept in {}.", d.display());
        }
        s
    }
}

/// A duration as `<number><unit>` with unit `s`, `m` or `h` (`90s`, `30m`, `2h`), or plain
/// seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 's')) => (&t[..i], 1.0),
        Some((i, 'm')) => (&t[..i], 60.0),
        Some((i, 'h')) => (&t[..i], 3600.0),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 90s, 30m or 2h"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("{text:?} is not a duration such as 90s, 30m or 2h"));
    }
    Ok(Duration::from_secs_f64(v * mult))
}

/// A random duration in `range` seconds.
fn between(rng: &mut StdRng, (lo, hi): (f64, f64)) -> Duration {
    let s = if hi > lo {
        rng.random_range(lo..hi)
    } else {
        lo
    };
    Duration::from_secs_f64(s.max(0.0))
}

/// Waits until every pod of `uids` runs; their states, or `None` after `timeout`.
async fn wait_running(
    node: &Node,
    uids: &[String],
    timeout: Duration,
) -> Option<BTreeMap<String, KeeperState>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(port) = node.kubelet_port() {
            let states = pods::running_states(port, uids).await;
            if states.len() == uids.len() {
                return Some(states);
            }
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Runs a soak on the test bed.
pub async fn run(tb: &Testbed, settings: &Settings) -> Result<Report> {
    let dir = tempfile::Builder::new()
        .prefix("soak-")
        .tempdir_in(&settings.work_dir)
        .context("the soak's directory")?;
    let run_id = format!("soak{:x}", rand::random::<u32>());
    let cgroup_root = format!("/{run_id}");
    let pids = Arc::new(Mutex::new(Pids::default()));
    let node = Node::start(
        tb,
        settings.runtime,
        dir.path(),
        &run_id,
        &cgroup_root,
        settings.live_restore,
        pids.clone(),
    )
    .await
    .context("starting the node")?;
    let mut node = node;
    let outcome = soak(tb, settings, &run_id, &cgroup_root, &mut node, pids).await;
    node.shutdown().await;
    leaks::remove_cgroup_root(std::path::Path::new(leaks::CGROUP_MOUNT), &cgroup_root);
    for d in leaks::log_dirs(std::path::Path::new(leaks::POD_LOGS), &run_id) {
        let _ = std::fs::remove_dir_all(d);
    }
    let mut report = outcome?;
    if settings.keep_dir {
        report.dir = Some(dir.keep());
    }
    Ok(report)
}

async fn soak(
    tb: &Testbed,
    settings: &Settings,
    run_id: &str,
    cgroup_root: &str,
    n: &mut Node,
    pids: Arc<Mutex<Pids>>,
) -> Result<Report> {
    let mut rng = StdRng::seed_from_u64(settings.seed);
    let mut churn_rng = StdRng::seed_from_u64(settings.seed.wrapping_add(1));
    let manifests = n.manifests();
    let keeper_uids: Vec<String> = (0..settings.keepers)
        .map(|i| format!("{run_id}-keep{i}"))
        .collect();
    for (i, uid) in keeper_uids.iter().enumerate() {
        let name = format!("keep{i}");
        std::fs::write(
            manifests.join(format!("{name}.yaml")),
            pods::manifest(&name, uid, &tb.busybox_image, 0),
        )?;
    }
    let mut failures = Vec::new();
    let Some(mut baseline) = wait_running(n, &keeper_uids, settings.recovery_timeout).await else {
        bail!("the keepers never ran");
    };
    let mut seen_with_pods: Vec<String> = leaks::find(n, run_id, cgroup_root)
        .await
        .into_iter()
        .map(|l| l.kind)
        .collect();
    seen_with_pods.sort();
    seen_with_pods.dedup();

    let start = Instant::now();
    let stop = CancellationToken::new();
    let sampler = tokio::spawn(rss::sample(
        pids.clone(),
        settings.rss_interval,
        start,
        stop.clone(),
    ));
    let churn = Arc::new(Mutex::new(Churn::new(
        run_id,
        &tb.busybox_image,
        &manifests,
        settings.churn_pods,
    )));
    let churner = {
        let (churn, stop, interval) = (churn.clone(), stop.clone(), settings.churn_interval_s);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return Ok::<(), std::io::Error>(()),
                    _ = tokio::time::sleep(between(&mut churn_rng, interval)) => {}
                }
                churn.lock().step(&mut churn_rng)?;
            }
        })
    };

    let mut events = Vec::new();
    let mut kills: BTreeMap<String, u64> = settings
        .runtime
        .targets()
        .iter()
        .map(|t| (t.name().to_string(), 0))
        .collect();
    let mut expected_restarts = 0;
    let mut unexpected = Vec::new();
    let targets = settings.runtime.targets();
    loop {
        let wait = between(&mut rng, settings.kill_interval_s);
        if start.elapsed() + wait >= settings.duration {
            tokio::time::sleep(settings.duration.saturating_sub(start.elapsed())).await;
            break;
        }
        tokio::time::sleep(wait).await;
        let target = targets[rng.random_range(0..targets.len())];
        let downtime_ms = rng.random_range(0..=settings.max_downtime_ms);
        // Anything restarted since the last recovery, with no kill, is unexpected.
        // Keepers not running at the kill (a runtime kill stopped them and their restart is
        // backed off): a kubelet started again forgets the back-off and restarts them at once,
        // as the Go kubelet does; that restart is no healthy container's.
        let mut down_at_kill: Vec<String> = Vec::new();
        if let Some(port) = n.kubelet_port() {
            let now = pods::running_states(port, &keeper_uids).await;
            down_at_kill = keeper_uids
                .iter()
                .filter(|u| !now.contains_key(*u))
                .cloned()
                .collect();
            // A keeper not listed as running right now is caught after the kill instead.
            let comparable: BTreeMap<String, KeeperState> = baseline
                .iter()
                .filter(|(u, _)| now.contains_key(*u))
                .map(|(u, s)| (u.clone(), s.clone()))
                .collect();
            for c in pods::changed(&comparable, &now) {
                unexpected.push(format!(
                    "with no kill, before {}s: {c}",
                    start.elapsed().as_secs()
                ));
            }
            baseline.extend(now);
        }
        let t_s = start.elapsed().as_secs_f64();
        println!(
            "[soak {}] {t_s:.0} s: SIGKILL {} (down {downtime_ms} ms)",
            settings.runtime.name(),
            target.name()
        );
        n.kill(target);
        *kills.entry(target.name().to_string()).or_default() += 1;
        tokio::time::sleep(Duration::from_millis(downtime_ms)).await;
        let mut restarted = n.restart(target).await;
        for _ in 0..3 {
            if restarted.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
            n.kill(target);
            restarted = n.restart(target).await;
        }
        restarted.with_context(|| format!("{} would not start again", target.name()))?;
        let back = Instant::now();
        tokio::time::sleep(settings.settle).await;
        let after = wait_running(n, &keeper_uids, settings.recovery_timeout).await;
        let recovered_s = after.as_ref().map(|_| back.elapsed().as_secs_f64());
        let (keepers_restarted, expected) = match after {
            Some(after) => {
                let changed = pods::changed(&baseline, &after);
                let expected = target.is_runtime();
                if expected {
                    expected_restarts += changed.len();
                } else {
                    let (was_down, was_up): (BTreeMap<_, _>, BTreeMap<_, _>) = baseline
                        .iter()
                        .map(|(u, s)| (u.clone(), s.clone()))
                        .partition(|(u, _)| down_at_kill.contains(u));
                    expected_restarts += pods::changed(&was_down, &after).len();
                    unexpected.extend(pods::changed(&was_up, &after).iter().map(|c| {
                        format!("after the kill of {} at {t_s:.0} s: {c}", target.name())
                    }));
                }
                baseline = after;
                (changed.len(), expected)
            }
            None => {
                failures.push(format!(
                    "the keepers did not all run within {:?} of the restart of {} at {t_s:.0} s",
                    settings.recovery_timeout,
                    target.name()
                ));
                (0, false)
            }
        };
        events.push(KillEvent {
            t_s,
            target,
            downtime_ms,
            recovered_s,
            keepers_restarted,
            expected,
        });
    }
    stop.cancel();
    let duration_s = start.elapsed().as_secs_f64();
    churner
        .await
        .context("the churn")?
        .context("writing manifests")?;
    let samples = sampler.await.context("the RSS sampler")?;
    let (counts, live) = {
        let c = churn.lock();
        (c.counts.clone(), c.live_uids())
    };

    // Everything desired runs, and the keepers are still those of the last recovery.
    let mut all = keeper_uids.clone();
    all.extend(live);
    match wait_running(n, &all, settings.recovery_timeout).await {
        Some(states) => {
            for c in pods::changed(&baseline, &states) {
                unexpected.push(format!("at the end, with no kill: {c}"));
            }
        }
        None => failures.push(format!(
            "not every desired pod ran at the end within {:?}",
            settings.recovery_timeout
        )),
    }
    // Every pod deleted: nothing of any may be left.
    for e in std::fs::read_dir(&manifests)?.flatten() {
        let _ = std::fs::remove_file(e.path());
    }
    let deadline = Instant::now() + settings.recovery_timeout + settings.cleanup_timeout;
    let leaks = loop {
        let found = leaks::find(n, run_id, cgroup_root).await;
        if found.is_empty() || Instant::now() > deadline {
            break found;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    let kubelet_rss = rss::summarize(samples.iter().map(|s| s.kubelet_mib));
    let dockershim_rss = rss::summarize(samples.iter().map(|s| s.dockershim_mib));
    Ok(Report {
        runtime: settings.runtime,
        seed: settings.seed,
        live_restore: settings.live_restore,
        duration_s,
        keepers: settings.keepers,
        kills,
        kill_events: events,
        churn: counts,
        expected_restarts,
        unexpected_restarts: unexpected,
        leaks,
        seen_with_pods,
        failures,
        rss_samples: samples,
        kubelet_rss,
        dockershim_rss,
        dir: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1m").is_err());
    }

    #[test]
    fn the_same_seed_gives_the_same_waits() {
        let mut a = StdRng::seed_from_u64(9);
        let mut b = StdRng::seed_from_u64(9);
        for _ in 0..10 {
            let x = between(&mut a, (20.0, 90.0));
            assert_eq!(x, between(&mut b, (20.0, 90.0)));
            assert!((20.0..90.0).contains(&x.as_secs_f64()));
        }
        assert_eq!(between(&mut a, (5.0, 5.0)), Duration::from_secs(5));
    }

    #[test]
    fn the_table_names_leaks_and_unexpected_restarts() {
        let r = Report {
            runtime: SoakRuntime::Dockershim,
            seed: 4,
            live_restore: false,
            duration_s: 120.0,
            keepers: 3,
            kills: BTreeMap::from([("kubelet".to_string(), 2)]),
            kill_events: vec![KillEvent {
                t_s: 15.0,
                target: Target::Kubelet,
                downtime_ms: 10,
                recovered_s: Some(1.0),
                keepers_restarted: 0,
                expected: false,
            }],
            churn: ChurnCounts {
                added: 3,
                deleted: 1,
                edited: 1,
            },
            expected_restarts: 0,
            unexpected_restarts: vec!["u: a -> b".into()],
            leaks: vec![Leak {
                kind: "mount".into(),
                what: "/x".into(),
            }],
            seen_with_pods: vec!["mount".into()],
            failures: vec![],
            rss_samples: vec![
                rss::Sample {
                    t_s: 10.0,
                    kubelet_mib: Some(20.0),
                    dockershim_mib: Some(9.0),
                },
                rss::Sample {
                    t_s: 20.0,
                    kubelet_mib: Some(22.0),
                    dockershim_mib: None,
                },
            ],
            kubelet_rss: rss::summarize([Some(20.0), Some(22.0)]),
            dockershim_rss: rss::summarize([Some(9.0)]),
            dir: None,
        };
        assert!(!r.clean());
        let t = r.table();
        assert!(t.contains("| kubelet | 2 |"), "{t}");
        assert!(
            t.contains("Pods churned: 5 (3 added, 1 deleted, 1 edited)"),
            "{t}"
        );
        assert!(t.contains("- unexpected: u: a -> b"), "{t}");
        assert!(t.contains("- mount: /x"), "{t}");
        assert!(t.contains("| kubelet | 20.0 | 22.0 | 22.0 |"), "{t}");
        assert!(t.contains("| 10 | 20.0 | 9.0 |  |"), "{t}");
        assert!(t.contains("| 20 | 22.0 | - | kubelet |"), "{t}");
        let json = serde_json::to_value(&r).expect("json");
        assert_eq!(json["runtime"], "dockershim");
        assert_eq!(json["kill_events"][0]["target"], "kubelet");
    }
}
