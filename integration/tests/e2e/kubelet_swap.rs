//! Live kubelet swaps (issue 35): three static pods (one with an init container and two
//! containers, probes, env, resources with `0.5`/`0.0005`/`1e6` quantities, an emptyDir and a
//! preStop hook; one with ports and limits; one with HTML characters in its command) run on a
//! real runtime; the kubelet is stopped and another one started on the same root directory,
//! manifests and runtime. Nothing may be recreated: every sandbox and container id stays, no
//! restart count rises, and no new sandbox or container appears. Afterwards the adopted pods
//! are managed: a deleted manifest's sandbox and containers go.
//!
//! - `kubelet_swap_self_*`: this kubelet swapped for itself (no judge), on containerd and on
//!   the embedded dockershim. Its runtime labels must also be the Go kubelet 1.26's: the
//!   static pod UIDs (`io.kubernetes.pod.uid`) and `io.kubernetes.container.hash` values are
//!   the ones the Go code computes for these files (printed by an oracle built from the
//!   vendored Kubernetes 1.26, see kubelet/src/util/hash/tests.rs), so this test fails with a
//!   kubelet whose hashes differ from upstream's.
//! - `kubelet_swap_with_go_kubelet_containerd`: the Go kubelet 1.26 (`KUBELET_JUDGE`, a
//!   kubelet binary) runs the pods standalone, is swapped for this kubelet, and back. Skipped
//!   with a loud line when `KUBELET_JUDGE` is not set.
//!
//! The manifests live at fixed paths (`/tmp/kubelet-swap-e2e/<case>/manifests`) on fixed node
//! names because a static pod's UID depends on both.

use crate::kubelet_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use cri_proto::runtime::v1 as cri;
use futures::FutureExt;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use integration::testbed::Testbed;
use kubelet_support::*;
use tokio::process::{Child, Command};

/// The busybox image the golden values were computed with.
const GOLDEN_IMAGE: &str = "127.0.0.1:5000/busybox:latest";

const WEB: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: swap
  labels:
    app: web
spec:
  terminationGracePeriodSeconds: 1
  initContainers:
  - name: init
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo '<ok>' > /work/index.html && test 1 -lt 2"]
    volumeMounts:
    - name: work
      mountPath: /work
  containers:
  - name: server
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "exec sleep 3600"]
    ports:
    - containerPort: 8080
      name: http
    env:
    - name: MODE
      value: "a&b<c>"
    - name: NODE
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    resources:
      limits:
        cpu: "0.5"
        memory: 64Mi
      requests:
        cpu: 100m
        memory: 32Mi
    readinessProbe:
      exec:
        command: ["test", "-f", "/work/index.html"]
      periodSeconds: 2
    lifecycle:
      preStop:
        exec:
          command: ["sh", "-c", "true"]
    volumeMounts:
    - name: work
      mountPath: /work
      readOnly: true
  - name: side
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "exec sleep 3600"]
    resources:
      requests:
        memory: "1e6"
        cpu: "0.0005"
  volumes:
  - name: work
    emptyDir:
      sizeLimit: 16Mi
"#;

const DB: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: db
  namespace: swap
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: db
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "exec sleep 3600"]
    ports:
    - containerPort: 5432
      protocol: TCP
    - containerPort: 5433
      protocol: UDP
      name: udp
    resources:
      limits:
        cpu: "1"
        memory: 1Gi
    securityContext:
      allowPrivilegeEscalation: false
"#;

const TOOLS: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: tools
  namespace: swap
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: tools
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo \"<b>&amp;</b>\"; exec sleep 3600"]
    workingDir: /tmp
"#;

