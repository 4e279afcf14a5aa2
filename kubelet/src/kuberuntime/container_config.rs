//! Building a container's CRI `ContainerConfig` (upstream `kuberuntime_container.go`
//! `generateContainerConfig` and `kuberuntime_container_linux.go`). This module owns the
//! translation of a container spec into image, command, env, log path, labels/annotations,
//! Linux resources (CPU shares/quota, memory limit from requests/limits, upstream's formulas)
//! and the basic security context. It performs no I/O.

use std::collections::{BTreeMap, HashMap};

use cri_proto::runtime::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::labels::{new_container_annotations, new_container_labels};
use crate::resource::parse_quantity_scaled;

/// Upstream `MinShares`.
pub const MIN_SHARES: i64 = 2;
/// Upstream `MaxShares` (the kernel's limit).
pub const MAX_SHARES: i64 = 262_144;
/// Upstream `sharesPerCPU`.
pub const SHARES_PER_CPU: i64 = 1024;
/// Upstream `quotaPeriod` (100 ms in µs).
pub const QUOTA_PERIOD: i64 = 100_000;
/// Upstream `minQuotaPeriod`.
pub const MIN_QUOTA_PERIOD: i64 = 1000;

fn get<'a>(m: Option<&'a BTreeMap<String, Quantity>>, k: &str) -> Option<&'a Quantity> {
    m.and_then(|m| m.get(k))
}

