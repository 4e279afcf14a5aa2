//! End to end: [Conformance] volume specs, against the `kubelet` BINARY in API-server mode (the
//! API server fixture) on both runtimes (containerd's CRI and the embedded dockershim), as the
//! specs run them.
//!
//! "ConfigMap optional updates should be reflected in volume" and "Projected configMap
//! optional updates should be reflected in volume":
//! - two configMaps exist (`delete`, `update`), a third (`create`) does not; a `Never` pod with
//!   three containers mounts each one as an optional volume (one pod with `configMap`
//!   volumes, one with `projected` volumes) and reads its file every second, printing its
//!   content or `Error reading file <path>`;
//! - once the pods run and the logs (`/containerLogs`, as the API server reads them) show the
//!   first contents, `delete` is deleted, `update` loses `data-1` and gains `data-3`, and
//!   `create` is created: each change must reach the running containers' volumes (the logs
//!   say so) with no container restarted and the pods still Running.
//!
//! The many specs that run a `Never` pod printing a volume's files and read its log once it
//! Succeeded (the framework's `TestContainerOutput`: "ConfigMap should be consumable from pods
//! in volume with mappings", "EmptyDir … tmpfs", "Secrets … same name in different
//! namespaces"…): the pod Succeeds, its log holds the output, and it stays finished while the
//! API pod keeps changing (each change a sync): one sandbox (attempt 0) and one container on
//! the runtime, as upstream's `SyncPod` leaves a terminal pod. A second sandbox ran the pod
//! again and the log read found the new attempt's empty log.

use crate::kubelet_logs::{secure_get_status, secure_port_flags};
use crate::kubelet_support;

use std::sync::Arc;

use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kubelet_support::*;
use parking_lot::Mutex;

/// The spec's mount root (one of its two variants) and the containers' loop length.
const MOUNT_ROOT: &str = "/etc/configmap-volumes";
const LOOP_SECONDS: u32 = 600;

fn config_map(name: &str, data: serde_json::Value) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"}, "data": data
    }))
    .expect("configMap")
}

/// The spec's pod: containers `delcm`, `updcm`, `createcm`, each reading its file of an
/// optional volume (`projected` or `configMap`) every second, as agnhost's `mounttest
/// --file_content_in_loop --break_on_expected_content=false` does.
fn pod(name: &str, node: &str, image: &str, projected: bool, cms: [&str; 3]) -> Pod {
    let parts = [
        ("delete", "data-1"),
        ("update", "data-3"),
        ("create", "data-1"),
    ];
    let volumes: Vec<serde_json::Value> = parts
        .iter()
        .zip(cms)
        .map(|((v, _), cm)| {
            if projected {
                serde_json::json!({"name": v, "projected": {"sources": [
                    {"configMap": {"name": cm, "optional": true}}]}})
            } else {
                serde_json::json!({"name": v, "configMap": {"name": cm, "optional": true}})
            }
        })
        .collect();
    let containers: Vec<serde_json::Value> = parts
        .iter()
        .zip(CONTAINERS)
        .map(|((v, file), container)| {
            let path = format!("{MOUNT_ROOT}/{v}/{file}");
            let script = format!(
                "i=0; while [ $i -lt {LOOP_SECONDS} ]; do \
                   if [ -f {path} ]; then echo \"content of file {path}: $(cat {path})\"; \
                   else echo \"Error reading file {path}\"; fi; \
                   i=$((i+1)); sleep 1; done"
            );
            serde_json::json!({
                "name": container, "image": image,
                "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", script],
                "volumeMounts": [{"name": v, "mountPath": format!("{MOUNT_ROOT}/{v}"),
                                  "readOnly": true}]
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node, "terminationGracePeriodSeconds": 1, "restartPolicy": "Never",
            "volumes": volumes, "containers": containers
        }
    }))
    .expect("pod")
}

/// The container names of [`pod`], in the order delete, update, create.
const CONTAINERS: [&str; 3] = ["deletecm", "updatecm", "createcm"];

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

fn restarts(p: &Pod) -> i32 {
    p.status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .map(|c| c.restart_count)
        .sum()
}

/// Waits until the last line of `container`'s log (read through `/containerLogs`) contains
/// `want`: the volume's current state as the container sees it.
async fn log_shows(port: u16, log: &std::path::Path, pod: &str, container: &str, want: &str) {
    let what = format!("{pod}/{container} reading {want:?}");
    wait_for(&what, log, || async {
        let (code, body) =
            secure_get_status(port, &format!("/containerLogs/default/{pod}/{container}")).await?;
        (code == 200 && body.lines().last().is_some_and(|l| l.contains(want))).then_some(())
    })
    .await;
}

