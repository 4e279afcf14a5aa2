//! End to end: volumes and kubelet-managed files of the `kubelet` BINARY on both runtimes
//! (containerd's CRI and the embedded dockershim on Docker): a `Memory` emptyDir is a tmpfs
//! with the size limit inside the container (`/proc/mounts`) and is unmounted when the pod is
//! gone; downwardAPI files hold the pod's name, labels and a container's CPU limit; the
//! container sees the kubelet-managed `/etc/hosts`; a hostPath of the wrong type and a
//! configMap volume (no API server) give clear messages in `/pods`; the termination message
//! comes from `/dev/termination-log`, or from the log with `FallbackToLogsOnError`; downwardAPI
//! and projected volumes (and a subPath of one) refuse writes even with `readOnly: false`,
//! emptyDir and hostPath only with `readOnly: true`.

use crate::kubelet_support;

use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use kubelet_support::*;

/// The waiting state of a pod's first container: (reason, message).
fn waiting(pod: &serde_json::Value) -> Option<(String, Option<String>)> {
    let w = &pod["status"]["containerStatuses"][0]["state"]["waiting"];
    Some((
        w["reason"].as_str()?.to_string(),
        w["message"].as_str().map(str::to_string),
    ))
}

/// The kubelet's log line about a volume of `uid` that cannot be set up, once it holds `what`.
fn mount_error_logged(log: &std::path::Path, uid: &str, what: &str) -> Option<String> {
    std::fs::read_to_string(log)
        .ok()?
        .lines()
        .find(|l| l.contains("unable to mount volumes") && l.contains(uid) && l.contains(what))
        .map(str::to_string)
}

fn terminated_message(pod: &serde_json::Value) -> Option<String> {
    let t = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    t.as_object()?;
    Some(t["message"].as_str().unwrap_or_default().to_string())
}

