//! dockershim on real Docker, where critest v1.26.1 found it wanting: the CRI log file exists
//! (created, empty) as soon as StartContainer answers ("runtime should support reopening
//! container log", "HostNetwork is true/false" open it at once); a seccomp profile path without
//! `localhost/` is refused ("should not support a custom seccomp profile without using
//! localhost/ as a prefix"); and a timed-out ExecSync leaves nothing running ("runtime should
//! support execSync with timeout"), even when Docker starts the exec's process only after the
//! timeout (a busy host).

use crate::dockershim_support;

use std::time::{Duration, Instant};

use cri_proto::runtime::v1 as cri;
use dockershim_support::{docker, with_dockershim};
use integration::fixtures::busybox_container;

/// critest's profile denying sethostname.
const BLOCK_HOSTNAME_PROFILE: &str = r#"{
     "defaultAction": "SCMP_ACT_ALLOW",
     "syscalls": [
         {
             "names": ["sethostname"],
             "action": "SCMP_ACT_ERRNO"
         }
     ]
}"#;

/// Twelve containers started at once, half exiting at once (critest's HostNetwork case), half
/// logging forever (its reopen case): each one's log file exists the moment its StartContainer
/// answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_log_file_exists_when_start_returns() {
    with_dockershim(
        "dockershim_log_file_exists_when_start_returns",
        Duration::from_secs(180),
        |mut ctx| async move {
            let sconfig = ctx.sandbox_config("logfile");
            let sid = ctx.run_sandbox(&sconfig).await;
            let image = ctx.tb.busybox_image.clone();
            let mut created = Vec::new();
            for i in 0..12 {
                let script = if i % 2 == 0 {
                    "netstat -ln"
                } else {
                    "while true; do echo hello World; sleep 1; done"
                };
                let cconfig = busybox_container(&format!("c{i}"), &image, script);
                let id = ctx
                    .create(&sid, &sconfig, &cconfig)
                    .await
                    .expect("CreateContainer");
                let path = std::path::Path::new(&sconfig.log_directory).join(&cconfig.log_path);
                assert!(!path.exists(), "{} exists before the start", path.display());
                created.push((id, path));
            }
            let starts = created.into_iter().map(|(id, path)| {
                let mut rt = ctx.rt.clone();
                tokio::spawn(async move {
                    rt.start_container(cri::StartContainerRequest {
                        container_id: id.clone(),
                    })
                    .await
                    .expect("StartContainer");
                    // What critest does next: open the file.
                    let found = std::fs::File::open(&path).is_ok();
                    (path, found)
                })
            });
            let mut missing = Vec::new();
            for r in futures::future::join_all(starts).await {
                let (path, found) = r.expect("start task");
                if !found {
                    missing.push(path);
                }
            }
            assert!(
                missing.is_empty(),
                "log files missing when StartContainer answered: {missing:?}"
            );
        },
    )
    .await;
}