/// One case's fixed place and the Go kubelet 1.26's values for it: (file, text, UID).
struct Case {
    name: &'static str,
    pods: [(&'static str, &'static str, &'static str); 3],
}

/// `io.kubernetes.container.hash` of each container (the same in every case).
const HASHES: &[(&str, &str)] = &[
    ("init", "c14d5148"),
    ("server", "66ad0e22"),
    ("side", "ce061e1f"),
    ("db", "92a3ac33"),
    ("tools", "6545c258"),
];

const SELF_CONTAINERD: Case = Case {
    name: "self-containerd",
    pods: [
        ("web.yaml", WEB, "1f882b6ac2a6482625bd48eedeba783b"),
        ("db.yaml", DB, "d5010792f52a76f71e454f7ccc536f14"),
        ("tools.yaml", TOOLS, "31aa4dbda450c8e3c5eeeabd5b0cff37"),
    ],
};
const SELF_DOCKERSHIM: Case = Case {
    name: "self-dockershim",
    pods: [
        ("web.yaml", WEB, "2c1a6aa4f2e57334161556ffc027cc94"),
        ("db.yaml", DB, "bf8feb02f12f9412cdecfe3c3f1fdeec"),
        ("tools.yaml", TOOLS, "2f34993ba86965d099a09df4b5791a21"),
    ],
};
const JUDGE_CONTAINERD: Case = Case {
    name: "judge-containerd",
    pods: [
        ("web.yaml", WEB, "061016617f262ddeab19474ae841ffb3"),
        ("db.yaml", DB, "d3e504f6f3d9891a9ae173d37defc45b"),
        ("tools.yaml", TOOLS, "c800dfe8783a8532232a76dabfa54a3c"),
    ],
};

/// Where a case runs: its directories, node name and read-only port.
struct Place {
    dir: PathBuf,
    root: PathBuf,
    manifests: PathBuf,
    log: PathBuf,
    node: String,
    port: u16,
}

impl Place {
    /// A clean fixed directory for `case` with its manifests written for `image`.
    fn new(case: &Case, image: &str) -> Place {
        let dir = Path::new("/tmp/kubelet-swap-e2e").join(case.name);
        let root = dir.join("root");
        unmount_under(&root);
        let _ = std::fs::remove_dir_all(&dir);
        let manifests = dir.join("manifests");
        std::fs::create_dir_all(&manifests).expect("manifest dir");
        for (file, text, _) in &case.pods {
            std::fs::write(manifests.join(file), text.replace("IMAGE", image)).expect("manifest");
        }
        Place {
            log: dir.join("kubelet.log"),
            root,
            manifests,
            node: format!("swap-{}", case.name),
            port: free_port(),
            dir,
        }
    }
}

/// Detach every mount under `root` (emptyDirs a stopped kubelet left mounted).
fn unmount_under(root: &Path) {
    let root = root.display().to_string();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for m in mountinfo.lines().filter_map(|l| l.split(' ').nth(4)) {
        if m.starts_with(&root)
            && let Ok(c) = std::ffi::CString::new(m)
        {
            // SAFETY: umount2(2) with a valid NUL-terminated path under our test directory.
            unsafe {
                libc::umount2(c.as_ptr(), libc::MNT_DETACH);
            }
        }
    }
}

/// This kubelet on `place`.
fn ours(kind: RuntimeKind, tb: &Testbed, place: &Place) -> Child {
    kubelet_command(
        kind,
        tb,
        &place.root,
        Some(&place.manifests),
        place.port,
        &place.node,
        &place.log,
    )
    .spawn()
    .expect("spawn kubelet")
}

/// The Go kubelet 1.26 at `judge`, standalone on containerd, on `place`: no API server, the
/// runtime's cgroupfs driver, no iptables chains, and neither image nor dead-container GC
/// (other tests share the runtime and its images).
fn go_kubelet(judge: &Path, tb: &Testbed, place: &Place) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&place.log)
        .expect("log");
    Command::new(judge)
        .arg("--container-runtime-endpoint")
        .arg(&tb.containerd_endpoint)
        .arg("--root-dir")
        .arg(&place.root)
        .arg("--pod-manifest-path")
        .arg(&place.manifests)
        .args([
            "--file-check-frequency",
            "2s",
            "--cgroup-driver",
            "cgroupfs",
        ])
        .args(["--fail-swap-on=false", "--make-iptables-util-chains=false"])
        .args(["--read-only-port", &place.port.to_string()])
        .args(["--port", &free_port().to_string(), "--healthz-port", "0"])
        .args(["--hostname-override", &place.node])
        .args(["--pod-infra-container-image", &tb.pause_image])
        .args([
            "--image-gc-high-threshold",
            "100",
            "--image-gc-low-threshold",
            "99",
        ])
        .args(["--minimum-container-ttl-duration", "100h"])
        .args(["--eviction-hard", "memory.available<100Mi", "-v", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the Go kubelet")
}

/// What the runtime holds for one pod: sandbox ids, and per container name its id, hash
/// label and restart count annotation (every container, running or not).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    sandboxes: Vec<String>,
    containers: BTreeMap<String, Vec<(String, String, String, i32)>>,
}

async fn snapshot(endpoint: &str, uid: &str) -> Snapshot {
    let mut sandboxes: Vec<String> = runtime_sandboxes(endpoint, uid)
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.id)
        .collect();
    sandboxes.sort();
    let mut containers: BTreeMap<String, Vec<(String, String, String, i32)>> = BTreeMap::new();
    for c in runtime_containers(endpoint, uid).await.unwrap_or_default() {
        let name = c
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let hash = c
            .annotations
            .get("io.kubernetes.container.hash")
            .cloned()
            .unwrap_or_default();
        let restarts = c
            .annotations
            .get("io.kubernetes.container.restartCount")
            .cloned()
            .unwrap_or_default();
        let state = cri::ContainerState::try_from(c.state)
            .map(|s| s.as_str_name().to_string())
            .unwrap_or_default();
        let attempt = c.metadata.map(|m| m.attempt as i32).unwrap_or(-1);
        containers.entry(name).or_default().push((
            c.id,
            hash,
            format!("{state} restarts={restarts}"),
            attempt,
        ));
    }
    for v in containers.values_mut() {
        v.sort();
    }
    Snapshot {
        sandboxes,
        containers,
    }
}

