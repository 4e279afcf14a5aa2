//! `[container]` log cases: the log file exists when StartContainer returns, lines are in the
//! CRI format at the log path, a container that exits at once keeps its unterminated output,
//! and ReopenContainerLog after the file was moved away.

use std::time::Duration;

use cri_proto::runtime::v1 as cri;

use super::common::{container, cstatus, in_sandbox, wait_exited};
use crate::conformance::{CaseError, CaseResult, Ctx};
use crate::{ensure, ensure_eq};

/// critest's HostNetwork and reopen-log cases open the log file as soon as StartContainer
/// returns: it must exist by then (containerd creates it before it starts the task), for a
/// container that exits at once and for one that keeps logging.
pub(super) async fn container_log_at_start(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-logstart",
        |_| {},
        |mut ctx, id, cfg| async move {
            for (i, script) in ["netstat -ln", "while true; do echo hello; sleep 1; done"]
                .iter()
                .cycle()
                .take(6)
                .enumerate()
            {
                let name = format!("c{i}");
                let c = container(&mut ctx, &id, &cfg, &name, script, |_| {}, false).await?;
                let path = std::path::Path::new(&cfg.log_directory).join(format!("{name}/0.log"));
                ctx.runtime
                    .start_container(cri::StartContainerRequest {
                        container_id: c.clone(),
                    })
                    .await?;
                ensure!(
                    std::fs::File::open(&path).is_ok(),
                    "{} does not exist when StartContainer of `{script}` returned",
                    path.display()
                );
            }
            Ok(())
        },
    )
    .await
}

pub(super) async fn container_logs(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-logs",
        |_| {},
        |mut ctx, id, cfg| async move {
            let c = container(
                &mut ctx,
                &id,
                &cfg,
                "logger",
                "echo hello; echo oops >&2; sleep 3600",
                |_| {},
                true,
            )
            .await?;
            let st = cstatus(&mut ctx, &c).await?;
            let want_path = format!("{}/logger/0.log", cfg.log_directory);
            ensure_eq!(st.log_path, want_path, "log_path");
            let mut text = String::new();
            for _ in 0..100 {
                text = std::fs::read_to_string(&st.log_path).unwrap_or_default();
                if text.lines().count() >= 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let mut seen = (false, false);
            for line in text.lines() {
                let parts: Vec<&str> = line.splitn(4, ' ').collect();
                ensure!(parts.len() == 4, "not a CRI log line: {line:?}");
                ensure!(
                    chrono::DateTime::parse_from_rfc3339(parts[0]).is_ok(),
                    "bad timestamp in {line:?}"
                );
                match (parts[1], parts[2], parts[3]) {
                    ("stdout", "F", "hello") => seen.0 = true,
                    ("stderr", "F", "oops") => seen.1 = true,
                    _ => {}
                }
            }
            ensure!(
                seen == (true, true),
                "log lacks the stdout/stderr lines: {text:?}"
            );
            Ok(())
        },
    )
    .await
}

/// What each stream of a container log file holds, its lines' contents joined as the container
/// wrote them. CRI format: a `P` line goes on in the next one, an `F` line ends with a newline.
/// The kubelet also reads Docker's json-file lines (`{"log":…,"stream":…}`, the newline inside
/// `log`), which cri-dockerd's log path links to.
fn streams_of(text: &str) -> Result<(String, String), CaseError> {
    let (mut out, mut err) = (String::new(), String::new());
    for line in text.lines() {
        let (stream, content) = if line.starts_with('{') {
            let v: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| CaseError::Fail(format!("not a json-file log line: {line:?}: {e}")))?;
            let field = |k: &str| {
                v.get(k)
                    .and_then(|x| x.as_str())
                    .unwrap_or_default()
                    .to_string()
            };
            (field("stream"), field("log"))
        } else {
            let parts: Vec<&str> = line.splitn(4, ' ').collect();
            ensure!(parts.len() == 4, "not a CRI log line: {line:?}");
            let nl = if parts[2] == "F" { "\n" } else { "" };
            (parts[1].to_string(), format!("{}{nl}", parts[3]))
        };
        match stream.as_str() {
            "stdout" => out.push_str(&content),
            "stderr" => err.push_str(&content),
            other => return Err(CaseError::Fail(format!("stream {other:?} in {line:?}"))),
        }
    }
    Ok((out, err))
}

/// The kubelet reads a container's log when it sees the exit (a `FallbackToLogsOnError`
/// termination message, `kubectl logs` of a finished pod): once ContainerStatus says EXITED,
/// everything the container wrote must be in the file, also a last line without a newline
/// from a container that exited before the runtime's log copy caught up (Docker 20.10's follow
/// stream lost it about one time in four).
pub(super) async fn container_short_output(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-shortlog",
        |_| {},
        |mut ctx, id, cfg| async move {
            let mut started = Vec::new();
            for i in 0..20 {
                let name = format!("c{i}");
                let script = format!("printf out-{i}; printf err-{i} >&2");
                let c = container(&mut ctx, &id, &cfg, &name, &script, |_| {}, true).await?;
                started.push((i, c));
            }
            let mut lost = Vec::new();
            for (i, c) in &started {
                let st = wait_exited(&mut ctx, c).await?;
                let text = std::fs::read_to_string(&st.log_path)
                    .map_err(|e| CaseError::Fail(format!("reading {}: {e}", st.log_path)))?;
                let got = streams_of(&text)?;
                if got != (format!("out-{i}"), format!("err-{i}")) {
                    lost.push(format!("c{i}: {got:?}"));
                }
            }
            ensure!(
                lost.is_empty(),
                "{} of {} exited containers' logs lack output: {}",
                lost.len(),
                started.len(),
                lost.join("; ")
            );
            Ok(())
        },
    )
    .await
}

pub(super) async fn container_reopen_log(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-reopen",
        |_| {},
        |mut ctx, id, cfg| async move {
            let c = container(
                &mut ctx,
                &id,
                &cfg,
                "talker",
                "i=0; while true; do echo line-$i; i=$((i+1)); sleep 0.2; done",
                |_| {},
                true,
            )
            .await?;
            let path = std::path::PathBuf::from(cstatus(&mut ctx, &c).await?.log_path);
            let moved = path.with_extension("log.1");
            let mut ok = false;
            for _ in 0..50 {
                if std::fs::read_to_string(&path).is_ok_and(|s| s.contains("line-")) {
                    ok = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            ensure!(ok, "no output in {}", path.display());
            std::fs::rename(&path, &moved)
                .map_err(|e| CaseError::Fail(format!("moving the log away: {e}")))?;
            ctx.runtime
                .reopen_container_log(cri::ReopenContainerLogRequest {
                    container_id: c.clone(),
                })
                .await?;
            let mut fresh = String::new();
            for _ in 0..50 {
                fresh = std::fs::read_to_string(&path).unwrap_or_default();
                if fresh.contains("line-") {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            ensure!(
                fresh.contains(" stdout F line-"),
                "new log file at the path has {fresh:?}"
            );
            let old = std::fs::read_to_string(&moved).unwrap_or_default();
            ensure!(
                old.contains("line-0"),
                "the moved file keeps the earlier lines: {old:?}"
            );
            let _ = std::fs::remove_file(&moved);
            Ok(())
        },
    )
    .await
}
