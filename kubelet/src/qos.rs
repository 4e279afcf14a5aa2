//! Pod quality-of-service classes (upstream `pkg/apis/core/v1/helper/qos`): which of
//! `Guaranteed`, `Burstable` and `BestEffort` a pod is, from its containers' requests and limits.
//! Vocabulary layer: imports only [`crate::resource`].

use k8s_openapi::api::core::v1::Pod;

/// Upstream `GetPodQOS` (cpu and memory only): `Guaranteed` when every container has cpu and
/// memory limits and its requests equal them, `BestEffort` when nothing is requested or
/// limited, else `Burstable`.
pub fn get_pod_qos(pod: &Pod) -> &'static str {
    use crate::resource::parse_quantity_scaled;
    let spec = pod.spec.as_ref();
    let all = spec
        .map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .into_iter()
        .flatten();
    let value = |m: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
                 k: &str| {
        m.and_then(|m| m.get(k))
            .and_then(|q| parse_quantity_scaled(&q.0, 1000.0))
            .filter(|v| *v > 0)
    };
    let (mut any, mut guaranteed) = (false, true);
    for c in all {
        let r = c.resources.as_ref();
        let limits = r.and_then(|r| r.limits.as_ref());
        let requests = r.and_then(|r| r.requests.as_ref());
        for k in ["cpu", "memory"] {
            let (l, q) = (value(limits, k), value(requests, k));
            any |= l.is_some() || q.is_some();
            match (l, q) {
                (Some(l), Some(q)) if l == q => {}
                (Some(_), None) => {}
                _ => guaranteed = false,
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}
