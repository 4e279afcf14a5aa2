//! The CRI ImageService on the fake Engine: ListImages with its filter, ImageStatus of a
//! present and an absent image, PullImage with credentials and its progress posted to a watching
//! kubelet, idempotent RemoveImage by tag and by
//! id, ImageFsInfo.

use cri_proto::runtime::v1 as cri;
use cri_proto::{ImageService, RuntimeService};
use tonic::{Code, Request};

use super::{BUSYBOX, Fixture, code_of};
use crate::docker::fake::FakeImage;

fn spec(image: &str) -> Option<cri::ImageSpec> {
    Some(cri::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    })
}

async fn image_status(fx: &Fixture, image: &str) -> Option<cri::Image> {
    fx.svc
        .image_status(Request::new(cri::ImageStatusRequest {
            image: spec(image),
            verbose: false,
        }))
        .await
        .expect("ImageStatus")
        .into_inner()
        .image
}

async fn remove(fx: &Fixture, image: &str) -> Result<(), tonic::Status> {
    fx.svc
        .remove_image(Request::new(cri::RemoveImageRequest { image: spec(image) }))
        .await
        .map(|_| ())
}

#[tokio::test]
async fn list_images_and_image_status_describe_dockers_images() {
    let fx = Fixture::new().await;
    fx.docker.add_image_with(FakeImage {
        id: format!("sha256:{}", "a".repeat(64)),
        tags: vec!["nginx:latest".into(), "<none>:<none>".into()],
        digests: vec!["nginx@sha256:1234".into()],
        user: "101:101".into(),
        size: 77,
    });
    let all = fx
        .svc
        .list_images(Request::new(cri::ListImagesRequest { filter: None }))
        .await
        .expect("ListImages")
        .into_inner()
        .images;
    assert_eq!(all.len(), 3, "pause, busybox and nginx");
    let filtered = fx
        .svc
        .list_images(Request::new(cri::ListImagesRequest {
            filter: Some(cri::ImageFilter {
                image: spec("nginx"),
            }),
        }))
        .await
        .expect("ListImages")
        .into_inner()
        .images;
    assert_eq!(filtered.len(), 1, "a bare name means :latest");
    assert_eq!(filtered[0].repo_tags, vec!["nginx:latest".to_string()]);

    let img = image_status(&fx, "nginx@sha256:1234")
        .await
        .expect("present");
    assert_eq!(img.id, format!("sha256:{}", "a".repeat(64)));
    assert_eq!(
        img.repo_tags,
        vec!["nginx:latest".to_string()],
        "<none> is dropped"
    );
    assert_eq!(img.repo_digests, vec!["nginx@sha256:1234".to_string()]);
    assert_eq!(img.uid, Some(cri::Int64Value { value: 101 }));
    assert_eq!(img.size, 77);
    assert_eq!(
        image_status(&fx, "absent:1").await,
        None,
        "absent is not an error"
    );
    let r = fx
        .svc
        .image_status(Request::new(cri::ImageStatusRequest {
            image: None,
            verbose: false,
        }))
        .await;
    assert_eq!(code_of(r), Code::InvalidArgument);
}

#[tokio::test]
async fn pull_image_passes_credentials_and_answers_the_repo_digest_or_the_id() {
    let fx = Fixture::new().await;
    fx.docker.allow_pull("private.example/app:2");
    let image_ref = fx
        .svc
        .pull_image(Request::new(cri::PullImageRequest {
            image: spec("private.example/app:2"),
            auth: Some(cri::AuthConfig {
                username: "alice".into(),
                password: "secret".into(),
                ..Default::default()
            }),
            sandbox_config: None,
        }))
        .await
        .expect("PullImage")
        .into_inner()
        .image_ref;
    assert_eq!(
        fx.docker.calls_to("pull"),
        vec!["pull private.example/app:2 user=alice"]
    );
    let img = image_status(&fx, "private.example/app:2")
        .await
        .expect("pulled");
    // No repo digest (an image only tagged locally): the id.
    assert_eq!(image_ref, img.id);
    // With one: the digest, as cri-dockerd's `getImageRef`.
    let digest = format!("private.example/app@sha256:{}", "d".repeat(64));
    fx.docker.add_image_with(FakeImage {
        id: format!("sha256:{}", "e".repeat(64)),
        tags: vec!["private.example/app:3".into()],
        digests: vec![digest.clone()],
        ..Default::default()
    });
    fx.docker.allow_pull("private.example/app:3");
    let image_ref = fx
        .svc
        .pull_image(Request::new(cri::PullImageRequest {
            image: spec("private.example/app:3"),
            ..Default::default()
        }))
        .await
        .expect("PullImage")
        .into_inner()
        .image_ref;
    assert_eq!(image_ref, digest);

    let denied = fx
        .svc
        .pull_image(Request::new(cri::PullImageRequest {
            image: spec("private.example/other:1"),
            ..Default::default()
        }))
        .await;
    assert_eq!(code_of(denied), Code::NotFound);
}

