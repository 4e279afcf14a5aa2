//! dockershim on real Docker: the CRI-format container log files dockershim writes (stream tags,
//! partial lines for lines longer than 16 KiB), ReopenContainerLog after rotation, and an exited
//! container's last output already in its log when ContainerStatus reports the exit.

use crate::dockershim_support;

use std::time::Duration;

use dockershim_support::with_dockershim;
use integration::fixtures::busybox_container;

/// A CRI log line split into (timestamp, stream, tag, content).
fn parse(line: &str) -> (&str, &str, &str, &str) {
    let mut p = line.splitn(4, ' ');
    let ts = p.next().unwrap_or_default();
    let stream = p.next().unwrap_or_default();
    let tag = p.next().unwrap_or_default();
    let content = p.next().unwrap_or_default();
    assert!(
        chrono::DateTime::parse_from_rfc3339(ts).is_ok(),
        "bad timestamp in {line:?}"
    );
    (ts, stream, tag, content)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_cri_log_format() {
    with_dockershim(
        "dockershim_log_format",
        Duration::from_secs(120),
        |mut ctx| async move {
            let sconfig = ctx.sandbox_config("logs");
            let sid = ctx.run_sandbox(&sconfig).await;
            let script = "echo out1; sleep 0.2; echo err1 >&2; sleep 0.2; \
                      head -c 40000 /dev/zero | tr '\\0' a; echo; sleep 0.2; echo done";
            let cid = ctx
                .run_container(
                    &sid,
                    &sconfig,
                    &busybox_container("logs", &ctx.tb.busybox_image.clone(), script),
                )
                .await;
            let st = ctx.wait_exited(&cid).await;
            assert_eq!(st.exit_code, 0);
            let log = ctx
                .wait_file(&st.log_path, |c| c.contains(" stdout F done\n"))
                .await;
            let lines: Vec<_> = log.lines().map(parse).collect();
            // Timestamps never go backwards.
            for w in lines.windows(2) {
                let a = chrono::DateTime::parse_from_rfc3339(w[0].0).unwrap();
                let b = chrono::DateTime::parse_from_rfc3339(w[1].0).unwrap();
                assert!(a <= b, "{:?} after {:?}", w[1].0, w[0].0);
            }
            let first = lines.first().expect("log lines");
            assert_eq!(
                (first.1, first.2, first.3),
                ("stdout", "F", "out1"),
                "{log:?}"
            );
            assert!(
                lines
                    .iter()
                    .any(|l| (l.1, l.2, l.3) == ("stderr", "F", "err1")),
                "no stderr line in {log:?}"
            );
            assert!(
                !lines.iter().any(|l| l.3 == "err1" && l.1 != "stderr"),
                "err1 tagged wrong"
            );
            // The 40000-byte line: partial chunks of at most 16 KiB, then a full one, all 'a's.
            let start = lines
                .iter()
                .position(|l| l.3.starts_with('a'))
                .expect("long line");
            let mut joined = String::new();
            let mut partials = 0;
            for l in &lines[start..] {
                assert_eq!(l.1, "stdout");
                assert!(l.3.len() <= 16 * 1024, "chunk of {} bytes", l.3.len());
                joined.push_str(l.3);
                if l.2 == "F" {
                    break;
                }
                assert_eq!(l.2, "P", "{l:?}");
                partials += 1;
            }
            assert!(
                partials >= 2,
                "a 40000-byte line needs >= 2 partial chunks, got {partials}"
            );
            assert_eq!(joined.len(), 40000);
            assert!(joined.bytes().all(|b| b == b'a'));
            let last = lines.last().unwrap();
            assert_eq!((last.1, last.2, last.3), ("stdout", "F", "done"));
            ctx.stop_remove_sandbox(&sid).await;
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_reopen_container_log() {
    with_dockershim(
        "dockershim_reopen_log",
        Duration::from_secs(120),
        |mut ctx| async move {
            let sconfig = ctx.sandbox_config("reopen");
            let sid = ctx.run_sandbox(&sconfig).await;
            let script = "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done";
            let cid = ctx
                .run_container(
                    &sid,
                    &sconfig,
                    &busybox_container("ticker", &ctx.tb.busybox_image.clone(), script),
                )
                .await;
            let path = ctx.status(&cid).await.log_path;
            ctx.wait_file(&path, |c| c.contains(" stdout F tick 2\n"))
                .await;
            let rotated = format!("{path}.1");
            std::fs::rename(&path, &rotated).expect("rotate");
            ctx.rt
                .reopen_container_log(cri_proto::runtime::v1::ReopenContainerLogRequest {
                    container_id: cid.clone(),
                })
                .await
                .expect("ReopenContainerLog");
            let fresh = ctx.wait_file(&path, |c| c.lines().count() >= 3).await;
            let old = std::fs::read_to_string(&rotated).unwrap();
            let last_old: u64 = old
                .lines()
                .last()
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|n| n.parse().ok())
                .expect("old tick");
            let first_new: u64 = fresh
                .lines()
                .next()
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|n| n.parse().ok())
                .expect("new tick");
            assert_eq!(
                first_new,
                last_old + 1,
                "no line lost or duplicated across the reopen"
            );
            // The rotated file stops growing: nothing is written there any more.
            let len = std::fs::metadata(&rotated).unwrap().len();
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(
                std::fs::metadata(&rotated).unwrap().len(),
                len,
                "old file still written"
            );
            ctx.stop_remove_sandbox(&sid).await;
        },
    )
    .await;
}

/// Once ContainerStatus says Exited, the container's last output is already in its CRI log
/// (the kubelet reads it right then for a `FallbackToLogsOnError` termination message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_exited_means_logged() {
    with_dockershim(
        "dockershim_exited_means_logged",
        Duration::from_secs(120),
        |mut ctx| async move {
            let sconfig = ctx.sandbox_config("exitlog");
            let sid = ctx.run_sandbox(&sconfig).await;
            let image = ctx.tb.busybox_image.clone();
            for i in 0..6 {
                let script = format!("echo last words {i}; exit 1");
                let cid = ctx
                    .run_container(
                        &sid,
                        &sconfig,
                        &busybox_container(&format!("exit{i}"), &image, &script),
                    )
                    .await;
                let st = ctx.wait_exited(&cid).await;
                assert_eq!(st.exit_code, 1);
                // No waiting for the file: it must be complete now.
                let log = std::fs::read_to_string(&st.log_path).unwrap_or_default();
                assert!(
                    log.contains(&format!(" stdout F last words {i}\n")),
                    "container {i} exited but its log holds {log:?}"
                );
            }
            ctx.stop_remove_sandbox(&sid).await;
        },
    )
    .await;
}
