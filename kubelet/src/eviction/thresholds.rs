//! Thresholds and the decision to act on them (upstream `pkg/kubelet/eviction/helpers.go`
//! `ParseThresholdConfig` and `thresholdsMet`, and the deciding part of `synchronize`): the
//! `--eviction-*` flag maps parsed into thresholds, the resolved [`EvictionConfig`], and the
//! [`Decider`] that holds grace periods, minimum reclaim and the pressure transition period.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use super::api::{NodeCondition, Observations, Signal, Threshold, Value};

/// Upstream `DefaultEvictionHard` (Linux).
pub const DEFAULT_EVICTION_HARD: &str = "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%,imagefs.inodesFree<5%";

/// Parse a `--eviction-hard`-style flag (`memory.available<100Mi,nodefs.available<10%`) into
/// a signal -> value map (upstream `MapStringString` with `<`).
pub fn parse_threshold_flag(s: &str) -> Result<BTreeMap<String, String>, String> {
    crate::cliflag::map_string_string(s, '<')
        .map(|v| v.into_iter().collect())
        .map_err(|p| format!("malformed pair {p:?}, expect signal<value"))
}

/// Parse a `--eviction-soft-grace-period`-style flag (`memory.available=1m30s`).
pub fn parse_pairs_flag(s: &str) -> Result<BTreeMap<String, String>, String> {
    crate::cliflag::map_string_string(s, '=')
        .map(|v| v.into_iter().collect())
        .map_err(|p| format!("malformed pair {p:?}, expect signal=value"))
}

/// Upstream `ParseThresholdConfig`: hard and soft thresholds, soft grace periods (every soft
/// threshold needs one, and only those may have one) and minimum reclaims.
pub fn parse_thresholds(
    hard: &BTreeMap<String, String>,
    soft: &BTreeMap<String, String>,
    soft_grace: &BTreeMap<String, String>,
    min_reclaim: &BTreeMap<String, String>,
) -> Result<Vec<Threshold>, String> {
    let signal =
        |k: &str| Signal::parse(k).ok_or_else(|| format!("unsupported eviction signal {k}"));
    let mut reclaim = HashMap::new();
    for (k, v) in min_reclaim {
        let s = signal(k)?;
        reclaim.insert(s, Value::parse(v).map_err(|e| format!("{k}: {e}"))?);
    }
    let mut out = Vec::new();
    for (k, v) in hard {
        let s = signal(k)?;
        let value = Value::parse(v).map_err(|e| format!("{k}: {e}"))?;
        // A zero threshold disables the signal (upstream drops it).
        if matches!(value, Value::Quantity(0)) || value == Value::Percentage(0.0) {
            continue;
        }
        out.push(Threshold {
            signal: s,
            value,
            grace_period: Duration::ZERO,
            min_reclaim: reclaim.get(&s).copied(),
        });
    }
    for k in soft_grace.keys() {
        if !soft.contains_key(k) {
            return Err(format!(
                "grace period specified for an eviction signal without a soft threshold: {k}"
            ));
        }
    }
    for (k, v) in soft {
        let s = signal(k)?;
        let value = Value::parse(v).map_err(|e| format!("{k}: {e}"))?;
        let grace = soft_grace
            .get(k)
            .ok_or_else(|| format!("no grace period specified for soft eviction threshold {k}"))?;
        let grace = crate::duration::parse_duration(grace)
            .map_err(|e| format!("grace period of {k}: {e}"))?;
        if grace.is_zero() {
            return Err(format!(
                "grace period of soft eviction threshold {k} must be positive"
            ));
        }
        out.push(Threshold {
            signal: s,
            value,
            grace_period: grace,
            min_reclaim: reclaim.get(&s).copied(),
        });
    }
    Ok(out)
}

/// The eviction settings (flags and config fields of the same names).
#[derive(Debug, Clone, PartialEq)]
pub struct EvictionConfig {
    pub thresholds: Vec<Threshold>,
    /// `--eviction-pressure-transition-period` (5m).
    pub pressure_transition_period: Duration,
    /// `--eviction-max-pod-grace-period` (0: the pod's own grace period).
    pub max_pod_grace_period: i64,
}

impl Default for EvictionConfig {
    fn default() -> Self {
        let hard = parse_threshold_flag(DEFAULT_EVICTION_HARD).unwrap_or_default();
        let empty = BTreeMap::new();
        Self {
            thresholds: parse_thresholds(&hard, &empty, &empty, &empty).unwrap_or_default(),
            pressure_transition_period: Duration::from_secs(300),
            max_pod_grace_period: 0,
        }
    }
}

