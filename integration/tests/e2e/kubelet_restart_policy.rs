//! End to end, the `kubelet` binary on both runtimes (containerd's CRI and the embedded
//! dockershim): restart policies as upstream —
//! - Always / OnFailure / Never with containers exiting 0 and 1: restart counts and phases;
//! - init containers run one at a time, in order, before the app container; a failing init
//!   container under restartPolicy Never fails the pod and the app never starts;
//! - CrashLoopBackOff with a growing back-off (10 s, then 20 s) in the waiting message;
//! - a container killed behind the kubelet's back (CRI StopContainer on the runtime) is
//!   restarted through the PLEG, with a new container id and restartCount 1;
//! - a finished run-once pod (Never, OnFailure with exit 0) is not set up again by the syncs
//!   that follow (every 2 s here): one sandbox (attempt 0) and one container on the runtime,
//!   as upstream; a second sandbox would run the pod again and hide its logs.

use crate::kubelet_support;

use cri_proto::runtime::v1 as cri;
use integration::require_testbed;
use integration::runtimes::{RuntimeKind, clients};
use kubelet_support::*;

fn policy_pod(name: &str, uid: &str, image: &str, policy: &str, script: &str) -> String {
    pod_manifest(
        name,
        uid,
        image,
        script,
        &format!("  restartPolicy: {policy}\n"),
    )
}

fn status_of(p: &serde_json::Value) -> (String, i64) {
    let phase = p["status"]["phase"].as_str().unwrap_or("").to_string();
    let restarts = p["status"]["containerStatuses"][0]["restartCount"]
        .as_i64()
        .unwrap_or(-1);
    (phase, restarts)
}

