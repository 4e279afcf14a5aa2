//! End to end: API-backed pod features of the `kubelet` BINARY in API-server mode against the
//! API server fixture, on both runtimes (containerd's CRI and the embedded dockershim):
//! - the pod's events (Pulled, Created, Started) reach the API;
//! - a static pod gets a mirror pod (the `kubernetes.io/config.mirror` annotation, owned by the
//!   Node, its status Running) that comes back after it is deleted, and goes with the static pod;
//! - a projected service account volume (token from TokenRequest, `kube-root-ca.crt`,
//!   namespace) is mounted;
//! - a configMap volume and a secret env var carry their values, and a configMap change reaches
//!   the running container's volume; an image from the authenticated registry is pulled with
//!   the pod's imagePullSecrets;
//! - the pod watch survives a forced 410 Gone (compacted history) and dropped connections
//!   without restarting any container, and still delivers new pods.

use crate::kubelet_support;

use std::sync::Arc;

use cri_proto::runtime::v1 as cri;
use integration::apiserver::ApiServer;
use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Config};
use kubelet_support::*;
use parking_lot::Mutex;

/// `sh -c script` in the pod's running container; its stdout when it succeeded.
async fn exec(endpoint: &str, uid: &str, script: &str) -> Option<String> {
    let (code, out, _) = exec_in_pod(endpoint, uid, &["sh", "-c", script]).await?;
    (code == 0).then_some(out)
}

/// Running container ids of `uid`, sorted.
async fn running(endpoint: &str, uid: &str) -> Vec<String> {
    let mut ids: Vec<String> = runtime_containers(endpoint, uid)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.state == cri::ContainerState::ContainerRunning as i32)
        .map(|c| c.id)
        .collect();
    ids.sort();
    ids
}

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

