//! End to end: the `kubelet` BINARY in place of the Go kubelet on a kubeadm 1.26 node.
//! - It starts on kubeadm 1.26's generated `/var/lib/kubelet/config.yaml`
//!   (`integration/tests/fixtures/kubeadm/config-1.26.yaml`, a faithful copy) with only file
//!   paths adjusted for the test bed — `staticPodPath`, `resolvConf`, `clientCAFile` — and
//!   `cgroupDriver: systemd` turned into `cgroupfs`, the driver of the test bed's containerd
//!   (which does not report its driver through CRI, so the kubelet cannot take it from there),
//!   with the flags kubeadm 1.26 writes to `kubeadm-flags.env`; it runs the static pods of its
//!   `staticPodPath`, answers `ok` on `http://127.0.0.1:10248/healthz`, names every ignored
//!   field in one warning line, and its pods get cluster DNS (`nameserver 10.96.0.10`, search
//!   `default.svc.cluster.local svc.cluster.local cluster.local` then the host's, `ndots:5`).
//! - kubeadm's drop-in (`packaging/kubeadm/10-kubeadm.conf`), expanded as systemd does with
//!   kubeadm-flags.env and KUBELET_EXTRA_ARGS, starts it. Before `kubeadm init` wrote
//!   `kubelet.conf` it exits with one line naming `--kubeconfig` (upstream exits too: it cannot
//!   load the bootstrap kubeconfig; systemd restarts it until kubeadm has written the files);
//!   without the two kubeconfig flags kubeadm's webhooks (token authentication, Webhook
//!   authorization) have no API server and it exits with one line (as upstream's); with them
//!   turned off by flags it runs standalone.
//! - `logging.format: json` gives one JSON object a line.
//! - `kubelet --version` prints `Kubernetes v1.26.1`.
//! - A config file with a misspelled field stops the kubelet with the field and its line.
//! - Pod DNS on both runtimes (containerd's CRI and the embedded dockershim): the container's
//!   `/etc/resolv.conf` for `ClusterFirst`, `Default`, `None` with `dnsConfig`, and host-network
//!   pods with `ClusterFirst` (the host's) and `ClusterFirstWithHostNet` (the cluster's).

use std::path::Path;

use crate::kubelet_support;

use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use kubelet_support::*;

const KUBEADM_CONFIG: &str = include_str!("../fixtures/kubeadm/config-1.26.yaml");
const KUBEADM_FLAGS: &str = include_str!("../fixtures/kubeadm/kubeadm-flags-1.26.env");
/// The host resolver file the test kubelets use (a node with systemd-resolved's search line).
const HOST_RESOLV_CONF: &str = "# the node's resolver\nnameserver 10.255.0.53\nnameserver 10.255.0.54\nsearch host.example corp.example\noptions timeout:2 attempts:3\n";

/// (nameservers, search domains, options) of a resolv.conf text.
fn resolv(text: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut ns, mut search, mut opts) = (vec![], vec![], vec![]);
    for line in text.lines() {
        let mut f = line.split_whitespace();
        match f.next() {
            Some("nameserver") => ns.extend(f.next().map(String::from)),
            Some("search") => search = f.map(String::from).collect(),
            Some("options") => opts = f.map(String::from).collect(),
            _ => {}
        }
    }
    (ns, search, opts)
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The kubeadm config with the test bed's paths.
fn kubeadm_config(dir: &Path, manifests: &Path, resolv_conf: &Path) -> String {
    let text = KUBEADM_CONFIG
        .replace(
            "staticPodPath: /etc/kubernetes/manifests",
            &format!("staticPodPath: {}", manifests.display()),
        )
        .replace(
            "resolvConf: /run/systemd/resolve/resolv.conf",
            &format!("resolvConf: {}", resolv_conf.display()),
        )
        .replace(
            "clientCAFile: /etc/kubernetes/pki/ca.crt",
            &format!("clientCAFile: {}", dir.join("pki/ca.crt").display()),
        )
        .replace("cgroupDriver: systemd", "cgroupDriver: cgroupfs");
    assert_eq!(
        text.lines().count(),
        KUBEADM_CONFIG.lines().count(),
        "only values changed"
    );
    text
}

