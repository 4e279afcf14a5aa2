//! Which pod to evict (upstream `pkg/kubelet/eviction/helpers.go` `rankMemoryPressure`,
//! `rankDiskPressureFunc`, `rankPIDPressure` and `evictionMessage`, with upstream
//! `IsCriticalPod`): what a pod uses against a signal, the ranking, and the message the
//! evicted pod carries. Critical pods are never ranked.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

use super::api::{Observation, Signal, Threshold, render_amount};
use crate::qos::get_pod_qos;
use crate::resource::parse_quantity_scaled;
use crate::types::{API_SOURCE, CONFIG_SOURCE_ANNOTATION};

/// Upstream `scheduling.SystemCriticalPriority`: pods at or above it are critical.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// What one pod uses, for ranking.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodUsage {
    pub memory_working_set: u64,
    /// Writable layers of its containers.
    pub rootfs: u64,
    /// Its log directory.
    pub logs: u64,
    /// Its local volumes (emptyDir on disk) under the pod directory.
    pub volumes: u64,
    /// Files in logs and volumes.
    pub inodes: u64,
}

/// Is `pod` critical (upstream `IsCriticalPod`): a static or mirror pod, or priority of
/// system-critical and above. Critical pods are never evicted nor rejected.
pub fn is_critical(pod: &Pod) -> bool {
    let source = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_SOURCE_ANNOTATION));
    let is_static = source.is_some_and(|s| s != API_SOURCE);
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(crate::types::CONFIG_MIRROR_ANNOTATION));
    let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    is_static || mirror || priority >= SYSTEM_CRITICAL_PRIORITY
}

fn request_sum(pod: &Pod, resource: &str) -> u64 {
    pod.spec
        .as_ref()
        .map(|s| {
            s.containers
                .iter()
                .filter_map(|c| {
                    let q = c.resources.as_ref()?.requests.as_ref()?.get(resource)?;
                    parse_quantity_scaled(&q.0, 1.0)
                })
                .map(|v| u64::try_from(v).unwrap_or(0))
                .sum()
        })
        .unwrap_or(0)
}

fn qos_rank(pod: &Pod) -> u8 {
    match get_pod_qos(pod) {
        "BestEffort" => 0,
        "Burstable" => 1,
        _ => 2,
    }
}

/// The usage of `u` that counts against `signal`.
pub fn usage_for(signal: Signal, u: &PodUsage, dedicated_imagefs: bool) -> u64 {
    match signal {
        Signal::MemoryAvailable => u.memory_working_set,
        Signal::NodeFsAvailable if dedicated_imagefs => u.logs + u.volumes,
        Signal::ImageFsAvailable if dedicated_imagefs => u.rootfs,
        Signal::NodeFsAvailable | Signal::ImageFsAvailable => u.rootfs + u.logs + u.volumes,
        Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => u.inodes,
        Signal::PidAvailable => 0,
    }
}

/// Upstream `rankMemoryPressure` / `rankDiskPressureFunc` / `rankPIDPressure`: pods using more
/// than they requested first, then by priority (lowest first), then by QoS class (BestEffort,
/// Burstable, Guaranteed), then by usage above the request (largest first). Critical pods are
/// left out: they are never evicted.
pub fn rank<'a>(
    signal: Signal,
    pods: &'a [Pod],
    usage: &HashMap<String, PodUsage>,
    dedicated_imagefs: bool,
) -> Vec<&'a Pod> {
    let request_resource = match signal {
        Signal::MemoryAvailable => Some("memory"),
        Signal::NodeFsAvailable | Signal::ImageFsAvailable => Some("ephemeral-storage"),
        _ => None,
    };
    let mut ranked: Vec<(bool, i32, u8, i128, &Pod)> = pods
        .iter()
        .filter(|p| !is_critical(p))
        .map(|p| {
            let uid = p.metadata.uid.as_deref().unwrap_or_default();
            let used = usage
                .get(uid)
                .map(|u| usage_for(signal, u, dedicated_imagefs))
                .unwrap_or(0);
            let request = request_resource.map(|r| request_sum(p, r)).unwrap_or(0);
            let exceeds = request_resource.is_some() && used > request;
            let priority = p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
            (
                exceeds,
                priority,
                qos_rank(p),
                i128::from(used) - i128::from(request),
                p,
            )
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(a.1.cmp(&b.1))
            .then(a.2.cmp(&b.2))
            .then(b.3.cmp(&a.3))
    });
    ranked.into_iter().map(|r| r.4).collect()
}

