//! Tests of the CNI runner with fake plugin scripts in a tempdir: default network selection,
//! ADD through a chain with prevResult, capabilities and the result cache, DEL in reverse,
//! plugin errors and timeouts, result IP parsing, and the real bridge plugin when installed.

use super::*;
use std::os::unix::fs::PermissionsExt;

/// A fake plugin: records its env and stdin under `rec/`, appends
/// `<COMMAND> <name>` to `rec/order`, and prints a result for ADD.
fn fake_plugin(bin: &Path, rec: &Path, name: &str, ip: &str) {
    let script = format!(
        r#"#!/bin/sh
cat > "{rec}/{name}-$CNI_COMMAND.json"
env > "{rec}/{name}-$CNI_COMMAND.env"
echo "$CNI_COMMAND {name}" >> "{rec}/order"
if [ "$CNI_COMMAND" = ADD ]; then
  printf '%s' '{{"cniVersion":"1.0.0","interfaces":[{{"name":"eth0","sandbox":"/ns"}}],"ips":[{{"address":"{ip}/24","interface":0}}],"by":"{name}"}}'
fi
"#,
        rec = rec.display()
    );
    write_exec(&bin.join(name), &script);
}

fn write_exec(path: &Path, script: &str) {
    std::fs::write(path, script).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

struct Env {
    _tmp: tempfile::TempDir,
    bin: PathBuf,
    rec: PathBuf,
    conf: PathBuf,
    cache: PathBuf,
}

fn env() -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().to_path_buf();
    for d in ["bin", "rec", "conf"] {
        std::fs::create_dir_all(p.join(d)).unwrap();
    }
    Env {
        bin: p.join("bin"),
        rec: p.join("rec"),
        conf: p.join("conf"),
        cache: p.join("cache"),
        _tmp: tmp,
    }
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn args() -> PodNetworkArgs {
    PodNetworkArgs {
        pod_namespace: "default".into(),
        pod_name: "web".into(),
        sandbox_id: "abc123".into(),
        pod_uid: Some("uid-1".into()),
        netns: Some("/proc/42/ns/net".into()),
        ..Default::default()
    }
    .with_port_mappings(&[
        CniPortMapping {
            host_port: 8080,
            container_port: 80,
            protocol: "tcp".into(),
            host_ip: "".into(),
        },
        CniPortMapping {
            host_port: 0,
            container_port: 81,
            protocol: "tcp".into(),
            host_ip: "".into(),
        },
    ])
}

const CHAIN: &str = r#"{"cniVersion":"1.0.0","name":"testnet","plugins":[
  {"type":"plug-a","ipam":{"type":"x"}},
  {"type":"plug-b","capabilities":{"portMappings":true}},
  {"type":"plug-c","capabilities":{"portMappings":false,"bandwidth":true}}]}"#;

