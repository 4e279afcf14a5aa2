//! End to end: `--image-pull-progress-deadline` of the `kubelet` BINARY with its embedded
//! dockershim (kubelet 1.23's flag). A "registry" on loopback accepts connections and never
//! answers, so Docker's pull makes no progress at all: with a 2 s deadline the pull is cancelled
//! and the pod waits in `ErrImagePull` with the reason, the kubelet's log naming the image and
//! what the pull had done. (Without the deadline Docker waits for its own timeouts, with
//! another message.) A zero deadline is refused at start-up with one line. A pull that takes
//! longer than the report interval (a fresh image behind a loopback proxy that slows the
//! registry's answers down) is reported by the kubelet itself while it runs, in its log and its
//! `Pulling` event, with layers and bytes.

use std::time::Duration;

use bollard::query_parameters::RemoveImageOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::dockershim_support::{docker, push_fresh_image};
use crate::kubelet_support;

use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use kubelet_support::*;

fn waiting(pod: &serde_json::Value) -> Option<(String, String)> {
    let w = &pod["status"]["containerStatuses"][0]["state"]["waiting"];
    Some((
        w["reason"].as_str()?.to_string(),
        w["message"].as_str().unwrap_or_default().to_string(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_without_progress_is_cancelled_at_the_deadline() {
    let tb = require_testbed!("a_pull_without_progress_is_cancelled_at_the_deadline");
    // Accepts and holds every connection, saying nothing.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    });
    let mut k = Kubelet::new(RuntimeKind::Dockershim, "klpull");
    let uid = format!("{}-stall", k.node);
    let image = format!("127.0.0.1:{port}/stall:1");
    k.write_manifest(
        "stall.yaml",
        &pod_manifest("stall", &uid, &image, "sleep 3600", "")
            .replace("imagePullPolicy: IfNotPresent", "imagePullPolicy: Always"),
    );
    k.spawn(&tb, &["--image-pull-progress-deadline".into(), "2s".into()]);
    let (kport, log) = (k.port, k.log.clone());
    let body = async {
        let (reason, message) =
            wait_for("the pull cancelled for lack of progress", &log, || async {
                let w = waiting(&pod(kport, &uid).await?)?;
                (w.0 == "ErrImagePull" || w.0 == "ImagePullBackOff").then_some(w)
            })
            .await;
        println!("{reason}: {message}");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            text.contains("Cancel pulling image because of no progress for 2s"),
            "the kubelet's log says why: {}",
            log_tail(&log, 30)
        );
        assert!(text.contains(&image), "and names the image");
        if reason == "ErrImagePull" {
            assert!(message.contains("made no progress for 2s"), "{message}");
        }
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    k.shutdown(&tb, std::slice::from_ref(&uid)).await;
    hold.abort();
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_deadline_is_refused_at_start_up() {
    let bin = kubelet_binary();
    if !bin.exists() {
        panic!("{} is missing: cargo build --workspace", bin.display());
    }
    let out = tokio::process::Command::new(bin)
        .args(["--image-pull-progress-deadline", "0s"])
        .output()
        .await
        .expect("run kubelet");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(
        lines[0].contains("--image-pull-progress-deadline")
            && lines[0].contains("greater than zero"),
        "{err}"
    );
}

/// A loopback TCP proxy to `upstream` that passes the answers on at `bytes_per_sec` per
/// connection (requests go through as they come): a slow registry.
async fn slow_proxy(upstream: String, bytes_per_sec: u64) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let task = tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                let (mut client_rx, mut client_tx) = client.into_split();
                let (mut server_rx, mut server_tx) = server.into_split();
                let requests = tokio::io::copy(&mut client_rx, &mut server_tx);
                let answers = async {
                    let mut buf = vec![0u8; 8192];
                    loop {
                        let n = match server_rx.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if client_tx.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_secs_f64(
                            n as f64 / bytes_per_sec as f64,
                        ))
                        .await;
                    }
                    let _ = client_tx.shutdown().await;
                };
                let _ = tokio::join!(requests, answers);
            });
        }
    });
    (port, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_pull_is_reported_while_it_runs() {
    let tb = require_testbed!("a_long_pull_is_reported_while_it_runs");
    let repo = integration::fixtures::unique_name("pull-progress");
    // 2.5 MB of random data at 150 kB/s: about 17 s, over the 10 s report interval.
    push_fresh_image(&tb, &repo, 2_500_000).await;
    let (port, proxy) = slow_proxy(tb.registry.clone(), 150_000).await;
    let image = format!("127.0.0.1:{port}/{repo}:1");
    let mut k = Kubelet::new(RuntimeKind::Dockershim, "klprog");
    let uid = format!("{}-slow", k.node);
    k.write_manifest(
        "slow.yaml",
        &pod_manifest("slow", &uid, &image, "sleep 3600", ""),
    );
    k.spawn(&tb, &[]);
    let (kport, log) = (k.port, k.log.clone());
    let body = async {
        wait_for("the slowly pulled pod Running", &log, || async {
            (pod(kport, &uid).await?["status"]["phase"] == "Running").then_some(())
        })
        .await;
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        // The kubelet's own report (not only its embedded dockershim's log line), and the
        // event, both with layers and bytes.
        let reported: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("kubelet::kuberuntime::manager::image: Pulling image: "))
            .collect();
        assert!(
            !reported.is_empty() && reported.iter().all(|l| l.contains(&image)),
            "the kubelet reports the running pull: {}",
            log_tail(&log, 40)
        );
        let progress = regex_lite_layers(reported[0]);
        assert!(progress, "layers and bytes: {}", reported[0]);
        let event = text
            .lines()
            .find(|l| {
                l.contains("reason=\"Pulling\"")
                    && l.contains(&format!("Pulling image \"{image}\": "))
            })
            .unwrap_or_else(|| panic!("a Pulling event with progress: {}", log_tail(&log, 40)));
        assert!(regex_lite_layers(event), "{event}");
        println!("{}\n{event}", reported[0]);
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    k.shutdown(&tb, std::slice::from_ref(&uid)).await;
    proxy.abort();
    let _ = docker(&tb)
        .remove_image(&image, None::<RemoveImageOptions>, None)
        .await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

/// Does `line` say "N/M layers, X of Y downloaded" with a non-zero size to download?
fn regex_lite_layers(line: &str) -> bool {
    let Some((_, rest)) = line.split_once(" layers, ") else {
        return false;
    };
    let Some((_, total)) = rest.split_once(" of ") else {
        return false;
    };
    total.contains(" downloaded") && !total.starts_with("0 B")
}
