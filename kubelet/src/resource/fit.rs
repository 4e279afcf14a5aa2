//! Node admission's resource fit (upstream's scheduler `NodeResourcesFit`, which the kubelet's
//! predicate admit handler runs again): [`InsufficientResource`], upstream's
//! `InsufficientResourceError`, the pod count check of `fitsRequest`, its CPU and memory checks
//! ([`fit_requests`]) over a pod's effective requests ([`pod_requests`], upstream
//! `computePodResourceRequest`), and the node's allocatable amounts ([`allocatable`], upstream
//! `GetNodeAllocatableReservation`).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Pod;

use super::parse_quantity_scaled;

/// A pod's or a node's CPU (millicores) and memory (bytes), as the fit checks count them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
}

impl std::iter::Sum for Resources {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        iter.fold(Resources::default(), |a, r| Resources {
            milli_cpu: a.milli_cpu.saturating_add(r.milli_cpu),
            memory: a.memory.saturating_add(r.memory),
        })
    }
}

/// Upstream `computePodResourceRequest`: the sum of the app containers' requests, at least the
/// largest init container's, plus the pod overhead.
pub fn pod_requests(pod: &Pod) -> Resources {
    let req = |c: &k8s_openapi::api::core::v1::Container| Resources {
        milli_cpu: c
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|m| m.get("cpu"))
            .and_then(|q| parse_quantity_scaled(&q.0, 1000.0))
            .unwrap_or(0),
        memory: c
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|m| m.get("memory"))
            .and_then(|q| parse_quantity_scaled(&q.0, 1.0))
            .unwrap_or(0),
    };
    let Some(spec) = pod.spec.as_ref() else {
        return Resources::default();
    };
    let mut total = Resources::default();
    for c in &spec.containers {
        let r = req(c);
        total.milli_cpu = total.milli_cpu.saturating_add(r.milli_cpu);
        total.memory = total.memory.saturating_add(r.memory);
    }
    for c in spec.init_containers.iter().flatten() {
        let r = req(c);
        total.milli_cpu = total.milli_cpu.max(r.milli_cpu);
        total.memory = total.memory.max(r.memory);
    }
    if let Some(o) = spec.overhead.as_ref() {
        let get = |k: &str, scale| o.get(k).and_then(|q| parse_quantity_scaled(&q.0, scale));
        total.milli_cpu = total
            .milli_cpu
            .saturating_add(get("cpu", 1000.0).unwrap_or(0));
        total.memory = total.memory.saturating_add(get("memory", 1.0).unwrap_or(0));
    }
    total
}

/// Upstream `fitsRequest`'s CPU then memory checks: a pod asking for more than what the admitted
/// pods (`used`) leave of `allocatable` does not fit. A pod that asks for nothing always fits.
pub fn fit_requests(
    pod: Resources,
    used: Resources,
    allocatable: Resources,
) -> Result<(), InsufficientResource> {
    for (name, want, have, cap) in [
        ("cpu", pod.milli_cpu, used.milli_cpu, allocatable.milli_cpu),
        ("memory", pod.memory, used.memory, allocatable.memory),
    ] {
        if want > 0 && want > cap.saturating_sub(have) {
            return Err(InsufficientResource {
                resource: name.into(),
                requested: want,
                used: have,
                capacity: cap,
            });
        }
    }
    Ok(())
}

/// The node's allocatable amounts (upstream `GetNodeAllocatableReservation` and
/// `getAllocatableResources`): `capacity` less the reservations (kube-reserved, system-reserved,
/// hard eviction thresholds), per resource in its base unit (millicores, bytes, count), never
/// below zero.
pub fn allocatable(
    capacity: &BTreeMap<String, i64>,
    reservations: &[&BTreeMap<String, i64>],
) -> BTreeMap<String, i64> {
    capacity
        .iter()
        .map(|(k, cap)| {
            let reserved = reservations
                .iter()
                .filter_map(|r| r.get(k))
                .fold(0i64, |a, b| a.saturating_add(*b));
            (k.clone(), cap.saturating_sub(reserved).max(0))
        })
        .collect()
}

