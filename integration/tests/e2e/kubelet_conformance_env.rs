//! End to end: two [Conformance] specs about a container's environment, against the `kubelet`
//! BINARY in API-server mode (the API server fixture) on both runtimes (containerd's CRI and
//! the embedded dockershim):
//! - "[sig-node] Pods should contain environment variables for services": the docker-link
//!   service variables (`{SVC}_SERVICE_HOST`, `{SVC}_SERVICE_PORT[_{NAME}]`, `{SVC}_PORT`,
//!   `{SVC}_PORT_{port}_{PROTO}[_PROTO|_PORT|_ADDR]`) of the services with a cluster IP in the
//!   pod's namespace, and of the master service `kubernetes` in `default`; none from other
//!   namespaces or of headless services; the pod's own variable wins; with
//!   `enableServiceLinks: false` only the master service's;
//! - "[sig-node] Variable Expansion should allow substituting values in a volume subpath": a
//!   `subPathExpr` of `$(POD_NAME)` (downward API) mounts that directory of the volume; a
//!   `subPathExpr` naming a variable the container does not have leaves the container waiting
//!   with `CreateContainerConfigError` "missing value for X" and a `Failed` event, as upstream.

use crate::kubelet_support;

use std::collections::BTreeMap;
use std::sync::Arc;

use integration::apiserver::ApiServer;
use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use k8s_openapi::api::core::v1::{Event, Pod, Service};
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

/// A kubelet in API-server mode against a fresh fixture, and clients of the fixture.
struct Setup {
    server: Arc<ApiServer>,
    k: Kubelet,
    client: Client,
}

async fn setup(kind: RuntimeKind, tb: &integration::testbed::Testbed, prefix: &str) -> Setup {
    let flags = [
        "--sync-frequency",
        "2s",
        "--eviction-hard",
        "memory.available<100Mi",
    ]
    .map(String::from);
    let (server, k, client) = api_mode_kubelet(tb, kind, prefix, &flags).await;
    Setup { server, k, client }
}

fn service(ns: &str, name: &str, cluster_ip: &str, ports: serde_json::Value) -> Service {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"clusterIP": cluster_ip, "ports": ports, "selector": {"app": name}}
    }))
    .expect("service")
}