#[test]
fn default_network_selection() {
    let e = env();
    assert!(matches!(
        load_default_network(&e.conf, std::slice::from_ref(&e.bin)),
        Err(CniError::NoNetworks(_))
    ));
    fake_plugin(&e.bin, &e.rec, "plug-a", "10.0.0.2");
    // Sorted: 00 invalid JSON, 05 conflist in a .conf, 10 missing binary, 20 valid .conf, 30 valid list.
    std::fs::write(e.conf.join("00-bad.conflist"), "{nope").unwrap();
    std::fs::write(
        e.conf.join("05-list.conf"),
        r#"{"name":"x","plugins":[{"type":"plug-a"}]}"#,
    )
    .unwrap();
    std::fs::write(
        e.conf.join("10-missing.conflist"),
        r#"{"name":"m","cniVersion":"1.0.0","plugins":[{"type":"nope"}]}"#,
    )
    .unwrap();
    std::fs::write(
        e.conf.join("20-single.conf"),
        r#"{"name":"single","cniVersion":"0.4.0","type":"plug-a"}"#,
    )
    .unwrap();
    std::fs::write(e.conf.join("30-list.conflist"), CHAIN).unwrap();
    std::fs::write(e.conf.join("README.md"), "not a config").unwrap();
    let n = load_default_network(&e.conf, std::slice::from_ref(&e.bin)).unwrap();
    assert_eq!(n.name, "single");
    assert_eq!(n.cni_version, "0.4.0");
    assert_eq!(n.plugins.len(), 1);
    assert_eq!(n.plugins[0].plugin_type, "plug-a");
    assert_eq!(
        n.source.as_deref(),
        Some(e.conf.join("20-single.conf").as_path())
    );
    std::fs::remove_file(e.conf.join("20-single.conf")).unwrap();
    std::fs::remove_file(e.conf.join("30-list.conflist")).unwrap();
    assert!(matches!(
        load_default_network(&e.conf, std::slice::from_ref(&e.bin)),
        Err(CniError::NoValidNetworks(_))
    ));
    assert_eq!(
        NetworkStatus::from_network(None),
        NetworkStatus::NotReady {
            reason: "NetworkPluginNotReady".into(),
            message: "docker: network plugin is not ready: cni config uninitialized".into()
        }
    );
    assert!(NetworkStatus::from_network(Some(&n)).is_ready());
}

#[tokio::test]
async fn add_chain_prev_result_caps_cache_and_del_reverse() {
    let e = env();
    for (n, ip) in [
        ("plug-a", "10.0.0.2"),
        ("plug-b", "10.0.0.3"),
        ("plug-c", "10.0.0.4"),
    ] {
        fake_plugin(&e.bin, &e.rec, n, ip);
    }
    std::fs::write(e.conf.join("10.conflist"), CHAIN).unwrap();
    let net = load_default_network(&e.conf, std::slice::from_ref(&e.bin)).unwrap();
    let runner = CniRunner::new(vec![e.bin.clone()], &e.cache);
    let a = args();
    let res = runner.add(&net, &a).await.unwrap();
    assert_eq!(res.raw["by"], "plug-c");
    assert_eq!(res.ips("eth0"), vec!["10.0.0.4".parse::<IpAddr>().unwrap()]);

    let a_in = read_json(&e.rec.join("plug-a-ADD.json"));
    let b_in = read_json(&e.rec.join("plug-b-ADD.json"));
    let c_in = read_json(&e.rec.join("plug-c-ADD.json"));
    assert_eq!(a_in["name"], "testnet");
    assert_eq!(a_in["cniVersion"], "1.0.0");
    assert!(a_in.get("prevResult").is_none());
    assert_eq!(b_in["prevResult"]["by"], "plug-a");
    assert_eq!(c_in["prevResult"]["by"], "plug-b");
    // Capability injection only where declared true; host_port 0 dropped.
    assert!(a_in.get("runtimeConfig").is_none());
    assert_eq!(
        b_in["runtimeConfig"],
        json!({"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp","hostIP":""}]})
    );
    assert!(c_in.get("runtimeConfig").is_none());

    let env_a = std::fs::read_to_string(e.rec.join("plug-a-ADD.env")).unwrap();
    for want in [
        "CNI_COMMAND=ADD",
        "CNI_CONTAINERID=abc123",
        "CNI_NETNS=/proc/42/ns/net",
        "CNI_IFNAME=eth0",
        "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=abc123;K8S_POD_UID=uid-1",
        &format!("CNI_PATH={}", e.bin.display()),
    ] {
        assert!(
            env_a.lines().any(|l| l == want),
            "missing {want} in\n{env_a}"
        );
    }

    // libcni-compatible cache file.
    let cache_file = e.cache.join("results").join("testnet-abc123-eth0");
    let cached = read_json(&cache_file);
    assert_eq!(cached["kind"], "cniCacheV1");
    assert_eq!(cached["containerId"], "abc123");
    assert_eq!(cached["ifName"], "eth0");
    assert_eq!(cached["networkName"], "testnet");
    assert_eq!(cached["result"]["by"], "plug-c");
    assert_eq!(cached["config"], base64(CHAIN.as_bytes()));

    // CHECK in order, with the cached result.
    runner.check(&net, &a).await.unwrap();
    assert_eq!(
        read_json(&e.rec.join("plug-a-CHECK.json"))["prevResult"]["by"],
        "plug-c"
    );

    // A fresh runner (restart) still has the prevResult for DEL; missing netns tolerated.
    let runner2 = CniRunner::new(vec![e.bin.clone()], &e.cache);
    let mut gone = a.clone();
    gone.netns = None;
    runner2.del(&net, &gone).await.unwrap();
    let order = std::fs::read_to_string(e.rec.join("order")).unwrap();
    assert_eq!(
        order.lines().collect::<Vec<_>>(),
        vec![
            "ADD plug-a",
            "ADD plug-b",
            "ADD plug-c",
            "CHECK plug-a",
            "CHECK plug-b",
            "CHECK plug-c",
            "DEL plug-c",
            "DEL plug-b",
            "DEL plug-a"
        ]
    );
    assert_eq!(
        read_json(&e.rec.join("plug-a-DEL.json"))["prevResult"]["by"],
        "plug-c"
    );
    assert!(
        std::fs::read_to_string(e.rec.join("plug-c-DEL.env"))
            .unwrap()
            .lines()
            .any(|l| l == "CNI_NETNS=")
    );
    assert!(!cache_file.exists());
    // DEL again is fine (no cache, plugins tolerate).
    runner2.del(&net, &gone).await.unwrap();
    assert!(matches!(
        runner2.check(&net, &a).await,
        Err(CniError::NoCachedResult(_))
    ));
}

