//! The kubelet's `api` pod source against the API server fixture, through PodConfig's merge:
//! a pod bound to the node is ADDed (a pod bound elsewhere is not), a status-only change is a
//! RECONCILE, a graceful delete is a DELETE, the final removal a REMOVE, and a forced 410 plus
//! dropped watches make the watcher relist without any pod being added or removed again.

use std::time::Duration;

use integration::apiserver::ApiServer;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Config};
use kubelet::config::apiserver::ApiSource;
use kubelet::config::podconfig::PodConfig;
use kubelet::config::{API_SOURCE, PodOperation, PodUpdate};
use tokio::sync::mpsc::Receiver;
use tokio_util::sync::CancellationToken;

fn client(server: &ApiServer) -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::try_from(Config::new(server.url().parse().expect("url"))).expect("client")
}

fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox:1.36"}]}
    }))
    .expect("pod")
}

/// The next merged update, skipping empty ones.
async fn next(rx: &mut Receiver<PodUpdate>) -> PodUpdate {
    loop {
        let u = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("an update within 30 s")
            .expect("pod config open");
        if !u.pods.is_empty() {
            return u;
        }
    }
}

fn names(u: &PodUpdate) -> Vec<String> {
    u.pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

#[tokio::test]
async fn api_source_feeds_pod_config() {
    let server = ApiServer::start().await.expect("fixture");
    let c = client(&server);
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    pods.create(&PostParams::default(), &pod("mine", "node-a"))
        .await
        .expect("create");
    pods.create(&PostParams::default(), &pod("other", "node-b"))
        .await
        .expect("create");

    let cancel = CancellationToken::new();
    let (config, mut rx) = PodConfig::new(cancel.clone());
    let source = ApiSource::new(c.clone(), "node-a", config.channel(API_SOURCE));
    tokio::spawn(source.run(cancel.clone()));

    let u = next(&mut rx).await;
    assert_eq!(
        (u.op, names(&u)),
        (PodOperation::Add, vec!["mine".to_string()])
    );

    // A status-only change.
    let status = serde_json::json!({"status": {"phase": "Running"}});
    pods.patch_status("mine", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status");
    let u = next(&mut rx).await;
    assert_eq!(u.op, PodOperation::Reconcile, "{u:?}");

    // History compacted and every watch dropped: the watcher relists; nothing is re-added.
    // (A change the watch does not see first, so its resourceVersion is older than the history.)
    pods.create(&PostParams::default(), &pod("elsewhere", "node-b"))
        .await
        .expect("create");
    server.compact();
    server.drop_watches();
    pods.create(&PostParams::default(), &pod("later", "node-a"))
        .await
        .expect("create");
    let u = next(&mut rx).await;
    assert_eq!(
        (u.op, names(&u)),
        (PodOperation::Add, vec!["later".to_string()])
    );
    let lists = server
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path == "/api/v1/pods" && !r.query.contains("watch"))
        .count();
    assert!(
        lists >= 2,
        "the watcher relisted after the 410 ({lists} lists)"
    );

    // Graceful deletion, then the final removal.
    pods.delete("mine", &DeleteParams::default())
        .await
        .expect("delete");
    let u = next(&mut rx).await;
    assert_eq!(
        (u.op, names(&u)),
        (PodOperation::Delete, vec!["mine".to_string()])
    );
    pods.delete("mine", &DeleteParams::default().grace_period(0))
        .await
        .expect("final delete");
    let u = next(&mut rx).await;
    assert_eq!(
        (u.op, names(&u)),
        (PodOperation::Remove, vec!["mine".to_string()])
    );
    cancel.cancel();
}
