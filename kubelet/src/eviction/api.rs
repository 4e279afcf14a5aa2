//! The eviction API types (upstream `pkg/kubelet/eviction/api/types.go` and the observation
//! types of `pkg/kubelet/eviction/types.go`): the signals, the node conditions they drive,
//! threshold values (quantity or percentage) and thresholds, and what a signal measured.

use std::collections::HashMap;
use std::time::Duration;

use crate::resource::parse_quantity_scaled;

/// An eviction signal (upstream `evictionapi.Signal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    MemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    PidAvailable,
}

/// A node condition the eviction manager drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeCondition {
    MemoryPressure,
    DiskPressure,
    PidPressure,
}

impl NodeCondition {
    /// The API name (`PIDPressure`, not `PidPressure`).
    pub fn name(self) -> &'static str {
        match self {
            NodeCondition::MemoryPressure => "MemoryPressure",
            NodeCondition::DiskPressure => "DiskPressure",
            NodeCondition::PidPressure => "PIDPressure",
        }
    }
}

impl Signal {
    pub const ALL: [Signal; 6] = [
        Signal::MemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
    ];

    /// The signal's name in flags and config.
    pub fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    pub(super) fn parse(s: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|x| x.name() == s)
    }

    /// The node condition a breach of this signal sets.
    pub fn condition(self) -> NodeCondition {
        match self {
            Signal::MemoryAvailable => NodeCondition::MemoryPressure,
            Signal::PidAvailable => NodeCondition::PidPressure,
            _ => NodeCondition::DiskPressure,
        }
    }

    /// The resource named in eviction messages (upstream `signalToResource`).
    pub fn resource(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory",
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => "ephemeral-storage",
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => "inodes",
            Signal::PidAvailable => "pids",
        }
    }

    /// Upstream evicts for memory first, then the filesystems, then PIDs.
    pub(super) fn priority(self) -> u8 {
        match self {
            Signal::MemoryAvailable => 0,
            Signal::NodeFsAvailable | Signal::NodeFsInodesFree => 1,
            Signal::ImageFsAvailable | Signal::ImageFsInodesFree => 2,
            Signal::PidAvailable => 3,
        }
    }

    pub(super) fn is_bytes(self) -> bool {
        matches!(
            self,
            Signal::MemoryAvailable | Signal::NodeFsAvailable | Signal::ImageFsAvailable
        )
    }
}

/// A threshold value: an absolute quantity or a percentage of capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Quantity(u64),
    Percentage(f64),
}

impl Value {
    pub(super) fn parse(s: &str) -> Result<Value, String> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            let v: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("invalid percentage {s:?}"))?;
            if !(0.0..=100.0).contains(&v) {
                return Err(format!(
                    "eviction percentage threshold must be >= 0% and <= 100%: {s}"
                ));
            }
            return Ok(Value::Percentage(v / 100.0));
        }
        let v = parse_quantity_scaled(s, 1.0).ok_or_else(|| format!("invalid quantity {s:?}"))?;
        u64::try_from(v)
            .map(Value::Quantity)
            .map_err(|_| format!("eviction threshold must be positive: {s}"))
    }

    /// The value in units of the signal, given the capacity.
    pub fn amount(self, capacity: u64) -> u64 {
        match self {
            Value::Quantity(q) => q,
            Value::Percentage(p) => (capacity as f64 * p).round() as u64,
        }
    }

    pub(super) fn render(self, signal: Signal) -> String {
        match self {
            Value::Percentage(p) => format!("{}%", p * 100.0),
            Value::Quantity(q) => render_amount(signal, q),
        }
    }
}

pub(super) fn render_amount(signal: Signal, v: u64) -> String {
    if signal.is_bytes() && v >= 1024 && v.is_multiple_of(1024) {
        let mut v = v;
        let mut unit = 0;
        let units = ["", "Ki", "Mi", "Gi", "Ti"];
        while v.is_multiple_of(1024) && v >= 1024 && unit < units.len() - 1 {
            v /= 1024;
            unit += 1;
        }
        format!("{v}{}", units[unit])
    } else {
        v.to_string()
    }
}

/// One eviction threshold (upstream `evictionapi.Threshold`; the operator is always `<`).
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub value: Value,
    /// Zero for hard thresholds.
    pub grace_period: Duration,
    pub min_reclaim: Option<Value>,
}

impl Threshold {
    pub fn is_hard(&self) -> bool {
        self.grace_period.is_zero()
    }

    pub(super) fn key(&self) -> (Signal, bool) {
        (self.signal, self.is_hard())
    }
}

/// What a signal measured: available and capacity in the signal's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    pub available: u64,
    pub capacity: u64,
}

/// All signals measured in one round.
pub type Observations = HashMap<Signal, Observation>;
