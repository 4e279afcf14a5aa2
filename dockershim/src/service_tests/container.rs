//! CreateContainer, StartContainer, StopContainer, RemoveContainer, UpdateContainerResources,
//! ExecSync and ReopenContainerLog on the fake Engine: the Docker name and labels, the create
//! body (command, env, mounts, devices, resources, namespaces, security context), the log
//! file, idempotent stop and remove, and the refusals.

use std::collections::HashMap;

use bollard::models::RestartPolicyNameEnum;
use bytes::Bytes;
use cri_proto::RuntimeService;
use cri_proto::runtime::v1 as cri;
use tonic::{Code, Request};

use super::{BUSYBOX, Fixture, code_of};
use crate::docker::{DockerError, ExecOutput, LogChunk, LogStream};

async fn stop(fx: &Fixture, id: &str, timeout: i64) -> Result<(), tonic::Status> {
    fx.svc
        .stop_container(Request::new(cri::StopContainerRequest {
            container_id: id.to_string(),
            timeout,
        }))
        .await
        .map(|_| ())
}

async fn remove(fx: &Fixture, id: &str) -> Result<(), tonic::Status> {
    fx.svc
        .remove_container(Request::new(cri::RemoveContainerRequest {
            container_id: id.to_string(),
        }))
        .await
        .map(|_| ())
}

