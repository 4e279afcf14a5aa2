//! dockershim on real Docker: GetContainerEvents fan-out to several subscribers, and the stats
//! RPCs (container and pod sandbox, single and list).

use crate::dockershim_support;

use std::collections::HashMap;
use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use dockershim_support::with_dockershim;
use futures::StreamExt;
use integration::fixtures::busybox_container;

/// How many containers the events test runs at once: enough concurrent Docker events that
/// Docker's own time stamps arrive out of order now and then (it stamps before it queues).
const CONCURRENT_CONTAINERS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_container_events_two_subscribers() {
    with_dockershim(
        "dockershim_events",
        Duration::from_secs(120),
        |mut ctx| async move {
            let sconfig = ctx.sandbox_config("events");
            let sid = ctx.run_sandbox(&sconfig).await;
            let mut streams = Vec::new();
            for _ in 0..2 {
                streams.push(
                    ctx.rt
                        .get_container_events(cri::GetEventsRequest {})
                        .await
                        .expect("GetContainerEvents")
                        .into_inner(),
                );
            }
            // Let both subscriptions reach the server's broadcast before anything happens.
            tokio::time::sleep(Duration::from_millis(500)).await;
            // Several containers created, started, stopped and removed at the same time.
            let image = ctx.tb.busybox_image.clone();
            let lifecycles = (0..CONCURRENT_CONTAINERS).map(|i| {
                let (mut rt, sid, sconfig) = (ctx.rt.clone(), sid.clone(), sconfig.clone());
                let config = busybox_container(&format!("ev{i}"), &image, "exec tail -f /dev/null");
                async move {
                    let cid = rt
                        .create_container(cri::CreateContainerRequest {
                            pod_sandbox_id: sid,
                            config: Some(config),
                            sandbox_config: Some(sconfig),
                        })
                        .await
                        .expect("CreateContainer")
                        .into_inner()
                        .container_id;
                    rt.start_container(cri::StartContainerRequest {
                        container_id: cid.clone(),
                    })
                    .await
                    .expect("StartContainer");
                    rt.stop_container(cri::StopContainerRequest {
                        container_id: cid.clone(),
                        timeout: 1,
                    })
                    .await
                    .expect("StopContainer");
                    rt.remove_container(cri::RemoveContainerRequest {
                        container_id: cid.clone(),
                    })
                    .await
                    .expect("RemoveContainer");
                    cid
                }
            });
            let cids = futures::future::join_all(lifecycles).await;
            let want = vec![
                cri::ContainerEventType::ContainerCreatedEvent as i32,
                cri::ContainerEventType::ContainerStartedEvent as i32,
                cri::ContainerEventType::ContainerStoppedEvent as i32,
                cri::ContainerEventType::ContainerDeletedEvent as i32,
            ];
            for (n, stream) in streams.iter_mut().enumerate() {
                // Each container's events, in the order they arrived.
                let mut got: HashMap<&str, Vec<i32>> = HashMap::new();
                let complete = |got: &HashMap<&str, Vec<i32>>| {
                    cids.iter()
                        .all(|c| got.get(c.as_str()).is_some_and(|g| g.len() >= want.len()))
                };
                while !complete(&got) {
                    let ev = tokio::time::timeout(Duration::from_secs(30), stream.next())
                        .await
                        .unwrap_or_else(|_| panic!("subscriber {n}: only {got:?} arrived"))
                        .expect("stream ended")
                        .expect("event");
                    let Some(cid) = cids.iter().find(|c| **c == ev.container_id) else {
                        continue; // other tests' containers share the Docker daemon
                    };
                    let ps = ev.pod_sandbox_status.as_ref().unwrap_or_else(|| {
                        panic!("subscriber {n}: no pod_sandbox_status in {ev:?}")
                    });
                    assert_eq!(ps.id, sid);
                    assert_eq!(ps.metadata, sconfig.metadata);
                    assert!(ev.created_at > 0);
                    got.entry(cid.as_str())
                        .or_default()
                        .push(ev.container_event_type);
                }
                for cid in &cids {
                    assert_eq!(got[cid.as_str()], want, "subscriber {n}, container {cid}");
                }
            }
            ctx.stop_remove_sandbox(&sid).await;
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_stats() {
    with_dockershim("dockershim_stats", Duration::from_secs(180), |mut ctx| async move {
        let sconfig = ctx.sandbox_config("stats");
        let sid = ctx.run_sandbox(&sconfig).await;
        // Busy enough to use CPU, holding some memory.
        let cid = ctx
            .run_container(
                &sid,
                &sconfig,
                &busybox_container(
                    "busy",
                    &ctx.tb.busybox_image.clone(),
                    "x=$(head -c 4000000 /dev/zero | tr '\\0' a); while true; do i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done; sleep 0.1; done",
                ),
            )
            .await;
        // Some traffic on the pod's interface.
        let ip = ctx.sandbox_status(&sid).await.network.expect("net").ip;
        let _ = std::net::TcpStream::connect_timeout(
            &format!("{ip}:9").parse().unwrap(),
            Duration::from_secs(1),
        );

        let check = |s: &cri::ContainerStats| -> Result<(), String> {
            let cpu = s.cpu.as_ref().ok_or("no cpu")?;
            let mem = s.memory.as_ref().ok_or("no memory")?;
            let used = cpu.usage_core_nano_seconds.as_ref().map(|v| v.value).unwrap_or(0);
            let ws = mem.working_set_bytes.as_ref().map(|v| v.value).unwrap_or(0);
            if used == 0 || ws == 0 || cpu.timestamp == 0 {
                return Err(format!("cpu {used} working set {ws}: {s:?}"));
            }
            Ok(())
        };
        let mut last = String::new();
        let mut ok = false;
        for _ in 0..60 {
            let s = ctx
                .rt
                .container_stats(cri::ContainerStatsRequest {
                    container_id: cid.clone(),
                })
                .await
                .expect("ContainerStats")
                .into_inner()
                .stats
                .expect("stats");
            assert_eq!(s.attributes.as_ref().map(|a| a.id.as_str()), Some(cid.as_str()));
            match check(&s) {
                Ok(()) => {
                    ok = true;
                    break;
                }
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert!(ok, "ContainerStats: {last}");

        let list = ctx
            .rt
            .list_container_stats(cri::ListContainerStatsRequest {
                filter: Some(cri::ContainerStatsFilter {
                    pod_sandbox_id: sid.clone(),
                    ..Default::default()
                }),
            })
            .await
            .expect("ListContainerStats")
            .into_inner()
            .stats;
        assert_eq!(list.len(), 1, "{list:?}");
        assert_eq!(list[0].attributes.as_ref().unwrap().id, cid);
        check(&list[0]).unwrap();
        // ContainerStats sampled the container before: the listing carries the rate since (which
        // may be 0: the container sleeps most of the time).
        let nano = |c: Option<&cri::CpuUsage>| {
            c.and_then(|c| c.usage_nano_cores.as_ref()).map(|v| v.value)
        };
        assert!(
            nano(list[0].cpu.as_ref()).is_some(),
            "usage_nano_cores: {:?}",
            list[0].cpu
        );

        let check_pod = |p: &cri::PodSandboxStats| -> Result<(), String> {
            let l = p.linux.as_ref().ok_or("no linux stats")?;
            let cpu = l.cpu.as_ref().and_then(|c| c.usage_core_nano_seconds.as_ref()).map(|v| v.value);
            let ws = l.memory.as_ref().and_then(|m| m.working_set_bytes.as_ref()).map(|v| v.value);
            let net = l.network.as_ref().ok_or("no network stats")?;
            let iface = net.default_interface.as_ref().ok_or("no default interface")?;
            if cpu.unwrap_or(0) == 0 || ws.unwrap_or(0) == 0 {
                return Err(format!("pod cpu {cpu:?} ws {ws:?}"));
            }
            let bytes = |v: &Option<cri::UInt64Value>| v.as_ref().map(|v| v.value).unwrap_or(0);
            // The pod's own eth0 (CNI), which saw the connection attempt above.
            if iface.name != "eth0" || bytes(&iface.rx_bytes) == 0 || bytes(&iface.tx_bytes) == 0 {
                return Err(format!("interface {iface:?}"));
            }
            if !l.containers.iter().any(|c| c.attributes.as_ref().map(|a| &a.id) == Some(&cid)) {
                return Err(format!("container missing in {:?}", l.containers));
            }
            Ok(())
        };
        let p = ctx
            .rt
            .pod_sandbox_stats(cri::PodSandboxStatsRequest {
                pod_sandbox_id: sid.clone(),
            })
            .await
            .expect("PodSandboxStats")
            .into_inner()
            .stats
            .expect("stats");
        assert_eq!(p.attributes.as_ref().unwrap().id, sid);
        assert_eq!(p.attributes.as_ref().unwrap().metadata, sconfig.metadata);
        check_pod(&p).unwrap();
        let ps = ctx
            .rt
            .list_pod_sandbox_stats(cri::ListPodSandboxStatsRequest {
                filter: Some(cri::PodSandboxStatsFilter {
                    id: sid.clone(),
                    ..Default::default()
                }),
            })
            .await
            .expect("ListPodSandboxStats")
            .into_inner()
            .stats;
        assert_eq!(ps.len(), 1, "{ps:?}");
        check_pod(&ps[0]).unwrap();
        // The second sandbox sample: a rate since the first, for the sandbox and its container.
        let l = ps[0].linux.as_ref().unwrap();
        assert!(nano(l.cpu.as_ref()).is_some(), "sandbox usage_nano_cores: {:?}", l.cpu);
        assert!(
            nano(l.containers[0].cpu.as_ref()).is_some(),
            "container usage_nano_cores: {:?}",
            l.containers[0].cpu
        );
        ctx.stop_remove_sandbox(&sid).await;
    })
    .await;
}
