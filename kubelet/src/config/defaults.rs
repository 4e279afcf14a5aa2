//! API-server defaulting of a v1 Pod (upstream `pkg/apis/core/v1/defaults.go`). Static pods
//! never pass through an API server, so the kubelet applies the same defaults itself when it
//! decodes a manifest: restart and DNS policy, grace period, scheduler name, pod security
//! context, container image pull policy and termination message settings, port protocols,
//! probe timings, HTTP probe scheme/path, empty-dir default volume source, file modes of
//! secret/configMap/downwardAPI/projected volumes, and `enableServiceLinks`. Only fields left
//! unset are filled; explicit values win.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, Pod, PodSecurityContext, PodSpec, Probe, Volume,
};

/// Default `terminationMessagePath`.
pub const TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// Default scheduler name.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";
/// Default `terminationGracePeriodSeconds`.
pub const DEFAULT_TERMINATION_GRACE_PERIOD: i64 = 30;
/// Default mode of secret / configMap / downwardAPI / projected volume files (0644).
pub const DEFAULT_FILE_MODE: i32 = 0o644;

/// Upstream pull-policy rule: `Always` when the tag is `latest` or there is neither tag nor
/// digest; `IfNotPresent` otherwise (a digest pins the image).
pub fn default_image_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    // The tag is after the last ':' that follows the last '/' (a ':' before it is a port).
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

fn default_probe(p: &mut Probe) {
    p.timeout_seconds.get_or_insert(1);
    p.period_seconds.get_or_insert(10);
    p.success_threshold.get_or_insert(1);
    p.failure_threshold.get_or_insert(3);
    if let Some(h) = p.http_get.as_mut() {
        h.path.get_or_insert_with(|| "/".into());
        h.scheme.get_or_insert_with(|| "HTTP".into());
    }
}

fn default_container(c: &mut Container, host_network: bool) {
    if c.image_pull_policy.is_none() {
        let image = c.image.as_deref().unwrap_or_default();
        c.image_pull_policy = Some(default_image_pull_policy(image).into());
    }
    c.termination_message_path
        .get_or_insert_with(|| TERMINATION_MESSAGE_PATH.into());
    c.termination_message_policy
        .get_or_insert_with(|| "File".into());
    for port in c.ports.iter_mut().flatten() {
        port.protocol.get_or_insert_with(|| "TCP".into());
        if host_network && port.host_port.is_none() {
            port.host_port = Some(port.container_port);
        }
    }
    for probe in [
        c.liveness_probe.as_mut(),
        c.readiness_probe.as_mut(),
        c.startup_probe.as_mut(),
    ]
    .into_iter()
    .flatten()
    {
        default_probe(probe);
    }
    for env in c.env.iter_mut().flatten() {
        if let Some(fr) = env.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            fr.api_version.get_or_insert_with(|| "v1".into());
        }
    }
    // Upstream SetDefaults_Pod: requests default to limits.
    if let Some(res) = c.resources.as_mut()
        && let Some(limits) = res.limits.clone()
    {
        let requests = res.requests.get_or_insert_with(BTreeMap::new);
        for (k, v) in limits {
            requests.entry(k).or_insert(v);
        }
    }
}

