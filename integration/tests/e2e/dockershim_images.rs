//! dockershim on real Docker: image pulls from the test bed's registries (anonymous and with
//! credentials), ListImages filters, RemoveImage by tag and by id. Never removes the shared
//! busybox:latest or pause images: the tag test uses `busybox:1.36`, the id test a private
//! image committed for it.

use crate::dockershim_support;

use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use dockershim_support::{docker, with_dockershim};
use integration::fixtures::unique_name;

fn spec(image: &str) -> Option<cri::ImageSpec> {
    Some(cri::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    })
}

async fn status(
    img: &mut cri_proto::runtime::v1::image_service_client::ImageServiceClient<
        tonic::transport::Channel,
    >,
    image: &str,
) -> Option<cri::Image> {
    img.image_status(cri::ImageStatusRequest {
        image: spec(image),
        verbose: false,
    })
    .await
    .expect("ImageStatus")
    .into_inner()
    .image
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_pull_list_remove_by_tag() {
    with_dockershim(
        "dockershim_images_tag",
        Duration::from_secs(180),
        |mut ctx| async move {
            let image = format!("{}/busybox:1.36", ctx.tb.registry);
            let image_ref = ctx
                .img
                .pull_image(cri::PullImageRequest {
                    image: spec(&image),
                    ..Default::default()
                })
                .await
                .expect("anonymous pull")
                .into_inner()
                .image_ref;
            let st = status(&mut ctx.img, &image).await.expect("pulled image");
            // As cri-dockerd: the repo digest of what was pulled.
            assert_eq!(st.repo_digests.first(), Some(&image_ref), "{st:?}");
            assert!(st.repo_tags.contains(&image), "{st:?}");
            assert!(st.size > 0);

            // ListImages filtered on the tag finds it (and only images carrying it).
            let listed = ctx
                .img
                .list_images(cri::ListImagesRequest {
                    filter: Some(cri::ImageFilter {
                        image: spec(&image),
                    }),
                })
                .await
                .expect("ListImages")
                .into_inner()
                .images;
            assert_eq!(listed.len(), 1, "{listed:?}");
            assert!(listed[0].repo_tags.contains(&image));
            let none = ctx
                .img
                .list_images(cri::ListImagesRequest {
                    filter: Some(cri::ImageFilter {
                        image: spec(&format!("{}/no-such-image:x", ctx.tb.registry)),
                    }),
                })
                .await
                .expect("ListImages")
                .into_inner()
                .images;
            assert!(none.is_empty(), "{none:?}");
            let all = ctx
                .img
                .list_images(cri::ListImagesRequest { filter: None })
                .await
                .expect("ListImages")
                .into_inner()
                .images;
            assert!(
                all.iter()
                    .any(|i| i.repo_tags.contains(&ctx.tb.pause_image))
            );

            // Remove by tag: the tag goes, the image (shared with busybox:latest) stays.
            ctx.img
                .remove_image(cri::RemoveImageRequest {
                    image: spec(&image),
                })
                .await
                .expect("RemoveImage by tag");
            assert!(
                status(&mut ctx.img, &image).await.is_none(),
                "tag still there"
            );
            assert!(
                status(&mut ctx.img, &ctx.tb.busybox_image.clone())
                    .await
                    .is_some(),
                "removing a tag removed busybox:latest"
            );
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_pull_with_credentials() {
    with_dockershim(
        "dockershim_images_auth",
        Duration::from_secs(180),
        |mut ctx| async move {
            let image = format!("{}/busybox:latest", ctx.tb.auth_registry);
            let e = ctx
                .img
                .pull_image(cri::PullImageRequest {
                    image: spec(&image),
                    ..Default::default()
                })
                .await
                .expect_err("pull from an htpasswd registry without credentials");
            let msg = e.message().to_lowercase();
            assert!(
                msg.contains("unauthorized")
                    || msg.contains("authentication required")
                    || msg.contains("no basic auth credentials"),
                "unclear error: {e:?}"
            );
            let e = ctx
                .img
                .pull_image(cri::PullImageRequest {
                    image: spec(&image),
                    auth: Some(cri::AuthConfig {
                        username: ctx.tb.auth_user.clone(),
                        password: "wrong-password".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .await
                .expect_err("pull with a wrong password");
            assert!(
                e.message().to_lowercase().contains("unauthorized"),
                "unclear error: {e:?}"
            );
            let image_ref = ctx
                .img
                .pull_image(cri::PullImageRequest {
                    image: spec(&image),
                    auth: Some(cri::AuthConfig {
                        username: ctx.tb.auth_user.clone(),
                        password: ctx.tb.auth_password.clone(),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .await
                .expect("pull with credentials")
                .into_inner()
                .image_ref;
            assert!(image_ref.contains("@sha256:"), "{image_ref}");
            let st = status(&mut ctx.img, &image)
                .await
                .expect("image after pull");
            assert!(st.repo_tags.contains(&image), "{st:?}");
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_remove_image_by_id() {
    with_dockershim(
        "dockershim_images_id",
        Duration::from_secs(120),
        |mut ctx| async move {
            // A private image with an id of its own: busybox committed with a unique label.
            let d = docker(&ctx.tb);
            let name = unique_name("cri-it-rmid");
            let tmp = d
                .create_container(
                    Some(bollard::query_parameters::CreateContainerOptions {
                        name: Some(name.clone()),
                        ..Default::default()
                    }),
                    bollard::models::ContainerCreateBody {
                        image: Some(ctx.tb.busybox_image.clone()),
                        cmd: Some(vec!["true".into()]),
                        ..Default::default()
                    },
                )
                .await
                .expect("create temp container");
            let committed = d
                .commit_container(
                    bollard::query_parameters::CommitContainerOptions {
                        container: Some(tmp.id.clone()),
                        repo: Some("cri-it/rmid".into()),
                        tag: Some(name.clone()),
                        changes: Some(format!("LABEL cri-it-unique={name}")),
                        ..Default::default()
                    },
                    bollard::models::ContainerConfig::default(),
                )
                .await;
            let _ = d.remove_container(&tmp.id, None).await;
            let id = committed.expect("commit").id;
            let tag = format!("cri-it/rmid:{name}");
            let second_tag = format!("cri-it/rmid2:{name}");
            d.tag_image(
                &id,
                Some(bollard::query_parameters::TagImageOptions {
                    repo: Some("cri-it/rmid2".into()),
                    tag: Some(name.clone()),
                }),
            )
            .await
            .expect("second tag");
            let st = status(&mut ctx.img, &tag).await.expect("committed image");
            assert_eq!(st.id, id);
            assert!(st.repo_tags.contains(&second_tag), "{st:?}");

            // By id: every tag goes with it.
            ctx.img
                .remove_image(cri::RemoveImageRequest { image: spec(&id) })
                .await
                .expect("RemoveImage by id");
            assert!(status(&mut ctx.img, &id).await.is_none());
            assert!(status(&mut ctx.img, &tag).await.is_none());
            assert!(status(&mut ctx.img, &second_tag).await.is_none());
            assert!(
                status(&mut ctx.img, &ctx.tb.busybox_image.clone())
                    .await
                    .is_some(),
                "busybox:latest went too"
            );
            // Idempotent.
            ctx.img
                .remove_image(cri::RemoveImageRequest { image: spec(&id) })
                .await
                .expect("RemoveImage of a removed id");
        },
    )
    .await;
}

/// ContainerStatus's repo digests on real Docker (issue 14): dockershim asks Docker for them
/// once; another image's pull and removal through CRI keep them (Docker's `pull` event names
/// a reference, which dockershim looks up, then forgets only that image; before, any image
/// event forgot them all and every ContainerStatus after a pull inspected the image again);
/// tagging the image itself, behind dockershim's back, makes it ask again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_container_status_keeps_its_image_digests_across_other_pulls() {
    use integration::fixtures::busybox_container;
    let name = "dockershim_container_status_keeps_its_image_digests_across_other_pulls";
    let tb = integration::require_testbed!(name);
    // dockershim talks to Docker through a tap, to see which inspects it makes.
    let tap = dockershim_support::DockerTap::start(&tb).await;
    let mut tapped = tb.clone();
    tapped.docker_endpoint = tap.endpoint.clone();
    let body = |mut ctx: dockershim_support::Ctx| async move {
        let busybox = docker(&tb)
            .inspect_image(&tb.busybox_image)
            .await
            .expect("inspect busybox")
            .id
            .expect("an id");
        let hex = busybox.trim_start_matches("sha256:").to_string();
        let repo = unique_name("digest-cache");
        dockershim_support::push_fresh_image(&tb, &repo, 4096).await;
        let other = format!("{}/{repo}:1", tb.registry);

        let scfg = ctx.sandbox_config("digests");
        let sb = ctx.run_sandbox(&scfg).await;
        let id = ctx
            .run_container(
                &sb,
                &scfg,
                &busybox_container("c", &tb.busybox_image, "sleep 3600"),
            )
            .await;
        let lookups = || tap.count(&format!("{hex}/json"));
        // Cached once the event stream is followed and no other test changed an image.
        let mut cached = false;
        for _ in 0..50 {
            let before = lookups();
            ctx.status(&id).await;
            if lookups() == before {
                cached = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(cached, "the digests are cached");

        // Other tests on this Docker may change images meanwhile: allow two such moments.
        const CYCLES: usize = 5;
        let mut asked = 0;
        for _ in 0..CYCLES {
            ctx.img
                .pull_image(cri::PullImageRequest {
                    image: spec(&other),
                    ..Default::default()
                })
                .await
                .expect("PullImage");
            ctx.img
                .remove_image(cri::RemoveImageRequest {
                    image: spec(&other),
                })
                .await
                .expect("RemoveImage");
            // Docker's events of that pull and removal reach dockershim and are resolved.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let before = lookups();
            let s = ctx.status(&id).await;
            assert!(
                s.image_ref.contains(&hex) || s.image_ref.contains('@'),
                "{}",
                s.image_ref
            );
            if lookups() > before {
                asked += 1;
            }
        }
        assert!(
            asked <= 2,
            "another image's pull and removal keep the digests: asked Docker {asked} of {CYCLES} times"
        );

        // The image itself tagged behind dockershim's back: its event forgets the digests.
        let tag = format!("{}/{repo}-alias", tb.registry);
        docker(&tb)
            .tag_image(
                &busybox,
                Some(bollard::query_parameters::TagImageOptions {
                    repo: Some(tag.clone()),
                    tag: Some("1".into()),
                }),
            )
            .await
            .expect("docker tag");
        let before = lookups();
        let mut asked_again = false;
        for _ in 0..50 {
            ctx.status(&id).await;
            if lookups() > before {
                asked_again = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = docker(&tb)
            .remove_image(
                &format!("{tag}:1"),
                None::<bollard::query_parameters::RemoveImageOptions>,
                None,
            )
            .await;
        assert!(asked_again, "tagging the image itself forgets its digests");
        ctx.stop_remove_sandbox(&sb).await;
    };
    dockershim_support::with_dockershim_on(tapped, name, Duration::from_secs(180), body).await;
}
