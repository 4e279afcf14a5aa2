//! End to end: the `kubelet` BINARY runs static pods from a manifest directory on a real
//! runtime, parameterized over both: containerd's CRI plugin (`--container-runtime-endpoint`)
//! and the kubelet's embedded dockershim on Docker (no endpoint, `--network-plugin=cni`).
//! Checked through the kubelet's read-only `GET /pods` and the runtime's CRI: a two-container
//! pod becomes Running and Ready beside a malformed manifest; rewriting its manifest in place
//! (truncated, then written) restarts nothing; changing one container's command restarts exactly
//! that container; deleting the manifest removes the pod and leaves no sandbox
//! or container of its UID. The kubelet gets SIGTERM and the runtime is cleaned up whatever
//! happened.
//!
//! The binary is `target/debug/kubelet`: `cargo build --workspace` must run first (hack/test.sh
//! does); the test fails with that hint when the binary is missing.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use cri_proto::runtime::v1 as cri;
use futures::FutureExt;
use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::{InProcessShim, RuntimeKind, clients};
use integration::testbed::Testbed;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;

use crate::kubelet_support;

use kubelet_support::{
    UID_LABEL, cleanup_runtime, find_pod, free_port, http_get, kubelet_command, pods, running_ids,
    stop_kubelet, wait_for,
};

fn manifest(name: &str, uid: &str, image: &str, b_command: &str, out: &Path) -> String {
    let out = out.display();
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  uid: {uid}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: out
    hostPath:
      path: {out}
      type: DirectoryOrCreate
  containers:
  - name: a
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    volumeMounts:
    - name: out
      mountPath: /out
    lifecycle:
      postStart:
        exec:
          command: ["sh", "-c", "echo started > /out/started"]
      preStop:
        exec:
          command: ["sh", "-c", "echo bye > /out/bye"]
  - name: b
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "{b_command}"]
"#
    )
}

fn single_container_manifest(name: &str, uid: &str, image: &str, script: &str) -> String {
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
    command: ["sh", "-c", "{script}"]
"#
    )
}

/// The waiting reason and restart count of a pod's first container.
fn first_waiting(pod: &serde_json::Value) -> Option<(String, i64)> {
    let c = &pod["status"]["containerStatuses"][0];
    Some((
        c["state"]["waiting"]["reason"].as_str()?.to_string(),
        c["restartCount"].as_i64().unwrap_or(0),
    ))
}

/// Sandboxes and containers of `uid` on the runtime at `endpoint`.
async fn runtime_objects(endpoint: &str, uid: &str) -> Option<(usize, usize)> {
    let (mut rt, _) = clients(endpoint).await.ok()?;
    let sel = HashMap::from([(UID_LABEL.to_string(), uid.to_string())]);
    let sb = rt
        .list_pod_sandbox(cri::ListPodSandboxRequest {
            filter: Some(cri::PodSandboxFilter {
                label_selector: sel.clone(),
                ..Default::default()
            }),
        })
        .await
        .ok()?
        .into_inner()
        .items;
    let cs = rt
        .list_containers(cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter {
                label_selector: sel,
                ..Default::default()
            }),
        })
        .await
        .ok()?
        .into_inner()
        .containers;
    Some((sb.len(), cs.len()))
}

/// Where and how one kubelet of a test runs.
struct KubeletSetup<'a> {
    kind: RuntimeKind,
    tb: &'a Testbed,
    root: &'a Path,
    manifests: &'a Path,
    port: u16,
    node: &'a str,
    log: &'a Path,
}

fn spawn_kubelet(k: &KubeletSetup<'_>, extra: &[String]) -> Child {
    let mut cmd = kubelet_command(
        k.kind,
        k.tb,
        k.root,
        Some(k.manifests),
        k.port,
        k.node,
        k.log,
    );
    cmd.args(extra);
    cmd.spawn().expect("spawn kubelet")
}

