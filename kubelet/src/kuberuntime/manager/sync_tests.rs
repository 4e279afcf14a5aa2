//! `SyncPod` decisions against the in-memory [`FakeRuntime`]: what a sync asks the runtime to
//! do for a new pod, an unchanged one, a crashed container, a failed pull, init containers and
//! a dead sandbox, and what killing a pod stops. Runs in milliseconds on a paused clock.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::cri::fake::FakeRuntime;

/// The manager on a fake runtime (shared with `sidecar_sync_tests`).
pub(super) struct Bed {
    pub(super) fake: Arc<FakeRuntime>,
    pub(super) manager: KubeGenericRuntimeManager,
    pub(super) backoff: Backoff,
    _dirs: tempfile::TempDir,
}

pub(super) async fn bed() -> Bed {
    let dirs = tempfile::tempdir().expect("tempdir");
    let (fake, manager) = KubeGenericRuntimeManager::fake(dirs.path()).await;
    Bed {
        fake,
        manager,
        backoff: Backoff::new(Duration::from_secs(10), Duration::from_secs(300)),
        _dirs: dirs,
    }
}

fn container(name: &str, image: &str) -> Container {
    Container {
        name: name.into(),
        image: Some(image.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        ..Default::default()
    }
}

pub(super) fn pod(uid: &str, policy: &str, init: Vec<Container>, apps: Vec<Container>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{uid}")),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some(policy.into()),
            init_containers: (!init.is_empty()).then_some(init),
            containers: apps,
            termination_grace_period_seconds: Some(1),
            ..Default::default()
        }),
        status: None,
    }
}

impl Bed {
    pub(super) async fn status(&self, pod: &Pod) -> PodStatus {
        let m = &pod.metadata;
        self.manager
            .get_pod_status(
                m.uid.as_deref().unwrap_or_default(),
                m.name.as_deref().unwrap_or_default(),
                m.namespace.as_deref().unwrap_or_default(),
            )
            .await
            .expect("pod status")
    }

    pub(super) async fn sync(&mut self, pod: &Pod) -> SyncResult {
        let status = self.status(pod).await;
        let objects = ApiObjects::standalone("default");
        self.manager
            .sync_pod(pod, &status, &objects, &mut self.backoff)
            .await
    }

    fn running(&self) -> Vec<String> {
        self.fake
            .containers()
            .into_iter()
            .filter(|(_, c)| c.state == cri::ContainerState::ContainerRunning as i32)
            .filter_map(|(_, c)| c.metadata.map(|m| m.name))
            .collect()
    }

    fn count(&self, op: &str) -> usize {
        self.fake.call_count(op)
    }
}

#[tokio::test(start_paused = true)]
async fn a_new_pod_gets_a_sandbox_its_image_and_its_containers() {
    let mut b = bed().await;
    let p = pod(
        "u1",
        "Always",
        vec![],
        vec![container("web", "web:1"), container("side", "side:1")],
    );
    b.fake.add_image("side:1", 10);
    let r = b.sync(&p).await;
    assert!(r.is_ok(), "{:?}", r.errors);
    assert!(r.changed);
    let sandboxes = b.fake.sandboxes();
    assert_eq!(sandboxes.len(), 1);
    assert_eq!(
        sandboxes[0].labels.get(POD_UID_LABEL).map(String::as_str),
        Some("u1")
    );
    assert_eq!(
        sandboxes[0].state,
        cri::PodSandboxState::SandboxReady as i32
    );
    // Only the absent image is pulled.
    let pulls: Vec<String> = b.fake.pulls().into_iter().map(|(i, _)| i).collect();
    assert_eq!(pulls, vec!["web:1".to_string()]);
    let mut running = b.running();
    running.sort();
    assert_eq!(running, vec!["side".to_string(), "web".to_string()]);
    // The sandbox comes before the containers.
    let calls = b.fake.calls();
    let first_create = calls.iter().position(|c| c == "create_container");
    let sandbox = calls.iter().position(|c| c == "run_podsandbox");
    assert!(sandbox < first_create, "{calls:?}");
    // Container log directories are made under the configured root.
    assert!(b.manager.pod_logs_dir(&p).join("web").is_dir());
}

