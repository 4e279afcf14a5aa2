//! Unit tests of the sidecar (KEP-753) and ephemeral container decisions of
//! `computePodActions`, after upstream's `TestComputePodActionsWithRestartableInitContainers`
//! and `TestComputePodActionsWithInitAndEphemeralContainers`: sidecars start in order with the
//! init containers, the next one waits for a sidecar's startup probe, exited sidecars are
//! restarted whatever the pod's policy, sidecars alone do not keep a pod alive, and ephemeral
//! containers start once.

use super::tests::{c, cs};
use super::*;
use crate::container::ContainerStatus;
use ContainerState::*;
use k8s_openapi::api::core::v1::{EphemeralContainer, PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn sidecar(name: &str) -> Container {
    Container {
        restart_policy: Some("Always".into()),
        ..c(name)
    }
}

/// Init containers `s1` (sidecar), `i2` (regular), `s3` (sidecar); app container `a`.
fn pod(policy: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("default".into()),
            uid: Some("uid".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some(policy.into()),
            init_containers: Some(vec![sidecar("s1"), c("i2"), sidecar("s3")]),
            containers: vec![c("a")],
            ..Default::default()
        }),
        status: None,
    }
}

/// `tests`' status with one ready sandbox (attempt 1) and the pod's IP.
fn status(containers: Vec<ContainerStatus>) -> PodStatus {
    PodStatus {
        ips: vec!["10.0.0.2".into()],
        ..super::tests::status(vec![super::tests::sandbox(1, true)], containers)
    }
}

fn actions(p: &Pod, s: &PodStatus) -> PodActions {
    compute_pod_actions(p, s, &ProbeFailures::default())
}

#[test]
fn a_running_sidecar_lets_the_next_init_container_start() {
    let p = pod("Always");
    let got = actions(&p, &status(vec![]));
    assert_eq!(got.init_containers_to_start, vec![0], "the first sidecar");
    let got = actions(&p, &status(vec![cs(&p, "s1", Running, 0)]));
    assert_eq!(got.init_containers_to_start, vec![1], "s1 runs: on to i2");
    assert!(got.containers_to_start.is_empty() && !got.kill_pod);
    // i2 runs: wait for it, s1 is kept.
    let s = status(vec![cs(&p, "i2", Running, 0), cs(&p, "s1", Running, 0)]);
    let got = actions(&p, &s);
    assert!(got.init_containers_to_start.is_empty());
    assert!(got.containers_to_start.is_empty() && got.containers_to_kill.is_empty());
    // i2 done: the last sidecar.
    let s = status(vec![cs(&p, "i2", Exited, 0), cs(&p, "s1", Running, 0)]);
    assert_eq!(actions(&p, &s).init_containers_to_start, vec![2]);
    // Every init container done or running: the app containers start, sidecars stay.
    let s = status(vec![
        cs(&p, "s3", Running, 0),
        cs(&p, "i2", Exited, 0),
        cs(&p, "s1", Running, 0),
    ]);
    let got = actions(&p, &s);
    assert!(got.init_containers_to_start.is_empty());
    assert_eq!(got.containers_to_start, vec![0]);
    assert!(got.containers_to_kill.is_empty() && !got.kill_pod);
}

#[test]
fn the_next_init_container_waits_for_a_sidecars_startup_probe() {
    let mut p = pod("Always");
    if let Some(s) = p.spec.as_mut().and_then(|s| s.init_containers.as_mut()) {
        s[0].startup_probe = Some(Probe::default());
    }
    let st = status(vec![cs(&p, "s1", Running, 0)]);
    let mut probes = ProbeFailures::default();
    let got = compute_pod_actions(&p, &st, &probes);
    assert!(
        got.init_containers_to_start.is_empty(),
        "no result yet: wait"
    );
    probes
        .startup_succeeded
        .insert(ContainerID::new("docker", "id-s1"));
    let got = compute_pod_actions(&p, &st, &probes);
    assert_eq!(got.init_containers_to_start, vec![1]);
    let mut failed = ProbeFailures::default();
    failed.startup.insert(ContainerID::new("docker", "id-s1"));
    let got = compute_pod_actions(&p, &st, &failed);
    assert_eq!(got.init_containers_to_start, vec![0], "restarted");
    let k = got
        .containers_to_kill
        .get(&ContainerID::new("docker", "id-s1"))
        .expect("killed");
    assert_eq!(
        (k.reason, k.init, k.index),
        (KillReason::StartupProbe, true, 0)
    );
}

