//! Hardening of the CRI surface (issue 13), on our dockershim with containerd as the control
//! where the two agree:
//! - metadata a Docker container name cannot carry (`_`) is refused with InvalidArgument instead
//!   of a sandbox whose status reports other metadata (containerd, which keeps metadata in its
//!   own store, round-trips it);
//! - RunPodSandbox and CreateContainer twice with the same metadata never leave two live
//!   objects: the second call fails (AlreadyExists on dockershim; containerd says "is reserved"),
//!   also when both calls run at once;
//! - a container `log_path` leaving the sandbox's log directory is InvalidArgument;
//! - a request over 16 MiB is RESOURCE_EXHAUSTED, as from containerd (Go gRPC).

use std::collections::HashMap;
use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use cri_proto::runtime::v1::runtime_service_client::RuntimeServiceClient;
use integration::fixtures::{busybox_container, cleanup_sandboxes, ensure_image, sandbox_config};
use integration::require_testbed;
use integration::runtimes::{RuntimeKind, TestRuntime};
use tonic::transport::Channel;

type Rt = RuntimeServiceClient<Channel>;

async fn sandboxes_labelled(rt: &mut Rt, pod: &str) -> Vec<cri::PodSandbox> {
    rt.list_pod_sandbox(cri::ListPodSandboxRequest {
        filter: Some(cri::PodSandboxFilter {
            label_selector: HashMap::from([("pod".to_string(), pod.to_string())]),
            ..Default::default()
        }),
    })
    .await
    .expect("ListPodSandbox")
    .into_inner()
    .items
}

async fn run(rt: &mut Rt, cfg: &cri::PodSandboxConfig) -> Result<String, tonic::Status> {
    rt.run_pod_sandbox(cri::RunPodSandboxRequest {
        config: Some(cfg.clone()),
        runtime_handler: String::new(),
    })
    .await
    .map(|r| r.into_inner().pod_sandbox_id)
}

fn pod_label(cfg: &cri::PodSandboxConfig) -> String {
    cfg.labels["pod"].clone()
}

// ---- names with '_' ----

