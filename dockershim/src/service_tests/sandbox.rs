//! RunPodSandbox, StopPodSandbox, RemovePodSandbox and PodSandboxStatus on the fake Engine:
//! the pause container's name, labels and host config, the checkpoint, DNS, host namespaces,
//! CNI set-up and tear-down, idempotent stop and remove, and the refusals.

use std::collections::HashMap;
use std::path::Path;

use bollard::models::PortBinding;
use cri_proto::RuntimeService;
use cri_proto::runtime::v1 as cri;
use tonic::{Code, Request};

use super::{Fixture, PAUSE_IMAGE, code_of};
use crate::config::CniSettings;
use crate::docker::DockerApi;

fn port(protocol: cri::Protocol, container_port: i32, host_port: i32) -> cri::PortMapping {
    cri::PortMapping {
        protocol: protocol as i32,
        container_port,
        host_port,
        host_ip: String::new(),
    }
}

fn host_namespaces() -> Option<cri::LinuxPodSandboxConfig> {
    Some(cri::LinuxPodSandboxConfig {
        security_context: Some(cri::LinuxSandboxSecurityContext {
            namespace_options: Some(cri::NamespaceOption {
                network: cri::NamespaceMode::Node as i32,
                pid: cri::NamespaceMode::Node as i32,
                ipc: cri::NamespaceMode::Node as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    })
}

async fn status(fx: &Fixture, id: &str) -> Result<cri::PodSandboxStatusResponse, tonic::Status> {
    fx.svc
        .pod_sandbox_status(Request::new(cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: true,
        }))
        .await
        .map(|r| r.into_inner())
}

async fn stop(fx: &Fixture, id: &str) -> Result<(), tonic::Status> {
    fx.svc
        .stop_pod_sandbox(Request::new(cri::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        }))
        .await
        .map(|_| ())
}

async fn remove(fx: &Fixture, id: &str) -> Result<(), tonic::Status> {
    fx.svc
        .remove_pod_sandbox(Request::new(cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        }))
        .await
        .map(|_| ())
}

async fn list(fx: &Fixture) -> Vec<cri::PodSandbox> {
    list_with(fx, Default::default()).await
}

async fn list_with(fx: &Fixture, filter: cri::PodSandboxFilter) -> Vec<cri::PodSandbox> {
    fx.svc
        .list_pod_sandbox(Request::new(cri::ListPodSandboxRequest {
            filter: Some(filter),
        }))
        .await
        .expect("ListPodSandbox")
        .into_inner()
        .items
}

/// A sandbox `name` whose pause container was removed behind dockershim's back: only its
/// checkpoint is left.
async fn orphan_sandbox(fx: &Fixture, name: &str) -> String {
    let id = fx.run_sandbox(fx.sandbox_config(name)).await;
    fx.docker
        .remove_container(&id)
        .await
        .expect("gone behind our back");
    fx.engine_changed();
    id
}

/// The Docker calls made since the `before`-th, without what dockershim's background tasks
/// ask meanwhile (image sizes, the event stream, the log copiers' reads).
fn calls_since(fx: &Fixture, before: usize) -> Vec<String> {
    fx.docker.calls()[before..]
        .iter()
        .filter(|c| !["sizes", "events", "logs"].iter().any(|p| c.starts_with(p)))
        .cloned()
        .collect()
}

#[tokio::test]
async fn run_pod_sandbox_starts_a_named_labelled_pause_container_and_checkpoints_it() {
    let fx = Fixture::new().await;
    let mut config = fx.sandbox_config("web");
    config.port_mappings = vec![
        port(cri::Protocol::Tcp, 80, 8080),
        port(cri::Protocol::Udp, 53, 0),
    ];
    config.linux = Some(cri::LinuxPodSandboxConfig {
        cgroup_parent: "/kubepods/podweb".into(),
        sysctls: HashMap::from([("net.ipv4.ip_unprivileged_port_start".into(), "0".into())]),
        ..Default::default()
    });
    let id = fx.run_sandbox(config).await;

    let c = fx.docker.container(&id).expect("pause container");
    let name = format!("k8s_POD_web_default_{}_0", fx.uid("web"));
    assert_eq!(c.name, name);
    assert!(c.running());
    assert_eq!(c.body.image.as_deref(), Some(PAUSE_IMAGE));
    assert_eq!(c.body.hostname.as_deref(), Some("web"));
    let want_labels: HashMap<String, String> = [
        ("app", "web"),
        ("io.kubernetes.pod.name", "web"),
        ("annotation.kubernetes.io/config.source", "api"),
        ("io.kubernetes.docker.type", "podsandbox"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(c.labels(), want_labels);
    assert_eq!(
        c.body.exposed_ports,
        Some(vec!["80/tcp".to_string(), "53/udp".to_string()])
    );
    let hc = c.body.host_config.clone().expect("host config");
    assert_eq!(hc.network_mode, None, "Docker's default bridge");
    assert_eq!(hc.ipc_mode.as_deref(), Some("shareable"));
    assert_eq!(hc.pid_mode, None);
    assert_eq!(hc.oom_score_adj, Some(-998));
    assert_eq!(hc.cgroup_parent.as_deref(), Some("/kubepods/podweb"));
    assert_eq!(
        hc.sysctls
            .as_ref()
            .map(|s| s["net.ipv4.ip_unprivileged_port_start"].as_str()),
        Some("0")
    );
    assert_eq!(
        hc.port_bindings,
        Some(HashMap::from([(
            "80/tcp".to_string(),
            Some(vec![PortBinding {
                host_ip: None,
                host_port: Some("8080".into())
            }])
        )])),
        "only mappings with a host port are bound"
    );
    assert_eq!(
        hc.security_opt,
        Some(vec!["seccomp=unconfined".to_string()]),
        "no security context means CRI's default: unconfined"
    );
    assert_eq!(hc.cpu_shares, Some(2), "the pause container weighs least");

    assert!(fx.checkpoint_path(&id).is_file());
    let cp = fx.shim.checkpoints.get(&id).expect("checkpoint");
    assert_eq!(
        (cp.name.as_str(), cp.namespace.as_str()),
        ("web", "default")
    );
    let data = cp.data.expect("checkpoint data");
    assert!(!data.host_network);
    let ports: Vec<_> = data
        .port_mappings
        .expect("port mappings")
        .into_iter()
        .map(|p| (p.protocol, p.container_port, p.host_port))
        .collect();
    assert_eq!(
        ports,
        vec![
            (Some("tcp".to_string()), Some(80), Some(8080)),
            (Some("udp".to_string()), Some(53), Some(0)),
        ]
    );
    assert_eq!(fx.docker.calls_to("create"), vec![format!("create {name}")]);
    assert_eq!(fx.docker.calls_to("start"), vec![format!("start {id}")]);
}

#[tokio::test]
async fn host_namespaces_become_host_modes_and_are_checkpointed() {
    let fx = Fixture::new().await;
    let mut config = fx.sandbox_config("hostpod");
    config.port_mappings = vec![port(cri::Protocol::Tcp, 80, 8080)];
    config.linux = host_namespaces();
    let id = fx.run_sandbox(config).await;

    let c = fx.docker.container(&id).expect("pause container");
    let hc = c.body.host_config.clone().expect("host config");
    assert_eq!(hc.network_mode.as_deref(), Some("host"));
    assert_eq!(hc.pid_mode.as_deref(), Some("host"));
    assert_eq!(hc.ipc_mode.as_deref(), Some("host"));
    assert_eq!(hc.port_bindings, None, "the host network needs no bindings");
    assert_eq!(
        c.body.hostname, None,
        "a host-network pod has the node's name"
    );
    let cp = fx.shim.checkpoints.get(&id).expect("checkpoint");
    assert!(cp.data.expect("data").host_network);

    let st = status(&fx, &id)
        .await
        .expect("status")
        .status
        .expect("status");
    let ns = st
        .linux
        .and_then(|l| l.namespaces)
        .and_then(|n| n.options)
        .expect("namespace options");
    assert_eq!(ns.network, cri::NamespaceMode::Node as i32);
    assert_eq!(ns.pid, cri::NamespaceMode::Node as i32);
    assert_eq!(ns.ipc, cri::NamespaceMode::Node as i32);
    assert_eq!(
        st.network.expect("network").ip,
        "",
        "no pod IP on the host network"
    );
}

#[tokio::test]
async fn the_dns_config_is_written_to_the_sandboxs_resolv_conf() {
    let fx = Fixture::new().await;
    let mut config = fx.sandbox_config("dns");
    config.dns_config = Some(cri::DnsConfig {
        servers: vec!["10.96.0.10".into()],
        searches: vec!["default.svc.cluster.local".into()],
        options: vec!["ndots:5".into()],
    });
    let id = fx.run_sandbox(config).await;
    let inspect = fx.docker.inspect_container(&id).await.expect("inspect");
    let path = inspect.resolv_conf_path.expect("resolv.conf path");
    assert_eq!(
        std::fs::read_to_string(path).expect("resolv.conf"),
        "nameserver 10.96.0.10\nsearch default.svc.cluster.local\noptions ndots:5\n"
    );
}

#[tokio::test]
async fn the_same_sandbox_twice_is_refused_while_it_lives_and_replaces_it_once_exited() {
    let fx = Fixture::new().await;
    let config = fx.sandbox_config("twice");
    let first = fx.run_sandbox(config.clone()).await;
    let again = fx
        .svc
        .run_pod_sandbox(Request::new(cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            ..Default::default()
        }))
        .await;
    assert_eq!(code_of(again), Code::AlreadyExists);
    assert_eq!(fx.docker.containers().len(), 1, "no second container");

    fx.docker.exit(&first, 0, false);
    let second = fx.run_sandbox(config).await;
    assert_ne!(first, second);
    assert!(
        fx.docker.container(&first).is_none(),
        "the exited holder went"
    );
    assert!(fx.docker.container(&second).expect("new").running());
    assert_eq!(
        fx.docker.calls_to("remove"),
        vec![format!("remove {first}")]
    );
}

#[tokio::test]
async fn bad_run_pod_sandbox_requests_are_invalid_arguments_and_create_nothing() {
    let fx = Fixture::new().await;
    let run = |config: Option<cri::PodSandboxConfig>, handler: &str| {
        fx.svc
            .run_pod_sandbox(Request::new(cri::RunPodSandboxRequest {
                config,
                runtime_handler: handler.to_string(),
            }))
    };
    assert_eq!(code_of(run(None, "").await), Code::InvalidArgument);
    let mut no_uid = fx.sandbox_config("p");
    if let Some(m) = no_uid.metadata.as_mut() {
        m.uid.clear();
    }
    assert_eq!(code_of(run(Some(no_uid), "").await), Code::InvalidArgument);
    let mut underscore = fx.sandbox_config("p");
    if let Some(m) = underscore.metadata.as_mut() {
        m.name = "a_b".into();
    }
    let err = run(Some(underscore), "").await.expect_err("a_b");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("'_'"), "{}", err.message());
    let handler = run(Some(fx.sandbox_config("p")), "runc").await;
    assert_eq!(code_of(handler), Code::InvalidArgument);
    assert!(fx.docker.containers().is_empty());
    assert!(fx.docker.calls_to("create").is_empty());
}

#[tokio::test]
async fn a_missing_pod_infra_image_is_pulled_or_else_built_from_the_embedded_pause() {
    let fx = Fixture::with(|c, _| c.pod_infra_image = "example.com/pause:pullable".into()).await;
    fx.docker.allow_pull("example.com/pause:pullable");
    fx.run_sandbox(fx.sandbox_config("pulled")).await;
    assert_eq!(
        fx.docker.calls_to("pull"),
        vec!["pull example.com/pause:pullable user="]
    );
    assert!(fx.docker.calls_to("load").is_empty());

    let fx = Fixture::with(|c, _| c.pod_infra_image = "example.com/pause:airgapped".into()).await;
    let id = fx.run_sandbox(fx.sandbox_config("airgapped")).await;
    assert_eq!(fx.docker.calls_to("pull").len(), 1, "tried to pull first");
    assert_eq!(
        fx.docker.calls_to("load").len(),
        1,
        "then loaded the embedded one"
    );
    let image = fx.docker.container(&id).expect("pause").body.image;
    assert_eq!(image.as_deref(), Some("example.com/pause:airgapped"));
    assert!(
        fx.docker
            .images()
            .iter()
            .any(|i| i.tags == ["example.com/pause:airgapped"])
    );
}

#[tokio::test]
async fn stop_pod_sandbox_kills_its_containers_then_stops_the_pause_and_is_idempotent() {
    let fx = Fixture::new().await;
    let (sandbox, container) = fx.pod_with_container("stopme", "app").await;
    stop(&fx, &sandbox).await.expect("stop");
    assert_eq!(
        fx.docker.calls_to("stop"),
        vec![format!("stop {container} 0"), format!("stop {sandbox} 10")]
    );
    assert!(!fx.docker.container(&container).expect("kept").running());
    assert!(!fx.docker.container(&sandbox).expect("kept").running());
    assert!(
        fx.checkpoint_path(&sandbox).is_file(),
        "stop keeps the checkpoint"
    );
    let st = status(&fx, &sandbox)
        .await
        .expect("status")
        .status
        .expect("status");
    assert_eq!(st.state, cri::PodSandboxState::SandboxNotready as i32);

    stop(&fx, &sandbox).await.expect("stopping again");
    stop(&fx, &sandbox[..12]).await.expect("by unique prefix");
    stop(&fx, "0123456789ab")
        .await
        .expect("stopping what never was");
    assert_eq!(code_of(stop(&fx, "").await), Code::InvalidArgument);
}

#[tokio::test]
async fn remove_pod_sandbox_removes_containers_pause_and_checkpoint_and_is_idempotent() {
    let fx = Fixture::new().await;
    let (sandbox, container) = fx.pod_with_container("removeme", "app").await;
    let (other, _) = fx.pod_with_container("keepme", "app").await;
    stop(&fx, &sandbox).await.expect("stop");
    remove(&fx, &sandbox).await.expect("remove");
    assert!(fx.docker.container(&container).is_none());
    assert!(fx.docker.container(&sandbox).is_none());
    assert!(!fx.checkpoint_path(&sandbox).exists());
    assert_eq!(fx.docker.containers().len(), 2, "the other pod stays");
    assert_eq!(code_of(status(&fx, &sandbox).await), Code::NotFound);
    let ids: Vec<String> = list(&fx).await.into_iter().map(|s| s.id).collect();
    assert_eq!(ids, vec![other]);

    remove(&fx, &sandbox).await.expect("removing again");
    remove(&fx, "0123456789ab")
        .await
        .expect("removing what never was");
    assert_eq!(code_of(remove(&fx, "").await), Code::InvalidArgument);
}

/// RemovePodSandbox by full id makes the Docker calls cri-dockerd makes (issue 14: it also
/// inspected the sandbox and listed all of our containers): a listing of the pod's containers
/// by their sandbox label, one removal per container, the pause container's removal.
#[tokio::test]
async fn remove_pod_sandbox_lists_only_the_pods_containers_and_inspects_nothing() {
    let fx = Fixture::new().await;
    let (sandbox, container) = fx.pod_with_container("counted", "app").await;
    fx.pod_with_container("bystander", "app").await;
    stop(&fx, &sandbox).await.expect("stop");
    let calls_before = fx.docker.calls().len();
    remove(&fx, &sandbox).await.expect("remove");
    let calls = calls_since(&fx, calls_before);
    assert_eq!(
        calls,
        vec![
            format!("list label=io.kubernetes.docker.type|io.kubernetes.sandbox.id={sandbox}"),
            format!("remove {container}"),
            format!("remove {sandbox}"),
        ]
    );
    assert!(fx.docker.container(&container).is_none());
    assert!(fx.docker.container(&sandbox).is_none());
    assert_eq!(fx.docker.containers().len(), 2, "the other pod stays");

    // Again: the same calls find nothing and answer OK.
    let calls_before = fx.docker.calls().len();
    remove(&fx, &sandbox).await.expect("removing again");
    assert_eq!(calls_since(&fx, calls_before).len(), 2, "list + remove");
}

#[tokio::test]
async fn a_checkpoint_without_its_container_is_listed_notready_and_can_be_cleaned_up() {
    let fx = Fixture::new().await;
    let id = orphan_sandbox(&fx, "orphan").await;

    let items = list(&fx).await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].id, id);
    assert_eq!(items[0].state, cri::PodSandboxState::SandboxNotready as i32);
    let meta = items[0]
        .metadata
        .clone()
        .expect("metadata from the checkpoint");
    assert_eq!(
        (meta.name.as_str(), meta.namespace.as_str()),
        ("orphan", "default")
    );

    stop(&fx, &id).await.expect("stop from the checkpoint");
    remove(&fx, &id).await.expect("remove the checkpoint");
    assert!(!fx.checkpoint_path(&id).exists());
    assert!(list(&fx).await.is_empty());
}

