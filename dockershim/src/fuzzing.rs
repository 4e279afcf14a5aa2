//! The fuzz harness of the CRI -> Docker translation (the `cri_to_docker` target in `fuzz/`,
//! built with the `fuzzing` feature; the same function replays the checked-in seeds in a unit
//! test). One input is the bytes of a protobuf `CreateContainerRequest`, exactly what the gRPC
//! server decodes; its `sandbox_config` is what the kubelet sends to both RunPodSandbox and
//! CreateContainer. Each input gets a fresh shim on a fresh fake Engine (`docker::fake`) in a
//! temp directory, and goes through the gRPC face ([`DockerService`]): validation, the Docker
//! create bodies, the names, the checkpoint and the status read back. Nothing is started, so no
//! log file is created; the fake touches nothing outside its temp directory.
//!
//! Invariants checked (a violation panics, which the fuzzer reports as a crash):
//! - a sandbox that was run has a Docker name that parses back to its metadata, and
//!   PodSandboxStatus answers that metadata, READY;
//! - the same RunPodSandbox again does not leave a second live sandbox for the metadata;
//! - a container that was created has a Docker name that parses back to its metadata and the
//!   pod's, ContainerStatus answers its metadata, and its log path stays inside the sandbox's
//!   log directory;
//! - labels and annotations read back as sent, when no key collides with the shim's own
//!   (`annotation.` prefix, internal keys: a documented limitation shared with upstream).

use std::collections::HashMap;
use std::path::{Component, Path};
use std::sync::Arc;

use cri_proto::RuntimeService;
use cri_proto::runtime::v1 as cri;
use prost::Message;
use tokio_util::sync::CancellationToken;
use tonic::Request;

use crate::config::ShimConfig;
use crate::docker::fake::FakeDocker;
use crate::labels;
use crate::naming;
use crate::service::DockerService;

/// The pod infra image the fake Engine has (the shim's default).
const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.6";
/// Images present in the fake Engine, so a request can name one that exists.
const IMAGES: [&str; 2] = ["busybox:1.36", "nginx:1.25"];

/// How far one input got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// RunPodSandbox succeeded.
    pub sandbox: bool,
    /// CreateContainer succeeded.
    pub container: bool,
}

/// Runs one fuzz input (see the module doc). Inputs that do not decode are ignored.
pub fn cri_to_docker(data: &[u8]) -> Outcome {
    let Ok(req) = cri::CreateContainerRequest::decode(data) else {
        return Outcome::default();
    };
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Outcome::default();
    };
    rt.block_on(run(req))
}

/// True when CRI `labels`/`annotations` can round-trip through Docker labels: no key collides
/// with the shim's internal labels or the annotation prefix.
fn round_trippable(labels: &HashMap<String, String>, sandbox: bool) -> bool {
    !labels.keys().any(|k| {
        k.starts_with(labels::ANNOTATION_PREFIX)
            || labels::INTERNAL_LABEL_KEYS.contains(&k.as_str())
            || (sandbox && k == labels::KUBERNETES_CONTAINER_NAME_LABEL)
    })
}

async fn run(req: cri::CreateContainerRequest) -> Outcome {
    let mut outcome = Outcome::default();
    let Ok(dir) = tempfile::tempdir() else {
        return outcome;
    };
    let docker = Arc::new(FakeDocker::with_files(&dir.path().join("docker")));
    docker.add_image(PAUSE_IMAGE);
    for image in IMAGES {
        docker.add_image(image);
    }
    let mut config = ShimConfig::with_endpoint("unix:///nonexistent/dockershim.sock");
    config.root_directory = dir.path().join("root");
    config.sandbox_oom_score_adj = Some(-998);
    let stop = CancellationToken::new();
    let Ok(shim) = crate::build_shim_with(docker.clone(), config, stop.clone(), true).await else {
        panic!("a shim on the fake Engine must build");
    };
    let svc = DockerService::new(shim);

    let mut sandbox_id = None;
    if let Some(sandbox) = req.sandbox_config.clone() {
        let run = svc
            .run_pod_sandbox(Request::new(cri::RunPodSandboxRequest {
                config: Some(sandbox.clone()),
                runtime_handler: String::new(),
            }))
            .await;
        if let Ok(resp) = run {
            let id = resp.into_inner().pod_sandbox_id;
            check_sandbox(&svc, &docker, &id, &sandbox).await;
            sandbox_id = Some(id);
            outcome.sandbox = true;
        }
    }

    // The kubelet sends the id RunPodSandbox answered: an input with an empty
    // `pod_sandbox_id` gets it; any other id is sent as it is (unknown ids, prefixes).
    let mut create = req.clone();
    if let Some(id) = &sandbox_id
        && req.pod_sandbox_id.is_empty()
    {
        create.pod_sandbox_id = id.clone();
    }
    if let Ok(resp) = svc.create_container(Request::new(create.clone())).await {
        let id = resp.into_inner().container_id;
        check_container(&svc, &docker, &id, &create).await;
        outcome.container = true;
    }
    stop.cancel();
    outcome
}

