//! dockershim on real Docker: what containers do — exit codes and reasons, OOM kills, ExecSync
//! output and timeouts, env / working dir / command and args, read-only rootfs, user and group,
//! mounts, labels and annotations, UpdateContainerResources.

use crate::dockershim_support;

use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use dockershim_support::with_dockershim;
use integration::fixtures::busybox_container;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_exit_codes_and_reasons() {
    with_dockershim(
        "dockershim_exit_codes",
        Duration::from_secs(120),
        |mut ctx| async move {
            let sconfig = ctx.sandbox_config("exit");
            let sid = ctx.run_sandbox(&sconfig).await;
            let image = ctx.tb.busybox_image.clone();
            let failing = ctx
                .run_container(
                    &sid,
                    &sconfig,
                    &busybox_container("fails", &image, "exit 3"),
                )
                .await;
            let ok = ctx
                .run_container(&sid, &sconfig, &busybox_container("ok", &image, "exit 0"))
                .await;
            let st = ctx.wait_exited(&failing).await;
            assert_eq!(st.exit_code, 3, "{st:?}");
            assert_eq!(st.reason, "Error", "{st:?}");
            // Both set (Docker may record an instant exit's FinishedAt a hair before StartedAt
            // under load, so their order is not asserted).
            assert!(st.finished_at > 0 && st.started_at > 0, "{st:?}");
            let st = ctx.wait_exited(&ok).await;
            assert_eq!(st.exit_code, 0, "{st:?}");
            assert_eq!(st.reason, "Completed", "{st:?}");
            ctx.stop_remove_sandbox(&sid).await;
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_oom_killed() {
    with_dockershim(
        "dockershim_oom_killed",
        Duration::from_secs(180),
        |mut ctx| async move {
            let sconfig = ctx.sandbox_config("oom");
            let sid = ctx.run_sandbox(&sconfig).await;
            let mut c = busybox_container(
                "oom",
                &ctx.tb.busybox_image,
                // The shell itself (PID 1) grows past the limit: the container is killed. A
                // second first: the runtime watches the container's OOM events only once it has
                // started it, and a kill before that (a busy host) is an exit without the OOM.
                "sleep 1; x=$(head -c 200m /dev/zero | tr '\\0' a); echo survived ${#x}",
            );
            c.linux = Some(cri::LinuxContainerConfig {
                resources: Some(cri::LinuxContainerResources {
                    memory_limit_in_bytes: 8 << 20,
                    memory_swap_limit_in_bytes: 8 << 20,
                    ..Default::default()
                }),
                ..Default::default()
            });
            let cid = ctx.run_container(&sid, &sconfig, &c).await;
            let mut st = ctx.wait_exited(&cid).await;
            // Docker learns of the OOM kill from a containerd event that may arrive just after
            // the exit event; its OOMKilled flag (what the reason comes from) follows shortly.
            for _ in 0..50 {
                if st.reason == "OOMKilled" {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                st = ctx.status(&cid).await;
            }
            assert_eq!(st.reason, "OOMKilled", "{st:?}");
            assert_ne!(st.exit_code, 0, "{st:?}");
            ctx.stop_remove_sandbox(&sid).await;
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_exec_sync_output_and_timeout() {
    with_dockershim(
        "dockershim_exec_sync",
        Duration::from_secs(120),
        |mut ctx| async move {
            let sconfig = ctx.sandbox_config("exec");
            let sid = ctx.run_sandbox(&sconfig).await;
            let cid = ctx
                .run_container(
                    &sid,
                    &sconfig,
                    &busybox_container(
                        "exec",
                        &ctx.tb.busybox_image.clone(),
                        "exec tail -f /dev/null",
                    ),
                )
                .await;
            let r = ctx
                .sh(&cid, "echo -n out; echo -n err >&2; exit 5", 10)
                .await
                .expect("ExecSync");
            assert_eq!(r.stdout, b"out");
            assert_eq!(r.stderr, b"err");
            assert_eq!(r.exit_code, 5);
            // Large output arrives whole.
            let big = ctx
                .sh_ok(&cid, "head -c 300000 /dev/zero | tr '\\0' x")
                .await;
            assert_eq!(big.len(), 300000);

            // A direct command and one under a shell, both timing out.
            for (cmd, marker) in [
                (vec!["sleep".to_string(), "31".to_string()], "sleep 31"),
                (
                    vec!["sh".into(), "-c".into(), "sleep 32; echo never".into()],
                    "sleep 32",
                ),
            ] {
                let e = ctx
                    .rt
                    .exec_sync(cri::ExecSyncRequest {
                        container_id: cid.clone(),
                        cmd,
                        timeout: 1,
                    })
                    .await
                    .expect_err("ExecSync past its timeout");
                assert_eq!(e.code(), tonic::Code::DeadlineExceeded, "{e:?}");
                let mut ps = String::new();
                for _ in 0..100 {
                    ps = ctx.sh_ok(&cid, "ps -o pid,args").await;
                    if !ps.contains(marker) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                assert!(!ps.contains(marker), "{marker:?} still running:\n{ps}");
            }
            ctx.stop_remove_sandbox(&sid).await;
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_container_config_semantics() {
    with_dockershim(
        "dockershim_container_config",
        Duration::from_secs(180),
        |mut ctx| async move {
            let sconfig = ctx.sandbox_config("cfg");
            let sid = ctx.run_sandbox(&sconfig).await;
            let image = ctx.tb.busybox_image.clone();

            // env and working dir.
            let mut c = busybox_container("env", &image, "exec tail -f /dev/null");
            c.envs = vec![
                cri::KeyValue {
                    key: "GREETING".into(),
                    value: "hello world".into(),
                },
                cri::KeyValue {
                    key: "EMPTY".into(),
                    value: String::new(),
                },
            ];
            c.working_dir = "/tmp/work".into();
            let env_id = ctx.run_container(&sid, &sconfig, &c).await;
            assert_eq!(
                ctx.sh_ok(&env_id, "echo \"$GREETING\"").await,
                "hello world\n"
            );
            assert_eq!(ctx.sh_ok(&env_id, "env | grep -c '^EMPTY=$'").await, "1\n");
            assert_eq!(ctx.sh_ok(&env_id, "pwd").await, "/tmp/work\n");

            // command overrides the entrypoint, args are its arguments; args alone replace the
            // image's Cmd.
            let mut cmd_args = busybox_container("cmdargs", &image, "");
            cmd_args.command = vec!["echo".into(), "from-command".into()];
            cmd_args.args = vec!["and-args".into()];
            let mut args_only = busybox_container("argsonly", &image, "");
            args_only.command = vec![];
            args_only.args = vec!["sh".into(), "-c".into(), "echo args-only $0".into()];
            let mut cmd_only = busybox_container("cmdonly", &image, "");
            cmd_only.command = vec!["echo".into(), "command-only".into()];
            cmd_only.args = vec![];
            for (cfg, want) in [
                (&cmd_args, "from-command and-args"),
                (&args_only, "args-only sh"),
                (&cmd_only, "command-only"),
            ] {
                let id = ctx.run_container(&sid, &sconfig, cfg).await;
                let st = ctx.wait_exited(&id).await;
                assert_eq!(st.exit_code, 0, "{st:?}");
                let log = ctx
                    .wait_file(&st.log_path, |c| c.contains(" stdout F "))
                    .await;
                let line = log.lines().next().unwrap_or_default();
                assert!(
                    line.ends_with(&format!(" stdout F {want}")),
                    "{want:?} vs log {log:?}"
                );
            }

            // read-only rootfs, user and group.
            let mut ro = busybox_container("ro", &image, "exec tail -f /dev/null");
            ro.linux = Some(cri::LinuxContainerConfig {
                security_context: Some(cri::LinuxContainerSecurityContext {
                    readonly_rootfs: true,
                    run_as_user: Some(cri::Int64Value { value: 1234 }),
                    run_as_group: Some(cri::Int64Value { value: 5678 }),
                    ..Default::default()
                }),
                ..Default::default()
            });
            let ro_id = ctx.run_container(&sid, &sconfig, &ro).await;
            let r = ctx
                .sh(&ro_id, "touch /rootfs-write-test", 10)
                .await
                .expect("ExecSync");
            assert_ne!(r.exit_code, 0, "write to a read-only rootfs succeeded");
            assert!(
                String::from_utf8_lossy(&r.stderr).contains("Read-only file system"),
                "{:?}",
                String::from_utf8_lossy(&r.stderr)
            );
            assert_eq!(ctx.sh_ok(&ro_id, "id -u; id -g").await, "1234\n5678\n");

            // mounts: read-only, read-write, and a host path that is a symlink.
            let host = tempfile::tempdir().expect("tempdir");
            let ro_dir = host.path().join("ro");
            let rw_dir = host.path().join("rw");
            let target = host.path().join("target");
            for d in [&ro_dir, &rw_dir, &target] {
                std::fs::create_dir(d).unwrap();
            }
            std::fs::write(ro_dir.join("f"), "read-only content").unwrap();
            std::fs::write(target.join("f"), "through the link").unwrap();
            let link = host.path().join("link");
            std::os::unix::fs::symlink(&target, &link).unwrap();
            let mut m = busybox_container("mounts", &image, "exec tail -f /dev/null");
            m.mounts = vec![
                cri::Mount {
                    container_path: "/ro".into(),
                    host_path: ro_dir.to_string_lossy().into_owned(),
                    readonly: true,
                    ..Default::default()
                },
                cri::Mount {
                    container_path: "/rw".into(),
                    host_path: rw_dir.to_string_lossy().into_owned(),
                    ..Default::default()
                },
                cri::Mount {
                    container_path: "/linked".into(),
                    host_path: link.to_string_lossy().into_owned(),
                    ..Default::default()
                },
            ];
            let m_id = ctx.run_container(&sid, &sconfig, &m).await;
            assert_eq!(ctx.sh_ok(&m_id, "cat /ro/f").await, "read-only content");
            let r = ctx
                .sh(&m_id, "echo x > /ro/new", 10)
                .await
                .expect("ExecSync");
            assert_ne!(r.exit_code, 0, "write to a read-only mount succeeded");
            ctx.sh_ok(&m_id, "echo written > /rw/new").await;
            assert_eq!(
                std::fs::read_to_string(rw_dir.join("new")).unwrap(),
                "written\n"
            );
            assert_eq!(ctx.sh_ok(&m_id, "cat /linked/f").await, "through the link");
            let st = ctx.status(&m_id).await;
            let ro_mount = st
                .mounts
                .iter()
                .find(|x| x.container_path == "/ro")
                .unwrap_or_else(|| panic!("/ro missing: {:?}", st.mounts));
            assert!(ro_mount.readonly, "{ro_mount:?}");
            let rw_mount = st
                .mounts
                .iter()
                .find(|x| x.container_path == "/rw")
                .unwrap_or_else(|| panic!("/rw missing: {:?}", st.mounts));
            assert!(!rw_mount.readonly, "{rw_mount:?}");

            // labels and annotations with awkward keys and values round-trip.
            let mut l = busybox_container("labels", &image, "exec tail -f /dev/null");
            l.labels
                .insert("app.kubernetes.io/name".into(), "x=y,z".into());
            l.annotations.insert(
                "kubernetes.io/config.hash".into(),
                "{\"json\": [1, 2]}".into(),
            );
            l.annotations.insert("empty".into(), String::new());
            let l_id = ctx.run_container(&sid, &sconfig, &l).await;
            let st = ctx.status(&l_id).await;
            assert_eq!(st.labels, l.labels);
            assert_eq!(st.annotations, l.annotations);
            let listed = ctx
                .rt
                .list_containers(cri::ListContainersRequest {
                    filter: Some(cri::ContainerFilter {
                        id: l_id.clone(),
                        ..Default::default()
                    }),
                })
                .await
                .expect("ListContainers")
                .into_inner()
                .containers;
            assert_eq!(listed.len(), 1, "{listed:?}");
            assert_eq!(listed[0].labels, l.labels);
            assert_eq!(listed[0].annotations, l.annotations);

            ctx.stop_remove_sandbox(&sid).await;
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_update_container_resources() {
    with_dockershim("dockershim_update_resources", Duration::from_secs(120), |mut ctx| async move {
        let sconfig = ctx.sandbox_config("upd");
        let sid = ctx.run_sandbox(&sconfig).await;
        let mut c = busybox_container("upd", &ctx.tb.busybox_image, "exec tail -f /dev/null");
        c.linux = Some(cri::LinuxContainerConfig {
            resources: Some(cri::LinuxContainerResources {
                cpu_shares: 512,
                memory_limit_in_bytes: 64 << 20,
                ..Default::default()
            }),
            ..Default::default()
        });
        let cid = ctx.run_container(&sid, &sconfig, &c).await;
        let before = ctx.status(&cid).await.resources.and_then(|r| r.linux);
        let before = before.expect("resources");
        assert_eq!(before.cpu_shares, 512);
        assert_eq!(before.memory_limit_in_bytes, 64 << 20);
        ctx.rt
            .update_container_resources(cri::UpdateContainerResourcesRequest {
                container_id: cid.clone(),
                linux: Some(cri::LinuxContainerResources {
                    cpu_shares: 256,
                    cpu_period: 100_000,
                    cpu_quota: 50_000,
                    memory_limit_in_bytes: 128 << 20,
                    memory_swap_limit_in_bytes: 256 << 20,
                    cpuset_cpus: "0".into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .expect("UpdateContainerResources");
        let after = ctx
            .status(&cid)
            .await
            .resources
            .and_then(|r| r.linux)
            .expect("resources");
        assert_eq!(after.cpu_shares, 256, "{after:?}");
        assert_eq!(after.cpu_period, 100_000, "{after:?}");
        assert_eq!(after.cpu_quota, 50_000, "{after:?}");
        assert_eq!(after.memory_limit_in_bytes, 128 << 20, "{after:?}");
        assert_eq!(after.memory_swap_limit_in_bytes, 256 << 20, "{after:?}");
        assert_eq!(after.cpuset_cpus, "0", "{after:?}");
        // The cgroup itself follows (cgroup v1 memory controller).
        let limit = ctx
            .sh_ok(
                &cid,
                "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max",
            )
            .await;
        assert_eq!(limit.trim(), (128u64 << 20).to_string());
        ctx.stop_remove_sandbox(&sid).await;
    })
    .await;
}

/// What Docker is told beyond the CRI config, as cri-dockerd tells it: an image's HEALTHCHECK
/// is not run (the kubelet probes; Docker's checks would exec into the container for nothing),
/// and the pause container has the least CPU weight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_runs_no_image_healthcheck_and_weighs_the_pause_least() {
    use bollard::query_parameters::{InspectContainerOptions, RemoveImageOptions};
    with_dockershim(
        "dockershim_healthcheck",
        Duration::from_secs(120),
        |mut ctx| async move {
            let d = dockershim_support::docker(&ctx.tb);
            // busybox with a HEALTHCHECK that runs every second.
            let repo = format!(
                "cri-e2e/{}",
                integration::fixtures::unique_name("healthcheck")
            );
            let healthcheck = bollard::models::ContainerConfig {
                healthcheck: Some(bollard::models::HealthConfig {
                    test: Some(vec!["CMD".into(), "true".into()]),
                    interval: Some(1_000_000_000),
                    ..Default::default()
                }),
                ..Default::default()
            };
            dockershim_support::commit_busybox(&ctx.tb, &repo, "1", None, healthcheck).await;
            let image = format!("{repo}:1");

            let sconfig = ctx.sandbox_config("health");
            let sid = ctx.run_sandbox(&sconfig).await;
            let c = busybox_container("app", &image, "exec tail -f /dev/null");
            let id = ctx.run_container(&sid, &sconfig, &c).await;
            // Three of the image's intervals.
            tokio::time::sleep(Duration::from_secs(3)).await;
            let app = d
                .inspect_container(&id, None::<InspectContainerOptions>)
                .await
                .expect("inspect the container");
            let test = app
                .config
                .as_ref()
                .and_then(|c| c.healthcheck.as_ref())
                .and_then(|h| h.test.clone());
            let health = app.state.as_ref().and_then(|s| s.health.clone());
            let pause = d
                .inspect_container(&sid, None::<InspectContainerOptions>)
                .await
                .expect("inspect the pause container");

            ctx.stop_remove_sandbox(&sid).await;
            d.remove_image(&image, None::<RemoveImageOptions>, None)
                .await
                .expect("remove the test image");
            assert_eq!(test, Some(vec!["NONE".to_string()]));
            assert!(
                health.is_none(),
                "Docker ran the image's health check: {health:?}"
            );
            assert_eq!(pause.host_config.and_then(|h| h.cpu_shares), Some(2));
        },
    )
    .await;
}