/// A checkpoint without its container is a not-ready sandbox without labels: a listing by
/// label (the kubelet's per-pod status read) or of ready sandboxes cannot match it, so it
/// reads no checkpoint.
#[tokio::test]
async fn listings_by_label_or_of_ready_sandboxes_read_no_checkpoint() {
    let fx = Fixture::new().await;
    let kept = fx.run_sandbox(fx.sandbox_config("kept")).await;
    let orphan = orphan_sandbox(&fx, "orphan").await;
    let listed = |filter: cri::PodSandboxFilter| async {
        let reads = fx.shim.checkpoints.reads();
        let items = list_with(&fx, filter).await;
        let mut ids: Vec<String> = items.into_iter().map(|s| s.id).collect();
        ids.sort();
        (ids, fx.shim.checkpoints.reads() - reads)
    };

    let by_label = cri::PodSandboxFilter {
        label_selector: HashMap::from([("app".to_string(), "kept".to_string())]),
        ..Default::default()
    };
    assert_eq!(listed(by_label).await, (vec![kept.clone()], 0));
    let ready = cri::PodSandboxFilter {
        state: Some(cri::PodSandboxStateValue {
            state: cri::PodSandboxState::SandboxReady as i32,
        }),
        ..Default::default()
    };
    assert_eq!(listed(ready).await, (vec![kept.clone()], 0));
    let not_ready = cri::PodSandboxFilter {
        state: Some(cri::PodSandboxStateValue {
            state: cri::PodSandboxState::SandboxNotready as i32,
        }),
        ..Default::default()
    };
    assert_eq!(listed(not_ready).await, (vec![orphan.clone()], 1));
    let (mut all, reads) = listed(Default::default()).await;
    all.sort();
    let mut want = vec![orphan, kept];
    want.sort();
    assert_eq!(
        (all, reads),
        (want, 1),
        "the orphan's checkpoint, read once"
    );
}