async fn kubelet_pods(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_pods[{}]", kind.name()));
    let dir = tempfile::Builder::new()
        .prefix("kubelet-it-")
        .tempdir()
        .expect("tempdir");
    let root = dir.path().join("root");
    let manifests = dir.path().join("manifests");
    std::fs::create_dir_all(&manifests).expect("manifest dir");
    let log = dir.path().join("kubelet.log");
    let node = unique_name("kl");
    let uid = format!("{node}-uid");
    let port = free_port();
    let pod_file = manifests.join("two.yaml");
    let hooks_dir = dir.path().join("hooks");
    std::fs::write(
        &pod_file,
        manifest("two", &uid, &tb.busybox_image, "sleep 3600", &hooks_dir),
    )
    .expect("write manifest");
    std::fs::write(
        manifests.join("broken.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: [\n",
    )
    .expect("write bad manifest");
    let crash_uid = format!("{node}-crash");
    let crash_file = manifests.join("crash.yaml");
    std::fs::write(
        &crash_file,
        single_container_manifest("crash", &crash_uid, &tb.busybox_image, "exit 3"),
    )
    .expect("write crash manifest");
    let pull_uid = format!("{node}-pull");
    let pull_file = manifests.join("pull.yaml");
    let missing_image = format!("{}/does-not-exist:latest", tb.registry);
    std::fs::write(
        &pull_file,
        single_container_manifest("pull", &pull_uid, &missing_image, "sleep 3600"),
    )
    .expect("write pull manifest");
    let init_uid = format!("{node}-init");
    let out_dir = dir.path().join("out");
    let init_file = manifests.join("init.yaml");
    std::fs::write(
        &init_file,
        format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: init
  uid: {init_uid}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: work
    emptyDir: {{}}
  - name: out
    hostPath:
      path: {out}
      type: DirectoryOrCreate
  initContainers:
  - name: prepare
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo hello > /work/msg"]
    volumeMounts:
    - name: work
      mountPath: /work
  containers:
  - name: main
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo $(POD_NAME) > /out/name && cp /work/msg /out/msg && sleep 3600"]
    env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    volumeMounts:
    - name: work
      mountPath: /work
      readOnly: true
    - name: out
      mountPath: /out
"#,
            image = tb.busybox_image,
            out = out_dir.display(),
        ),
    )
    .expect("write init manifest");
    let probe_uid = format!("{node}-probe");
    let probe_file = manifests.join("probe.yaml");
    std::fs::write(
        &probe_file,
        format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: probe
  uid: {probe_uid}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "touch /tmp/ready /tmp/alive; sleep 4; rm /tmp/alive; sleep 3600"]
    readinessProbe:
      exec:
        command: ["cat", "/tmp/ready"]
      periodSeconds: 1
    livenessProbe:
      exec:
        command: ["cat", "/tmp/alive"]
      periodSeconds: 1
      failureThreshold: 1
"#,
            image = tb.busybox_image
        ),
    )
    .expect("write probe manifest");
    let job_uid = format!("{node}-job");
    let job_file = manifests.join("job.yaml");
    std::fs::write(
        &job_file,
        single_container_manifest("job", &job_uid, &tb.busybox_image, "exit 0")
            .replace("spec:\n", "spec:\n  restartPolicy: Never\n"),
    )
    .expect("write job manifest");
    let uids = [
        job_uid.clone(),
        uid.clone(),
        crash_uid.clone(),
        pull_uid.clone(),
        init_uid.clone(),
        probe_uid.clone(),
    ];

    let setup = KubeletSetup {
        kind,
        tb: &tb,
        root: &root,
        manifests: &manifests,
        port,
        node: &node,
        log: &log,
    };
    let mut child = spawn_kubelet(&setup, &[]);
    // The CRI endpoint the checks use: containerd's, or the kubelet's embedded dockershim.
    let endpoint = match kind {
        RuntimeKind::Containerd => tb.containerd_endpoint.clone(),
        RuntimeKind::Dockershim => format!("unix://{}/dockershim.sock", root.display()),
    };

    let body = async {
        // 1. The good pod runs beside the malformed manifest, Running and Ready.
        let ids = wait_for("the pod to be Running and Ready", &log, || async {
            let pods = pods(port).await?;
            running_ids(find_pod(&pods, &uid)?)
        })
        .await;
        assert_eq!(ids.len(), 2, "two containers: {ids:?}");
        let prefix = match kind {
            RuntimeKind::Containerd => "containerd://",
            RuntimeKind::Dockershim => "docker://",
        };
        assert!(ids.values().all(|id| id.starts_with(prefix)), "{ids:?}");
        // The postStart hook ran.
        wait_for("the postStart hook to run", &log, || async {
            let s = std::fs::read_to_string(hooks_dir.join("started")).ok()?;
            (s == "started\n").then_some(())
        })
        .await;
        // The runtime sees the pod through its UID label (so the removal check below is real).
        let objects = runtime_objects(&endpoint, &uid).await;
        assert_eq!(objects, Some((1, 2)), "one sandbox, two containers");
        let all = pods(port).await.expect("pods");
        assert_eq!(
            all.len(),
            6,
            "every good pod and not the broken one: {all:?}"
        );

        // An init container runs to completion before the app container.
        wait_for("the pod with an init container to run", &log, || async {
            let pods = pods(port).await?;
            let p = find_pod(&pods, &init_uid)?;
            let init = &p["status"]["initContainerStatuses"][0];
            (init["state"]["terminated"]["exitCode"] == 0).then_some(())?;
            running_ids(p).map(|_| ())
        })
        .await;
        // ...through an emptyDir shared with the app container, which copies into a hostPath.
        wait_for(
            "the app container to copy the init container's file",
            &log,
            || async {
                let msg = std::fs::read_to_string(out_dir.join("msg")).ok()?;
                (msg == "hello\n").then_some(())
            },
        )
        .await;
        // The downward API env var, expanded in the command.
        let name = std::fs::read_to_string(out_dir.join("name")).unwrap_or_default();
        assert_eq!(name, format!("init-{node}\n"), "POD_NAME from fieldRef");

        // 2. A crashing container is restarted, then waits in CrashLoopBackOff.
        wait_for(
            "the crashing container to be in CrashLoopBackOff",
            &log,
            || async {
                let pods = pods(port).await?;
                let (reason, restarts) = first_waiting(find_pod(&pods, &crash_uid)?)?;
                (reason == "CrashLoopBackOff" && restarts >= 1).then_some(())
            },
        )
        .await;

        // Probes: readiness gates Ready; a failing liveness probe restarts the container.
        wait_for("the probed pod to be Ready", &log, || async {
            let pods = pods(port).await?;
            running_ids(find_pod(&pods, &probe_uid)?)
        })
        .await;
        wait_for(
            "the liveness probe to restart the container",
            &log,
            || async {
                let pods = pods(port).await?;
                let p = find_pod(&pods, &probe_uid)?;
                (p["status"]["containerStatuses"][0]["restartCount"].as_i64()? >= 1).then_some(())
            },
        )
        .await;

        // A pod with restartPolicy Never whose container exits 0 is Succeeded.
        wait_for("the run-once pod to succeed", &log, || async {
            let pods = pods(port).await?;
            let p = find_pod(&pods, &job_uid)?;
            (p["status"]["phase"] == "Succeeded").then_some(())
        })
        .await;

        // 3. A missing image shows ErrImagePull / ImagePullBackOff.
        wait_for("the missing image to show a pull error", &log, || async {
            let pods = pods(port).await?;
            let (reason, _) = first_waiting(find_pod(&pods, &pull_uid)?)?;
            (reason == "ErrImagePull" || reason == "ImagePullBackOff").then_some(())
        })
        .await;

        // 4. A restarted kubelet adopts the running pod without restarting anything, and
        // removes a pod whose manifest went away while it was down.
        stop_kubelet(&mut child).await;
        std::fs::remove_file(&init_file).expect("remove init manifest");
        child = spawn_kubelet(&setup, &[]);
        let adopted = wait_for(
            "the pod to be Running after a kubelet restart",
            &log,
            || async {
                let pods = pods(port).await?;
                running_ids(find_pod(&pods, &uid)?)
            },
        )
        .await;
        assert_eq!(
            adopted, ids,
            "a kubelet restart must not restart containers"
        );
        wait_for(
            "the orphaned pod to be removed from the runtime",
            &log,
            || async { (runtime_objects(&endpoint, &init_uid).await? == (0, 0)).then_some(()) },
        )
        .await;

        // 5. A manifest caught while rewritten in place (truncated, then written) keeps its
        // pod: nothing restarts.
        let text = std::fs::read_to_string(&pod_file).expect("read manifest");
        for _ in 0..3 {
            std::fs::write(&pod_file, "").expect("truncate manifest");
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            std::fs::write(&pod_file, &text).expect("rewrite manifest");
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
        let log_text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            log_text.contains("keeping the last valid pod"),
            "the kubelet must have seen the truncated manifest"
        );
        // A pod dropped by a torn read would be killed and started again within moments.
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        let kept = wait_for("the pod to be Running after the rewrites", &log, || async {
            let pods = pods(port).await?;
            running_ids(find_pod(&pods, &uid)?)
        })
        .await;
        assert_eq!(
            kept, ids,
            "a manifest rewritten in place must not restart its pod"
        );

        // 6. A changed command restarts exactly that container.
        std::fs::write(
            &pod_file,
            manifest("two", &uid, &tb.busybox_image, "sleep 3601", &hooks_dir),
        )
        .expect("rewrite manifest");
        let after = wait_for("container b to be restarted", &log, || async {
            let pods = pods(port).await?;
            let now = running_ids(find_pod(&pods, &uid)?)?;
            (now.get("b") != ids.get("b")).then_some(now)
        })
        .await;
        assert_eq!(after.get("a"), ids.get("a"), "container a must not restart");

        // 7. Deleting the manifests removes the pods, on the kubelet and on the runtime.
        for f in [&pod_file, &crash_file, &pull_file, &probe_file, &job_file] {
            std::fs::remove_file(f).expect("remove manifest");
        }
        for u in &uids {
            wait_for("the pod to leave /pods", &log, || async {
                let pods = pods(port).await?;
                find_pod(&pods, u).is_none().then_some(())
            })
            .await;
            wait_for(
                "no sandbox or container of the pod on the runtime",
                &log,
                || async { (runtime_objects(&endpoint, u).await? == (0, 0)).then_some(()) },
            )
            .await;
        }
        let bye = std::fs::read_to_string(hooks_dir.join("bye")).unwrap_or_default();
        assert_eq!(
            bye, "bye\n",
            "the preStop hook ran when the pod was removed"
        );
        let health = http_get(port, "/healthz").await;
        assert_eq!(health.as_deref(), Some("ok"));
        let metrics = http_get(port, "/metrics").await.expect("metrics");
        assert!(metrics.contains("kubelet_pleg_relist_duration_seconds"));
        assert!(metrics.contains("kubelet_running_pods"));
        assert!(metrics.contains("kubelet_runtime_operations_total{operation_type="));
    };
    let outcome = std::panic::AssertUnwindSafe(body).catch_unwind().await;

    // Clean up whatever happened: stop the kubelet, then remove the pod's sandboxes.
    for f in [
        &pod_file,
        &crash_file,
        &pull_file,
        &init_file,
        &probe_file,
        &job_file,
    ] {
        let _ = std::fs::remove_file(f);
    }
    stop_kubelet(&mut child).await;
    match kind {
        RuntimeKind::Containerd => {
            for u in &uids {
                cleanup_runtime(&tb.containerd_endpoint, u).await;
            }
        }
        RuntimeKind::Dockershim => {
            // The kubelet's embedded dockershim is gone: clean up through one of our own.
            if let Ok(mut shim) = InProcessShim::start(&tb).await {
                let ep = shim.config.endpoint.clone();
                for u in &uids {
                    cleanup_runtime(&ep, u).await;
                }
                shim.stop().await;
            }
        }
    }
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

