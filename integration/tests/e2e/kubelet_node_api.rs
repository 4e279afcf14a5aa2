//! The kubelet's Node in API-server mode, against the API server fixture: the node registers
//! (and a second registration adopts it), its status is written with upstream conditions and
//! then only when it changes, a NotReady runtime shows in the Ready condition, and the Lease
//! in kube-node-lease is created, owned by the Node, and renewed.

use std::time::Duration;

use integration::apiserver::ApiServer;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client, Config};
use kubelet::nodestatus::{
    Health, LEASE_NAMESPACE, LeaseRenewer, Machine, NodeSpecInputs, NodeStatusSyncer, initial_node,
    node_status,
};

fn client(server: &ApiServer) -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::try_from(Config::new(server.url().parse().expect("url"))).expect("client")
}

fn ready_of(n: &Node) -> (String, String) {
    let c = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .expect("Ready condition");
    (c.status.clone(), c.reason.clone().unwrap_or_default())
}

#[tokio::test]
async fn node_registers_reports_status_on_change_and_renews_its_lease() {
    let server = ApiServer::start().await.expect("fixture");
    let c = client(&server);
    let inputs = NodeSpecInputs {
        node_name: "node-a".into(),
        node_ip: "127.0.0.1".into(),
        hostname: "node-a".into(),
        max_pods: 110,
        kubelet_port: 10250,
        container_runtime_version: "containerd://1.6.20".into(),
        kubelet_version: "v1.34.0".into(),
        labels: [("tier".to_string(), "test".to_string())].into(),
        reserved: Default::default(),
    };
    let machine = Machine::read(std::path::Path::new("/"));
    assert!(machine.cpus > 0 && machine.memory_bytes > 0, "{machine:?}");

    let mut syncer = NodeStatusSyncer::new(c.clone(), "node-a", Duration::from_secs(300));
    let node = syncer
        .register(&initial_node(&inputs, &machine))
        .await
        .expect("register");
    let uid = node.metadata.uid.clone().expect("uid");
    // Registering again (a restarted kubelet) adopts the same object.
    let again = NodeStatusSyncer::new(c.clone(), "node-a", Duration::from_secs(300))
        .register(&initial_node(&inputs, &machine))
        .await
        .expect("re-register");
    assert_eq!(again.metadata.uid.as_deref(), Some(uid.as_str()));

    let healthy = Health::default();
    let st = node_status(
        &inputs,
        &machine,
        &healthy,
        Vec::new(),
        syncer.last_status(),
    );
    assert!(syncer.sync(st).await.expect("sync"));
    let nodes: Api<Node> = Api::all(c.clone());
    let got = nodes.get("node-a").await.expect("get node");
    assert_eq!(ready_of(&got), ("True".into(), "KubeletReady".into()));
    let labels = got.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("tier").map(String::as_str), Some("test"));
    assert_eq!(
        labels.get("kubernetes.io/hostname").map(String::as_str),
        Some("node-a")
    );
    let pods = got
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("pods"))
        .map(|q| q.0.clone());
    assert_eq!(pods.as_deref(), Some("110"));

    // Nothing changed: no write.
    let patches_before = server
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH")
        .count();
    for _ in 0..3 {
        let st = node_status(
            &inputs,
            &machine,
            &healthy,
            Vec::new(),
            syncer.last_status(),
        );
        assert!(!syncer.sync(st).await.expect("sync"));
    }
    let patches_after = server
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH")
        .count();
    assert_eq!(
        patches_before, patches_after,
        "an idle node writes no status"
    );

    // The runtime goes away: NotReady with the reason.
    let sick = Health {
        not_ready: Some("container runtime is down".into()),
        ..Default::default()
    };
    let st = node_status(&inputs, &machine, &sick, Vec::new(), syncer.last_status());
    assert!(syncer.sync(st).await.expect("sync"));
    let got = nodes.get("node-a").await.expect("get node");
    assert_eq!(ready_of(&got), ("False".into(), "KubeletNotReady".into()));

    // The lease: created owned by the node, then renewed.
    let mut renewer = LeaseRenewer::new(c.clone(), "node-a", 40, Some(&node));
    assert_eq!(renewer.interval(), Duration::from_secs(10));
    let first = renewer.renew().await.expect("create lease");
    let owner = first
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default()
        .first()
        .map(|o| (o.kind.clone(), o.uid.clone()));
    assert_eq!(owner, Some(("Node".into(), uid)));
    tokio::time::sleep(Duration::from_millis(20)).await;
    renewer.renew().await.expect("renew lease");
    let leases: Api<Lease> = Api::namespaced(c, LEASE_NAMESPACE);
    let got = leases.get("node-a").await.expect("lease");
    let spec = got.spec.expect("spec");
    assert_eq!(spec.holder_identity.as_deref(), Some("node-a"));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    let first_renew = first.spec.and_then(|s| s.renew_time).expect("renewTime");
    assert!(
        spec.renew_time.expect("renewTime").0 > first_renew.0,
        "renewed"
    );
    assert_eq!(renewer.renewals, 2);
}