#[tokio::test]
async fn pod_sandbox_status_maps_dockers_view() {
    let fx = Fixture::new().await;
    let config = fx.sandbox_config("seen");
    let id = fx.run_sandbox(config.clone()).await;
    let resp = status(&fx, &id[..12]).await.expect("status by prefix");
    let st = resp.status.expect("status");
    assert_eq!(st.id, id, "the full id");
    assert_eq!(st.state, cri::PodSandboxState::SandboxReady as i32);
    assert_eq!(st.metadata, config.metadata);
    assert_eq!(st.labels, config.labels, "labels round-trip exactly");
    assert_eq!(st.annotations, config.annotations);
    let c = fx.docker.container(&id).expect("pause");
    assert_eq!(st.network.expect("network").ip, c.ip, "the bridge address");
    assert_eq!(
        st.created_at,
        1_704_067_200_000_000_000 + c.created * 1_000_000_000,
        "Docker's creation time in nanoseconds"
    );
    let ns = st
        .linux
        .and_then(|l| l.namespaces)
        .and_then(|n| n.options)
        .expect("namespace options");
    assert_eq!(ns.network, cri::NamespaceMode::Pod as i32);
    assert_eq!(ns.pid, cri::NamespaceMode::Container as i32);
    assert_eq!(ns.ipc, cri::NamespaceMode::Pod as i32);
    let info: serde_json::Value =
        serde_json::from_str(&resp.info["info"]).expect("verbose info is JSON");
    assert_eq!(info["image"], PAUSE_IMAGE);
    assert_eq!(info["checkpoint"]["name"], "seen");
    assert_eq!(info["pid"], c.pid);
    assert!(resp.timestamp > 0);

    fx.docker.exit(&id, 0, false);
    let st = status(&fx, &id)
        .await
        .expect("status")
        .status
        .expect("status");
    assert_eq!(st.state, cri::PodSandboxState::SandboxNotready as i32);
    assert_eq!(st.network.expect("network").ip, "", "no IP once it is down");
}

