//! ListContainers, ListPodSandbox and ContainerStatus on the fake Engine: every filter, the
//! Docker -> CRI state and reason mapping, image references, mounts and resources read back,
//! GetContainerEvents, and Docker's errors as gRPC codes.

use std::collections::HashMap;
use std::time::Duration;

use cri_proto::RuntimeService;
use cri_proto::runtime::v1 as cri;
use futures::StreamExt;
use tonic::{Code, Request};

use super::{BUSYBOX, Fixture, code_of};
use crate::docker::DockerError;
use crate::docker::fake::FakeImage;

async fn containers(fx: &Fixture, filter: cri::ContainerFilter) -> Vec<cri::Container> {
    let mut list = fx
        .svc
        .list_containers(Request::new(cri::ListContainersRequest {
            filter: Some(filter),
        }))
        .await
        .expect("ListContainers")
        .into_inner()
        .containers;
    list.sort_by_key(|c| c.metadata.as_ref().map(|m| m.name.clone()));
    list
}

fn names(list: &[cri::Container]) -> Vec<String> {
    list.iter()
        .filter_map(|c| c.metadata.as_ref().map(|m| m.name.clone()))
        .collect()
}

async fn sandboxes(fx: &Fixture, filter: cri::PodSandboxFilter) -> Vec<String> {
    let mut list: Vec<String> = fx
        .svc
        .list_pod_sandbox(Request::new(cri::ListPodSandboxRequest {
            filter: Some(filter),
        }))
        .await
        .expect("ListPodSandbox")
        .into_inner()
        .items
        .into_iter()
        .filter_map(|s| s.metadata.map(|m| m.name))
        .collect();
    list.sort();
    list
}

async fn status(fx: &Fixture, id: &str) -> Result<cri::ContainerStatusResponse, tonic::Status> {
    fx.svc
        .container_status(Request::new(cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: true,
        }))
        .await
        .map(|r| r.into_inner())
}

fn selector(k: &str, v: &str) -> HashMap<String, String> {
    HashMap::from([(k.to_string(), v.to_string())])
}

#[tokio::test]
async fn list_containers_applies_every_filter_and_never_lists_sandboxes() {
    let fx = Fixture::new().await;
    let (pod_a, a1) = fx.pod_with_container("a", "a1").await;
    let sandbox_a = fx.sandbox_config("a");
    let a2 = fx
        .create_container(&pod_a, &sandbox_a, fx.container_config("a2"))
        .await
        .expect("created, not started");
    let (pod_b, _b1) = fx.pod_with_container("b", "b1").await;

    let all = containers(&fx, Default::default()).await;
    assert_eq!(names(&all), ["a1", "a2", "b1"]);
    let c = &all[0];
    assert_eq!(c.id, a1);
    assert_eq!(c.pod_sandbox_id, pod_a);
    assert_eq!(c.state, cri::ContainerState::ContainerRunning as i32);
    assert_eq!(c.image.as_ref().map(|i| i.image.as_str()), Some(BUSYBOX));
    let image_id = fx.docker.images()[1].id.clone();
    assert_eq!(c.image_ref, image_id);
    let config = fx.container_config("a1");
    assert_eq!(c.labels, config.labels, "labels round-trip exactly");
    assert_eq!(c.annotations, config.annotations);
    let created = fx.docker.container(&a1).expect("a1").created;
    assert_eq!(c.created_at, (1_704_067_200 + created) * 1_000_000_000);

    let by_prefix = cri::ContainerFilter {
        id: a2[..10].to_string(),
        ..Default::default()
    };
    assert_eq!(names(&containers(&fx, by_prefix).await), ["a2"]);
    let by_pod = cri::ContainerFilter {
        pod_sandbox_id: pod_b.clone(),
        ..Default::default()
    };
    assert_eq!(names(&containers(&fx, by_pod).await), ["b1"]);
    let state = |s: cri::ContainerState| cri::ContainerFilter {
        state: Some(cri::ContainerStateValue { state: s as i32 }),
        ..Default::default()
    };
    assert_eq!(
        names(&containers(&fx, state(cri::ContainerState::ContainerRunning)).await),
        ["a1", "b1"]
    );
    assert_eq!(
        names(&containers(&fx, state(cri::ContainerState::ContainerCreated)).await),
        ["a2"]
    );
    let by_label = cri::ContainerFilter {
        label_selector: selector("tier", "b1"),
        ..Default::default()
    };
    assert_eq!(names(&containers(&fx, by_label).await), ["b1"]);
    let no_match = cri::ContainerFilter {
        pod_sandbox_id: pod_a,
        label_selector: selector("tier", "b1"),
        ..Default::default()
    };
    assert!(
        containers(&fx, no_match).await.is_empty(),
        "filters combine"
    );

    fx.docker.exit(&a1, 1, false);
    fx.engine_changed();
    assert_eq!(
        names(&containers(&fx, state(cri::ContainerState::ContainerExited)).await),
        ["a1"]
    );
}

