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
//! - `kubelet_swap_with_go_kubelet_dockershim`: the same with this project's standalone
//!   `dockershim` binary as the runtime of both kubelets (one socket and root directory): the
//!   Go kubelet's pods are adopted, a deleted manifest's containers, sandbox, checkpoint and
//!   CNI address go, and the Go kubelet takes the rest back.
//!
//! API pods (including an in-place edit of a container's image, which a static pod cannot
//! have: its UID changes with its file) are swapped in kubelet_swap_api.rs (with the judges)
//! and kubelet_swap_api_self.rs (no judge).
//!
//! Deleting a manifest also checks that the pod's CNI address (host-local IPAM) is released
//! and, on dockershim, its sandbox checkpoint removed. dockershim_swap.rs swaps the runtime
//! (cri-dockerd and dockershim) under a running Go kubelet with these helpers.
//!
//! The manifests live at fixed paths (`/tmp/kubelet-swap-e2e/<case>/manifests`) on fixed node
//! names because a static pod's UID depends on both.

use crate::kubelet_faults::ip_reserved_for;
use crate::kubelet_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use cri_proto::runtime::v1 as cri;
use futures::FutureExt;
use integration::require_testbed;
use integration::runtimes::{RuntimeKind, ShimProcess};
use integration::testbed::Testbed;
use kubelet_support::*;
use tokio::process::{Child, Command};

/// The busybox image the golden values were computed with.
pub(crate) const GOLDEN_IMAGE: &str = "127.0.0.1:5000/busybox:latest";

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

