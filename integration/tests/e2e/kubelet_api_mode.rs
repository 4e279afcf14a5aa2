//! The kubelet binary in API-server mode against the API server fixture over HTTPS, on the
//! embedded dockershim (authenticating with a bearer token) and on containerd (with a client
//! certificate); a wrong token is refused with 401: the node registers and turns Ready, its lease is renewed, a
//! pod bound to the node runs and its status appears in the API, and deleting it terminates it
//! gracefully, after which the kubelet removes the object and nothing is left in the runtime.

use crate::kubelet_support;

use std::sync::Arc;

use integration::apiserver::ApiServer;
use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::PostParams;
use kube::{Api, Client, Config};
use kubelet_support::{
    cleanup_all, delete_pod_and_wait, free_port, kubelet_command, runtime_containers,
    runtime_endpoint, runtime_sandboxes, stop_kubelet, wait_for,
};
use parking_lot::Mutex;

async fn api_mode(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_api_mode[{}]", kind.name()));
    let _ = rustls::crypto::ring::default_provider().install_default();
    // HTTPS with authentication: the kubelet on containerd uses a client certificate, the one
    // with the embedded dockershim a bearer token (both from its kubeconfig, through kube-rs).
    let server = ApiServer::start_tls().await.expect("fixture");
    let kubeconfig_text = match kind {
        RuntimeKind::Containerd => server.kubeconfig(),
        RuntimeKind::Dockershim => server.kubeconfig_token(),
    };
    let dir = tempfile::Builder::new()
        .prefix("kubelet-api-")
        .tempdir()
        .expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, &kubeconfig_text).expect("kubeconfig");
    let root = dir.path().join("root");
    let log = dir.path().join("kubelet.log");
    let node = unique_name("api");
    let mut cmd = kubelet_command(kind, &tb, &root, None, free_port(), &node, &log);
    cmd.arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--node-status-update-frequency")
        .arg("1s")
        .arg("--node-lease-duration-seconds")
        .arg("4")
        .arg("--node-labels")
        .arg("fixture=yes");
    let endpoint = runtime_endpoint(kind, &tb, &root);
    let mut child = cmd.spawn().expect("spawn kubelet");

    let client = {
        let kc = kube::config::Kubeconfig::from_yaml(&server.kubeconfig()).expect("kubeconfig");
        let config = Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("client config");
        Client::try_from(config).expect("client")
    };
    // Without credentials the fixture refuses, like the API server.
    {
        let kc = kube::config::Kubeconfig::from_yaml(
            &server
                .kubeconfig_token()
                .replace(&server.tls().expect("tls").token, "wrong-token"),
        )
        .expect("kubeconfig");
        let config = Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("client config");
        let anon: Api<Node> = Api::all(Client::try_from(config).expect("client"));
        match anon.list(&Default::default()).await {
            Err(kube::Error::Api(e)) => assert_eq!(e.code, 401),
            other => panic!("a wrong token must get 401, got {other:?}"),
        }
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let name = unique_name("apipod");
    // The pod's uid once created, for the cleanup whatever happens.
    let created_uid: Arc<Mutex<Option<String>>> = Arc::default();

    let outcome = tokio::spawn({
        let (nodes, leases, pods, log, node, name, endpoint, image) = (
            nodes.clone(),
            leases.clone(),
            pods.clone(),
            log.clone(),
            node.clone(),
            name.clone(),
            endpoint.clone(),
            tb.busybox_image.clone(),
        );
        let created_uid = created_uid.clone();
        async move {
            // The node registers and turns Ready, with our label.
            let n = wait_for("the node to be Ready", &log, || async {
                let n = nodes.get_opt(&node).await.ok()??;
                let ready = n
                    .status
                    .as_ref()?
                    .conditions
                    .as_ref()?
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                ready.then_some(n)
            })
            .await;
            let labels = n.metadata.labels.clone().unwrap_or_default();
            assert_eq!(labels.get("fixture").map(String::as_str), Some("yes"));
            let runtime = n
                .status
                .as_ref()
                .and_then(|s| s.node_info.as_ref())
                .map(|i| i.container_runtime_version.clone())
                .unwrap_or_default();
            assert!(
                runtime.starts_with("docker://") || runtime.starts_with("containerd://"),
                "{runtime}"
            );

            // The lease is renewed (every second with a 4 s lease).
            let renew = |l: Lease| l.spec.and_then(|s| s.renew_time).map(|t| t.0);
            let first = wait_for("the lease", &log, || async {
                renew(leases.get_opt(&node).await.ok()??)
            })
            .await;
            wait_for("a lease renewal", &log, || async {
                let t = renew(leases.get_opt(&node).await.ok()??)?;
                (t > first).then_some(())
            })
            .await;

            // A pod bound to the node runs; its status reaches the API.
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"nodeName": node, "terminationGracePeriodSeconds": 2,
                         "containers": [{"name": "app", "image": image,
                                         "imagePullPolicy": "IfNotPresent",
                                         "command": ["sleep", "3600"]}]}
            }))
            .expect("pod");
            let created = pods
                .create(&PostParams::default(), &pod)
                .await
                .expect("create pod");
            let pod_uid = created.metadata.uid.clone().expect("uid");
            *created_uid.lock() = Some(pod_uid.clone());
            wait_for("the pod Running in the API", &log, || async {
                let p = pods.get_opt(&name).await.ok()??;
                let st = p.status?;
                let ready = st
                    .container_statuses
                    .unwrap_or_default()
                    .iter()
                    .all(|c| c.ready);
                (st.phase.as_deref() == Some("Running") && ready).then_some(())
            })
            .await;
            let sandboxes = runtime_sandboxes(&endpoint, &pod_uid)
                .await
                .map(|s| s.len());
            let containers = runtime_containers(&endpoint, &pod_uid)
                .await
                .map(|c| c.len());
            assert_eq!(
                (sandboxes, containers),
                (Some(1), Some(1)),
                "the runtime runs the pod"
            );

            // Graceful deletion: terminated, then the kubelet deletes the object.
            delete_pod_and_wait(&pods, &name, &log).await;
            wait_for("the runtime to drop the pod's containers", &log, || async {
                let containers = runtime_containers(&endpoint, &pod_uid).await?;
                containers.is_empty().then_some(())
            })
            .await;
            pod_uid
        }
    })
    .await;
    stop_kubelet(&mut child).await;
    // Whatever happened, leave nothing of this pod in the runtime.
    let uid = created_uid.lock().clone();
    cleanup_all(kind, &tb, &uid.into_iter().collect::<Vec<_>>()).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_api_mode_containerd() {
    api_mode(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_api_mode_dockershim() {
    api_mode(RuntimeKind::Dockershim).await;
}
