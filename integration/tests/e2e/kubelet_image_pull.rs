//! End to end: `--image-pull-progress-deadline` of the `kubelet` BINARY with its embedded
//! dockershim (kubelet 1.23's flag). A "registry" on loopback accepts connections and never
//! answers, so Docker's pull makes no progress at all: with a 2 s deadline the pull is cancelled
//! and the pod waits in `ErrImagePull` with the reason, the kubelet's log naming the image and
//! what the pull had done. (Without the deadline Docker waits for its own timeouts, with
//! another message.) A zero deadline is refused at start-up with one line.

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