fn default_volume(v: &mut Volume) {
    // Any source at all (gitRepo, azureDisk... too): only a volume without one gets emptyDir.
    if super::validation::volume_sources(v).is_empty() {
        v.empty_dir = Some(EmptyDirVolumeSource::default());
    }
    if let Some(s) = v.secret.as_mut() {
        s.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(s) = v.config_map.as_mut() {
        s.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(s) = v.downward_api.as_mut() {
        s.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(s) = v.projected.as_mut() {
        s.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(h) = v.host_path.as_mut() {
        h.type_.get_or_insert_with(String::new);
    }
}

/// Apply the pod-spec defaults (upstream `SetDefaults_PodSpec` and the per-container ones).
pub fn set_defaults_pod_spec(spec: &mut PodSpec) {
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.restart_policy.get_or_insert_with(|| "Always".into());
    spec.security_context
        .get_or_insert_with(PodSecurityContext::default);
    spec.termination_grace_period_seconds
        .get_or_insert(DEFAULT_TERMINATION_GRACE_PERIOD);
    spec.scheduler_name
        .get_or_insert_with(|| DEFAULT_SCHEDULER_NAME.into());
    spec.enable_service_links.get_or_insert(true);
    let host_network = spec.host_network.unwrap_or(false);
    for c in spec.init_containers.iter_mut().flatten() {
        default_container(c, host_network);
    }
    for c in spec.containers.iter_mut() {
        default_container(c, host_network);
    }
    for v in spec.volumes.iter_mut().flatten() {
        default_volume(v);
    }
}

/// Apply all API-server defaults to `pod` (an absent spec becomes an empty, defaulted one).
pub fn set_defaults_pod(pod: &mut Pod) {
    set_defaults_pod_spec(pod.spec.get_or_insert_with(PodSpec::default));
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, HTTPGetAction};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    #[test]
    fn pull_policy() {
        for (img, want) in [
            ("busybox", "Always"),
            ("busybox:latest", "Always"),
            ("busybox:1.36", "IfNotPresent"),
            ("localhost:5000/busybox", "Always"),
            ("localhost:5000/busybox:v1", "IfNotPresent"),
            ("busybox@sha256:abcd", "IfNotPresent"),
            ("busybox:latest@sha256:abcd", "IfNotPresent"),
        ] {
            assert_eq!(default_image_pull_policy(img), want, "{img}");
        }
    }

    #[test]
    fn fills_unset_fields() {
        let mut pod = Pod {
            spec: Some(PodSpec {
                host_network: Some(true),
                containers: vec![Container {
                    name: "c".into(),
                    image: Some("nginx:1.25".into()),
                    ports: Some(vec![ContainerPort {
                        container_port: 80,
                        ..Default::default()
                    }]),
                    liveness_probe: Some(Probe {
                        http_get: Some(HTTPGetAction {
                            port: IntOrString::Int(80),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                volumes: Some(vec![Volume {
                    name: "v".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        set_defaults_pod(&mut pod);
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
        assert_eq!(spec.enable_service_links, Some(true));
        assert!(spec.security_context.is_some());
        let c = &spec.containers[0];
        assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert_eq!(
            c.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
        assert_eq!(c.termination_message_policy.as_deref(), Some("File"));
        let port = &c.ports.as_ref().expect("ports")[0];
        assert_eq!(port.protocol.as_deref(), Some("TCP"));
        assert_eq!(port.host_port, Some(80));
        let probe = c.liveness_probe.as_ref().expect("probe");
        assert_eq!(
            (
                probe.timeout_seconds,
                probe.period_seconds,
                probe.success_threshold,
                probe.failure_threshold
            ),
            (Some(1), Some(10), Some(1), Some(3))
        );
        let hg = probe.http_get.as_ref().expect("http");
        assert_eq!(hg.path.as_deref(), Some("/"));
        assert_eq!(hg.scheme.as_deref(), Some("HTTP"));
        assert!(
            spec.volumes.as_ref().expect("volumes")[0]
                .empty_dir
                .is_some()
        );
    }

    #[test]
    fn explicit_values_win() {
        let mut pod = Pod {
            spec: Some(PodSpec {
                restart_policy: Some("Never".into()),
                termination_grace_period_seconds: Some(5),
                containers: vec![Container {
                    name: "c".into(),
                    image: Some("nginx".into()),
                    image_pull_policy: Some("Never".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        set_defaults_pod(&mut pod);
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.termination_grace_period_seconds, Some(5));
        assert_eq!(
            spec.containers[0].image_pull_policy.as_deref(),
            Some("Never")
        );
    }
}