/// Wait until the kubelet on `port` reports the first `n` pods of `case` Running with every
/// container running, then return the runtime's snapshot of each.
async fn running_pods(case: &Case, n: usize, place: &Place, endpoint: &str) -> Vec<Snapshot> {
    let mut out = Vec::new();
    for (file, _, uid) in case.pods.iter().take(n) {
        wait_for(&format!("{file} Running"), &place.log, || async {
            running_ids(&pod(place.port, uid).await?)
        })
        .await;
        out.push(snapshot(endpoint, uid).await);
    }
    out
}

/// [`running_pods`] for every pod of `case`.
async fn all_running(case: &Case, place: &Place, endpoint: &str) -> Vec<Snapshot> {
    running_pods(case, case.pods.len(), place, endpoint).await
}

/// Check the Go kubelet's values: sandbox and containers found under the Go UID, and every
/// container's hash label the Go hash.
fn assert_golden(case: &Case, snaps: &[Snapshot]) {
    for ((file, _, uid), snap) in case.pods.iter().zip(snaps) {
        assert_eq!(
            snap.sandboxes.len(),
            1,
            "{file}: one sandbox labelled with the Go kubelet's UID {uid}: {snap:?}"
        );
        for (name, list) in &snap.containers {
            let want = HASHES
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, h)| *h)
                .unwrap_or("?");
            for (_, hash, _, _) in list {
                assert_eq!(hash, want, "{file}/{name}: the Go kubelet's container hash");
            }
        }
    }
}

/// A new kubelet has synced the old pods: a fourth static pod added after it started runs
/// (its first sync comes after the first sync of the pods it found), then the canary is
/// stopped (the Go kubelet leaves its dead containers to the garbage collector).
async fn settle(place: &Place, image: &str, endpoint: &str) {
    let canary = format!("{}-canary", place.node);
    std::fs::write(
        place.manifests.join("canary.yaml"),
        pod_manifest("canary", &canary, image, "exec sleep 3600", ""),
    )
    .expect("canary manifest");
    wait_for("canary Running", &place.log, || async {
        running_ids(&pod(place.port, &canary).await?)
    })
    .await;
    let _ = std::fs::remove_file(place.manifests.join("canary.yaml"));
    wait_for("canary stopped", &place.log, || async {
        let running = cri::ContainerState::ContainerRunning as i32;
        runtime_containers(endpoint, &canary)
            .await
            .filter(|c| c.iter().all(|c| c.state != running))
    })
    .await;
}

/// After a swap: the same snapshot, pod by pod.
fn assert_unchanged(step: &str, case: &Case, before: &[Snapshot], after: &[Snapshot]) {
    for (((file, _, _), b), a) in case.pods.iter().zip(before).zip(after) {
        assert_eq!(
            b, a,
            "{step}: {file}: a sandbox or container was recreated or restarted"
        );
    }
}

/// The deleted manifest's pod goes: no container, no sandbox.
async fn delete_one(case: &Case, place: &Place, endpoint: &str) {
    let (file, _, uid) = case.pods[2];
    std::fs::remove_file(place.manifests.join(file)).expect("remove manifest");
    wait_for(
        &format!("{file} removed from the runtime"),
        &place.log,
        || async {
            let c = runtime_containers(endpoint, uid).await?;
            let s = runtime_sandboxes(endpoint, uid).await?;
            (c.is_empty() && s.is_empty()).then_some(())
        },
    )
    .await;
}

async fn stop(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        stop_kubelet(&mut c).await;
    }
}

/// UIDs of every sandbox of `node` on the runtime at `endpoint` (pods a kubelet made under
/// UIDs other than the expected ones, too).
async fn node_pod_uids(endpoint: &str, node: &str) -> Vec<String> {
    let Ok((mut rt, _)) = integration::runtimes::clients(endpoint).await else {
        return Vec::new();
    };
    let suffix = format!("-{node}");
    rt.list_pod_sandbox(cri::ListPodSandboxRequest::default())
        .await
        .map(|r| r.into_inner().items)
        .unwrap_or_default()
        .into_iter()
        .filter(|s| {
            s.metadata
                .as_ref()
                .is_some_and(|m| m.name.ends_with(&suffix))
        })
        .filter_map(|s| s.labels.get(UID_LABEL).cloned())
        .collect()
}