/// [`DB`] as a Burstable pod (its container, `db-burstable`, requests less than its limits),
/// for runtimes that cannot start a Guaranteed pod on a host that cannot lower
/// oom_score_adj: the kubelet asks oom_score_adj -997 for Guaranteed containers, and
/// cri-dockerd passes it to Docker as is, whose runc then fails to start the container
/// (`can't get final child's PID from pipe: EOF`): the container stays `Created` with exit
/// code 128 and the kubelet retries it in back-off (`CrashLoopBackOff`). containerd
/// (`restrict_oom_score_adj`) and dockershim raise the value to what the host allows.
const DB_BURSTABLE: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: db
  namespace: swap
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: db-burstable
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
      requests:
        cpu: 500m
        memory: 64Mi
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
pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) pods: [(&'static str, &'static str, &'static str); 3],
}

/// `io.kubernetes.container.hash` of each container (the same in every case).
const HASHES: &[(&str, &str)] = &[
    ("init", "c14d5148"),
    ("server", "66ad0e22"),
    ("side", "ce061e1f"),
    ("db", "92a3ac33"),
    ("db-burstable", "11170d7d"),
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
const JUDGE_DOCKERSHIM: Case = Case {
    name: "judge-dockershim",
    pods: [
        ("web.yaml", WEB, "02bdbef5895216ccb8db595addcde58d"),
        ("db.yaml", DB, "a972ba34a59c0bd793c0a0fea0861cd4"),
        ("tools.yaml", TOOLS, "f1d011990982b48efccbdb337dc03981"),
    ],
};
/// Static pods under the Go kubelet while cri-dockerd and dockershim swap (dockershim_swap.rs).
pub(crate) const DOCKERSHIM_CRI_DOCKERD: Case = Case {
    name: "dockershim-cri-dockerd",
    pods: [
        ("web.yaml", WEB, "4396501417cc0aa3abe8252875132fd4"),
        ("db.yaml", DB, "1e39d6ecbc0a56873c6c5e9138b4f8be"),
        ("tools.yaml", TOOLS, "be227d6fa126d47e9af4ace7a3625dda"),
    ],
};
/// [`DOCKERSHIM_CRI_DOCKERD`] with [`DB_BURSTABLE`] (same place): for hosts that cannot lower
/// oom_score_adj, where cri-dockerd cannot start the Guaranteed `db`.
pub(crate) const DOCKERSHIM_CRI_DOCKERD_BURSTABLE: Case = Case {
    name: "dockershim-cri-dockerd",
    pods: [
        ("web.yaml", WEB, "4396501417cc0aa3abe8252875132fd4"),
        ("db.yaml", DB_BURSTABLE, "0112016abf9bff0cac513de96c04ab4a"),
        ("tools.yaml", TOOLS, "be227d6fa126d47e9af4ace7a3625dda"),
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
pub(crate) struct Place {
    pub(crate) dir: PathBuf,
    pub(crate) root: PathBuf,
    pub(crate) manifests: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) node: String,
    pub(crate) port: u16,
}

impl Place {
    /// A clean fixed directory for `case` with its manifests written for `image`.
    pub(crate) fn new(case: &Case, image: &str) -> Place {
        let place = Place::empty(case.name);
        for (file, text, _) in &case.pods {
            std::fs::write(place.manifests.join(file), text.replace("IMAGE", image))
                .expect("manifest");
        }
        place
    }

    /// A clean fixed directory `name` with an empty manifest directory, node `swap-<name>`.
    pub(crate) fn empty(name: &str) -> Place {
        let dir = Path::new("/tmp/kubelet-swap-e2e").join(name);
        let root = dir.join("root");
        unmount_under(&root);
        let _ = std::fs::remove_dir_all(&dir);
        let manifests = dir.join("manifests");
        std::fs::create_dir_all(&manifests).expect("manifest dir");
        Place {
            log: dir.join("kubelet.log"),
            root,
            manifests,
            node: format!("swap-{name}"),
            port: free_port(),
            dir,
        }
    }
}

/// Detach every mount under `root` (emptyDirs a stopped kubelet left mounted).
pub(crate) fn unmount_under(root: &Path) {
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

/// Where every kubelet on the host writes its pods' logs; the Go kubelet 1.26 cannot be given
/// another (`podLogsRootDirectory` is a constant).
pub(crate) const POD_LOGS_ROOT: &str = "/var/log/pods";

/// Set to `1` to run the Go kubelet although other pods' log directories are in
/// [`POD_LOGS_ROOT`] (they will be removed).
pub(crate) const SHARED_POD_LOGS_ENV: &str = "GO_KUBELET_SHARED_POD_LOGS";

/// The directories among `entries` (names in [`POD_LOGS_ROOT`], `<ns>_<name>_<uid>`) of pods
/// whose UID is not in `own`. The Go kubelet 1.26's container GC (`evictPodLogsDirectories`,
/// every minute once its sources are ready) removes the log directory of every pod it does not
/// run, so starting it on a host where other kubelets (a judge node, soak kubelets, other
/// tests) keep their pods' logs there deletes their running containers' log files: their
/// `/containerLogs` answers "entity not found" until the container restarts.
pub(crate) fn foreign_pod_log_dirs<I, S>(entries: I, own: &[&str]) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut v: Vec<String> = entries
        .into_iter()
        .map(Into::into)
        .filter(|name| {
            let uid = name.rsplit('_').next().unwrap_or(name);
            !own.contains(&uid)
        })
        .collect();
    v.sort();
    v
}

/// Whether `test` must not start the Go kubelet for `case` (said with a loud `SKIPPED`
/// line): [`POD_LOGS_ROOT`] holds log directories of pods other than the case's (its static
/// pods, its canary and its `-fresh` pod) and [`SHARED_POD_LOGS_ENV`] is not `1`; see
/// [`foreign_pod_log_dirs`].
pub(crate) fn skip_for_shared_pod_logs(test: &str, case: &Case) -> bool {
    let extra = [
        format!("swap-{}-canary", case.name),
        format!("swap-{}-fresh", case.name),
    ];
    let own: Vec<&str> = case
        .pods
        .iter()
        .map(|(_, _, uid)| *uid)
        .chain(extra.iter().map(String::as_str))
        .collect();
    skip_for_foreign_pod_logs(test, &own)
}

/// [`skip_for_shared_pod_logs`] for a test whose own pods have the UIDs `own`.
pub(crate) fn skip_for_foreign_pod_logs(test: &str, own: &[&str]) -> bool {
    let names = std::fs::read_dir(POD_LOGS_ROOT)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| e.file_name().into_string().ok())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let foreign = foreign_pod_log_dirs(names, own);
    let Some(first) = foreign.first() else {
        return false;
    };
    if std::env::var(SHARED_POD_LOGS_ENV).as_deref() == Ok("1") {
        eprintln!(
            "NOTE {test}: {SHARED_POD_LOGS_ENV}=1: the Go kubelet's container GC will remove {} log directories of other pods in {POD_LOGS_ROOT}",
            foreign.len()
        );
        return false;
    }
    eprintln!(
        "SKIPPED {test}: {POD_LOGS_ROOT} holds {} log directories of other pods (first: {first}); the Go kubelet's container GC would remove them under the kubelets running those pods. Set {SHARED_POD_LOGS_ENV}=1 to run anyway",
        foreign.len()
    );
    true
}

/// Where the kubelets link each container's current log file (`<pod>_<ns>_<container>-<id>.log`
/// pointing into [`POD_LOGS_ROOT`]).
pub(crate) const CONTAINER_LOGS_ROOT: &str = "/var/log/containers";

/// Removes, in `pods_root`, the log directories (`<ns>_<name>_<uid>`) of the pods whose UID is
/// in `uids`, and the links in `containers_root` that point into them. A kubelet's container
/// GC removes a deleted pod's logs only a minute later (the Go kubelet's at all only with GC
/// on), so without this a test's pods stay in `/var/log/pods` as "other pods" for the next
/// Go-kubelet test ([`skip_for_foreign_pod_logs`]). Returns the directories still there.
pub(crate) fn remove_pod_logs_in(
    pods_root: &Path,
    containers_root: &Path,
    uids: &[String],
) -> Vec<PathBuf> {
    let ours = |name: &str| {
        uids.iter()
            .any(|u| name.rsplit('_').next() == Some(u.as_str()))
    };
    let dirs: Vec<PathBuf> = std::fs::read_dir(pods_root)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| e.file_name().to_str().is_some_and(ours))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    if let Ok(rd) = std::fs::read_dir(containers_root) {
        for link in rd.filter_map(Result::ok).map(|e| e.path()) {
            if std::fs::read_link(&link).is_ok_and(|t| dirs.iter().any(|d| t.starts_with(d))) {
                let _ = std::fs::remove_file(&link);
            }
        }
    }
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    dirs.into_iter().filter(|d| d.exists()).collect()
}

/// [`remove_pod_logs_in`] on the host's [`POD_LOGS_ROOT`] and [`CONTAINER_LOGS_ROOT`]; panics
/// when a directory stays.
pub(crate) fn remove_pod_logs(uids: &[String]) {
    let left = remove_pod_logs_in(
        Path::new(POD_LOGS_ROOT),
        Path::new(CONTAINER_LOGS_ROOT),
        uids,
    );
    assert!(left.is_empty(), "pod log directories not removed: {left:?}");
}

#[test]
fn remove_pod_logs_in_removes_only_the_given_pods_logs() {
    let dir = tempfile::Builder::new()
        .prefix("podlogs-")
        .tempdir()
        .unwrap();
    let (pods, ctrs) = (dir.path().join("pods"), dir.path().join("containers"));
    std::fs::create_dir_all(&ctrs).unwrap();
    for (pod, ctr) in [
        ("swap_web-swap-x_swap-x-web", "server"),
        ("default_canary-swap-x_swap-x-canary", "main"),
        ("default_keep0-soak1_soak1-keep0", "main"),
    ] {
        let file = pods.join(pod).join(ctr).join("0.log");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "log\n").unwrap();
        std::os::unix::fs::symlink(&file, ctrs.join(format!("{pod}_{ctr}-0123.log"))).unwrap();
    }
    let uids = ["swap-x-web".to_string(), "swap-x-canary".to_string()];
    assert!(remove_pod_logs_in(&pods, &ctrs, &uids).is_empty());
    let names = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&pods), vec!["default_keep0-soak1_soak1-keep0"]);
    assert_eq!(
        names(&ctrs),
        vec!["default_keep0-soak1_soak1-keep0_main-0123.log"]
    );
}

