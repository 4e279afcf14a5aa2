//! The registry's exposition: upstream's series names in both text formats.

use super::*;

#[test]
fn renders() {
    let m = Metrics::new("node-a");
    m.observe_relist(Duration::from_millis(20));
    m.runtime_operation("list_podsandbox", false);
    m.runtime_operation_took("run_podsandbox", false, Duration::from_millis(80));
    m.pod_seen("u1");
    m.pod_running("u1");
    m.pod_running("u1");
    m.observe_pod_worker("sync", Duration::from_millis(300));
    m.set_running(1, &[("running", 2)]);
    let t = m.render();
    assert!(t.contains("kubelet_running_pods 1"), "{t}");
    assert!(t.contains("kubelet_node_name{node=\"node-a\"} 1"), "{t}");
    assert!(
        t.contains("kubelet_pod_start_duration_seconds_count 1"),
        "observed once"
    );
    assert!(t.contains(
        "kubelet_runtime_operations_duration_seconds_count{operation_type=\"run_podsandbox\"} 1"
    ));
    assert!(t.contains("kubelet_pleg_relist_duration_seconds_count 1"));
    assert!(t.contains("kubelet_runtime_operations_total{operation_type=\"list_podsandbox\"} 1"));
    assert!(
        t.contains(
            "kubelet_pod_worker_duration_seconds_bucket{le=\"0.5\",operation_type=\"sync\"} 1"
        ) || t.contains(
            "kubelet_pod_worker_duration_seconds_bucket{operation_type=\"sync\",le=\"0.5\"} 1"
        ),
        "{t}"
    );
    assert!(t.contains("kubelet_running_containers{container_state=\"running\"} 2"));
}

/// Upstream's series of every metric this registry holds, as Prometheus stores them.
pub(crate) const UPSTREAM_SERIES: &[&str] = &[
    "kubelet_node_name",
    "kubelet_containers_per_pod_count_bucket",
    "kubelet_pod_worker_duration_seconds_bucket",
    "kubelet_pod_start_duration_seconds_bucket",
    "kubelet_pod_start_sli_duration_seconds_bucket",
    "kubelet_cgroup_manager_duration_seconds_bucket",
    "kubelet_pod_worker_start_duration_seconds_bucket",
    "kubelet_pod_status_sync_duration_seconds_bucket",
    "kubelet_pleg_relist_duration_seconds_bucket",
    "kubelet_pleg_discard_events",
    "kubelet_pleg_relist_interval_seconds_bucket",
    "kubelet_pleg_last_seen_seconds",
    "kubelet_runtime_operations_total",
    "kubelet_runtime_operations_duration_seconds_bucket",
    "kubelet_runtime_operations_errors_total",
    "kubelet_evictions",
    "kubelet_eviction_stats_age_seconds_bucket",
    "kubelet_preemptions",
    "kubelet_run_podsandbox_duration_seconds_bucket",
    "kubelet_run_podsandbox_errors_total",
    "kubelet_running_pods",
    "kubelet_running_containers",
    "kubelet_started_pods_total",
    "kubelet_started_pods_errors_total",
    "kubelet_started_containers_total",
    "kubelet_started_containers_errors_total",
    "kubelet_certificate_manager_client_ttl_seconds",
    "kubelet_certificate_manager_client_expiration_renew_errors",
    "kubelet_certificate_manager_server_ttl_seconds",
    "kubelet_server_expiration_renew_errors",
    "kubelet_certificate_manager_server_rotation_seconds_bucket",
    "kubelet_volume_stats_capacity_bytes",
    "kubelet_volume_stats_available_bytes",
    "kubelet_volume_stats_used_bytes",
    "kubelet_volume_stats_inodes",
    "kubelet_volume_stats_inodes_free",
    "kubelet_volume_stats_inodes_used",
    "volume_manager_total_volumes",
    "rest_client_requests_total",
    "rest_client_request_duration_seconds_bucket",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_start_time_seconds",
    "process_open_fds",
    "process_max_fds",
];