#[tokio::test]
async fn plugin_error_json_and_timeout() {
    let e = env();
    write_exec(
        &e.bin.join("failer"),
        "#!/bin/sh\ncat >/dev/null\nprintf '%s' '{\"cniVersion\":\"1.0.0\",\"code\":11,\"msg\":\"try again\",\"details\":\"pool busy\"}'\nexit 1\n",
    );
    write_exec(&e.bin.join("crasher"), "#!/bin/sh\necho boom >&2\nexit 3\n");
    write_exec(&e.bin.join("sleeper"), "#!/bin/sh\nexec sleep 5\n");
    let list = |t: &str| {
        NetworkConfigList::from_conflist_bytes(
            format!(r#"{{"cniVersion":"1.0.0","name":"n","plugins":[{{"type":"{t}"}}]}}"#)
                .as_bytes(),
        )
        .unwrap()
    };
    let mut runner = CniRunner::new(vec![e.bin.clone()], &e.cache);
    match runner.add(&list("failer"), &args()).await {
        Err(CniError::Plugin {
            plugin,
            command,
            code,
            msg,
            details,
        }) => {
            assert_eq!(
                (
                    plugin.as_str(),
                    command,
                    code,
                    msg.as_str(),
                    details.as_str()
                ),
                ("failer", "ADD", 11, "try again", "pool busy")
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    match runner.add(&list("crasher"), &args()).await {
        Err(CniError::PluginExit { stderr, .. }) => assert_eq!(stderr, "boom"),
        other => panic!("unexpected {other:?}"),
    }
    assert!(matches!(
        runner.add(&list("absent"), &args()).await,
        Err(CniError::PluginNotFound { .. })
    ));
    runner.timeout = Duration::from_millis(200);
    let t0 = std::time::Instant::now();
    assert!(matches!(
        runner.add(&list("sleeper"), &args()).await,
        Err(CniError::Timeout { .. })
    ));
    assert!(t0.elapsed() < Duration::from_secs(3));
}

#[test]
fn result_ip_parsing() {
    let r = CniResult {
        cni_version: "1.0.0".into(),
        raw: json!({
            "interfaces": [{"name":"cni0"}, {"name":"veth1"}, {"name":"eth0","sandbox":"/var/run/netns/x"}],
            "ips": [
                {"address":"fd00::5/64","interface":2},
                {"address":"10.1.0.1/24","interface":0},
                {"address":"10.1.0.5/24","gateway":"10.1.0.1","interface":2}
            ]
        }),
    };
    let want: Vec<IpAddr> = vec!["10.1.0.5".parse().unwrap(), "fd00::5".parse().unwrap()];
    assert_eq!(r.ips("eth0"), want);
    let old = CniResult {
        cni_version: "0.2.0".into(),
        raw: json!({"ip4":{"ip":"10.2.0.3/16"}}),
    };
    assert_eq!(old.ips("eth0"), vec!["10.2.0.3".parse::<IpAddr>().unwrap()]);
    let noif = CniResult {
        cni_version: "0.3.1".into(),
        raw: json!({"ips":[{"version":"4","address":"10.3.0.9/24"}]}),
    };
    assert_eq!(
        noif.ips("eth0"),
        vec!["10.3.0.9".parse::<IpAddr>().unwrap()]
    );
    assert_eq!(base64(b"ab"), "YWI=");
    assert_eq!(base64(b"abc"), "YWJj");
    assert_eq!(base64(b"a"), "YQ==");
    assert!(
        version_at_least("1.0.0", (0, 4))
            && version_at_least("0.4.0", (0, 4))
            && !version_at_least("0.3.1", (0, 4))
    );
}

/// Real plugins from containernetworking-plugins on a netns we create.
#[tokio::test]
async fn real_bridge_plugin_in_netns() {
    let bin = PathBuf::from("/usr/lib/cni");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !bin.join("bridge").exists() || !bin.join("host-local").exists() {
        crate::testbed::skip(
            "real_bridge_plugin_in_netns",
            "needs root and /usr/lib/cni/{bridge,host-local,loopback}",
        );
        return;
    }
    let ip = |a: &[&str]| std::process::Command::new("ip").args(a).output();
    let id = std::process::id();
    let ns = format!("krs-cni-{id}");
    let br = format!("krsbr{}", id % 100000);
    if !ip(&["netns", "add", &ns])
        .map(|o| o.status.success())
        .unwrap_or(false)
    {
        crate::testbed::skip("real_bridge_plugin_in_netns", "cannot create a netns");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"krs-test-{id}","plugins":[{{"type":"bridge","bridge":"{br}","isGateway":false,"ipMasq":false,
        "ipam":{{"type":"host-local","dataDir":"{dd}","ranges":[[{{"subnet":"10.99.0.0/24"}}]]}}}}]}}"#,
        dd = tmp.path().join("ipam").display()
    );
    let net = NetworkConfigList::from_conflist_bytes(conf.as_bytes()).unwrap();
    let runner = CniRunner::new(vec![bin], tmp.path().join("cache"));
    let a = PodNetworkArgs {
        pod_namespace: "default".into(),
        pod_name: "real".into(),
        sandbox_id: format!("krs{id}"),
        netns: Some(format!("/var/run/netns/{ns}")),
        ..Default::default()
    };
    let outcome = async {
        runner.add(&NetworkConfigList::loopback(), &a).await?;
        let res = runner.add(&net, &a).await?;
        let addr = ip(&[
            "netns", "exec", &ns, "ip", "-4", "-o", "addr", "show", "dev", "eth0",
        ])
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
        runner.check(&net, &a).await?;
        runner.del(&net, &a).await?;
        runner.del(&NetworkConfigList::loopback(), &a).await?;
        Ok::<_, CniError>((res, addr))
    }
    .await;
    let _ = ip(&["netns", "del", &ns]);
    let _ = ip(&["link", "del", &br]);
    let (res, addr) = outcome.unwrap();
    let ips = res.ips("eth0");
    assert_eq!(ips.len(), 1, "{:?}", res.raw);
    assert!(ips[0].to_string().starts_with("10.99.0."), "{ips:?}");
    assert!(
        addr.contains(&format!("{}/24", ips[0])),
        "eth0 in netns: {addr}"
    );
}
