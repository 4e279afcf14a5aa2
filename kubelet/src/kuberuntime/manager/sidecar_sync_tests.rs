//! `SyncPod` with sidecars (KEP-753) and ephemeral containers against the in-memory
//! [`FakeRuntime`]: a sidecar starts before the next init container and the app and keeps
//! running; it is restarted when it exits (then backed off) whatever the pod's policy; a pod
//! whose app completed has its sidecars stopped; killing a pod stops sidecars after the app
//! containers, in reverse order; an ephemeral container starts once, in its target's PID
//! namespace. Runs on a paused clock.

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};

use super::sync_tests::Bed;
use super::*;

fn container(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some("busybox:1".into()),
        image_pull_policy: Some("IfNotPresent".into()),
        ..Default::default()
    }
}

fn sidecar(name: &str) -> Container {
    Container {
        restart_policy: Some("Always".into()),
        ..container(name)
    }
}

/// `sync_tests`' pod with upstream's default grace period (the stop order waits in it).
fn pod(uid: &str, policy: &str, init: Vec<Container>, apps: Vec<Container>) -> Pod {
    let mut p = super::sync_tests::pod(uid, policy, init, apps);
    if let Some(s) = p.spec.as_mut() {
        s.termination_grace_period_seconds = Some(30);
    }
    p
}

/// `sync_tests`' bed with the image every container here uses.
async fn bed() -> Bed {
    let b = super::sync_tests::bed().await;
    b.fake.add_image("busybox:1", 10);
    b
}

impl Bed {
    async fn sync_ok(&mut self, pod: &Pod) {
        let r = self.sync(pod).await;
        assert!(r.is_ok(), "{:?}", r.errors);
    }

    /// Names of the running containers, sorted.
    fn running_sorted(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .fake
            .containers()
            .into_iter()
            .filter(|(_, c)| c.state == cri::ContainerState::ContainerRunning as i32)
            .filter_map(|(_, c)| c.metadata.map(|m| m.name))
            .collect();
        v.sort();
        v
    }

    /// The newest instance of container `name`.
    fn newest(&self, name: &str) -> cri::ContainerStatus {
        self.fake
            .containers()
            .into_iter()
            .map(|(_, c)| c)
            .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == name))
            .max_by_key(|c| c.created_at)
            .unwrap_or_else(|| panic!("no container {name}"))
    }
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_sidecar_starts_before_the_next_init_container_and_keeps_running() {
    let mut b = bed().await;
    let p = pod(
        "s1",
        "Always",
        vec![sidecar("proxy"), container("setup")],
        vec![container("app")],
    );
    b.sync_ok(&p).await;
    assert_eq!(b.running_sorted(), names(&["proxy"]));
    b.sync_ok(&p).await;
    assert_eq!(
        b.running_sorted(),
        names(&["proxy", "setup"]),
        "setup after proxy"
    );
    b.sync_ok(&p).await;
    assert_eq!(
        b.running_sorted(),
        names(&["proxy", "setup"]),
        "app waits for setup"
    );
    b.fake.exit_container(&b.newest("setup").id, 0);
    b.sync_ok(&p).await;
    assert_eq!(
        b.running_sorted(),
        names(&["app", "proxy"]),
        "the sidecar stays"
    );
    assert!(b.newest("proxy").created_at < b.newest("setup").created_at);
    assert!(b.newest("setup").finished_at < b.newest("app").created_at);
}

#[tokio::test(start_paused = true)]
async fn an_exited_sidecar_is_restarted_then_backed_off_even_under_never() {
    let mut b = bed().await;
    let p = pod(
        "s2",
        "Never",
        vec![sidecar("proxy")],
        vec![container("app")],
    );
    b.sync_ok(&p).await;
    b.sync_ok(&p).await;
    assert_eq!(b.running_sorted(), names(&["app", "proxy"]));
    b.fake.exit_container(&b.newest("proxy").id, 1);
    b.sync_ok(&p).await;
    assert_eq!(b.running_sorted(), names(&["app", "proxy"]));
    assert_eq!(b.newest("proxy").metadata.map(|m| m.attempt), Some(1));
    b.fake.exit_container(&b.newest("proxy").id, 1);
    let r = b.sync(&p).await;
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert_eq!(
        (r.errors[0].target.as_str(), r.errors[0].reason.as_str()),
        ("proxy", reasons::CRASH_LOOP_BACK_OFF)
    );
    assert_eq!(b.running_sorted(), names(&["app"]), "the app keeps running");
}

