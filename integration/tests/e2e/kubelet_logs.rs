//! End to end: container logs served by the `kubelet` BINARY's authenticated server on `--port`
//! (`GET /containerLogs/<ns>/<pod>/<container>`; upstream serves them there only, and the
//! read-only port answers 405) on both runtimes (containerd's CRI and the
//! embedded dockershim on Docker): `tailLines`, `timestamps`, `limitBytes`, `sinceSeconds`,
//! `follow` on a container that exits, `previous` after a restart, error answers, and log
//! rotation with a small `--container-log-max-size`: rotated files appear, at most
//! `--container-log-max-files` files exist, and the recent log is still served whole across
//! the rotated files.

use crate::kubelet_support;

use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use kubelet_support::*;

fn logs_path(k: &Kubelet, pod: &str, query: &str) -> String {
    format!("/containerLogs/default/{}/main?{query}", k.pod_name(pod))
}

/// Flags for the kubelet's secure server on `port`, serving anonymous requests (upstream's
/// default `--anonymous-auth=true` with AlwaysAllow authorization).
pub(crate) fn secure_port_flags(port: u16) -> Vec<String> {
    vec![
        "--port".into(),
        port.to_string(),
        "--anonymous-auth=true".into(),
    ]
}

/// `GET path` on the kubelet's secure port over TLS (its self-signed certificate accepted,
/// no client certificate): (status code, body), de-chunked.
pub(crate) async fn secure_get_status(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let config = kubelet::probe::transport::insecure_client_config(None).ok()?;
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from("localhost").ok()?;
    let mut s = tls.connect(name, tcp).await.ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    // The server may close without a TLS close_notify: what was read is the answer.
    while let Ok(n) = s.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    crate::kubelet_support::parse_http_response(&buf)
}

/// `GET path` on the secure port: the body when the answer is 200.
pub(crate) async fn secure_get(port: u16, path: &str) -> Option<String> {
    match secure_get_status(port, path).await? {
        (200, b) => Some(b),
        _ => None,
    }
}

