//! Fault runs: the `kubelet` BINARY (on containerd's CRI, and with its embedded dockershim on
//! Docker) is killed with SIGKILL at a random moment of each of three rounds of churn — static
//! pods added, deleted and edited — and started again on the same root directory each time.
//! Afterwards every desired pod runs; the pods nobody touched keep their container ids and a
//! restart count of 0; the edited pod runs its new spec (new container); the deleted pods leave
//! no container, no sandbox, no CNI IP allocation and (dockershim) no sandbox checkpoint behind.
//! The moments of the kills are printed (seeded by the clock) so a failing run can be told apart.

use crate::kubelet_support;

use std::collections::HashMap;
use std::time::Duration;

use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use kubelet_support::*;

/// Whether host-local IPAM holds an address for sandbox `id` on the test bed's network of `kind`.
pub(crate) fn ip_reserved_for(kind: RuntimeKind, id: &str) -> bool {
    let dir = match kind {
        RuntimeKind::Containerd => "/var/lib/cni/networks/cri-testbed-containerd",
        RuntimeKind::Dockershim => "/var/lib/cni/networks/cri-testbed-dockershim",
    };
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten().any(|e| {
                std::fs::read_to_string(e.path())
                    .map(|c| c.lines().next() == Some(id))
                    .unwrap_or(false)
            })
        })
        .unwrap_or(false)
}

fn sigkill(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) on the pid of our own child process.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
    }
}

async fn kubelet_survives_sigkill_during_churn(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_sigkill_churn[{}]", kind.name()));
    let mut k = Kubelet::new(kind, "klfault");
    let node = k.node.clone();
    let uid = |n: &str| format!("{node}-{n}");
    let names = [
        "keep0", "keep1", "keep2", "edit", "del0", "del1", "add0", "add1",
    ];
    let uids: Vec<String> = names.iter().map(|n| uid(n)).collect();
    let manifest = |n: &str, script: &str| pod_manifest(n, &uid(n), &tb.busybox_image, script, "");
    for n in ["keep0", "keep1", "keep2", "edit", "del0", "del1"] {
        k.write_manifest(&format!("{n}.yaml"), &manifest(n, "sleep 3600"));
    }
    k.spawn(&tb, &[]);
    let (port, log, endpoint) = (k.port, k.log.clone(), k.endpoint(&tb));
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(7);
    let body = async {
        let mut before: HashMap<String, HashMap<String, String>> = HashMap::new();
        for n in ["keep0", "keep1", "keep2", "edit", "del0", "del1"] {
            let ids = wait_for("the first pods running", &log, || async {
                running_ids(&pod(port, &uid(n)).await?)
            })
            .await;
            before.insert(n.to_string(), ids);
        }
        let del_sandboxes: Vec<String> = {
            let mut v = Vec::new();
            for n in ["del0", "del1"] {
                for s in runtime_sandboxes(&endpoint, &uid(n))
                    .await
                    .expect("sandboxes")
                {
                    v.push(s.id);
                }
            }
            v
        };
        // Three rounds: a change, then SIGKILL after a random delay, then a restart.
        for round in 0..3usize {
            match round {
                0 => {
                    let _ = std::fs::remove_file(k.manifests.join("del0.yaml"));
                    k.write_manifest("add0.yaml", &manifest("add0", "sleep 3600"));
                }
                1 => {
                    k.write_manifest("edit.yaml", &manifest("edit", "sleep 3601"));
                    let _ = std::fs::remove_file(k.manifests.join("del1.yaml"));
                }
                _ => {
                    k.write_manifest("add1.yaml", &manifest("add1", "sleep 3600"));
                }
            }
            // 0.5 to 4.5 s: before, during or after the kubelet noticed the change.
            let delay = 500 + u64::from(seed.rotate_left(8 * round as u32) % 4000);
            println!("[{}] round {round}: SIGKILL after {delay} ms", kind.name());
            tokio::time::sleep(Duration::from_millis(delay)).await;
            if let Some(mut child) = k.child.take() {
                sigkill(&mut child);
                let _ = child.wait().await;
            }
            k.spawn(&tb, &[]);
        }
        // Everything desired runs.
        let mut after: HashMap<String, HashMap<String, String>> = HashMap::new();
        for n in ["keep0", "keep1", "keep2", "edit", "add0", "add1"] {
            let ids = wait_for(
                "every desired pod running after the kills",
                &log,
                || async {
                    let p = pod(port, &uid(n)).await?;
                    let ids = running_ids(&p)?;
                    // The edited pod must run its new spec.
                    if n == "edit" {
                        let cmd = p["spec"]["containers"][0]["command"][2].as_str()?;
                        (cmd == "sleep 3601" && ids != before[n]).then_some(())?;
                    }
                    Some(ids)
                },
            )
            .await;
            after.insert(n.to_string(), ids);
        }
        for n in ["keep0", "keep1", "keep2"] {
            assert_eq!(
                after[n], before[n],
                "{n}: the untouched pod kept its containers"
            );
            let p = pod(port, &uid(n)).await.expect("pod");
            assert_eq!(
                p["status"]["containerStatuses"][0]["restartCount"], 0,
                "{n}: never restarted: {p}"
            );
        }
        // The new spec runs in the runtime too: the old container is gone or stopped.
        let edit_containers = runtime_containers(&endpoint, &uid("edit"))
            .await
            .expect("containers");
        let running: Vec<_> = edit_containers
            .iter()
            .filter(|c| c.state == cri_proto::runtime::v1::ContainerState::ContainerRunning as i32)
            .collect();
        assert_eq!(running.len(), 1, "one running container for the edited pod");
        // The deleted pods leave nothing behind.
        for n in ["del0", "del1"] {
            wait_for("the deleted pods gone from the runtime", &log, || async {
                let c = runtime_containers(&endpoint, &uid(n)).await?;
                let s = runtime_sandboxes(&endpoint, &uid(n)).await?;
                (c.is_empty() && s.is_empty()).then_some(())
            })
            .await;
            assert!(pod(port, &uid(n)).await.is_none(), "{n} is not in /pods");
        }
        for id in &del_sandboxes {
            wait_for("the deleted pods' IPs released", &log, || async {
                (!ip_reserved_for(kind, id)).then_some(())
            })
            .await;
            if kind == RuntimeKind::Dockershim {
                let checkpoint = k.root.join("dockershim").join("sandbox").join(id);
                assert!(!checkpoint.exists(), "{} left behind", checkpoint.display());
            }
        }
    };
    let outcome = tokio::time::timeout(Duration::from_secs(300), body).await;
    k.shutdown(&tb, &uids).await;
    outcome.unwrap_or_else(|_| panic!("timed out; kubelet log:\n{}", log_tail(&k.log, 80)));
}

#[tokio::test]
async fn kubelet_survives_sigkill_during_churn_containerd() {
    kubelet_survives_sigkill_during_churn(RuntimeKind::Containerd).await;
}

#[tokio::test]
async fn kubelet_survives_sigkill_during_churn_dockershim() {
    kubelet_survives_sigkill_during_churn(RuntimeKind::Dockershim).await;
}