/// Upstream `MilliCPUToShares`: 1024 shares per core, at least 2, at most 262144.
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    if milli == 0 {
        return MIN_SHARES;
    }
    (milli.saturating_mul(SHARES_PER_CPU) / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// Upstream `MilliCPUToQuota`: (quota, period); quota 0 = unlimited.
pub fn milli_cpu_to_quota(milli: i64, period: i64) -> i64 {
    if milli == 0 {
        return 0;
    }
    (milli.saturating_mul(period) / 1000).max(MIN_QUOTA_PERIOD)
}

/// Upstream `generateLinuxContainerResources` (without swap/hugepages/QoS-derived OOM score).
pub fn linux_container_resources(c: &Container) -> cri::LinuxContainerResources {
    let res = c.resources.as_ref();
    let limits = res.and_then(|r| r.limits.as_ref());
    let requests = res.and_then(|r| r.requests.as_ref());
    let milli = |q: Option<&Quantity>| q.and_then(|q| parse_quantity_scaled(&q.0, 1000.0));
    let cpu_limit = milli(get(limits, "cpu"));
    // A zero request with a limit defaults to the limit (upstream `cpuRequest.IsZero()`).
    let cpu_request = milli(get(requests, "cpu"))
        .filter(|m| *m != 0)
        .or(cpu_limit);
    let mut r = cri::LinuxContainerResources {
        cpu_shares: milli_cpu_to_shares(cpu_request.unwrap_or(0)),
        ..Default::default()
    };
    if let Some(l) = cpu_limit {
        r.cpu_period = QUOTA_PERIOD;
        r.cpu_quota = milli_cpu_to_quota(l, QUOTA_PERIOD);
    }
    if let Some(m) = get(limits, "memory").and_then(|q| parse_quantity_scaled(&q.0, 1.0)) {
        r.memory_limit_in_bytes = m;
    }
    r
}

/// Upstream `determineEffectiveSecurityContext` + `convertToRuntimeSecurityContext` (basics).
pub fn linux_security_context(c: &Container, pod: &Pod) -> cri::LinuxContainerSecurityContext {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let sc = c.security_context.as_ref();
    let run_as_user = sc
        .and_then(|s| s.run_as_user)
        .or_else(|| psc.and_then(|p| p.run_as_user));
    let run_as_group = sc
        .and_then(|s| s.run_as_group)
        .or_else(|| psc.and_then(|p| p.run_as_group));
    let caps = sc.and_then(|s| s.capabilities.as_ref());
    cri::LinuxContainerSecurityContext {
        capabilities: caps.map(|c| cri::Capability {
            add_capabilities: c.add.clone().unwrap_or_default(),
            drop_capabilities: c.drop.clone().unwrap_or_default(),
            ..Default::default()
        }),
        privileged: sc.and_then(|s| s.privileged).unwrap_or(false),
        namespace_options: Some(super::sandbox::namespaces_for_pod(pod)),
        run_as_user: run_as_user.map(|value| cri::Int64Value { value }),
        run_as_group: run_as_group.map(|value| cri::Int64Value { value }),
        readonly_rootfs: sc
            .and_then(|s| s.read_only_root_filesystem)
            .unwrap_or(false),
        // Upstream: the pod's fsGroup first, then its supplementalGroups.
        supplemental_groups: psc
            .into_iter()
            .flat_map(|p| {
                p.fs_group
                    .into_iter()
                    .chain(p.supplemental_groups.iter().flatten().copied())
            })
            .collect(),
        no_new_privs: sc
            .and_then(|s| s.allow_privilege_escalation)
            .is_some_and(|a| !a),
        ..Default::default()
    }
}

/// `<container>/<restartCount>.log` (upstream `BuildContainerLogsDirectory` relative path).
pub fn container_log_path(name: &str, restart_count: i32) -> String {
    format!("{name}/{restart_count}.log")
}

pub use crate::envvars::{EnvError, expand, pod_field_value};

/// Upstream `makeEnvironmentVariables` (see [`crate::envvars`]), with this node's allocatable
/// resources for `resourceFieldRef` and the service variables of `services` (API-server mode).
pub fn make_environment(
    c: &Container,
    pod: &Pod,
    pod_ips: &[String],
    host_ip: &str,
    objects: &crate::apiobjects::ApiObjects,
    services: Option<&crate::envvars::ServiceStore>,
) -> Result<Vec<(String, String)>, EnvError> {
    crate::envvars::make_environment_variables(
        c,
        pod,
        pod_ips,
        host_ip,
        &crate::envvars::NodeAllocatable::node(),
        objects,
        services,
    )
}

/// Upstream `generateContainerConfig` (mounts are added by the caller, with `subPathExpr`
/// expanded against the config's `envs`).
#[allow(clippy::too_many_arguments)]
pub fn generate_container_config(
    c: &Container,
    pod: &Pod,
    restart_count: i32,
    image_ref: &str,
    pod_ips: &[String],
    host_ip: &str,
    objects: &crate::apiobjects::ApiObjects,
    services: Option<&crate::envvars::ServiceStore>,
) -> Result<cri::ContainerConfig, EnvError> {
    let env = make_environment(c, pod, pod_ips, host_ip, objects, services)?;
    let vars: HashMap<String, String> = env.iter().cloned().collect();
    let expand_all = |v: &Option<Vec<String>>| {
        v.iter()
            .flatten()
            .map(|s| expand(s, &vars))
            .collect::<Vec<_>>()
    };
    let envs = env
        .into_iter()
        .map(|(key, value)| cri::KeyValue { key, value })
        .collect();
    let image = c.image.clone().unwrap_or_default();
    Ok(cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: c.name.clone(),
            attempt: u32::try_from(restart_count).unwrap_or(0),
        }),
        image: Some(cri::ImageSpec {
            image: if image_ref.is_empty() {
                image.clone()
            } else {
                image_ref.to_string()
            },
            user_specified_image: image,
            ..Default::default()
        }),
        command: expand_all(&c.command),
        args: expand_all(&c.args),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs,
        labels: new_container_labels(c, pod),
        annotations: new_container_annotations(c, pod, restart_count),
        log_path: container_log_path(&c.name, restart_count),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(linux_container_resources(c)),
            security_context: Some(linux_security_context(c, pod)),
        }),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity_scaled("100m", 1000.0), Some(100));
        assert_eq!(parse_quantity_scaled("1.5", 1000.0), Some(1500));
        assert_eq!(parse_quantity_scaled("64Mi", 1.0), Some(64 * 1024 * 1024));
        assert_eq!(parse_quantity_scaled("1G", 1.0), Some(1_000_000_000));
        assert_eq!(parse_quantity_scaled(" 250m ", 1000.0), Some(250));
        assert_eq!(parse_quantity_scaled("1.5Ki", 1024.0), Some(1536 * 1024));
        assert_eq!(parse_quantity_scaled("1n", 1e9), Some(1));
        assert_eq!(parse_quantity_scaled("1", 1e-3), Some(1));
        assert_eq!(parse_quantity_scaled("1E", 1000.0), Some(i64::MAX));
        assert_eq!(parse_quantity_scaled("-1E", 1000.0), Some(i64::MIN));
        for bad in [
            "x", "", "1K", "1ki", "1e", "1.5e3m", "1e3.5", "1.2.3", "--1", "0x10", "inf", "NaN",
            "1 Mi", "Ei",
        ] {
            assert_eq!(parse_quantity_scaled(bad, 1000.0), None, "{bad:?}");
            assert_eq!(parse_quantity_scaled(bad, 1.0), None, "{bad:?}");
        }
    }

    fn quantities_of(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect(),
        )
    }

    fn container(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: quantities_of(requests),
                limits: quantities_of(limits),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Upstream's conversions on exact quantities (issue 13): `700m` used to be 701
    /// millicores through f64 (`9m` 10, `36m` 37), which moved CPU shares and quota, the QoS
    /// class and `resourceFieldRef` values. Expected values are upstream's: `MilliValue`/`Value`
    /// of `resource.ParseQuantity`, `MilliCPUToShares` (1024 per core, min 2, max 262144),
    /// `milliCPUToQuota` (100 ms period, min 1000), `ExtractContainerResourceValue`
    /// (ceil(value / divisor)) and `GetPodQOS`.
    #[test]
    fn upstream_conversions_table() {
        // cpu: (quantity, MilliValue, Value, shares, quota)
        for (q, milli, value, shares, quota) in [
            ("700m", 700, 1, 716, 70_000),
            ("9m", 9, 1, 9, 1000),
            ("36m", 36, 1, 36, 3600),
            ("0.1", 100, 1, 102, 10_000),
            ("0.5", 500, 1, 512, 50_000),
            ("1e3", 1_000_000, 1000, MAX_SHARES, 100_000_000),
            ("1", 1000, 1, 1024, 100_000),
            ("2500m", 2500, 3, 2560, 250_000),
            ("1m", 1, 1, 2, 1000),
            ("1n", 1, 1, 2, 1000),
            ("0.0005", 1, 1, 2, 1000),
            ("1.000001", 1001, 2, 1025, 100_100),
        ] {
            assert_eq!(
                parse_quantity_scaled(q, 1000.0),
                Some(milli),
                "MilliValue({q})"
            );
            assert_eq!(parse_quantity_scaled(q, 1.0), Some(value), "Value({q})");
            let r = linux_container_resources(&container(&[("cpu", q)], &[("cpu", q)]));
            assert_eq!(
                (r.cpu_shares, r.cpu_quota, r.cpu_period),
                (shares, quota, QUOTA_PERIOD),
                "cpu {q}"
            );
            // Without a request the limit sets the shares too.
            let r = linux_container_resources(&container(&[("cpu", "0")], &[("cpu", q)]));
            assert_eq!(r.cpu_shares, shares, "request 0, limit {q}");
        }
        // memory: (quantity, Value = memory limit in bytes)
        for (q, bytes) in [
            ("1.5Gi", 1_610_612_736),
            ("100Mi", 104_857_600),
            ("129e6", 129_000_000),
            ("123Mi", 128_974_848),
            ("129M", 129_000_000),
            ("0.5", 1),
            ("1e3", 1000),
            ("1.5Ki", 1536),
            ("0.1Ki", 103),
            ("8Ei", i64::MAX),
        ] {
            assert_eq!(parse_quantity_scaled(q, 1.0), Some(bytes), "Value({q})");
            let r = linux_container_resources(&container(&[], &[("memory", q)]));
            assert_eq!(r.memory_limit_in_bytes, bytes, "memory {q}");
        }
        // resourceFieldRef: (resource, quantity, divisor, value)
        let node = crate::envvars::NodeAllocatable {
            milli_cpu: 4000,
            memory: 8 << 30,
            ephemeral_storage: 100 << 30,
        };
        for (resource, q, divisor, want) in [
            ("limits.cpu", "700m", "1m", "700"),
            ("limits.cpu", "700m", "100m", "7"),
            ("limits.cpu", "700m", "1", "1"),
            ("limits.cpu", "9m", "1m", "9"),
            ("limits.cpu", "36m", "1m", "36"),
            ("limits.cpu", "0.1", "1m", "100"),
            ("limits.cpu", "1e3", "1", "1000"),
            ("requests.cpu", "0.5", "1m", "500"),
            ("requests.cpu", "0.5", "1", "1"),
            ("limits.memory", "1.5Gi", "1Gi", "2"),
            ("limits.memory", "1.5Gi", "1Mi", "1536"),
            ("limits.memory", "100Mi", "1Ki", "102400"),
            ("limits.memory", "129e6", "1M", "129"),
            ("limits.memory", "123Mi", "1Mi", "123"),
            ("limits.memory", "123Mi", "1M", "129"),
            ("requests.memory", "0.5", "1", "1"),
        ] {
            let (kind, name) = resource.split_once('.').unwrap();
            let pair = [(name, q)];
            let c = if kind == "limits" {
                container(&[], &pair)
            } else {
                container(&pair, &[])
            };
            let fs = k8s_openapi::api::core::v1::ResourceFieldSelector {
                resource: resource.into(),
                divisor: Some(Quantity(divisor.into())),
                ..Default::default()
            };
            assert_eq!(
                crate::envvars::container_resource_value(&fs, &c, &node).as_deref(),
                Ok(want),
                "{resource} {q} / {divisor}"
            );
        }
        // QoS class: (requests cpu, limits cpu, class); memory 100Mi requested and limited.
        for (req, lim, class) in [
            ("700m", "0.7", "Guaranteed"),
            ("36m", "37m", "Burstable"),
            ("9m", "10m", "Burstable"),
            ("700m", "701m", "Burstable"),
            ("1e3", "1000", "Guaranteed"),
            ("0.5", "500m", "Guaranteed"),
        ] {
            let pod = Pod {
                spec: Some(k8s_openapi::api::core::v1::PodSpec {
                    containers: vec![container(
                        &[("cpu", req), ("memory", "100Mi")],
                        &[("cpu", lim), ("memory", "104857600")],
                    )],
                    ..Default::default()
                }),
                ..Default::default()
            };
            assert_eq!(crate::qos::get_pod_qos(&pod), class, "{req} / {lim}");
        }
    }

    #[test]
    fn resources() {
        let c = Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                limits: Some(BTreeMap::from([
                    ("cpu".to_string(), Quantity("500m".into())),
                    ("memory".to_string(), Quantity("128Mi".into())),
                ])),
                ..Default::default()
            }),
            ..Default::default()
        };
        let r = linux_container_resources(&c);
        assert_eq!(r.cpu_shares, 512);
        assert_eq!(r.cpu_quota, 50_000);
        assert_eq!(r.cpu_period, 100_000);
        assert_eq!(r.memory_limit_in_bytes, 128 * 1024 * 1024);
        let none = linux_container_resources(&Container::default());
        assert_eq!((none.cpu_shares, none.cpu_quota), (2, 0));
    }

    #[test]
    fn env_and_expansion() {
        use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector};
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        let field = |p: &str| {
            Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: p.into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
        };
        let c = Container {
            name: "c".into(),
            command: Some(vec!["echo".into(), "$(GREETING) $$(X) $(NOPE)".into()]),
            env: Some(vec![
                EnvVar {
                    name: "POD".into(),
                    value_from: field("metadata.name"),
                    ..Default::default()
                },
                EnvVar {
                    name: "IP".into(),
                    value_from: field("status.podIP"),
                    ..Default::default()
                },
                EnvVar {
                    name: "GREETING".into(),
                    value: Some("hi $(POD)".into()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let cfg = generate_container_config(
            &c,
            &pod,
            0,
            "",
            &["10.0.0.2".into()],
            "1.2.3.4",
            &crate::apiobjects::ApiObjects::standalone("ns"),
            None,
        )
        .expect("config");
        let env: Vec<(String, String)> = cfg
            .envs
            .iter()
            .map(|e| (e.key.clone(), e.value.clone()))
            .collect();
        assert_eq!(
            env,
            vec![
                ("POD".to_string(), "web".to_string()),
                ("IP".to_string(), "10.0.0.2".to_string()),
                ("GREETING".to_string(), "hi web".to_string()),
            ]
        );
        assert_eq!(cfg.command[1], "hi web $(X) $(NOPE)");
    }

    #[test]
    fn config_labels() {
        let mut pod = Pod::default();
        pod.metadata.uid = Some("u".into());
        let c = Container {
            name: "app".into(),
            image: Some("busybox".into()),
            ..Default::default()
        };
        let cfg = generate_container_config(
            &c,
            &pod,
            2,
            "",
            &[],
            "",
            &crate::apiobjects::ApiObjects::standalone("ns"),
            None,
        )
        .expect("config");
        assert_eq!(cfg.log_path, "app/2.log");
        assert_eq!(
            cfg.labels
                .get("io.kubernetes.container.name")
                .map(String::as_str),
            Some("app")
        );
        assert_eq!(
            cfg.annotations
                .get("io.kubernetes.container.restartCount")
                .map(String::as_str),
            Some("2")
        );
    }
}
