//! `kubelet-bench` runs end to end with tiny settings on the kubelet's embedded dockershim (3
//! pods, one repetition, a standalone dockershim for the direct side and for the shim's own
//! RSS/CPU) and writes every figure it promises in its JSON. Checks the report's structure,
//! never the times.

use integration::require_testbed;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_bench_embedded_dockershim_reports_every_figure() {
    let _tb = require_testbed!("kubelet_bench_embedded_dockershim_reports_every_figure");
    let bin = integration::runtimes::workspace_binary("kubelet-bench")
        .unwrap_or_else(|e| panic!("{e} (hack/test.sh builds the workspace)"));
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("bench.json");
    let out = tokio::process::Command::new(bin)
        .args([
            "--runtime",
            "embedded-dockershim",
            "--pods",
            "3",
            "--repeat",
            "1",
        ])
        .args(["--idle-seconds", "2", "--settle-seconds", "0", "--json"])
        .arg(&json)
        // The cri-dockerd side is the same code path with another binary: left out here.
        .env_remove("CRI_DOCKERD")
        .output()
        .await
        .expect("run kubelet-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubelet-bench failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("| 3 |"), "{stdout}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("json");
    assert_eq!(v["runtime"], "embedded dockershim");
    let batches = v["batches"].as_array().expect("batches");
    assert_eq!(batches.len(), 2, "{v}");
    let mut dockerd_total = 0.0;
    for (b, n) in batches.iter().zip([1, 3]) {
        assert_eq!(b["pods"], n, "{b}");
        for key in [
            "kubelet_seconds",
            "direct_seconds",
            "kubelet_down_seconds",
            "direct_down_seconds",
        ] {
            let samples = b[key].as_array().expect(key);
            assert_eq!(samples.len(), 1, "{key}: {b}");
            assert!(samples[0].as_f64().is_some_and(|s| s > 0.0), "{key}: {b}");
        }
        // The ratio's interval needs 5 repetitions: with one it is there, and null.
        assert!(
            b.get("ratio_ci95").is_some_and(|i| i.is_null()),
            "ratio_ci95: {b}"
        );
        // Each batch waited for a quiet machine, at most the limit (30 s).
        for key in ["kubelet_settle_seconds", "direct_settle_seconds"] {
            let waited = b[key][0].as_f64();
            assert!(
                waited.is_some_and(|s| (0.0..=35.0).contains(&s)),
                "{key}: {b}"
            );
        }
        // Where the time went: each side's start-up calls, and what the batch cost.
        for key in ["kubelet_cri_mean_ms", "direct_cri_mean_ms"] {
            let ms = &b[key][0];
            for op in ["run_podsandbox", "create_container", "start_container"] {
                assert!(ms[op].as_f64().is_some_and(|x| x > 0.0), "{key}.{op}: {b}");
            }
        }
        for key in ["kubelet_load", "direct_load"] {
            let load = &b[key][0];
            let busy = load["machine_busy_seconds"].as_f64();
            assert!(busy.is_some_and(|x| x > 0.0), "{key}: {b}");
            // In clock ticks of 10 ms: a pod's start may cost dockerd less than one.
            let dockerd = load["dockerd_cpu_seconds"].as_f64();
            assert!(dockerd.is_some_and(|x| x >= 0.0), "{key}: {b}");
            dockerd_total += dockerd.unwrap_or(0.0);
        }
        // The direct side's standalone dockershim process is metered; the kubelet's side
        // counts its own process (embedded dockershim included) in kubelet_cpu_seconds.
        let shim = b["direct_load"][0]["shim_cpu_seconds"].as_f64();
        assert!(shim.is_some_and(|x| x >= 0.0), "direct shim CPU: {b}");
        assert!(b["kubelet_load"][0]["shim_cpu_seconds"].is_null(), "{b}");
        for key in ["kubelet_load", "direct_load"] {
            let own = b[key][0]["bench_cpu_seconds"].as_f64();
            assert!(own.is_some_and(|x| x >= 0.0), "{key} bench CPU: {b}");
        }
    }
    // Eight pod starts in all cost the Docker daemon more than a tick.
    assert!(dockerd_total > 0.0, "no dockerd CPU measured: {v}");
    let idle = &v["idle"];
    assert_eq!(idle["pods"], 3, "{idle}");
    for key in ["relists", "rss_mib"] {
        assert!(idle[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {idle}");
    }
    // In clock ticks of 10 ms: two relists of 3 pods in 2 s may cost the kubelet less than one
    // (a CI run read 0.0).
    let per_relist = idle["cpu_ms_per_relist_upper_bound"].as_f64();
    assert!(per_relist.is_some_and(|x| x >= 0.0), "{idle}");
    let shims = v["shims"].as_array().expect("shims");
    assert_eq!(shims.len(), 1, "{v}");
    assert_eq!(shims[0]["shim"], "dockershim");
    for key in [
        "shim_rss_mib_start",
        "shim_rss_mib",
        "rss_mib",
        "kubelet_up_seconds",
        "kubelet_down_seconds",
    ] {
        assert!(
            shims[0][key].as_f64().is_some_and(|x| x > 0.0),
            "{key}: {}",
            shims[0]
        );
    }
    assert!(
        shims[0]["shim_cpu_seconds"].as_f64().is_some(),
        "{}",
        shims[0]
    );
}