async fn optional_updates(kind: RuntimeKind) {
    let tb = require_testbed!(&format!(
        "kubelet_conformance_volume_updates[{}]",
        kind.name()
    ));
    let sport = free_port();
    let mut flags = ["--sync-frequency", "5s"].map(String::from).to_vec();
    flags.extend(secure_port_flags(sport));
    let (server, mut k, client) = api_mode_kubelet(&tb, kind, "klcmupd", &flags).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let base = unique_name("cm-opt");
    let names = [format!("{base}-configmap"), format!("{base}-projected")];
    let outcome = tokio::spawn({
        let (log, node, image) = (k.log.clone(), k.node.clone(), tb.busybox_image.clone());
        let (pods, created, names, base) = (pods.clone(), created.clone(), names.clone(), base);
        async move {
            let [del, upd, new] = ["del", "upd", "create"].map(|s| format!("{base}-{s}"));
            for n in [&del, &upd] {
                cms.create(
                    &PostParams::default(),
                    &config_map(n, serde_json::json!({"data-1": "value-1"})),
                )
                .await
                .expect("create configMap");
            }
            for (name, projected) in names.iter().zip([false, true]) {
                let p = pod(name, &node, &image, projected, [&del, &upd, &new]);
                let p = pods
                    .create(&PostParams::default(), &p)
                    .await
                    .expect("create pod");
                created.lock().push(p.metadata.uid.expect("uid"));
            }
            for name in &names {
                wait_for(&format!("{name} Running"), &log, || async {
                    (phase(&pods.get_opt(name).await.ok()??) == "Running").then_some(())
                })
                .await;
            }
            let [c_del, c_upd, c_new] = CONTAINERS;
            for name in &names {
                log_shows(sport, &log, name, c_new, "Error reading file").await;
                log_shows(sport, &log, name, c_upd, "Error reading file").await;
                log_shows(sport, &log, name, c_del, "value-1").await;
            }

            cms.delete(&del, &DeleteParams::default())
                .await
                .expect("delete configMap");
            cms.replace(
                &upd,
                &PostParams::default(),
                &config_map(&upd, serde_json::json!({"data-3": "value-3"})),
            )
            .await
            .expect("update configMap");
            cms.create(
                &PostParams::default(),
                &config_map(&new, serde_json::json!({"data-1": "value-1"})),
            )
            .await
            .expect("create configMap");

            for name in &names {
                log_shows(sport, &log, name, c_new, "value-1").await;
                log_shows(sport, &log, name, c_upd, "value-3").await;
                log_shows(sport, &log, name, c_del, "Error reading file").await;
            }
            for name in &names {
                let p = pods.get(name).await.expect("pod");
                assert_eq!(phase(&p), "Running", "{name}: still running");
                assert_eq!(restarts(&p), 0, "{name}: no container restarted");
            }
        }
    })
    .await;
    let uids = created.lock().clone();
    k.finish(&tb, &pods, &names, &uids, outcome).await;
    drop(server);
}

async fn run_once_output(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_conformance_run_once[{}]", kind.name()));
    let sport = free_port();
    let mut flags = ["--sync-frequency", "1s"].map(String::from).to_vec();
    flags.extend(secure_port_flags(sport));
    let (server, mut k, client) = api_mode_kubelet(&tb, kind, "klrunonce", &flags).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let name = unique_name("pod-configmaps");
    let outcome = tokio::spawn({
        let (log, node, image) = (k.log.clone(), k.node.clone(), tb.busybox_image.clone());
        let endpoint = k.endpoint(&tb);
        let (pods, created, name) = (pods.clone(), created.clone(), name.clone());
        async move {
            let cm = unique_name("configmap-test-volume-map");
            cms.create(
                &PostParams::default(),
                &config_map(
                    &cm,
                    serde_json::json!({"data-1": "value-1", "data-2": "value-2"}),
                ),
            )
            .await
            .expect("create configMap");
            let p: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "default", "labels": {"round": "0"}},
                "spec": {
                    "nodeName": node, "terminationGracePeriodSeconds": 1,
                    "restartPolicy": "Never",
                    "volumes": [{"name": "configmap-volume", "configMap": {"name": cm,
                        "items": [{"key": "data-2", "path": "path/to/data-2"}]}}],
                    "containers": [{
                        "name": "agnhost-container", "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c",
                            "echo content of file: $(cat /etc/configmap-volume/path/to/data-2)"],
                        "volumeMounts": [{"name": "configmap-volume",
                                          "mountPath": "/etc/configmap-volume"}]
                    }]
                }
            }))
            .expect("pod");
            let p = pods
                .create(&PostParams::default(), &p)
                .await
                .expect("create pod");
            let uid = p.metadata.uid.expect("uid");
            created.lock().push(uid.clone());
            wait_for(&format!("{name} Succeeded"), &log, || async {
                (phase(&pods.get_opt(&name).await.ok()??) == "Succeeded").then_some(())
            })
            .await;
            let path = format!("/containerLogs/default/{name}/agnhost-container");
            let want = "content of file: value-2";
            let (code, body) = secure_get_status(sport, &path).await.expect("logs");
            assert_eq!((code, body.trim()), (200, want), "the log once Succeeded");
            // The API pod changes (each change is a sync of the finished pod) while the
            // kubelet also resyncs it every second.
            for round in 1..=5 {
                pods.patch(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(
                        serde_json::json!({"metadata": {"labels": {"round": round.to_string()}}}),
                    ),
                )
                .await
                .expect("patch pod");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            assert_ran_once(&endpoint, &uid, "the finished pod").await;
            let p = pods.get(&name).await.expect("pod");
            assert_eq!(phase(&p), "Succeeded", "still finished");
            let (code, body) = secure_get_status(sport, &path).await.expect("logs");
            assert_eq!((code, body.trim()), (200, want), "the log stays");
        }
    })
    .await;
    let uids = created.lock().clone();
    k.finish(&tb, &pods, [&name], &uids, outcome).await;
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_run_once_output_containerd() {
    run_once_output(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_run_once_output_dockershim() {
    run_once_output(RuntimeKind::Dockershim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_volume_updates_containerd() {
    optional_updates(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_volume_updates_dockershim() {
    optional_updates(RuntimeKind::Dockershim).await;
}