/// The flags of kubeadm-flags.env (`KUBELET_KUBEADM_ARGS`), with the test bed's endpoint and
/// pause image.
fn kubeadm_flags(endpoint: &str, pause: &str) -> Vec<String> {
    let line = KUBEADM_FLAGS
        .lines()
        .find_map(|l| l.strip_prefix("KUBELET_KUBEADM_ARGS="))
        .expect("KUBELET_KUBEADM_ARGS");
    line.trim_matches('"')
        .split_whitespace()
        .map(|f| {
            if f.starts_with("--container-runtime-endpoint=") {
                format!("--container-runtime-endpoint={endpoint}")
            } else if f.starts_with("--pod-infra-container-image=") {
                format!("--pod-infra-container-image={pause}")
            } else {
                f.to_string()
            }
        })
        .collect()
}

async fn cat_resolv_conf(endpoint: &str, uid: &str) -> String {
    let (code, out, err) = exec_in_pod(endpoint, uid, &["cat", "/etc/resolv.conf"])
        .await
        .expect("ExecSync");
    assert_eq!(code, 0, "{err}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeadm_config_runs_static_pods_with_healthz_and_cluster_dns() {
    let tb = require_testbed!("kubelet_kubeadm");
    let k = Kubelet::new(RuntimeKind::Containerd, "kadm");
    let resolv_conf = k.dir.path().join("resolv.conf");
    std::fs::write(&resolv_conf, HOST_RESOLV_CONF).expect("resolv.conf");
    let config = k.dir.path().join("config.yaml");
    std::fs::write(
        &config,
        kubeadm_config(k.dir.path(), &k.manifests, &resolv_conf),
    )
    .expect("config");
    // Upstream's healthz port, unless something else holds it on this host.
    let healthz_port = match std::net::TcpListener::bind("127.0.0.1:10248") {
        Ok(_) => 10248,
        Err(_) => {
            eprintln!(
                "127.0.0.1:10248 is taken on this host: the test moves healthz with --healthz-port"
            );
            free_port()
        }
    };
    let uid = format!("{}-static", k.node);
    k.write_manifest(
        "static.yaml",
        &pod_manifest("static", &uid, &tb.busybox_image, "sleep 3600", ""),
    );
    let mut cmd = tokio::process::Command::new(kubelet_binary());
    cmd.arg("--config")
        .arg(&config)
        .args(kubeadm_flags(&tb.containerd_endpoint, &tb.pause_image))
        // What the test needs besides: its own state, node name and read-only port (to watch
        // the pods), no secure port (every test kubelet would take 10250), and only the
        // memory eviction threshold (a nearly full test disk must not evict).
        .arg("--root-dir")
        .arg(&k.root)
        .arg("--hostname-override")
        .arg(&k.node)
        .arg("--read-only-port")
        .arg(k.port.to_string())
        .arg("--port")
        .arg("0")
        .arg("--eviction-hard")
        .arg("memory.available<100Mi")
        // Standalone: the file's token webhook and Webhook authorization need an API server
        // (upstream exits without one too).
        .arg("--authentication-token-webhook=false")
        .arg("--authorization-mode=AlwaysAllow");
    if healthz_port != 10248 {
        cmd.arg("--healthz-port").arg(healthz_port.to_string());
    }
    let log = std::fs::File::create(&k.log).expect("log");
    cmd.stdout(std::process::Stdio::null())
        .stderr(log)
        .env("NO_COLOR", "1")
        .kill_on_drop(true);
    let mut k = k;
    k.child = Some(cmd.spawn().expect("spawn kubelet"));
    let endpoint = k.endpoint(&tb);
    let outcome = tokio::spawn({
        let (port, log, uid, endpoint) = (k.port, k.log.clone(), uid.clone(), endpoint.clone());
        async move {
            wait_for("the static pod running", &log, || async {
                running_ids(&pod(port, &uid).await?)
            })
            .await;
            let (code, body) = http_get_status(healthz_port, "/healthz")
                .await
                .expect("healthz answers");
            assert_eq!((code, body.as_str()), (200, "ok"));
            // The read-only port is the flag's; the file leaves it out (upstream: off).
            let text = std::fs::read_to_string(&log).expect("log");
            let warnings: Vec<&str> = text
                .lines()
                .filter(|l| l.contains("fields accepted but ignored"))
                .collect();
            assert_eq!(warnings.len(), 1, "{text}");
            assert!(
                warnings[0].ends_with("volumeStatsAggPeriod")
                    && !warnings[0].contains("rotateCertificates")
                    && !warnings[0].contains("authentication.webhook")
                    && !warnings[0].contains("authorization"),
                "{}",
                warnings[0]
            );
            assert!(text.contains("version=\"v1.26.1\""), "{text}");
            // ClusterFirst with kubeadm's clusterDNS and clusterDomain.
            let (ns, search, opts) = resolv(&cat_resolv_conf(&endpoint, &uid).await);
            assert_eq!(ns, strs(&["10.96.0.10"]));
            assert_eq!(
                search,
                strs(&[
                    "default.svc.cluster.local",
                    "svc.cluster.local",
                    "cluster.local",
                    "host.example",
                    "corp.example"
                ])
            );
            assert_eq!(opts, strs(&["ndots:5"]));
        }
    })
    .await;
    k.shutdown(&tb, std::slice::from_ref(&uid)).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[test]
fn kubelet_version_prints_the_kubernetes_version() {
    let bin = kubelet_binary();
    assert!(bin.exists(), "{} is missing: cargo build", bin.display());
    let out = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .expect("run");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("Kubernetes v1.26.1"));
    assert!(
        lines.next().is_some_and(|l| l.starts_with("kubelet-rs v")),
        "{text}"
    );
}

#[test]
fn misspelled_config_field_stops_the_kubelet_with_its_name_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        KUBEADM_CONFIG.replace(
            "clusterDomain: cluster.local",
            "clusterDomian: cluster.local",
        ),
    )
    .expect("write");
    let out = std::process::Command::new(kubelet_binary())
        .arg("--config")
        .arg(&config)
        .arg("--root-dir")
        .arg(dir.path().join("root"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 18 column 1: unknown field `clusterDomian`"),
        "{err}"
    );
}