async fn check_sandbox(
    svc: &DockerService<FakeDocker>,
    docker: &FakeDocker,
    id: &str,
    sandbox: &cri::PodSandboxConfig,
) {
    let Some(meta) = sandbox.metadata.clone() else {
        panic!("RunPodSandbox succeeded without metadata");
    };
    let Some(c) = docker.container(id) else {
        panic!("RunPodSandbox answered {id:?}, which the Engine does not have");
    };
    let parsed = naming::parse_sandbox_name_strict(&c.name)
        .unwrap_or_else(|e| panic!("sandbox name {:?} does not parse: {e}", c.name));
    let want = naming::SandboxNameParts {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        attempt: meta.attempt,
    };
    assert_eq!(parsed, want, "sandbox name {:?}", c.name);

    let status = svc
        .pod_sandbox_status(Request::new(cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: true,
        }))
        .await
        .unwrap_or_else(|e| panic!("PodSandboxStatus of a sandbox just run: {e}"))
        .into_inner()
        .status
        .unwrap_or_else(|| panic!("PodSandboxStatus without a status"));
    assert_eq!(status.metadata.as_ref(), Some(&meta), "sandbox metadata");
    assert_eq!(
        status.state,
        cri::PodSandboxState::SandboxReady as i32,
        "state of a sandbox just run"
    );
    if round_trippable(&sandbox.labels, true) {
        assert_eq!(status.labels, sandbox.labels, "sandbox labels");
        assert_eq!(
            status.annotations, sandbox.annotations,
            "sandbox annotations"
        );
    }

    // The same RunPodSandbox again: never a second live sandbox for one metadata.
    let _ = svc
        .run_pod_sandbox(Request::new(cri::RunPodSandboxRequest {
            config: Some(sandbox.clone()),
            runtime_handler: String::new(),
        }))
        .await;
    let live = docker
        .containers()
        .iter()
        .filter(|c| {
            c.running()
                && naming::parse_sandbox_name_strict(&c.name).is_ok_and(|p| p == want)
                && labels::container_type(&c.labels()) == Some(labels::CONTAINER_TYPE_LABEL_SANDBOX)
        })
        .count();
    assert_eq!(
        live, 1,
        "live sandboxes for {want:?} after a second RunPodSandbox"
    );
}

