//! dockershim on real Docker: state survives a dockershim restart (sandboxes, containers, their
//! logs), and sandbox checkpoints let Stop/RemovePodSandbox finish after the pause container
//! vanished behind dockershim's back.

use crate::dockershim_support;

use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use dockershim_support::{docker, with_dockershim};
use integration::fixtures::busybox_container;

/// Whether host-local IPAM holds an address for `id` on the dockershim network.
fn ip_reserved_for(id: &str) -> bool {
    let dir = "/var/lib/cni/networks/cri-testbed-dockershim";
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten().any(|e| {
                std::fs::read_to_string(e.path())
                    .map(|c| c.lines().next() == Some(id))
                    .unwrap_or(false)
            })
        })
        .unwrap_or(false)
}

fn last_tick(log: &str) -> u64 {
    log.lines()
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .next_back()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_state_survives_restart() {
    with_dockershim(
        "dockershim_restart",
        Duration::from_secs(180),
        |mut ctx| async move {
            let sconfig = ctx.sandbox_config("restart");
            let sid = ctx.run_sandbox(&sconfig).await;
            let script = "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done";
            let cid = ctx
                .run_container(
                    &sid,
                    &sconfig,
                    &busybox_container("ticker", &ctx.tb.busybox_image.clone(), script),
                )
                .await;
            let before = ctx.sandbox_status(&sid).await;
            let log_path = ctx.status(&cid).await.log_path;
            ctx.wait_file(&log_path, |c| last_tick(c) >= 2).await;

            ctx.restart_dockershim().await;
            let after_restart = last_tick(&std::fs::read_to_string(&log_path).unwrap());

            let sandboxes = ctx
                .rt
                .list_pod_sandbox(cri::ListPodSandboxRequest {
                    filter: Some(cri::PodSandboxFilter {
                        id: sid.clone(),
                        ..Default::default()
                    }),
                })
                .await
                .expect("ListPodSandbox")
                .into_inner()
                .items;
            assert_eq!(sandboxes.len(), 1, "{sandboxes:?}");
            assert_eq!(
                sandboxes[0].state,
                cri::PodSandboxState::SandboxReady as i32
            );
            assert_eq!(sandboxes[0].metadata, sconfig.metadata);
            let containers = ctx
                .rt
                .list_containers(cri::ListContainersRequest {
                    filter: Some(cri::ContainerFilter {
                        pod_sandbox_id: sid.clone(),
                        ..Default::default()
                    }),
                })
                .await
                .expect("ListContainers")
                .into_inner()
                .containers;
            assert_eq!(containers.len(), 1, "{containers:?}");
            assert_eq!(containers[0].id, cid);
            assert_eq!(
                containers[0].state,
                cri::ContainerState::ContainerRunning as i32
            );
            let after = ctx.sandbox_status(&sid).await;
            assert_eq!(
                after.network, before.network,
                "pod IP changed over the restart"
            );
            assert_eq!(after.created_at, before.created_at);

            // The log keeps being written by the restarted dockershim.
            ctx.wait_file(&log_path, |c| last_tick(c) >= after_restart + 5)
                .await;
            // Reopen still works on the reattached log.
            ctx.rt
                .reopen_container_log(cri::ReopenContainerLogRequest {
                    container_id: cid.clone(),
                })
                .await
                .expect("ReopenContainerLog after restart");

            ctx.rt
                .stop_container(cri::StopContainerRequest {
                    container_id: cid.clone(),
                    timeout: 0,
                })
                .await
                .expect("StopContainer");
            assert_eq!(
                ctx.status(&cid).await.state,
                cri::ContainerState::ContainerExited as i32
            );
            ctx.stop_remove_sandbox(&sid).await;
            let e = ctx
                .rt
                .container_status(cri::ContainerStatusRequest {
                    container_id: cid.clone(),
                    verbose: false,
                })
                .await
                .expect_err("container removed with its sandbox");
            assert_eq!(e.code(), tonic::Code::NotFound);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_checkpoint_outlives_pause_container() {
    with_dockershim(
        "dockershim_checkpoint",
        Duration::from_secs(120),
        |mut ctx| async move {
            let root = ctx.root_directory().await;
            let mut sconfig = ctx.sandbox_config("ckpt");
            sconfig.port_mappings = vec![cri::PortMapping {
                protocol: cri::Protocol::Tcp as i32,
                container_port: 80,
                host_port: 0,
                host_ip: String::new(),
            }];
            let sid = ctx.run_sandbox(&sconfig).await;
            let path = root.join("sandbox").join(&sid);
            let cp: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("checkpoint {} missing: {e}", path.display())),
            )
            .expect("checkpoint json");
            let meta = sconfig.metadata.clone().unwrap();
            assert_eq!(cp["name"], meta.name.as_str(), "{cp}");
            assert_eq!(cp["namespace"], meta.namespace.as_str(), "{cp}");
            assert_eq!(cp["data"]["port_mappings"][0]["container_port"], 80, "{cp}");
            assert!(cp["checksum"].as_u64().is_some(), "{cp}");

            assert!(ip_reserved_for(&sid), "no host-local reservation for {sid}");

            // The pause container disappears behind dockershim's back.
            docker(&ctx.tb)
                .remove_container(
                    &sid,
                    Some(bollard::query_parameters::RemoveContainerOptions {
                        force: true,
                        ..Default::default()
                    }),
                )
                .await
                .expect("docker rm -f");
            ctx.rt
                .stop_pod_sandbox(cri::StopPodSandboxRequest {
                    pod_sandbox_id: sid.clone(),
                })
                .await
                .expect("StopPodSandbox without its pause container");
            assert!(path.exists(), "checkpoint must survive Stop");
            // The network was torn down from the checkpoint: the pod IP is released.
            assert!(!ip_reserved_for(&sid), "pod IP of {sid} still reserved");
            ctx.rt
                .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                    pod_sandbox_id: sid.clone(),
                })
                .await
                .expect("RemovePodSandbox without its pause container");
            assert!(!path.exists(), "checkpoint left behind: {}", path.display());
            let left = ctx
                .rt
                .list_pod_sandbox(cri::ListPodSandboxRequest {
                    filter: Some(cri::PodSandboxFilter {
                        id: sid.clone(),
                        ..Default::default()
                    }),
                })
                .await
                .expect("ListPodSandbox")
                .into_inner()
                .items;
            assert!(left.is_empty(), "{left:?}");
        },
    )
    .await;
}

