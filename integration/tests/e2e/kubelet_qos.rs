//! End to end: QoS classes of the `kubelet` BINARY's pods on both runtimes (containerd's CRI
//! and the embedded dockershim on Docker). A BestEffort, a Burstable and a Guaranteed static
//! pod report their `qosClass` in `/pods`; inside each container `/proc/self/cgroup` shows the
//! upstream cgroupfs layout (`/kubepods/besteffort/pod<uid>/`, `/kubepods/burstable/pod<uid>/`,
//! `/kubepods/pod<uid>/`) and `/proc/self/oom_score_adj` the upstream score (1000, the
//! Burstable formula from the node's memory, -997 or the runtime's floor on hosts that cannot
//! lower scores); the pod cgroups are removed with the pods.

use crate::kubelet_support;

use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use kubelet_support::*;

/// Runs `cmd` in the pod's container; its stdout (the command must succeed).
async fn exec(endpoint: &str, uid: &str, cmd: &[&str]) -> String {
    let (code, out, err) = exec_in_pod(endpoint, uid, cmd).await.expect("ExecSync");
    assert_eq!(code, 0, "{cmd:?}: {err}");
    out
}

/// Does any cgroup hierarchy hold the directory `rel`?
fn cgroup_dir_exists(rel: &str) -> bool {
    let mount = std::path::Path::new("/sys/fs/cgroup");
    let rel = rel.trim_start_matches('/');
    if mount.join(rel).is_dir() {
        return true;
    }
    std::fs::read_dir(mount)
        .map(|rd| rd.flatten().any(|e| e.path().join(rel).is_dir()))
        .unwrap_or(false)
}

fn mem_total() -> u64 {
    let m = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
    m.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .expect("MemTotal")
        * 1024
}

async fn kubelet_qos(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_qos[{}]", kind.name()));
    let mut k = Kubelet::new(kind, "klqos");
    let uid = |n: &str| format!("{}-{n}", k.node);
    let (be, bu, gu) = (uid("be"), uid("bu"), uid("gu"));
    let uids = [be.clone(), bu.clone(), gu.clone()];
    let image = &tb.busybox_image;
    let resources = |r: &str| format!("    resources:\n{r}");
    for (file, name, u, res) in [
        ("be.yaml", "be", &be, String::new()),
        (
            "bu.yaml",
            "bu",
            &bu,
            resources("      requests:\n        memory: 64Mi\n"),
        ),
        (
            "gu.yaml",
            "gu",
            &gu,
            resources(
                "      requests:\n        cpu: 100m\n        memory: 64Mi\n      limits:\n        cpu: 100m\n        memory: 64Mi\n",
            ),
        ),
    ] {
        let manifest = pod_manifest(name, u, image, "sleep 3600", "") + &res;
        k.write_manifest(file, &manifest);
    }
    k.spawn(&tb, &[]);
    let endpoint = k.endpoint(&tb);
    let outcome = tokio::spawn({
        let (port, log, endpoint) = (k.port, k.log.clone(), endpoint.clone());
        let (be, bu, gu) = (be.clone(), bu.clone(), gu.clone());
        async move {
            for (u, class) in [(&be, "BestEffort"), (&bu, "Burstable"), (&gu, "Guaranteed")] {
                let p = wait_for(&format!("{class} pod running"), &log, || async {
                    let p = pod(port, u).await?;
                    running_ids(&p).map(|_| p)
                })
                .await;
                assert_eq!(p["status"]["qosClass"], class, "{p}");
            }
            // The cgroup layout by QoS class.
            for (u, rel) in [
                (&be, format!("/kubepods/besteffort/pod{be}/")),
                (&bu, format!("/kubepods/burstable/pod{bu}/")),
                (&gu, format!("/kubepods/pod{gu}/")),
            ] {
                let cg = exec(&endpoint, u, &["cat", "/proc/self/cgroup"]).await;
                assert!(
                    cg.lines().any(|l| l.contains(&rel)),
                    "{u}: {rel} not in\n{cg}"
                );
                assert!(cgroup_dir_exists(&rel), "{rel} exists on the host");
            }
            // oom_score_adj by QoS class.
            let score = |s: String| s.trim().parse::<i64>().expect("oom_score_adj");
            let be_adj = score(exec(&endpoint, &be, &["cat", "/proc/self/oom_score_adj"]).await);
            let bu_adj = score(exec(&endpoint, &bu, &["cat", "/proc/self/oom_score_adj"]).await);
            let gu_adj = score(exec(&endpoint, &gu, &["cat", "/proc/self/oom_score_adj"]).await);
            assert_eq!(be_adj, 1000);
            let want = (1000 - (1000 * (64i128 << 20)) / i128::from(mem_total())).clamp(3, 999);
            assert_eq!(i128::from(bu_adj), want);
            // -997 where the host may lower scores; otherwise the runtime raises it to its
            // floor (dockershim and containerd's restrict_oom_score_adj: 0 here).
            assert!(
                (-997..=0).contains(&gu_adj),
                "Guaranteed oom_score_adj {gu_adj}"
            );
            assert!(gu_adj < bu_adj && bu_adj < be_adj);
        }
    })
    .await;
    if let Err(e) = outcome {
        k.shutdown(&tb, &uids).await;
        std::panic::resume_unwind(e.into_panic());
    }
    // Deleting the manifests removes the pods and their cgroups.
    for f in ["be.yaml", "bu.yaml", "gu.yaml"] {
        let _ = std::fs::remove_file(k.manifests.join(f));
    }
    let outcome = tokio::spawn({
        let (port, log) = (k.port, k.log.clone());
        let (be, bu, gu) = (be.clone(), bu.clone(), gu.clone());
        async move {
            wait_for("the pods and their cgroups gone", &log, || async {
                let pods = pods(port).await?;
                let gone = [&be, &bu, &gu].iter().all(|u| find_pod(&pods, u).is_none());
                let cgroups = [
                    format!("/kubepods/besteffort/pod{be}"),
                    format!("/kubepods/burstable/pod{bu}"),
                    format!("/kubepods/pod{gu}"),
                ];
                (gone && !cgroups.iter().any(|c| cgroup_dir_exists(c))).then_some(())
            })
            .await;
        }
    })
    .await;
    k.shutdown(&tb, &uids).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_qos_containerd() {
    kubelet_qos(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_qos_dockershim() {
    kubelet_qos(RuntimeKind::Dockershim).await;
}