async fn check_container(
    svc: &DockerService<FakeDocker>,
    docker: &FakeDocker,
    id: &str,
    req: &cri::CreateContainerRequest,
) {
    let (Some(config), Some(sandbox)) = (&req.config, &req.sandbox_config) else {
        panic!("CreateContainer succeeded without config or sandbox_config");
    };
    let (Some(meta), Some(pod)) = (&config.metadata, &sandbox.metadata) else {
        panic!("CreateContainer succeeded without metadata");
    };
    let Some(c) = docker.container(id) else {
        panic!("CreateContainer answered {id:?}, which the Engine does not have");
    };
    let parsed = naming::parse_container_name(&c.name)
        .unwrap_or_else(|e| panic!("container name {:?} does not parse: {e}", c.name));
    let want = naming::ContainerNameParts {
        name: meta.name.clone(),
        attempt: meta.attempt,
        pod: naming::SandboxNameParts {
            name: pod.name.clone(),
            namespace: pod.namespace.clone(),
            uid: pod.uid.clone(),
            attempt: 0,
        },
    };
    assert_eq!(parsed, want, "container name {:?}", c.name);

    let status = svc
        .container_status(Request::new(cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        }))
        .await
        .unwrap_or_else(|e| panic!("ContainerStatus of a container just created: {e}"))
        .into_inner()
        .status
        .unwrap_or_else(|| panic!("ContainerStatus without a status"));
    assert_eq!(status.metadata.as_ref(), Some(meta), "container metadata");
    if round_trippable(&config.labels, false) {
        assert_eq!(status.labels, config.labels, "container labels");
        assert_eq!(
            status.annotations, config.annotations,
            "container annotations"
        );
    }
    if !status.log_path.is_empty() {
        let path = Path::new(&status.log_path);
        let inside = path.starts_with(&sandbox.log_directory)
            && !path.components().any(|c| c == Component::ParentDir);
        assert!(
            inside,
            "log path {:?} is outside the log directory {:?}",
            status.log_path, sandbox.log_directory
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every checked-in seed of the `cri_to_docker` fuzz target (`fuzz/corpus/`) goes through
    /// the harness, so the seeds and the invariants are checked without cargo-fuzz.
    #[test]
    fn replays_the_fuzz_corpus() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/cri_to_docker");
        let mut outcomes = HashMap::new();
        for entry in std::fs::read_dir(&dir).expect("fuzz/corpus/cri_to_docker") {
            let path = entry.expect("corpus entry").path();
            let data = std::fs::read(&path).expect("corpus file");
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            outcomes.insert(name.unwrap_or_default(), cri_to_docker(&data));
        }
        // The generated seeds reach as far as they should.
        let both = Outcome {
            sandbox: true,
            container: true,
        };
        let sandbox_only = Outcome {
            sandbox: true,
            container: false,
        };
        for (seed, want) in [
            ("simple.pb", both),
            ("full.pb", both),
            ("privileged.pb", both),
            ("label-clash.pb", both),
            ("log-path-escape.pb", sandbox_only),
            ("unknown-sandbox-id.pb", sandbox_only),
            ("container-named-pod.pb", sandbox_only),
            ("underscore-metadata.pb", Outcome::default()),
            ("sandbox-without-metadata.pb", Outcome::default()),
        ] {
            assert_eq!(outcomes.get(seed), Some(&want), "{seed}");
        }
    }

    fn kv(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn sandbox(name: &str) -> cri::PodSandboxConfig {
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.to_string(),
                namespace: "default".to_string(),
                uid: format!("uid-{name}"),
                attempt: 0,
            }),
            hostname: name.to_string(),
            log_directory: format!("/var/log/pods/default_{name}_uid-{name}"),
            labels: kv(&[("app", name), ("io.kubernetes.pod.name", name)]),
            annotations: kv(&[("kubernetes.io/config.source", "api")]),
            ..Default::default()
        }
    }

    fn container(name: &str) -> cri::ContainerConfig {
        cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: name.to_string(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: "busybox:1.36".to_string(),
                ..Default::default()
            }),
            command: vec!["sh".to_string(), "-c".to_string()],
            args: vec!["sleep 1000".to_string()],
            log_path: format!("{name}/0.log"),
            labels: kv(&[("tier", name)]),
            annotations: kv(&[("io.kubernetes.container.hash", "ad01c60e")]),
            ..Default::default()
        }
    }

    /// The seeds of the `cri_to_docker` target, by name.
    fn seeds() -> Vec<(&'static str, cri::CreateContainerRequest)> {
        let req = |sandbox: cri::PodSandboxConfig, config: cri::ContainerConfig| {
            cri::CreateContainerRequest {
                pod_sandbox_id: String::new(),
                config: Some(config),
                sandbox_config: Some(sandbox),
            }
        };
        let profile = |t: cri::security_profile::ProfileType, path: &str| {
            Some(cri::SecurityProfile {
                profile_type: t as i32,
                localhost_ref: path.to_string(),
            })
        };
        let mut full_sandbox = sandbox("full");
        full_sandbox.dns_config = Some(cri::DnsConfig {
            servers: vec!["10.96.0.10".to_string()],
            searches: vec!["default.svc.cluster.local".to_string()],
            options: vec!["ndots:5".to_string()],
        });
        full_sandbox.port_mappings = vec![cri::PortMapping {
            protocol: cri::Protocol::Tcp as i32,
            container_port: 80,
            host_port: 8080,
            host_ip: "127.0.0.1".to_string(),
        }];
        full_sandbox.linux = Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: "/kubepods/burstable/podfull".to_string(),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: cri::NamespaceMode::Pod as i32,
                    pid: cri::NamespaceMode::Pod as i32,
                    ipc: cri::NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                run_as_user: Some(cri::Int64Value { value: 65534 }),
                seccomp: profile(cri::security_profile::ProfileType::RuntimeDefault, ""),
                ..Default::default()
            }),
            sysctls: kv(&[("net.ipv4.ip_unprivileged_port_start", "0")]),
            ..Default::default()
        });
        let mut full = container("full");
        full.envs = vec![cri::KeyValue {
            key: "A".to_string(),
            value: "1".to_string(),
        }];
        full.working_dir = "/work".to_string();
        full.mounts = vec![cri::Mount {
            container_path: "/data".to_string(),
            host_path: "/var/lib/kubelet/pods/uid-full/volumes/data".to_string(),
            readonly: true,
            propagation: cri::MountPropagation::PropagationHostToContainer as i32,
            ..Default::default()
        }];
        full.devices = vec![cri::Device {
            container_path: "/dev/fuse".to_string(),
            host_path: "/dev/fuse".to_string(),
            permissions: "rw".to_string(),
        }];
        full.linux = Some(cri::LinuxContainerConfig {
            resources: Some(cri::LinuxContainerResources {
                cpu_shares: 717,
                cpu_quota: 70_000,
                cpu_period: 100_000,
                memory_limit_in_bytes: 128 << 20,
                oom_score_adj: 999,
                ..Default::default()
            }),
            security_context: Some(cri::LinuxContainerSecurityContext {
                capabilities: Some(cri::Capability {
                    add_capabilities: vec!["NET_ADMIN".to_string()],
                    drop_capabilities: vec!["ALL".to_string()],
                    ..Default::default()
                }),
                run_as_user: Some(cri::Int64Value { value: 1000 }),
                no_new_privs: true,
                masked_paths: vec!["/proc/kcore".to_string()],
                readonly_paths: vec!["/proc/sys".to_string()],
                seccomp: profile(cri::security_profile::ProfileType::RuntimeDefault, ""),
                apparmor: profile(cri::security_profile::ProfileType::Unconfined, ""),
                ..Default::default()
            }),
        });
        let mut privileged = container("priv");
        privileged.linux = Some(cri::LinuxContainerConfig {
            resources: None,
            security_context: Some(cri::LinuxContainerSecurityContext {
                privileged: true,
                seccomp: profile(
                    cri::security_profile::ProfileType::Localhost,
                    "relative.json",
                ),
                ..Default::default()
            }),
        });
        let mut underscore = sandbox("under_score");
        if let Some(m) = underscore.metadata.as_mut() {
            m.uid = "uid_x".to_string();
        }
        let mut escape = container("escape");
        escape.log_path = "../../../etc/cron.d/x".to_string();
        let mut pod_named = container("POD");
        pod_named.metadata = Some(cri::ContainerMetadata {
            name: "POD".to_string(),
            attempt: 0,
        });
        let mut unknown = req(sandbox("unknown"), container("c"));
        unknown.pod_sandbox_id = "0123456789abcdef".to_string();
        let mut no_meta = sandbox("nometa");
        no_meta.metadata = None;
        let mut clash = container("clash");
        clash.labels = kv(&[("annotation.x", "label"), ("io.kubernetes.sandbox.id", "x")]);
        vec![
            ("simple", req(sandbox("simple"), container("main"))),
            ("full", req(full_sandbox, full)),
            ("privileged", req(sandbox("priv"), privileged)),
            ("underscore-metadata", req(underscore, container("c"))),
            ("log-path-escape", req(sandbox("escape"), escape)),
            ("container-named-pod", req(sandbox("podname"), pod_named)),
            ("unknown-sandbox-id", unknown),
            ("sandbox-without-metadata", req(no_meta, container("c"))),
            ("label-clash", req(sandbox("clash"), clash)),
        ]
    }

    /// Writes the seeds of the `cri_to_docker` target into `fuzz/corpus/cri_to_docker/`
    /// (`cargo test -p dockershim --lib fuzzing -- --ignored`), as protobuf bytes.
    #[test]
    #[ignore = "writes fuzz/corpus/cri_to_docker/"]
    fn write_seeds() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/cri_to_docker");
        std::fs::create_dir_all(&dir).expect("corpus directory");
        for (name, req) in seeds() {
            std::fs::write(dir.join(format!("{name}.pb")), req.encode_to_vec()).expect("seed");
        }
    }

    /// How far the inputs of a directory get (a fuzzer's generated corpus, to judge its
    /// depth): `FUZZ_REPLAY_DIR=<dir> cargo test -p dockershim --lib replay_dir -- --ignored
    /// --nocapture`.
    #[test]
    #[ignore = "reads FUZZ_REPLAY_DIR"]
    fn replay_dir() {
        let Some(dir) = std::env::var_os("FUZZ_REPLAY_DIR") else {
            return;
        };
        let mut counts: HashMap<(bool, bool), usize> = HashMap::new();
        for entry in std::fs::read_dir(&dir).expect("FUZZ_REPLAY_DIR") {
            let data = std::fs::read(entry.expect("entry").path()).expect("input");
            let o = cri_to_docker(&data);
            *counts.entry((o.sandbox, o.container)).or_default() += 1;
        }
        println!("(sandbox run, container created) -> inputs: {counts:?}");
    }

    /// The seeds as written are what the fuzz target sees: they decode back unchanged.
    #[test]
    fn seeds_round_trip() {
        for (name, req) in seeds() {
            let back = cri::CreateContainerRequest::decode(req.encode_to_vec().as_slice());
            assert_eq!(back.ok(), Some(req), "{name}");
        }
    }
}