#[tokio::test(start_paused = true)]
async fn an_unchanged_pod_is_left_alone() {
    let mut b = bed().await;
    let p = pod("u2", "Always", vec![], vec![container("web", "web:1")]);
    assert!(b.sync(&p).await.is_ok());
    b.fake.clear_calls();
    let r = b.sync(&p).await;
    assert!(r.is_ok(), "{:?}", r.errors);
    assert!(!r.changed);
    for op in [
        "run_podsandbox",
        "create_container",
        "start_container",
        "stop_container",
        "pull_image",
    ] {
        assert_eq!(b.count(op), 0, "{op} in {:?}", b.fake.calls());
    }
}

#[tokio::test(start_paused = true)]
async fn a_crashed_container_is_restarted_then_backed_off() {
    let mut b = bed().await;
    let p = pod("u3", "Always", vec![], vec![container("web", "web:1")]);
    assert!(b.sync(&p).await.is_ok());
    let id = b.fake.containers()[0].1.id.clone();
    b.fake.exit_container(&id, 1);
    // First restart: immediate, attempt 1.
    let r = b.sync(&p).await;
    assert!(r.is_ok(), "{:?}", r.errors);
    let attempts: Vec<u32> = b
        .fake
        .containers()
        .into_iter()
        .filter_map(|(_, c)| c.metadata.map(|m| m.attempt))
        .collect();
    assert!(attempts.contains(&1), "{attempts:?}");
    assert_eq!(b.running(), vec!["web".to_string()]);
    // It crashes again at once: the next sync is in back-off.
    let id = b
        .fake
        .containers()
        .into_iter()
        .find(|(_, c)| c.state == cri::ContainerState::ContainerRunning as i32)
        .map(|(_, c)| c.id)
        .unwrap_or_default();
    b.fake.exit_container(&id, 1);
    let r = b.sync(&p).await;
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert_eq!(r.errors[0].reason, reasons::CRASH_LOOP_BACK_OFF);
    assert!(b.running().is_empty());
}