async fn underscore_names(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("cri_hardening underscore[{}]", kind.name()));
    let rt = TestRuntime::new(kind, &tb).await.expect("runtime");
    let mut c = rt.runtime.clone();
    let logs = tempfile::tempdir().expect("tempdir");
    for field in ["name", "namespace", "uid"] {
        let mut cfg = sandbox_config("under", logs.path());
        let meta = cfg.metadata.as_mut().expect("metadata");
        match field {
            "name" => meta.name = format!("{}_x", meta.name),
            "namespace" => meta.namespace = "cri_it".into(),
            _ => meta.uid = format!("{}_x", meta.uid),
        }
        let want = meta.clone();
        let result = run(&mut c, &cfg).await;
        match kind {
            RuntimeKind::Dockershim => {
                let err = result.expect_err("dockershim must refuse '_' in metadata");
                assert_eq!(err.code(), tonic::Code::InvalidArgument, "{field}: {err:?}");
                assert!(err.message().contains('_'), "{field}: {}", err.message());
                assert!(
                    sandboxes_labelled(&mut c, &pod_label(&cfg))
                        .await
                        .is_empty(),
                    "{field}: a refused RunPodSandbox left a sandbox"
                );
            }
            RuntimeKind::Containerd => {
                // The control: the CRI itself allows '_', and containerd reads it back exactly.
                let id = result.expect("containerd runs it");
                let st = c
                    .pod_sandbox_status(cri::PodSandboxStatusRequest {
                        pod_sandbox_id: id.clone(),
                        verbose: false,
                    })
                    .await
                    .expect("status")
                    .into_inner()
                    .status
                    .expect("status");
                cleanup_sandboxes(&mut c, std::slice::from_ref(&id)).await;
                assert_eq!(st.metadata, Some(want), "{field}");
                assert_eq!(st.state, cri::PodSandboxState::SandboxReady as i32);
            }
        }
    }
    if kind == RuntimeKind::Dockershim {
        // A container name with '_' is refused too (its Docker name would parse back wrong).
        let cfg = sandbox_config("under-c", logs.path());
        let id = run(&mut c, &cfg).await.expect("sandbox");
        let mut img = rt.image.clone();
        ensure_image(&mut img, &tb.busybox_image)
            .await
            .expect("image");
        let err = c
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: id.clone(),
                config: Some(busybox_container("web_1", &tb.busybox_image, "sleep 60")),
                sandbox_config: Some(cfg.clone()),
            })
            .await
            .expect_err("'_' in a container name");
        let listed = c
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter {
                    pod_sandbox_id: id.clone(),
                    ..Default::default()
                }),
            })
            .await
            .expect("list")
            .into_inner()
            .containers;
        cleanup_sandboxes(&mut c, &[id]).await;
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        assert!(
            listed.is_empty(),
            "a refused container was created: {listed:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_underscore_names_dockershim() {
    underscore_names(RuntimeKind::Dockershim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_underscore_names_containerd() {
    underscore_names(RuntimeKind::Containerd).await;
}

// ---- the same metadata twice ----

async fn same_sandbox_twice(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("cri_hardening twice[{}]", kind.name()));
    let rt = TestRuntime::new(kind, &tb).await.expect("runtime");
    let mut c = rt.runtime.clone();
    let logs = tempfile::tempdir().expect("tempdir");

    // One after the other: the second fails, the first stays the only, ready sandbox.
    let cfg = sandbox_config("twice", logs.path());
    let first = run(&mut c, &cfg).await.expect("first RunPodSandbox");
    let second = run(&mut c, &cfg).await;
    let listed = sandboxes_labelled(&mut c, &pod_label(&cfg)).await;
    let mut ids = vec![first.clone()];
    ids.extend(listed.iter().map(|s| s.id.clone()));
    ids.dedup();

    // At once: exactly one of two concurrent calls succeeds.
    let cfg2 = sandbox_config("twice-at-once", logs.path());
    let (mut a, mut b) = (c.clone(), c.clone());
    let (ra, rb) = tokio::join!(run(&mut a, &cfg2), run(&mut b, &cfg2));
    let listed2 = sandboxes_labelled(&mut c, &pod_label(&cfg2)).await;
    ids.extend(listed2.iter().map(|s| s.id.clone()));
    cleanup_sandboxes(&mut c, &ids).await;

    let err = second.expect_err("the same RunPodSandbox twice succeeded");
    match kind {
        RuntimeKind::Dockershim => {
            assert_eq!(err.code(), tonic::Code::AlreadyExists, "{err:?}");
            assert!(err.message().contains(&first), "names the holder: {err:?}");
        }
        // containerd 1.6: Unknown, "failed to reserve sandbox name ...: name ... is reserved for ...".
        RuntimeKind::Containerd => {
            assert!(err.message().contains("reserved"), "{err:?}");
            assert_eq!(err.code(), tonic::Code::Unknown, "{err:?}");
        }
    }
    assert_eq!(listed.len(), 1, "one sandbox for one metadata: {listed:#?}");
    assert_eq!(listed[0].id, first);
    assert_eq!(listed[0].state, cri::PodSandboxState::SandboxReady as i32);
    assert_eq!(
        ra.is_ok() as u8 + rb.is_ok() as u8,
        1,
        "concurrent: {ra:?} / {rb:?}"
    );
    let live: Vec<_> = listed2
        .iter()
        .filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
        .collect();
    assert_eq!(live.len(), 1, "concurrent: {listed2:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_same_sandbox_twice_dockershim() {
    same_sandbox_twice(RuntimeKind::Dockershim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_same_sandbox_twice_containerd() {
    same_sandbox_twice(RuntimeKind::Containerd).await;
}

async fn containers_of(rt: &mut Rt, sandbox: &str) -> Vec<cri::Container> {
    rt.list_containers(cri::ListContainersRequest {
        filter: Some(cri::ContainerFilter {
            pod_sandbox_id: sandbox.to_string(),
            ..Default::default()
        }),
    })
    .await
    .expect("ListContainers")
    .into_inner()
    .containers
}

async fn same_container_twice(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("cri_hardening container twice[{}]", kind.name()));
    let rt = TestRuntime::new(kind, &tb).await.expect("runtime");
    let mut c = rt.runtime.clone();
    let mut img = rt.image.clone();
    ensure_image(&mut img, &tb.busybox_image)
        .await
        .expect("image");
    let logs = tempfile::tempdir().expect("tempdir");
    let cfg = sandbox_config("ctwice", logs.path());
    let sb = run(&mut c, &cfg).await.expect("sandbox");
    std::fs::create_dir_all(std::path::Path::new(&cfg.log_directory).join("web")).expect("dir");
    let req = cri::CreateContainerRequest {
        pod_sandbox_id: sb.clone(),
        config: Some(busybox_container("web", &tb.busybox_image, "sleep 60")),
        sandbox_config: Some(cfg.clone()),
    };
    let first = c
        .create_container(req.clone())
        .await
        .map(|r| r.into_inner().container_id);
    // Created, not started: the name is taken.
    let created_again = c.create_container(req.clone()).await;
    if let Ok(id) = &first {
        let _ = c
            .start_container(cri::StartContainerRequest {
                container_id: id.clone(),
            })
            .await;
    }
    // Running: the name is taken.
    let running_again = c.create_container(req.clone()).await;
    // Both at once, for another name.
    let mut other = req.clone();
    if let Some(m) = other.config.as_mut().and_then(|c| c.metadata.as_mut()) {
        m.name = "side".into();
    }
    std::fs::create_dir_all(std::path::Path::new(&cfg.log_directory).join("side")).expect("dir");
    let (mut a, mut b) = (c.clone(), c.clone());
    let (ra, rb) = tokio::join!(
        a.create_container(other.clone()),
        b.create_container(other.clone())
    );
    let listed = containers_of(&mut c, &sb).await;
    cleanup_sandboxes(&mut c, std::slice::from_ref(&sb)).await;

    let first = first.expect("first CreateContainer");
    for (what, r) in [("created", &created_again), ("running", &running_again)] {
        let err = r.as_ref().map(|r| r.get_ref().container_id.clone());
        let err = err.expect_err(&format!("CreateContainer twice ({what} holder) succeeded"));
        if kind == RuntimeKind::Dockershim {
            assert_eq!(err.code(), tonic::Code::AlreadyExists, "{what}: {err:?}");
        }
    }
    assert_eq!(
        ra.is_ok() as u8 + rb.is_ok() as u8,
        1,
        "concurrent: {ra:?} / {rb:?}"
    );
    let web: Vec<_> = listed
        .iter()
        .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == "web"))
        .collect();
    assert_eq!(web.len(), 1, "{listed:#?}");
    assert_eq!(web[0].id, first);
    assert_eq!(web[0].state, cri::ContainerState::ContainerRunning as i32);
    let side = listed
        .iter()
        .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == "side"))
        .count();
    assert_eq!(side, 1, "{listed:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_same_container_twice_dockershim() {
    same_container_twice(RuntimeKind::Dockershim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_same_container_twice_containerd() {
    same_container_twice(RuntimeKind::Containerd).await;
}

/// Upstream's recovery stays: an exited container holding the name (a leftover) is removed and
/// the name reused, so the new container is the only one under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_exited_name_holder_is_replaced_dockershim() {
    let tb = require_testbed!("cri_exited_name_holder_is_replaced_dockershim");
    let rt = TestRuntime::new(RuntimeKind::Dockershim, &tb)
        .await
        .expect("runtime");
    let mut c = rt.runtime.clone();
    let mut img = rt.image.clone();
    ensure_image(&mut img, &tb.busybox_image)
        .await
        .expect("image");
    let logs = tempfile::tempdir().expect("tempdir");
    let cfg = sandbox_config("exited-holder", logs.path());
    let sb = run(&mut c, &cfg).await.expect("sandbox");
    std::fs::create_dir_all(std::path::Path::new(&cfg.log_directory).join("web")).expect("dir");
    let req = cri::CreateContainerRequest {
        pod_sandbox_id: sb.clone(),
        config: Some(busybox_container("web", &tb.busybox_image, "true")),
        sandbox_config: Some(cfg.clone()),
    };
    let result = async {
        let first = c
            .create_container(req.clone())
            .await?
            .into_inner()
            .container_id;
        c.start_container(cri::StartContainerRequest {
            container_id: first.clone(),
        })
        .await?;
        for _ in 0..100 {
            let st = c
                .container_status(cri::ContainerStatusRequest {
                    container_id: first.clone(),
                    verbose: false,
                })
                .await?
                .into_inner()
                .status
                .map(|s| s.state);
            if st == Some(cri::ContainerState::ContainerExited as i32) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let second = c
            .create_container(req.clone())
            .await?
            .into_inner()
            .container_id;
        Ok::<_, tonic::Status>((first, second, containers_of(&mut c.clone(), &sb).await))
    }
    .await;
    cleanup_sandboxes(&mut c, std::slice::from_ref(&sb)).await;
    let (first, second, listed) = result.expect("create, exit, create again");
    assert_ne!(first, second);
    let ids: Vec<_> = listed.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, vec![second.as_str()], "the exited holder is gone");
}

// ---- log_path ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_log_path_stays_in_log_directory_dockershim() {
    let tb = require_testbed!("cri_log_path_stays_in_log_directory_dockershim");
    let rt = TestRuntime::new(RuntimeKind::Dockershim, &tb)
        .await
        .expect("runtime");
    let mut c = rt.runtime.clone();
    let mut img = rt.image.clone();
    ensure_image(&mut img, &tb.busybox_image)
        .await
        .expect("image");
    let root = tempfile::tempdir().expect("tempdir");
    let logs = root.path().join("logs");
    let cfg = sandbox_config("logpath", &logs);
    let sb = run(&mut c, &cfg).await.expect("sandbox");
    let outside = root.path().join("escaped.log");
    let mut results = Vec::new();
    for (i, path) in [
        "../../escaped.log".to_string(),
        "web/../../../escaped.log".to_string(),
        outside.display().to_string(),
    ]
    .into_iter()
    .enumerate()
    {
        let mut cc = busybox_container(&format!("c{i}"), &tb.busybox_image, "echo out");
        cc.log_path = path.clone();
        let r = c
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sb.clone(),
                config: Some(cc),
                sandbox_config: Some(cfg.clone()),
            })
            .await
            .map(|r| r.into_inner().container_id);
        if let Ok(id) = &r {
            // Were it created, starting it would write the file outside.
            let _ = c
                .start_container(cri::StartContainerRequest {
                    container_id: id.clone(),
                })
                .await;
        }
        results.push((path, r));
    }
    let listed = containers_of(&mut c, &sb).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let escaped = outside.exists();
    cleanup_sandboxes(&mut c, &[sb]).await;
    for (path, r) in results {
        let err = r.expect_err(&format!("log_path {path:?} accepted"));
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{path}: {err:?}");
    }
    assert!(listed.is_empty(), "{listed:#?}");
    assert!(!escaped, "a log file was written outside the log directory");
}

