//! The stats RPCs on the fake Engine: cumulative CPU usage as Docker reports it, and
//! `usage_nano_cores` as the rate since the previous sample of the same container (or sandbox),
//! computed from the timestamps the answers carry.

use super::*;

const S: u64 = 1_000_000_000;

async fn list_stats(fx: &Fixture, id: &str) -> cri::ContainerStats {
    fx.svc
        .list_container_stats(Request::new(cri::ListContainerStatsRequest {
            filter: None,
        }))
        .await
        .expect("ListContainerStats")
        .into_inner()
        .stats
        .into_iter()
        .find(|s| s.attributes.as_ref().is_some_and(|a| a.id == id))
        .expect("the container's stats")
}

async fn sandbox_stats(fx: &Fixture, id: &str) -> cri::LinuxPodSandboxStats {
    fx.svc
        .pod_sandbox_stats(Request::new(cri::PodSandboxStatsRequest {
            pod_sandbox_id: id.to_string(),
        }))
        .await
        .expect("PodSandboxStats")
        .into_inner()
        .stats
        .and_then(|s| s.linux)
        .expect("linux stats")
}

fn cpu(c: Option<&cri::CpuUsage>) -> (i64, Option<u64>, Option<u64>) {
    let c = c.expect("cpu");
    (
        c.timestamp,
        c.usage_core_nano_seconds.as_ref().map(|v| v.value),
        c.usage_nano_cores.as_ref().map(|v| v.value),
    )
}

/// `used` core-nanoseconds over the interval `from`..`to` (nanosecond timestamps), in
/// nanocores.
fn rate(used: u64, from: i64, to: i64) -> u64 {
    assert!(to > from, "timestamps move forward: {from} then {to}");
    (u128::from(used) * u128::from(S) / (to - from) as u128) as u64
}

/// Two samples never share a clock reading.
async fn tick() {
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
}

#[tokio::test]
async fn usage_nano_cores_is_the_rate_since_the_containers_previous_sample() {
    let fx = Fixture::new().await;
    let (_, id) = fx.pod_with_container("busy", "loop").await;
    fx.docker.set_cpu_usage(&id, 5 * S);
    let (t1, usage, nano) = cpu(list_stats(&fx, &id).await.cpu.as_ref());
    assert_eq!(usage, Some(5 * S));
    assert_eq!(nano, None, "a first sample has nothing to compare with");

    tick().await;
    fx.docker.set_cpu_usage(&id, 7 * S);
    let (t2, usage, nano) = cpu(list_stats(&fx, &id).await.cpu.as_ref());
    assert_eq!(usage, Some(7 * S));
    assert_eq!(nano, Some(rate(2 * S, t1, t2)));

    // ContainerStats shares the window: its rate is since the listing's sample.
    tick().await;
    fx.docker.set_cpu_usage(&id, 8 * S);
    let one = fx
        .svc
        .container_stats(Request::new(cri::ContainerStatsRequest {
            container_id: id.clone(),
        }))
        .await
        .expect("ContainerStats")
        .into_inner()
        .stats
        .expect("stats");
    let (t3, usage, nano) = cpu(one.cpu.as_ref());
    assert_eq!(usage, Some(8 * S));
    assert_eq!(nano, Some(rate(S, t2, t3)));
}

#[tokio::test]
async fn sandbox_stats_add_up_the_pause_and_the_containers_with_their_own_rate() {
    let fx = Fixture::new().await;
    let (sandbox_id, id) = fx.pod_with_container("pod", "loop").await;
    fx.docker.set_cpu_usage(&sandbox_id, S / 10);
    fx.docker.set_cpu_usage(&id, 3 * S);
    let first = sandbox_stats(&fx, &sandbox_id).await;
    let (t1, usage, nano) = cpu(first.cpu.as_ref());
    assert_eq!(usage, Some(3 * S + S / 10), "pause and container together");
    assert_eq!(nano, None);
    let memory = first.memory.expect("memory");
    // The fake reports 4096 bytes in use, none inactive, for each container.
    assert_eq!(memory.working_set_bytes.map(|v| v.value), Some(2 * 4096));
    assert_eq!(memory.usage_bytes.map(|v| v.value), Some(2 * 4096));
    assert_eq!(first.containers.len(), 1, "{:?}", first.containers);

    tick().await;
    fx.docker.set_cpu_usage(&id, 4 * S);
    let second = sandbox_stats(&fx, &sandbox_id).await;
    let (t2, usage, nano) = cpu(second.cpu.as_ref());
    assert_eq!(usage, Some(4 * S + S / 10));
    assert_eq!(nano, Some(rate(S, t1, t2)));
    // The container inside has its own window (since the first sandbox call sampled it).
    let (c2, _, inner) = cpu(second.containers[0].cpu.as_ref());
    let c1 = first.containers[0].cpu.as_ref().expect("cpu").timestamp;
    assert_eq!(inner, Some(rate(S, c1, c2)));
}
