//! The CRI-stats part of the summary on explicit runtime answers: which sandboxes and
//! containers count, the figures each container takes, the pod sums, and `usageNanoCores`
//! computed from `usage_core_nano_seconds` deltas when the runtime gives none.

use super::*;
use cgroup::CgroupSample;

const S: i64 = 1_000_000_000;

fn sandbox(id: &str, uid: &str, name: &str, ready: bool, created_at: i64) -> cri::PodSandbox {
    cri::PodSandbox {
        id: id.into(),
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        state: if ready {
            cri::PodSandboxState::SandboxReady
        } else {
            cri::PodSandboxState::SandboxNotready
        } as i32,
        created_at,
        ..Default::default()
    }
}

fn container(id: &str, sandbox: &str, name: &str, running: bool) -> cri::Container {
    cri::Container {
        id: id.into(),
        pod_sandbox_id: sandbox.into(),
        metadata: Some(cri::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        state: if running {
            cri::ContainerState::ContainerRunning
        } else {
            cri::ContainerState::ContainerExited
        } as i32,
        created_at: 42 * S,
        ..Default::default()
    }
}

/// Stats of `id` at `t` seconds: cumulative CPU, the runtime's own rate when given, and
/// memory.
fn stats(
    id: &str,
    name: &str,
    t: i64,
    usage: u64,
    nano: Option<u64>,
    ws: u64,
) -> cri::ContainerStats {
    let u = |value| Some(cri::UInt64Value { value });
    cri::ContainerStats {
        attributes: Some(cri::ContainerAttributes {
            id: id.into(),
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            ..Default::default()
        }),
        cpu: Some(cri::CpuUsage {
            timestamp: t * S,
            usage_core_nano_seconds: u(usage),
            usage_nano_cores: nano.and_then(u),
            psi: None,
        }),
        memory: Some(cri::MemoryUsage {
            timestamp: t * S,
            working_set_bytes: u(ws),
            usage_bytes: u(ws + 100),
            rss_bytes: u(ws / 2),
            page_faults: u(7),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The pod `uid` (ready sandbox "sb-new", an older sandbox that exited) with containers
/// "busy" (no runtime rate), "shim" (the runtime's rate) and an exited one; a pod the kubelet
/// does not know.
fn listing(t: i64, busy_usage: u64) -> RuntimeListing {
    RuntimeListing {
        sandboxes: vec![
            sandbox("sb-old", "u1", "web", false, 10 * S),
            sandbox("sb-new", "u1", "web", true, 20 * S),
            sandbox("sb-other", "u2", "other", true, 20 * S),
        ],
        containers: vec![
            container("busy", "sb-new", "busy", true),
            container("shim", "sb-new", "shim", true),
            container("done", "sb-new", "done", false),
            container("stale", "sb-old", "busy", true),
            container("theirs", "sb-other", "x", true),
        ],
        stats: vec![
            stats("busy", "busy", t, busy_usage, None, 1000),
            stats("shim", "shim", t, 9 * S as u64, Some(250_000_000), 2000),
            stats("done", "done", t, S as u64, None, 1),
            stats("stale", "busy", t, S as u64, None, 1),
            stats("theirs", "x", t, S as u64, None, 1),
        ],
        networks: cri_networks(
            &["sb-new", "sb-other"]
                .iter()
                .map(|id| cri::PodSandboxStats {
                    attributes: Some(cri::PodSandboxAttributes {
                        id: id.to_string(),
                        ..Default::default()
                    }),
                    linux: Some(cri::LinuxPodSandboxStats {
                        network: Some(cri::NetworkUsage {
                            timestamp: t * S,
                            default_interface: Some(iface("eth0", 1500, 700)),
                            interfaces: vec![iface("eth0", 1500, 700), iface("net1", 10, 20)],
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect::<Vec<_>>(),
        ),
    }
}

fn iface(name: &str, rx: u64, tx: u64) -> cri::NetworkInterfaceUsage {
    cri::NetworkInterfaceUsage {
        name: name.into(),
        rx_bytes: Some(cri::UInt64Value { value: rx }),
        rx_errors: Some(cri::UInt64Value { value: 0 }),
        tx_bytes: Some(cri::UInt64Value { value: tx }),
        tx_errors: Some(cri::UInt64Value { value: 0 }),
    }
}

#[test]
fn the_pod_network_comes_from_its_live_sandboxs_stats() {
    let p = StatsProvider::default();
    let l = listing(100, 10 * S as u64);
    let full = pods(&p, &l, Scope::Full);
    let net = full[0].network.as_ref().expect("network");
    assert_eq!(net.default.name, "eth0");
    assert_eq!(
        (net.default.rx_bytes, net.default.tx_bytes),
        (Some(1500), Some(700))
    );
    assert_eq!(net.interfaces.len(), 2);
    assert_eq!(net.time, Time::from_unix_nanos(100 * S));
    let json = serde_json::to_value(net).expect("json");
    assert_eq!(
        json["name"], "eth0",
        "the default interface is flattened: {json}"
    );
    assert_eq!(json["rxBytes"], 1500);
    // The resource-metrics scope has no network.
    assert!(pods(&p, &l, Scope::CpuAndMemory)[0].network.is_none());
}

fn pods(p: &StatsProvider, l: &RuntimeListing, scope: Scope) -> Vec<PodStats> {
    p.pod_stats(l, &HashSet::from(["u1".to_string()]), &|_| None, scope)
        .into_iter()
        .map(|(p, _)| p)
        .collect()
}

fn nano(p: &PodStats, name: &str) -> Option<u64> {
    p.containers
        .iter()
        .find(|c| c.name == name)
        .and_then(|c| c.cpu.as_ref()?.usage_nano_cores)
}

#[test]
fn only_running_containers_of_the_live_sandbox_of_known_pods_count() {
    let p = StatsProvider::default();
    let got = pods(&p, &listing(100, 0), Scope::Full);
    assert_eq!(got.len(), 1, "{got:?}");
    let pod = &got[0];
    assert_eq!(
        pod.pod_ref,
        PodReference {
            name: "web".into(),
            namespace: "default".into(),
            uid: "u1".into()
        }
    );
    assert_eq!(
        pod.start_time,
        Time::from_unix_nanos(20 * S),
        "the sandbox's creation"
    );
    let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["busy", "shim"]);
    let busy = &pod.containers[0];
    assert_eq!(busy.start_time, Time::from_unix_nanos(42 * S));
    assert_eq!(
        busy.memory,
        Some(MemoryStats {
            time: Time::from_unix_nanos(100 * S),
            available_bytes: None,
            usage_bytes: Some(1100),
            working_set_bytes: Some(1000),
            rss_bytes: Some(500),
            page_faults: Some(7),
            major_page_faults: None,
        })
    );
    // Pod memory is the containers' added up.
    let m = pod.memory.as_ref().unwrap();
    assert_eq!(m.working_set_bytes, Some(3000));
    assert_eq!(m.usage_bytes, Some(3200));
    assert_eq!(m.rss_bytes, Some(1500));
    assert_eq!(m.page_faults, Some(14));
}

#[test]
fn usage_nano_cores_comes_from_the_runtime_or_from_the_previous_sample() {
    let p = StatsProvider::default();
    let first = pods(&p, &listing(100, 10 * S as u64), Scope::Full);
    assert_eq!(nano(&first[0], "busy"), None, "no previous sample");
    assert_eq!(
        nano(&first[0], "shim"),
        Some(250_000_000),
        "the runtime's own"
    );
    let cpu = first[0].cpu.as_ref().unwrap();
    assert_eq!(cpu.usage_nano_cores, Some(250_000_000), "what is known");
    assert_eq!(cpu.usage_core_nano_seconds, Some(19 * S as u64));

    // 3 core-seconds in 4 s.
    let second = pods(&p, &listing(104, 13 * S as u64), Scope::Full);
    assert_eq!(nano(&second[0], "busy"), Some(750_000_000));
    let cpu = second[0].cpu.as_ref().unwrap();
    assert_eq!(cpu.usage_nano_cores, Some(1_000_000_000));
    assert_eq!(cpu.usage_core_nano_seconds, Some(22 * S as u64));
    assert_eq!(cpu.time, Time::from_unix_nanos(104 * S));

    // CPU-and-memory requests read the last rate and take no sample...
    let cached = pods(&p, &listing(105, 20 * S as u64), Scope::CpuAndMemory);
    assert_eq!(nano(&cached[0], "busy"), Some(750_000_000));
    assert_eq!(
        cached[0].containers[0]
            .cpu
            .as_ref()
            .unwrap()
            .usage_core_nano_seconds,
        Some(20 * S as u64),
        "the cumulative figure is the runtime's current one"
    );
    // ...so the next full request rates against the previous full one: 1 core-second in 2 s.
    let third = pods(&p, &listing(106, 14 * S as u64), Scope::Full);
    assert_eq!(nano(&third[0], "busy"), Some(500_000_000));
}

#[test]
fn the_pod_cgroup_gives_the_pods_cpu_and_memory_when_readable() {
    let p = StatsProvider::default();
    let sample = |cpu: u64| CgroupSample {
        cpu,
        memory_usage: 50_000,
        working_set: 40_000,
        rss: Some(30_000),
        page_faults: Some(3),
        major_page_faults: Some(0),
        memory_limit: Some(100_000),
    };
    let read = |t: i64, cpu: u64| move |uid: &str| (uid == "u1").then_some((t * S, sample(cpu)));
    let uids = HashSet::from(["u1".to_string()]);
    let l = listing(100, 0);
    let first = p.pod_stats(&l, &uids, &read(100, 10 * S as u64), Scope::Full);
    let pod = &first[0].0;
    assert_eq!(
        pod.cpu,
        Some(CpuStats {
            time: Time::from_unix_nanos(100 * S),
            usage_nano_cores: None,
            usage_core_nano_seconds: Some(10 * S as u64),
        }),
        "the cgroup's, not the containers' sum"
    );
    assert_eq!(
        pod.memory,
        Some(MemoryStats {
            time: Time::from_unix_nanos(100 * S),
            available_bytes: Some(60_000),
            usage_bytes: Some(50_000),
            working_set_bytes: Some(40_000),
            rss_bytes: Some(30_000),
            page_faults: Some(3),
            major_page_faults: Some(0),
        })
    );
    // 1.5 core-seconds in 2 s; the containers' samples are apart from the pod's.
    let l2 = listing(102, 0);
    let second = p.pod_stats(
        &l2,
        &uids,
        &read(102, 10 * S as u64 + 3 * S as u64 / 2),
        Scope::Full,
    );
    let cpu = second[0].0.cpu.as_ref().unwrap();
    assert_eq!(cpu.usage_nano_cores, Some(750_000_000));
    assert_eq!(nano(&second[0].0, "busy"), Some(0));
}

#[test]
fn samples_of_containers_gone_are_forgotten() {
    let p = StatsProvider::default();
    pods(&p, &listing(100, 0), Scope::Full);
    let mut without_busy = listing(101, 0);
    without_busy.containers.retain(|c| c.id != "busy");
    pods(&p, &without_busy, Scope::Full);
    // Back (same id): a first sample again, not a rate over the gap.
    let back = pods(&p, &listing(110, 5 * S as u64), Scope::Full);
    assert_eq!(nano(&back[0], "busy"), None);
}

#[test]
fn live_sandboxes_are_the_ready_ones_or_the_newest() {
    let ids = |v: Vec<&cri::PodSandbox>| {
        let mut ids: Vec<String> = v.into_iter().map(|s| s.id.clone()).collect();
        ids.sort();
        ids
    };
    assert_eq!(
        ids(live_sandboxes(&vec![
            sandbox("a", "u", "p", false, 3),
            sandbox("b", "u", "p", true, 1),
            sandbox("c", "u", "p", false, 2),
        ])),
        ["b"]
    );
    assert_eq!(
        ids(live_sandboxes(&vec![
            sandbox("a", "u", "p", false, 3),
            sandbox("c", "u", "p", false, 2),
            sandbox("d", "v", "q", false, 1),
        ])),
        ["a", "d"]
    );
}

fn sandbox_config(name: &str, uid: &str) -> cri::PodSandboxConfig {
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn when_the_list_fails_the_nodes_ready_sandboxes_are_asked_one_by_one() {
    use crate::cri::fake::FakeRuntime;
    let rt = FakeRuntime::new();
    let mine = rt
        .run_pod_sandbox(sandbox_config("a-node1", "u-a"), "")
        .await
        .expect("run a");
    let stopped = rt
        .run_pod_sandbox(sandbox_config("b-node1", "u-b"), "")
        .await
        .expect("run b");
    rt.stop_pod_sandbox(&stopped).await.expect("stop b");
    rt.run_pod_sandbox(sandbox_config("c-node2", "u-c"), "")
        .await
        .expect("run c");
    let sandboxes = rt.list_pod_sandbox(None).await.expect("list");
    let uids: HashSet<String> = ["u-a", "u-b"].map(String::from).into();
    rt.clear_calls();
    let got = own_sandbox_stats(&rt, &sandboxes, &uids).await;
    let ids: Vec<String> = got
        .iter()
        .filter_map(|s| s.attributes.as_ref().map(|a| a.id.clone()))
        .collect();
    // Only the ready sandbox of a known pod, asked by its id.
    assert_eq!(ids, vec![mine.clone()]);
    assert_eq!(rt.calls(), vec!["list_podsandbox_stats"]);
    // A sandbox whose own call fails (it stopped meanwhile) is left out, not an error.
    rt.inject_error(
        "list_podsandbox_stats",
        tonic::Status::unknown("sandbox container is not in ready state"),
    );
    assert!(own_sandbox_stats(&rt, &sandboxes, &uids).await.is_empty());
}

#[tokio::test]
async fn a_sandboxs_network_is_read_from_its_process_and_the_runtime_asked_only_without_one() {
    use crate::cri::fake::FakeRuntime;
    let rt = FakeRuntime::new();
    let with_cgroup = rt
        .run_pod_sandbox(sandbox_config("a", "u-a"), "")
        .await
        .expect("run a");
    let without = rt
        .run_pod_sandbox(sandbox_config("b", "u-b"), "")
        .await
        .expect("run b");
    let usage = network_usage(7);
    rt.set_sandbox_network(&with_cgroup, usage.clone());
    rt.set_sandbox_network(&without, usage);
    let sandboxes = rt.list_pod_sandbox(None).await.expect("list");
    let uids: HashSet<String> = ["u-a", "u-b"].map(String::from).into();
    // A cgroup v2 mount where pod u-a's sandbox cgroup holds this test's process: its
    // network namespace is the one read.
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("cgroup.controllers"), "cpu memory\n").unwrap();
    let pod_dir = PathBuf::from("kubepods/podu-a");
    let sb_dir = root
        .path()
        .join(&pod_dir)
        .join(format!("cri-containerd-{with_cgroup}.scope"));
    std::fs::create_dir_all(&sb_dir).unwrap();
    std::fs::write(
        sb_dir.join("cgroup.procs"),
        format!("{}\n", std::process::id()),
    )
    .unwrap();
    let dirs = HashMap::from([("u-a".to_string(), pod_dir)]);
    let own = node::interfaces_of(Some(i64::from(std::process::id())));
    let all_in_cgroups = HashSet::from(["u-a".to_string()]);
    rt.clear_calls();
    let got = sandbox_networks(&rt, root.path(), &sandboxes, &all_in_cgroups, &dirs).await;
    if own.is_empty() {
        eprintln!("this machine's namespace has no interface cAdvisor keeps: nothing to compare");
    } else {
        let net = got
            .get(&with_cgroup)
            .expect("read from the sandbox's process");
        let names: Vec<&str> = net.interfaces.iter().map(|i| i.name.as_str()).collect();
        let want: Vec<&str> = own.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, want);
        assert_ne!(net.default.rx_bytes, Some(7), "not the runtime's figures");
        assert!(
            rt.calls().is_empty(),
            "the runtime is not asked when every sandbox's process is found: {:?}",
            rt.calls()
        );
    }
    // Pod u-b has no cgroup: its sandbox's network comes from ListPodSandboxStats.
    rt.clear_calls();
    let got = sandbox_networks(&rt, root.path(), &sandboxes, &uids, &dirs).await;
    assert_eq!(
        got.get(&without).map(|n| n.default.rx_bytes),
        Some(Some(7)),
        "{got:?}"
    );
    assert_eq!(rt.calls(), vec!["list_podsandbox_stats"]);
    // A runtime without ListPodSandboxStats: no network for it, no error.
    rt.inject_error(
        "list_podsandbox_stats",
        tonic::Status::unimplemented("ListPodSandboxStats"),
    );
    let got = sandbox_networks(&rt, root.path(), &sandboxes, &uids, &dirs).await;
    assert!(!got.contains_key(&without));
}

fn network_usage(rx: u64) -> cri::NetworkUsage {
    cri::NetworkUsage {
        timestamp: 5 * S,
        default_interface: Some(iface("eth0", rx, rx)),
        interfaces: vec![iface("eth0", rx, rx)],
    }
}

#[tokio::test(start_paused = true)]
async fn the_first_read_has_housekeepings_rates_and_later_ones_their_own() {
    use crate::cadvisor::inventory::{Entry, Kind, Labels};
    let root = tempfile::tempdir().unwrap();
    let usage = |dir: &str, ns: u64| {
        let d = root.path().join("cpuacct").join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cpuacct.usage"), format!("{ns}\n")).unwrap();
    };
    let entry = |id: &str, kind, runtime_id: Option<&str>, pod_uid: Option<&str>| Entry {
        id: id.into(),
        dir: id.trim_start_matches('/').into(),
        kind,
        labels: Labels::default(),
        start_time: None,
        runtime_id: runtime_id.map(String::from),
        pod_uid: pod_uid.map(String::from),
    };
    let inventory = || {
        vec![
            entry("/", Kind::Node, None, None),
            entry("/kubepods/podu1", Kind::Pod, None, Some("u1")),
            entry("/kubepods/podu1/busy", Kind::Container, Some("busy"), None),
        ]
    };
    let hk = std::sync::Arc::new(crate::cadvisor::CadvisorState::new(root.path()));
    for (dir, ns) in [("", 0), ("kubepods/podu1", 0), ("kubepods/podu1/busy", 0)] {
        usage(dir, ns);
    }
    hk.record(inventory(), tokio::time::Instant::now(), 0);
    tokio::time::advance(std::time::Duration::from_secs(2)).await;
    usage("", 3 * S as u64);
    usage("kubepods/podu1", S as u64);
    usage("kubepods/podu1/busy", S as u64);
    hk.record(inventory(), tokio::time::Instant::now(), 0);

    let p = StatsProvider::with_housekeeping(hk);
    // The first read: no own previous sample; housekeeping's rates (1 core-second in 2 s for
    // the container, 1.5 cores for the node).
    let uids = HashSet::from(["u1".to_string()]);
    let cgroup = |t: i64, cpu: u64| {
        move |uid: &str| {
            (uid == "u1").then_some((
                t * S,
                CgroupSample {
                    cpu,
                    ..Default::default()
                },
            ))
        }
    };
    let l1 = listing(100, 10 * S as u64);
    let first = p.pod_stats(&l1, &uids, &cgroup(100, 0), Scope::Full);
    assert_eq!(nano(&first[0].0, "busy"), Some(500_000_000));
    assert_eq!(
        first[0].0.cpu.as_ref().unwrap().usage_nano_cores,
        Some(500_000_000),
        "the pod cgroup's"
    );
    let node = p.node_cpu(Scope::Full).expect("the node's CPU");
    assert_eq!(node.usage_nano_cores, Some(1_500_000_000));
    // /metrics/resource before any full summary: the same.
    let cached = pods(&p, &listing(101, 10 * S as u64), Scope::CpuAndMemory);
    assert_eq!(nano(&cached[0], "busy"), Some(500_000_000));
    // Later full reads rate against their own previous sample: 3 core-seconds in 4 s.
    let l2 = listing(104, 13 * S as u64);
    let second = p.pod_stats(&l2, &uids, &cgroup(104, 0), Scope::Full);
    assert_eq!(nano(&second[0].0, "busy"), Some(750_000_000));
}

#[test]
fn before_housekeepings_second_round_the_nodes_rate_is_since_its_first_sample() {
    use crate::cadvisor::inventory::{Entry, Kind, Labels};
    let root = tempfile::tempdir().unwrap();
    let d = root.path().join("cpuacct");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("cpuacct.usage"), "0\n").unwrap();
    let hk = std::sync::Arc::new(crate::cadvisor::CadvisorState::new(root.path()));
    let node = Entry {
        id: "/".into(),
        dir: "".into(),
        kind: Kind::Node,
        labels: Labels::default(),
        start_time: None,
        runtime_id: None,
        pod_uid: None,
    };
    // One sample, 1000 s ago, at no usage: the rate is the host's usage since over 1000 s.
    let then = now_ns() - 1000 * S;
    hk.record(vec![node], tokio::time::Instant::now(), then);
    assert_eq!(
        StatsProvider::default()
            .node_cpu(Scope::Full)
            .unwrap()
            .usage_nano_cores,
        None
    );
    let cpu = StatsProvider::with_housekeeping(hk)
        .node_cpu(Scope::Full)
        .expect("the node's CPU");
    let used = cpu.usage_core_nano_seconds.unwrap();
    let rate = cpu.usage_nano_cores.expect("a rate on the first read");
    let interval = (cpu.time.unix_nanos().unwrap() - then) as u128;
    assert_eq!(u128::from(rate), u128::from(used) * S as u128 / interval);
}

/// The pods' claim volumes with a metrics provider get `volume[]` entries with their statfs
/// figures and `pvcRef`; a hostPath PV's (MetricsNil) none.
#[test]
fn claim_volumes_are_listed_with_their_pvc_ref() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut pods = vec![PodStats {
        pod_ref: PodReference {
            name: "p".into(),
            namespace: "ns".into(),
            uid: "u1".into(),
        },
        ..Default::default()
    }];
    let claim = |volume: &str, stat_fs: bool| crate::metrics::ClaimVolume {
        volume: volume.into(),
        namespace: "ns".into(),
        claim: format!("{volume}-claim"),
        path: dir.path().to_path_buf(),
        stat_fs,
    };
    let claims = HashMap::from([(
        "u1".to_string(),
        vec![claim("data", true), claim("host", false)],
    )]);
    add_claim_volumes(&mut pods, &claims);
    let want = crate::fsstats::volume_fs_stats(dir.path()).expect("statfs");
    assert_eq!(pods[0].volume.len(), 1, "{:?}", pods[0].volume);
    let v = &pods[0].volume[0];
    assert_eq!(v.name, "data");
    assert_eq!(v.fs.capacity_bytes, Some(want.capacity));
    assert_eq!(v.fs.inodes, Some(want.inodes));
    let json = serde_json::to_value(v).expect("json");
    assert_eq!(
        json["pvcRef"],
        serde_json::json!({"name": "data-claim", "namespace": "ns"})
    );
    assert!(json["availableBytes"].is_u64() && json["inodesUsed"].is_u64());
}