async fn exec_sync(
    fx: &Fixture,
    id: &str,
    cmd: &[&str],
    timeout: i64,
) -> Result<cri::ExecSyncResponse, tonic::Status> {
    fx.svc
        .exec_sync(Request::new(cri::ExecSyncRequest {
            container_id: id.to_string(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout,
        }))
        .await
        .map(|r| r.into_inner())
}

#[tokio::test]
async fn create_container_names_labels_and_translates_the_config() {
    let fx = Fixture::new().await;
    let mut sandbox = fx.sandbox_config("web");
    sandbox.linux = Some(cri::LinuxPodSandboxConfig {
        cgroup_parent: "/kubepods/podweb".into(),
        ..Default::default()
    });
    let sandbox_id = fx.run_sandbox(sandbox.clone()).await;
    let data = fx.dir.path().join("data");
    std::fs::create_dir(&data).expect("host dir");
    let mut config = fx.container_config("app");
    config.metadata = Some(cri::ContainerMetadata {
        name: "app".into(),
        attempt: 3,
    });
    config.envs = vec![cri::KeyValue {
        key: "A".into(),
        value: "1=2".into(),
    }];
    config.working_dir = "/work".into();
    config.tty = true;
    config.stdin = true;
    config.mounts = vec![cri::Mount {
        container_path: "/data".into(),
        host_path: data.to_string_lossy().into_owned(),
        readonly: true,
        propagation: cri::MountPropagation::PropagationHostToContainer as i32,
        ..Default::default()
    }];
    config.devices = vec![cri::Device {
        container_path: "/dev/xnull".into(),
        host_path: "/dev/null".into(),
        permissions: String::new(),
    }];
    config.linux = Some(cri::LinuxContainerConfig {
        resources: Some(cri::LinuxContainerResources {
            cpu_shares: 512,
            cpu_quota: 50_000,
            cpu_period: 100_000,
            memory_limit_in_bytes: 64 << 20,
            oom_score_adj: 500,
            cpuset_cpus: "0".into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = fx
        .create_container(&sandbox_id, &sandbox, config)
        .await
        .expect("CreateContainer");

    let c = fx.docker.container(&id).expect("created");
    assert_eq!(c.name, format!("k8s_app_web_default_{}_3", fx.uid("web")));
    assert!(!c.running(), "created, not started");
    let log_path = fx.dir.path().join("pods/web/app/0.log");
    let want_labels: HashMap<String, String> = [
        ("tier", "app"),
        ("annotation.io.kubernetes.container.hash", "ad01c60e"),
        ("io.kubernetes.docker.type", "container"),
        ("io.kubernetes.sandbox.id", sandbox_id.as_str()),
        (
            "io.kubernetes.container.logpath",
            log_path.to_str().expect("utf-8"),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(c.labels(), want_labels);
    let b = &c.body;
    assert_eq!(b.image.as_deref(), Some(BUSYBOX));
    assert_eq!(
        b.entrypoint,
        Some(vec!["sh".into(), "-c".into()]),
        "command"
    );
    assert_eq!(b.cmd, Some(vec!["sleep 1000".into()]), "args");
    assert_eq!(b.env, Some(vec!["A=1=2".into()]));
    assert_eq!(b.working_dir.as_deref(), Some("/work"));
    assert_eq!(
        (b.tty, b.open_stdin, b.attach_stdin),
        (Some(true), Some(true), Some(true))
    );
    let hc = b.host_config.clone().expect("host config");
    let in_sandbox = format!("container:{sandbox_id}");
    assert_eq!(hc.network_mode.as_deref(), Some(in_sandbox.as_str()));
    assert_eq!(hc.ipc_mode.as_deref(), Some(in_sandbox.as_str()));
    assert_eq!(hc.pid_mode, None, "its own PID namespace by default");
    let real = std::fs::canonicalize(&data).expect("canonical");
    assert_eq!(
        hc.binds,
        Some(vec![format!("{}:/data:ro,rslave", real.display())])
    );
    let dev = &hc.devices.as_ref().expect("devices")[0];
    assert_eq!(
        (
            dev.path_on_host.as_deref(),
            dev.path_in_container.as_deref(),
            dev.cgroup_permissions.as_deref()
        ),
        (Some("/dev/null"), Some("/dev/xnull"), Some("rwm"))
    );
    assert_eq!(
        (hc.cpu_shares, hc.cpu_quota, hc.cpu_period, hc.memory),
        (Some(512), Some(50_000), Some(100_000), Some(64 << 20))
    );
    assert_eq!(hc.oom_score_adj, Some(500));
    assert_eq!(hc.cpuset_cpus.as_deref(), Some("0"));
    assert_eq!(hc.cgroup_parent.as_deref(), Some("/kubepods/podweb"));
    assert_eq!(
        hc.security_opt,
        Some(vec!["seccomp=unconfined".to_string()])
    );
    assert_eq!(
        hc.restart_policy.and_then(|p| p.name),
        Some(RestartPolicyNameEnum::NO),
        "the kubelet restarts containers, Docker does not"
    );
    assert_eq!(
        b.healthcheck.as_ref().and_then(|h| h.test.clone()),
        Some(vec!["NONE".to_string()]),
        "an image's HEALTHCHECK is not run"
    );
}

#[tokio::test]
async fn the_security_context_becomes_user_capabilities_and_security_options() {
    let fx = Fixture::new().await;
    let sandbox = fx.sandbox_config("secure");
    let sandbox_id = fx.run_sandbox(sandbox.clone()).await;
    let mut config = fx.container_config("locked");
    config.linux = Some(cri::LinuxContainerConfig {
        security_context: Some(cri::LinuxContainerSecurityContext {
            run_as_user: Some(cri::Int64Value { value: 1000 }),
            run_as_group: Some(cri::Int64Value { value: 2000 }),
            supplemental_groups: vec![3000],
            readonly_rootfs: true,
            no_new_privs: true,
            capabilities: Some(cri::Capability {
                add_capabilities: vec!["NET_ADMIN".into()],
                drop_capabilities: vec!["all".into()],
                ..Default::default()
            }),
            selinux_options: Some(cri::SeLinuxOption {
                level: "s0:c1,c2".into(),
                ..Default::default()
            }),
            seccomp: Some(cri::SecurityProfile {
                profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
                ..Default::default()
            }),
            masked_paths: vec!["/proc/kcore".into()],
            readonly_paths: vec!["/proc/sys".into()],
            namespace_options: Some(cri::NamespaceOption {
                pid: cri::NamespaceMode::Pod as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = fx
        .create_container(&sandbox_id, &sandbox, config)
        .await
        .expect("CreateContainer");
    let b = fx.docker.container(&id).expect("created").body;
    assert_eq!(b.user.as_deref(), Some("1000:2000"));
    let hc = b.host_config.expect("host config");
    assert_eq!(hc.readonly_rootfs, Some(true));
    assert_eq!(hc.privileged, None);
    assert_eq!(hc.group_add, Some(vec!["3000".to_string()]));
    assert_eq!(hc.cap_add, Some(vec!["CAP_NET_ADMIN".to_string()]));
    assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]));
    let opts = hc.security_opt.expect("security options");
    assert!(opts.contains(&"no-new-privileges".to_string()), "{opts:?}");
    assert!(
        opts.contains(&"label=level:s0:c1,c2".to_string()),
        "{opts:?}"
    );
    assert!(
        !opts.iter().any(|o| o.starts_with("seccomp=")),
        "RuntimeDefault is Docker's own profile: {opts:?}"
    );
    assert_eq!(hc.masked_paths, Some(vec!["/proc/kcore".to_string()]));
    assert_eq!(hc.readonly_paths, Some(vec!["/proc/sys".to_string()]));
    assert_eq!(
        hc.pid_mode,
        Some(format!("container:{sandbox_id}")),
        "a pod-shared PID namespace is the sandbox's"
    );

    let mut privileged = fx.container_config("root");
    privileged.linux = Some(cri::LinuxContainerConfig {
        security_context: Some(cri::LinuxContainerSecurityContext {
            privileged: true,
            masked_paths: vec!["/proc/kcore".into()],
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = fx
        .create_container(&sandbox_id, &sandbox, privileged)
        .await
        .expect("CreateContainer");
    let hc = fx.docker.container(&id).expect("created").body.host_config;
    let hc = hc.expect("host config");
    assert_eq!(hc.privileged, Some(true));
    assert_eq!(
        hc.masked_paths, None,
        "a privileged container masks nothing"
    );
    assert_eq!(
        hc.security_opt,
        Some(vec!["seccomp=unconfined".to_string()])
    );

    let mut group_only = fx.container_config("grouponly");
    group_only.linux = Some(cri::LinuxContainerConfig {
        security_context: Some(cri::LinuxContainerSecurityContext {
            run_as_group: Some(cri::Int64Value { value: 5 }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let err = fx.create_container(&sandbox_id, &sandbox, group_only).await;
    assert_eq!(code_of(err), Code::InvalidArgument);
}

#[tokio::test]
async fn bad_create_container_requests_are_refused_before_docker_is_asked() {
    let fx = Fixture::new().await;
    let sandbox = fx.sandbox_config("p");
    let sandbox_id = fx.run_sandbox(sandbox.clone()).await;
    let creates = || fx.docker.calls_to("create").len();
    let before = creates();

    let mut escape = fx.container_config("esc");
    escape.log_path = "../../etc/evil.log".into();
    let err = fx
        .create_container(&sandbox_id, &sandbox, escape)
        .await
        .expect_err("log path outside the log directory");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("'..'"), "{}", err.message());

    let mut no_image = fx.container_config("noimg");
    no_image.image = None;
    let r = fx.create_container(&sandbox_id, &sandbox, no_image).await;
    assert_eq!(code_of(r), Code::InvalidArgument);

    let mut bad_name = fx.container_config("x");
    bad_name.metadata = Some(cri::ContainerMetadata {
        name: "a_b".into(),
        attempt: 0,
    });
    let r = fx.create_container(&sandbox_id, &sandbox, bad_name).await;
    assert_eq!(code_of(r), Code::InvalidArgument);

    let no_sandbox_config = fx
        .svc
        .create_container(Request::new(cri::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.clone(),
            config: Some(fx.container_config("c")),
            sandbox_config: None,
        }))
        .await;
    assert_eq!(code_of(no_sandbox_config), Code::InvalidArgument);
    assert_eq!(creates(), before, "nothing reached Docker");

    let r = fx
        .create_container("0123456789ab", &sandbox, fx.container_config("c"))
        .await;
    assert_eq!(code_of(r), Code::NotFound, "an unknown sandbox");

    let mut missing = fx.container_config("missing");
    missing.image = Some(cri::ImageSpec {
        image: "nosuch:1".into(),
        ..Default::default()
    });
    let r = fx.create_container(&sandbox_id, &sandbox, missing).await;
    assert_eq!(code_of(r), Code::NotFound, "Docker's No such image");
}

#[tokio::test]
async fn the_same_container_twice_is_already_exists_while_the_first_lives() {
    let fx = Fixture::new().await;
    let sandbox = fx.sandbox_config("p");
    let sandbox_id = fx.run_sandbox(sandbox.clone()).await;
    let first = fx
        .create_container(&sandbox_id, &sandbox, fx.container_config("c"))
        .await
        .expect("first");
    let again = fx
        .create_container(&sandbox_id, &sandbox, fx.container_config("c"))
        .await
        .expect_err("same name");
    assert_eq!(again.code(), Code::AlreadyExists);
    assert!(again.message().contains(&first), "{}", again.message());
}

/// Makes `id` exit and answers its ContainerStatus (which waits for its log copier).
async fn exit_and_status(fx: &Fixture, id: &str) -> cri::ContainerStatus {
    fx.docker.exit(id, 0, false);
    fx.engine_changed();
    fx.svc
        .container_status(Request::new(cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        }))
        .await
        .expect("status")
        .into_inner()
        .status
        .expect("status")
}

/// The CRI log at `path` as (stream, tag, content).
fn log_entries(path: &std::path::Path) -> Vec<(LogStream, bool, Vec<u8>)> {
    std::fs::read(path)
        .expect("log")
        .split_inclusive(|b| *b == b'\n')
        .map(|l| {
            let l = crate::crilog::parse_cri_log(l).expect("a CRI log line");
            (l.stream, l.partial, l.content)
        })
        .collect()
}

/// The CRI log at `path` as (stream, content).
fn log_lines(path: &std::path::Path) -> Vec<(LogStream, Vec<u8>)> {
    log_entries(path)
        .into_iter()
        .map(|(s, _, c)| (s, c))
        .collect()
}

/// A sandbox for pod `pod` and a created (not started) container `app` in it: (sandbox, container).
async fn created_app(fx: &Fixture, pod: &str) -> (String, String) {
    let sandbox = fx.sandbox_config(pod);
    let sandbox_id = fx.run_sandbox(sandbox.clone()).await;
    let id = fx
        .create_container(&sandbox_id, &sandbox, fx.container_config("app"))
        .await
        .expect("CreateContainer");
    (sandbox_id, id)
}

fn chunk(stream: LogStream, bytes: &'static [u8]) -> LogChunk {
    LogChunk {
        stream,
        bytes: Bytes::from_static(bytes),
    }
}

#[tokio::test]
async fn start_container_creates_the_log_file_and_copies_the_output_into_it() {
    let fx = Fixture::new().await;
    let (sandbox_id, id) = created_app(&fx, "logs").await;
    fx.docker.set_output(
        &id,
        vec![
            chunk(LogStream::Stdout, b"hello\n"),
            chunk(LogStream::Stderr, b"oops\n"),
        ],
    );
    let log = fx.dir.path().join("pods/logs/app/0.log");
    assert!(!log.exists());
    fx.start_container(&id).await.expect("StartContainer");
    assert!(log.is_file(), "the log file exists when the start answers");
    assert!(fx.docker.container(&id).expect("started").running());

    let st = exit_and_status(&fx, &id).await;
    assert_eq!(st.log_path, log.to_string_lossy());
    // ContainerStatus of an exited container waits for its log copier: the lines are there.
    let lines = log_lines(&log);
    assert_eq!(
        lines,
        vec![
            (LogStream::Stdout, b"hello".to_vec()),
            (LogStream::Stderr, b"oops".to_vec()),
        ]
    );

    assert_eq!(
        code_of(fx.start_container("0123456789ab").await),
        Code::NotFound
    );
    assert_eq!(
        code_of(fx.start_container(&sandbox_id).await),
        Code::NotFound,
        "a sandbox is not a container"
    );
}

#[tokio::test]
async fn output_the_follow_stream_missed_is_copied_from_a_plain_read_after_it() {
    // Docker 20.10's follow stream of a container that exited before it was opened can end
    // without the container's last unterminated output (here: the follow read leaves out the
    // last two chunks); a plain read afterwards has it.
    let fx = Fixture::new().await;
    let (_, id) = created_app(&fx, "missed").await;
    fx.docker.set_output(
        &id,
        vec![
            chunk(LogStream::Stdout, b"first\nsec"),
            chunk(LogStream::Stdout, b"ond-no-newline"),
            chunk(LogStream::Stderr, b"err-no-newline"),
        ],
    );
    fx.docker.set_follow_drops(&id, 2);
    fx.start_container(&id).await.expect("StartContainer");
    let st = exit_and_status(&fx, &id).await;
    assert_eq!(
        log_entries(std::path::Path::new(&st.log_path)),
        vec![
            (LogStream::Stdout, false, b"first".to_vec()),
            (LogStream::Stdout, true, b"second-no-newline".to_vec()),
            (LogStream::Stderr, true, b"err-no-newline".to_vec()),
        ],
        "each stream once, the missed bytes after what the follow stream gave"
    );
    assert_eq!(
        fx.docker.calls_to("logs"),
        vec![
            format!("logs {id} 0 follow=true"),
            format!("logs {id} 0 follow=false")
        ]
    );
}
#[tokio::test]
async fn stop_and_remove_container_pass_the_grace_period_and_are_idempotent() {
    let fx = Fixture::new().await;
    let (_, id) = fx.pod_with_container("p", "c").await;
    stop(&fx, &id, 30).await.expect("stop");
    assert_eq!(fx.docker.calls_to("stop"), vec![format!("stop {id} 30")]);
    assert!(!fx.docker.container(&id).expect("kept").running());
    stop(&fx, &id, -5).await.expect("stopping again");
    assert_eq!(
        fx.docker.calls_to("stop").last(),
        Some(&format!("stop {id} 0")),
        "a negative grace period is none"
    );
    stop(&fx, "0123456789ab", 10)
        .await
        .expect("stopping what never was");
    assert_eq!(code_of(stop(&fx, "", 10).await), Code::InvalidArgument);

    remove(&fx, &id[..12]).await.expect("remove by prefix");
    assert!(fx.docker.container(&id).is_none());
    let calls = fx.docker.calls().len();
    remove(&fx, &id).await.expect("removing again");
    assert_eq!(
        fx.docker.calls()[calls..],
        [format!("remove {id}")],
        "a whole id is removed in one Docker call"
    );
    assert_eq!(code_of(remove(&fx, "").await), Code::InvalidArgument);
}

#[tokio::test]
async fn exec_sync_returns_the_output_and_maps_timeouts_and_stopped_containers() {
    let fx = Fixture::new().await;
    let (_, id) = fx.pod_with_container("p", "c").await;
    let inspects = fx.docker.calls_to("inspect").len();
    let out = exec_sync(&fx, &id, &["echo", "hi"], 0).await.expect("exec");
    assert_eq!((out.stdout, out.exit_code), (b"echo hi\n".to_vec(), 0));
    assert_eq!(
        fx.docker.calls_to("inspect").len(),
        inspects,
        "a container dockershim made goes straight to Docker's exec"
    );
    assert_eq!(
        fx.docker.calls_to("exec"),
        vec![format!(
            "exec {id} echo hi timeout=None max={}",
            crate::container::MAX_EXEC_SYNC_OUTPUT
        )]
    );

    fx.docker.push_exec_result(Ok(ExecOutput {
        stdout: Vec::new(),
        stderr: b"no\n".to_vec(),
        exit_code: 3,
    }));
    let out = exec_sync(&fx, &id, &["false"], 5).await.expect("exec");
    assert_eq!((out.stderr, out.exit_code), (b"no\n".to_vec(), 3));
    assert!(
        fx.docker.calls_to("exec")[1].contains("timeout=Some(5s)"),
        "the timeout reaches Docker"
    );

    fx.docker
        .push_exec_result(Err(DockerError::Timeout(std::time::Duration::from_secs(1))));
    let r = exec_sync(&fx, &id, &["sleep", "9"], 1).await;
    assert_eq!(code_of(r), Code::DeadlineExceeded);
    assert_eq!(
        code_of(exec_sync(&fx, &id, &[], 1).await),
        Code::InvalidArgument
    );

    fx.docker.exit(&id, 0, false);
    let r = exec_sync(&fx, &id, &["true"], 0).await;
    assert_eq!(code_of(r), Code::FailedPrecondition, "Docker's 409");
    fx.shim.facts.clear();
    let r = exec_sync(&fx, &id, &["true"], 0).await;
    assert_eq!(
        code_of(r),
        Code::FailedPrecondition,
        "found not running by the inspect"
    );
    assert_eq!(
        code_of(exec_sync(&fx, "0123456789ab", &["true"], 0).await),
        Code::NotFound
    );
}

#[tokio::test]
async fn update_container_resources_sends_the_set_values_to_docker() {
    let fx = Fixture::new().await;
    let (_, id) = fx.pod_with_container("p", "c").await;
    fx.svc
        .update_container_resources(Request::new(cri::UpdateContainerResourcesRequest {
            container_id: id[..12].to_string(),
            linux: Some(cri::LinuxContainerResources {
                cpu_shares: 256,
                memory_limit_in_bytes: 32 << 20,
                cpuset_mems: "0".into(),
                ..Default::default()
            }),
            ..Default::default()
        }))
        .await
        .expect("update");
    assert_eq!(fx.docker.calls_to("update"), vec![format!("update {id}")]);
    let update = &fx.docker.container(&id).expect("c").updates[0];
    assert_eq!(update.cpu_shares, Some(256));
    assert_eq!(update.memory, Some(32 << 20));
    assert_eq!(update.cpuset_mems.as_deref(), Some("0"));
    assert_eq!(update.cpu_quota, None, "unset values are left alone");
    let r = fx
        .svc
        .update_container_resources(Request::new(cri::UpdateContainerResourcesRequest {
            container_id: "0123456789ab".into(),
            ..Default::default()
        }))
        .await;
    assert_eq!(code_of(r), Code::NotFound);
}

#[tokio::test]
async fn reopen_container_log_needs_a_running_container() {
    let fx = Fixture::new().await;
    let (_, id) = fx.pod_with_container("p", "c").await;
    fx.docker.exit(&id, 0, false);
    let r = fx
        .svc
        .reopen_container_log(Request::new(cri::ReopenContainerLogRequest {
            container_id: id.clone(),
        }))
        .await;
    assert_eq!(code_of(r), Code::FailedPrecondition);
}

/// CreateContainer and StartContainer of what this dockershim made ask Docker only to create
/// and to start (issue 14: each inspected the sandbox or the container first, which cri-dockerd
/// does not); the start still opens the log file the create's labels name. A dockershim that
/// learnt nothing of them (a restart) or an id prefix inspects first, as before; a removed
/// container is forgotten, and starting it again is Docker's NotFound.
#[tokio::test]
async fn create_and_start_ask_docker_nothing_more_of_what_dockershim_made() {
    let fx = Fixture::new().await;
    let sandbox = fx.sandbox_config("p");
    let sandbox_id = fx.run_sandbox(sandbox.clone()).await;
    let before = fx.docker.calls().len();
    let id = fx
        .create_container(&sandbox_id, &sandbox, fx.container_config("c"))
        .await
        .expect("CreateContainer");
    fx.start_container(&id).await.expect("StartContainer");
    let calls: Vec<String> = fx.docker.calls()[before..]
        .iter()
        .filter(|c| !c.starts_with("logs "))
        .cloned()
        .collect();
    assert_eq!(calls.len(), 2, "a create and a start only: {calls:?}");
    assert!(calls[0].starts_with("create ") && calls[1] == format!("start {id}"));
    let log = fx
        .dir
        .path()
        .join("pods")
        .join("p")
        .join(fx.container_config("c").log_path);
    assert!(log.exists(), "the log file the labels name: {log:?}");

    // What this dockershim did not make itself is inspected first.
    fx.shim.facts.clear();
    let second = fx
        .create_container(&sandbox_id, &sandbox, fx.container_config("d"))
        .await
        .expect("CreateContainer");
    assert!(
        fx.docker
            .calls_to("inspect")
            .contains(&format!("inspect {sandbox_id}")),
        "the sandbox inspected"
    );
    fx.shim.facts.clear();
    fx.start_container(&second[..12]).await.expect("by prefix");
    assert!(
        fx.docker
            .calls_to("inspect")
            .contains(&format!("inspect {}", &second[..12]))
    );

    remove(&fx, &id).await.expect("remove");
    assert_eq!(fx.shim.facts.get(&id), None, "forgotten with its container");
    assert_eq!(
        code_of(fx.start_container(&id).await),
        Code::NotFound,
        "Docker's own answer"
    );
}