#[test]
fn foreign_pod_log_dirs_are_those_of_other_pods() {
    let entries = [
        "cmtest_mtpod_9a503d33-1097-4341-b1f1-02a71a1f00cf",
        "default_web-swap-x_swap-x-web",
        "default_keep0-soak1_soak1-keep0",
        "default_canary-swap-x_swap-x-canary",
    ];
    assert_eq!(
        foreign_pod_log_dirs(entries, &["swap-x-web", "swap-x-canary"]),
        vec![
            "cmtest_mtpod_9a503d33-1097-4341-b1f1-02a71a1f00cf".to_string(),
            "default_keep0-soak1_soak1-keep0".to_string(),
        ]
    );
    assert!(foreign_pod_log_dirs(["default_a_u1", "default_b_u2"], &["u1", "u2"]).is_empty());
    assert_eq!(
        foreign_pod_log_dirs(["x"], &[]),
        vec!["x".to_string()],
        "a name without separators is another pod's"
    );
}

/// The Go kubelet 1.26 at `judge`, standalone on the CRI runtime at `endpoint` (containerd,
/// dockershim or cri-dockerd), on `place`: no API server, the runtime's cgroupfs driver, no
/// iptables chains, and neither image nor dead-container GC (other tests share the runtime and
/// its images).
pub(crate) fn go_kubelet(judge: &Path, tb: &Testbed, endpoint: &str, place: &Place) -> Child {
    go_kubelet_with(judge, tb, endpoint, place, &[])
}

