//! The API server fixture behaves as a real API server does for the calls the kubelet makes,
//! checked with kube-rs, the client the kubelet uses: create / get / list with a field
//! selector, watch from a resourceVersion (and 410 Gone after a compaction), merge and
//! strategic merge patches on the status subresource, and graceful pod deletion with
//! preconditions.

use futures::{StreamExt, TryStreamExt};
use integration::apiserver::ApiServer;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Api, Client, Config};

async fn client(server: &ApiServer) -> Client {
    // kube's rustls needs a process-wide crypto provider chosen (ring here).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = Config::new(server.url().parse().expect("url"));
    Client::try_from(config).expect("client")
}

fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox:1.36"}]}
    }))
    .expect("pod")
}

#[tokio::test]
async fn kube_rs_talks_to_the_fixture() {
    let server = ApiServer::start().await.expect("start");
    let pods: Api<Pod> = Api::namespaced(client(&server).await, "default");

    let a = pods
        .create(&PostParams::default(), &pod("a", "n1"))
        .await
        .expect("create a");
    pods.create(&PostParams::default(), &pod("b", "n2"))
        .await
        .expect("create b");
    let spec = a.spec.as_ref().expect("spec");
    assert_eq!(
        spec.restart_policy.as_deref(),
        Some("Always"),
        "API defaults applied"
    );
    let err = pods
        .create(&PostParams::default(), &pod("a", "n1"))
        .await
        .expect_err("dup");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err:?}"
    );

    let mine = pods
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .expect("list");
    assert_eq!(mine.items.len(), 1);
    let rv = mine.metadata.resource_version.clone().expect("list rv");

    // Watch from the list's version: the status patch arrives as MODIFIED.
    let mut events = pods
        .watch(&WatchParams::default().fields("spec.nodeName=n1"), &rv)
        .await
        .expect("watch")
        .boxed();
    let status = serde_json::json!({"status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status("a", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("merge patch status");
    let strategic = serde_json::json!({"status": {"conditions": [
        {"type": "ContainersReady", "status": "True"}]}});
    let patched = pods
        .patch_status("a", &PatchParams::default(), &Patch::Strategic(&strategic))
        .await
        .expect("strategic patch status");
    let conds = patched
        .status
        .and_then(|s| s.conditions)
        .expect("conditions");
    assert_eq!(
        conds.len(),
        2,
        "strategic merge keeps Ready and adds ContainersReady"
    );
    match events.try_next().await.expect("event") {
        Some(WatchEvent::Modified(p)) => {
            assert_eq!(p.status.and_then(|s| s.phase).as_deref(), Some("Running"))
        }
        other => panic!("expected MODIFIED, got {other:?}"),
    }

    // Graceful deletion: marked first, removed by a delete with grace 0 and a uid precondition.
    pods.delete("a", &DeleteParams::default())
        .await
        .expect("delete");
    let marked = pods.get("a").await.expect("still there");
    assert!(marked.metadata.deletion_timestamp.is_some());
    let wrong = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(kube::api::Preconditions {
            uid: Some("not-the-uid".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    assert!(
        pods.delete("a", &wrong).await.is_err(),
        "precondition enforced"
    );
    let right = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(kube::api::Preconditions {
            uid: marked.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    pods.delete("a", &right).await.expect("final delete");
    assert!(pods.get_opt("a").await.expect("get").is_none());

    // After a compaction a watch from the old version gets 410 Gone.
    server.compact();
    let mut stale = pods
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch")
        .boxed();
    match stale.next().await {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!(e.code, 410, "{e:?}"),
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
}
