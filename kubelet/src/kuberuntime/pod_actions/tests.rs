//! Unit tests of `computePodActions`, in the manner of upstream's `TestComputePodActions`
//! (`kuberuntime_manager_test.go`): a table of pod specs and runtime states (sandboxes, init
//! and app containers, probe failures) with the actions expected, and the kill messages. Kept
//! apart from the decision itself, which they outweigh.

use super::*;
use crate::container::{ContainerStatus, SandboxStatus};
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

pub(super) fn c(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some(format!("img-{name}")),
        ..Default::default()
    }
}

fn pod(policy: &str, init: &[&str], apps: &[&str]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("default".into()),
            uid: Some("uid".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some(policy.into()),
            init_containers: if init.is_empty() {
                None
            } else {
                Some(init.iter().map(|n| c(n)).collect())
            },
            containers: apps.iter().map(|n| c(n)).collect(),
            ..Default::default()
        }),
        status: None,
    }
}

pub(super) fn sandbox(attempt: u32, ready: bool) -> SandboxStatus {
    SandboxStatus {
        id: format!("sb{attempt}"),
        state: if ready {
            SandboxState::Ready
        } else {
            SandboxState::NotReady
        },
        attempt,
        network_namespace_mode: NamespaceMode::Pod,
        ips: vec!["10.0.0.2".into()],
        created_at: None,
    }
}

/// A status for container `name` of `pod` (hash matches its spec).
pub(super) fn cs(pod: &Pod, name: &str, state: ContainerState, exit: i32) -> ContainerStatus {
    let spec = pod
        .spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .find(|c| c.name == name)
        .cloned()
        .unwrap_or_else(|| c(name));
    ContainerStatus {
        id: ContainerID::new("docker", format!("id-{name}")),
        name: name.into(),
        state,
        exit_code: exit,
        hash: hash_container(&spec),
        ..Default::default()
    }
}

pub(super) fn status(sandboxes: Vec<SandboxStatus>, containers: Vec<ContainerStatus>) -> PodStatus {
    PodStatus {
        id: "uid".into(),
        name: "p".into(),
        namespace: "default".into(),
        ips: vec![],
        sandbox_statuses: sandboxes,
        container_statuses: containers,
    }
}

fn id(name: &str) -> ContainerID {
    ContainerID::new("docker", format!("id-{name}"))
}