/// The deprecated `seccomp_profile_path` critest sends: a bare file path is refused by
/// CreateContainer and RunPodSandbox (InvalidArgument, naming the `localhost/` form); the same
/// file as `localhost/<path>` applies (sethostname denied despite SYS_ADMIN); a relative
/// localhost path is refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(deprecated)] // seccomp_profile_path: what critest v1.26.1 sends
async fn dockershim_seccomp_profile_path_needs_localhost_prefix() {
    with_dockershim(
        "dockershim_seccomp_profile_path_needs_localhost_prefix",
        Duration::from_secs(120),
        |mut ctx| async move {
            let dir = tempfile::Builder::new()
                .prefix("seccomp-tests")
                .tempdir()
                .expect("tempdir");
            let profile = dir.path().join("block-host-name.json");
            std::fs::write(&profile, BLOCK_HOSTNAME_PROFILE).expect("profile");
            let path = profile.display().to_string();

            let sconfig = ctx.sandbox_config("seccomp");
            let sid = ctx.run_sandbox(&sconfig).await;
            let image = ctx.tb.busybox_image.clone();
            let with_profile = |name: &str, p: &str| {
                let mut c = busybox_container(name, &image, "sleep 60");
                let sc = c
                    .linux
                    .get_or_insert_with(Default::default)
                    .security_context
                    .get_or_insert_with(Default::default);
                sc.seccomp_profile_path = p.to_string();
                sc.capabilities = Some(cri::Capability {
                    add_capabilities: vec!["SYS_ADMIN".into()],
                    ..Default::default()
                });
                c
            };

            let e = ctx
                .create(&sid, &sconfig, &with_profile("bare", &path))
                .await
                .expect_err("CreateContainer with a profile path without localhost/ succeeded");
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
            assert!(e.message().contains("localhost/"), "{e:?}");

            let e = ctx
                .create(
                    &sid,
                    &sconfig,
                    &with_profile("relative", "localhost/block-host-name.json"),
                )
                .await
                .expect_err("CreateContainer with a relative localhost profile succeeded");
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");

            let mut bad_sandbox = ctx.sandbox_config("seccomp-sb");
            bad_sandbox
                .linux
                .get_or_insert_with(Default::default)
                .security_context
                .get_or_insert_with(Default::default)
                .seccomp_profile_path = path.clone();
            let e = ctx
                .rt
                .run_pod_sandbox(cri::RunPodSandboxRequest {
                    config: Some(bad_sandbox),
                    runtime_handler: String::new(),
                })
                .await
                .expect_err("RunPodSandbox with a profile path without localhost/ succeeded");
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");

            let id = ctx
                .run_container(
                    &sid,
                    &sconfig,
                    &with_profile("local", &format!("localhost/{path}")),
                )
                .await;
            let r = ctx
                .sh(&id, "hostname cri-test", 30)
                .await
                .expect("ExecSync");
            assert_ne!(
                r.exit_code,
                0,
                "sethostname allowed under a profile denying it: {:?}",
                String::from_utf8_lossy(&r.stderr)
            );
            assert!(
                String::from_utf8_lossy(&r.stderr).contains("Operation not permitted"),
                "{:?}",
                String::from_utf8_lossy(&r.stderr)
            );
        },
    )
    .await;
}

/// critest's "execSync with timeout": `sleep 4321` with a 1 s timeout fails with
/// DeadlineExceeded (what the kubelet reads as a probe timeout), and right after it no `sleep`
/// runs in the container. Five times in a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_exec_sync_timeout_leaves_nothing_running() {
    with_dockershim(
        "dockershim_exec_sync_timeout_leaves_nothing_running",
        Duration::from_secs(180),
        |mut ctx| async move {
            let sconfig = ctx.sandbox_config("exectimeout");
            let sid = ctx.run_sandbox(&sconfig).await;
            let image = ctx.tb.busybox_image.clone();
            let id = ctx
                .run_container(
                    &sid,
                    &sconfig,
                    &busybox_container("top", &image, "exec top"),
                )
                .await;
            for round in 0..5 {
                timed_out_sleep(&mut ctx, &id, round).await;
                assert_no_sleep(&mut ctx, &id, round).await;
            }
        },
    )
    .await;
}

