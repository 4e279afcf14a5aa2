//! End to end: the `kubelet` BINARY on containerd with 20 good static pods, then 40 hostile
//! manifest files dropped beside them (truncated YAML, binary junk, 100 000-deep JSON, a YAML
//! alias bomb, a 5 MiB annotation, a 300 KiB one, bad volume names and mounts, deep YAML, a
//! document storm, invalid values of every kind...). Afterwards:
//! - the kubelet is alive;
//! - every good pod is untouched: the same container ids, one container each on the runtime;
//! - each bad file is named in the log (`invalid static pod manifest file=<path>`);
//! - none is admitted: `/pods` lists the 20 good pods only, and no bad pod's UID has a sandbox;
//! - the kubelet's resident memory (`VmRSS`) after the bad files have been listed over and
//!   over is within 1.5x of what it was before them (a resource bound, printed).

use crate::kubelet_support;

use std::collections::HashMap;
use std::time::Duration;

use integration::kubelet_proc::rss_mib;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use kubelet_support::*;

const GOOD: usize = 20;

/// A pod manifest with `meta` (indented two spaces, under `metadata:` after name and uid) and
/// `spec` (under `spec:`, before `containers:`) and `container` (more keys of the container).
fn pod(name: &str, uid: &str, image: &str, meta: &str, spec: &str, container: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  uid: {uid}\n{meta}spec:\n  terminationGracePeriodSeconds: 1\n{spec}  containers:\n  - name: main\n    image: {image}\n    imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"3600\"]\n{container}"
    )
}