#[tokio::test]
async fn pull_image_posts_its_progress_for_a_kubelet_that_watches() {
    let board = node_common::pull_progress::PullProgressBoard::default();
    let shared = board.clone();
    let fx = Fixture::with(move |cfg, _| cfg.pull_progress = Some(shared)).await;
    fx.docker.allow_pull("app:1");
    fx.docker.allow_pull("app:2");
    let pull = |image: &'static str| {
        fx.svc.pull_image(Request::new(cri::PullImageRequest {
            image: spec(image),
            ..Default::default()
        }))
    };
    // Nobody watches app:2: its pull posts nothing anywhere.
    pull("app:2").await.expect("PullImage");
    let watch = board.watch("app:1");
    assert_eq!(watch.latest(), None);
    pull("app:1").await.expect("PullImage");
    let report = watch.latest().expect("the pull posted its progress");
    assert_eq!((report.layers_done, report.layers), (1, 1));
    assert_eq!(report.downloaded, report.total);
}

#[tokio::test]
async fn remove_image_removes_every_tag_of_an_id_and_is_idempotent() {
    let fx = Fixture::new().await;
    let id = format!("sha256:{}", "b".repeat(64));
    fx.docker.add_image_with(FakeImage {
        id: id.clone(),
        tags: vec!["one:1".into(), "two:2".into()],
        ..Default::default()
    });
    remove(&fx, &id).await.expect("remove by id");
    assert_eq!(
        fx.docker.calls_to("remove_image"),
        vec![
            format!("remove_image {id}"),
            "remove_image one:1".to_string(),
            "remove_image two:2".to_string()
        ],
        "Docker refuses an id with tags in several repositories unforced: then tag by tag"
    );
    assert_eq!(
        fx.docker.calls_to("inspect_image").len(),
        1,
        "one inspect, after the refusal"
    );
    assert_eq!(image_status(&fx, &id).await, None);
    remove(&fx, &id).await.expect("removing again");
    remove(&fx, "never:1")
        .await
        .expect("removing what never was");

    fx.pod_with_container("p", "c").await;
    let in_use = remove(&fx, BUSYBOX).await;
    assert_eq!(
        code_of(in_use),
        Code::FailedPrecondition,
        "Docker's conflict"
    );
}

/// RemoveImage makes one Docker call when Docker can do it in one (issue 14: it inspected the
/// image first every time): by tag, by digest, by the id of an image with one tag, and for an
/// absent image.
#[tokio::test]
async fn remove_image_is_one_docker_call_when_docker_can_do_it_in_one() {
    let fx = Fixture::new().await;
    let shared = format!("sha256:{}", "c".repeat(64));
    fx.docker.add_image_with(FakeImage {
        id: shared.clone(),
        tags: vec!["left:1".into(), "right:1".into()],
        digests: vec!["left@sha256:5678".into()],
        ..Default::default()
    });
    let solo = fx.docker.add_image("solo:1");
    let calls_before = fx.docker.calls().len();

    remove(&fx, "left:1").await.expect("remove by tag");
    remove(&fx, &solo).await.expect("remove by id");
    remove(&fx, "never:1").await.expect("remove what is absent");
    let calls: Vec<String> = fx.docker.calls()[calls_before..].to_vec();
    assert_eq!(
        calls,
        vec![
            "remove_image left:1".to_string(),
            format!("remove_image {solo}"),
            "remove_image never:1".to_string(),
        ],
        "one call each, no inspect"
    );
    assert_eq!(image_status(&fx, "left:1").await, None, "the tag went");
    let kept = image_status(&fx, "right:1")
        .await
        .expect("the other tag stays");
    assert_eq!(kept.id, shared);
    assert_eq!(image_status(&fx, &solo).await, None, "removed by id");
}

#[tokio::test]
async fn image_fs_info_names_dockers_image_store() {
    let fx = Fixture::new().await;
    let info = fx
        .svc
        .image_fs_info(Request::new(cri::ImageFsInfoRequest {}))
        .await
        .expect("ImageFsInfo")
        .into_inner();
    let fs = &info.image_filesystems[0];
    assert_eq!(
        fs.fs_id.as_ref().map(|f| f.mountpoint.as_str()),
        Some("/var/lib/docker/overlay2")
    );
    assert!(fs.timestamp > 0);
}

/// An image event of Docker's, as the Engine sends it.
fn image_event(action: &str, actor: &str) -> bollard::models::EventMessage {
    bollard::models::EventMessage {
        typ: Some(bollard::models::EventMessageTypeEnum::IMAGE),
        action: Some(action.to_string()),
        actor: Some(bollard::models::EventActor {
            id: Some(actor.to_string()),
            attributes: None,
        }),
        time_nano: chrono::Utc::now().timestamp_nanos_opt(),
        ..Default::default()
    }
}

