//! Builders for the CRI requests tests send: a sandbox config with unique metadata (so tests can
//! run in parallel and re-run on a dirty host), a busybox container config, and a cleanup guard
//! that stops and removes a sandbox at the end of a test whatever happened.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};

use cri_proto::runtime::v1 as cri;
use cri_proto::runtime::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A name unique to this process and call: `<prefix>-<pid>-<n>-<nanos>`.
pub fn unique_name(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{n}-{nanos:x}", std::process::id())
}

/// A pod sandbox config with unique name and uid, a log directory under `log_root`.
pub fn sandbox_config(prefix: &str, log_root: &std::path::Path) -> cri::PodSandboxConfig {
    let name = unique_name(prefix);
    let uid = format!("uid-{name}");
    let log_directory = log_root.join(&name);
    let _ = std::fs::create_dir_all(&log_directory);
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.clone(),
            uid,
            namespace: "cri-it".to_string(),
            attempt: 0,
        }),
        hostname: "pod-host".to_string(),
        log_directory: log_directory.to_string_lossy().into_owned(),
        labels: HashMap::from([
            ("cri-it".to_string(), "true".to_string()),
            ("pod".to_string(), name),
        ]),
        annotations: HashMap::from([("cri-it/annotation".to_string(), "a value".to_string())]),
        linux: Some(cri::LinuxPodSandboxConfig::default()),
        ..Default::default()
    }
}

/// A busybox container running `sh -c <script>`.
pub fn busybox_container(name: &str, image: &str, script: &str) -> cri::ContainerConfig {
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: name.to_string(),
            attempt: 0,
        }),
        image: Some(cri::ImageSpec {
            image: image.to_string(),
            ..Default::default()
        }),
        command: vec!["sh".to_string(), "-c".to_string(), script.to_string()],
        log_path: format!("{name}/0.log"),
        labels: HashMap::from([("container".to_string(), name.to_string())]),
        annotations: HashMap::from([("cri-it/c".to_string(), "c value".to_string())]),
        linux: Some(cri::LinuxContainerConfig::default()),
        ..Default::default()
    }
}

/// Creates the directory a container's log file goes in (`<log_directory>/<container>/` for
/// [`busybox_container`]), as the kubelet does before CreateContainer: cri-dockerd, like
/// upstream's dockershim, expects it; containerd and our dockershim create it themselves.
pub fn prepare_log_dir(sandbox: &cri::PodSandboxConfig, container: &cri::ContainerConfig) {
    let path = std::path::Path::new(&sandbox.log_directory).join(&container.log_path);
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
}

/// Stops and removes every sandbox of a test, whatever the test's outcome (best effort).
pub async fn cleanup_sandboxes(rt: &mut RuntimeServiceClient<Channel>, ids: &[String]) {
    for id in ids {
        let _ = rt
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await;
        let _ = rt
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await;
    }
}

/// Pulls `image` if the runtime does not have it.
pub async fn ensure_image(
    img: &mut cri_proto::runtime::v1::image_service_client::ImageServiceClient<Channel>,
    image: &str,
) -> Result<(), tonic::Status> {
    let st = img
        .image_status(cri::ImageStatusRequest {
            image: Some(cri::ImageSpec {
                image: image.to_string(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await?
        .into_inner();
    if st.image.is_none() {
        img.pull_image(cri::PullImageRequest {
            image: Some(cri::ImageSpec {
                image: image.to_string(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await?;
    }
    Ok(())
}
