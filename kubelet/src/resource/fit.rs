//! Node admission's resource fit (upstream's scheduler `NodeResourcesFit`, which the kubelet's
//! predicate admit handler runs again): [`InsufficientResource`], upstream's
//! `InsufficientResourceError`, and the pod count check of `fitsRequest`.

use std::fmt;

/// Upstream `InsufficientResourceError` (the scheduler's `NodeResourcesFit`, run again by the
/// kubelet's predicate admit handler): `requested` more of `resource` does not fit beside
/// `used` within `capacity`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsufficientResource {
    /// The resource name (`pods`, `cpu`, `memory`, ...).
    pub resource: String,
    /// What the pod asks for.
    pub requested: i64,
    /// What the admitted pods use.
    pub used: i64,
    /// The node's allocatable amount.
    pub capacity: i64,
}

impl InsufficientResource {
    /// The pod's status reason when admission fails on it (upstream's predicate admit handler:
    /// `OutOf<resource>`, e.g. `OutOfpods`).
    pub fn reason(&self) -> String {
        format!("OutOf{}", self.resource)
    }
}

/// Upstream `InsufficientResourceError.Error()`.
impl fmt::Display for InsufficientResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Node didn't have enough resource: {}, requested: {}, used: {}, capacity: {}",
            self.resource, self.requested, self.used, self.capacity
        )
    }
}

/// Does one more pod fit beside `active_pods` admitted ones on a node of `max_pods`
/// (`--max-pods`, the node's allocatable `pods`)? Upstream `fitsRequest`'s pod count check:
/// `len(nodeInfo.Pods)+1 > allowedPodNumber` fails.
pub fn fit_pod_count(active_pods: usize, max_pods: i64) -> Result<(), InsufficientResource> {
    let used = i64::try_from(active_pods).unwrap_or(i64::MAX);
    if used >= max_pods {
        return Err(InsufficientResource {
            resource: "pods".into(),
            requested: 1,
            used,
            capacity: max_pods,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_count_admission() {
        assert_eq!(fit_pod_count(0, 3), Ok(()));
        assert_eq!(fit_pod_count(2, 3), Ok(()));
        let e = fit_pod_count(3, 3).unwrap_err();
        assert_eq!(e.reason(), "OutOfpods");
        assert_eq!(
            e.to_string(),
            "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"
        );
        assert_eq!(fit_pod_count(110, 110).unwrap_err().used, 110);
        assert!(fit_pod_count(0, 0).is_err());
        assert!(fit_pod_count(0, -1).is_err());
        assert!(fit_pod_count(usize::MAX, i64::MAX).is_err());
    }
}
