//! End to end: allocatable and resource admission of the `kubelet` BINARY. With
//! `--kube-reserved=cpu=500m,memory=100Mi` and `--system-reserved=cpu=250m`, the node's
//! allocatable CPU is its cores less 750m (memory less 100Mi and the hard eviction threshold).
//! Standalone, on both runtimes: a static pod requesting half of the allocatable CPU runs; one
//! requesting more than what is left is rejected `OutOfcpu` with upstream's message
//! ("Pod Node didn't have enough resource: cpu, requested: R, used: U, capacity: C"), one
//! requesting more memory than the node has `OutOfmemory`; neither reaches the runtime.
//! With `--node-labels=disk=ssd`, a pod selecting `disk: ssd` runs and one selecting
//! `disk: hdd` is rejected `NodeAffinity` ("Pod Predicate NodeAffinity failed").
//! API-server mode (the project's API fixture): the Node's `status.allocatable` is capacity less
//! those reservations, and with `--register-with-taints=dedicated=db:NoExecute` an API pod
//! without a toleration is rejected `Taint` ("Pod Predicate TaintToleration failed").

use crate::kubelet_support;

use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use kubelet_support::*;

const RESERVE: [&str; 2] = [
    "--kube-reserved=cpu=500m,memory=100Mi",
    "--system-reserved=cpu=250m",
];

/// The machine's cores in millicores less the reservations above.
fn allocatable_millicores() -> i64 {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    i64::try_from(cores).unwrap_or(1) * 1000 - 750
}

fn manifest(name: &str, uid: &str, image: &str, cpu: &str, memory: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  uid: {uid}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    resources:
      requests:
        cpu: "{cpu}"
        memory: "{memory}"
"#
    )
}

