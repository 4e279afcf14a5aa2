//! End to end: the configMap and secret manager of the `kubelet` BINARY in API-server mode
//! (upstream's default `configMapAndSecretChangeDetectionStrategy: Watch`) against the API
//! server fixture, on both runtimes (containerd's CRI and the embedded dockershim):
//! - several pods using one configMap (volume and env) make one list and one watch of it
//!   (fieldSelector `metadata.name=<name>`), no GET per pod sync: the fixture's request log
//!   does not grow while the pods keep syncing every 2 s;
//! - a configMap volume follows an update of the configMap (seen by the watch, written at the
//!   next sync) without a container restart;
//! - a pod referring to a missing configMap gets upstream's `FailedMount` event
//!   (`configmap "<name>" not found`), and starts once the configMap is created.

use crate::kubelet_support;

use std::sync::Arc;

use integration::apiserver::ApiServer;
use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Config};
use kubelet_support::*;
use parking_lot::Mutex;

/// How many pods share the configMap.
const PODS: usize = 4;

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

/// The reads of configMap `name` in `default` the fixture has served: (GETs of the object,
/// lists selecting it, watches selecting it).
fn reads(server: &ApiServer, name: &str) -> (usize, usize, usize) {
    let object = format!("/api/v1/namespaces/default/configmaps/{name}");
    let selector = format!("metadata.name%3D{name}");
    let (mut gets, mut lists, mut watches) = (0, 0, 0);
    for r in server.requests().iter().filter(|r| r.method == "GET") {
        if r.path == object {
            gets += 1;
        } else if r.path == "/api/v1/namespaces/default/configmaps"
            && (r.query.contains(&selector) || r.query.contains(&format!("metadata.name={name}")))
        {
            if r.query.contains("watch=true") || r.query.contains("watch=1") {
                watches += 1;
            } else {
                lists += 1;
            }
        }
    }
    (gets, lists, watches)
}

fn app_pod(name: &str, node: &str, image: &str, cm: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node, "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "cfg", "configMap": {"name": cm}}],
            "containers": [{
                "name": "app", "image": image, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
                "env": [{"name": "GREETING", "valueFrom": {"configMapKeyRef":
                    {"name": cm, "key": "greeting"}}}],
                "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}]
            }]
        }
    }))
    .expect("pod")
}