async fn pod_dns(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_dns[{}]", kind.name()));
    let mut k = Kubelet::new(kind, "kldns");
    let resolv_conf = k.dir.path().join("resolv.conf");
    std::fs::write(&resolv_conf, HOST_RESOLV_CONF).expect("resolv.conf");
    let u = |n: &str| format!("{}-{n}", k.node);
    let (cf, def, none, hn, hnc) = (u("cf"), u("def"), u("none"), u("hn"), u("hnc"));
    let uids = [
        cf.clone(),
        def.clone(),
        none.clone(),
        hn.clone(),
        hnc.clone(),
    ];
    let image = &tb.busybox_image;
    let manifests = [
        ("cf.yaml", "cf", &cf, ""),
        ("def.yaml", "def", &def, "  dnsPolicy: Default\n"),
        (
            "none.yaml",
            "none",
            &none,
            "  dnsPolicy: None\n  dnsConfig:\n    nameservers: [1.2.3.4, 1.2.3.4]\n    searches: [ns1.svc.cluster-domain.example, my.dns.search.suffix]\n    options:\n    - name: ndots\n      value: \"2\"\n    - name: edns0\n",
        ),
        ("hn.yaml", "hn", &hn, "  hostNetwork: true\n"),
        (
            "hnc.yaml",
            "hnc",
            &hnc,
            "  hostNetwork: true\n  dnsPolicy: ClusterFirstWithHostNet\n",
        ),
    ];
    for (file, name, uid, extra) in manifests {
        k.write_manifest(file, &pod_manifest(name, uid, image, "sleep 3600", extra));
    }
    k.spawn(
        &tb,
        &[
            "--cluster-dns".into(),
            "10.96.0.10".into(),
            "--cluster-domain".into(),
            "cluster.local".into(),
            "--resolv-conf".into(),
            resolv_conf.display().to_string(),
        ],
    );
    let endpoint = k.endpoint(&tb);
    let outcome = tokio::spawn({
        let (port, log, endpoint) = (k.port, k.log.clone(), endpoint.clone());
        let uids = uids.clone();
        async move {
            for u in &uids {
                wait_for(&format!("{u} running"), &log, || async {
                    running_ids(&pod(port, u).await?)
                })
                .await;
            }
            let host = (
                strs(&["10.255.0.53", "10.255.0.54"]),
                strs(&["host.example", "corp.example"]),
                strs(&["timeout:2", "attempts:3"]),
            );
            let cluster = (
                strs(&["10.96.0.10"]),
                strs(&[
                    "default.svc.cluster.local",
                    "svc.cluster.local",
                    "cluster.local",
                    "host.example",
                    "corp.example",
                ]),
                strs(&["ndots:5"]),
            );
            let want = [
                ("ClusterFirst", &uids[0], cluster.clone()),
                ("Default", &uids[1], host.clone()),
                (
                    "None with dnsConfig",
                    &uids[2],
                    (
                        strs(&["1.2.3.4"]),
                        strs(&["ns1.svc.cluster-domain.example", "my.dns.search.suffix"]),
                        strs(&["ndots:2", "edns0"]),
                    ),
                ),
                ("hostNetwork ClusterFirst", &uids[3], host.clone()),
                ("ClusterFirstWithHostNet", &uids[4], cluster.clone()),
            ];
            for (what, uid, want) in want {
                let text = cat_resolv_conf(&endpoint, uid).await;
                assert_eq!(resolv(&text), want, "{what}: /etc/resolv.conf:\n{text}");
            }
        }
    })
    .await;
    k.shutdown(&tb, &uids).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_dns_containerd() {
    pod_dns(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_dns_dockershim() {
    pod_dns(RuntimeKind::Dockershim).await;
}

/// The arguments of `ExecStart` in `dropin` as systemd expands them: `Environment=` and the
/// given environment files' variables, `$VAR` split at whitespace.
fn expand_dropin(dropin: &str, env_files: &[(&str, String)]) -> Vec<String> {
    let mut env = std::collections::HashMap::new();
    let mut assign = |line: &str| {
        if let Some((k, v)) = line.trim().trim_matches('"').split_once('=') {
            env.insert(k.to_string(), v.trim_matches('"').to_string());
        }
    };
    let mut exec = None;
    for line in dropin.lines() {
        if let Some(v) = line.strip_prefix("Environment=") {
            assign(v);
        } else if let Some(path) = line.strip_prefix("EnvironmentFile=") {
            let path = path.trim_start_matches('-');
            if let Some((_, text)) = env_files.iter().find(|(p, _)| *p == path) {
                text.lines()
                    .filter(|l| !l.trim_start().starts_with('#'))
                    .for_each(&mut assign);
            }
        } else if let Some(cmd) = line.strip_prefix("ExecStart=")
            && !cmd.is_empty()
        {
            exec = Some(cmd.to_string());
        }
    }
    exec.expect("ExecStart")
        .split_whitespace()
        .flat_map(|w| match w.strip_prefix('$') {
            Some(var) => env
                .get(var)
                .map(|v| v.split_whitespace().map(String::from).collect())
                .unwrap_or_default(),
            None => vec![w.to_string()],
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeadm_dropin_starts_the_kubelet_with_kubeadm_flags_and_extra_args() {
    let tb = require_testbed!("kubelet_kubeadm_dropin");
    let mut k = Kubelet::new(RuntimeKind::Containerd, "kdrop");
    let dropin = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/kubeadm/10-kubeadm.conf"),
    )
    .expect("packaging/kubeadm/10-kubeadm.conf");
    let resolv_conf = k.dir.path().join("resolv.conf");
    std::fs::write(&resolv_conf, HOST_RESOLV_CONF).expect("resolv.conf");
    let config = k.dir.path().join("config.yaml");
    std::fs::write(
        &config,
        kubeadm_config(k.dir.path(), &k.manifests, &resolv_conf),
    )
    .expect("config");
    let healthz = free_port();
    let flags_env = format!(
        "KUBELET_KUBEADM_ARGS=\"{}\"\n",
        kubeadm_flags(&tb.containerd_endpoint, &tb.pause_image).join(" ")
    );
    let extra = format!(
        "KUBELET_EXTRA_ARGS=\"--root-dir {} --hostname-override {} --read-only-port {} --port 0 --healthz-port {healthz} --node-ip 10.1.2.3 --node-labels tier=test --eviction-hard memory.available<100Mi\"\n",
        k.root.display(),
        k.node,
        k.port
    );
    let args = expand_dropin(
        &dropin,
        &[
            ("/var/lib/kubelet/kubeadm-flags.env", flags_env),
            ("/etc/default/kubelet", extra),
        ],
    );
    assert_eq!(args[0], "/usr/local/bin/kubelet");
    // The test's own paths: no /etc/kubernetes or /var/lib/kubelet of this host is read.
    let tmp = k.dir.path().display().to_string();
    let args: Vec<String> = args[1..]
        .iter()
        .map(|a| {
            a.replace("/etc/kubernetes/", &format!("{tmp}/etc-kubernetes/"))
                .replace(
                    "/var/lib/kubelet/config.yaml",
                    &config.display().to_string(),
                )
        })
        .collect();
    for want in [
        "--container-runtime=remote",
        "--bootstrap-kubeconfig=",
        "--kubeconfig=",
        "--config=",
        "--node-ip",
    ] {
        assert!(
            args.iter().any(|a| a.starts_with(want)),
            "{want} in {args:?}"
        );
    }
    let uid = format!("{}-static", k.node);
    // The pod sees --node-ip as its hostIP (status and downward API).
    let manifest = pod_manifest("static", &uid, &tb.busybox_image, "sleep 3600", "")
        + "    env:\n    - name: HOST_IP\n      valueFrom:\n        fieldRef:\n          fieldPath: status.hostIP\n";
    k.write_manifest("static.yaml", &manifest);
    // Neither kubeconfig exists yet (kubeadm init writes them): one line and a non-zero exit.
    let out = tokio::process::Command::new(kubelet_binary())
        .args(&args)
        .env("NO_COLOR", "1")
        .output()
        .await
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "kubelet: failed to run Kubelet: TLS bootstrap from \"{tmp}/etc-kubernetes/bootstrap-kubelet.conf\": "
        )) && stderr.contains("No such file or directory"),
        "{stderr}"
    );
    let mut args: Vec<String> = args
        .into_iter()
        .filter(|a| !a.starts_with("--bootstrap-kubeconfig=") && !a.starts_with("--kubeconfig="))
        .collect();
    // Without an API server kubeadm's webhooks (token authentication, Webhook authorization)
    // cannot work: one line, as upstream's "no client provided, cannot use webhook
    // authentication".
    let out = tokio::process::Command::new(kubelet_binary())
        .args(&args)
        .env("NO_COLOR", "1")
        .output()
        .await
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("kubelet: no client provided, cannot use webhook authentication"),
        "{stderr}"
    );
    // Standalone with the webhooks off.
    args.push("--authentication-token-webhook=false".into());
    args.push("--authorization-mode=AlwaysAllow".into());
    let log = std::fs::File::create(&k.log).expect("log");
    let mut cmd = tokio::process::Command::new(kubelet_binary());
    cmd.args(&args)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .env("NO_COLOR", "1")
        .kill_on_drop(true);
    k.child = Some(cmd.spawn().expect("spawn kubelet"));
    let endpoint = tb.containerd_endpoint.clone();
    let outcome = tokio::spawn({
        let (port, log, uid) = (k.port, k.log.clone(), uid.clone());
        async move {
            wait_for("the static pod running", &log, || async {
                running_ids(&pod(port, &uid).await?)
            })
            .await;
            assert_eq!(
                http_get_status(healthz, "/healthz").await,
                Some((200, "ok".to_string()))
            );
            let p = pod(port, &uid).await.expect("the static pod in /pods");
            assert_eq!(
                p["status"]["hostIP"].as_str(),
                Some("10.1.2.3"),
                "status.hostIP is --node-ip"
            );
            let (code, out, err) = exec_in_pod(&endpoint, &uid, &["sh", "-c", "echo $HOST_IP"])
                .await
                .expect("ExecSync");
            assert_eq!((code, out.trim()), (0, "10.1.2.3"), "{err}");
        }
    })
    .await;
    k.shutdown(&tb, std::slice::from_ref(&uid)).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logging_format_json_writes_one_object_a_line() {
    let tb = require_testbed!("kubelet_json_logging");
    let mut k = Kubelet::new(RuntimeKind::Containerd, "kjson");
    let config = k.dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nenableServer: false\nhealthzPort: 0\nreadOnlyPort: {}\nauthentication:\n  webhook:\n    enabled: false\nauthorization:\n  mode: AlwaysAllow\nlogging:\n  format: json\n  verbosity: 2\n",
            k.port
        ),
    )
    .expect("config");
    let log = std::fs::File::create(&k.log).expect("log");
    let mut cmd = tokio::process::Command::new(kubelet_binary());
    cmd.arg("--config")
        .arg(&config)
        .arg("--container-runtime-endpoint")
        .arg(&tb.containerd_endpoint)
        .arg("--root-dir")
        .arg(&k.root)
        .arg("--hostname-override")
        .arg(&k.node)
        .arg("--eviction-hard")
        .arg("memory.available<100Mi")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .kill_on_drop(true);
    k.child = Some(cmd.spawn().expect("spawn kubelet"));
    let port = k.port;
    wait_for("the read-only port", &k.log, || async {
        http_get(port, "/healthz").await
    })
    .await;
    if let Some(mut c) = k.child.take() {
        stop_kubelet(&mut c).await;
    }
    let text = std::fs::read_to_string(&k.log).expect("log");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l}")))
        .collect();
    assert!(lines.len() > 3, "{text}");
    for l in &lines {
        assert!(l["ts"].as_f64().is_some() && l["msg"].is_string(), "{l}");
        assert!(l.get("v").is_some() || l.get("err").is_some(), "{l}");
    }
    let start = lines
        .iter()
        .find(|l| l["msg"] == "starting kubelet")
        .expect("the start line");
    assert_eq!(start["v"], 0);
    assert_eq!(start["version"], "v1.26.1");
}