/// Does a call of `ask` come, within a second, that makes none of the Docker calls
/// `docker_calls` counts? (Nothing is cached until the event pump follows Docker's events.)
async fn answered_from_cache<F: std::future::Future>(
    docker_calls: impl Fn() -> usize,
    ask: impl Fn() -> F,
) -> bool {
    for _ in 0..200 {
        let before = docker_calls();
        ask().await;
        if docker_calls() == before {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    false
}

/// Does a call of `ask` come, within ten seconds, that makes one of the Docker calls
/// `docker_calls` counts (the cache forgot)?
async fn asks_docker_again<F: std::future::Future>(
    docker_calls: impl Fn() -> usize,
    ask: impl Fn() -> F,
) -> bool {
    let before = docker_calls();
    let forgotten = async {
        while docker_calls() == before {
            ask().await;
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), forgotten)
        .await
        .is_ok()
}

/// ContainerStatus asks Docker for the repo digests of the container's image once. Another
/// image's pull or removal keeps them (issue 14: any pull or removal forgot them all, so in
/// cri-bench every ContainerStatus cost two Docker calls, as cri-dockerd's always does); an
/// event about the image itself forgets them; an event naming a reference (Docker's `pull`)
/// forgets only the image that reference names once it is looked up.
#[tokio::test]
async fn container_status_keeps_its_image_digests_across_other_images_changes() {
    use crate::docker::DockerApi;
    let fx = Fixture::new().await;
    let (_, id) = fx.pod_with_container("p", "c").await;
    let busybox = fx
        .docker
        .inspect_image(BUSYBOX)
        .await
        .expect("busybox")
        .id
        .expect("an id");
    let lookups = || {
        fx.docker
            .calls_to(&format!("inspect_image {busybox}"))
            .len()
    };
    let status = || async {
        fx.svc
            .container_status(Request::new(cri::ContainerStatusRequest {
                container_id: id.clone(),
                verbose: false,
            }))
            .await
            .expect("ContainerStatus")
    };
    // Until the event pump follows Docker's events nothing is cached: wait for it.
    assert!(
        answered_from_cache(lookups, status).await,
        "the digests are cached once the events are followed"
    );

    let before = lookups();
    fx.docker.allow_pull("other:1");
    fx.svc
        .pull_image(Request::new(cri::PullImageRequest {
            image: spec("other:1"),
            ..Default::default()
        }))
        .await
        .expect("PullImage");
    remove(&fx, "other:1").await.expect("RemoveImage");
    status().await;
    assert_eq!(lookups(), before, "another image's pull and removal");

    // Docker's events of that pull: the reference is looked up, then only its image forgotten.
    let other = fx.docker.add_image("other:2");
    fx.docker.emit(image_event("pull", "other:2"));
    fx.docker.emit(image_event("delete", &other));
    let resolved = async {
        while fx.docker.calls_to("inspect_image other:2").is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), resolved)
        .await
        .expect("the pulled reference is looked up");
    assert!(
        answered_from_cache(lookups, status).await,
        "trusted again once the reference is resolved"
    );

    fx.docker.emit(image_event("tag", &busybox));
    assert!(
        asks_docker_again(lookups, status).await,
        "an event about the image itself forgets its digests"
    );
}

/// ImageStatus asks Docker once per reference while no image changes (the kubelet asks before
/// every container start). dockershim's own removal and pull forget what it cached before they
/// answer, so a status right after them shows them; any image event forgets it too.
#[tokio::test]
async fn image_status_asks_docker_once_until_an_image_changes() {
    let fx = Fixture::new().await;
    let asks = || {
        fx.docker
            .calls_to(&format!("inspect_image {BUSYBOX}"))
            .len()
    };
    let status = || async { assert!(image_status(&fx, BUSYBOX).await.is_some()) };
    // Until the event pump follows Docker's events nothing is cached: wait for it.
    assert!(
        answered_from_cache(asks, status).await,
        "cached once events are followed"
    );
    let before = asks();
    for _ in 0..5 {
        assert!(image_status(&fx, BUSYBOX).await.is_some());
    }
    assert_eq!(asks(), before, "five more asks, no Docker call");

    remove(&fx, BUSYBOX).await.expect("RemoveImage");
    assert_eq!(
        image_status(&fx, BUSYBOX).await,
        None,
        "right after the removal"
    );
    fx.docker.allow_pull(BUSYBOX);
    fx.svc
        .pull_image(Request::new(cri::PullImageRequest {
            image: spec(BUSYBOX),
            ..Default::default()
        }))
        .await
        .expect("PullImage");
    assert!(
        image_status(&fx, BUSYBOX).await.is_some(),
        "right after the pull"
    );
    assert!(answered_from_cache(asks, status).await, "cached again");

    // Somebody else tags an image: the event forgets the cache.
    fx.docker.emit(image_event("tag", "sha256:elsewhere"));
    assert!(
        asks_docker_again(asks, status).await,
        "an image event forgets the cached inspects"
    );
}
