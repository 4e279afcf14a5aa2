//! The Summary API's types (upstream `k8s.io/kubelet/pkg/apis/stats/v1alpha1`), with its JSON
//! field names: what `/stats/summary` serves and `/metrics/resource` is rendered from. Optional
//! fields are the upstream `omitempty` pointers; a `time`/`startTime` the kubelet does not know
//! is `null`, as a zero `metav1.Time` marshals.

use serde::{Deserialize, Serialize};

/// A `metav1.Time`: RFC 3339 with second precision, in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Time(pub Option<i64>);

impl Time {
    /// The time `ns` nanoseconds after the epoch (`None` when not positive: unknown).
    pub fn from_unix_nanos(ns: i64) -> Self {
        Time((ns > 0).then_some(ns))
    }

    /// Now.
    pub fn now() -> Self {
        Time::from_unix_nanos(chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0))
    }

    /// Nanoseconds since the epoch.
    pub fn unix_nanos(&self) -> Option<i64> {
        self.0
    }
}

impl Serialize for Time {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            None => s.serialize_none(),
            Some(ns) => {
                let t = chrono::DateTime::from_timestamp_nanos(ns);
                s.serialize_str(&t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
            }
        }
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        let Some(text) = text else {
            return Ok(Time(None));
        };
        let t = chrono::DateTime::parse_from_rfc3339(&text).map_err(serde::de::Error::custom)?;
        Ok(Time(t.timestamp_nanos_opt()))
    }
}

/// Upstream `Summary`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Summary {
    pub node: NodeStats,
    pub pods: Vec<PodStats>,
}

/// Upstream `NodeStats`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    pub node_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system_containers: Vec<ContainerStats>,
    pub start_time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
}

/// Upstream `RlimitStats`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RlimitStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maxpid: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub curproc: Option<i64>,
}

/// Upstream `RuntimeStats`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
}

/// Upstream `PodStats`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    pub pod_ref: PodReference,
    pub start_time: Time,
    pub containers: Vec<ContainerStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume: Vec<VolumeStats>,
    #[serde(
        rename = "ephemeral-storage",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ephemeral_storage: Option<FsStats>,
    #[serde(
        rename = "process_stats",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub process_stats: Option<ProcessStats>,
}

/// Upstream `PodReference`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

/// Upstream `ContainerStats`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    pub name: String,
    pub start_time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
}

/// Upstream `CPUStats`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

/// Upstream `MemoryStats`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
}

/// Upstream `NetworkStats`: the default interface's figures inline, then every interface.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NetworkStats {
    pub time: Time,
    #[serde(flatten)]
    pub default: InterfaceStats,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

/// Upstream `InterfaceStats`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

/// Upstream `FsStats`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

/// Upstream `VolumeStats`: the volume's filesystem figures inline, its name and claim.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct VolumeStats {
    #[serde(flatten)]
    pub fs: FsStats,
    pub name: String,
    /// The claim of a PersistentVolumeClaim-backed volume.
    #[serde(rename = "pvcRef", default, skip_serializing_if = "Option::is_none")]
    pub pvc_ref: Option<PvcReference>,
}

/// Upstream `PVCReference`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PvcReference {
    pub name: String,
    pub namespace: String,
}

/// Upstream `ProcessStats`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ProcessStats {
    #[serde(
        rename = "process_count",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub process_count: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_names_and_omissions_follow_upstream() {
        let pod = PodStats {
            pod_ref: PodReference {
                name: "web".into(),
                namespace: "default".into(),
                uid: "u1".into(),
            },
            start_time: Time::from_unix_nanos(1_700_000_000_123_456_789),
            containers: vec![ContainerStats {
                name: "main".into(),
                start_time: Time::default(),
                cpu: Some(CpuStats {
                    time: Time::from_unix_nanos(1_700_000_001_000_000_000),
                    usage_nano_cores: Some(5),
                    usage_core_nano_seconds: None,
                }),
                ..Default::default()
            }],
            ephemeral_storage: Some(FsStats {
                used_bytes: Some(1),
                ..Default::default()
            }),
            process_stats: Some(ProcessStats {
                process_count: Some(2),
            }),
            network: Some(NetworkStats {
                time: Time::default(),
                default: InterfaceStats {
                    name: "eth0".into(),
                    rx_bytes: Some(3),
                    ..Default::default()
                },
                interfaces: vec![],
            }),
            ..Default::default()
        };
        let v = serde_json::to_value(&pod).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "podRef": {"name": "web", "namespace": "default", "uid": "u1"},
                "startTime": "2023-11-14T22:13:20Z",
                "containers": [{
                    "name": "main",
                    "startTime": null,
                    "cpu": {"time": "2023-11-14T22:13:21Z", "usageNanoCores": 5},
                }],
                "network": {"time": null, "name": "eth0", "rxBytes": 3},
                "ephemeral-storage": {"time": null, "usedBytes": 1},
                "process_stats": {"process_count": 2},
            })
        );
        let back: PodStats = serde_json::from_value(v).unwrap();
        assert_eq!(
            back.containers[0].cpu,
            pod.containers[0].cpu.clone().map(|c| CpuStats {
                // Second precision on the wire.
                time: Time::from_unix_nanos(1_700_000_001_000_000_000),
                ..c
            })
        );
        assert_eq!(
            back.start_time,
            Time::from_unix_nanos(1_700_000_000_000_000_000)
        );
    }
}