async fn restart_policies(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_restart_policy[{}]", kind.name()));
    let mut k = Kubelet::new(kind, "rp");
    let image = tb.busybox_image.clone();
    let uid = |n: &str| format!("{}-{n}", k.node);
    let cases = [
        ("always0", "Always", "exit 0"),
        ("always1", "Always", "exit 1"),
        ("onfail0", "OnFailure", "exit 0"),
        ("onfail1", "OnFailure", "exit 1"),
        ("never0", "Never", "exit 0"),
        ("never1", "Never", "exit 1"),
    ];
    let mut uids: Vec<String> = Vec::new();
    for (name, policy, script) in cases {
        k.write_manifest(
            &format!("{name}.yaml"),
            &policy_pod(name, &uid(name), &image, policy, script),
        );
        uids.push(uid(name));
    }
    // Init containers: order recorded in a hostPath file; the first one is slower, so running
    // them at once would reverse the order.
    let out = k.dir.path().join("order");
    std::fs::create_dir_all(&out).expect("order dir");
    k.write_manifest(
        "init.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: init
  uid: {uid}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: out
    hostPath:
      path: {out}
  initContainers:
  - name: first
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "sleep 1; echo first >> /out/order"]
    volumeMounts: [{{name: out, mountPath: /out}}]
  - name: second
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo second >> /out/order"]
    volumeMounts: [{{name: out, mountPath: /out}}]
  containers:
  - name: app
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo app >> /out/order; sleep 3600"]
    volumeMounts: [{{name: out, mountPath: /out}}]
"#,
            uid = uid("init"),
            out = out.display()
        ),
    );
    uids.push(uid("init"));
    k.write_manifest(
        "initfail.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: initfail
  uid: {uid}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  initContainers:
  - name: broken
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "exit 1"]
  containers:
  - name: app
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "sleep 3600"]
"#,
            uid = uid("initfail")
        ),
    );
    uids.push(uid("initfail"));
    k.write_manifest(
        "victim.yaml",
        &policy_pod("victim", &uid("victim"), &image, "Always", "sleep 3600"),
    );
    uids.push(uid("victim"));
    k.spawn(&tb, &["--sync-frequency".into(), "2s".into()]);
    let (port, log) = (k.port, k.log.clone());
    let endpoint = k.endpoint(&tb);

    let outcome = tokio::spawn({
        let uids = uids.clone();
        let node = k.node.clone();
        async move {
            let uid = |n: &str| format!("{node}-{n}");
            // Terminal phases for OnFailure/Never with exit 0, and Never with exit 1.
            for (name, want) in [
                ("onfail0", "Succeeded"),
                ("never0", "Succeeded"),
                ("never1", "Failed"),
            ] {
                let (phase, restarts) = wait_for(&format!("{name} {want}"), &log, || async {
                    let s = status_of(&pod(port, &uid(name)).await?);
                    (s.0 == want).then_some(s)
                })
                .await;
                assert_eq!((phase.as_str(), restarts), (want, 0), "{name}");
            }
            // Restarted: Always with 0 and 1, OnFailure with 1; the pod stays Running.
            for name in ["always0", "always1", "onfail1"] {
                let (phase, _) = wait_for(&format!("{name} restarted"), &log, || async {
                    let s = status_of(&pod(port, &uid(name)).await?);
                    (s.1 >= 1).then_some(s)
                })
                .await;
                assert_eq!(phase, "Running", "{name}: restarting pods are Running");
            }

            // Init containers: in order, one at a time, then the app.
            wait_for("init order", &log, || async {
                let s = std::fs::read_to_string(out.join("order")).ok()?;
                (s.lines().count() >= 3).then_some(())
            })
            .await;
            let order = std::fs::read_to_string(out.join("order")).unwrap_or_default();
            assert_eq!(order, "first\nsecond\napp\n");
            // A failing init container under Never fails the pod; the app never starts.
            let p = wait_for("initfail Failed", &log, || async {
                let p = pod(port, &uid("initfail")).await?;
                (p["status"]["phase"] == "Failed").then_some(p)
            })
            .await;
            let app = &p["status"]["containerStatuses"][0];
            assert!(
                app["state"]["running"].is_null() && app["state"]["terminated"].is_null(),
                "{app}"
            );

            // CrashLoopBackOff: the back-off grows from 10 s to 20 s.
            for delay in ["back-off 10s", "back-off 20s"] {
                wait_for(&format!("always1 {delay}"), &log, || async {
                    let p = pod(port, &uid("always1")).await?;
                    let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
                    (w["reason"] == "CrashLoopBackOff"
                        && w["message"].as_str().is_some_and(|m| m.starts_with(delay)))
                    .then_some(())
                })
                .await;
            }

            // Finished run-once pods stay finished through the syncs since (every 2 s, and
            // the back-off above took more than 10 s): one sandbox and one container each.
            for name in ["onfail0", "never0", "never1"] {
                assert_ran_once(&endpoint, &uid(name), name).await;
                let (phase, _) = status_of(&pod(port, &uid(name)).await.expect("pod"));
                assert_ne!(phase, "Running", "{name}: still finished");
            }

            // Killed behind the kubelet's back: restarted through the PLEG.
            let before = wait_for("victim running", &log, || async {
                let p = pod(port, &uid("victim")).await?;
                running_ids(&p)?.get("main").cloned()
            })
            .await;
            let id = before.rsplit("://").next().unwrap_or_default().to_string();
            let (mut rt, _) = clients(&endpoint).await.expect("runtime");
            rt.stop_container(cri::StopContainerRequest {
                container_id: id,
                timeout: 0,
            })
            .await
            .expect("StopContainer behind the kubelet's back");
            wait_for("victim restarted", &log, || async {
                let p = pod(port, &uid("victim")).await?;
                let now = running_ids(&p)?.get("main").cloned()?;
                let restarts = p["status"]["containerStatuses"][0]["restartCount"].as_i64()?;
                (now != before && restarts == 1).then_some(())
            })
            .await;
            drop(uids);
        }
    })
    .await;
    k.shutdown(&tb, &uids).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_restart_policy_containerd() {
    restart_policies(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_restart_policy_dockershim() {
    restart_policies(RuntimeKind::Dockershim).await;
}
