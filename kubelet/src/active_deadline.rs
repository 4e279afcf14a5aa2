//! The active deadline handler (upstream `pkg/kubelet/active_deadline.go`): a pod with
//! `spec.activeDeadlineSeconds` that has been active on the node (since its status's start
//! time) that long is terminated by the kubelet and ends `Failed` with reason
//! `DeadlineExceeded`. The field may be set or shortened on a running pod, so the sync loop
//! asks on every tick (upstream: a `PodSyncLoopHandler` and a `PodSyncHandler`). Vocabulary
//! layer: imports nothing of the crate.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The status reason of a pod past its deadline.
pub const REASON: &str = "DeadlineExceeded";
/// The status message (and the event's) of a pod past its deadline.
pub const MESSAGE: &str = "Pod was active on the node longer than the specified deadline";

/// Upstream `pastActiveDeadline`: the pod has a deadline, a start time, and has been active
/// since then for at least the deadline.
pub fn past_active_deadline(pod: &Pod, start_time: Option<&Time>, now: Timestamp) -> bool {
    let Some(deadline) = pod.spec.as_ref().and_then(|s| s.active_deadline_seconds) else {
        return false;
    };
    let Some(start) = start_time else {
        return false;
    };
    let active = now.as_second().saturating_sub(start.0.as_second());
    active >= deadline
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(deadline: Option<i64>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "activeDeadlineSeconds": deadline},
        }))
        .expect("pod")
    }

    #[test]
    fn a_pod_is_past_its_deadline_once_active_that_long() {
        let start = Timestamp::from_second(1_000).expect("ts");
        let at = |s: i64| Timestamp::from_second(s).expect("ts");
        let t = Time(start);
        assert!(!past_active_deadline(&pod(Some(5)), Some(&t), at(1_004)));
        assert!(past_active_deadline(&pod(Some(5)), Some(&t), at(1_005)));
        // No deadline, or not started yet: never.
        assert!(!past_active_deadline(&pod(None), Some(&t), at(9_999)));
        assert!(!past_active_deadline(&pod(Some(5)), None, at(9_999)));
    }
}
