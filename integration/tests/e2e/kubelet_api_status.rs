//! The kubelet's pod status writer against the API server fixture: a status is written once
//! and not again until it changes; the UID precondition keeps a stale kubelet from writing
//! over a recreated pod of the same name; a gracefully deleted pod whose containers are gone is
//! deleted for good.

use integration::apiserver::ApiServer;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client, Config};
use kubelet::status::api::{ApiStatusSyncer, PodState};

fn client(server: &ApiServer) -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::try_from(Config::new(server.url().parse().expect("url"))).expect("client")
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "busybox:1.36"}]}
    }))
    .expect("pod")
}

fn phase(p: &str) -> Option<PodStatus> {
    Some(PodStatus {
        phase: Some(p.into()),
        ..Default::default()
    })
}

#[tokio::test]
async fn statuses_are_written_on_change_with_the_uid_precondition() {
    let server = ApiServer::start().await.expect("fixture");
    let c = client(&server);
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let p = pods
        .create(&PostParams::default(), &pod("web"))
        .await
        .expect("create");
    let mut syncer = ApiStatusSyncer::new(c.clone());
    let state = |pod: &Pod, status: Option<PodStatus>, done: bool| PodState {
        pod: pod.clone(),
        status,
        can_be_deleted: done,
    };

    let r = syncer
        .sync_batch(&[state(&p, phase("Pending"), false)])
        .await;
    assert_eq!(r.patched, 1);
    let r = syncer
        .sync_batch(&[state(&p, phase("Pending"), false)])
        .await;
    assert_eq!(r.patched, 0, "an unchanged status is not written again");
    let r = syncer
        .sync_batch(&[state(&p, phase("Running"), false)])
        .await;
    assert_eq!(r.patched, 1);
    let got = pods.get("web").await.expect("get");
    assert_eq!(got.status.and_then(|s| s.phase).as_deref(), Some("Running"));

    // The pod is recreated under the same name: the old UID's status must not land on it.
    pods.delete("web", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete");
    pods.create(&PostParams::default(), &pod("web"))
        .await
        .expect("recreate");
    let r = syncer
        .sync_batch(&[state(&p, phase("Failed"), false)])
        .await;
    assert_eq!((r.patched, r.failed), (0, 0), "{r:?}");
    let fresh = pods.get("web").await.expect("get");
    assert_ne!(fresh.metadata.uid, p.metadata.uid);
    assert_eq!(fresh.status.and_then(|s| s.phase), None);

    // Graceful deletion: the kubelet removes the object once its containers are gone.
    pods.delete("web", &DeleteParams::default())
        .await
        .expect("graceful delete");
    let marked = pods.get("web").await.expect("still there");
    assert!(marked.metadata.deletion_timestamp.is_some());
    let r = syncer
        .sync_batch(&[state(&marked, phase("Running"), false)])
        .await;
    assert_eq!(r.deleted, 0, "not while containers run");
    let r = syncer
        .sync_batch(&[state(&marked, phase("Succeeded"), true)])
        .await;
    assert_eq!((r.patched, r.deleted), (1, 1), "{r:?}");
    assert!(pods.get_opt("web").await.expect("get").is_none());
}
