//! Node-pressure eviction (upstream `pkg/kubelet/eviction`). The eviction manager watches the
//! node's signals (`memory.available`, `nodefs.available`, `nodefs.inodesFree`,
//! `imagefs.available`, `imagefs.inodesFree`, `pid.available`) every 10 s against the hard and
//! soft thresholds of `--eviction-hard` / `--eviction-soft` (with their grace periods and
//! minimum reclaim), keeps the node conditions MemoryPressure / DiskPressure / PIDPressure
//! (held for `--eviction-pressure-transition-period` after the last breach), first reclaims
//! node-level resources (dead containers, unused images) and, when that is not enough, evicts
//! one pod per round: ranked by whether it uses more than it requested, its priority, its QoS
//! class (BestEffort, Burstable, Guaranteed) and its usage; critical pods (static pods, priority
//! of system-critical and above) are never evicted. The evicted pod ends in phase Failed with
//! reason `Evicted`. It owns its thresholds and observation history; the sync loop owns the
//! killing (it receives [`EvictRequest`]s); [`EvictionState`] is what the rest of the kubelet
//! reads (conditions, pod admission).
//!
//! Layout, as upstream's `pkg/kubelet/eviction`: `api.rs` (signals, thresholds,
//! observations), `thresholds.rs` (flag parsing, config, the decider), `measure.rs` (the node's
//! signals), `rank.rs` (which pod goes first, the eviction message), `admission.rs` (admit
//! under pressure, the published state) and `manager.rs` (the task). This file re-exports
//! their public items.

mod admission;
mod api;
mod manager;
mod measure;
mod rank;
mod thresholds;

pub use admission::{EvictionState, admit};
pub use api::{NodeCondition, Observation, Observations, Signal, Threshold, Value};
pub use manager::{
    ContainerGc, EvictRequest, EvictionManager, IMMEDIATE_GRACE_SECONDS, ImageGc,
    MONITORING_PERIOD, ManagerParts, REASON,
};
pub use measure::{observe, parse_meminfo};
pub use rank::{
    PodUsage, SYSTEM_CRITICAL_PRIORITY, eviction_message, is_critical, rank, usage_for,
};
pub use thresholds::hard_eviction_reservation;
pub use thresholds::{
    DEFAULT_EVICTION_HARD, Decider, EvictionConfig, parse_pairs_flag, parse_threshold_flag,
    parse_thresholds, thresholds_met,
};
