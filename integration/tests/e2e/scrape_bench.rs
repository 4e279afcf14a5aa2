//! `scrape-bench` runs end to end with tiny settings (3 pods, 2 GETs per endpoint, one
//! repetition, this kubelet only: the Go kubelet is a judge CI does not have) in its own mount
//! namespace on a private containerd, and reports every endpoint with what it served: the
//! streamed `/metrics/cadvisor` page whole (series of the pods' containers). Checks the
//! report's structure and what the endpoints served, never the times.

use integration::require_testbed;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrape_bench_reports_every_endpoint() {
    let _tb = require_testbed!("scrape_bench_reports_every_endpoint");
    let bin = integration::runtimes::workspace_binary("scrape-bench")
        .unwrap_or_else(|e| panic!("{e} (hack/test.sh builds the workspace)"));
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("scrape.json");
    let out = tokio::process::Command::new(bin)
        .args(["--pods", "3", "--scrapes", "2", "--repeat", "1"])
        .args(["--idle-seconds", "1", "--settle-seconds", "2", "--json"])
        .arg(&json)
        .env_remove("KUBELET_JUDGE")
        .output()
        .await
        .expect("run scrape-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scrape-bench failed: {}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stderr.contains("SKIPPED the Go kubelet side"), "{stderr}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("json");
    let ms = v["measurements"].as_array().expect("measurements");
    assert_eq!(ms.len(), 1, "{v}");
    let m = &ms[0];
    assert_eq!(m["side"], "ours");
    assert_eq!(m["pods_running"], 3, "{m}");
    for key in ["rss_mib_before", "rss_mib_peak", "rss_mib_after"] {
        assert!(m[key].as_f64().is_some_and(|r| r > 1.0), "{key}: {m}");
    }
    let eps = &m["endpoints"];
    for e in [
        "/metrics",
        "/metrics/cadvisor",
        "/metrics/probes",
        "/metrics/resource",
        "/stats/summary",
    ] {
        assert!(eps[e]["cpu_ms"].as_f64().is_some(), "{e}: {m}");
        assert!(
            eps[e]["latency_ms"].as_f64().is_some_and(|l| l > 0.0),
            "{e}: {m}"
        );
    }
    // What the endpoints served: the kubelet's own series, the pods' cgroups (three pods, each
    // with a sandbox and a container, so well over a hundred cAdvisor samples), the resource
    // metrics of the pods, and a summary body.
    assert!(
        eps["/metrics"]["series"].as_u64().is_some_and(|n| n > 50),
        "{m}"
    );
    assert!(
        eps["/metrics/cadvisor"]["series"]
            .as_u64()
            .is_some_and(|n| n > 100),
        "{m}"
    );
    assert!(
        eps["/metrics/resource"]["series"]
            .as_u64()
            .is_some_and(|n| n >= 6),
        "{m}"
    );
    assert!(
        eps["/stats/summary"]["kib"]
            .as_f64()
            .is_some_and(|k| k > 1.0),
        "{m}"
    );
    assert!(stdout.contains("| all |"), "{stdout}");
    assert!(v["summary"]["all"].is_array(), "{v}");
}