// ---- oversize requests ----

async fn oversize(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("cri_hardening oversize[{}]", kind.name()));
    let rt = TestRuntime::new(kind, &tb).await.expect("runtime");
    let ch = cri_proto::connect(&rt.endpoint, Duration::from_secs(5))
        .await
        .expect("connect");
    // A client allowed to send more than the server accepts.
    let big = 64 * 1024 * 1024;
    let mut c = RuntimeServiceClient::new(ch.clone()).max_encoding_message_size(big);
    let mut i = cri_proto::runtime::v1::image_service_client::ImageServiceClient::new(ch)
        .max_encoding_message_size(big);
    let huge = "v".repeat(cri_proto::MAX_MSG_SIZE + 1);
    let err = c
        .version(cri::VersionRequest {
            version: huge.clone(),
        })
        .await
        .expect_err("a 16 MiB + 1 request was accepted");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("larger than max"), "{err:?}");
    let err = i
        .image_status(cri::ImageStatusRequest {
            image: Some(cri::ImageSpec {
                image: huge,
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .expect_err("a 16 MiB + 1 request was accepted");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    // Just under the limit is decoded (and answered on its merits).
    let fits = "v".repeat(cri_proto::MAX_MSG_SIZE - 64);
    let r = c.version(cri::VersionRequest { version: fits }).await;
    if let Err(e) = &r {
        assert_ne!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_oversize_request_dockershim() {
    oversize(RuntimeKind::Dockershim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_oversize_request_containerd() {
    oversize(RuntimeKind::Containerd).await;
}
