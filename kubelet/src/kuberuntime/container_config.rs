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

/// Upstream `minShares`.
pub const MIN_SHARES: i64 = 2;
/// Upstream `sharesPerCPU`.
pub const SHARES_PER_CPU: i64 = 1024;
/// Upstream `quotaPeriod` (100 ms in µs).
pub const QUOTA_PERIOD: i64 = 100_000;
/// Upstream `minQuotaPeriod`.
pub const MIN_QUOTA_PERIOD: i64 = 1000;

/// Parse a quantity into a value scaled by `scale` (1000 for milli-units, 1 for bytes),
/// rounding up like `Quantity.MilliValue`/`Value`. `None` when malformed.
pub fn parse_quantity_scaled(q: &str, scale: f64) -> Option<i64> {
    let q = q.trim();
    let suffixes: [(&str, f64); 15] = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    let (num, mult) = suffixes
        .iter()
        .find_map(|(s, m)| q.strip_suffix(s).map(|n| (n, *m)))
        .unwrap_or((q, 1.0));
    let v: f64 = num.parse().ok()?;
    if !v.is_finite() {
        return None;
    }
    Some((v * mult * scale).ceil() as i64)
}

fn get<'a>(m: Option<&'a BTreeMap<String, Quantity>>, k: &str) -> Option<&'a Quantity> {
    m.and_then(|m| m.get(k))
}

/// Upstream `MilliCPUToShares`.
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    if milli == 0 {
        return MIN_SHARES;
    }
    (milli * SHARES_PER_CPU / 1000).max(MIN_SHARES)
}

/// Upstream `MilliCPUToQuota`: (quota, period); quota 0 = unlimited.
pub fn milli_cpu_to_quota(milli: i64, period: i64) -> i64 {
    if milli == 0 {
        return 0;
    }
    (milli * period / 1000).max(MIN_QUOTA_PERIOD)
}

/// Upstream `generateLinuxContainerResources` (without swap/hugepages/QoS-derived OOM score).
pub fn linux_container_resources(c: &Container) -> cri::LinuxContainerResources {
    let res = c.resources.as_ref();
    let limits = res.and_then(|r| r.limits.as_ref());
    let requests = res.and_then(|r| r.requests.as_ref());
    let milli = |q: Option<&Quantity>| q.and_then(|q| parse_quantity_scaled(&q.0, 1000.0));
    let cpu_limit = milli(get(limits, "cpu"));
    let cpu_request = milli(get(requests, "cpu")).or(cpu_limit);
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
        supplemental_groups: psc
            .and_then(|p| p.supplemental_groups.clone())
            .unwrap_or_default(),
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
/// resources for `resourceFieldRef`.
pub fn make_environment(
    c: &Container,
    pod: &Pod,
    pod_ips: &[String],
    host_ip: &str,
    objects: &crate::apiobjects::ApiObjects,
) -> Result<Vec<(String, String)>, EnvError> {
    crate::envvars::make_environment_variables(
        c,
        pod,
        pod_ips,
        host_ip,
        &crate::envvars::NodeAllocatable::node(),
        objects,
    )
}

/// Upstream `generateContainerConfig` (mounts are added by the caller).
pub fn generate_container_config(
    c: &Container,
    pod: &Pod,
    restart_count: i32,
    image_ref: &str,
    pod_ips: &[String],
    host_ip: &str,
    objects: &crate::apiobjects::ApiObjects,
) -> Result<cri::ContainerConfig, EnvError> {
    let env = make_environment(c, pod, pod_ips, host_ip, objects)?;
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
        assert_eq!(parse_quantity_scaled("x", 1.0), None);
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
