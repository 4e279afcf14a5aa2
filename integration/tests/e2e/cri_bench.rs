//! The CRI benchmark runs end to end on a real runtime (containerd from the test bed) with tiny
//! settings and reports every operation with the expected number of samples (the pull phase
//! included, on an image of its own that it pushes to the test bed's registry first). It checks
//! the report's structure, never the times.

use std::time::Duration;

use integration::benchmark::{self, OPERATIONS, Settings, Target};
use integration::require_testbed;
use integration::runtimes::clients;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_bench_reports_every_operation() {
    let tb = require_testbed!("cri_bench_reports_every_operation");
    // Its own image: the pull phase removes it before and after every pull.
    let repo = integration::fixtures::unique_name("cri-bench-pull");
    crate::dockershim_support::push_fresh_image(&tb, &repo, 100_000).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (rt, img) = clients(&tb.containerd_endpoint).await.expect("connect");
    let mut targets = vec![Target {
        name: "containerd".into(),
        rt,
        img,
    }];
    let s = Settings {
        workers: 2,
        rounds: 1,
        containers: 2,
        image: tb.busybox_image.clone(),
        log_root: benchmark::log_root(dir.path()),
        timeout: Duration::from_secs(60),
        pull_image: Some(format!("{}/{repo}:1", tb.registry)),
        pulls: 1,
    };
    let report = benchmark::run(&mut targets, &s).await;
    for op in OPERATIONS {
        let st = &report.operations[*op]["containerd"];
        // Two workers per lifecycle phase; one pull phase: two pulls, one removal each way.
        let expected = match *op {
            "RemoveImage (tag)" | "RemoveImage (id)" => 1,
            _ => 2,
        };
        assert_eq!((st.count, st.errors), (expected, 0), "{op}: {st:?}");
        assert!(
            st.min_ms > 0.0 && st.min_ms <= st.p50_ms && st.p50_ms <= st.max_ms,
            "{op}: {st:?}"
        );
    }
    let md = benchmark::markdown(&report);
    assert_eq!(
        md.lines().filter(|l| l.starts_with("| ")).count(),
        OPERATIONS.len() + 1
    );
    let json = serde_json::to_value(&report).expect("json");
    assert_eq!(json["endpoints"][0], "containerd");
    assert_eq!(
        report.remove_by_tag_left_image["containerd"], 0,
        "containerd's RemoveImage by tag removes the image"
    );
}
