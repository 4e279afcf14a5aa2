//! Wire compatibility and the basic lifecycle, run unchanged against containerd's CRI plugin (a
//! real Go CRI server) and against our dockershim: Version, Status, PullImage + ImageStatus from
//! the local registry, RunPodSandbox, CreateContainer, StartContainer, ContainerStatus,
//! ListContainers with a label filter, ExecSync, StopContainer, RemoveContainer, StopPodSandbox,
//! RemovePodSandbox — and what is read back (metadata, labels, annotations, log content) equals
//! what was sent.

use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use integration::fixtures::{busybox_container, cleanup_sandboxes, sandbox_config};
use integration::require_testbed;
use integration::runtimes::{RuntimeKind, TestRuntime};

async fn lifecycle(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("cri_lifecycle[{}]", kind.name()));
    let mut rt = TestRuntime::new(kind, &tb).await.expect("runtime");

    // Version and Status.
    let v = rt
        .runtime
        .version(cri::VersionRequest {
            version: "v1".into(),
        })
        .await
        .expect("Version")
        .into_inner();
    assert!(!v.runtime_name.is_empty(), "runtime name: {v:?}");
    assert!(!v.runtime_version.is_empty(), "runtime version: {v:?}");
    let st = rt
        .runtime
        .status(cri::StatusRequest { verbose: false })
        .await
        .expect("Status")
        .into_inner();
    let conds = st.status.expect("status").conditions;
    for want in ["RuntimeReady", "NetworkReady"] {
        let c = conds
            .iter()
            .find(|c| c.r#type == want)
            .unwrap_or_else(|| panic!("{want} missing in {conds:?}"));
        assert!(c.status, "{want} not true: {c:?}");
    }

    // Pull from the local registry and read the image back.
    let image = tb.busybox_image.clone();
    let pulled = rt
        .image
        .pull_image(cri::PullImageRequest {
            image: Some(cri::ImageSpec {
                image: image.clone(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("PullImage")
        .into_inner();
    assert!(!pulled.image_ref.is_empty());
    let status = rt
        .image
        .image_status(cri::ImageStatusRequest {
            image: Some(cri::ImageSpec {
                image: image.clone(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .expect("ImageStatus")
        .into_inner()
        .image
        .expect("image present after pull");
    assert!(
        status.repo_tags.contains(&image),
        "tags {:?} lack {image}",
        status.repo_tags
    );

    // Sandbox.
    let logs = tempfile::tempdir().expect("tempdir");
    let sconfig = sandbox_config("lifecycle", logs.path());
    let sandbox_id = rt
        .runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(sconfig.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id;
    let mut cleanup = vec![sandbox_id.clone()];
    let result = async {
        let sst = rt
            .runtime
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: sandbox_id.clone(),
                verbose: false,
            })
            .await
            .expect("PodSandboxStatus")
            .into_inner()
            .status
            .expect("sandbox status");
        assert_eq!(sst.metadata, sconfig.metadata);
        assert_eq!(sst.labels, sconfig.labels);
        assert_eq!(sst.annotations, sconfig.annotations);
        assert_eq!(sst.state, cri::PodSandboxState::SandboxReady as i32);
        let ip = sst.network.map(|n| n.ip).unwrap_or_default();
        assert!(!ip.is_empty(), "pod network has an IP");

        // Container.
        let cconfig = busybox_container("hello", &image, "echo hi; sleep 3600");
        let cid = rt
            .runtime
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.clone(),
                config: Some(cconfig.clone()),
                sandbox_config: Some(sconfig.clone()),
            })
            .await
            .expect("CreateContainer")
            .into_inner()
            .container_id;
        rt.runtime
            .start_container(cri::StartContainerRequest {
                container_id: cid.clone(),
            })
            .await
            .expect("StartContainer");
        let cst = rt
            .runtime
            .container_status(cri::ContainerStatusRequest {
                container_id: cid.clone(),
                verbose: false,
            })
            .await
            .expect("ContainerStatus")
            .into_inner()
            .status
            .expect("container status");
        assert_eq!(cst.state, cri::ContainerState::ContainerRunning as i32);
        assert_eq!(cst.metadata, cconfig.metadata);
        assert_eq!(cst.labels, cconfig.labels);
        assert_eq!(cst.annotations, cconfig.annotations);
        assert_eq!(
            cst.log_path,
            format!("{}/{}", sconfig.log_directory, cconfig.log_path)
        );
        assert!(cst.started_at > 0 && cst.created_at > 0);

        // ListContainers with a label filter finds exactly this one.
        let listed = rt
            .runtime
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter {
                    label_selector: [("container".to_string(), "hello".to_string())].into(),
                    pod_sandbox_id: sandbox_id.clone(),
                    ..Default::default()
                }),
            })
            .await
            .expect("ListContainers")
            .into_inner()
            .containers;
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0].id, cid);
        assert_eq!(listed[0].pod_sandbox_id, sandbox_id);
        assert_eq!(listed[0].labels, cconfig.labels);

        // ExecSync.
        let ex = rt
            .runtime
            .exec_sync(cri::ExecSyncRequest {
                container_id: cid.clone(),
                cmd: vec![
                    "sh".into(),
                    "-c".into(),
                    "echo out; echo err >&2; exit 7".into(),
                ],
                timeout: 10,
            })
            .await
            .expect("ExecSync")
            .into_inner();
        assert_eq!(ex.stdout, b"out\n");
        assert_eq!(ex.stderr, b"err\n");
        assert_eq!(ex.exit_code, 7);

        // The log file holds the output in the CRI format.
        let mut content = String::new();
        for _ in 0..100 {
            content = std::fs::read_to_string(&cst.log_path).unwrap_or_default();
            if content.contains(" stdout F hi") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let line = content.lines().next().unwrap_or_default();
        let mut parts = line.splitn(4, ' ');
        let ts = parts.next().unwrap_or_default();
        assert!(
            chrono::DateTime::parse_from_rfc3339(ts).is_ok(),
            "timestamp of {line:?}"
        );
        assert_eq!(
            parts.collect::<Vec<_>>(),
            ["stdout", "F", "hi"],
            "log {content:?}"
        );

        // Stop and remove.
        rt.runtime
            .stop_container(cri::StopContainerRequest {
                container_id: cid.clone(),
                timeout: 1,
            })
            .await
            .expect("StopContainer");
        let cst = rt
            .runtime
            .container_status(cri::ContainerStatusRequest {
                container_id: cid.clone(),
                verbose: false,
            })
            .await
            .expect("ContainerStatus")
            .into_inner()
            .status
            .expect("status");
        assert_eq!(cst.state, cri::ContainerState::ContainerExited as i32);
        assert!(cst.finished_at >= cst.started_at);
        rt.runtime
            .remove_container(cri::RemoveContainerRequest {
                container_id: cid.clone(),
            })
            .await
            .expect("RemoveContainer");
        let err = rt
            .runtime
            .container_status(cri::ContainerStatusRequest {
                container_id: cid.clone(),
                verbose: false,
            })
            .await
            .expect_err("status of a removed container");
        assert_eq!(err.code(), tonic::Code::NotFound);
        rt.runtime
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: sandbox_id.clone(),
            })
            .await
            .expect("StopPodSandbox");
        rt.runtime
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: sandbox_id.clone(),
            })
            .await
            .expect("RemovePodSandbox");
        let left = rt
            .runtime
            .list_pod_sandbox(cri::ListPodSandboxRequest {
                filter: Some(cri::PodSandboxFilter {
                    id: sandbox_id.clone(),
                    ..Default::default()
                }),
            })
            .await
            .expect("ListPodSandbox")
            .into_inner()
            .items;
        assert!(left.is_empty(), "sandbox still listed: {left:?}");
    };
    let outcome = tokio::time::timeout(Duration::from_secs(120), result).await;
    if outcome.is_err() {
        cleanup_sandboxes(&mut rt.runtime, &cleanup).await;
        panic!("lifecycle timed out");
    }
    cleanup.clear();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_lifecycle() {
    lifecycle(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_lifecycle() {
    lifecycle(RuntimeKind::Dockershim).await;
}