async fn kubelet_volumes(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_volumes[{}]", kind.name()));
    let mut k = Kubelet::new(kind, "klvol");
    let uid = |n: &str| format!("{}-{n}", k.node);
    let (vols_uid, badhp_uid, cfg_uid, term_uid, fallback_uid) = (
        uid("vols"),
        uid("badhp"),
        uid("cfg"),
        uid("term"),
        uid("fallback"),
    );
    let uids = [
        vols_uid.clone(),
        badhp_uid.clone(),
        cfg_uid.clone(),
        term_uid.clone(),
        fallback_uid.clone(),
    ];
    let image = &tb.busybox_image;
    k.write_manifest(
        "vols.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: vols
  uid: {vols_uid}
  labels:
    app: demo
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: cache
    emptyDir:
      medium: Memory
      sizeLimit: 16Mi
  - name: info
    downwardAPI:
      items:
      - path: name
        fieldRef:
          fieldPath: metadata.name
      - path: labels
        fieldRef:
          fieldPath: metadata.labels
      - path: cpu
        resourceFieldRef:
          containerName: main
          resource: limits.cpu
          divisor: 1m
  containers:
  - name: main
    image: {image}
    imagePullPolicy: IfNotPresent
    resources:
      limits:
        cpu: 250m
        memory: 64Mi
    command: ["sh", "-c", "grep ' /cache ' /proc/mounts; echo name=$(cat /etc/info/name); echo cpu=$(cat /etc/info/cpu); cat /etc/info/labels; echo; head -1 /etc/hosts; echo end; sleep 3600"]
    volumeMounts:
    - name: cache
      mountPath: /cache
    - name: info
      mountPath: /etc/info
"#
        ),
    );
    let not_a_dir = k.dir.path().join("plain-file");
    std::fs::write(&not_a_dir, "x").expect("file");
    k.write_manifest(
        "badhp.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: badhp
  uid: {badhp_uid}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: data
    hostPath:
      path: {path}
      type: Directory
  containers:
  - name: main
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    volumeMounts:
    - name: data
      mountPath: /data
"#,
            path = not_a_dir.display()
        ),
    );
    k.write_manifest(
        "cfg.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: cfg
  uid: {cfg_uid}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: settings
    configMap:
      name: settings
  containers:
  - name: main
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    volumeMounts:
    - name: settings
      mountPath: /settings
"#
        ),
    );
    k.write_manifest(
        "term.yaml",
        &pod_manifest(
            "term",
            &term_uid,
            image,
            "printf bye > /dev/termination-log; exit 3",
            "  restartPolicy: Never\n",
        ),
    );
    k.write_manifest(
        "fallback.yaml",
        &pod_manifest(
            "fallback",
            &fallback_uid,
            image,
            "echo oops; exit 1",
            "  restartPolicy: Never\n",
        )
        .replace(
            "    imagePullPolicy: IfNotPresent\n",
            "    imagePullPolicy: IfNotPresent\n    terminationMessagePolicy: FallbackToLogsOnError\n",
        ),
    );
    // Container logs are served on the secure port only.
    let sport = free_port();
    k.spawn(&tb, &crate::kubelet_logs::secure_port_flags(sport));
    let (port, log) = (k.port, k.log.clone());
    let vols_dir = k.root.join("pods").join(&vols_uid);
    let body = async {
        let out = wait_for("the volume pod's report", &log, || async {
            let b = crate::kubelet_logs::secure_get(
                sport,
                &format!("/containerLogs/default/{}/main", k.pod_name("vols")),
            )
            .await?;
            b.contains("end\n").then_some(b)
        })
        .await;
        let mount = out.lines().next().unwrap_or_default();
        assert!(
            mount.starts_with("tmpfs /cache tmpfs ") && mount.contains("size=16384k"),
            "a 16Mi tmpfs at /cache: {out}"
        );
        assert!(
            out.contains(&format!("\nname={}\n", k.pod_name("vols"))),
            "{out}"
        );
        assert!(out.contains("\ncpu=250\n"), "{out}");
        assert!(out.contains("\napp=\"demo\"\n"), "{out}");
        assert!(
            out.contains("\n# Kubernetes-managed hosts file.\n"),
            "{out}"
        );
        let cache = vols_dir.join("volumes/kubernetes.io~empty-dir/cache");
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        assert!(
            mountinfo.contains(&format!(" {} ", cache.display())),
            "the tmpfs is mounted on the host at {}",
            cache.display()
        );

        // As upstream, a volume that cannot be set up is a `FailedMount` event (the kubelet's
        // log without an API server) and the containers keep waiting `ContainerCreating`,
        // without the error as message.
        let type_error = format!(
            "hostPath type check failed: {} is not a directory",
            not_a_dir.display()
        );
        wait_for("the hostPath type error in the log", &log, || async {
            mount_error_logged(&log, &badhp_uid, &type_error)
        })
        .await;
        wait_for("the configMap volume error in the log", &log, || async {
            mount_error_logged(
                &log,
                &cfg_uid,
                "couldn't get configMap default/settings, no kubeClient defined",
            )
        })
        .await;
        for uid in [&badhp_uid, &cfg_uid] {
            let w = wait_for("the waiting container in /pods", &log, || async {
                waiting(&pod(port, uid).await?)
            })
            .await;
            assert_eq!(w, ("ContainerCreating".to_string(), None), "{uid}");
        }
        let msg = wait_for("the termination message", &log, || async {
            terminated_message(&pod(port, &term_uid).await?)
        })
        .await;
        assert_eq!(msg, "bye");
        let msg = wait_for("the fallback termination message", &log, || async {
            terminated_message(&pod(port, &fallback_uid).await?)
        })
        .await;
        assert_eq!(msg, "oops\n");

        // Removing the pod unmounts the tmpfs and removes the pod directory.
        std::fs::remove_file(k.manifests.join("vols.yaml")).expect("remove manifest");
        wait_for("the pod directory to be cleaned up", &log, || async {
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
            (!mountinfo.contains(&vols_dir.display().to_string()) && !vols_dir.exists())
                .then_some(())
        })
        .await;
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    k.shutdown(&tb, &uids).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_volumes_containerd() {
    kubelet_volumes(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_volumes_dockershim() {
    kubelet_volumes(RuntimeKind::Dockershim).await;
}

/// The writes the read-only pod's container tries, one line each: `<dir> writable` or
/// `<dir> failed: <touch's error>`.
const RO_PROBES: [&str; 7] = [
    "/info",
    "/proj",
    "/sub",
    "/scratch",
    "/scratch-ro",
    "/host",
    "/host-ro",
];

/// Upstream `makeMounts` (`mount.ReadOnly || mustMountRO`): a downwardAPI volume, a projected
/// volume and a subPath of the downwardAPI volume, all mounted with `readOnly: false`, refuse
/// writes ("Read-only file system"); emptyDir and hostPath are writable unless `readOnly: true`.
async fn kubelet_api_data_volumes_read_only(kind: RuntimeKind) {
    let tb = require_testbed!(&format!(
        "kubelet_api_data_volumes_read_only[{}]",
        kind.name()
    ));
    let mut k = Kubelet::new(kind, "klrovol");
    let ro_uid = format!("{}-ro", k.node);
    let uids = [ro_uid.clone()];
    let image = &tb.busybox_image;
    let host_dir = k.dir.path().join("host-dir");
    std::fs::create_dir_all(&host_dir).expect("host dir");
    let probes = RO_PROBES
        .iter()
        .map(|d| {
            format!(
                "if touch {d}/probe 2>/tmp/err; then echo \"{d} writable\"; \
                 else echo \"{d} failed: $(cat /tmp/err)\"; fi; "
            )
        })
        .collect::<String>();
    k.write_manifest(
        "ro.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: ro
  uid: {ro_uid}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: info
    downwardAPI:
      items:
      - path: name
        fieldRef:
          fieldPath: metadata.name
      - path: dir/name
        fieldRef:
          fieldPath: metadata.name
  - name: proj
    projected:
      sources:
      - downwardAPI:
          items:
          - path: name
            fieldRef:
              fieldPath: metadata.name
  - name: scratch
    emptyDir: {{}}
  - name: host
    hostPath:
      path: {host}
      type: Directory
  containers:
  - name: main
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", {script:?}]
    volumeMounts:
    - name: info
      mountPath: /info
      readOnly: false
    - name: proj
      mountPath: /proj
      readOnly: false
    - name: info
      mountPath: /sub
      subPath: dir
      readOnly: false
    - name: scratch
      mountPath: /scratch
      readOnly: false
    - name: scratch
      mountPath: /scratch-ro
      readOnly: true
    - name: host
      mountPath: /host
    - name: host
      mountPath: /host-ro
      readOnly: true
"#,
            host = host_dir.display(),
            script = format!("{probes}echo end; sleep 3600"),
        ),
    );
    let sport = free_port();
    k.spawn(&tb, &crate::kubelet_logs::secure_port_flags(sport));
    let log = k.log.clone();
    let body = async {
        let out = wait_for("the read-only pod's report", &log, || async {
            let b = crate::kubelet_logs::secure_get(
                sport,
                &format!("/containerLogs/default/{}/main", k.pod_name("ro")),
            )
            .await?;
            b.contains("end\n").then_some(b)
        })
        .await;
        let line = |d: &str| {
            out.lines()
                .find(|l| l.starts_with(&format!("{d} ")))
                .unwrap_or_default()
                .to_string()
        };
        for d in ["/info", "/proj", "/sub", "/scratch-ro", "/host-ro"] {
            let l = line(d);
            assert!(
                l.starts_with(&format!("{d} failed: ")) && l.contains("Read-only file system"),
                "{d} must be read-only: {out}"
            );
        }
        for d in ["/scratch", "/host"] {
            assert_eq!(line(d), format!("{d} writable"), "{out}");
        }
        assert!(
            host_dir.join("probe").exists(),
            "the write reached the hostPath"
        );
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    k.shutdown(&tb, &uids).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_api_data_volumes_read_only_containerd() {
    kubelet_api_data_volumes_read_only(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_api_data_volumes_read_only_dockershim() {
    kubelet_api_data_volumes_read_only(RuntimeKind::Dockershim).await;
}