async fn object_watch(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_object_watch[{}]", kind.name()));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = Arc::new(ApiServer::start().await.expect("fixture"));
    let mut k = Kubelet::new(kind, "klobjw");
    let kubeconfig = k.dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).expect("kubeconfig");
    k.spawn(
        &tb,
        &[
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--sync-frequency".into(),
            "2s".into(),
        ],
    );
    let client = Client::try_from(Config::new(server.url().parse().expect("url"))).expect("client");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let base = unique_name("objw");
    let names: Vec<String> = (0..PODS)
        .map(|i| format!("{base}-{i}"))
        .chain([format!("{base}-late")])
        .collect();
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let outcome = tokio::spawn({
        let (log, node, endpoint, image) = (
            k.log.clone(),
            k.node.clone(),
            k.endpoint(&tb),
            tb.busybox_image.clone(),
        );
        let (pods, cms, names, base) = (pods.clone(), cms.clone(), names.clone(), base.clone());
        let (created, server) = (created.clone(), server.clone());
        async move {
            // 1. PODS pods sharing one configMap: one list and one watch of it.
            let cfg = format!("{base}-cfg");
            let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": {"name": cfg}, "data": {"greeting": "hello"}
            }))
            .expect("cm");
            cms.create(&PostParams::default(), &cm)
                .await
                .expect("create cm");
            let mut uids = Vec::new();
            for n in &names[..PODS] {
                let p = pods
                    .create(&PostParams::default(), &app_pod(n, &node, &image, &cfg))
                    .await
                    .expect("create pod");
                let uid = p.metadata.uid.expect("uid");
                created.lock().push(uid.clone());
                uids.push(uid);
            }
            for n in &names[..PODS] {
                wait_for(&format!("{n} Running"), &log, || async {
                    (phase(&pods.get_opt(n).await.ok()??) == "Running").then_some(())
                })
                .await;
            }
            for uid in &uids {
                let seen = wait_for("an exec in the pod", &log, || {
                    exec(
                        &endpoint,
                        uid,
                        "cat /etc/cfg/greeting; echo; echo $GREETING",
                    )
                })
                .await;
                assert_eq!(seen, "hello\nhello\n", "the volume and the env var");
            }
            // Upstream's atomic-writer layout, as the container sees it through the bind
            // mount: `greeting -> ..data/greeting`, `..data -> ..<UTC timestamp>.<digits>`.
            let data_link = |listing: &str| -> Option<String> {
                listing
                    .lines()
                    .find_map(|l| l.split_once(" ..data -> "))
                    .map(|(_, to)| to.trim().to_string())
            };
            let listing = exec(&endpoint, &uids[0], "ls -la /etc/cfg")
                .await
                .expect("ls in the pod");
            assert!(
                listing.contains(" greeting -> ..data/greeting"),
                "greeting is a symlink into ..data: {listing}"
            );
            let before = data_link(&listing).expect("..data is a symlink");
            assert!(
                before.starts_with("..20") && before.contains('.'),
                "..data names a timestamped directory: {listing}"
            );
            let running = reads(&server, &cfg);
            assert_eq!(running.0, 0, "no GET of the configMap: {running:?}");
            assert!(
                (1..=2).contains(&running.1) && running.2 <= 2,
                "one list and one watch for {PODS} pods: {running:?}"
            );
            // Several periodic syncs (every 2 s) of every pod: no new read.
            tokio::time::sleep(std::time::Duration::from_secs(10)).await;
            let later = reads(&server, &cfg);
            assert_eq!(
                (later.0, later.1),
                (running.0, running.1),
                "the periodic syncs read the watch's cache: {later:?}"
            );

            // 2. An update reaches every pod's volume through the watch, no restart.
            cms.patch(
                &cfg,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"data": {"greeting": "bonjour"}})),
            )
            .await
            .expect("patch cm");
            for uid in &uids {
                wait_for("the configMap change in the volume", &log, || async {
                    let s = exec(&endpoint, uid, "cat /etc/cfg/greeting").await?;
                    (s == "bonjour").then_some(())
                })
                .await;
            }
            for n in &names[..PODS] {
                let p = pods.get(n).await.expect("pod");
                let restarts: i32 = p
                    .status
                    .iter()
                    .flat_map(|s| s.container_statuses.iter().flatten())
                    .map(|c| c.restart_count)
                    .sum();
                assert_eq!(restarts, 0, "{n}: no restart for a volume update");
            }
            let listing = exec(&endpoint, &uids[0], "ls -la /etc/cfg")
                .await
                .expect("ls in the pod");
            let after = data_link(&listing).expect("..data is still a symlink");
            assert_ne!(after, before, "the update swapped ..data: {listing}");
            assert!(
                !listing.contains(&before),
                "the old timestamped directory is gone: {listing}"
            );

            // 3. A missing configMap: upstream's FailedMount, then the pod starts once it
            // exists (the watch sees the creation).
            let late = &names[PODS];
            let missing = format!("{base}-missing");
            let p = pods
                .create(
                    &PostParams::default(),
                    &app_pod(late, &node, &image, &missing),
                )
                .await
                .expect("create late pod");
            let late_uid = p.metadata.uid.expect("uid");
            created.lock().push(late_uid.clone());
            let events: Api<Event> = Api::namespaced(pods.clone().into_client(), "default");
            let want = format!(
                "MountVolume.SetUp failed for volume \"cfg\" : configmap \"{missing}\" not found"
            );
            wait_for("the FailedMount event", &log, || async {
                let list = events.list(&Default::default()).await.ok()?;
                list.items
                    .iter()
                    .filter(|e| e.involved_object.uid.as_deref() == Some(late_uid.as_str()))
                    .any(|e| {
                        e.reason.as_deref() == Some("FailedMount")
                            && e.message.as_deref() == Some(want.as_str())
                    })
                    .then_some(())
            })
            .await;
            assert_eq!(
                reads(&server, &missing).0,
                0,
                "no GET of the missing configMap"
            );
            let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": {"name": missing}, "data": {"greeting": "late"}
            }))
            .expect("cm");
            cms.create(&PostParams::default(), &cm)
                .await
                .expect("create missing cm");
            wait_for("the late pod Running", &log, || async {
                (phase(&pods.get_opt(late).await.ok()??) == "Running").then_some(())
            })
            .await;
            let seen = exec(&endpoint, &late_uid, "cat /etc/cfg/greeting")
                .await
                .expect("exec");
            assert_eq!(seen, "late");
        }
    })
    .await;
    let uids = created.lock().clone();
    k.finish(&tb, &pods, &names, &uids, outcome).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_object_watch_containerd() {
    object_watch(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_object_watch_dockershim() {
    object_watch(RuntimeKind::Dockershim).await;
}