struct Want {
    kill_pod: bool,
    create_sandbox: bool,
    attempt: u32,
    sandbox_id: &'static str,
    init: Vec<usize>,
    start: Vec<usize>,
    kill: Vec<(&'static str, KillReason)>,
}

fn keep_all() -> Want {
    Want {
        kill_pod: false,
        create_sandbox: false,
        attempt: 1,
        sandbox_id: "sb1",
        init: vec![],
        start: vec![],
        kill: vec![],
    }
}

fn new_sandbox(attempt: u32, id: &'static str) -> Want {
    Want {
        kill_pod: true,
        create_sandbox: true,
        attempt,
        sandbox_id: id,
        init: vec![],
        start: vec![],
        kill: vec![],
    }
}

use ContainerState::*;

#[allow(clippy::type_complexity)]
fn cases() -> Vec<(
    &'static str,
    Box<dyn Fn() -> (Pod, PodStatus, ProbeFailures)>,
    Want,
)> {
    let none = ProbeFailures::default;
    vec![
        (
            "no sandbox: create with attempt 0, start all",
            Box::new(move || {
                let p = pod("Always", &[], &["a", "b"]);
                (p, status(vec![], vec![]), none())
            }),
            Want {
                start: vec![0, 1],
                ..new_sandbox(0, "")
            },
        ),
        (
            "no sandbox with init containers: first init only",
            Box::new(move || {
                let p = pod("Always", &["i1", "i2"], &["a"]);
                (p, status(vec![], vec![]), none())
            }),
            Want {
                init: vec![0],
                ..new_sandbox(0, "")
            },
        ),
        (
            "sandbox not ready: attempt+1, keep id to stop it",
            Box::new(move || {
                let p = pod("Always", &[], &["a"]);
                let s = status(vec![sandbox(1, false)], vec![cs(&p, "a", Exited, 0)]);
                (p, s, none())
            }),
            Want {
                start: vec![0],
                ..new_sandbox(2, "sb1")
            },
        ),
        (
            "two ready sandboxes: recreate",
            Box::new(move || {
                let p = pod("Always", &[], &["a"]);
                let s = status(
                    vec![sandbox(3, true), sandbox(2, true)],
                    vec![cs(&p, "a", Running, 0)],
                );
                (p, s, none())
            }),
            Want {
                start: vec![0],
                ..new_sandbox(4, "sb3")
            },
        ),
        (
            "network namespace mode changed: recreate, empty sandbox id",
            Box::new(move || {
                let mut p = pod("Always", &[], &["a"]);
                if let Some(s) = p.spec.as_mut() {
                    s.host_network = Some(true);
                }
                let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Running, 0)]);
                (p, s, none())
            }),
            Want {
                start: vec![0],
                ..new_sandbox(2, "")
            },
        ),
        (
            "no IP for a pod-network sandbox: recreate",
            Box::new(move || {
                let p = pod("Always", &[], &["a"]);
                let mut sb = sandbox(1, true);
                sb.ips.clear();
                let s = status(vec![sb], vec![cs(&p, "a", Running, 0)]);
                (p, s, none())
            }),
            Want {
                start: vec![0],
                ..new_sandbox(2, "sb1")
            },
        ),
        (
            "host network without IP is fine",
            Box::new(move || {
                let mut p = pod("Always", &[], &["a"]);
                if let Some(s) = p.spec.as_mut() {
                    s.host_network = Some(true);
                }
                let mut sb = sandbox(1, true);
                sb.ips.clear();
                sb.network_namespace_mode = NamespaceMode::Node;
                let s = status(vec![sb], vec![cs(&p, "a", Running, 0)]);
                (p, s, none())
            }),
            keep_all(),
        ),
        (
            "Never policy, sandbox dead, containers ran: don't recreate",
            Box::new(move || {
                let p = pod("Never", &[], &["a"]);
                let s = status(vec![sandbox(1, false)], vec![cs(&p, "a", Exited, 1)]);
                (p, s, none())
            }),
            Want {
                create_sandbox: false,
                ..new_sandbox(2, "sb1")
            },
        ),
        (
            "Never policy, sandbox dead, no container ever created: retry sandbox",
            Box::new(move || {
                let p = pod("Never", &[], &["a"]);
                let s = status(vec![sandbox(1, false)], vec![]);
                (p, s, none())
            }),
            Want {
                start: vec![0],
                ..new_sandbox(2, "sb1")
            },
        ),
        (
            "OnFailure, sandbox dead: skip succeeded containers",
            Box::new(move || {
                let p = pod("OnFailure", &[], &["a", "b"]);
                let s = status(
                    vec![sandbox(1, false)],
                    vec![cs(&p, "a", Exited, 0), cs(&p, "b", Exited, 2)],
                );
                (p, s, none())
            }),
            Want {
                start: vec![1],
                ..new_sandbox(2, "sb1")
            },
        ),
        (
            "OnFailure, sandbox dead, all succeeded, no init: nothing to do",
            Box::new(move || {
                let p = pod("OnFailure", &[], &["a"]);
                let s = status(vec![sandbox(1, false)], vec![cs(&p, "a", Exited, 0)]);
                (p, s, none())
            }),
            Want {
                create_sandbox: false,
                ..new_sandbox(2, "sb1")
            },
        ),
        (
            "all running and unchanged: keep",
            Box::new(move || {
                let p = pod("Always", &[], &["a", "b"]);
                let s = status(
                    vec![sandbox(1, true)],
                    vec![cs(&p, "a", Running, 0), cs(&p, "b", Running, 0)],
                );
                (p, s, none())
            }),
            keep_all(),
        ),
        (
            "spec hash changed: kill and restart even under Never",
            Box::new(move || {
                let p = pod("Never", &[], &["a"]);
                let mut a = cs(&p, "a", Running, 0);
                a.hash ^= 1;
                let s = status(vec![sandbox(1, true)], vec![a]);
                (p, s, none())
            }),
            Want {
                start: vec![0],
                kill: vec![("a", KillReason::SpecChanged)],
                ..keep_all()
            },
        ),
        (
            "liveness failed under Always: kill and restart",
            Box::new(move || {
                let p = pod("Always", &[], &["a", "b"]);
                let s = status(
                    vec![sandbox(1, true)],
                    vec![cs(&p, "a", Running, 0), cs(&p, "b", Running, 0)],
                );
                let mut pf = ProbeFailures::default();
                pf.liveness.insert(id("a"));
                (p, s, pf)
            }),
            Want {
                start: vec![0],
                kill: vec![("a", KillReason::LivenessProbe)],
                ..keep_all()
            },
        ),
        (
            "liveness failed under Never, only container: kill it and the pod",
            Box::new(move || {
                let p = pod("Never", &[], &["a"]);
                let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Running, 0)]);
                let mut pf = ProbeFailures::default();
                pf.liveness.insert(id("a"));
                (p, s, pf)
            }),
            Want {
                kill_pod: true,
                kill: vec![("a", KillReason::LivenessProbe)],
                ..keep_all()
            },
        ),
        (
            "startup probe failed: kill and restart",
            Box::new(move || {
                let p = pod("OnFailure", &[], &["a"]);
                let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Running, 0)]);
                let mut pf = ProbeFailures::default();
                pf.startup.insert(id("a"));
                (p, s, pf)
            }),
            Want {
                start: vec![0],
                kill: vec![("a", KillReason::StartupProbe)],
                ..keep_all()
            },
        ),
        (
            "exited under Always: restart, keep the running one",
            Box::new(move || {
                let p = pod("Always", &[], &["a", "b"]);
                let s = status(
                    vec![sandbox(1, true)],
                    vec![cs(&p, "a", Exited, 0), cs(&p, "b", Running, 0)],
                );
                (p, s, none())
            }),
            Want {
                start: vec![0],
                ..keep_all()
            },
        ),
        (
            "exited 0 under OnFailure with another running: leave it",
            Box::new(move || {
                let p = pod("OnFailure", &[], &["a", "b"]);
                let s = status(
                    vec![sandbox(1, true)],
                    vec![cs(&p, "a", Exited, 0), cs(&p, "b", Running, 0)],
                );
                (p, s, none())
            }),
            keep_all(),
        ),
        (
            "exited 1 under OnFailure: restart",
            Box::new(move || {
                let p = pod("OnFailure", &[], &["a"]);
                let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Exited, 1)]);
                (p, s, none())
            }),
            Want {
                start: vec![0],
                ..keep_all()
            },
        ),
        (
            "all exited under Never: kill pod",
            Box::new(move || {
                let p = pod("Never", &[], &["a", "b"]);
                let s = status(
                    vec![sandbox(1, true)],
                    vec![cs(&p, "a", Exited, 0), cs(&p, "b", Exited, 1)],
                );
                (p, s, none())
            }),
            Want {
                kill_pod: true,
                ..keep_all()
            },
        ),
        (
            "unknown state: kill then restart",
            Box::new(move || {
                let p = pod("Never", &[], &["a"]);
                let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Unknown, 0)]);
                (p, s, none())
            }),
            Want {
                start: vec![0],
                kill: vec![("a", KillReason::Unknown)],
                ..keep_all()
            },
        ),
        (
            "created but never started: start it",
            Box::new(move || {
                let p = pod("Never", &[], &["a"]);
                let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Created, 0)]);
                (p, s, none())
            }),
            Want {
                start: vec![0],
                ..keep_all()
            },
        ),
        (
            "missing app container in ready sandbox: start it",
            Box::new(move || {
                let p = pod("Always", &[], &["a", "b"]);
                let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Running, 0)]);
                (p, s, none())
            }),
            Want {
                start: vec![1],
                ..keep_all()
            },
        ),
        (
            "deletion timestamp set: no restarts, kill pod",
            Box::new(move || {
                let mut p = pod("Always", &[], &["a"]);
                p.metadata.deletion_timestamp =
                    Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
                let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Exited, 1)]);
                (p, s, none())
            }),
            Want {
                kill_pod: true,
                ..keep_all()
            },
        ),
        (
            "init: first done, start the second",
            Box::new(move || {
                let p = pod("Always", &["i1", "i2"], &["a"]);
                let s = status(vec![sandbox(1, true)], vec![cs(&p, "i1", Exited, 0)]);
                (p, s, none())
            }),
            Want {
                init: vec![1],
                ..keep_all()
            },
        ),
        (
            "init: none started yet in ready sandbox: start first",
            Box::new(move || {
                let p = pod("Always", &["i1", "i2"], &["a"]);
                (p, status(vec![sandbox(1, true)], vec![]), none())
            }),
            Want {
                init: vec![0],
                ..keep_all()
            },
        ),
        (
            "init: one running, wait",
            Box::new(move || {
                let p = pod("Always", &["i1", "i2"], &["a"]);
                let s = status(
                    vec![sandbox(1, true)],
                    vec![cs(&p, "i2", Running, 0), cs(&p, "i1", Exited, 0)],
                );
                (p, s, none())
            }),
            keep_all(),
        ),
        (
            "init: failed under Always: restart it",
            Box::new(move || {
                let p = pod("Always", &["i1", "i2"], &["a"]);
                let s = status(
                    vec![sandbox(1, true)],
                    vec![cs(&p, "i2", Exited, 1), cs(&p, "i1", Exited, 0)],
                );
                (p, s, none())
            }),
            Want {
                init: vec![1],
                ..keep_all()
            },
        ),
        (
            "init: OOMKilled counts as failed even with exit 0",
            Box::new(move || {
                let p = pod("Never", &["i1"], &["a"]);
                let mut i1 = cs(&p, "i1", Exited, 0);
                i1.reason = "OOMKilled".into();
                let s = status(vec![sandbox(1, true)], vec![i1]);
                (p, s, none())
            }),
            Want {
                kill_pod: true,
                ..keep_all()
            },
        ),
        (
            "init: failed under Never: kill pod",
            Box::new(move || {
                let p = pod("Never", &["i1"], &["a"]);
                let s = status(vec![sandbox(1, true)], vec![cs(&p, "i1", Exited, 1)]);
                (p, s, none())
            }),
            Want {
                kill_pod: true,
                ..keep_all()
            },
        ),
        (
            "init: unknown state under OnFailure: kill it and restart it",
            Box::new(move || {
                let p = pod("OnFailure", &["i1"], &["a"]);
                let s = status(vec![sandbox(1, true)], vec![cs(&p, "i1", Unknown, 0)]);
                (p, s, none())
            }),
            Want {
                init: vec![0],
                kill: vec![("i1", KillReason::Unknown)],
                ..keep_all()
            },
        ),
        (
            "init: all done, start app containers",
            Box::new(move || {
                let p = pod("Always", &["i1", "i2"], &["a", "b"]);
                let s = status(
                    vec![sandbox(1, true)],
                    vec![cs(&p, "i2", Exited, 0), cs(&p, "i1", Exited, 0)],
                );
                (p, s, none())
            }),
            Want {
                start: vec![0, 1],
                ..keep_all()
            },
        ),
        (
            "init: app container running means init done even if GC'd",
            Box::new(move || {
                let p = pod("Always", &["i1"], &["a"]);
                let s = status(vec![sandbox(1, true)], vec![cs(&p, "a", Running, 0)]);
                (p, s, none())
            }),
            keep_all(),
        ),
        (
            "sandbox dead with init containers, apps exited under Always: first init",
            Box::new(move || {
                let p = pod("Always", &["i1"], &["a"]);
                let s = status(
                    vec![sandbox(1, false)],
                    vec![cs(&p, "a", Exited, 0), cs(&p, "i1", Exited, 0)],
                );
                (p, s, none())
            }),
            Want {
                init: vec![0],
                ..new_sandbox(2, "sb1")
            },
        ),
    ]
}

