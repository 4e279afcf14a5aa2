//! End to end: the `kubelet` BINARY's `/metrics` and `/metrics/probes` (upstream
//! `pkg/kubelet/metrics` and the prober's registry) on both runtimes (containerd's CRI and the
//! embedded dockershim on Docker). A static pod with an emptyDir volume and an exec readiness
//! probe runs; once its probe has succeeded the test scrapes both endpoints on the
//! authenticated port (with a client certificate; without one they answer 401) and on the
//! read-only port, and checks:
//! - upstream's series names are there, with non-zero values where the pod's life makes them
//!   so (started pods and containers, pod start and worker durations, PLEG relists, runtime
//!   operations, RunPodSandbox, volumes, probes, the process);
//! - `promtool check metrics` (Debian's `prometheus` package) finds nothing wrong with either
//!   endpoint's Prometheus text;
//! - an OpenMetrics scrape (`Accept: application/openmetrics-text`, as Prometheus sends) has the
//!   same series names as the text one, so Prometheus stores upstream's names either way.

use crate::kubelet_secure_port::{client_identity, connector, relay};
use crate::kubelet_support;

use std::collections::BTreeSet;

use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use kubelet_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const OPENMETRICS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `GET path` on plain HTTP 127.0.0.1:port (the read-only port or a TLS relay) with `accept`:
/// (status, Content-Type, body).
async fn scrape(port: u16, path: &str, accept: &str) -> Option<(u16, String, String)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(20), s.read_to_end(&mut buf))
        .await
        .ok()?
        .ok()?;
    let head = String::from_utf8_lossy(&buf)
        .split_once("\r\n\r\n")?
        .0
        .to_string();
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    let (code, body) = parse_http_response(&buf)?;
    Some((code, content_type, body))
}

/// The value of the first sample of `name` whose label set contains every one of `labels`.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metric(text, name, labels).map(|(v, _)| v)
}

fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