async fn api_features(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_api_features[{}]", kind.name()));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = Arc::new(ApiServer::start().await.expect("fixture"));
    let mut k = Kubelet::new(kind, "klfeat");
    let kubeconfig = k.dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).expect("kubeconfig");
    let static_uid = format!("{}-static", k.node);
    k.write_manifest(
        "static.yaml",
        &pod_manifest(
            "static",
            &static_uid,
            &tb.busybox_image,
            "exec sleep 3600",
            "",
        ),
    );
    k.spawn(
        &tb,
        &[
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--node-status-update-frequency".into(),
            "1s".into(),
            "--sync-frequency".into(),
            "2s".into(),
            "--eviction-hard".into(),
            "memory.available<100Mi".into(),
        ],
    );
    let client = Client::try_from(Config::new(server.url().parse().expect("url"))).expect("client");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let (app, late) = (unique_name("feat-app"), unique_name("feat-late"));
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let outcome = tokio::spawn({
        let (log, node, endpoint, image) = (
            k.log.clone(),
            k.node.clone(),
            k.endpoint(&tb),
            tb.busybox_image.clone(),
        );
        let manifests = k.manifests.clone();
        let (pods, cms, secrets, app, late) = (
            pods.clone(),
            cms.clone(),
            secrets.clone(),
            app.clone(),
            late.clone(),
        );
        let created = created.clone();
        let server = server.clone();
        let static_uid = static_uid.clone();
        let (auth_registry, auth_user, auth_password) = (
            tb.auth_registry.clone(),
            tb.auth_user.clone(),
            tb.auth_password.clone(),
        );
        async move {
            // 1. The static pod's mirror pod.
            let mirror_name = format!("static-{node}");
            let mirror = wait_for("the mirror pod, Running", &log, || async {
                let p = pods.get_opt(&mirror_name).await.ok()??;
                (phase(&p) == "Running").then_some(p)
            })
            .await;
            let ann = mirror.metadata.annotations.clone().unwrap_or_default();
            assert_eq!(
                ann.get("kubernetes.io/config.mirror").map(String::as_str),
                Some(static_uid.as_str()),
                "mirror annotation holds the static pod's hash"
            );
            let owner = mirror.metadata.owner_references.clone().unwrap_or_default();
            assert!(
                owner.iter().any(|o| o.kind == "Node" && o.name == node),
                "{owner:?}"
            );
            let first_uid = mirror.metadata.uid.clone().unwrap_or_default();
            let static_ids = running(&endpoint, &static_uid).await;
            pods.delete(&mirror_name, &DeleteParams::default())
                .await
                .expect("delete mirror");
            wait_for("the mirror pod recreated", &log, || async {
                let p = pods.get_opt(&mirror_name).await.ok()??;
                (p.metadata.uid.as_deref() != Some(first_uid.as_str())).then_some(())
            })
            .await;
            assert_eq!(
                running(&endpoint, &static_uid).await,
                static_ids,
                "deleting the mirror pod leaves the static pod alone"
            );

            // 2. A configMap volume and a secret env var.
            let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("{app}-cfg")},
                "data": {"greeting": "hello"}
            }))
            .expect("cm");
            cms.create(&PostParams::default(), &cm)
                .await
                .expect("create cm");
            let root_ca: ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "kube-root-ca.crt"},
                "data": {"ca.crt": "fixture-ca"}
            }))
            .expect("root ca");
            let _ = cms.create(&PostParams::default(), &root_ca).await;
            let secret: Secret = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("{app}-sec")},
                "data": {"password": "czNjcmV0"}
            }))
            .expect("secret");
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .expect("create secret");
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": app, "namespace": "default"},
                "spec": {
                    "nodeName": node, "terminationGracePeriodSeconds": 1,
                    "volumes": [
                        {"name": "cfg", "configMap": {"name": format!("{app}-cfg")}},
                        // What the ServiceAccount admission plugin adds to every pod.
                        {"name": "kube-api-access", "projected": {"sources": [
                            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                            {"configMap": {"name": "kube-root-ca.crt",
                                           "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                            {"downwardAPI": {"items": [{"path": "namespace",
                                "fieldRef": {"fieldPath": "metadata.namespace"}}]}}
                        ]}}
                    ],
                    "containers": [{
                        "name": "app", "image": image, "imagePullPolicy": "IfNotPresent",
                        "command": ["sleep", "3600"],
                        "env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef":
                            {"name": format!("{app}-sec"), "key": "password"}}}],
                        "volumeMounts": [
                            {"name": "cfg", "mountPath": "/etc/cfg"},
                            {"name": "kube-api-access", "readOnly": true,
                             "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
                        ]
                    }]
                }
            }))
            .expect("pod");
            let p = pods
                .create(&PostParams::default(), &pod)
                .await
                .expect("create pod");
            let app_uid = p.metadata.uid.expect("uid");
            created.lock().push(app_uid.clone());
            wait_for("the app pod Running", &log, || async {
                (phase(&pods.get_opt(&app).await.ok()??) == "Running").then_some(())
            })
            .await;
            let seen = exec(
                &endpoint,
                &app_uid,
                "cat /etc/cfg/greeting; echo; echo $PASSWORD",
            )
            .await
            .expect("exec");
            assert_eq!(seen, "hello\ns3cret\n");
            let sa = exec(
                &endpoint,
                &app_uid,
                "cd /var/run/secrets/kubernetes.io/serviceaccount && cat token; echo; cat ca.crt; echo; cat namespace",
            )
            .await
            .expect("exec");
            let lines: Vec<&str> = sa.lines().collect();
            assert!(
                lines.first().is_some_and(|t| t.starts_with("fixture.default.default.")),
                "a TokenRequest token for the default service account: {sa}"
            );
            assert_eq!(&lines[1..], ["fixture-ca", "default"], "{sa}");
            let app_ids = running(&endpoint, &app_uid).await;
            // Its events: pulled (or present), created, started, naming the container.
            let events: Api<Event> = Api::namespaced(pods.clone().into_client(), "default");
            wait_for("the app pod's events", &log, || async {
                let list = events.list(&Default::default()).await.ok()?;
                let reasons: Vec<String> = list
                    .items
                    .iter()
                    .filter(|e| e.involved_object.uid.as_deref() == Some(app_uid.as_str()))
                    .filter(|e| {
                        e.involved_object.field_path.as_deref() == Some("spec.containers{app}")
                    })
                    .filter_map(|e| e.reason.clone())
                    .collect();
                ["Pulled", "Created", "Started"]
                    .iter()
                    .all(|r| reasons.iter().any(|x| x == r))
                    .then_some(())
            })
            .await;
            cms.patch(
                &format!("{app}-cfg"),
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"data": {"greeting": "bonjour"}})),
            )
            .await
            .expect("patch cm");
            wait_for("the configMap change in the volume", &log, || async {
                let s = exec(&endpoint, &app_uid, "cat /etc/cfg/greeting").await?;
                (s == "bonjour").then_some(())
            })
            .await;
            assert_eq!(
                running(&endpoint, &app_uid).await,
                app_ids,
                "no restart for it"
            );

            // 2b. An image from the authenticated registry, pulled with the pod's
            // imagePullSecrets.
            use base64::Engine as _;
            let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
            let docker_config = serde_json::json!({"auths": {auth_registry.clone(): {
                "auth": b64(&format!("{auth_user}:{auth_password}"))
            }}})
            .to_string();
            let regcred: Secret = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("{app}-regcred")},
                "type": "kubernetes.io/dockerconfigjson",
                "data": {".dockerconfigjson": b64(&docker_config)}
            }))
            .expect("regcred");
            secrets
                .create(&PostParams::default(), &regcred)
                .await
                .expect("create regcred");
            let private: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("{app}-private"), "namespace": "default"},
                "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                         "imagePullSecrets": [{"name": format!("{app}-regcred")}],
                         "containers": [{"name": "app",
                                         "image": format!("{auth_registry}/busybox:latest"),
                                         "imagePullPolicy": "Always",
                                         "command": ["sleep", "3600"]}]}
            }))
            .expect("pod");
            let p = pods
                .create(&PostParams::default(), &private)
                .await
                .expect("create private pod");
            created
                .lock()
                .push(p.metadata.uid.clone().unwrap_or_default());
            wait_for(
                "the pod pulled with imagePullSecrets Running",
                &log,
                || async {
                    (phase(&pods.get_opt(&format!("{app}-private")).await.ok()??) == "Running")
                        .then_some(())
                },
            )
            .await;

            // 3. The watch survives 410 Gone and dropped connections.
            server.compact();
            server.drop_watches();
            tokio::time::sleep(std::time::Duration::from_secs(3)).await;
            server.drop_watches();
            let p: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": late, "namespace": "default"},
                "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "app", "image": image,
                                         "imagePullPolicy": "IfNotPresent",
                                         "command": ["sleep", "3600"]}]}
            }))
            .expect("pod");
            let p = pods
                .create(&PostParams::default(), &p)
                .await
                .expect("create late");
            created
                .lock()
                .push(p.metadata.uid.clone().unwrap_or_default());
            wait_for(
                "a pod created after the watch broke Running",
                &log,
                || async { (phase(&pods.get_opt(&late).await.ok()??) == "Running").then_some(()) },
            )
            .await;
            assert_eq!(
                running(&endpoint, &app_uid).await,
                app_ids,
                "no container restarted"
            );
            assert_eq!(running(&endpoint, &static_uid).await, static_ids);

            // 4. The mirror pod goes with its static pod.
            std::fs::remove_file(manifests.join("static.yaml")).expect("remove manifest");
            wait_for("the mirror pod removed", &log, || async {
                match pods.get_opt(&mirror_name).await {
                    Ok(None) => Some(()),
                    _ => None,
                }
            })
            .await;
        }
    })
    .await;
    for n in [app.clone(), late.clone(), format!("{app}-private")] {
        let _ = pods.delete(&n, &DeleteParams::default()).await;
    }
    let mut uids = created.lock().clone();
    uids.push(static_uid.clone());
    k.shutdown(&tb, &uids).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_api_features_containerd() {
    api_features(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_api_features_dockershim() {
    api_features(RuntimeKind::Dockershim).await;
}
