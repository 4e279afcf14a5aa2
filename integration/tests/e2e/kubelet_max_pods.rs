//! End to end: `--max-pods` admission on the `kubelet` BINARY, on both runtimes (containerd's
//! CRI and the embedded dockershim on Docker). With `--max-pods=3`, three static pods run; a
//! fourth is rejected at admission as upstream's predicate admit handler rejects it: reason
//! `OutOfpods`, message "Node didn't have enough resource: pods, requested: 1, used: 3,
//! capacity: 3" in the kubelet's log, and in `/pods` phase Failed with that reason and the
//! message after "Pod " (upstream `rejectPod`); the runtime never sees it and the three others
//! keep running. Once one of the three is removed, a new pod is admitted and runs, while the
//! rejected one stays Failed.

use crate::kubelet_support;

use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use kubelet_support::*;

const MESSAGE: &str = "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3";

async fn kubelet_max_pods(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_max_pods[{}]", kind.name()));
    let mut k = Kubelet::new(kind, "klmaxp");
    let node = k.node.clone();
    let uid = |n: &str| format!("{node}-{n}");
    let names = ["a", "b", "c", "d", "e"];
    let uids: Vec<String> = names.iter().map(|n| uid(n)).collect();
    let manifest = |n: &str| pod_manifest(n, &uid(n), &tb.busybox_image, "sleep 3600", "");
    for n in &names[..3] {
        k.write_manifest(&format!("{n}.yaml"), &manifest(n));
    }
    k.spawn(&tb, &["--max-pods=3".into()]);
    let (port, log, endpoint) = (k.port, k.log.clone(), k.endpoint(&tb));
    let body = async {
        for u in &uids[..3] {
            wait_for("the three admitted pods running", &log, || async {
                running_ids(&pod(port, u).await?)
            })
            .await;
        }
        // A fourth pod is one too many.
        k.write_manifest("d.yaml", &manifest("d"));
        let d = wait_for("the fourth pod rejected in /pods", &log, || async {
            let p = pod(port, &uids[3]).await?;
            (p["status"]["phase"] == "Failed").then_some(p)
        })
        .await;
        assert_eq!(d["status"]["reason"], "OutOfpods", "{d}");
        assert_eq!(d["status"]["message"], format!("Pod {MESSAGE}"), "{d}");
        let text = std::fs::read_to_string(&log).expect("kubelet log");
        let line = text
            .lines()
            .find(|l| l.contains("pod rejected at admission") && l.contains(&k.pod_name("d")))
            .unwrap_or_else(|| panic!("no rejection line in the log:\n{}", log_tail(&log, 40)));
        assert!(
            line.contains("OutOfpods") && line.contains(MESSAGE),
            "reason and message in the log: {line}"
        );
        // It never reaches the runtime; the others keep running.
        tokio::time::sleep(std::time::Duration::from_secs(4)).await;
        let sandboxes = runtime_sandboxes(&endpoint, &uids[3])
            .await
            .expect("list sandboxes");
        assert!(
            sandboxes.is_empty(),
            "no sandbox for the rejected pod: {sandboxes:?}"
        );
        for u in &uids[..3] {
            assert!(
                running_ids(&pod(port, u).await.expect("pod")).is_some(),
                "{u} runs"
            );
        }
        // One admitted pod goes away: a new pod fits again; the rejected one stays Failed.
        std::fs::remove_file(k.manifests.join("a.yaml")).expect("remove a.yaml");
        wait_for("the removed pod gone", &log, || async {
            pod(port, &uids[0]).await.is_none().then_some(())
        })
        .await;
        k.write_manifest("e.yaml", &manifest("e"));
        wait_for("a new pod admitted after one left", &log, || async {
            running_ids(&pod(port, &uids[4]).await?)
        })
        .await;
        let d = pod(port, &uids[3]).await.expect("rejected pod");
        assert_eq!(d["status"]["reason"], "OutOfpods", "{d}");
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    k.shutdown(&tb, &uids).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_max_pods_containerd() {
    kubelet_max_pods(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_max_pods_dockershim() {
    kubelet_max_pods(RuntimeKind::Dockershim).await;
}