/// Upstream `evictionMessage`: why the pod was evicted, naming what its containers used.
pub fn eviction_message(
    t: &Threshold,
    obs: Option<&Observation>,
    pod: &Pod,
    usage: Option<&PodUsage>,
    dedicated_imagefs: bool,
) -> String {
    let resource = t.signal.resource();
    let available = obs
        .map(|o| render_amount(t.signal, o.available))
        .unwrap_or_default();
    let mut msg = format!(
        "The node was low on resource: {resource}. Threshold quantity: {}, available: {available}. ",
        t.value.render(t.signal)
    );
    if let Some(u) = usage
        && t.signal != Signal::PidAvailable
    {
        let used = usage_for(t.signal, u, dedicated_imagefs);
        let request = match t.signal {
            Signal::MemoryAvailable => request_sum(pod, "memory"),
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => {
                request_sum(pod, "ephemeral-storage")
            }
            _ => 0,
        };
        msg.push_str(&format!(
            "Pod {} was using {}, request is {}, has larger consumption of {resource}. ",
            pod.metadata.name.as_deref().unwrap_or_default(),
            render_amount(t.signal, used),
            render_amount(t.signal, request),
        ));
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::{NodeCondition, Value, admit};
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::HashSet;
    use std::time::Duration;

    fn pod(uid: &str, requests: &[(&str, &str)], limits: &[(&str, &str)], priority: i32) -> Pod {
        let q = |m: &[(&str, &str)]| {
            (!m.is_empty()).then(|| {
                m.iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        let mut p = Pod::default();
        p.metadata.uid = Some(uid.into());
        p.metadata.name = Some(uid.into());
        p.metadata.annotations = Some(
            [(CONFIG_SOURCE_ANNOTATION.to_string(), API_SOURCE.to_string())]
                .into_iter()
                .collect(),
        );
        p.spec = Some(PodSpec {
            priority: Some(priority),
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: q(requests),
                    limits: q(limits),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    #[test]
    fn ranking_follows_usage_over_request_priority_and_qos() {
        let best_effort = pod("be", &[], &[], 0);
        let burstable = pod("bu", &[("memory", "100Mi")], &[], 0);
        let guaranteed = pod(
            "gu",
            &[("memory", "100Mi"), ("cpu", "100m")],
            &[("memory", "100Mi"), ("cpu", "100m")],
            0,
        );
        let pods = vec![guaranteed.clone(), burstable.clone(), best_effort.clone()];
        let usage: HashMap<String, PodUsage> =
            [("be", 10u64 << 20), ("bu", 50 << 20), ("gu", 90 << 20)]
                .into_iter()
                .map(|(u, m)| {
                    (
                        u.to_string(),
                        PodUsage {
                            memory_working_set: m,
                            ..Default::default()
                        },
                    )
                })
                .collect();
        let order: Vec<&str> = rank(Signal::MemoryAvailable, &pods, &usage, false)
            .iter()
            .map(|p| p.metadata.uid.as_deref().unwrap())
            .collect();
        assert_eq!(order, ["be", "bu", "gu"]);
        // Using more than requested goes first: a Burstable pod far above its request
        // before a BestEffort pod using nothing.
        let mut over = usage.clone();
        over.get_mut("bu").unwrap().memory_working_set = 500 << 20;
        over.get_mut("be").unwrap().memory_working_set = 0;
        let order: Vec<&str> = rank(Signal::MemoryAvailable, &pods, &over, false)
            .iter()
            .map(|p| p.metadata.uid.as_deref().unwrap())
            .collect();
        assert_eq!(order, ["bu", "be", "gu"]);
        // Lower priority goes first.
        let low = pod(
            "low",
            &[("memory", "100Mi")],
            &[("memory", "100Mi"), ("cpu", "1")],
            -10,
        );
        let pods2 = vec![burstable.clone(), low];
        let order: Vec<&str> = rank(Signal::MemoryAvailable, &pods2, &HashMap::new(), false)
            .iter()
            .map(|p| p.metadata.uid.as_deref().unwrap())
            .collect();
        assert_eq!(order, ["low", "bu"]);
    }

    #[test]
    fn critical_pods_are_neither_ranked_nor_rejected() {
        let mut static_pod = pod("static", &[], &[], 0);
        static_pod
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(CONFIG_SOURCE_ANNOTATION.into(), "file".into());
        let system = pod("sys", &[], &[], SYSTEM_CRITICAL_PRIORITY);
        let normal = pod("n", &[], &[], 0);
        let pods = vec![static_pod.clone(), system.clone(), normal];
        let ranked = rank(Signal::NodeFsAvailable, &pods, &HashMap::new(), true);
        assert_eq!(ranked.len(), 1);
        let disk = HashSet::from([NodeCondition::DiskPressure]);
        assert!(admit(&disk, &static_pod).is_ok());
        assert!(admit(&disk, &system).is_ok());
        assert_eq!(
            admit(&disk, &pod("x", &[("memory", "1Mi")], &[], 0)).unwrap_err(),
            "The node had condition: [DiskPressure]. "
        );
        let mem = HashSet::from([NodeCondition::MemoryPressure]);
        assert!(admit(&mem, &pod("bu", &[("memory", "1Mi")], &[], 0)).is_ok());
        assert!(admit(&mem, &pod("be", &[], &[], 0)).is_err());
    }

    #[test]
    fn disk_usage_counts_what_lives_on_the_starved_filesystem() {
        let u = PodUsage {
            memory_working_set: 1,
            rootfs: 10,
            logs: 100,
            volumes: 1000,
            inodes: 7,
        };
        assert_eq!(usage_for(Signal::NodeFsAvailable, &u, true), 1100);
        assert_eq!(usage_for(Signal::ImageFsAvailable, &u, true), 10);
        assert_eq!(usage_for(Signal::NodeFsAvailable, &u, false), 1110);
        assert_eq!(usage_for(Signal::NodeFsInodesFree, &u, false), 7);
    }

    #[test]
    fn messages_name_threshold_availability_and_usage() {
        let t = Threshold {
            signal: Signal::MemoryAvailable,
            value: Value::Quantity(100 << 20),
            grace_period: Duration::ZERO,
            min_reclaim: None,
        };
        let p = pod("web", &[], &[], 0);
        let m = eviction_message(
            &t,
            Some(&Observation {
                available: 50 << 20,
                capacity: 1 << 30,
            }),
            &p,
            Some(&PodUsage {
                memory_working_set: 20 << 20,
                ..Default::default()
            }),
            false,
        );
        assert_eq!(
            m,
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Pod web was using 20Mi, request is 0, has larger consumption of memory. "
        );
    }
}
