//! `[container]` lifecycle cases: create / start / stop / remove with status at each step,
//! ListContainers filters, exit codes and reasons, ExecSync (output, exit code, timeout), command,
//! args, env and working dir, a pod's containers sharing its network, one container for one
//! metadata, OOMKilled, and UpdateContainerResources.

use std::collections::HashMap;
use std::time::Duration;

use cri_proto::runtime::v1 as cri;

use super::common::{container, cstatus, exec, exec_out, in_sandbox, labels, wait_exited};
use crate::conformance::{CaseError, CaseResult, Ctx};
use crate::fixtures::busybox_container;
use crate::{ensure, ensure_eq};

pub(super) async fn container_lifecycle(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-ctr",
        |_| {},
        |mut ctx, id, cfg| async move {
            let c = container(&mut ctx, &id, &cfg, "life", "sleep 3600", |_| {}, false).await?;
            let st = cstatus(&mut ctx, &c).await?;
            ensure_eq!(
                st.state,
                cri::ContainerState::ContainerCreated as i32,
                "state after create"
            );
            ensure_eq!(
                st.metadata.as_ref().map(|m| m.name.as_str()),
                Some("life"),
                "metadata name"
            );
            ensure_eq!(st.labels, labels(&[("container", "life")]), "labels");
            ensure_eq!(
                st.annotations,
                labels(&[("cri-it/c", "c value")]),
                "annotations"
            );
            ctx.runtime
                .start_container(cri::StartContainerRequest {
                    container_id: c.clone(),
                })
                .await?;
            let st = cstatus(&mut ctx, &c).await?;
            ensure_eq!(
                st.state,
                cri::ContainerState::ContainerRunning as i32,
                "state after start"
            );
            ensure!(st.started_at > 0, "started_at is 0");
            ctx.runtime
                .stop_container(cri::StopContainerRequest {
                    container_id: c.clone(),
                    timeout: 0,
                })
                .await?;
            let st = cstatus(&mut ctx, &c).await?;
            ensure_eq!(
                st.state,
                cri::ContainerState::ContainerExited as i32,
                "state after stop"
            );
            ensure!(
                st.finished_at >= st.started_at,
                "finished_at before started_at"
            );
            ctx.runtime
                .remove_container(cri::RemoveContainerRequest {
                    container_id: c.clone(),
                })
                .await?;
            let gone = ctx
                .runtime
                .container_status(cri::ContainerStatusRequest {
                    container_id: c.clone(),
                    verbose: false,
                })
                .await;
            ensure!(
                gone.as_ref().err().map(|s| s.code()) == Some(tonic::Code::NotFound),
                "status after remove: {gone:?}"
            );
            Ok(())
        },
    )
    .await
}

async fn list_containers(
    ctx: &mut Ctx,
    filter: cri::ContainerFilter,
) -> Result<Vec<cri::Container>, CaseError> {
    Ok(ctx
        .runtime
        .list_containers(cri::ListContainersRequest {
            filter: Some(filter),
        })
        .await?
        .into_inner()
        .containers)
}

pub(super) async fn container_list_filters(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-clist",
        |_| {},
        |mut ctx, id, cfg| async move {
            let running =
                container(&mut ctx, &id, &cfg, "running", "sleep 3600", |_| {}, true).await?;
            let created =
                container(&mut ctx, &id, &cfg, "created", "sleep 3600", |_| {}, false).await?;
            let in_pod = list_containers(
                &mut ctx,
                cri::ContainerFilter {
                    pod_sandbox_id: id.clone(),
                    ..Default::default()
                },
            )
            .await?;
            let mut ids: Vec<_> = in_pod.iter().map(|c| c.id.clone()).collect();
            ids.sort();
            let mut want = vec![running.clone(), created.clone()];
            want.sort();
            ensure_eq!(ids, want, "containers of the sandbox");
            let by_id = list_containers(
                &mut ctx,
                cri::ContainerFilter {
                    id: running.clone(),
                    ..Default::default()
                },
            )
            .await?;
            ensure!(
                by_id.len() == 1 && by_id[0].id == running,
                "by id: {by_id:?}"
            );
            ensure_eq!(by_id[0].pod_sandbox_id, id, "pod_sandbox_id");
            let by_state = list_containers(
                &mut ctx,
                cri::ContainerFilter {
                    pod_sandbox_id: id.clone(),
                    state: Some(cri::ContainerStateValue {
                        state: cri::ContainerState::ContainerCreated as i32,
                    }),
                    ..Default::default()
                },
            )
            .await?;
            ensure!(
                by_state.len() == 1 && by_state[0].id == created,
                "by state CREATED: {by_state:?}"
            );
            let by_label = list_containers(
                &mut ctx,
                cri::ContainerFilter {
                    pod_sandbox_id: id.clone(),
                    label_selector: labels(&[("container", "running")]),
                    ..Default::default()
                },
            )
            .await?;
            ensure!(
                by_label.len() == 1 && by_label[0].id == running,
                "by label: {by_label:?}"
            );
            Ok(())
        },
    )
    .await
}