#[test]
fn compute_pod_actions_table() {
    let all = cases();
    assert!(all.len() >= 20);
    for (name, build, want) in all {
        let (p, s, probes) = build();
        let got = compute_pod_actions(&p, &s, &probes);
        assert_eq!(got.kill_pod, want.kill_pod, "{name}: kill_pod");
        assert_eq!(
            got.create_sandbox, want.create_sandbox,
            "{name}: create_sandbox"
        );
        assert_eq!(got.attempt, want.attempt, "{name}: attempt");
        assert_eq!(got.sandbox_id, want.sandbox_id, "{name}: sandbox_id");
        assert_eq!(
            got.init_containers_to_start, want.init,
            "{name}: init containers to start"
        );
        assert_eq!(got.containers_to_start, want.start, "{name}: start");
        let mut kill: Vec<(String, KillReason)> = got
            .containers_to_kill
            .values()
            .map(|k| (k.name.clone(), k.reason))
            .collect();
        kill.sort_by(|a, b| a.0.cmp(&b.0));
        let want_kill: Vec<(String, KillReason)> =
            want.kill.iter().map(|(n, r)| (n.to_string(), *r)).collect();
        assert_eq!(kill, want_kill, "{name}: kill");
    }
}

#[test]
fn kill_messages() {
    let p = pod("Always", &[], &["a"]);
    let mut a = cs(&p, "a", Running, 0);
    a.hash = 7;
    let s = status(vec![sandbox(1, true)], vec![a]);
    let got = compute_pod_actions(&p, &s, &ProbeFailures::default());
    let k = got.containers_to_kill.get(&id("a")).expect("killed");
    assert!(k.message.starts_with("Container spec hash changed (7 vs "));
    assert!(
        k.message
            .ends_with("Container will be killed and recreated.")
    );
    assert_eq!(k.index, 0);
    assert!(!k.init);
}