#[tokio::test]
async fn list_pod_sandbox_applies_every_filter() {
    let fx = Fixture::new().await;
    let ready = fx.run_sandbox(fx.sandbox_config("ready")).await;
    let stopped = fx.run_sandbox(fx.sandbox_config("stopped")).await;
    fx.svc
        .stop_pod_sandbox(Request::new(cri::StopPodSandboxRequest {
            pod_sandbox_id: stopped.clone(),
        }))
        .await
        .expect("stop");
    fx.pod_with_container("withapp", "app").await;

    assert_eq!(
        sandboxes(&fx, Default::default()).await,
        ["ready", "stopped", "withapp"],
        "containers are not sandboxes"
    );
    let by_id = cri::PodSandboxFilter {
        id: ready[..8].to_string(),
        ..Default::default()
    };
    assert_eq!(sandboxes(&fx, by_id).await, ["ready"]);
    let state = |s: cri::PodSandboxState| cri::PodSandboxFilter {
        state: Some(cri::PodSandboxStateValue { state: s as i32 }),
        ..Default::default()
    };
    assert_eq!(
        sandboxes(&fx, state(cri::PodSandboxState::SandboxNotready)).await,
        ["stopped"]
    );
    assert_eq!(
        sandboxes(&fx, state(cri::PodSandboxState::SandboxReady)).await,
        ["ready", "withapp"]
    );
    let by_label = cri::PodSandboxFilter {
        label_selector: selector("app", "withapp"),
        ..Default::default()
    };
    assert_eq!(sandboxes(&fx, by_label).await, ["withapp"]);
}

