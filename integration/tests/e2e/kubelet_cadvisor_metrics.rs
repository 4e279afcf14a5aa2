//! End to end: `/metrics/cadvisor` of the `kubelet` BINARY on both runtimes (containerd's CRI
//! and the embedded dockershim on Docker), against what the kernel measured. The kubelet starts
//! with a static pod whose container burns CPU (`while :; do :; done`) under a 300m CPU limit;
//! its very first `/stats/summary` must have the node's `usageNanoCores` (the housekeeping
//! samples). Once the container runs, the test finds its cgroup through its pid (CRI
//! ContainerStatus, verbose) and checks that the page has cAdvisor's series with the kubelet's
//! labels for the container, its pod cgroup, its sandbox's network, the node (`id="/"`) and the
//! machine; then it scrapes twice [`WINDOW`] apart, reading the container's cgroup files around
//! each scrape, and the rates of `container_cpu_usage_seconds_total` and
//! `container_cpu_cfs_throttled_periods_total` over the two scrapes must be within
//! [`TOLERANCE`] of the cgroup's over the same interval. `promtool check metrics` (Debian's
//! prometheus package) must find nothing wrong with the page when it is installed. The
//! comparisons are ratios of usage over one window, never of how long something took.

use crate::kubelet_secure_port::{client_identity, connector, get, relay};
use crate::kubelet_support;

use std::path::Path;
use std::time::{Duration, Instant};

use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use kubelet_support::cgroup::{CgroupFiles, CpuReading, container_pid};
use kubelet_support::*;

/// How far apart the two scrapes are.
const WINDOW: Duration = Duration::from_secs(5);
/// The largest relative difference allowed between a served rate and the cgroup's.
const TOLERANCE: f64 = 0.10;

/// The samples of `name` whose labels include `labels`: (labels text, value).
fn samples<'a>(text: &'a str, name: &str, labels: &[(&str, &str)]) -> Vec<(&'a str, f64)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix('{')?;
            let (set, value) = rest.split_once("} ")?;
            let have: Vec<&str> = set.split(',').collect();
            labels
                .iter()
                .all(|(k, v)| have.contains(&format!("{k}=\"{v}\"").as_str()))
                .then(|| Some((set, value.split_whitespace().next()?.parse().ok()?)))?
        })
        .collect()
}

fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let found = samples(text, name, labels);
    assert_eq!(
        found.len(),
        1,
        "one {name} with {labels:?}: {found:?} in:\n{text}"
    );
    found[0].1
}

/// The busy pod, limited to 300m CPU.
fn busy_manifest(name: &str, uid: &str, image: &str) -> String {
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
    command: ["sh", "-c", "while :; do :; done"]
    resources:
      limits:
        cpu: 300m
"#
    )
}