/// Stop the kubelet and remove every pod of the case's node from the runtime (collected while
/// the kubelet, and with it an embedded dockershim, still runs).
async fn teardown(
    kind: RuntimeKind,
    tb: &Testbed,
    case: &Case,
    place: &Place,
    child: &mut Option<Child>,
) {
    let endpoint = runtime_endpoint(kind, tb, &place.root);
    let mut uids: Vec<String> = case.pods.iter().map(|(_, _, u)| u.to_string()).collect();
    uids.push(format!("{}-canary", place.node));
    uids.extend(node_pod_uids(&endpoint, &place.node).await);
    uids.sort();
    uids.dedup();
    stop(child).await;
    cleanup_all(kind, tb, &uids).await;
    unmount_under(&place.root);
    let _ = std::fs::remove_dir_all(&place.dir);
}

async fn swap_self(kind: RuntimeKind, case: &Case) {
    let tb = require_testbed!(&format!("kubelet_swap_self[{}]", kind.name()));
    let place = Place::new(case, &tb.busybox_image);
    let mut child = Some(ours(kind, &tb, &place));
    let endpoint = runtime_endpoint(kind, &tb, &place.root);
    let body = async {
        let before = all_running(case, &place, &endpoint).await;
        if tb.busybox_image == GOLDEN_IMAGE {
            assert_golden(case, &before);
        } else {
            eprintln!("NOTE the golden UIDs and hashes are for {GOLDEN_IMAGE}: not checked");
        }
        stop(&mut child).await;
        child = Some(ours(kind, &tb, &place));
        // The embedded dockershim's socket is back with the kubelet.
        let after = all_running(case, &place, &endpoint).await;
        settle(&place, &tb.busybox_image, &endpoint).await;
        let settled = all_running(case, &place, &endpoint).await;
        assert_unchanged("restart", case, &before, &after);
        assert_unchanged("restart, settled", case, &before, &settled);
        delete_one(case, &place, &endpoint).await;
        let kept = running_pods(case, 2, &place, &endpoint).await;
        assert_unchanged("after deleting tools", case, &before[..2], &kept[..2]);
    };
    let outcome = std::panic::AssertUnwindSafe(body).catch_unwind().await;
    teardown(kind, &tb, case, &place, &mut child).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

#[tokio::test]
async fn kubelet_swap_self_containerd() {
    swap_self(RuntimeKind::Containerd, &SELF_CONTAINERD).await;
}

#[tokio::test]
async fn kubelet_swap_self_dockershim() {
    swap_self(RuntimeKind::Dockershim, &SELF_DOCKERSHIM).await;
}

#[tokio::test]
async fn kubelet_swap_with_go_kubelet_containerd() {
    let test = "kubelet_swap_with_go_kubelet_containerd";
    let Some(judge) = std::env::var_os("KUBELET_JUDGE").map(PathBuf::from) else {
        eprintln!(
            "SKIPPED {test}: KUBELET_JUDGE is not set (a Go kubelet 1.26 binary, e.g. /opt/judges/k8s/bin/kubelet)"
        );
        return;
    };
    let tb = require_testbed!(test);
    let kind = RuntimeKind::Containerd;
    let case = &JUDGE_CONTAINERD;
    let place = Place::new(case, &tb.busybox_image);
    let endpoint = tb.containerd_endpoint.clone();
    let mut child = Some(go_kubelet(&judge, &tb, &place));
    let body = async {
        let before = all_running(case, &place, &endpoint).await;
        if tb.busybox_image == GOLDEN_IMAGE {
            // The golden values are the Go code's: this checks the oracle against the judge.
            assert_golden(case, &before);
        }
        stop(&mut child).await;
        child = Some(ours(kind, &tb, &place));
        all_running(case, &place, &endpoint).await;
        settle(&place, &tb.busybox_image, &endpoint).await;
        let ours_settled = all_running(case, &place, &endpoint).await;
        assert_unchanged("Go kubelet -> this kubelet", case, &before, &ours_settled);
        stop(&mut child).await;
        child = Some(go_kubelet(&judge, &tb, &place));
        all_running(case, &place, &endpoint).await;
        settle(&place, &tb.busybox_image, &endpoint).await;
        let go_settled = all_running(case, &place, &endpoint).await;
        assert_unchanged("this kubelet -> Go kubelet", case, &before, &go_settled);
        // And this kubelet manages what the Go kubelet made: a deleted manifest's pod goes.
        stop(&mut child).await;
        child = Some(ours(kind, &tb, &place));
        all_running(case, &place, &endpoint).await;
        delete_one(case, &place, &endpoint).await;
        let kept = running_pods(case, 2, &place, &endpoint).await;
        assert_unchanged("after deleting tools", case, &before[..2], &kept[..2]);
    };
    let outcome = std::panic::AssertUnwindSafe(body).catch_unwind().await;
    teardown(kind, &tb, case, &place, &mut child).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}