/// `--kube-reserved` / `--system-reserved` values (`cpu=100m,memory=100Mi,...`) in base units:
/// CPU in millicores, everything else in whole units. `Err` names the bad entry.
pub fn parse_reservation(m: &BTreeMap<String, String>) -> Result<BTreeMap<String, i64>, String> {
    m.iter()
        .map(|(k, v)| {
            let scale = if k == "cpu" { 1000.0 } else { 1.0 };
            match parse_quantity_scaled(v, scale) {
                Some(n) if n >= 0 => Ok((k.clone(), n)),
                _ => Err(format!("{k}={v}: not a non-negative quantity")),
            }
        })
        .collect()
}

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

    fn pod(app: &[(&str, &str)], init: &[(&str, &str)]) -> Pod {
        use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let c = |(cpu, mem): &(&str, &str)| Container {
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([
                    ("cpu".to_string(), Quantity(cpu.to_string())),
                    ("memory".to_string(), Quantity(mem.to_string())),
                ])),
                ..Default::default()
            }),
            ..Default::default()
        };
        Pod {
            spec: Some(PodSpec {
                containers: app.iter().map(c).collect(),
                init_containers: Some(init.iter().map(c).collect()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn requests_sum_apps_and_take_the_largest_init() {
        let p = pod(&[("100m", "64Mi"), ("250m", "1Gi")], &[("500m", "10Mi")]);
        assert_eq!(
            pod_requests(&p),
            Resources {
                milli_cpu: 500,
                memory: (64 << 20) + (1 << 30)
            }
        );
        assert_eq!(pod_requests(&Pod::default()), Resources::default());
    }

    #[test]
    fn cpu_then_memory_must_fit_what_is_left() {
        let alloc = Resources {
            milli_cpu: 2000,
            memory: 1 << 30,
        };
        let used = Resources {
            milli_cpu: 1500,
            memory: 1 << 29,
        };
        let fits = Resources {
            milli_cpu: 500,
            memory: 1 << 29,
        };
        assert_eq!(fit_requests(fits, used, alloc), Ok(()));
        let e = fit_requests(
            Resources {
                milli_cpu: 501,
                memory: 1,
            },
            used,
            alloc,
        )
        .unwrap_err();
        assert_eq!(e.reason(), "OutOfcpu");
        assert_eq!(
            e.to_string(),
            "Node didn't have enough resource: cpu, requested: 501, used: 1500, capacity: 2000"
        );
        let e = fit_requests(
            Resources {
                milli_cpu: 0,
                memory: (1 << 29) + 1,
            },
            used,
            alloc,
        )
        .unwrap_err();
        assert_eq!(e.reason(), "OutOfmemory");
        // Asking for nothing always fits, even on a full node.
        assert_eq!(fit_requests(Resources::default(), alloc, alloc), Ok(()));
    }

    #[test]
    fn allocatable_is_capacity_less_reservations() {
        let cap = BTreeMap::from([
            ("cpu".to_string(), 4000),
            ("memory".to_string(), 8 << 30),
            ("pods".to_string(), 110),
        ]);
        let kube = parse_reservation(&BTreeMap::from([
            ("cpu".to_string(), "100m".to_string()),
            ("memory".to_string(), "1Gi".to_string()),
        ]))
        .expect("kube");
        let system = parse_reservation(&BTreeMap::from([("cpu".to_string(), "0.5".to_string())]))
            .expect("system");
        let eviction = BTreeMap::from([("memory".to_string(), 100 << 20)]);
        let a = allocatable(&cap, &[&kube, &system, &eviction]);
        assert_eq!(a["cpu"], 3400);
        assert_eq!(a["memory"], (7 << 30) - (100 << 20));
        assert_eq!(a["pods"], 110);
        let huge = BTreeMap::from([("cpu".to_string(), 10_000)]);
        assert_eq!(allocatable(&cap, &[&huge])["cpu"], 0);
        assert!(parse_reservation(&BTreeMap::from([("memory".into(), "lots".into())])).is_err());
    }
}