/// Upstream `hardEvictionReservation`: what the hard thresholds hold back from allocatable —
/// `memory.available` as `memory`, `nodefs.available` as `ephemeral-storage` — in bytes, a
/// percentage taken of that resource's capacity (`capacity`, in bytes).
pub fn hard_eviction_reservation(
    config: &EvictionConfig,
    capacity: &BTreeMap<String, i64>,
) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for t in config
        .thresholds
        .iter()
        .filter(|t| t.grace_period.is_zero())
    {
        let resource = match t.signal {
            Signal::MemoryAvailable => "memory",
            Signal::NodeFsAvailable => "ephemeral-storage",
            _ => continue,
        };
        let cap = capacity
            .get(resource)
            .and_then(|c| u64::try_from(*c).ok())
            .unwrap_or(0);
        let amount = i64::try_from(t.value.amount(cap)).unwrap_or(i64::MAX);
        out.insert(resource.to_string(), amount);
    }
    out
}

/// Upstream `thresholdsMet`: the thresholds whose signal is below their value (plus the minimum
/// reclaim when `enforce_min_reclaim`, i.e. a threshold stays met until that much is freed).
pub fn thresholds_met(
    thresholds: &[Threshold],
    obs: &Observations,
    enforce_min_reclaim: bool,
) -> Vec<Threshold> {
    thresholds
        .iter()
        .filter(|t| {
            let Some(o) = obs.get(&t.signal) else {
                return false;
            };
            let mut q = t.value.amount(o.capacity);
            if enforce_min_reclaim && let Some(r) = t.min_reclaim {
                q = q.saturating_add(r.amount(o.capacity));
            }
            o.available < q
        })
        .cloned()
        .collect()
}

/// The parts of upstream `managerImpl.synchronize` that decide, with no I/O: which thresholds
/// are met and past their grace period, and which node conditions hold.
#[derive(Debug, Default)]
pub struct Decider {
    thresholds_met: Vec<Threshold>,
    first_observed: HashMap<(Signal, bool), Instant>,
    conditions_last_observed: HashMap<NodeCondition, Instant>,
}

