//! The fake behaves like the Engine where the shim depends on it.

use super::views::archive_tags;
use super::*;

fn body(image: &str) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(image.into()),
        labels: Some(HashMap::from([("k".to_string(), "v".to_string())])),
        ..Default::default()
    }
}

#[tokio::test]
async fn containers_follow_the_engine_lifecycle() {
    let d = FakeDocker::default();
    d.add_image("busybox");
    assert!(matches!(
        d.create_container("x", body("nope")).await,
        Err(DockerError::NotFound { .. })
    ));
    let id = d.create_container("x", body("busybox")).await.unwrap();
    assert_eq!(id.len(), 64);
    assert!(matches!(
        d.create_container("x", body("busybox")).await,
        Err(DockerError::Conflict { .. })
    ));
    // Full id, name, `/name` and a unique prefix all resolve.
    for key in [id.as_str(), "x", "/x", &id[..12]] {
        let c = d.inspect_container(key).await.unwrap();
        assert_eq!(c.id.as_deref(), Some(id.as_str()), "{key}");
    }
    d.start_container(&id).await.unwrap();
    assert!(d.container(&id).unwrap().running());
    let running = HashMap::from([("status".to_string(), vec!["running".to_string()])]);
    assert_eq!(d.list_containers(running.clone()).await.unwrap().len(), 1);
    d.stop_container(&id, 0).await.unwrap();
    assert_eq!(d.container(&id).unwrap().exit_code, 137);
    assert!(d.list_containers(running).await.unwrap().is_empty());
    let by_label = HashMap::from([("label".to_string(), vec!["k=v".to_string()])]);
    assert_eq!(d.list_containers(by_label).await.unwrap().len(), 1);
    d.remove_container(&id).await.unwrap();
    assert!(d.inspect_container(&id).await.unwrap_err().is_not_found());
    assert_eq!(
        d.calls_to("stop"),
        vec![format!("stop {id} 0")],
        "calls are recorded"
    );
}

#[tokio::test]
async fn queued_failures_hit_the_next_call_only() {
    let d = FakeDocker::default();
    d.fail_next("version", DockerError::Connection("down".into()));
    assert!(matches!(d.version().await, Err(DockerError::Connection(_))));
    assert!(d.version().await.is_ok());
    assert_eq!(d.calls(), vec!["version", "version"]);
}

#[tokio::test]
async fn lifecycle_changes_are_published_as_events() {
    let d = FakeDocker::default();
    d.add_image("busybox");
    let mut events = d.events(None);
    let id = d.create_container("x", body("busybox")).await.unwrap();
    d.start_container(&id).await.unwrap();
    d.exit(&id, 1, false);
    d.remove_container(&id).await.unwrap();
    let mut actions = Vec::new();
    for _ in 0..4 {
        let ev = events.next().await.unwrap().unwrap();
        let attrs = ev.actor.unwrap().attributes.unwrap();
        assert_eq!(attrs["k"], "v", "labels are event attributes");
        actions.push(ev.action.unwrap());
    }
    assert_eq!(actions, ["create", "start", "die", "destroy"]);
}

#[tokio::test]
async fn images_resolve_by_tag_id_and_digest() {
    let d = FakeDocker::default();
    let id = d.add_image("busybox:1.36");
    d.add_image_with(FakeImage {
        id: "sha256:abc".into(),
        tags: vec!["a:1".into(), "b:1".into()],
        digests: vec!["a@sha256:def".into()],
        ..Default::default()
    });
    assert_eq!(
        d.inspect_image("busybox:1.36").await.unwrap().id,
        Some(id.clone())
    );
    assert!(d.inspect_image("busybox").await.unwrap_err().is_not_found());
    assert_eq!(
        d.inspect_image("a@sha256:def").await.unwrap().id.as_deref(),
        Some("sha256:abc")
    );
    assert!(matches!(
        d.remove_image("sha256:abc").await,
        Err(DockerError::Conflict { .. })
    ));
    assert_eq!(d.remove_image("a:1").await.unwrap(), Vec::<String>::new());
    assert_eq!(d.images()[1].tags, vec!["b:1".to_string()]);
    assert!(d.pull_image("x", None, Duration::ZERO, None).await.is_err());
    d.allow_pull("x");
    d.pull_image("x", None, Duration::ZERO, None).await.unwrap();
    assert!(d.inspect_image("x:latest").await.is_ok());
}

/// One ustar entry (header and padded data).
fn tar_of(name: &str, data: &[u8]) -> Vec<u8> {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[124..135].copy_from_slice(format!("{:011o}", data.len()).as_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(data);
    out.resize(512 + data.len().div_ceil(512) * 512, 0);
    out
}

#[test]
fn archives_give_their_repo_tags() {
    let manifest = br#"[{"Config":"c.json","RepoTags":["example.com/pause:9"]}]"#;
    let entries = [
        tar_of("layer.tar", &[7u8; 600]),
        tar_of("manifest.json", manifest),
    ];
    let archive = [entries.concat(), vec![0u8; 1024]].concat();
    assert_eq!(
        archive_tags(&archive),
        vec!["example.com/pause:9".to_string()]
    );
    assert!(archive_tags(&tar_of("other", b"x")).is_empty());
    assert!(archive_tags(&[0u8; 1024]).is_empty());
}