/// `env` output as a map.
fn parse_env(out: &str) -> BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The service variables (those of `prefixes`) of `env`.
fn with_prefixes(env: &BTreeMap<String, String>, prefixes: &[&str]) -> BTreeMap<String, String> {
    env.iter()
        .filter(|(k, _)| prefixes.iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn expected(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const KUBERNETES_VARS: &[(&str, &str)] = &[
    ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
    ("KUBERNETES_SERVICE_PORT", "443"),
    ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
    ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
    ("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"),
    ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
    ("KUBERNETES_PORT_443_TCP_PORT", "443"),
    ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"),
];

async fn service_env(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_conformance_service_env[{}]", kind.name()));
    let Setup {
        server,
        mut k,
        client,
    } = setup(kind, &tb, "klsvcenv").await;
    let ns = unique_name("svcenv");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let (linked, unlinked) = (unique_name("client"), unique_name("unlinked"));
    let outcome = tokio::spawn({
        let (log, node, endpoint, image) = (
            k.log.clone(),
            k.node.clone(),
            k.endpoint(&tb),
            tb.busybox_image.clone(),
        );
        let (client, ns, pods, created) = (client.clone(), ns.clone(), pods.clone(), created.clone());
        let (linked, unlinked) = (linked.clone(), unlinked.clone());
        let _server = server.clone();
        async move {
            // The master service, a service of the pod's namespace with two ports (the
            // conformance test's `fooservice` on 8765, plus a named UDP one), a headless one,
            // and one of another namespace.
            let create = |s: Service| {
                let client = client.clone();
                async move {
                    let ns = s.metadata.namespace.clone().unwrap_or_default();
                    let api: Api<Service> = Api::namespaced(client, &ns);
                    api.create(&PostParams::default(), &s)
                        .await
                        .expect("create service");
                }
            };
            create(service(
                "default",
                "kubernetes",
                "10.96.0.1",
                serde_json::json!([{"name": "https", "port": 443, "protocol": "TCP"}]),
            ))
            .await;
            create(service(
                &ns,
                "fooservice",
                "10.96.12.34",
                serde_json::json!([
                    {"name": "http", "port": 8765, "protocol": "TCP", "targetPort": 8080},
                    {"name": "dns-udp", "port": 53, "protocol": "UDP"}
                ]),
            ))
            .await;
            create(service(
                &ns,
                "headless",
                "None",
                serde_json::json!([{"port": 80}]),
            ))
            .await;
            create(service(
                &unique_name("otherns"),
                "elsewhere",
                "10.96.99.99",
                serde_json::json!([{"port": 80}]),
            ))
            .await;

            let pod = |name: &str, links: Option<bool>| -> Pod {
                let mut spec = serde_json::json!({
                    "nodeName": node, "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "env3cont", "image": image, "imagePullPolicy": "IfNotPresent",
                        "command": ["sleep", "3600"],
                        "env": [
                            {"name": "OWN", "value": "$(FOOSERVICE_SERVICE_HOST):$(FOOSERVICE_SERVICE_PORT)"},
                            {"name": "FOOSERVICE_SERVICE_PORT_DNS_UDP", "value": "mine"}
                        ]
                    }]
                });
                if let Some(l) = links {
                    spec["enableServiceLinks"] = serde_json::json!(l);
                }
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "namespace": ns},
                    "spec": spec
                }))
                .expect("pod")
            };
            let mut uids = BTreeMap::new();
            for (name, links) in [(&linked, None), (&unlinked, Some(false))] {
                let p = pods
                    .create(&PostParams::default(), &pod(name, links))
                    .await
                    .expect("create pod");
                let uid = p.metadata.uid.expect("uid");
                created.lock().push(uid.clone());
                uids.insert(name.clone(), uid);
            }
            for name in [&linked, &unlinked] {
                wait_for(&format!("pod {name} Running"), &log, || async {
                    (phase(&pods.get_opt(name).await.ok()??) == "Running").then_some(())
                })
                .await;
            }
            let prefixes = ["FOOSERVICE_", "KUBERNETES_", "HEADLESS_", "ELSEWHERE_", "OWN"];

            let env = parse_env(&exec(&endpoint, &uids[&linked], "env").await.expect("env"));
            let mut want = expected(&[
                ("OWN", "10.96.12.34:8765"),
                ("FOOSERVICE_SERVICE_HOST", "10.96.12.34"),
                ("FOOSERVICE_SERVICE_PORT", "8765"),
                ("FOOSERVICE_SERVICE_PORT_HTTP", "8765"),
                ("FOOSERVICE_SERVICE_PORT_DNS_UDP", "mine"),
                ("FOOSERVICE_PORT", "tcp://10.96.12.34:8765"),
                ("FOOSERVICE_PORT_8765_TCP", "tcp://10.96.12.34:8765"),
                ("FOOSERVICE_PORT_8765_TCP_PROTO", "tcp"),
                ("FOOSERVICE_PORT_8765_TCP_PORT", "8765"),
                ("FOOSERVICE_PORT_8765_TCP_ADDR", "10.96.12.34"),
                ("FOOSERVICE_PORT_53_UDP", "udp://10.96.12.34:53"),
                ("FOOSERVICE_PORT_53_UDP_PROTO", "udp"),
                ("FOOSERVICE_PORT_53_UDP_PORT", "53"),
                ("FOOSERVICE_PORT_53_UDP_ADDR", "10.96.12.34"),
            ]);
            want.extend(expected(KUBERNETES_VARS));
            assert_eq!(with_prefixes(&env, &prefixes), want, "service links on");

            let env = parse_env(&exec(&endpoint, &uids[&unlinked], "env").await.expect("env"));
            let mut want = expected(&[
                ("OWN", "$(FOOSERVICE_SERVICE_HOST):$(FOOSERVICE_SERVICE_PORT)"),
                ("FOOSERVICE_SERVICE_PORT_DNS_UDP", "mine"),
            ]);
            want.extend(expected(KUBERNETES_VARS));
            assert_eq!(
                with_prefixes(&env, &prefixes),
                want,
                "enableServiceLinks: false: the master service only"
            );
        }
    })
    .await;
    let uids = created.lock().clone();
    k.finish(&tb, &pods, [&linked, &unlinked], &uids, outcome)
        .await;
    drop(server);
}

/// The waiting (reason, message) of the pod's first container.
fn waiting(p: &Pod) -> Option<(String, String)> {
    let w = p
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .waiting
        .clone()?;
    Some((w.reason.unwrap_or_default(), w.message.unwrap_or_default()))
}