impl Decider {
    /// One round at `now`: returns the node conditions to report and the thresholds to act on,
    /// the most urgent first.
    pub fn step(
        &mut self,
        config: &EvictionConfig,
        obs: &Observations,
        now: Instant,
    ) -> (HashSet<NodeCondition>, Vec<Threshold>) {
        let mut met = thresholds_met(&config.thresholds, obs, false);
        if !self.thresholds_met.is_empty() {
            for t in thresholds_met(&self.thresholds_met, obs, true) {
                if !met.contains(&t) {
                    met.push(t);
                }
            }
        }
        let first: HashMap<(Signal, bool), Instant> = met
            .iter()
            .map(|t| {
                let k = t.key();
                (k, self.first_observed.get(&k).copied().unwrap_or(now))
            })
            .collect();
        for t in &met {
            self.conditions_last_observed
                .insert(t.signal.condition(), now);
        }
        self.conditions_last_observed.retain(|_, at| {
            now.saturating_duration_since(*at) < config.pressure_transition_period || *at == now
        });
        let conditions = self.conditions_last_observed.keys().copied().collect();
        let mut act: Vec<Threshold> = met
            .iter()
            .filter(|t| {
                first
                    .get(&t.key())
                    .is_some_and(|at| now.saturating_duration_since(*at) >= t.grace_period)
            })
            .cloned()
            .collect();
        act.sort_by_key(|t| (t.signal.priority(), !t.is_hard()));
        self.first_observed = first;
        self.thresholds_met = met;
        (conditions, act)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Observation;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_parse_to_upstreams_hard_thresholds() {
        let c = EvictionConfig::default();
        assert_eq!(c.thresholds.len(), 5);
        let mem = c
            .thresholds
            .iter()
            .find(|t| t.signal == Signal::MemoryAvailable)
            .unwrap();
        assert_eq!(mem.value, Value::Quantity(100 << 20));
        assert!(mem.is_hard());
        let nodefs = c
            .thresholds
            .iter()
            .find(|t| t.signal == Signal::NodeFsAvailable)
            .unwrap();
        assert_eq!(nodefs.value, Value::Percentage(0.1));
        assert_eq!(nodefs.value.amount(1000), 100);
    }

    #[test]
    fn soft_thresholds_need_grace_periods_and_bad_input_is_named() {
        let none = BTreeMap::new();
        let soft = map(&[("memory.available", "1Gi")]);
        let e = parse_thresholds(&none, &soft, &none, &none).unwrap_err();
        assert!(e.contains("no grace period"), "{e}");
        let grace = map(&[("nodefs.available", "1m")]);
        let e = parse_thresholds(&none, &soft, &grace, &none).unwrap_err();
        assert!(e.contains("without a soft threshold"), "{e}");
        let grace = map(&[("memory.available", "1m30s")]);
        let t = parse_thresholds(&none, &soft, &grace, &none).unwrap();
        assert_eq!(t[0].grace_period, Duration::from_secs(90));
        let e = parse_thresholds(&map(&[("cpu.available", "1")]), &none, &none, &none).unwrap_err();
        assert!(
            e.contains("unsupported eviction signal cpu.available"),
            "{e}"
        );
        let e = parse_thresholds(&map(&[("nodefs.available", "120%")]), &none, &none, &none)
            .unwrap_err();
        assert!(e.contains("<= 100%"), "{e}");
        assert_eq!(
            parse_threshold_flag("memory.available<100Mi, nodefs.available<10%").unwrap(),
            map(&[("memory.available", "100Mi"), ("nodefs.available", "10%")])
        );
        assert!(parse_threshold_flag("memory.available=1").is_err());
    }

    fn obs(signal: Signal, available: u64, capacity: u64) -> Observations {
        [(
            signal,
            Observation {
                available,
                capacity,
            },
        )]
        .into_iter()
        .collect()
    }

    #[test]
    fn hard_thresholds_act_at_once_and_conditions_linger_for_the_transition_period() {
        let config = EvictionConfig {
            thresholds: parse_thresholds(
                &map(&[("nodefs.available", "50%")]),
                &BTreeMap::new(),
                &BTreeMap::new(),
                &map(&[("nodefs.available", "10%")]),
            )
            .unwrap(),
            pressure_transition_period: Duration::from_secs(30),
            max_pod_grace_period: 0,
        };
        let mut d = Decider::default();
        let t0 = Instant::now();
        let (c, act) = d.step(&config, &obs(Signal::NodeFsAvailable, 60, 100), t0);
        assert!(c.is_empty() && act.is_empty());
        let (c, act) = d.step(
            &config,
            &obs(Signal::NodeFsAvailable, 40, 100),
            t0 + Duration::from_secs(10),
        );
        assert_eq!(c, HashSet::from([NodeCondition::DiskPressure]));
        assert_eq!(act.len(), 1);
        // Above the threshold but not by the minimum reclaim: still met.
        let (_, act) = d.step(
            &config,
            &obs(Signal::NodeFsAvailable, 55, 100),
            t0 + Duration::from_secs(20),
        );
        assert_eq!(act.len(), 1, "minimum reclaim not reached yet");
        let (c, act) = d.step(
            &config,
            &obs(Signal::NodeFsAvailable, 70, 100),
            t0 + Duration::from_secs(30),
        );
        assert!(act.is_empty());
        assert_eq!(
            c,
            HashSet::from([NodeCondition::DiskPressure]),
            "held for the transition period"
        );
        let (c, _) = d.step(
            &config,
            &obs(Signal::NodeFsAvailable, 70, 100),
            t0 + Duration::from_secs(51),
        );
        assert!(c.is_empty(), "released after the transition period");
    }

    #[test]
    fn soft_thresholds_wait_for_their_grace_period() {
        let config = EvictionConfig {
            thresholds: parse_thresholds(
                &BTreeMap::new(),
                &map(&[("memory.available", "1Gi")]),
                &map(&[("memory.available", "30s")]),
                &BTreeMap::new(),
            )
            .unwrap(),
            pressure_transition_period: Duration::from_secs(0),
            max_pod_grace_period: 0,
        };
        let mut d = Decider::default();
        let t0 = Instant::now();
        let low = obs(Signal::MemoryAvailable, 512 << 20, 8 << 30);
        let (c, act) = d.step(&config, &low, t0);
        assert_eq!(c, HashSet::from([NodeCondition::MemoryPressure]));
        assert!(act.is_empty(), "grace period not over");
        let (_, act) = d.step(&config, &low, t0 + Duration::from_secs(29));
        assert!(act.is_empty());
        let (_, act) = d.step(&config, &low, t0 + Duration::from_secs(30));
        assert_eq!(act.len(), 1);
        assert!(!act[0].is_hard());
    }
}