async fn kubelet_resource_admission(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_resource_admission[{}]", kind.name()));
    let alloc = allocatable_millicores();
    assert!(alloc > 0, "this machine has fewer than 750m of CPU");
    let mut k = Kubelet::new(kind, "klalloc");
    let node = k.node.clone();
    let uid = |n: &str| format!("{node}-{n}");
    let uids: Vec<String> = ["half", "cpu", "mem", "sel", "nosel"]
        .iter()
        .map(|n| uid(n))
        .collect();
    let half = alloc / 2;
    k.write_manifest(
        "half.yaml",
        &manifest(
            "half",
            &uids[0],
            &tb.busybox_image,
            &format!("{half}m"),
            "16Mi",
        ),
    );
    let mut flags: Vec<String> = RESERVE.map(String::from).to_vec();
    flags.push("--node-labels=disk=ssd".into());
    k.spawn(&tb, &flags);
    let (port, log, endpoint) = (k.port, k.log.clone(), k.endpoint(&tb));
    let body = async {
        wait_for("the pod within allocatable running", &log, || async {
            running_ids(&pod(port, &uids[0]).await?)
        })
        .await;
        let over = alloc - half + 1;
        k.write_manifest(
            "cpu.yaml",
            &manifest(
                "cpu",
                &uids[1],
                &tb.busybox_image,
                &format!("{over}m"),
                "16Mi",
            ),
        );
        k.write_manifest(
            "mem.yaml",
            &manifest("mem", &uids[2], &tb.busybox_image, "10m", "4Pi"),
        );
        let cpu = wait_for("the CPU hog rejected", &log, || async {
            let p = pod(port, &uids[1]).await?;
            (p["status"]["phase"] == "Failed").then_some(p)
        })
        .await;
        assert_eq!(cpu["status"]["reason"], "OutOfcpu", "{cpu}");
        assert_eq!(
            cpu["status"]["message"],
            format!(
                "Pod Node didn't have enough resource: cpu, requested: {over}, used: {half}, capacity: {alloc}"
            ),
            "{cpu}"
        );
        let mem = wait_for("the memory hog rejected", &log, || async {
            let p = pod(port, &uids[2]).await?;
            (p["status"]["phase"] == "Failed").then_some(p)
        })
        .await;
        assert_eq!(mem["status"]["reason"], "OutOfmemory", "{mem}");
        assert!(
            mem["status"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Pod Node didn't have enough resource: memory, requested: 4503599627370496, used: 16777216, capacity: ")),
            "{mem}"
        );
        for u in &uids[1..] {
            let sandboxes = runtime_sandboxes(&endpoint, u)
                .await
                .expect("list sandboxes");
            assert!(
                sandboxes.is_empty(),
                "a rejected pod never reaches the runtime"
            );
        }
        assert!(running_ids(&pod(port, &uids[0]).await.expect("pod")).is_some());
        // Node selectors against the node's labels.
        let selecting = |name: &str, uid: &str, disk: &str| {
            pod_manifest(
                name,
                uid,
                &tb.busybox_image,
                "sleep 3600",
                &format!("  nodeSelector:\n    disk: {disk}\n"),
            )
        };
        k.write_manifest("sel.yaml", &selecting("sel", &uids[3], "ssd"));
        k.write_manifest("nosel.yaml", &selecting("nosel", &uids[4], "hdd"));
        wait_for("the pod selecting this node running", &log, || async {
            running_ids(&pod(port, &uids[3]).await?)
        })
        .await;
        let nosel = wait_for("the pod selecting another node rejected", &log, || async {
            let p = pod(port, &uids[4]).await?;
            (p["status"]["phase"] == "Failed").then_some(p)
        })
        .await;
        assert_eq!(nosel["status"]["reason"], "NodeAffinity", "{nosel}");
        assert_eq!(
            nosel["status"]["message"], "Pod Predicate NodeAffinity failed",
            "{nosel}"
        );
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    k.shutdown(&tb, &uids).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

#[tokio::test]
async fn kubelet_resource_admission_containerd() {
    kubelet_resource_admission(RuntimeKind::Containerd).await;
}

#[tokio::test]
async fn kubelet_resource_admission_dockershim() {
    kubelet_resource_admission(RuntimeKind::Dockershim).await;
}

/// API-server mode: the Node's allocatable is capacity less the reservations.
#[tokio::test]
async fn kubelet_node_allocatable_api() {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::Api;
    let kind = RuntimeKind::Containerd;
    let tb = require_testbed!("kubelet_node_allocatable_api");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = integration::apiserver::ApiServer::start()
        .await
        .expect("fixture");
    let dir = tempfile::Builder::new()
        .prefix("kubelet-alloc-")
        .tempdir()
        .expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).expect("kubeconfig");
    let (root, log) = (dir.path().join("root"), dir.path().join("kubelet.log"));
    let node = integration::fixtures::unique_name("allocapi");
    let mut cmd = kubelet_command(kind, &tb, &root, None, free_port(), &node, &log);
    cmd.arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(RESERVE)
        .arg("--register-with-taints=dedicated=db:NoExecute");
    let mut child = cmd.spawn().expect("spawn kubelet");
    let config = kube::Config::new(server.url().parse().expect("url"));
    let client = kube::Client::try_from(config).expect("client");
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client, "default");
    let body = async {
        let status = wait_for("the Node's status", &log, || async {
            nodes.get_opt(&node).await.ok()??.status
        })
        .await;
        let cap = status.capacity.expect("capacity");
        let alloc = status.allocatable.expect("allocatable");
        let cores: i64 = cap["cpu"].0.parse().expect("whole cores");
        let want = cores * 1000 - 750;
        let want = if want % 1000 == 0 {
            (want / 1000).to_string()
        } else {
            format!("{want}m")
        };
        assert_eq!(alloc["cpu"].0, want, "{alloc:?}");
        let ki = |q: &str| -> i64 {
            q.strip_suffix("Ki")
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{q} in Ki"))
        };
        // memory: 100Mi kube-reserved and the hard eviction threshold (memory.available<100Mi
        // in the test kubelets' flags).
        assert_eq!(
            ki(&alloc["memory"].0),
            ki(&cap["memory"].0) - 2 * 100 * 1024,
            "{alloc:?}"
        );
        assert_eq!(alloc["pods"], cap["pods"]);
        // An API pod that does not tolerate the NoExecute taint is refused.
        let name = format!("{node}-untolerant");
        let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": tb.busybox_image,
                    "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"]}]}
        }))
        .expect("pod");
        pods.create(&kube::api::PostParams::default(), &p)
            .await
            .expect("create");
        let status = wait_for("the untolerant pod rejected", &log, || async {
            let s = pods.get_opt(&name).await.ok()??.status?;
            (s.phase.as_deref() == Some("Failed")).then_some(s)
        })
        .await;
        assert_eq!(status.reason.as_deref(), Some("Taint"), "{status:?}");
        assert_eq!(
            status.message.as_deref(),
            Some("Pod Predicate TaintToleration failed"),
            "{status:?}"
        );
    };
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(90), body).await;
    stop_kubelet(&mut child).await;
    outcome.unwrap_or_else(|_| panic!("timed out; kubelet log:\n{}", log_tail(&log, 40)));
}