/// A listing by label while the listing cache is stale asks Docker for the labelled
/// containers only (as cri-dockerd does), not for every one of ours; the CRI filters still
/// apply to what Docker answers. Without a label it is one full listing, kept for the next.
#[tokio::test]
async fn listings_by_label_ask_docker_for_the_labelled_containers_only() {
    let fx = Fixture::new().await;
    fx.pod_with_container("a", "web").await;
    fx.pod_with_container("b", "db").await;
    let lists = || fx.docker.calls_to("list");

    fx.engine_changed();
    let before = lists().len();
    assert_eq!(
        sandboxes(
            &fx,
            cri::PodSandboxFilter {
                label_selector: selector("app", "b"),
                ..Default::default()
            }
        )
        .await,
        ["b"]
    );
    let by_tier = cri::ContainerFilter {
        label_selector: selector("tier", "web"),
        ..Default::default()
    };
    assert_eq!(names(&containers(&fx, by_tier).await), ["web"]);
    assert_eq!(
        lists()[before..],
        [
            "list label=io.kubernetes.docker.type|app=b",
            "list label=io.kubernetes.docker.type|tier=web"
        ]
    );

    // A full listing is kept: a labelled listing after it asks Docker nothing (once the
    // event pump has caught up with the pods' events, which make the listing stale).
    let by_tier = cri::ContainerFilter {
        label_selector: selector("tier", "db"),
        ..Default::default()
    };
    let mut from_cache = false;
    for _ in 0..200 {
        assert_eq!(
            names(&containers(&fx, Default::default()).await),
            ["db", "web"]
        );
        let before = lists().len();
        assert_eq!(names(&containers(&fx, by_tier.clone()).await), ["db"]);
        if lists().len() == before {
            from_cache = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(from_cache, "never answered from the cached listing");

    // A key Docker's `key=value` syntax cannot carry is filtered here only.
    fx.engine_changed();
    let odd = cri::ContainerFilter {
        label_selector: selector("a=b", "c"),
        ..Default::default()
    };
    assert!(containers(&fx, odd).await.is_empty());
    assert_eq!(
        lists().last().map(String::as_str),
        Some("list label=io.kubernetes.docker.type")
    );
}

#[tokio::test]
async fn container_status_maps_docker_states_and_exit_reasons() {
    let fx = Fixture::new().await;
    let sandbox = fx.sandbox_config("p");
    let sandbox_id = fx.run_sandbox(sandbox.clone()).await;
    let mut ids = Vec::new();
    for name in ["created", "running", "completed", "failed", "oom"] {
        let id = fx
            .create_container(&sandbox_id, &sandbox, fx.container_config(name))
            .await
            .expect("CreateContainer");
        if name != "created" {
            fx.start_container(&id).await.expect("StartContainer");
        }
        ids.push(id);
    }
    fx.docker.exit(&ids[2], 0, false);
    fx.docker.exit(&ids[3], 2, false);
    fx.docker.exit(&ids[4], 137, true);
    let mut got = Vec::new();
    for id in &ids {
        let st = status(&fx, id)
            .await
            .expect("status")
            .status
            .expect("status");
        got.push((
            cri::ContainerState::try_from(st.state).expect("a state"),
            st.reason,
            st.exit_code,
            st.started_at > 0,
            st.finished_at > 0,
        ));
    }
    use cri::ContainerState::*;
    assert_eq!(
        got,
        vec![
            (ContainerCreated, String::new(), 0, false, false),
            (ContainerRunning, String::new(), 0, true, false),
            (ContainerExited, "Completed".into(), 0, true, true),
            (ContainerExited, "Error".into(), 2, true, true),
            (ContainerExited, "OOMKilled".into(), 137, true, true),
        ]
    );
    let err = status(&fx, &sandbox_id).await.expect_err("a sandbox");
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(code_of(status(&fx, "").await), Code::InvalidArgument);
}

#[tokio::test]
async fn container_status_reads_back_metadata_image_mounts_and_resources() {
    let fx = Fixture::new().await;
    fx.docker.add_image_with(FakeImage {
        id: format!("sha256:{}", "d".repeat(64)),
        tags: vec!["registry.example/app:1".into()],
        digests: vec![format!("registry.example/app@sha256:{}", "e".repeat(64))],
        ..Default::default()
    });
    let sandbox = fx.sandbox_config("p");
    let sandbox_id = fx.run_sandbox(sandbox.clone()).await;
    let host = fx.dir.path().join("host");
    std::fs::create_dir(&host).expect("host dir");
    let mut config = fx.container_config("c");
    config.image = Some(cri::ImageSpec {
        image: "registry.example/app:1".into(),
        ..Default::default()
    });
    config.mounts = vec![cri::Mount {
        container_path: "/ro".into(),
        host_path: host.to_string_lossy().into_owned(),
        readonly: true,
        propagation: cri::MountPropagation::PropagationBidirectional as i32,
        ..Default::default()
    }];
    config.linux = Some(cri::LinuxContainerConfig {
        resources: Some(cri::LinuxContainerResources {
            cpu_shares: 2,
            memory_limit_in_bytes: 1 << 30,
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = fx
        .create_container(&sandbox_id, &sandbox, config.clone())
        .await
        .expect("CreateContainer");
    let resp = status(&fx, &id).await.expect("status");
    let st = resp.status.expect("status");
    assert_eq!(st.id, id);
    assert_eq!(st.metadata, config.metadata);
    assert_eq!(st.labels, config.labels);
    assert_eq!(st.annotations, config.annotations);
    assert_eq!(
        st.image.map(|i| i.image),
        Some("registry.example/app:1".to_string())
    );
    assert_eq!(st.image_id, format!("sha256:{}", "d".repeat(64)));
    assert_eq!(
        st.image_ref,
        format!(
            "docker-pullable://registry.example/app@sha256:{}",
            "e".repeat(64)
        )
    );
    assert_eq!(
        st.log_path,
        fx.dir.path().join("pods/p/c/0.log").to_string_lossy()
    );
    let real = std::fs::canonicalize(&host).expect("canonical");
    assert_eq!(
        st.mounts,
        vec![cri::Mount {
            container_path: "/ro".into(),
            host_path: real.to_string_lossy().into_owned(),
            readonly: true,
            propagation: cri::MountPropagation::PropagationBidirectional as i32,
            ..Default::default()
        }]
    );
    let r = st.resources.and_then(|r| r.linux).expect("resources");
    assert_eq!((r.cpu_shares, r.memory_limit_in_bytes), (2, 1 << 30));
    let info: serde_json::Value = serde_json::from_str(&resp.info["info"]).expect("JSON");
    assert_eq!(info["sandboxID"], sandbox_id.as_str());

    let (_, plain) = fx.pod_with_container("q", "plain").await;
    let st = status(&fx, &plain)
        .await
        .expect("status")
        .status
        .expect("s");
    assert_eq!(
        st.image_ref,
        format!("docker://{}", fx.docker.images()[1].id),
        "no repo digest: the image id"
    );
}

#[tokio::test]
async fn container_events_carry_the_pod_and_container_statuses() {
    let fx = Fixture::new().await;
    let mut events = fx
        .svc
        .get_container_events(Request::new(cri::GetEventsRequest {}))
        .await
        .expect("GetContainerEvents")
        .into_inner();
    let (sandbox_id, id) = fx.pod_with_container("ev", "app").await;
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let ev = tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("an event within 5s")
            .expect("stream open")
            .expect("event");
        seen.push((
            ev.container_id.clone(),
            cri::ContainerEventType::try_from(ev.container_event_type).expect("type"),
        ));
        if ev.container_id == id
            && ev.container_event_type == cri::ContainerEventType::ContainerStartedEvent as i32
        {
            let pod = ev.pod_sandbox_status.expect("the pod's status");
            assert_eq!(pod.id, sandbox_id);
            let statuses: Vec<_> = ev.containers_statuses.iter().map(|s| &s.id).collect();
            assert_eq!(statuses, [&id]);
            assert_eq!(
                ev.containers_statuses[0].state,
                cri::ContainerState::ContainerRunning as i32
            );
        }
    }
    use cri::ContainerEventType::*;
    assert_eq!(
        seen,
        vec![
            (sandbox_id.clone(), ContainerCreatedEvent),
            (sandbox_id, ContainerStartedEvent),
            (id.clone(), ContainerCreatedEvent),
            (id, ContainerStartedEvent),
        ]
    );
}

#[tokio::test]
async fn docker_errors_become_the_matching_grpc_codes() {
    let fx = Fixture::new().await;
    let (_, id) = fx.pod_with_container("p", "c").await;

    fx.engine_changed();
    fx.docker
        .fail_next("list", DockerError::Connection("connection refused".into()));
    let err = fx
        .svc
        .list_containers(Request::new(cri::ListContainersRequest::default()))
        .await
        .expect_err("Docker is down");
    assert_eq!(err.code(), Code::Unavailable);
    assert!(
        err.message().contains("connection refused"),
        "{}",
        err.message()
    );

    fx.docker.fail_next(
        "stop",
        DockerError::Conflict {
            message: "container is paused".into(),
        },
    );
    let r = fx
        .svc
        .stop_container(Request::new(cri::StopContainerRequest {
            container_id: id.clone(),
            timeout: 1,
        }))
        .await;
    assert_eq!(code_of(r), Code::FailedPrecondition);

    fx.docker.fail_next(
        "inspect",
        DockerError::Server {
            status: 500,
            message: "boom".into(),
        },
    );
    let err = status(&fx, &id).await.expect_err("a 500");
    assert_eq!(err.code(), Code::Unknown);
    assert!(err.message().contains("boom"), "{}", err.message());

    fx.docker.fail_next(
        "update",
        DockerError::BadRequest {
            message: "Minimum memory limit allowed is 6MB".into(),
        },
    );
    let r = fx
        .svc
        .update_container_resources(Request::new(cri::UpdateContainerResourcesRequest {
            container_id: id.clone(),
            linux: Some(cri::LinuxContainerResources {
                memory_limit_in_bytes: 1,
                ..Default::default()
            }),
            ..Default::default()
        }))
        .await;
    assert_eq!(code_of(r), Code::InvalidArgument);

    fx.docker
        .fail_next("start", DockerError::Timeout(Duration::from_secs(2)));
    let sandbox = fx.sandbox_config("p");
    let sandbox_id = fx.shim.list_pod_sandbox(None).await.expect("list")[0]
        .id
        .clone();
    let other = fx
        .create_container(&sandbox_id, &sandbox, fx.container_config("other"))
        .await
        .expect("create");
    assert_eq!(
        code_of(fx.start_container(&other).await),
        Code::DeadlineExceeded
    );

    // Docker answering NotFound while we remove it: somebody else won, which is success.
    fx.docker.fail_next(
        "remove",
        DockerError::NotFound {
            message: format!("No such container: {id}"),
        },
    );
    fx.svc
        .remove_container(Request::new(cri::RemoveContainerRequest {
            container_id: id,
        }))
        .await
        .expect("removing what vanished meanwhile");
}