pub(super) async fn container_exit_codes(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-exit",
        |_| {},
        |mut ctx, id, cfg| async move {
            let bad = container(&mut ctx, &id, &cfg, "bad", "exit 3", |_| {}, true).await?;
            let good = container(&mut ctx, &id, &cfg, "good", "exit 0", |_| {}, true).await?;
            let st = wait_exited(&mut ctx, &bad).await?;
            ensure_eq!(st.exit_code, 3, "exit code of `exit 3`");
            ensure_eq!(st.reason.as_str(), "Error", "reason of `exit 3`");
            let st = wait_exited(&mut ctx, &good).await?;
            ensure_eq!(st.exit_code, 0, "exit code of `exit 0`");
            ensure_eq!(st.reason.as_str(), "Completed", "reason of `exit 0`");
            Ok(())
        },
    )
    .await
}

pub(super) async fn container_exec_sync(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-exec",
        |_| {},
        |mut ctx, id, cfg| async move {
            let c = container(&mut ctx, &id, &cfg, "x", "sleep 3600", |_| {}, true).await?;
            let r = exec(&mut ctx, &c, "echo out; echo err >&2; exit 7").await?;
            ensure_eq!(
                String::from_utf8_lossy(&r.stdout).to_string(),
                "out\n".to_string(),
                "stdout"
            );
            ensure_eq!(
                String::from_utf8_lossy(&r.stderr).to_string(),
                "err\n".to_string(),
                "stderr"
            );
            ensure_eq!(r.exit_code, 7, "exit code");
            Ok(())
        },
    )
    .await
}

/// critest's "execSync with timeout": in a container running `top`, ExecSync `sleep 4321` with
/// a 1 s timeout fails, in time, and right after it no `sleep` runs in the container (the
/// runtime killed it). Three rounds.
pub(super) async fn container_exec_timeout(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-exect",
        |_| {},
        |mut ctx, id, cfg| async move {
            let c = container(&mut ctx, &id, &cfg, "x", "exec top", |_| {}, true).await?;
            for round in 0..3 {
                let started = std::time::Instant::now();
                let r = ctx
                    .runtime
                    .exec_sync(cri::ExecSyncRequest {
                        container_id: c.clone(),
                        cmd: vec!["sleep".into(), "4321".into()],
                        timeout: 1,
                    })
                    .await;
                ensure!(
                    r.is_err(),
                    "ExecSync of `sleep 4321` with timeout 1 s returned {r:?}"
                );
                ensure!(
                    started.elapsed() < Duration::from_secs(30),
                    "ExecSync timeout was not honoured (took {:?})",
                    started.elapsed()
                );
                // critest runs `pgrep sleep || true`; this busybox has pidof.
                let left = exec(&mut ctx, &c, "pidof sleep || true").await?;
                ensure_eq!(
                    String::from_utf8_lossy(&left.stdout).trim().to_string(),
                    String::new(),
                    format!("round {round}: pids of `sleep` after the timed-out exec")
                );
            }
            Ok(())
        },
    )
    .await
}

pub(super) async fn container_command_env(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-cmd",
        |_| {},
        |mut ctx, id, cfg| async move {
            let tweak = |c: &mut cri::ContainerConfig| {
                c.command = vec!["sh".into(), "-c".into()];
                c.args = vec!["echo \"$GREETING from $(pwd)\"; sleep 3600".into()];
                c.envs = vec![cri::KeyValue {
                    key: "GREETING".into(),
                    value: "hi there".into(),
                }];
                c.working_dir = "/tmp".into();
            };
            let c = container(&mut ctx, &id, &cfg, "cmd", "", tweak, true).await?;
            let st = cstatus(&mut ctx, &c).await?;
            let mut text = String::new();
            for _ in 0..100 {
                text = std::fs::read_to_string(&st.log_path).unwrap_or_default();
                if !text.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            ensure!(text.contains("hi there from /tmp"), "output {text:?}");
            let env = exec_out(&mut ctx, &c, "echo $GREETING").await?;
            ensure_eq!(env, "hi there".to_string(), "env seen by exec");
            Ok(())
        },
    )
    .await
}

