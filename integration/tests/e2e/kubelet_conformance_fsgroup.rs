//! End to end: the pod's `securityContext.fsGroup` on secret and projected volumes, against
//! the `kubelet` BINARY in API-server mode (the API server fixture) on both runtimes
//! (containerd's CRI and the embedded dockershim), as the [Conformance] specs "Secrets should
//! be consumable from pods in volume as non-root with defaultMode and fsGroup set" and
//! "Projected secret should be consumable from pods in volume as non-root with defaultMode and
//! fsGroup set": a container running as uid 1000 with fsGroup 1001 reads a secret's file
//! mounted with `defaultMode: 0440`; the file belongs to group 1001 with mode `-r--r-----`
//! (upstream `SetVolumeOwnership`), and the container has 1001 among its groups.

use crate::kubelet_support;

use std::sync::Arc;

use integration::apiserver::ApiServer;
use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::PostParams;
use kube::{Api, Client};
use kubelet_support::*;
use parking_lot::Mutex;

/// `sh -c script` in the pod's running container; its stdout when it succeeded.
async fn exec(endpoint: &str, uid: &str, script: &str) -> Option<String> {
    let (code, out, _) = exec_in_pod(endpoint, uid, &["sh", "-c", script]).await?;
    (code == 0).then_some(out)
}

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

async fn setup(
    kind: RuntimeKind,
    tb: &integration::testbed::Testbed,
) -> (Arc<ApiServer>, Kubelet, Client) {
    let flags = [
        "--sync-frequency",
        "2s",
        "--eviction-hard",
        "memory.available<100Mi",
    ]
    .map(String::from);
    api_mode_kubelet(tb, kind, "klfsgroup", &flags).await
}

async fn fs_group_secret_volumes(kind: RuntimeKind) {
    let tb = require_testbed!(&format!(
        "kubelet_conformance_fsgroup_secret[{}]",
        kind.name()
    ));
    let (server, mut k, client) = setup(kind, &tb).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let name = unique_name("pod-secrets");
    let outcome = tokio::spawn({
        let (log, node, endpoint, image) = (
            k.log.clone(),
            k.node.clone(),
            k.endpoint(&tb),
            tb.busybox_image.clone(),
        );
        let (pods, created, name) = (pods.clone(), created.clone(), name.clone());
        async move {
            let secret_name = unique_name("secret-test");
            let secret: Secret = serde_json::from_value(serde_json::json!({
                "metadata": {"name": secret_name, "namespace": "default"},
                "data": {"data-1": "dmFsdWUtMQ=="}
            }))
            .expect("secret");
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .expect("create secret");
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "nodeName": node, "terminationGracePeriodSeconds": 1,
                    "securityContext": {"runAsUser": 1000, "fsGroup": 1001},
                    "volumes": [
                        {"name": "secret-volume", "secret":
                            {"secretName": secret_name, "defaultMode": 0o440}},
                        {"name": "projected-secret-volume", "projected": {
                            "defaultMode": 0o440,
                            "sources": [{"secret": {"name": secret_name}}]}}
                    ],
                    "containers": [{
                        "name": "secret-volume-test", "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sleep", "3600"],
                        "volumeMounts": [
                            {"name": "secret-volume", "mountPath": "/etc/secret-volume",
                             "readOnly": true},
                            {"name": "projected-secret-volume",
                             "mountPath": "/etc/projected-secret-volume", "readOnly": true}
                        ]
                    }]
                }
            }))
            .expect("pod");
            let p = pods
                .create(&PostParams::default(), &pod)
                .await
                .expect("create pod");
            let uid = p.metadata.uid.expect("uid");
            created.lock().push(uid.clone());
            wait_for("the fsGroup pod Running", &log, || async {
                (phase(&pods.get_opt(&name).await.ok()??) == "Running").then_some(())
            })
            .await;
            let diag = exec(
                &endpoint,
                &uid,
                "grep Groups /proc/self/status; ls -lnR /etc/secret-volume/ /etc/projected-secret-volume/",
            )
            .await
            .unwrap_or_default();
            let groups = exec(&endpoint, &uid, "id -u; id -G")
                .await
                .expect("id in the container");
            let groups = format!("{groups}\n--- {diag}");
            let mut lines = groups.lines();
            assert_eq!(lines.next(), Some("1000"), "{groups}");
            assert!(
                lines
                    .next()
                    .is_some_and(|g| g.split_whitespace().any(|g| g == "1001")),
                "fsGroup among the container's groups: {groups}"
            );
            for dir in ["/etc/secret-volume", "/etc/projected-secret-volume"] {
                let out = exec(
                    &endpoint,
                    &uid,
                    &format!("cat {dir}/data-1; echo; ls -lnL {dir}/data-1"),
                )
                .await
                .unwrap_or_else(|| panic!("{dir}/data-1 unreadable as uid 1000"));
                let mut lines = out.lines();
                assert_eq!(lines.next(), Some("value-1"), "{dir}: {out}");
                let ls: Vec<&str> = lines
                    .next()
                    .unwrap_or_default()
                    .split_whitespace()
                    .collect();
                // The file behind the `data-1 -> ..data/data-1` symlink (`-L`, as upstream's
                // mounttest stats it): mode, links, owner, group, …
                assert_eq!(ls.first().copied(), Some("-r--r-----"), "{dir}: {out}");
                assert_eq!(ls.get(3).copied(), Some("1001"), "{dir}: {out}");
            }
        }
    })
    .await;
    let uids = created.lock().clone();
    k.finish(&tb, &pods, [&name], &uids, outcome).await;
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_fsgroup_secret_containerd() {
    fs_group_secret_volumes(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_fsgroup_secret_dockershim() {
    fs_group_secret_volumes(RuntimeKind::Dockershim).await;
}