#[test]
fn exited_sidecars_restart_whatever_the_pod_policy_while_the_app_runs() {
    for policy in ["Always", "OnFailure", "Never"] {
        let p = pod(policy);
        let s = status(vec![
            cs(&p, "a", Running, 0),
            cs(&p, "s3", Exited, 0),
            cs(&p, "i2", Exited, 0),
            cs(&p, "s1", Exited, 1),
        ]);
        let got = actions(&p, &s);
        assert_eq!(got.init_containers_to_start, vec![0, 2], "{policy}");
        assert!(
            !got.kill_pod && got.containers_to_start.is_empty(),
            "{policy}"
        );
    }
    // A sidecar garbage-collected from the runtime is started again; i2 is not.
    let p = pod("Never");
    let s = status(vec![cs(&p, "a", Running, 0), cs(&p, "s1", Running, 0)]);
    assert_eq!(actions(&p, &s).init_containers_to_start, vec![2]);
    // An earlier sidecar that exited while a later init container runs restarts too.
    let s = status(vec![cs(&p, "i2", Running, 0), cs(&p, "s1", Exited, 137)]);
    assert_eq!(actions(&p, &s).init_containers_to_start, vec![0]);
}

#[test]
fn a_changed_or_unhealthy_sidecar_is_killed_and_restarted() {
    let p = pod("Always");
    let mut s1 = cs(&p, "s1", Running, 0);
    s1.hash = 7;
    let st = status(vec![
        cs(&p, "a", Running, 0),
        cs(&p, "s3", Running, 0),
        cs(&p, "i2", Exited, 0),
        s1,
    ]);
    let got = actions(&p, &st);
    assert_eq!(got.init_containers_to_start, vec![0]);
    let k = &got.containers_to_kill[&ContainerID::new("docker", "id-s1")];
    assert_eq!(k.reason, KillReason::SpecChanged);
    assert_eq!(k.message, "Init container s1 definition changed");

    let mut p = pod("Always");
    if let Some(s) = p.spec.as_mut().and_then(|s| s.init_containers.as_mut()) {
        s[2].liveness_probe = Some(Probe::default());
    }
    let st = status(vec![
        cs(&p, "a", Running, 0),
        cs(&p, "s3", Running, 0),
        cs(&p, "i2", Exited, 0),
        cs(&p, "s1", Running, 0),
    ]);
    let mut probes = ProbeFailures::default();
    probes.liveness.insert(ContainerID::new("docker", "id-s3"));
    let got = compute_pod_actions(&p, &st, &probes);
    assert_eq!(got.init_containers_to_start, vec![2]);
    assert_eq!(
        got.containers_to_kill[&ContainerID::new("docker", "id-s3")].reason,
        KillReason::LivenessProbe
    );
}

#[test]
fn sidecars_alone_do_not_keep_a_completed_pod_alive() {
    for policy in ["Never", "OnFailure"] {
        let p = pod(policy);
        let s = status(vec![
            cs(&p, "a", Exited, 0),
            cs(&p, "s3", Running, 0),
            cs(&p, "i2", Exited, 0),
            cs(&p, "s1", Exited, 2),
        ]);
        let got = actions(&p, &s);
        assert!(
            got.kill_pod,
            "{policy}: the pod is done, its sidecars are stopped"
        );
        assert!(
            got.init_containers_to_start.is_empty(),
            "{policy}: no sidecar restart"
        );
    }
}

#[test]
fn ephemeral_containers_start_once_even_during_initialization() {
    let mut p = pod("Always");
    if let Some(s) = p.spec.as_mut() {
        s.ephemeral_containers = Some(vec![
            EphemeralContainer {
                name: "debug".into(),
                image: Some("busybox".into()),
                target_container_name: Some("a".into()),
                ..Default::default()
            },
            EphemeralContainer {
                name: "debug2".into(),
                image: Some("busybox".into()),
                ..Default::default()
            },
        ]);
    }
    let s = status(vec![cs(&p, "i2", Running, 0), cs(&p, "s1", Running, 0)]);
    assert_eq!(actions(&p, &s).ephemeral_containers_to_start, vec![0, 1]);
    // One exited, one runs: neither is started again, and they keep nothing alive.
    let s = status(vec![
        cs(&p, "debug", Exited, 1),
        cs(&p, "debug2", Running, 0),
        cs(&p, "a", Running, 0),
        cs(&p, "s3", Running, 0),
        cs(&p, "i2", Exited, 0),
        cs(&p, "s1", Running, 0),
    ]);
    let got = actions(&p, &s);
    assert!(got.ephemeral_containers_to_start.is_empty());
    assert!(got.containers_to_kill.is_empty() && !got.kill_pod);
    // Never before the sandbox is up.
    let mut s = status(vec![]);
    s.sandbox_statuses.clear();
    let got = actions(&p, &s);
    assert!(got.create_sandbox);
    assert!(got.ephemeral_containers_to_start.is_empty());
}