async fn subpath_expr(kind: RuntimeKind) {
    let tb = require_testbed!(&format!(
        "kubelet_conformance_subpath_expr[{}]",
        kind.name()
    ));
    let Setup {
        server,
        mut k,
        client,
    } = setup(kind, &tb, "klspexpr").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let (good, bad) = (unique_name("var-expansion"), unique_name("var-missing"));
    let outcome = tokio::spawn({
        let (log, node, endpoint, image) = (
            k.log.clone(),
            k.node.clone(),
            k.endpoint(&tb),
            tb.busybox_image.clone(),
        );
        let (client, pods, created) = (client.clone(), pods.clone(), created.clone());
        let (good, bad) = (good.clone(), bad.clone());
        async move {
            let pod = |name: &str, expr: &str| -> Pod {
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {
                        "nodeName": node, "terminationGracePeriodSeconds": 1,
                        "volumes": [{"name": "workdir1", "emptyDir": {}}],
                        "containers": [{
                            "name": "dapi-container", "image": image,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", "echo written > /logscontainer/file; exec sleep 3600"],
                            "env": [{"name": "POD_NAME", "valueFrom":
                                {"fieldRef": {"fieldPath": "metadata.name"}}}],
                            "volumeMounts": [
                                {"name": "workdir1", "mountPath": "/logscontainer",
                                 "subPathExpr": expr},
                                {"name": "workdir1", "mountPath": "/testcontainer"}
                            ]
                        }]
                    }
                }))
                .expect("pod")
            };

            // $(POD_NAME): the volume's directory of that name.
            let p = pods
                .create(&PostParams::default(), &pod(&good, "$(POD_NAME)"))
                .await
                .expect("create pod");
            let uid = p.metadata.uid.expect("uid");
            created.lock().push(uid.clone());
            wait_for("the subPathExpr pod Running", &log, || async {
                (phase(&pods.get_opt(&good).await.ok()??) == "Running").then_some(())
            })
            .await;
            let seen = wait_for("the file written through the subPathExpr mount", &log, || {
                let (endpoint, uid, good) = (endpoint.clone(), uid.clone(), good.clone());
                async move {
                    exec(
                        &endpoint,
                        &uid,
                        &format!("test -d /testcontainer/{good} && cat /testcontainer/{good}/file"),
                    )
                    .await
                }
            })
            .await;
            assert_eq!(seen, "written\n");

            // $(MISSING): the container waits with CreateContainerConfigError.
            let p = pods
                .create(&PostParams::default(), &pod(&bad, "$(POD_NAME)/$(MISSING)"))
                .await
                .expect("create pod");
            let bad_uid = p.metadata.uid.expect("uid");
            created.lock().push(bad_uid.clone());
            let (reason, message) = wait_for(
                "the container waiting with CreateContainerConfigError",
                &log,
                || async {
                    let w = waiting(&pods.get_opt(&bad).await.ok()??)?;
                    (w.0 == "CreateContainerConfigError").then_some(w)
                },
            )
            .await;
            assert_eq!(
                (reason.as_str(), message.as_str()),
                ("CreateContainerConfigError", "missing value for MISSING")
            );
            let events: Api<Event> = Api::namespaced(client.clone(), "default");
            wait_for("the Failed event of the missing variable", &log, || async {
                let list = events.list(&Default::default()).await.ok()?;
                list.items
                    .iter()
                    .filter(|e| e.involved_object.uid.as_deref() == Some(bad_uid.as_str()))
                    .any(|e| {
                        e.reason.as_deref() == Some("Failed")
                            && e.message.as_deref() == Some("Error: missing value for MISSING")
                    })
                    .then_some(())
            })
            .await;
            assert!(
                runtime_containers(&endpoint, &bad_uid)
                    .await
                    .unwrap_or_default()
                    .is_empty(),
                "no container was created"
            );
            assert_eq!(phase(&pods.get(&bad).await.expect("get")), "Pending");
        }
    })
    .await;
    let uids = created.lock().clone();
    k.finish(&tb, &pods, [&good, &bad], &uids, outcome).await;
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_service_env_containerd() {
    service_env(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_service_env_dockershim() {
    service_env(RuntimeKind::Dockershim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_subpath_expr_containerd() {
    subpath_expr(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_conformance_subpath_expr_dockershim() {
    subpath_expr(RuntimeKind::Dockershim).await;
}
