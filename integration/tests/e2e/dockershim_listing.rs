//! dockershim on real Docker: ListContainers / ListPodSandbox are served from a cache that
//! Docker's events keep honest. A client lists what it just did; a container that exits on its
//! own, or is removed behind dockershim's back, shows so in the next listings; id prefixes and
//! sandbox filters select the same containers as before the cache; concurrent listings right
//! after a change (which share one Docker listing) all show the change.

use crate::dockershim_support;

use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use dockershim_support::{docker, with_dockershim};
use integration::fixtures::busybox_container;

async fn listed(
    rt: &mut cri_proto::runtime::v1::runtime_service_client::RuntimeServiceClient<
        tonic::transport::Channel,
    >,
    filter: cri::ContainerFilter,
) -> Vec<cri::Container> {
    rt.list_containers(cri::ListContainersRequest {
        filter: Some(filter),
    })
    .await
    .expect("ListContainers")
    .into_inner()
    .containers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_listing_follows_every_change() {
    with_dockershim(
        "dockershim_listing",
        Duration::from_secs(120),
        |mut ctx| async move {
            let sconfig = ctx.sandbox_config("listing");
            let sid = ctx.run_sandbox(&sconfig).await;
            let by_sandbox = cri::ContainerFilter {
                pod_sandbox_id: sid.clone(),
                ..Default::default()
            };
            let image = ctx.tb.busybox_image.clone();

            // Read-your-writes: created, then running, straight after each call.
            let cid = ctx
                .create(
                    &sid,
                    &sconfig,
                    &busybox_container("exits", &image, "sleep 2; exit 4"),
                )
                .await
                .expect("CreateContainer");
            let l = listed(&mut ctx.rt, by_sandbox.clone()).await;
            assert_eq!(l.len(), 1, "{l:?}");
            assert_eq!(l[0].state, cri::ContainerState::ContainerCreated as i32);
            ctx.start(&cid).await.expect("StartContainer");
            let l = listed(&mut ctx.rt, by_sandbox.clone()).await;
            assert_eq!(l[0].state, cri::ContainerState::ContainerRunning as i32);
            // Asked again with nothing changed: the same answer.
            assert_eq!(listed(&mut ctx.rt, by_sandbox.clone()).await, l);

            // Eight clients list at once right after a change: the callers that share the first
            // one's Docker listing must all see the change too.
            let burst = ctx
                .create(
                    &sid,
                    &sconfig,
                    &busybox_container("burst", &image, "sleep 60"),
                )
                .await
                .expect("CreateContainer burst");
            let by_id = cri::ContainerFilter {
                id: burst.clone(),
                ..Default::default()
            };
            for (step, want) in [
                ("created", cri::ContainerState::ContainerCreated),
                ("started", cri::ContainerState::ContainerRunning),
            ] {
                if step == "started" {
                    ctx.start(&burst).await.expect("StartContainer burst");
                }
                let lists = futures::future::join_all((0..8).map(|_| {
                    let mut rt = ctx.rt.clone();
                    let f = by_id.clone();
                    async move { listed(&mut rt, f).await }
                }))
                .await;
                for l in lists {
                    assert_eq!(l.len(), 1, "{step}: {l:?}");
                    assert_eq!(l[0].state, want as i32, "{step}: {l:?}");
                }
            }
            ctx.rt
                .remove_container(cri::RemoveContainerRequest {
                    container_id: burst.clone(),
                })
                .await
                .expect("RemoveContainer burst");
            assert!(listed(&mut ctx.rt, by_id).await.is_empty());

            // A prefix of the id selects it; a prefix of another does not.
            let prefix = cri::ContainerFilter {
                id: cid[..12].to_string(),
                ..Default::default()
            };
            let l = listed(&mut ctx.rt, prefix).await;
            assert_eq!(
                l.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
                [cid.as_str()]
            );

            // The container exits on its own: the listing follows (through Docker's events).
            let mut state = 0;
            for _ in 0..100 {
                let l = listed(&mut ctx.rt, by_sandbox.clone()).await;
                state = l[0].state;
                if state == cri::ContainerState::ContainerExited as i32 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert_eq!(state, cri::ContainerState::ContainerExited as i32);

            // Removed behind dockershim's back: gone from the listing.
            docker(&ctx.tb)
                .remove_container(
                    &cid,
                    Some(bollard::query_parameters::RemoveContainerOptions {
                        force: true,
                        ..Default::default()
                    }),
                )
                .await
                .expect("docker rm");
            let mut left = usize::MAX;
            for _ in 0..100 {
                left = listed(&mut ctx.rt, by_sandbox.clone()).await.len();
                if left == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert_eq!(left, 0, "removed container still listed");

            // The sandbox listing follows a stop straight away.
            ctx.rt
                .stop_pod_sandbox(cri::StopPodSandboxRequest {
                    pod_sandbox_id: sid.clone(),
                })
                .await
                .expect("StopPodSandbox");
            let sb = ctx
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
            assert_eq!(sb.len(), 1, "{sb:?}");
            assert_eq!(sb[0].state, cri::PodSandboxState::SandboxNotready as i32);
            ctx.stop_remove_sandbox(&sid).await;
        },
    )
    .await;
}
