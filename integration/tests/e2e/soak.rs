//! The soak (`integration::soak`, binary `soak`) for two minutes on each runtime: pods churned
//! on the `kubelet` binary over a private containerd, or over a standalone `dockershim` on a
//! private dockerd, while the kubelet, dockershim, dockerd or containerd is killed with SIGKILL
//! at random moments (seeded by the clock, the seed printed) and started again. Asserts that
//! the leak checks see the pods' traces while pods run (so that they can see leaks at all),
//! that nothing is left once every pod is deleted, that no untouched pod was restarted by a
//! kill of the kubelet or dockershim, and that the node recovered from every kill. No timing
//! assertion: the figures are printed.

use std::time::Duration;

use integration::require_testbed;
use integration::soak::node::SoakRuntime;
use integration::soak::{Settings, run};

async fn soak_for_two_minutes(runtime: SoakRuntime) {
    let tb = require_testbed!(&format!("soak[{}]", runtime.name()));
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    println!("[soak {}] seed {seed}", runtime.name());
    let mut settings = Settings::new(runtime, Duration::from_secs(120), seed);
    // Several kills in two minutes.
    settings.kill_interval_s = (8.0, 25.0);
    settings.rss_interval = Duration::from_secs(5);
    let report = run(&tb, &settings).await.expect("the soak ran");
    println!("{}", report.table());

    let mut expected_kinds = vec![
        "container",
        "sandbox",
        "pod IP",
        "CNI cache file",
        "veth",
        "log directory",
        "pod directory",
        "mount",
        "cgroup",
    ];
    match runtime {
        SoakRuntime::Dockershim => expected_kinds.push("checkpoint"),
        SoakRuntime::Containerd => expected_kinds.push("shim"),
    }
    for k in expected_kinds {
        assert!(
            report.seen_with_pods.iter().any(|s| s == k),
            "the leak checks see no {k} while pods run (seed {seed}): {:?}",
            report.seen_with_pods
        );
    }
    assert!(
        report.kills.values().sum::<u64>() > 0,
        "something was killed (seed {seed})"
    );
    assert!(report.churn.total() > 0, "pods were churned (seed {seed})");
    assert_eq!(report.leaks, vec![], "nothing leaked (seed {seed})");
    assert_eq!(
        report.unexpected_restarts,
        Vec::<String>::new(),
        "no unexpected restart (seed {seed})"
    );
    assert_eq!(
        report.failures,
        Vec::<String>::new(),
        "the node recovered from every kill (seed {seed})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_two_minutes_on_a_private_containerd() {
    soak_for_two_minutes(SoakRuntime::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_two_minutes_on_dockershim_over_a_private_dockerd() {
    soak_for_two_minutes(SoakRuntime::Dockershim).await;
}