async fn kubelet_cadvisor_metrics(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_cadvisor_metrics[{}]", kind.name()));
    let mut k = Kubelet::new(kind, "klcadv");
    let uid = format!("{}-busy", k.node);
    let ca = k.dir.path().join("client-ca.pem");
    let identity = client_identity(&ca);
    let pod_name = k.pod_name("busy");
    k.write_manifest("busy.yaml", &busy_manifest("busy", &uid, &tb.busybox_image));
    let secure_port = free_port();
    k.spawn(
        &tb,
        &[
            "--port".into(),
            secure_port.to_string(),
            "--client-ca-file".into(),
            ca.display().to_string(),
        ],
    );
    let endpoint = k.endpoint(&tb);
    let outcome = tokio::spawn({
        let (port, log, uid) = (k.port, k.log.clone(), uid.clone());
        async move {
            let with_cert = relay(secure_port, connector(Some(identity))).await;
            // The first summary the kubelet serves has the node's CPU rate.
            let first = wait_for("the first /stats/summary", &log, || async {
                let (code, body) = get(with_cert, "/stats/summary").await?;
                (code == 200).then_some(body)
            })
            .await;
            let v: serde_json::Value = serde_json::from_str(&first).expect("summary JSON");
            assert!(
                v["node"]["cpu"]["usageNanoCores"].as_u64().is_some(),
                "node usageNanoCores in the first summary: {}",
                v["node"]
            );

            let ids = wait_for("the busy pod running", &log, || async {
                running_ids(&pod(port, &uid).await?)
            })
            .await;
            let id = ids["main"]
                .split_once("://")
                .expect("runtime://id")
                .1
                .to_string();
            let pid = wait_for("the container's pid", &log, || {
                container_pid(&endpoint, &id)
            })
            .await;
            let cg = CgroupFiles::of_pid(pid);
            let pod_id = Path::new(&cg.id)
                .parent()
                .expect("pod cgroup")
                .display()
                .to_string();
            eprintln!("[{}] container cgroup {cg:?}, pod {pod_id}", kind.name());
            let container = [
                ("container", "main"),
                ("namespace", "default"),
                ("pod", pod_name.as_str()),
            ];
            // Until housekeeping has inventoried the container.
            let page = wait_for("the container in /metrics/cadvisor", &log, || async {
                let (code, body) = get(with_cert, "/metrics/cadvisor").await?;
                (code == 200
                    && !samples(&body, "container_cpu_usage_seconds_total", &container)
                        .is_empty())
                .then_some(body)
            })
            .await;
            check_series(kind, &page, &cg, &pod_id, &pod_name, &id);
            if let Some(complaints) = promtool(&page) {
                assert!(complaints.is_empty(), "promtool check metrics: {complaints}");
                eprintln!("[{}] promtool check metrics: clean", kind.name());
            }
            // The read-only port serves it too (upstream's default handlers).
            let ro = http_get(port, "/metrics/cadvisor")
                .await
                .expect("read-only /metrics/cadvisor");
            assert!(
                !samples(&ro, "container_cpu_usage_seconds_total", &container).is_empty(),
                "{ro}"
            );

            // Two scrapes WINDOW apart, the cgroup read around each.
            let scrape = || async {
                let before = (Instant::now(), cg.read());
                let (code, page) = get(with_cert, "/metrics/cadvisor").await.expect("scrape");
                let after = (Instant::now(), cg.read());
                assert_eq!(code, 200, "{page}");
                (before, page, after)
            };
            let (a0, pa, a1) = scrape().await;
            tokio::time::sleep(WINDOW).await;
            let (b0, pb, b1) = scrape().await;
            // Halfway between the readings around each scrape.
            let mid = |x: &(Instant, CpuReading), y: &(Instant, CpuReading)| {
                (
                    x.0 + (y.0 - x.0) / 2,
                    (x.1.usage + y.1.usage) / 2.0,
                    (x.1.throttled + y.1.throttled) / 2.0,
                )
            };
            let (ma, mb) = (mid(&a0, &a1), mid(&b0, &b1));
            let secs = (mb.0 - ma.0).as_secs_f64();
            let cpu_rate = (mb.1 - ma.1) / secs;
            let throttle_rate = (mb.2 - ma.2) / secs;
            eprintln!(
                "[{}] cgroup over {secs:.3} s: {cpu_rate:.4} cores, {throttle_rate:.3} throttled periods/s",
                kind.name()
            );
            assert!(cpu_rate > 0.1, "the busy loop runs: {cpu_rate} cores");
            assert!(
                cpu_rate < 0.35,
                "the 300m limit holds the loop: {cpu_rate} cores"
            );
            let mut failures = Vec::new();
            for (name, labels, measured) in [
                (
                    "container_cpu_usage_seconds_total",
                    vec![
                        ("container", "main"),
                        ("pod", pod_name.as_str()),
                        ("cpu", "total"),
                    ],
                    cpu_rate,
                ),
                (
                    "container_cpu_cfs_throttled_periods_total",
                    vec![("container", "main"), ("pod", pod_name.as_str())],
                    throttle_rate,
                ),
            ] {
                let served = (value(&pb, name, &labels) - value(&pa, name, &labels)) / secs;
                let ratio = served / measured;
                let line = format!("{name} rate: served {served:.4}, cgroup {measured:.4}, ratio {ratio:.4}");
                eprintln!("[{}] {line}", kind.name());
                if (ratio - 1.0).abs() > TOLERANCE {
                    failures.push(line);
                }
            }
            assert!(
                failures.is_empty(),
                "[{}] rates off by more than {:.0} %:\n{}",
                kind.name(),
                TOLERANCE * 100.0,
                failures.join("\n")
            );
        }
    })
    .await;
    k.shutdown(&tb, std::slice::from_ref(&uid)).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// The series cAdvisor gives the kubelet, with its labels, for the container, its pod cgroup,
/// the pod's sandbox (network), the node and the machine.
fn check_series(
    kind: RuntimeKind,
    page: &str,
    cg: &CgroupFiles,
    pod_id: &str,
    pod_name: &str,
    container_id: &str,
) {
    let container = [
        ("container", "main"),
        ("id", cg.id.as_str()),
        ("namespace", "default"),
        ("pod", pod_name),
    ];
    for name in [
        "container_cpu_usage_seconds_total",
        "container_cpu_user_seconds_total",
        "container_cpu_system_seconds_total",
        "container_cpu_cfs_periods_total",
        "container_cpu_cfs_throttled_periods_total",
        "container_cpu_cfs_throttled_seconds_total",
        "container_memory_usage_bytes",
        "container_memory_working_set_bytes",
        "container_memory_rss",
        "container_memory_cache",
        "container_memory_swap",
        "container_memory_failcnt",
        "container_processes",
        "container_threads",
        "container_start_time_seconds",
        "container_last_seen",
        "container_spec_cpu_quota",
        "container_spec_cpu_period",
        "container_spec_cpu_shares",
        "container_spec_memory_limit_bytes",
    ] {
        assert!(
            !samples(page, name, &container).is_empty(),
            "{name} {container:?} in:\n{page}"
        );
    }
    assert_eq!(value(page, "container_spec_cpu_quota", &container), 30000.0);
    assert_eq!(
        value(page, "container_spec_cpu_period", &container),
        100000.0
    );
    // cAdvisor's `name`: Docker's container name, containerd's id.
    let (name, image) = samples(page, "container_start_time_seconds", &container)
        .first()
        .map(|(set, _)| {
            let label = |k: &str| {
                set.split(',')
                    .find_map(|kv| kv.strip_prefix(&format!("{k}=\""))?.strip_suffix('"'))
                    .unwrap_or_default()
                    .to_string()
            };
            (label("name"), label("image"))
        })
        .expect("labels");
    match kind {
        RuntimeKind::Dockershim => assert!(
            name.starts_with(&format!("k8s_main_{pod_name}_default_")),
            "docker name {name}"
        ),
        _ => assert_eq!(name, container_id),
    }
    assert!(image.contains("busybox"), "image {image}");
    // The pod cgroup: the pod's namespace and name, no container, image or name.
    let pod = [
        ("container", ""),
        ("id", pod_id),
        ("image", ""),
        ("name", ""),
        ("namespace", "default"),
        ("pod", pod_name),
    ];
    for name in [
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
    ] {
        assert!(
            !samples(page, name, &pod).is_empty(),
            "{name} {pod:?} in:\n{page}"
        );
    }
    // The sandbox holds the pod's network namespace: eth0's counters with the pod's labels.
    for name in [
        "container_network_receive_bytes_total",
        "container_network_transmit_bytes_total",
        "container_network_receive_packets_total",
        "container_network_transmit_packets_total",
        "container_network_receive_errors_total",
        "container_network_transmit_errors_total",
        "container_network_receive_packets_dropped_total",
        "container_network_transmit_packets_dropped_total",
    ] {
        assert!(
            !samples(
                page,
                name,
                &[
                    ("interface", "eth0"),
                    ("namespace", "default"),
                    ("pod", pod_name)
                ]
            )
            .is_empty(),
            "{name} of the pod's eth0 in:\n{page}"
        );
    }
    // The node and the kubepods slice.
    let node = [("id", "/"), ("container", ""), ("pod", "")];
    for name in [
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
    ] {
        assert!(
            !samples(page, name, &node).is_empty(),
            "{name} {node:?} in:\n{page}"
        );
    }
    let kubepods = pod_id.split('/').nth(1).map(|s| format!("/{s}"));
    let kubepods = kubepods.expect("kubepods slice");
    assert!(
        !samples(
            page,
            "container_cpu_usage_seconds_total",
            &[("id", kubepods.as_str())]
        )
        .is_empty(),
        "{kubepods} in:\n{page}"
    );
    for name in ["machine_cpu_cores", "machine_memory_bytes"] {
        assert!(
            page.lines()
                .any(|l| l.starts_with(&format!("{name}{{")) && !l.ends_with(" 0")),
            "{name} in:\n{page}"
        );
    }
    for counter in [
        "container_cpu_usage_seconds_total",
        "container_network_receive_bytes_total",
    ] {
        assert!(
            page.contains(&format!("# TYPE {counter} counter")),
            "{counter} is a counter"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_cadvisor_metrics_containerd() {
    kubelet_cadvisor_metrics(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_cadvisor_metrics_dockershim() {
    kubelet_cadvisor_metrics(RuntimeKind::Dockershim).await;
}