async fn kubelet_metrics(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_metrics[{}]", kind.name()));
    let mut k = Kubelet::new(kind, "klmet");
    let uid = format!("{}-probed", k.node);
    let ca = k.dir.path().join("client-ca.pem");
    let identity = client_identity(&ca);
    let created = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    k.write_manifest(
        "probed.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: probed
  uid: {uid}
  creationTimestamp: "{created}"
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: scratch
    emptyDir: {{}}
  containers:
  - name: main
    image: {image}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "exec sleep 3600"]
    volumeMounts:
    - name: scratch
      mountPath: /scratch
    readinessProbe:
      exec:
        command: ["true"]
      periodSeconds: 1
"#,
            image = tb.busybox_image
        ),
    );
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
    let pod_name = k.pod_name("probed");
    let outcome = tokio::spawn({
        let (port, log, uid) = (k.port, k.log.clone(), uid.clone());
        async move {
            check(kind, secure_port, identity, port, &log, &uid, &pod_name).await;
        }
    })
    .await;
    k.shutdown(&tb, std::slice::from_ref(&uid)).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn check(
    kind: RuntimeKind,
    secure_port: u16,
    identity: (
        rustls::pki_types::CertificateDer<'static>,
        rustls::pki_types::PrivateKeyDer<'static>,
    ),
    port: u16,
    log: &std::path::Path,
    uid: &str,
    pod_name: &str,
) {
    let with_cert = relay(secure_port, connector(Some(identity))).await;
    let anonymous = relay(secure_port, connector(None)).await;
    wait_for("the probed pod running", log, || async {
        running_ids(&pod(port, uid).await?)
    })
    .await;
    let probe = [
        ("probe_type", "Readiness"),
        ("result", "successful"),
        ("container", "main"),
        ("pod", pod_name),
        ("namespace", "default"),
        ("pod_uid", uid),
    ];
    let probes = wait_for("a successful probe in /metrics/probes", log, || async {
        let (code, _, body) = scrape(with_cert, "/metrics/probes", "*/*").await?;
        (code == 200 && value(&body, "prober_probe_total", &probe)? >= 1.0).then_some(body)
    })
    .await;
    // The pod's first relists and syncs are behind it once it is Running and probed.
    let (code, content_type, metrics) = scrape(with_cert, "/metrics", "*/*")
        .await
        .expect("/metrics");
    assert_eq!(code, 200, "{metrics}");
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    eprintln!("[{}] /metrics:\n{metrics}", kind.name());
    eprintln!("[{}] /metrics/probes:\n{probes}", kind.name());

    // Upstream's names, non-zero where the pod's life makes them so.
    let positive: &[(&str, &[(&str, &str)])] = &[
        ("kubelet_node_name", &[]),
        ("kubelet_running_pods", &[]),
        (
            "kubelet_running_containers",
            &[("container_state", "running")],
        ),
        ("kubelet_started_pods_total", &[]),
        (
            "kubelet_started_containers_total",
            &[("container_type", "container")],
        ),
        ("kubelet_containers_per_pod_count_count", &[]),
        ("kubelet_pod_start_duration_seconds_count", &[]),
        ("kubelet_pod_start_sli_duration_seconds_count", &[]),
        (
            "kubelet_pod_worker_duration_seconds_count",
            &[("operation_type", "create")],
        ),
        ("kubelet_pod_worker_start_duration_seconds_count", &[]),
        ("kubelet_pleg_relist_duration_seconds_count", &[]),
        ("kubelet_pleg_relist_interval_seconds_count", &[]),
        ("kubelet_pleg_last_seen_seconds", &[]),
        (
            "kubelet_runtime_operations_total",
            &[("operation_type", "run_podsandbox")],
        ),
        (
            "kubelet_runtime_operations_total",
            &[("operation_type", "list_podsandbox")],
        ),
        (
            "kubelet_runtime_operations_duration_seconds_count",
            &[("operation_type", "create_container")],
        ),
        (
            "kubelet_run_podsandbox_duration_seconds_count",
            &[("runtime_handler", "")],
        ),
        (
            "volume_manager_total_volumes",
            &[
                ("plugin_name", "kubernetes.io/empty-dir"),
                ("state", "actual_state_of_world"),
            ],
        ),
        (
            "volume_manager_total_volumes",
            &[
                ("plugin_name", "kubernetes.io/empty-dir"),
                ("state", "desired_state_of_world"),
            ],
        ),
        ("kubelet_certificate_manager_client_ttl_seconds", &[]),
        ("kubelet_certificate_manager_server_ttl_seconds", &[]),
        ("process_cpu_seconds_total", &[]),
        ("process_resident_memory_bytes", &[]),
        ("process_virtual_memory_bytes", &[]),
        ("process_start_time_seconds", &[]),
        ("process_open_fds", &[]),
        ("process_max_fds", &[]),
    ];
    let mut missing = Vec::new();
    for (name, labels) in positive {
        match value(&metrics, name, labels) {
            Some(v) if v > 0.0 => {}
            other => missing.push(format!("{name}{labels:?}: {other:?}")),
        }
    }
    // Counted from zero: present with 0 on a kubelet whose certificates never failed.
    for name in [
        "kubelet_certificate_manager_client_expiration_renew_errors",
        "kubelet_server_expiration_renew_errors",
    ] {
        if value(&metrics, name, &[]) != Some(0.0) {
            missing.push(format!("{name} 0"));
        }
    }
    assert!(
        missing.is_empty(),
        "[{}] series missing or zero:\n{}",
        kind.name(),
        missing.join("\n")
    );
    assert!(
        value(
            &probes,
            "prober_probe_duration_seconds_count",
            &[
                ("probe_type", "Readiness"),
                ("container", "main"),
                ("pod", pod_name),
                ("namespace", "default")
            ]
        )
        .is_some_and(|v| v >= 1.0),
        "{probes}"
    );

    // OpenMetrics, as Prometheus negotiates it: the same series names.
    for (path, text) in [("/metrics", &metrics), ("/metrics/probes", &probes)] {
        let (code, content_type, om) = scrape(with_cert, path, OPENMETRICS_ACCEPT)
            .await
            .expect("OpenMetrics scrape");
        assert_eq!(code, 200, "{om}");
        assert!(
            content_type.starts_with("application/openmetrics-text"),
            "{content_type}"
        );
        assert!(om.ends_with("# EOF\n"), "{om}");
        let (a, b) = (sample_names(text), sample_names(&om));
        // The process figures and the probe counts move between scrapes, the names do not
        // (a series may appear in the later scrape, never vanish).
        assert!(
            a.is_subset(&b),
            "{path}: names only in the text scrape: {:?}",
            a.difference(&b).collect::<Vec<_>>()
        );
    }

    // The read-only port serves both (upstream's default handlers), without authentication.
    for path in ["/metrics", "/metrics/probes"] {
        let (code, _, body) = scrape(port, path, "*/*").await.expect("read-only");
        assert_eq!(code, 200, "read-only {path}: {body}");
        assert!(
            body.contains("# TYPE prober_probe_total counter")
                || body.contains("# TYPE kubelet_running_pods gauge"),
            "read-only {path}: {body}"
        );
        // The authenticated port wants a client: 401 without one (nodes/metrics otherwise).
        let (code, _, body) = scrape(anonymous, path, "*/*")
            .await
            .expect("anonymous scrape");
        assert_eq!(code, 401, "anonymous {path}: {body}");
    }

    // promtool finds nothing wrong with either endpoint.
    for (path, body) in [("/metrics", &metrics), ("/metrics/probes", &probes)] {
        match promtool(body) {
            Some(complaints) => assert!(
                complaints.is_empty(),
                "[{}] promtool check metrics {path}: {complaints}",
                kind.name()
            ),
            None if std::env::var("CRI_TESTBED_REQUIRED").as_deref() == Ok("1") => {
                panic!("promtool is not installed (the test bed installs Debian's prometheus)")
            }
            None => eprintln!(
                "\n!!!!!!!! SKIPPED promtool check metrics {path}: promtool is not installed \
                 (apt-get install prometheus) !!!!!!!!\n"
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_metrics_containerd() {
    kubelet_metrics(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_metrics_dockershim() {
    kubelet_metrics(RuntimeKind::Dockershim).await;
}
