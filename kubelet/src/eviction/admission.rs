//! Pod admission under node pressure (upstream `pkg/kubelet/eviction/eviction_manager.go`
//! `Admit`) and [`EvictionState`], the node conditions the manager publishes for the rest of
//! the kubelet.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Pod;
use parking_lot::RwLock;

use super::api::NodeCondition;
use super::rank::is_critical;
use crate::qos::get_pod_qos;

/// Upstream eviction `Admit`: under memory pressure only BestEffort pods are rejected; under
/// any other pressure every pod is; critical pods always get in.
pub fn admit(conditions: &HashSet<NodeCondition>, pod: &Pod) -> Result<(), String> {
    if conditions.is_empty() || is_critical(pod) {
        return Ok(());
    }
    let only_memory = conditions.len() == 1 && conditions.contains(&NodeCondition::MemoryPressure);
    if only_memory && get_pod_qos(pod) != "BestEffort" {
        return Ok(());
    }
    let mut names: Vec<&str> = conditions.iter().map(|c| c.name()).collect();
    names.sort_unstable();
    Err(format!("The node had condition: [{}]. ", names.join(", ")))
}

/// What the rest of the kubelet reads of the eviction manager.
#[derive(Debug, Default)]
pub struct EvictionState {
    conditions: RwLock<HashSet<NodeCondition>>,
}

impl EvictionState {
    /// The node conditions now in force.
    pub fn conditions(&self) -> HashSet<NodeCondition> {
        self.conditions.read().clone()
    }

    pub fn has(&self, c: NodeCondition) -> bool {
        self.conditions.read().contains(&c)
    }

    pub(super) fn set(&self, c: HashSet<NodeCondition>) {
        *self.conditions.write() = c;
    }

    /// Should `pod` be admitted? `Err` carries the rejection message (reason `Evicted`).
    pub fn admit(&self, pod: &Pod) -> Result<(), String> {
        admit(&self.conditions(), pod)
    }
}