/// The status line of a GET of `path` on an open connection to Docker (HTTP/1.1 keep-alive).
fn http_get(conn: &mut std::os::unix::net::UnixStream, path: &str) -> String {
    use std::io::{Read, Write};
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(conn, "GET {path} HTTP/1.1\r\nHost: docker\r\n\r\n").expect("write");
    let mut buf = [0u8; 4096];
    let n = conn.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// A stopping dockerd closes its socket at once but goes on serving the connections it has
/// until its containers are stopped (seconds; it still creates containers there). dockershim
/// keeps connections to Docker between calls; from the moment the socket is gone it must ask
/// the stopping Engine nothing more on them: CRI calls answer Unavailable, as with no Engine,
/// and reach the new Engine once it listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_asks_a_stopping_dockerd_nothing() {
    let tb = integration::require_testbed!("dockershim_asks_a_stopping_dockerd_nothing");
    let dir = tempfile::Builder::new()
        .prefix("ds-stopping-")
        .tempdir()
        .expect("tempdir");
    let mut dockerd =
        integration::dockerd::PrivateDockerd::start(dir.path(), false).expect("private dockerd");
    dockerd
        .copy_images(&tb.docker_endpoint, &[tb.busybox_image.as_str()])
        .expect("images");
    // A container that ignores SIGTERM: dockerd waits out its stop timeout before exiting.
    let run = dockerd
        .docker(&[
            "run",
            "-d",
            "--network",
            "none",
            "--stop-timeout",
            "8",
            &tb.busybox_image,
            "sleep",
            "3600",
        ])
        .expect("docker run");
    assert!(run.status.success(), "docker run: {run:?}");
    let shim = integration::runtimes::InProcessShim::start_on(&tb, &dockerd.endpoint)
        .await
        .expect("dockershim on the private dockerd");
    let (_, mut images) = integration::runtimes::clients(&shim.config.endpoint)
        .await
        .expect("clients");
    // ListImages asks Docker every time (ImageStatus may be answered from dockershim's image
    // cache while the event stream lasts, and a stopping dockerd keeps that stream too).
    let list = || cri::ListImagesRequest { filter: None };
    let has_busybox =
        |imgs: &[cri::Image]| imgs.iter().any(|i| i.repo_tags.contains(&tb.busybox_image));
    for _ in 0..3 {
        let l = images.list_images(list()).await.expect("list images");
        assert!(has_busybox(&l.into_inner().images), "busybox is there");
    }

    let socket = dir.path().join("docker.sock");
    let mut kept = std::os::unix::net::UnixStream::connect(&socket).expect("connect");
    assert_eq!(http_get(&mut kept, "/_ping"), "HTTP/1.1 200 OK");

    dockerd.terminate();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while socket.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!socket.exists(), "the stopping dockerd removed its socket");
    // The hazard is real: the stopping dockerd still answers on a connection it had.
    assert_eq!(
        http_get(&mut kept, "/containers/json"),
        "HTTP/1.1 200 OK",
        "a stopping dockerd serves the connections it has"
    );
    for _ in 0..3 {
        let e = images
            .list_images(list())
            .await
            .expect_err("the stopping Engine is not asked on a kept connection");
        assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    }

    dockerd.restart().expect("a new dockerd");
    let after = images
        .list_images(list())
        .await
        .expect("the new Engine answers")
        .into_inner();
    assert!(has_busybox(&after.images), "busybox is still there");
    drop(shim);
    drop(dockerd);
}
