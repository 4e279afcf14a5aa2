//! Three `kubelet` BINARIES as three nodes of one cluster (the API server fixture over HTTPS),
//! each on a runtime instance of its own, as upstream requires (two kubelets on one runtime
//! would remove each other's pods as orphans): the embedded dockershim on the test bed's
//! Docker, containerd's CRI, and the embedded dockershim on a second Docker of the test's own
//! (`PrivateDockerd`: own root, socket and bridge).
//!
//! The fixture has no scheduler and no controllers, so the test plays them: it spreads six pods
//! over the nodes by `nodeName`; it drains a node (cordon, delete its pods, recreate them on the
//! other two, as a ReplicaSet would); it kills one kubelet with SIGKILL, sees that node's lease
//! and heartbeats stop while the others' go on (the NotReady transition itself belongs to the
//! controller-manager's node lifecycle controller), and starts it again: it renews its lease
//! and keeps its pods' containers. The API requests each node sends while idle and under churn
//! are counted and printed (docs/benchmarks.md).

use crate::kubelet_support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use integration::apiserver::{ApiServer, Seen};
use integration::dockerd::PrivateDockerd;
use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use integration::testbed::Testbed;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Config};
use kubelet_support::*;
use tokio::process::Child;

/// One node: its kubelet's directories, runtime and process.
struct NodeUnderTest {
    name: String,
    kind: RuntimeKind,
    runtime: Vec<std::ffi::OsString>,
    root: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl NodeUnderTest {
    fn spawn(&mut self, tb: &Testbed, kubeconfig: &std::path::Path) {
        let mut cmd = kubelet_command_on(
            self.runtime.clone(),
            tb,
            &self.root,
            None,
            free_port(),
            &self.name,
            &self.log,
        );
        cmd.arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--node-status-update-frequency")
            .arg("1s")
            .arg("--node-lease-duration-seconds")
            .arg("4");
        self.child = Some(cmd.spawn().expect("spawn kubelet"));
    }

    fn endpoint(&self, tb: &Testbed) -> String {
        runtime_endpoint(self.kind, tb, &self.root)
    }
}

fn pod_json(name: &str, node: &str, image: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "spread"}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "app", "image": image,
                                 "imagePullPolicy": "IfNotPresent",
                                 "command": ["sleep", "3600"]}]}
    }))
    .expect("pod")
}

fn renew_time(l: &Lease) -> Option<k8s_openapi::jiff::Timestamp> {
    l.spec.as_ref()?.renew_time.as_ref().map(|t| t.0)
}

/// The requests of `seen` that belong to `node`: its Node and Lease, its pod list/watch
/// (field selector), and its pods' status writes.
fn requests_of(seen: &[Seen], node: &str, pods: &[String]) -> usize {
    seen.iter()
        .filter(|s| {
            s.path.contains(node)
                || s.query.contains(node)
                || pods
                    .iter()
                    .any(|p| s.path.ends_with(&format!("/pods/{p}/status")))
        })
        .count()
}