#[tokio::test]
async fn pod_sandbox_status_of_what_is_not_a_sandbox_is_not_found() {
    let fx = Fixture::new().await;
    let (_, container) = fx.pod_with_container("p", "c").await;
    let err = status(&fx, &container).await.expect_err("a container");
    assert_eq!(err.code(), Code::NotFound);
    assert!(
        err.message().contains("is not a pod sandbox"),
        "{}",
        err.message()
    );
    assert_eq!(code_of(status(&fx, "0123456789ab").await), Code::NotFound);
    assert_eq!(code_of(status(&fx, "").await), Code::InvalidArgument);
}

/// A CNI set-up in the temp directory: `loopback` and `fakenet` plugins that record their
/// command and environment and answer ADD with `10.88.0.5/24` on eth0.
fn fake_cni(dir: &Path) -> CniSettings {
    use std::os::unix::fs::PermissionsExt;
    let (bin, conf, rec) = (
        dir.join("cni-bin"),
        dir.join("cni-conf"),
        dir.join("cni-rec"),
    );
    for d in [&bin, &conf, &rec] {
        std::fs::create_dir_all(d).expect("cni dirs");
    }
    for name in ["loopback", "fakenet"] {
        let script = format!(
            r#"#!/bin/sh
cat > /dev/null
echo "$CNI_COMMAND {name} $CNI_NETNS $CNI_IFNAME" >> "{rec}/order"
if [ "$CNI_COMMAND" = ADD ]; then
  printf '%s' '{{"cniVersion":"1.0.0","interfaces":[{{"name":"'"$CNI_IFNAME"'","sandbox":"'"$CNI_NETNS"'"}}],"ips":[{{"address":"10.88.0.5/24","interface":0}}]}}'
fi
"#,
            rec = rec.display()
        );
        let path = bin.join(name);
        std::fs::write(&path, script).expect("plugin");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    std::fs::write(
        conf.join("10-fake.conflist"),
        r#"{"name":"fake","cniVersion":"1.0.0","plugins":[{"type":"fakenet"}]}"#,
    )
    .expect("conflist");
    CniSettings {
        bin_dirs: vec![bin],
        conf_dir: conf,
        cache_dir: dir.join("cni-cache"),
    }
}

#[tokio::test]
async fn in_cni_mode_the_pod_network_is_set_up_in_the_pause_netns_and_torn_down_on_stop() {
    let fx = Fixture::with(|c, dir| c.cni = Some(fake_cni(dir))).await;
    let id = fx.run_sandbox(fx.sandbox_config("cni")).await;
    let c = fx.docker.container(&id).expect("pause");
    let hc = c.body.host_config.clone().expect("host config");
    assert_eq!(
        hc.network_mode.as_deref(),
        Some("none"),
        "CNI fills an empty netns"
    );
    assert_eq!(
        c.body.network_disabled,
        Some(true),
        "runc's own netns, not Docker's network sandbox"
    );
    let netns = format!("/proc/{}/ns/net", c.pid);
    let order = || std::fs::read_to_string(fx.dir.path().join("cni-rec/order")).expect("order");
    // Added side by side: either may come first.
    let mut added: Vec<String> = order().lines().map(str::to_string).collect();
    added.sort();
    assert_eq!(
        added,
        [
            format!("ADD fakenet {netns} eth0"),
            format!("ADD loopback {netns} lo")
        ]
    );
    let st = status(&fx, &id)
        .await
        .expect("status")
        .status
        .expect("status");
    assert_eq!(
        st.network.expect("network").ip,
        "10.88.0.5",
        "from the CNI cache"
    );

    // The teardown runs while the pause container stops, so DEL gets the namespace through a
    // descriptor the shim opened before the stop (here the pause's "pid" is this process).
    fx.docker.set_pid(&id, i64::from(std::process::id()));
    stop(&fx, &id).await.expect("stop");
    let order = order();
    // Both networks are deleted (upstream's TearDownPod), side by side: either may come first.
    let mut dels: Vec<&str> = order.lines().skip(2).collect();
    dels.sort();
    assert_eq!(dels.len(), 2, "{order}");
    let pid = std::process::id();
    for (del, net, ifname) in [(dels[0], "fakenet", "eth0"), (dels[1], "loopback", "lo")] {
        let held = del
            .strip_prefix(&format!("DEL {net} /proc/{pid}/fd/"))
            .and_then(|rest| rest.strip_suffix(&format!(" {ifname}")));
        assert!(
            held.is_some_and(|fd| fd.parse::<u32>().is_ok()),
            "DEL in a held netns: {order}"
        );
    }
    // A sandbox whose pause is gone is torn down without a netns (IPAM and portmap still run).
    let stopped_order = order;
    let id = fx.run_sandbox(fx.sandbox_config("cni2")).await;
    fx.docker.exit(&id, 0, false);
    stop(&fx, &id).await.expect("stop");
    let order = std::fs::read_to_string(fx.dir.path().join("cni-rec/order")).expect("order");
    assert!(order.starts_with(&stopped_order), "{order}");
    let mut last: Vec<&str> = order
        .lines()
        .skip(stopped_order.lines().count() + 2)
        .collect();
    last.sort();
    assert_eq!(last, ["DEL fakenet  eth0", "DEL loopback  lo"], "{order}");
}

/// Without Docker's networking the sandbox has no resolv.conf or hosts of Docker's: dockershim
/// writes them (the pod's DNS config, or the host's resolv.conf without loopback servers) and
/// binds them into the pod's containers, except where a container mounts the path itself; they
/// go with the sandbox. Host-network sandboxes keep Docker's networking and files.
#[tokio::test]
async fn in_cni_mode_containers_get_the_sandboxs_own_resolv_conf_and_hosts() {
    let fx = Fixture::with(|c, dir| c.cni = Some(fake_cni(dir))).await;
    let mut config = fx.sandbox_config("dns");
    config.dns_config = Some(cri::DnsConfig {
        servers: vec!["10.96.0.10".into()],
        searches: vec!["default.svc.cluster.local".into()],
        options: vec!["ndots:5".into()],
    });
    let sid = fx.run_sandbox(config.clone()).await;
    let files = fx.dir.path().join("root/sandbox-files").join(&sid);
    assert_eq!(
        std::fs::read_to_string(files.join("resolv.conf")).expect("resolv.conf"),
        "nameserver 10.96.0.10\nsearch default.svc.cluster.local\noptions ndots:5\n"
    );
    assert!(files.join("hosts").exists());
    let mut ctr = fx.container_config("app");
    ctr.mounts.push(cri::Mount {
        container_path: "/etc/hosts".into(),
        host_path: "/tmp/kubelet-etc-hosts".into(),
        ..Default::default()
    });
    let cid = fx
        .create_container(&sid, &config, ctr)
        .await
        .expect("create");
    let binds = fx
        .docker
        .container(&cid)
        .expect("container")
        .body
        .host_config
        .and_then(|h| h.binds)
        .unwrap_or_default();
    assert!(
        binds.contains(&format!(
            "{}:/etc/resolv.conf",
            files.join("resolv.conf").display()
        )),
        "{binds:?}"
    );
    assert_eq!(
        binds.iter().filter(|b| b.ends_with(":/etc/hosts")).count(),
        1,
        "the container's own /etc/hosts only: {binds:?}"
    );
    stop(&fx, &sid).await.expect("stop");
    fx.svc
        .remove_pod_sandbox(Request::new(cri::RemovePodSandboxRequest {
            pod_sandbox_id: sid.clone(),
        }))
        .await
        .expect("remove");
    assert!(!files.exists(), "the files go with the sandbox");

    // Host network: Docker's networking, no files of ours.
    let mut host = fx.sandbox_config("hostnet");
    host.linux = host_namespaces();
    let hid = fx.run_sandbox(host).await;
    let pause = fx.docker.container(&hid).expect("pause");
    assert_eq!(pause.body.network_disabled, None);
    assert!(!fx.dir.path().join("root/sandbox-files").join(&hid).exists());
}

#[tokio::test]
async fn a_failed_cni_set_up_stops_the_sandbox_and_says_why() {
    let fx = Fixture::with(|c, dir| {
        let cni = fake_cni(dir);
        std::fs::write(
            cni.bin_dirs[0].join("fakenet"),
            "#!/bin/sh\ncat > /dev/null\necho '{\"code\":7,\"msg\":\"no addresses left\"}'\nexit 1\n",
        )
        .expect("failing plugin");
        c.cni = Some(cni);
    })
    .await;
    let err = fx
        .svc
        .run_pod_sandbox(Request::new(cri::RunPodSandboxRequest {
            config: Some(fx.sandbox_config("nonet")),
            ..Default::default()
        }))
        .await
        .expect_err("network set-up fails");
    assert_eq!(err.code(), Code::Unknown);
    assert!(
        err.message().contains("no addresses left"),
        "{}",
        err.message()
    );
    let c = &fx.docker.containers()[0];
    assert!(!c.running(), "the sandbox is stopped");
    assert_eq!(fx.docker.calls_to("stop"), vec![format!("stop {} 0", c.id)]);
}
