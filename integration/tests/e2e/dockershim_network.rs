//! dockershim on real Docker, CNI mode: pod IPs reachable from the host (and no cached CNI
//! result left after teardown), host-network pods,
//! hostPort mappings through the portmap plugin, DNS config and hostname.

use crate::dockershim_support;

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use dockershim_support::with_dockershim;
use integration::fixtures::busybox_container;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HTTPD: &str = "mkdir -p /www && echo \"served-by-$HOSTNAME\" > /www/index.html && exec httpd -f -p 8080 -h /www";

/// One HTTP GET over a fresh TCP connection; the whole response.
async fn http_get(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::other("connect timed out"))??;
    s.write_all(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
        .await?;
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out))
        .await
        .map_err(|_| std::io::Error::other("read timed out"))??;
    Ok(out)
}

/// Polls `addr` until it answers with `want` in the body (generous deadline).
async fn wait_http(addr: SocketAddr, want: &str) -> Result<String, String> {
    let mut last = String::new();
    for _ in 0..60 {
        match http_get(addr).await {
            Ok(r) if r.contains(want) => return Ok(r),
            Ok(r) => last = r,
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_pod_ip_reachable_from_host() {
    with_dockershim(
        "dockershim_pod_ip",
        Duration::from_secs(120),
        |mut ctx| async move {
            let sconfig = ctx.sandbox_config("podip");
            let sid = ctx.run_sandbox(&sconfig).await;
            let net = ctx.sandbox_status(&sid).await.network.expect("network");
            let ip: Ipv4Addr = net.ip.parse().expect("pod IPv4");
            assert!(
                ip.octets()[0] == 10 && ip.octets()[1] == 89,
                "pod IP {ip} outside the test bed's 10.89.0.0/16"
            );
            ctx.run_container(
                &sid,
                &sconfig,
                &busybox_container("httpd", &ctx.tb.busybox_image.clone(), HTTPD),
            )
            .await;
            let r = wait_http(SocketAddr::from((ip, 8080)), "served-by-pod-host")
                .await
                .unwrap_or_else(|e| panic!("pod {ip}:8080 not reachable: {e}"));
            assert!(r.starts_with("HTTP/1."), "{r}");
            // The container sees the same address on its eth0.
            let cid = ctx
                .run_container(
                    &sid,
                    &sconfig,
                    &busybox_container(
                        "probe",
                        &ctx.tb.busybox_image.clone(),
                        "exec tail -f /dev/null",
                    ),
                )
                .await;
            let addrs = ctx.sh_ok(&cid, "ip -4 addr show eth0").await;
            assert!(addrs.contains(&format!("inet {ip}/")), "{addrs}");
            // Both networks' ADD results are cached (libcni's layout); teardown's DELs remove
            // them, the loopback's too (upstream's TearDownPod deletes both): nothing is left
            // behind per pod.
            let results = ctx.tb.dockershim_cni_cache_dir.join("results");
            let cached = |sid: &str| -> Vec<String> {
                std::fs::read_dir(&results)
                    .map(|d| {
                        d.filter_map(|e| e.ok())
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .filter(|n| n.contains(sid))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let before = cached(&sid);
            assert!(
                before.contains(&format!("cni-loopback-{sid}-lo"))
                    && before.iter().any(|n| n.ends_with(&format!("-{sid}-eth0"))),
                "cached ADD results of {sid}: {before:?}"
            );
            ctx.stop_remove_sandbox(&sid).await;
            assert_eq!(
                cached(&sid),
                Vec::<String>::new(),
                "left in {}",
                results.display()
            );
            // After teardown the address no longer answers.
            assert!(http_get(SocketAddr::from((ip, 8080))).await.is_err());
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_host_network_sandbox() {
    with_dockershim(
        "dockershim_host_network",
        Duration::from_secs(120),
        |mut ctx| async move {
            let mut sconfig = ctx.sandbox_config("hostnet");
            sconfig.linux = Some(cri::LinuxPodSandboxConfig {
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(cri::NamespaceOption {
                        network: cri::NamespaceMode::Node as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            });
            let sid = ctx.run_sandbox(&sconfig).await;
            let st = ctx.sandbox_status(&sid).await;
            let ip = st.network.map(|n| n.ip).unwrap_or_default();
            assert!(ip.is_empty(), "host-network pod has a pod IP {ip}");
            let ns = st
                .linux
                .and_then(|l| l.namespaces)
                .and_then(|n| n.options)
                .expect("namespace options");
            assert_eq!(ns.network, cri::NamespaceMode::Node as i32);
            let cid = ctx
                .run_container(
                    &sid,
                    &sconfig,
                    &busybox_container(
                        "h",
                        &ctx.tb.busybox_image.clone(),
                        "exec tail -f /dev/null",
                    ),
                )
                .await;
            let host_ifaces = std::fs::read_to_string("/proc/net/dev").unwrap();
            let ctr_ifaces = ctx.sh_ok(&cid, "cat /proc/net/dev").await;
            for iface in ["docker0:", "cni-shim0:"] {
                assert!(host_ifaces.contains(iface), "host lacks {iface}");
                assert!(
                    ctr_ifaces.contains(iface),
                    "container lacks {iface}:\n{ctr_ifaces}"
                );
            }
            ctx.stop_remove_sandbox(&sid).await;
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_host_port_mapping() {
    with_dockershim(
        "dockershim_host_port",
        Duration::from_secs(120),
        |mut ctx| async move {
            // A port free on the host right now.
            let host_port = {
                let l = TcpListener::bind("0.0.0.0:0").expect("bind");
                l.local_addr().unwrap().port()
            };
            let mut sconfig = ctx.sandbox_config("hostport");
            sconfig.port_mappings = vec![cri::PortMapping {
                protocol: cri::Protocol::Tcp as i32,
                container_port: 8080,
                host_port: host_port as i32,
                host_ip: String::new(),
            }];
            let sid = ctx.run_sandbox(&sconfig).await;
            ctx.run_container(
                &sid,
                &sconfig,
                &busybox_container("httpd", &ctx.tb.busybox_image.clone(), HTTPD),
            )
            .await;
            let pod_ip: Ipv4Addr = ctx
                .sandbox_status(&sid)
                .await
                .network
                .expect("network")
                .ip
                .parse()
                .expect("ip");
            // The pod itself first, so a failure below is the mapping's.
            wait_http(SocketAddr::from((pod_ip, 8080)), "served-by")
                .await
                .unwrap_or_else(|e| panic!("pod not serving: {e}"));
            // portmap DNATs traffic to the host's addresses; the bridge gateway is one of them.
            let gw = SocketAddr::from((Ipv4Addr::new(10, 89, 0, 1), host_port));
            wait_http(gw, "served-by")
                .await
                .unwrap_or_else(|e| panic!("hostPort {gw} not mapped: {e}"));
            let lo = SocketAddr::from((Ipv4Addr::LOCALHOST, host_port));
            // And on localhost (portmap's SNAT + route_localnet make that work).
            wait_http(lo, "served-by")
                .await
                .unwrap_or_else(|e| panic!("hostPort {lo} not mapped: {e}"));
            ctx.stop_remove_sandbox(&sid).await;
            // Teardown removed the mapping.
            assert!(
                http_get(gw).await.is_err(),
                "hostPort still mapped after teardown"
            );
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_dns_and_hostname() {
    with_dockershim(
        "dockershim_dns_hostname",
        Duration::from_secs(120),
        |mut ctx| async move {
            let mut sconfig = ctx.sandbox_config("dns");
            sconfig.hostname = "dns-test-host".into();
            sconfig.dns_config = Some(cri::DnsConfig {
                servers: vec!["10.96.0.10".into(), "10.96.0.11".into()],
                searches: vec![
                    "cri-it.svc.cluster.local".into(),
                    "svc.cluster.local".into(),
                ],
                options: vec!["ndots:5".into(), "timeout:2".into()],
            });
            let sid = ctx.run_sandbox(&sconfig).await;
            let cid = ctx
                .run_container(
                    &sid,
                    &sconfig,
                    &busybox_container(
                        "dns",
                        &ctx.tb.busybox_image.clone(),
                        "exec tail -f /dev/null",
                    ),
                )
                .await;
            let resolv = ctx.sh_ok(&cid, "cat /etc/resolv.conf").await;
            let lines: Vec<&str> = resolv.lines().collect();
            assert_eq!(
                lines,
                [
                    "nameserver 10.96.0.10",
                    "nameserver 10.96.0.11",
                    "search cri-it.svc.cluster.local svc.cluster.local",
                    "options ndots:5 timeout:2",
                ],
                "{resolv:?}"
            );
            // The pod's hosts file (dockershim's, bound in: the sandbox has no Docker network).
            let hosts = ctx.sh_ok(&cid, "cat /etc/hosts").await;
            assert!(
                hosts
                    .lines()
                    .any(|l| l.split_whitespace().eq(["127.0.0.1", "localhost"])),
                "{hosts:?}"
            );
            assert_eq!(ctx.sh_ok(&cid, "hostname").await, "dns-test-host\n");
            assert_eq!(
                ctx.sh_ok(&cid, "cat /etc/hostname").await,
                "dns-test-host\n"
            );
            ctx.stop_remove_sandbox(&sid).await;
        },
    )
    .await;
}