/// The 40 bad manifests: (file name, contents), each with its own UID where it has metadata.
fn hostile(node: &str, image: &str) -> Vec<(String, Vec<u8>)> {
    let uid = |i: usize| format!("{node}-bad-{i:02}");
    let p = |i: usize, meta: &str, spec: &str, container: &str| {
        pod(&format!("bad{i:02}"), &uid(i), image, meta, spec, container).into_bytes()
    };
    let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let mut bomb = String::from(
        "apiVersion: v1\nkind: Pod\na0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for i in 1..10 {
        let q = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{q}, *a{q}, *a{q}, *a{q}, *a{q}, *a{q}, *a{q}, *a{q}, *a{q}]\n"
        ));
    }
    bomb.push_str(&format!("metadata:\n  name: bomb\n  uid: {}\n", uid(5)));
    let mut deep_yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: deep\n  uid: {}\nx:\n",
        uid(23)
    );
    for i in 1..200 {
        deep_yaml.push_str(&format!("{}k{i}:\n", "  ".repeat(i)));
    }
    let mut many_aliases = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: aliases\n  uid: {}\n  labels: &l {{a: b}}\nx:\n",
        uid(40)
    );
    for i in 0..2000 {
        many_aliases.push_str(&format!("  k{i}: *l\n"));
    }
    let good = p(1, "", "", "");
    let truncated = good[..good.len() / 2].to_vec();
    let mut junk: Vec<u8> = (0..64 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    junk[0] = 0;
    vec![
        ("bad-01-truncated.yaml".into(), truncated),
        ("bad-02-binary-junk.yaml".into(), junk),
        (
            "bad-03-deep-json-kept.json".into(),
            format!(
                "{{\"metadata\":{{\"name\":\"deep\",\"uid\":\"{}\",\"managedFields\":[{{\"fieldsV1\":{}}}]}}}}",
                uid(3),
                nest(100_000)
            )
            .into_bytes(),
        ),
        (
            "bad-04-deep-json-ignored.json".into(),
            format!(
                "{{\"metadata\":{{\"name\":\"deep2\",\"uid\":\"{}\"}},\"x\":{}}}",
                uid(4),
                nest(100_000)
            )
            .into_bytes(),
        ),
        ("bad-05-alias-bomb.yaml".into(), bomb.into_bytes()),
        (
            "bad-06-annotation-5mib.yaml".into(),
            p(6, &format!("  annotations:\n    big: \"{}\"\n", "x".repeat(5 << 20)), "", ""),
        ),
        (
            "bad-07-annotation-300kib.yaml".into(),
            p(7, &format!("  annotations:\n    big: \"{}\"\n", "x".repeat(300 << 10)), "", ""),
        ),
        (
            "bad-08-volume-name.yaml".into(),
            p(8, "", "  volumes:\n  - name: Bad_Vol\n    emptyDir: {}\n", ""),
        ),
        (
            "bad-09-duplicate-volumes.yaml".into(),
            p(9, "", "  volumes:\n  - name: v\n    emptyDir: {}\n  - name: v\n    emptyDir: {}\n", ""),
        ),
        (
            "bad-10-mount-missing-volume.yaml".into(),
            p(10, "", "", "    volumeMounts:\n    - {name: nope, mountPath: /x}\n"),
        ),
        (
            "bad-11-subpath-escape.yaml".into(),
            p(
                11,
                "",
                "  volumes:\n  - name: v\n    emptyDir: {}\n",
                "    volumeMounts:\n    - {name: v, mountPath: /x, subPath: ../../../etc}\n",
            ),
        ),
        (
            "bad-12-hostpath-backsteps.yaml".into(),
            p(12, "", "  volumes:\n  - name: v\n    hostPath: {path: /tmp/../etc}\n", ""),
        ),
        (
            "bad-13-port-range.yaml".into(),
            p(13, "", "", "    ports:\n    - containerPort: 70000\n"),
        ),
        (
            "bad-14-restart-policy.yaml".into(),
            p(14, "", "  restartPolicy: Sometimes\n", ""),
        ),
        (
            "bad-15-label-key.yaml".into(),
            p(15, "  labels:\n    \"a/b/c\": x\n", "", ""),
        ),
        (
            "bad-16-label-value.yaml".into(),
            p(16, "  labels:\n    k: \"-bad value-\"\n", "", ""),
        ),
        (
            "bad-17-annotation-key.yaml".into(),
            p(17, "  annotations:\n    \"bad key!\": x\n", "", ""),
        ),
        ("bad-18-empty.yaml".into(), Vec::new()),
        ("bad-19-whitespace.yaml".into(), b"  \n\n\t \n".to_vec()),
        (
            "bad-20-wrong-kind.yaml".into(),
            b"apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n".to_vec(),
        ),
        (
            "bad-21-podlist.json".into(),
            br#"{"apiVersion":"v1","kind":"PodList","items":[]}"#.to_vec(),
        ),
        (
            "bad-22-invalid-utf8.yaml".into(),
            [&b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: \xff\xfe\n"[..]].concat(),
        ),
        ("bad-23-deep-yaml.yaml".into(), deep_yaml.into_bytes()),
        (
            "bad-24-deep-flow-yaml.yaml".into(),
            format!("apiVersion: v1\nkind: Pod\nx: {}\n", nest(10_000)).into_bytes(),
        ),
        ("bad-25-document-storm.yaml".into(), "---\n".repeat(100_000).into_bytes()),
        (
            "bad-26-type-error.json".into(),
            format!(
                "{{\"metadata\":{{\"name\":\"t\",\"uid\":\"{}\"}},\"spec\":{{\"containers\":\"x\"}}}}",
                uid(26)
            )
            .into_bytes(),
        ),
        (
            "bad-27-no-containers.yaml".into(),
            format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: nc\n  uid: {}\nspec:\n  containers: []\n", uid(27)).into_bytes(),
        ),
        (
            "bad-28-no-image.yaml".into(),
            format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: ni\n  uid: {}\nspec:\n  containers:\n  - name: c\n", uid(28)).into_bytes(),
        ),
        (
            "bad-29-duplicate-containers.yaml".into(),
            p(29, "", "  initContainers:\n  - {name: main, image: busybox}\n", ""),
        ),
        (
            "bad-30-env-name.yaml".into(),
            p(30, "", "", "    env:\n    - {name: 1BAD, value: x}\n"),
        ),
        (
            "bad-31-probe-threshold.yaml".into(),
            p(31, "", "", "    livenessProbe:\n      exec: {command: [\"true\"]}\n      successThreshold: 2\n"),
        ),
        (
            "bad-32-requests-over-limits.yaml".into(),
            p(32, "", "", "    resources:\n      limits: {cpu: 100m}\n      requests: {cpu: \"1\"}\n"),
        ),
        (
            "bad-33-quantity.yaml".into(),
            p(33, "", "", "    resources:\n      limits: {memory: lots}\n"),
        ),
        (
            "bad-34-grace-period.yaml".into(),
            pod("bad34", &uid(34), image, "", "", "")
                .replace("terminationGracePeriodSeconds: 1", "terminationGracePeriodSeconds: -5")
                .into_bytes(),
        ),
        (
            "bad-35-pod-name.yaml".into(),
            pod("Bad_Name", &uid(35), image, "", "", "").into_bytes(),
        ),
        (
            "bad-36-namespace.yaml".into(),
            p(36, "  namespace: Bad_NS\n", "", ""),
        ),
        (
            "bad-37-configmap-item-path.yaml".into(),
            p(
                37,
                "",
                "  volumes:\n  - name: v\n    configMap:\n      name: c\n      items:\n      - {key: k, path: ../escape}\n",
                "",
            ),
        ),
        (
            "bad-38-mount-propagation.yaml".into(),
            p(
                38,
                "",
                "  volumes:\n  - name: v\n    emptyDir: {}\n",
                "    volumeMounts:\n    - {name: v, mountPath: /x, mountPropagation: Bidirectional}\n",
            ),
        ),
        ("bad-39-zeros-10mib.yaml".into(), vec![0u8; 10 << 20]),
        ("bad-40-many-aliases.yaml".into(), many_aliases.into_bytes()),
    ]
}

/// uid -> (container name -> container id) of the good pods, when all run.
async fn good_ids(port: u16, uids: &[String]) -> Option<HashMap<String, HashMap<String, String>>> {
    let list = pods(port).await?;
    let mut out = HashMap::new();
    for u in uids {
        out.insert(u.clone(), running_ids(find_pod(&list, u)?)?);
    }
    Some(out)
}

async fn hostile_manifests_beside_good_pods(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_hostile_manifests[{}]", kind.name()));
    let mut k = Kubelet::new(kind, "khostile");
    let good: Vec<String> = (0..GOOD)
        .map(|i| format!("{}-good-{i:02}", k.node))
        .collect();
    for (i, u) in good.iter().enumerate() {
        k.write_manifest(
            &format!("good-{i:02}.yaml"),
            &pod_manifest(
                &format!("good{i:02}"),
                u,
                &tb.busybox_image,
                "sleep 3600",
                "",
            ),
        );
    }
    let bad = hostile(&k.node, &tb.busybox_image);
    assert_eq!(bad.len(), 40);
    let bad_uids: Vec<String> = (1..=40).map(|i| format!("{}-bad-{i:02}", k.node)).collect();
    k.spawn(&tb, &[]);
    let pid = k.child.as_ref().and_then(|c| c.id()).expect("kubelet pid");
    let endpoint = k.endpoint(&tb);
    let (port, log, manifests) = (k.port, k.log.clone(), k.manifests.clone());
    let outcome = tokio::spawn({
        let good = good.clone();
        let bad_uids = bad_uids.clone();
        async move {
            let before_ids = wait_for("the 20 good pods running", &log, || {
                good_ids(port, &good)
            })
            .await;
            // Settle: a few listings of the good manifests, then the baseline.
            tokio::time::sleep(Duration::from_secs(10)).await;
            let rss_before = rss_mib(pid).expect("VmRSS before");

            let mut paths = Vec::new();
            for (name, data) in &bad {
                let p = manifests.join(name);
                std::fs::write(&p, data).expect("write bad manifest");
                paths.push(p.display().to_string());
            }
            // Every bad file named in the log.
            wait_for("every bad file named in the log", &log, || {
                let paths = paths.clone();
                let log = log.clone();
                async move {
                    let text = std::fs::read_to_string(&log).ok()?;
                    let named: Vec<&str> = text
                        .lines()
                        .filter(|l| l.contains("invalid static pod manifest"))
                        .collect();
                    paths
                        .iter()
                        .all(|p| named.iter().any(|l| l.contains(&format!("file={p} "))))
                        .then_some(())
                }
            })
            .await;
            // Many more listings of the 60 files (the file source relists every 2 s): VmRSS
            // every 5 s for 30 s, the largest sample is the figure.
            let mut samples = Vec::new();
            for _ in 0..6 {
                tokio::time::sleep(Duration::from_secs(5)).await;
                samples.push(rss_mib(pid).expect("VmRSS after: the kubelet is gone"));
            }
            let rss_after = samples.iter().copied().fold(0.0, f64::max);
            println!(
                "[{}] kubelet VmRSS: {rss_before:.1} MiB with {GOOD} pods, {rss_after:.1} MiB after 40 hostile manifests ({:.2}x; samples {samples:.1?})",
                kind.name(),
                rss_after / rss_before
            );
            // Untouched: same container ids, nothing restarted or recreated.
            let after_ids = good_ids(port, &good).await.expect("good pods still running");
            assert_eq!(after_ids, before_ids, "good pods' containers changed");
            for u in &good {
                let n = runtime_containers(&endpoint, u).await.map(|c| c.len());
                assert_eq!(n, Some(1), "{u}: one container on the runtime");
            }
            // None admitted.
            let listed = pods(port).await.expect("/pods");
            let uids: Vec<&str> = listed
                .iter()
                .filter_map(|p| p["metadata"]["uid"].as_str())
                .collect();
            assert_eq!(uids.len(), GOOD, "{uids:?}");
            assert!(uids.iter().all(|u| good.iter().any(|g| g == u)), "{uids:?}");
            for u in &bad_uids {
                let n = runtime_sandboxes(&endpoint, u).await.map(|s| s.len());
                assert_eq!(n, Some(0), "{u}: a bad manifest got a sandbox");
            }
            assert!(
                rss_after <= 1.5 * rss_before,
                "VmRSS grew from {rss_before:.1} MiB to {rss_after:.1} MiB"
            );
        }
    })
    .await;
    let alive = k
        .child
        .as_mut()
        .map(|c| matches!(c.try_wait(), Ok(None)))
        .unwrap_or(false);
    let mut all = good.clone();
    all.extend(bad_uids);
    k.shutdown(&tb, &all).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
    assert!(alive, "the kubelet died:\n{}", log_tail(&k.log, 60));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_manifests_beside_good_pods_containerd() {
    hostile_manifests_beside_good_pods(RuntimeKind::Containerd).await;
}

/// The embedded dockershim's memory is the kubelet process's too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_manifests_beside_good_pods_dockershim() {
    hostile_manifests_beside_good_pods(RuntimeKind::Dockershim).await;
}