async fn kubelet_logs(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_logs[{}]", kind.name()));
    let mut k = Kubelet::new(kind, "kllog");
    let uid = |n: &str| format!("{}-{n}", k.node);
    let (lines_uid, restart_uid, rotate_uid, once_uid) =
        (uid("lines"), uid("restart"), uid("rotate"), uid("once"));
    let uids = [
        lines_uid.clone(),
        restart_uid.clone(),
        rotate_uid.clone(),
        once_uid.clone(),
    ];
    k.write_manifest(
        "lines.yaml",
        &pod_manifest(
            "lines",
            &lines_uid,
            &tb.busybox_image,
            "for i in 1 2 3 4 5 6 7 8 9 10; do echo line-$i; done; sleep 1; echo err-line >&2; sleep 3600",
            "",
        ),
    );
    k.write_manifest(
        "restart.yaml",
        &pod_manifest(
            "restart",
            &restart_uid,
            &tb.busybox_image,
            "echo run-$(cat /proc/sys/kernel/random/uuid); sleep 12; exit 1",
            "",
        ),
    );
    k.write_manifest(
        "rotate.yaml",
        &pod_manifest(
            "rotate",
            &rotate_uid,
            &tb.busybox_image,
            "i=0; while [ $i -lt 600 ]; do echo rot-$i-abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz; i=$((i+1)); if [ $((i % 40)) -eq 0 ]; then sleep 1; fi; done; echo rot-done; sleep 3600",
            "",
        ),
    );
    k.write_manifest(
        "once.yaml",
        &pod_manifest(
            "once",
            &once_uid,
            &tb.busybox_image,
            "echo first; sleep 3; echo second",
            "  restartPolicy: Never\n",
        ),
    );
    let sport = free_port();
    let mut flags = secure_port_flags(sport);
    flags.extend([
        "--container-log-max-size=4Ki".into(),
        "--container-log-max-files=3".into(),
        "--container-log-monitor-interval=1s".into(),
    ]);
    k.spawn(&tb, &flags);
    let (port, log) = (k.port, k.log.clone());
    let body = async {
        // Plain, tail, timestamps, limitBytes, sinceSeconds.
        let all = wait_for("all lines of the logs pod", &log, || async {
            let b = secure_get(sport, &logs_path(&k, "lines", "")).await?;
            b.contains("err-line").then_some(b)
        })
        .await;
        let expected: String = (1..=10).map(|i| format!("line-{i}\n")).collect();
        assert_eq!(all, format!("{expected}err-line\n"), "stdout and stderr");
        // The read-only port serves no logs (upstream's debugging handlers are disabled there).
        let (code, msg) = http_get_status(port, &logs_path(&k, "lines", ""))
            .await
            .expect("read-only answer");
        assert_eq!(
            (code, msg.as_str()),
            (405, "Debug endpoints are disabled.\n"),
            "read-only /containerLogs"
        );
        let (code, _) = http_get_status(port, &logs_path(&k, "lines", "follow=true"))
            .await
            .expect("read-only follow answer");
        assert_eq!(code, 405, "read-only /containerLogs?follow=true");
        let tail = secure_get(sport, &logs_path(&k, "lines", "tailLines=3"))
            .await
            .expect("tail");
        assert_eq!(tail, "line-9\nline-10\nerr-line\n");
        let ts = secure_get(
            sport,
            &logs_path(&k, "lines", "tailLines=2&timestamps=true"),
        )
        .await
        .expect("timestamps");
        let ts_lines: Vec<&str> = ts.lines().collect();
        assert_eq!(ts_lines.len(), 2, "{ts:?}");
        for (l, want) in ts_lines.iter().zip(["line-10", "err-line"]) {
            let (stamp, rest) = l.split_once(' ').expect("timestamp prefix");
            assert_eq!(rest, want);
            assert!(
                chrono::DateTime::parse_from_rfc3339(stamp).is_ok(),
                "RFC3339 timestamp: {stamp:?}"
            );
        }
        let limited = secure_get(sport, &logs_path(&k, "lines", "limitBytes=9"))
            .await
            .expect("limit");
        assert_eq!(limited, "line-1\nli");
        let since = secure_get(sport, &logs_path(&k, "lines", "sinceSeconds=86400"))
            .await
            .expect("since");
        assert_eq!(since, all);
        // Errors: unknown pod and container, no previous instance, bad options.
        let (code, _) = secure_get_status(sport, "/containerLogs/default/nope/main")
            .await
            .expect("404");
        assert_eq!(code, 404);
        let (code, _) = secure_get_status(
            sport,
            &format!("/containerLogs/default/{}/other", k.pod_name("lines")),
        )
        .await
        .expect("404");
        assert_eq!(code, 404);
        let (code, msg) = secure_get_status(sport, &logs_path(&k, "lines", "previous=true"))
            .await
            .expect("400");
        assert_eq!(code, 400);
        assert!(msg.contains("previous terminated container"), "{msg}");
        let (code, _) = secure_get_status(sport, &logs_path(&k, "lines", "tailLines=-1"))
            .await
            .expect("400");
        assert_eq!(code, 400);

        // follow on a container that exits: the stream ends with its last line.
        wait_for("the run-once container to start", &log, || async {
            running_ids(&pod(port, &once_uid).await?)
        })
        .await;
        let followed = tokio::time::timeout(
            DEADLINE,
            secure_get(sport, &logs_path(&k, "once", "follow=true")),
        )
        .await
        .expect("the follow stream ends when the container exits")
        .expect("follow body");
        assert_eq!(followed, "first\nsecond\n");

        // previous: after a restart, the previous instance's log differs from the current one.
        let (prev, cur) = wait_for("a restarted container's previous log", &log, || async {
            let p = pod(port, &restart_uid).await?;
            let c = &p["status"]["containerStatuses"][0];
            c["state"]["running"].as_object()?;
            (c["restartCount"].as_i64()? >= 1).then_some(())?;
            let prev = secure_get(sport, &logs_path(&k, "restart", "previous=true")).await?;
            let cur = secure_get(sport, &logs_path(&k, "restart", "")).await?;
            (!cur.is_empty()).then_some((prev, cur))
        })
        .await;
        assert!(prev.starts_with("run-") && prev.ends_with('\n'), "{prev:?}");
        assert!(cur.starts_with("run-") && cur.ends_with('\n'), "{cur:?}");
        assert_ne!(
            prev, cur,
            "previous and current instances log different runs"
        );

        // Rotation: with 4Ki files, the log is rotated while the container writes; at most
        // 3 files exist, and the recent log is served whole across them.
        let logdir = std::path::PathBuf::from(format!(
            "/var/log/pods/default_{}_{rotate_uid}/main",
            k.pod_name("rotate")
        ));
        wait_for("the rotating container to finish writing", &log, || async {
            let b = secure_get(sport, &logs_path(&k, "rotate", "tailLines=1")).await?;
            (b == "rot-done\n").then_some(())
        })
        .await;
        // Let a last rotation (checked every second) settle before reading the whole log.
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        let whole = secure_get(sport, &logs_path(&k, "rotate", ""))
            .await
            .expect("whole log");
        let files: Vec<String> = std::fs::read_dir(&logdir)
            .expect("log dir")
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect();
        assert!(
            files.iter().any(|f| f.starts_with("0.log.")),
            "a rotated file exists: {files:?}"
        );
        assert!(files.len() <= 3, "at most 3 log files: {files:?}");
        // Whatever is kept is one consecutive run of lines ending with the last ones.
        let nums: Vec<u32> = whole
            .lines()
            .filter_map(|l| l.strip_prefix("rot-")?.split('-').next()?.parse().ok())
            .collect();
        assert!(
            nums.len() > 40,
            "more than one file's worth: {}",
            nums.len()
        );
        assert_eq!(nums.last(), Some(&599));
        assert!(
            nums.windows(2).all(|w| w[1] == w[0] + 1),
            "no gap in the served log"
        );
        let tail = secure_get(sport, &logs_path(&k, "rotate", "tailLines=30"))
            .await
            .expect("tail over rotated files");
        let want: String = (571..600)
            .map(|i| format!("rot-{i}-abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz\n"))
            .chain(std::iter::once("rot-done\n".to_string()))
            .collect();
        assert_eq!(tail, want);
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    k.shutdown(&tb, &uids).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_logs_containerd() {
    kubelet_logs(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_logs_dockershim() {
    kubelet_logs(RuntimeKind::Dockershim).await;
}