/// The sample names of an exposition (either text format).
pub(crate) fn sample_names(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// A registry with a sample in every metric.
fn populated() -> Metrics {
    let m = Metrics::new("node-a");
    m.pod_seen_created("u", Some(SystemTime::now()));
    m.pod_worker_started("u");
    m.pod_pulled("u", Instant::now());
    m.pod_running("u");
    m.containers_per_pod(2);
    m.pod_status_synced(Duration::from_millis(5));
    m.observe_relist(Duration::from_millis(5));
    m.observe_relist(Duration::from_millis(5));
    m.pleg_discarded(1);
    m.runtime_operation_took("version", true, Duration::from_millis(1));
    m.run_podsandbox("", true, Duration::from_millis(1));
    m.pod_started(false);
    m.container_started("container", Some("ErrImagePull"));
    m.observe_pod_worker("sync", Duration::from_millis(1));
    m.set_running(1, &[("running", 1)]);
    m.eviction
        .evicted("memory.available", Duration::from_millis(1));
    m.preemptions
        .get_or_create(&PreemptionSignal {
            preemption_signal: "cpu".into(),
        })
        .inc();
    m.cgroups.observe("destroy", Duration::from_millis(1));
    m.client_certificate.renew_errors.inc();
    m.server_certificate.renew_errors.inc();
    let v = &m.volumes;
    v.pod_claims(
        "u",
        vec![ClaimVolume {
            volume: "data".into(),
            namespace: "default".into(),
            claim: "data".into(),
            path: "/".into(),
            stat_fs: true,
        }],
    );
    v.pod_volumes("u", vec!["kubernetes.io/empty-dir"], true);
    rest_client::global().observe("GET", "example:6443", Some(200), Duration::from_millis(1));
    m
}

#[test]
fn certificate_ttls_are_whole_seconds_as_upstreams() {
    let c = CertificateMetrics::default();
    assert_eq!(c.ttl.seconds(), f64::INFINITY, "no certificate");
    let now = SystemTime::now();
    c.set_expiry(Some(now + Duration::from_millis(3_600_700)));
    let ttl = c.ttl.seconds();
    assert_eq!(ttl, ttl.trunc(), "whole seconds: {ttl}");
    assert!((3599.0..=3600.0).contains(&ttl), "{ttl}");
    c.set_expiry(Some(now - Duration::from_millis(90_500)));
    let ttl = c.ttl.seconds();
    assert_eq!(ttl, ttl.trunc(), "whole seconds: {ttl}");
    assert!(
        (-91.0..=-90.0).contains(&ttl),
        "negative once expired: {ttl}"
    );
}

#[test]
fn every_series_has_upstreams_name_in_both_text_formats() {
    let m = populated();
    let (text_type, text) = m.encode("text/plain;version=0.0.4");
    let (om_type, om) = m.encode("application/openmetrics-text;version=1.0.0");
    assert_eq!(text_type, exposition::PROMETHEUS_TEXT);
    assert_eq!(om_type, exposition::OPENMETRICS);
    assert!(om.ends_with("# EOF\n"));
    for (format, body) in [("text 0.0.4", &text), ("OpenMetrics", &om)] {
        let names = sample_names(body);
        for want in UPSTREAM_SERIES {
            assert!(names.contains(*want), "{format}: {want} missing in\n{body}");
        }
        // No counter gained a `_total` upstream's name does not have.
        for n in &names {
            assert!(!n.ends_with("_total_total"), "{format}: {n}");
        }
        for untyped in [
            "kubelet_evictions_total",
            "kubelet_server_expiration_renew_errors_total",
            "kubelet_certificate_manager_client_expiration_renew_errors_total",
            "kubelet_pleg_discard_events_total",
            "kubelet_preemptions_total",
        ] {
            assert!(!names.contains(untyped), "{format}: {untyped}");
        }
    }
    // Upstream's buckets.
    assert!(text.contains("kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"version\",le=\"0.005\"}"));
    assert!(
        text.contains("kubelet_pod_start_sli_duration_seconds_bucket{le=\"3600\"}"),
        "{text}"
    );
    assert!(text.contains(
        "rest_client_request_duration_seconds_bucket{verb=\"GET\",host=\"example:6443\",le=\"60\"}"
    ));
    assert!(text.contains("kubelet_containers_per_pod_count_bucket{le=\"16\"}"));
}

/// `promtool check metrics` (Debian's `prometheus` package) finds nothing wrong with the
/// Prometheus text exposition. Skipped when promtool is not installed.
#[test]
fn promtool_finds_nothing_wrong() {
    use std::io::Write as _;
    let m = populated();
    for (what, body) in [
        ("/metrics", m.render()),
        ("/metrics/probes", {
            m.prober.recorder().observe(
                &prober::ProbeTarget {
                    probe_type: "Readiness",
                    container: "c".into(),
                    pod: "p".into(),
                    namespace: "default".into(),
                    pod_uid: "u".into(),
                },
                "successful",
                Duration::from_millis(1),
            );
            m.encode_probes("").1
        }),
    ] {
        let child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn();
        let Ok(mut child) = child else {
            eprintln!("SKIPPED: promtool is not installed (apt-get install prometheus)");
            return;
        };
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(body.as_bytes())
            .expect("write");
        let out = child.wait_with_output().expect("promtool");
        assert!(
            out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
            "{what}: promtool: {}{}\n{body}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn volume_stats_are_read_per_claim_at_scrape() {
    let dir = tempfile::tempdir().expect("tempdir");
    let v = VolumeMetrics::default();
    let claim = |volume: &str, claim: &str, stat_fs: bool| ClaimVolume {
        volume: volume.into(),
        namespace: "ns".into(),
        claim: claim.into(),
        path: dir.path().to_path_buf(),
        stat_fs,
    };
    // Two pods share claim "a"; "h" is a hostPath PV (MetricsNil upstream: no series).
    v.pod_claims("u1", vec![claim("data", "a", true), claim("h", "h", false)]);
    v.pod_claims("u2", vec![claim("other", "a", true)]);
    v.refresh_claim_stats();
    let want = crate::fsstats::volume_fs_stats(dir.path()).expect("statfs");
    let key = |c: &str| VolumeClaim {
        namespace: "ns".into(),
        persistentvolumeclaim: c.into(),
    };
    let got = |f: &Family<VolumeClaim, Gauge>, c: &str| {
        let k = key(c);
        f.get(&k).map(|g| g.get())
    };
    let as_i = |n: u64| i64::try_from(n).expect("fits");
    assert_eq!(got(&v.capacity_bytes, "a"), Some(as_i(want.capacity)));
    assert_eq!(got(&v.inodes, "a"), Some(as_i(want.inodes)));
    assert!(got(&v.used_bytes, "a").is_some() && got(&v.inodes_used, "a").is_some());
    assert!(got(&v.available_bytes, "a").is_some() && got(&v.inodes_free, "a").is_some());
    assert_eq!(got(&v.capacity_bytes, "h"), None, "no metrics for hostPath");
    // The pods gone, the series go.
    v.pod_removed("u1");
    v.pod_removed("u2");
    v.refresh_claim_stats();
    assert_eq!(got(&v.capacity_bytes, "a"), None);
    assert!(v.claims().is_empty());
}