/// Pod name → (uid, main container id) of the Running pods among `names`.
async fn running_pods(
    pods: &Api<Pod>,
    names: &[String],
) -> Option<HashMap<String, (String, String)>> {
    let mut out = HashMap::new();
    for n in names {
        let p = pods.get_opt(n).await.ok()??;
        let st = p.status.as_ref()?;
        if st.phase.as_deref() != Some("Running") {
            return None;
        }
        let cid = st
            .container_statuses
            .as_ref()?
            .first()
            .filter(|c| c.ready)?
            .container_id
            .clone()?;
        out.insert(n.clone(), (p.metadata.uid.clone()?, cid));
    }
    Some(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_kubelets_form_one_cluster() {
    let tb = require_testbed!("three_kubelets_form_one_cluster");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = ApiServer::start_tls().await.expect("fixture");
    let dir = tempfile::Builder::new()
        .prefix("kubelet-3n-")
        .tempdir()
        .expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).expect("kubeconfig");
    let docker_dir = dir.path().join("docker2");
    std::fs::create_dir_all(&docker_dir).expect("docker dir");
    let docker2 = PrivateDockerd::start(&docker_dir, false).expect("second dockerd");
    docker2
        .copy_images(
            &tb.docker_endpoint,
            &[tb.busybox_image.as_str(), tb.pause_image.as_str()],
        )
        .expect("images");
    let mut on_docker2 = tb.dockershim_args();
    if let Some(i) = on_docker2.iter().position(|a| a == "--docker-endpoint") {
        on_docker2[i + 1] = docker2.endpoint.clone().into();
    }
    let mut nodes: Vec<NodeUnderTest> = [
        (
            RuntimeKind::Dockershim,
            runtime_args(RuntimeKind::Dockershim, &tb),
        ),
        (
            RuntimeKind::Containerd,
            runtime_args(RuntimeKind::Containerd, &tb),
        ),
        (RuntimeKind::Dockershim, on_docker2),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (kind, runtime))| NodeUnderTest {
        name: unique_name(&format!("n{i}")),
        kind,
        runtime,
        root: dir.path().join(format!("root{i}")),
        log: dir.path().join(format!("kubelet{i}.log")),
        child: None,
    })
    .collect();
    for n in nodes.iter_mut() {
        n.spawn(&tb, &kubeconfig);
    }
    let client = {
        let kc = kube::config::Kubeconfig::from_yaml(&server.kubeconfig()).expect("kubeconfig");
        let config = Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("client config");
        Client::try_from(config).expect("client")
    };
    let node_api: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    let logs: Vec<PathBuf> = nodes.iter().map(|n| n.log.clone()).collect();
    // Pod names by node, for the cleanup and the request counts.
    let mut placed: HashMap<String, Vec<String>> = HashMap::new();

    let body = async {
        for (n, log) in names.iter().zip(&logs) {
            wait_for("every node Ready", log, || async {
                node_ready(&node_api.get_opt(n).await.ok()??).then_some(())
            })
            .await;
        }
        // Idle traffic: 10 s of three Ready nodes with no pods.
        let before = server.requests().len();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let idle: Vec<Seen> = server.requests()[before..].to_vec();

        // "Scheduling": six pods, two per node.
        let churn_start = server.requests().len();
        let churn_clock = std::time::Instant::now();
        for i in 0..6 {
            let node = &names[i % 3];
            let name = unique_name(&format!("spread{i}"));
            pods.create(
                &PostParams::default(),
                &pod_json(&name, node, &tb.busybox_image),
            )
            .await
            .expect("create pod");
            placed.entry(node.clone()).or_default().push(name);
        }
        let all: Vec<String> = placed.values().flatten().cloned().collect();
        let first = wait_for("six pods Running on three nodes", &logs[0], || async {
            running_pods(&pods, &all).await
        })
        .await;
        for (i, n) in nodes.iter().enumerate() {
            for p in &placed[&n.name] {
                let uid = &first[p].0;
                let cs = runtime_containers(&n.endpoint(&tb), uid)
                    .await
                    .expect("containers");
                assert_eq!(cs.len(), 1, "node {i} runs {p} on its own runtime");
            }
        }

        // Drain node 0: cordon, delete its pods, recreate them on the other nodes.
        node_api
            .patch(
                &names[0],
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"unschedulable": true}})),
            )
            .await
            .expect("cordon");
        let drained = placed.remove(&names[0]).unwrap_or_default();
        for p in &drained {
            pods.delete(p, &DeleteParams::default())
                .await
                .expect("delete");
        }
        for p in &drained {
            let uid = first[p].0.clone();
            let endpoint = nodes[0].endpoint(&tb);
            wait_for("the drained pods gone", &logs[0], || async {
                let gone = matches!(pods.get_opt(p).await, Ok(None));
                let empty = runtime_containers(&endpoint, &uid).await?.is_empty();
                (gone && empty).then_some(())
            })
            .await;
        }
        for (i, _) in drained.iter().enumerate() {
            let node = &names[1 + i % 2];
            let name = unique_name(&format!("moved{i}"));
            pods.create(
                &PostParams::default(),
                &pod_json(&name, node, &tb.busybox_image),
            )
            .await
            .expect("recreate pod");
            placed.entry(node.clone()).or_default().push(name);
        }
        let all: Vec<String> = placed.values().flatten().cloned().collect();
        let second = wait_for("every pod Running on nodes 1 and 2", &logs[1], || async {
            running_pods(&pods, &all).await
        })
        .await;
        let churn: Vec<Seen> = server.requests()[churn_start..].to_vec();
        let churn_secs = churn_clock.elapsed().as_secs_f64();

        // SIGKILL node 2's kubelet: its lease and heartbeats stop, the others' go on.
        let lease_of = |n: String| {
            let leases = leases.clone();
            async move {
                leases
                    .get_opt(&n)
                    .await
                    .ok()
                    .flatten()
                    .as_ref()
                    .and_then(renew_time)
            }
        };
        if let Some(c) = nodes[2].child.as_mut() {
            if let Some(pid) = c.id() {
                // SAFETY: kill(2) on the pid of our own child process.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
            let _ = c.wait().await;
        }
        nodes[2].child = None;
        let dead_at = lease_of(names[2].clone()).await.expect("lease of node 2");
        let alive_at = lease_of(names[1].clone()).await.expect("lease of node 1");
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(
            lease_of(names[2].clone()).await,
            Some(dead_at),
            "a dead kubelet renews nothing"
        );
        assert!(
            lease_of(names[1].clone()).await > Some(alive_at),
            "the live nodes keep renewing"
        );

        // It comes back on the same root: lease renewed again, its pods kept.
        nodes[2].spawn(&tb, &kubeconfig);
        wait_for(
            "node 2's lease renewed after the restart",
            &logs[2],
            || async { (lease_of(names[2].clone()).await? > dead_at).then_some(()) },
        )
        .await;
        let node2_pods = placed.get(&names[2]).cloned().unwrap_or_default();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = wait_for(
            "node 2's pods Running after the restart",
            &logs[2],
            || async { running_pods(&pods, &node2_pods).await },
        )
        .await;
        for p in &node2_pods {
            assert_eq!(
                after[p], second[p],
                "{p} kept its container across the restart"
            );
        }

        for (i, n) in names.iter().enumerate() {
            let mine = placed.get(n).cloned().unwrap_or_default();
            println!(
                "node {i} ({}): {} API requests in 10 s idle, {} in the {churn_secs:.1} s of churn (6 pods placed, node 0 drained, {} pods here at the end)",
                nodes[i].kind.name(),
                requests_of(&idle, n, &[]),
                requests_of(&churn, n, &mine),
                mine.len()
            );
        }

        // Everything is deleted through the API and leaves every runtime.
        for p in placed.values().flatten() {
            let _ = pods.delete(p, &DeleteParams::default()).await;
        }
        for (i, n) in names.iter().enumerate() {
            let endpoint = nodes[i].endpoint(&tb);
            for p in placed.get(n).cloned().unwrap_or_default() {
                let uid = second[&p].0.clone();
                wait_for("every pod removed", &logs[i], || async {
                    let gone = matches!(pods.get_opt(&p).await, Ok(None));
                    let empty = runtime_sandboxes(&endpoint, &uid).await?.is_empty();
                    (gone && empty).then_some(())
                })
                .await;
            }
        }
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    for n in nodes.iter_mut() {
        if let Some(mut c) = n.child.take() {
            stop_kubelet(&mut c).await;
        }
    }
    // Whatever happened: nothing of this test left on the shared runtimes.
    let uids: Vec<String> = server
        .store()
        .list("pods", Some("default"))
        .0
        .iter()
        .filter_map(|p| p["metadata"]["uid"].as_str().map(str::to_string))
        .collect();
    cleanup_all(RuntimeKind::Dockershim, &tb, &uids).await;
    cleanup_all(RuntimeKind::Containerd, &tb, &uids).await;
    drop(docker2);
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}