pub(super) async fn container_shared_network(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-share",
        |_| {},
        |mut ctx, id, cfg| async move {
            let server = container(
                &mut ctx,
                &id,
                &cfg,
                "server",
                "echo to-server-log; mkdir -p /www && echo shared > /www/index.html && httpd -f -p 8080 -h /www",
                |_| {},
                true,
            )
            .await?;
            let client = container(
                &mut ctx,
                &id,
                &cfg,
                "client",
                "echo to-client-log; sleep 3600",
                |_| {},
                true,
            )
            .await?;
            let mut body = String::new();
            for _ in 0..50 {
                let r = exec(&mut ctx, &client, "wget -q -O - http://127.0.0.1:8080/").await?;
                body = String::from_utf8_lossy(&r.stdout).trim().to_string();
                if r.exit_code == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            ensure_eq!(
                body,
                "shared".to_string(),
                "response over the pod's loopback"
            );
            // Exec reaches each container; each has its own log at its own path.
            ensure_eq!(exec_out(&mut ctx, &server, "echo in-server").await?, "in-server".to_string(), "exec in the server");
            ensure_eq!(exec_out(&mut ctx, &client, "echo in-client").await?, "in-client".to_string(), "exec in the client");
            for (c, own, other) in [
                (&server, "to-server-log", "to-client-log"),
                (&client, "to-client-log", "to-server-log"),
            ] {
                let path = cstatus(&mut ctx, c).await?.log_path;
                let mut log = String::new();
                for _ in 0..50 {
                    log = std::fs::read_to_string(&path).unwrap_or_default();
                    if log.contains(own) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                ensure!(log.contains(own), "{path} lacks {own}: {log:?}");
                ensure!(
                    !log.contains(other),
                    "{path} has the other container's {other}"
                );
            }
            Ok(())
        },
    )
    .await
}

/// The same for containers: a second CreateContainer with the same metadata in the same sandbox
/// fails while the first container exists (created or running).
pub(super) async fn container_same_metadata_twice(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-ctwice",
        |_| {},
        |mut ctx, id, cfg| async move {
            let first = container(&mut ctx, &id, &cfg, "twice", "sleep 3600", |_| {}, false).await?;
            let image = ctx.settings.busybox_image.clone();
            let req = cri::CreateContainerRequest {
                pod_sandbox_id: id.clone(),
                config: Some(busybox_container("twice", &image, "sleep 3600")),
                sandbox_config: Some(cfg.clone()),
            };
            let created_again = ctx.runtime.create_container(req.clone()).await;
            ctx.runtime
                .start_container(cri::StartContainerRequest {
                    container_id: first.clone(),
                })
                .await?;
            let running_again = ctx.runtime.create_container(req).await;
            for (what, r) in [("created", created_again), ("running", running_again)] {
                match r {
                    Ok(r) => {
                        return Err(CaseError::Fail(format!(
                            "CreateContainer twice ({what} first container) succeeded: {first} and {}",
                            r.into_inner().container_id
                        )));
                    }
                    Err(s)
                        if matches!(
                            s.code(),
                            tonic::Code::Unimplemented | tonic::Code::Unavailable
                        ) =>
                    {
                        return Err(CaseError::from(s));
                    }
                    Err(_) => {}
                }
            }
            let listed = ctx
                .runtime
                .list_containers(cri::ListContainersRequest {
                    filter: Some(cri::ContainerFilter {
                        pod_sandbox_id: id.clone(),
                        ..Default::default()
                    }),
                })
                .await?
                .into_inner()
                .containers;
            ensure!(
                listed.len() == 1 && listed[0].id == first,
                "one container for one metadata: {listed:?}"
            );
            ensure_eq!(
                listed[0].state,
                cri::ContainerState::ContainerRunning as i32,
                "state of the first container"
            );
            Ok(())
        },
    )
    .await
}

fn memory_limit(bytes: i64) -> impl FnOnce(&mut cri::ContainerConfig) {
    move |c: &mut cri::ContainerConfig| {
        let linux = c.linux.get_or_insert_with(Default::default);
        linux
            .resources
            .get_or_insert_with(Default::default)
            .memory_limit_in_bytes = bytes;
    }
}

pub(super) async fn container_oom_killed(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-oom",
        |_| {},
        |mut ctx, id, cfg| async move {
            let c = container(
                &mut ctx,
                &id,
                &cfg,
                "oom",
                // A second first: a runtime watches the container's OOM events only once it has
                // started it, and a kill before that (a busy host) is an exit without the OOM.
                "sleep 1; x=$(head -c 200m /dev/zero | tr '\\0' a); echo survived ${#x}",
                memory_limit(32 << 20),
                true,
            )
            .await?;
            let mut st = wait_exited(&mut ctx, &c).await?;
            // The OOM event may be recorded a moment after the exit (Docker): let it settle.
            for _ in 0..50 {
                if st.reason == "OOMKilled" {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                st = cstatus(&mut ctx, &c).await?;
            }
            ensure_eq!(
                st.reason.as_str(),
                "OOMKilled",
                format!("reason (exit code {})", st.exit_code)
            );
            Ok(())
        },
    )
    .await
}

pub(super) async fn container_update_resources(ctx: Ctx) -> CaseResult {
    in_sandbox(&ctx, "cf-upd", |_| {}, |mut ctx, id, cfg| async move {
        let c = container(&mut ctx, &id, &cfg, "upd", "sleep 3600", memory_limit(128 << 20), true).await?;
        let read = "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max";
        ensure_eq!(exec_out(&mut ctx, &c, read).await?, (128u64 << 20).to_string(), "limit before");
        ctx.runtime
            .update_container_resources(cri::UpdateContainerResourcesRequest {
                container_id: c.clone(),
                linux: Some(cri::LinuxContainerResources {
                    memory_limit_in_bytes: 64 << 20,
                    ..Default::default()
                }),
                windows: None,
                annotations: HashMap::new(),
            })
            .await?;
        ensure_eq!(exec_out(&mut ctx, &c, read).await?, (64u64 << 20).to_string(), "limit after the update");
        Ok(())
    })
    .await
}