#[tokio::test(start_paused = true)]
async fn a_completed_pod_has_its_sidecars_stopped() {
    let mut b = bed().await;
    let p = pod(
        "s3",
        "OnFailure",
        vec![sidecar("proxy")],
        vec![container("job")],
    );
    b.sync_ok(&p).await;
    b.sync_ok(&p).await;
    assert_eq!(b.running_sorted(), names(&["job", "proxy"]));
    b.fake.exit_container(&b.newest("job").id, 0);
    b.sync_ok(&p).await;
    assert!(b.running_sorted().is_empty(), "{:?}", b.running_sorted());
    assert!(b.newest("job").finished_at < b.newest("proxy").finished_at);
    // Nothing starts again: the pod is done.
    b.fake.clear_calls();
    b.sync_ok(&p).await;
    let calls = b.fake.calls();
    assert!(
        !calls
            .iter()
            .any(|c| c == "create_container" || c == "run_podsandbox"),
        "{calls:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn killing_a_pod_stops_sidecars_after_the_app_in_reverse_order() {
    let mut b = bed().await;
    let p = pod(
        "s4",
        "Always",
        vec![sidecar("first"), sidecar("second")],
        vec![container("a"), container("b")],
    );
    for _ in 0..3 {
        b.sync_ok(&p).await;
    }
    assert_eq!(b.running_sorted(), names(&["a", "b", "first", "second"]));
    let status = b.status(&p).await;
    b.manager
        .kill_pod_status(Some(&p), &status, 30)
        .await
        .expect("kill");
    assert!(b.running_sorted().is_empty());
    let done = |n: &str| b.newest(n).finished_at;
    assert!(done("a") < done("second") && done("b") < done("second"));
    assert!(
        done("second") < done("first"),
        "sidecars stop in reverse order"
    );
}

#[tokio::test(start_paused = true)]
async fn an_ephemeral_container_starts_once_in_its_targets_pid_namespace() {
    let mut b = bed().await;
    let mut p = pod("s5", "Always", vec![], vec![container("app")]);
    b.sync_ok(&p).await;
    let app = b.newest("app").id;
    if let Some(s) = p.spec.as_mut() {
        s.ephemeral_containers = Some(vec![EphemeralContainer {
            name: "debugger".into(),
            image: Some("busybox:1".into()),
            target_container_name: Some("app".into()),
            ..Default::default()
        }]);
    }
    b.sync_ok(&p).await;
    assert_eq!(b.running_sorted(), names(&["app", "debugger"]));
    let ns = b
        .fake
        .container_namespaces(&b.newest("debugger").id)
        .expect("namespaces");
    assert_eq!(ns.pid, cri::NamespaceMode::Target as i32);
    assert_eq!(ns.target_id, app);
    // It exits: never restarted.
    b.fake.exit_container(&b.newest("debugger").id, 0);
    b.fake.clear_calls();
    b.sync_ok(&p).await;
    assert!(!b.fake.calls().iter().any(|c| c == "create_container"));
    assert_eq!(b.running_sorted(), names(&["app"]));
    // A target the runtime does not know is a config error, not a start.
    if let Some(e) = p
        .spec
        .as_mut()
        .and_then(|s| s.ephemeral_containers.as_mut())
    {
        e.push(EphemeralContainer {
            name: "lost".into(),
            image: Some("busybox:1".into()),
            target_container_name: Some("nope".into()),
            ..Default::default()
        });
    }
    let r = b.sync(&p).await;
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert_eq!(r.errors[0].reason, reasons::CREATE_CONTAINER_CONFIG_ERROR);
}