#[tokio::test(start_paused = true)]
async fn restart_policy_never_leaves_an_exited_container() {
    let mut b = bed().await;
    let p = pod("u4", "Never", vec![], vec![container("job", "job:1")]);
    assert!(b.sync(&p).await.is_ok());
    let id = b.fake.containers()[0].1.id.clone();
    b.fake.exit_container(&id, 0);
    b.fake.clear_calls();
    let r = b.sync(&p).await;
    assert!(r.is_ok(), "{:?}", r.errors);
    assert_eq!(b.count("create_container"), 0, "{:?}", b.fake.calls());
    assert_eq!(b.fake.containers().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_failed_pull_is_err_image_pull_then_image_pull_back_off() {
    let mut b = bed().await;
    let p = pod("u5", "Always", vec![], vec![container("web", "missing:1")]);
    b.fake.make_unpullable("missing:1");
    let r = b.sync(&p).await;
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert_eq!(r.errors[0].reason, reasons::ERR_IMAGE_PULL);
    assert_eq!(r.errors[0].target, "web");
    let r = b.sync(&p).await;
    assert_eq!(r.errors[0].reason, reasons::IMAGE_PULL_BACK_OFF);
    assert_eq!(b.count("pull_image"), 1, "{:?}", b.fake.calls());
    // The sandbox stays; no container was created.
    assert_eq!(b.fake.sandboxes().len(), 1);
    assert!(b.fake.containers().is_empty());
}

#[tokio::test(start_paused = true)]
async fn init_containers_run_one_at_a_time_before_the_app() {
    let mut b = bed().await;
    let p = pod(
        "u6",
        "Always",
        vec![container("init-a", "tool:1"), container("init-b", "tool:1")],
        vec![container("app", "app:1")],
    );
    assert!(b.sync(&p).await.is_ok());
    assert_eq!(b.running(), vec!["init-a".to_string()]);
    // Nothing more while the first init container runs.
    assert!(b.sync(&p).await.is_ok());
    assert_eq!(b.running(), vec!["init-a".to_string()]);
    let id = |b: &Bed, name: &str| {
        b.fake
            .containers()
            .into_iter()
            .find(|(_, c)| c.metadata.as_ref().is_some_and(|m| m.name == name))
            .map(|(_, c)| c.id)
            .unwrap_or_default()
    };
    b.fake.exit_container(&id(&b, "init-a"), 0);
    assert!(b.sync(&p).await.is_ok());
    assert_eq!(b.running(), vec!["init-b".to_string()]);
    b.fake.exit_container(&id(&b, "init-b"), 0);
    assert!(b.sync(&p).await.is_ok());
    assert_eq!(b.running(), vec!["app".to_string()]);
}

/// Upstream `SyncPod` backs off a failing regular init container like any other container
/// (`start` → `doBackOff`): the first restart is at once, the next waits with
/// `CrashLoopBackOff` for that init container, and nothing else of the pod starts meanwhile.
#[tokio::test(start_paused = true)]
async fn a_failing_init_container_is_restarted_then_backed_off() {
    let mut b = bed().await;
    let p = pod(
        "u6b",
        "Always",
        vec![container("init1", "tool:1"), container("init2", "tool:1")],
        vec![container("app", "app:1")],
    );
    assert!(b.sync(&p).await.is_ok());
    let newest = |b: &Bed| {
        b.fake
            .containers()
            .into_iter()
            .filter(|(_, c)| c.metadata.as_ref().is_some_and(|m| m.name == "init1"))
            .max_by_key(|(_, c)| c.metadata.as_ref().map(|m| m.attempt))
            .map(|(_, c)| c)
            .expect("init1")
    };
    b.fake.exit_container(&newest(&b).id, 1);
    // First restart: at once, attempt 1.
    let r = b.sync(&p).await;
    assert!(r.is_ok(), "{:?}", r.errors);
    assert_eq!(b.running(), vec!["init1".to_string()]);
    assert_eq!(newest(&b).metadata.map(|m| m.attempt), Some(1));
    // It fails again at once: the next sync is in back-off, for init1 only.
    b.fake.exit_container(&newest(&b).id, 1);
    b.fake.clear_calls();
    let r = b.sync(&p).await;
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert_eq!(
        (r.errors[0].target.as_str(), r.errors[0].reason.as_str()),
        ("init1", reasons::CRASH_LOOP_BACK_OFF)
    );
    assert_eq!(b.count("create_container"), 0, "{:?}", b.fake.calls());
    assert!(b.running().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_dead_sandbox_is_replaced_with_a_new_attempt() {
    let mut b = bed().await;
    let p = pod("u7", "Always", vec![], vec![container("web", "web:1")]);
    assert!(b.sync(&p).await.is_ok());
    let first = b.fake.sandboxes()[0].id.clone();
    b.fake.stop_pod_sandbox(&first).await.expect("stop sandbox");
    let r = b.sync(&p).await;
    assert!(r.is_ok(), "{:?}", r.errors);
    let ready: Vec<cri::PodSandboxStatus> = b
        .fake
        .sandboxes()
        .into_iter()
        .filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
        .collect();
    assert_eq!(ready.len(), 1);
    assert_ne!(ready[0].id, first);
    assert_eq!(ready[0].metadata.as_ref().map(|m| m.attempt), Some(1));
    assert_eq!(b.running(), vec!["web".to_string()]);
    // The dead sandbox was stopped again by the kill before the new one (upstream stops every
    // sandbox of the pod): that is what releases a network it still holds.
    assert_eq!(b.count("stop_podsandbox"), 2, "{:?}", b.fake.calls());
}

#[tokio::test(start_paused = true)]
async fn a_runtime_error_while_reading_status_is_not_a_vanished_sandbox() {
    let mut b = bed().await;
    let p = pod("u7e", "Always", vec![], vec![container("web", "web:1")]);
    assert!(b.sync(&p).await.is_ok());
    let (uid, name) = ("u7e", "pod-u7e");
    // The runtime cannot reach Docker: the status fails (and the sync with it), rather than
    // showing a pod without sandbox or container that a sync would create again.
    for op in ["podsandbox_status", "container_status"] {
        b.fake
            .inject_error(op, tonic::Status::unknown("cannot reach the Docker Engine"));
        let err = b
            .manager
            .get_pod_status(uid, name, "default")
            .await
            .expect_err(op);
        assert!(err.to_string().contains("cannot reach"), "{err}");
    }
    // Removed between the list and the status call: skipped, as if not listed.
    b.fake
        .inject_error("container_status", tonic::Status::not_found("gone"));
    let st = b
        .manager
        .get_pod_status(uid, name, "default")
        .await
        .expect("status");
    assert!(st.container_statuses.is_empty());
    assert_eq!(st.sandbox_statuses.len(), 1);
    assert_eq!(b.count("run_podsandbox"), 1, "no second sandbox");
}

#[tokio::test(start_paused = true)]
async fn a_failed_sandbox_is_create_pod_sandbox_error() {
    let mut b = bed().await;
    let p = pod("u8", "Always", vec![], vec![container("web", "web:1")]);
    b.fake.inject_error(
        "run_podsandbox",
        tonic::Status::unknown("network plugin failed"),
    );
    let r = b.sync(&p).await;
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert_eq!(r.errors[0].reason, reasons::CREATE_POD_SANDBOX_ERROR);
    assert!(r.errors[0].message.contains("network plugin failed"));
    assert!(b.fake.containers().is_empty());
    // The next sync tries again and succeeds.
    assert!(b.sync(&p).await.is_ok());
    assert_eq!(b.running(), vec!["web".to_string()]);
}

/// Upstream `createPodSandbox`: a pod's `runtimeClassName` is looked up and its handler passed
/// to RunPodSandbox; a RuntimeClass that does not exist fails the sync before RunPodSandbox
/// (`CreatePodSandboxError`, a `FailedCreatePodSandBox` event with the lister's message), and
/// the next sync after it appears runs the pod. A failed RunPodSandbox gets the event too.
#[tokio::test(start_paused = true)]
async fn runtime_class_name_picks_the_sandbox_handler_and_a_missing_class_fails_the_sync() {
    use k8s_openapi::api::node::v1::RuntimeClass;
    let mut b = bed().await;
    let classes = crate::runtimeclass::RuntimeClassManager::default();
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    b.manager = b
        .manager
        .clone()
        .with_runtime_classes(Some(classes.clone()))
        .with_events(crate::events::EventRecorder::new(tx));
    let mut p = pod("u-rc", "Always", vec![], vec![container("web", "web:1")]);
    if let Some(s) = p.spec.as_mut() {
        s.runtime_class_name = Some("sandboxed".into());
    }
    classes.classes().replace(Vec::new());
    let r = b.sync(&p).await;
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert_eq!(r.errors[0].reason, reasons::CREATE_POD_SANDBOX_ERROR);
    assert_eq!(
        r.errors[0].message,
        r#"runtimeclass.node.k8s.io "sandboxed" not found"#
    );
    assert_eq!(b.count("run_podsandbox"), 0, "{:?}", b.fake.calls());
    let failed: Vec<_> = std::iter::from_fn(|| events.try_recv().ok())
        .filter(|e| e.reason == "FailedCreatePodSandBox")
        .map(|e| e.message)
        .collect();
    assert_eq!(
        failed,
        [r#"Failed to create pod sandbox: runtimeclass.node.k8s.io "sandboxed" not found"#]
    );

    classes.classes().apply(RuntimeClass {
        metadata: kube::api::ObjectMeta {
            name: Some("sandboxed".into()),
            ..Default::default()
        },
        handler: "runsc".into(),
        ..Default::default()
    });
    assert!(b.sync(&p).await.is_ok());
    let handlers: Vec<_> = b
        .fake
        .sandboxes()
        .iter()
        .map(|s| s.runtime_handler.clone())
        .collect();
    assert_eq!(handlers, ["runsc"]);

    // Without a runtimeClassName: the default handler.
    let q = pod("u-rc2", "Always", vec![], vec![container("web", "web:1")]);
    b.fake
        .inject_error("run_podsandbox", tonic::Status::unknown("no such handler"));
    assert!(
        b.sync(&q).await.errors[0]
            .message
            .contains("no such handler")
    );
    assert!(
        std::iter::from_fn(|| events.try_recv().ok()).any(|e| e.reason == "FailedCreatePodSandBox"
            && e.message.starts_with("Failed to create pod sandbox: ")),
        "a failed RunPodSandbox is an event too"
    );
    assert!(b.sync(&q).await.is_ok());
    let mut handlers: Vec<_> = b
        .fake
        .sandboxes()
        .iter()
        .map(|s| s.runtime_handler.clone())
        .collect();
    handlers.sort();
    assert_eq!(handlers, ["", "runsc"]);
}

#[tokio::test(start_paused = true)]
async fn killing_a_pod_stops_its_containers_and_sandbox() {
    let mut b = bed().await;
    let p = pod(
        "u9",
        "Always",
        vec![],
        vec![container("a", "a:1"), container("b", "b:1")],
    );
    assert!(b.sync(&p).await.is_ok());
    let status = b.status(&p).await;
    b.manager
        .kill_pod_status(Some(&p), &status, 1)
        .await
        .expect("kill");
    assert!(b.running().is_empty());
    assert_eq!(b.count("stop_container"), 2, "{:?}", b.fake.calls());
    assert!(
        b.fake
            .sandboxes()
            .iter()
            .all(|s| s.state == cri::PodSandboxState::SandboxNotready as i32)
    );
    // Then removing the pod leaves nothing behind.
    b.manager.remove_pod("u9").await.expect("remove");
    assert!(b.fake.containers().is_empty());
    assert!(b.fake.sandboxes().is_empty());
}

/// The container config's environment and mounts in a sync: with the API-server mode's
/// service store, a pod from the API server waits (`CreateContainerConfigError`, upstream's
/// message) until the store listed once, then starts; a `subPathExpr` naming a variable the
/// container lacks is `CreateContainerConfigError` "missing value for X" with a `Failed`
/// event, and no container is created.
#[tokio::test(start_paused = true)]
async fn service_store_and_sub_path_expr_gate_the_container_config() {
    use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, Volume, VolumeMount};
    let mut b = bed().await;
    let store = crate::envvars::ServiceStore::default();
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    b.manager = b
        .manager
        .clone()
        .with_services(Some(store.clone()))
        .with_events(crate::events::EventRecorder::new(tx));
    b.fake.add_image("web:1", 10);
    let mut p = pod("u-svc", "Always", vec![], vec![container("web", "web:1")]);
    p.metadata.annotations = Some(
        [(
            crate::types::CONFIG_SOURCE_ANNOTATION.to_string(),
            crate::types::API_SOURCE.to_string(),
        )]
        .into(),
    );
    let r = b.sync(&p).await;
    assert_eq!(
        r.container_reasons().get("web"),
        Some(&(
            "CreateContainerConfigError".to_string(),
            "services have not yet been read at least once, cannot construct envvars".to_string()
        ))
    );
    assert_eq!(b.count("create_container"), 0, "{:?}", b.fake.calls());
    store.replace(Vec::new());
    let r = b.sync(&p).await;
    assert!(r.container_reasons().is_empty(), "{:?}", r.errors);
    assert_eq!(b.running(), ["web"]);

    let mut web = container("web", "web:1");
    web.volume_mounts = Some(vec![VolumeMount {
        name: "v".into(),
        mount_path: "/logs".into(),
        sub_path_expr: Some("$(POD_NAME)/$(NOPE)".into()),
        ..Default::default()
    }]);
    let mut q = pod("u-expr", "Always", vec![], vec![web]);
    if let Some(s) = q.spec.as_mut() {
        s.volumes = Some(vec![Volume {
            name: "v".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        }]);
    }
    while events.try_recv().is_ok() {}
    let creates = b.count("create_container");
    let r = b.sync(&q).await;
    assert_eq!(
        r.container_reasons().get("web"),
        Some(&(
            "CreateContainerConfigError".to_string(),
            "missing value for NOPE, POD_NAME".to_string()
        ))
    );
    assert_eq!(b.count("create_container"), creates, "no container created");
    let mut failed = Vec::new();
    while let Ok(e) = events.try_recv() {
        if e.reason == "Failed" {
            failed.push((e.field_path, e.message));
        }
    }
    assert_eq!(
        failed,
        [(
            "spec.containers{web}".to_string(),
            "Error: missing value for NOPE, POD_NAME".to_string()
        )]
    );
}

/// Upstream `killContainer`: a container's preStop hook runs (here an exec, through
/// `ExecSync`) while it still runs, before `StopContainer`, and the sandbox (the pod's network)
/// is stopped only after every container, so a hook can still reach other pods.
#[tokio::test(start_paused = true)]
async fn killing_a_pod_runs_the_pre_stop_hook_before_stopping_the_container_and_sandbox() {
    use k8s_openapi::api::core::v1::{ExecAction, Lifecycle, LifecycleHandler};
    let mut b = bed().await;
    let mut tester = container("tester", "busybox:1");
    tester.lifecycle = Some(Lifecycle {
        pre_stop: Some(LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(vec!["wget".into(), "http://10.0.0.1:8080/write".into()]),
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let p = pod("u10", "Always", vec![], vec![tester]);
    assert!(b.sync(&p).await.is_ok());
    let status = b.status(&p).await;
    b.fake.clear_calls();
    b.manager
        .kill_pod_status(Some(&p), &status, 30)
        .await
        .expect("kill");
    let calls = b.fake.calls();
    let at = |op: &str| calls.iter().position(|c| c == op);
    assert!(at("exec_sync").is_some(), "{calls:?}");
    assert!(at("exec_sync") < at("stop_container"), "{calls:?}");
    assert!(at("stop_container") < at("stop_podsandbox"), "{calls:?}");
    assert!(b.running().is_empty());
}

/// Upstream `SyncPod`'s `kubelet_started_pods_total`, `kubelet_started_containers_total` by
/// container type, and their errors (the failure's reason as `code`).
#[tokio::test(start_paused = true)]
async fn started_pods_and_containers_are_counted_with_their_errors() {
    let mut b = bed().await;
    let metrics = Arc::new(crate::metrics::Metrics::new("node1"));
    b.manager = b.manager.clone().with_metrics(metrics.clone());
    let p = pod(
        "m1",
        "Always",
        vec![container("init", "tool:1")],
        vec![container("web", "missing:1")],
    );
    b.fake.make_unpullable("missing:1");
    b.fake.inject_error(
        "run_podsandbox",
        tonic::Status::unknown("network plugin failed"),
    );
    assert!(!b.sync(&p).await.is_ok(), "the sandbox fails");
    assert!(
        b.sync(&p).await.is_ok(),
        "the sandbox and the init container"
    );
    let init = b
        .fake
        .containers()
        .into_iter()
        .map(|(_, c)| c.id)
        .next()
        .expect("the init container");
    b.fake.exit_container(&init, 0);
    assert!(
        !b.sync(&p).await.is_ok(),
        "the app's image cannot be pulled"
    );
    let text = metrics.render();
    for line in [
        "kubelet_started_pods_total 2",
        "kubelet_started_pods_errors_total 1",
        "kubelet_started_containers_total{container_type=\"init_container\"} 1",
        "kubelet_started_containers_total{container_type=\"container\"} 1",
        "kubelet_started_containers_errors_total{container_type=\"container\",code=\"ErrImagePull\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
}