/// Serve `body` (shared, replaceable) as a 200 JSON response to every request.
async fn serve_manifest(body: Arc<Mutex<String>>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let body = body.lock().clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut req = Vec::new();
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    port
}

/// The http source (`--manifest-url`): a pod served over HTTP runs; when the URL serves an
/// empty PodList the pod is removed from the runtime. containerd only (the source is
/// runtime-independent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_manifest_url_containerd() {
    let kind = RuntimeKind::Containerd;
    let tb = require_testbed!("kubelet_manifest_url[containerd]");
    let dir = tempfile::Builder::new()
        .prefix("kubelet-it-")
        .tempdir()
        .expect("tempdir");
    let root = dir.path().join("root");
    let manifests = dir.path().join("manifests");
    std::fs::create_dir_all(&manifests).expect("manifest dir");
    let log = dir.path().join("kubelet.log");
    let node = unique_name("klh");
    let uid = format!("{node}-http");
    let port = free_port();
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "uid": uid},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": tb.busybox_image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
            }],
        },
    });
    let body = Arc::new(Mutex::new(pod.to_string()));
    let http_port = serve_manifest(Arc::clone(&body)).await;
    let extra = [
        "--manifest-url".to_string(),
        format!("http://127.0.0.1:{http_port}/pods"),
        "--http-check-frequency".to_string(),
        "1s".to_string(),
    ];
    let setup = KubeletSetup {
        kind,
        tb: &tb,
        root: &root,
        manifests: &manifests,
        port,
        node: &node,
        log: &log,
    };
    let mut child = spawn_kubelet(&setup, &extra);
    let endpoint = tb.containerd_endpoint.clone();
    let test = async {
        wait_for("the http pod to run", &log, || async {
            let pods = pods(port).await?;
            running_ids(find_pod(&pods, &uid)?)
        })
        .await;
        *body.lock() = r#"{"apiVersion":"v1","kind":"PodList","items":[]}"#.to_string();
        wait_for("the http pod to be removed", &log, || async {
            let pods = pods(port).await?;
            find_pod(&pods, &uid).is_none().then_some(())?;
            (runtime_objects(&endpoint, &uid).await? == (0, 0)).then_some(())
        })
        .await;
    };
    let outcome = std::panic::AssertUnwindSafe(test).catch_unwind().await;
    stop_kubelet(&mut child).await;
    cleanup_runtime(&tb.containerd_endpoint, &uid).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_pods_containerd() {
    kubelet_pods(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_pods_dockershim() {
    kubelet_pods(RuntimeKind::Dockershim).await;
}
