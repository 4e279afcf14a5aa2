//! End to end: the `kubelet` BINARY pulls from the authenticated local registry with the
//! node's credentials (`--image-credential-file`, a Docker `config.json`), on both runtimes
//! (containerd's CRI and the embedded dockershim on Docker): a pod whose image must be pulled
//! (`imagePullPolicy: Always`) from `127.0.0.1:5001` runs.

use crate::kubelet_support;

use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use kubelet_support::*;

fn b64(s: &str) -> String {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

async fn kubelet_credentials(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_credentials[{}]", kind.name()));
    let mut k = Kubelet::new(kind, "klcred");
    let uid = format!("{}-auth", k.node);
    let image = format!("{}/busybox:latest", tb.auth_registry);
    let cred = k.dir.path().join("config.json");
    std::fs::write(
        &cred,
        serde_json::json!({"auths": {tb.auth_registry.clone(): {
            "auth": b64(&format!("{}:{}", tb.auth_user, tb.auth_password))
        }}})
        .to_string(),
    )
    .expect("credential file");
    k.write_manifest(
        "auth.yaml",
        &pod_manifest("auth", &uid, &image, "sleep 3600", "")
            .replace("imagePullPolicy: IfNotPresent", "imagePullPolicy: Always"),
    );
    k.spawn(
        &tb,
        &["--image-credential-file".into(), cred.display().to_string()],
    );
    let (port, log) = (k.port, k.log.clone());
    let body = async {
        wait_for(
            "the pod from the authenticated registry to run",
            &log,
            || async { running_ids(&pod(port, &uid).await?) },
        )
        .await;
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    k.shutdown(&tb, std::slice::from_ref(&uid)).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_credentials_containerd() {
    kubelet_credentials(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_credentials_dockershim() {
    kubelet_credentials(RuntimeKind::Dockershim).await;
}