/// [`go_kubelet`] with `extra` flags (an API server's credentials, a node IP, ports).
pub(crate) fn go_kubelet_with(
    judge: &Path,
    tb: &Testbed,
    endpoint: &str,
    place: &Place,
    extra: &[String],
) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&place.log)
        .expect("log");
    Command::new(judge)
        .args([
            "--container-runtime=remote",
            "--container-runtime-endpoint",
            endpoint,
        ])
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
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the Go kubelet")
}

/// What the runtime holds for one pod: sandbox ids, and per container name its id, hash
/// label and restart count annotation (every container, running or not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) sandboxes: Vec<String>,
    pub(crate) containers: BTreeMap<String, Vec<(String, String, String, i32)>>,
}

pub(crate) async fn snapshot(endpoint: &str, uid: &str) -> Snapshot {
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
pub(crate) async fn running_pods(
    case: &Case,
    n: usize,
    place: &Place,
    endpoint: &str,
) -> Vec<Snapshot> {
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
pub(crate) async fn all_running(case: &Case, place: &Place, endpoint: &str) -> Vec<Snapshot> {
    running_pods(case, case.pods.len(), place, endpoint).await
}

/// Check the Go kubelet's values: sandbox and containers found under the Go UID, and every
/// container's hash label the Go hash.
pub(crate) fn assert_golden(case: &Case, snaps: &[Snapshot]) {
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
pub(crate) async fn settle(place: &Place, image: &str, endpoint: &str) {
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
pub(crate) fn assert_unchanged(step: &str, case: &Case, before: &[Snapshot], after: &[Snapshot]) {
    for (((file, _, _), b), a) in case.pods.iter().zip(before).zip(after) {
        assert_eq!(
            b, a,
            "{step}: {file}: a sandbox or container was recreated or restarted"
        );
    }
}

/// The deleted manifest's pod goes: no container, no sandbox, no CNI address (host-local IPAM
/// on the test bed's network of `kind`) and, given dockershim's checkpoint directory, no
/// sandbox checkpoint.
async fn delete_one(
    case: &Case,
    place: &Place,
    endpoint: &str,
    kind: RuntimeKind,
    checkpoints: Option<&Path>,
) {
    let (file, _, uid) = case.pods[2];
    let ids: Vec<String> = runtime_sandboxes(endpoint, uid)
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert!(!ids.is_empty(), "{file}: a sandbox before the deletion");
    if let Some(dir) = checkpoints {
        for id in &ids {
            assert!(
                dir.join(id).exists(),
                "{file}: sandbox {id} checkpointed in {}",
                dir.display()
            );
        }
    }
    assert!(
        ids.iter().any(|id| ip_reserved_for(kind, id)),
        "{file}: an address reserved for its sandbox"
    );
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
    for id in &ids {
        assert!(
            !ip_reserved_for(kind, id),
            "{file}: the address of sandbox {id} released"
        );
        if let Some(dir) = checkpoints {
            assert!(
                !dir.join(id).exists(),
                "{file}: the checkpoint of sandbox {id} removed"
            );
        }
    }
}

pub(crate) async fn stop(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        stop_kubelet(&mut c).await;
    }
}

/// UIDs of every sandbox of `node` on the runtime at `endpoint` (pods a kubelet made under
/// UIDs other than the expected ones, too).
pub(crate) async fn node_pod_uids(endpoint: &str, node: &str) -> Vec<String> {
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

/// The UIDs of every pod of the case's node on the runtime at `endpoint`: the case's, the
/// canary's and any other the kubelets made.
pub(crate) async fn case_pod_uids(case: &Case, place: &Place, endpoint: &str) -> Vec<String> {
    let mut uids: Vec<String> = case.pods.iter().map(|(_, _, u)| u.to_string()).collect();
    uids.push(format!("{}-canary", place.node));
    uids.extend(node_pod_uids(endpoint, &place.node).await);
    uids.sort();
    uids.dedup();
    uids
}

/// Remove the case's directory (after detaching what the kubelets left mounted there).
pub(crate) fn remove_place(place: &Place) {
    unmount_under(&place.root);
    let _ = std::fs::remove_dir_all(&place.dir);
}

/// `uids` and the UIDs of the case's canary and `-fresh` pods (whose logs stay after the
/// pods are deleted), as [`skip_for_shared_pod_logs`] names them.
fn case_log_uids(case: &Case, mut uids: Vec<String>) -> Vec<String> {
    uids.push(format!("swap-{}-canary", case.name));
    uids.push(format!("swap-{}-fresh", case.name));
    uids
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
    let uids = case_pod_uids(case, place, &runtime_endpoint(kind, tb, &place.root)).await;
    stop(child).await;
    cleanup_all(kind, tb, &uids).await;
    remove_place(place);
    remove_pod_logs(&case_log_uids(case, uids));
}

/// Stop the kubelet, then remove every pod of the case's node through the standalone runtime
/// at `endpoint` (still running), which the caller stops afterwards.
pub(crate) async fn teardown_on(
    endpoint: &str,
    case: &Case,
    place: &Place,
    child: &mut Option<Child>,
    extra_uids: &[String],
) {
    let mut uids = case_pod_uids(case, place, endpoint).await;
    uids.extend_from_slice(extra_uids);
    stop(child).await;
    for u in &uids {
        cleanup_runtime(endpoint, u).await;
    }
    remove_place(place);
    remove_pod_logs(&case_log_uids(case, uids));
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
        let checkpoints = place.root.join("dockershim").join("sandbox");
        let checkpoints = (kind == RuntimeKind::Dockershim).then_some(checkpoints.as_path());
        delete_one(case, &place, &endpoint, kind, checkpoints).await;
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
    if skip_for_shared_pod_logs(test, case) {
        return;
    }
    let place = Place::new(case, &tb.busybox_image);
    let endpoint = tb.containerd_endpoint.clone();
    let mut child = Some(go_kubelet(&judge, &tb, &endpoint, &place));
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
        child = Some(go_kubelet(&judge, &tb, &endpoint, &place));
        all_running(case, &place, &endpoint).await;
        settle(&place, &tb.busybox_image, &endpoint).await;
        let go_settled = all_running(case, &place, &endpoint).await;
        assert_unchanged("this kubelet -> Go kubelet", case, &before, &go_settled);
        // And this kubelet manages what the Go kubelet made: a deleted manifest's pod goes.
        stop(&mut child).await;
        child = Some(ours(kind, &tb, &place));
        all_running(case, &place, &endpoint).await;
        delete_one(case, &place, &endpoint, kind, None).await;
        let kept = running_pods(case, 2, &place, &endpoint).await;
        assert_unchanged("after deleting tools", case, &before[..2], &kept[..2]);
    };
    let outcome = std::panic::AssertUnwindSafe(body).catch_unwind().await;
    teardown(kind, &tb, case, &place, &mut child).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

/// Prints how long a swap took since `started` (a figure for the docs, not an assertion).
pub(crate) fn figure(what: &str, started: std::time::Instant) {
    eprintln!("FIGURE {what}: {:.1} s", started.elapsed().as_secs_f64());
}

/// This kubelet on `place` with the standalone CRI runtime at `endpoint`.
fn ours_on(endpoint: &str, tb: &Testbed, place: &Place) -> Child {
    kubelet_command_on(
        vec!["--container-runtime-endpoint".into(), endpoint.into()],
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

/// The Go kubelet 1.26 on this project's standalone `dockershim` (the test bed's Docker and
/// CNI network) runs the pods; it is swapped for this kubelet on the same socket, root
/// directory and manifests (nothing recreated), which then manages them (a deleted manifest's
/// containers, sandbox, checkpoint and address go), and back.
#[tokio::test]
async fn kubelet_swap_with_go_kubelet_dockershim() {
    let test = "kubelet_swap_with_go_kubelet_dockershim";
    let Some(judge) = std::env::var_os("KUBELET_JUDGE").map(PathBuf::from) else {
        eprintln!(
            "SKIPPED {test}: KUBELET_JUDGE is not set (a Go kubelet 1.26 binary, e.g. /opt/judges/k8s/bin/kubelet)"
        );
        return;
    };
    let tb = require_testbed!(test);
    let case = &JUDGE_DOCKERSHIM;
    if skip_for_shared_pod_logs(test, case) {
        return;
    }
    let place = Place::new(case, &tb.busybox_image);
    let shim_dir = place.dir.join("shim");
    std::fs::create_dir_all(&shim_dir).expect("shim dir");
    let shim = ShimProcess::start(&tb, &shim_dir)
        .await
        .expect("dockershim");
    let endpoint = shim.endpoint.clone();
    let checkpoints = shim_dir.join("root").join("sandbox");
    let mut child = Some(go_kubelet(&judge, &tb, &endpoint, &place));
    let body = async {
        let before = all_running(case, &place, &endpoint).await;
        if tb.busybox_image == GOLDEN_IMAGE {
            assert_golden(case, &before);
        }
        let t = std::time::Instant::now();
        stop(&mut child).await;
        child = Some(ours_on(&endpoint, &tb, &place));
        all_running(case, &place, &endpoint).await;
        figure("Go kubelet -> this kubelet on dockershim, pods Running", t);
        settle(&place, &tb.busybox_image, &endpoint).await;
        let ours_settled = all_running(case, &place, &endpoint).await;
        assert_unchanged("Go kubelet -> this kubelet", case, &before, &ours_settled);
        delete_one(
            case,
            &place,
            &endpoint,
            RuntimeKind::Dockershim,
            Some(&checkpoints),
        )
        .await;
        let kept = running_pods(case, 2, &place, &endpoint).await;
        assert_unchanged("after deleting tools", case, &before[..2], &kept[..2]);
        let t = std::time::Instant::now();
        stop(&mut child).await;
        child = Some(go_kubelet(&judge, &tb, &endpoint, &place));
        running_pods(case, 2, &place, &endpoint).await;
        figure("this kubelet -> Go kubelet on dockershim, pods Running", t);
        settle(&place, &tb.busybox_image, &endpoint).await;
        let go_settled = running_pods(case, 2, &place, &endpoint).await;
        assert_unchanged(
            "this kubelet -> Go kubelet",
            case,
            &before[..2],
            &go_settled,
        );
        let tools = snapshot(&endpoint, case.pods[2].2).await;
        assert!(
            tools.sandboxes.is_empty() && tools.containers.is_empty(),
            "the Go kubelet did not bring the deleted pod back: {tools:?}"
        );
    };
    let outcome = std::panic::AssertUnwindSafe(body).catch_unwind().await;
    teardown_on(&endpoint, case, &place, &mut child, &[]).await;
    drop(shim);
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}