/// The same, with the exec's process started by Docker only after the timeout has passed (the
/// container's containerd shim is stopped for 2.5 s, as a busy host delays runc): Docker
/// reports the exec running with no pid yet when the timeout fires, and the process must still
/// be killed once it appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_exec_sync_timeout_kills_a_late_starting_process() {
    with_dockershim(
        "dockershim_exec_sync_timeout_kills_a_late_starting_process",
        Duration::from_secs(180),
        |mut ctx| async move {
            let sconfig = ctx.sandbox_config("execlate");
            let sid = ctx.run_sandbox(&sconfig).await;
            let image = ctx.tb.busybox_image.clone();
            let id = ctx
                .run_container(
                    &sid,
                    &sconfig,
                    &busybox_container("top", &image, "exec top"),
                )
                .await;
            let init = docker(&ctx.tb)
                .inspect_container(
                    &id,
                    None::<bollard::query_parameters::InspectContainerOptions>,
                )
                .await
                .expect("inspect")
                .state
                .and_then(|s| s.pid)
                .expect("pid") as libc::pid_t;
            let shim = parent_of(init);
            let comm = std::fs::read_to_string(format!("/proc/{shim}/comm")).unwrap_or_default();
            assert!(
                comm.starts_with("containerd-shim"),
                "parent of the container's init {init} is {shim} ({comm:?}), not its shim"
            );
            for round in 0..2 {
                let stopped = Stopped::new(shim);
                let mut rt = ctx.rt.clone();
                let cid = id.clone();
                let exec = tokio::spawn(async move {
                    let started = Instant::now();
                    let r = rt
                        .exec_sync(cri::ExecSyncRequest {
                            container_id: cid,
                            cmd: vec!["sleep".into(), "4321".into()],
                            timeout: 1,
                        })
                        .await;
                    (r, started.elapsed())
                });
                tokio::time::sleep(Duration::from_millis(2500)).await;
                drop(stopped);
                let (r, took) = exec.await.expect("exec task");
                let e = r.expect_err("ExecSync of `sleep 4321` with timeout 1 s succeeded");
                assert_eq!(
                    e.code(),
                    tonic::Code::DeadlineExceeded,
                    "round {round}: {e:?}"
                );
                assert!(
                    took < Duration::from_secs(20),
                    "round {round}: took {took:?}"
                );
                assert_no_sleep(&mut ctx, &id, round).await;
            }
        },
    )
    .await;
}

/// ExecSync `sleep 4321` with a 1 s timeout: it must fail with DeadlineExceeded, in time.
async fn timed_out_sleep(ctx: &mut dockershim_support::Ctx, id: &str, round: usize) {
    let started = Instant::now();
    let r = ctx
        .rt
        .exec_sync(cri::ExecSyncRequest {
            container_id: id.to_string(),
            cmd: vec!["sleep".into(), "4321".into()],
            timeout: 1,
        })
        .await;
    let e = r.expect_err("ExecSync of `sleep 4321` with timeout 1 s succeeded");
    assert_eq!(
        e.code(),
        tonic::Code::DeadlineExceeded,
        "round {round}: {e:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "round {round}: the timeout took {:?}",
        started.elapsed()
    );
}

/// critest's check right after the timeout (`pgrep sleep || true`; this busybox has `pidof`).
async fn assert_no_sleep(ctx: &mut dockershim_support::Ctx, id: &str, round: usize) {
    let r = ctx
        .sh(id, "pidof sleep || true", 30)
        .await
        .expect("ExecSync");
    assert_eq!(
        (
            String::from_utf8_lossy(&r.stdout).trim(),
            String::from_utf8_lossy(&r.stderr).trim()
        ),
        ("", ""),
        "round {round}: a timed-out exec's sleep still runs"
    );
}

/// The parent pid of `pid`, from /proc/PID/stat.
fn parent_of(pid: libc::pid_t) -> libc::pid_t {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // pid (comm) state ppid ...: comm may hold spaces, so split after its closing paren.
    let rest = &stat[stat.rfind(')').expect("comm") + 1..];
    rest.split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("ppid")
}

/// A process stopped (SIGSTOP) until this is dropped (SIGCONT), whatever happens in between.
struct Stopped(libc::pid_t);

impl Stopped {
    fn new(pid: libc::pid_t) -> Stopped {
        // SAFETY: kill(2) on the container's shim, resumed on drop.
        assert_eq!(
            unsafe { libc::kill(pid, libc::SIGSTOP) },
            0,
            "SIGSTOP {pid}"
        );
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe {
            libc::kill(self.0, libc::SIGCONT);
        }
    }
}
