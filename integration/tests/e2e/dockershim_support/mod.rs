//! Shared harness of the dockershim end-to-end tests: each test gets its own in-process
//! dockershim (CNI mode, real Docker), runs its body in a task, and whatever the body did
//! (pass, panic, time out) every sandbox it registered is stopped and removed afterwards.

#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use cri_proto::runtime::v1::image_service_client::ImageServiceClient;
use cri_proto::runtime::v1::runtime_service_client::RuntimeServiceClient;
use integration::fixtures::{cleanup_sandboxes, ensure_image, sandbox_config};
use integration::runtimes::{RuntimeKind, TestRuntime};
use integration::testbed::Testbed;
use parking_lot::Mutex;
use tonic::transport::Channel;

/// What a test body works with.
pub struct Ctx {
    pub tb: Testbed,
    pub rt: RuntimeServiceClient<Channel>,
    pub img: ImageServiceClient<Channel>,
    /// Root of the pods' log directories.
    pub logs: PathBuf,
    runtime: Arc<tokio::sync::Mutex<TestRuntime>>,
    sandboxes: Arc<Mutex<Vec<String>>>,
}

/// Runs `body` against a fresh in-process dockershim, cleaning up its sandboxes whatever
/// happens; fails when the body panics or exceeds `limit`.
pub async fn with_dockershim<F, Fut>(name: &str, limit: Duration, body: F)
where
    F: FnOnce(Ctx) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(tb) = Testbed::get(name) else {
        return;
    };
    with_dockershim_on(tb, name, limit, body).await;
}

/// [`with_dockershim`] on the test bed `tb` as given (its `docker_endpoint` may be a
/// [`DockerTap`]'s).
pub async fn with_dockershim_on<F, Fut>(tb: Testbed, name: &str, limit: Duration, body: F)
where
    F: FnOnce(Ctx) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let rt = TestRuntime::new(RuntimeKind::Dockershim, &tb)
        .await
        .expect("start dockershim");
    let (r, i) = (rt.runtime.clone(), rt.image.clone());
    let runtime = Arc::new(tokio::sync::Mutex::new(rt));
    let sandboxes = Arc::new(Mutex::new(Vec::new()));
    let logs = tempfile::Builder::new()
        .prefix("dockershim-it-logs-")
        .tempdir()
        .expect("tempdir");
    let mut img = i.clone();
    ensure_image(&mut img, &tb.busybox_image)
        .await
        .expect("busybox image");
    let ctx = Ctx {
        tb,
        rt: r,
        img: i,
        logs: logs.path().to_path_buf(),
        runtime: runtime.clone(),
        sandboxes: sandboxes.clone(),
    };
    let task = tokio::spawn(tokio::time::timeout(limit, body(ctx)));
    let outcome = task.await;
    let ids = sandboxes.lock().clone();
    let mut client = runtime.lock().await.runtime.clone();
    cleanup_sandboxes(&mut client, &ids).await;
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(_)) => panic!("{name}: timed out after {limit:?}"),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("{name}: {e}"),
    }
}

impl Ctx {
    /// A sandbox config with unique names and a log directory under this test's log root.
    pub fn sandbox_config(&self, prefix: &str) -> cri::PodSandboxConfig {
        sandbox_config(prefix, &self.logs)
    }

    /// Registers a sandbox id for the final cleanup.
    pub fn track(&self, id: &str) {
        self.sandboxes.lock().push(id.to_string());
    }

    /// RunPodSandbox, registered for cleanup.
    pub async fn run_sandbox(&mut self, config: &cri::PodSandboxConfig) -> String {
        let id = self
            .rt
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .expect("RunPodSandbox")
            .into_inner()
            .pod_sandbox_id;
        self.track(&id);
        id
    }

    pub async fn create(
        &mut self,
        sandbox_id: &str,
        sconfig: &cri::PodSandboxConfig,
        cconfig: &cri::ContainerConfig,
    ) -> Result<String, tonic::Status> {
        Ok(self
            .rt
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.to_string(),
                config: Some(cconfig.clone()),
                sandbox_config: Some(sconfig.clone()),
            })
            .await?
            .into_inner()
            .container_id)
    }

    pub async fn start(&mut self, id: &str) -> Result<(), tonic::Status> {
        self.rt
            .start_container(cri::StartContainerRequest {
                container_id: id.to_string(),
            })
            .await
            .map(|_| ())
    }

    /// CreateContainer + StartContainer, panicking on failure.
    pub async fn run_container(
        &mut self,
        sandbox_id: &str,
        sconfig: &cri::PodSandboxConfig,
        cconfig: &cri::ContainerConfig,
    ) -> String {
        let id = self
            .create(sandbox_id, sconfig, cconfig)
            .await
            .expect("CreateContainer");
        self.start(&id).await.expect("StartContainer");
        id
    }

    pub async fn status(&mut self, id: &str) -> cri::ContainerStatus {
        self.rt
            .container_status(cri::ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: false,
            })
            .await
            .expect("ContainerStatus")
            .into_inner()
            .status
            .expect("status")
    }

    pub async fn sandbox_status(&mut self, id: &str) -> cri::PodSandboxStatus {
        self.rt
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                verbose: false,
            })
            .await
            .expect("PodSandboxStatus")
            .into_inner()
            .status
            .expect("sandbox status")
    }

    /// Polls ContainerStatus until the container exited (generous deadline).
    pub async fn wait_exited(&mut self, id: &str) -> cri::ContainerStatus {
        for _ in 0..600 {
            let st = self.status(id).await;
            if st.state == cri::ContainerState::ContainerExited as i32 {
                return st;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("container {id} did not exit");
    }

    /// ExecSync `sh -c script`.
    pub async fn sh(
        &mut self,
        id: &str,
        script: &str,
        timeout: i64,
    ) -> Result<cri::ExecSyncResponse, tonic::Status> {
        Ok(self
            .rt
            .exec_sync(cri::ExecSyncRequest {
                container_id: id.to_string(),
                cmd: vec!["sh".into(), "-c".into(), script.into()],
                timeout,
            })
            .await?
            .into_inner())
    }

    /// ExecSync `sh -c script` expecting exit 0; its stdout as a string.
    pub async fn sh_ok(&mut self, id: &str, script: &str) -> String {
        let r = self.sh(id, script, 30).await.expect("ExecSync");
        assert_eq!(
            r.exit_code,
            0,
            "{script:?}: stdout {:?} stderr {:?}",
            String::from_utf8_lossy(&r.stdout),
            String::from_utf8_lossy(&r.stderr)
        );
        String::from_utf8_lossy(&r.stdout).into_owned()
    }

    /// Polls a file until `pred` holds for its content; the last content.
    pub async fn wait_file(&self, path: &str, pred: impl Fn(&str) -> bool) -> String {
        let mut content = String::new();
        for _ in 0..300 {
            content = std::fs::read_to_string(path).unwrap_or_default();
            if pred(&content) {
                return content;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{path}: condition never held; content {content:?}");
    }

    /// Stops and removes a sandbox, expecting success.
    pub async fn stop_remove_sandbox(&mut self, id: &str) {
        self.rt
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
            .expect("StopPodSandbox");
        self.rt
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
            .expect("RemovePodSandbox");
    }

    /// Restarts dockershim (same root directory) and reconnects this context's clients.
    pub async fn restart_dockershim(&mut self) {
        let mut rt = self.runtime.lock().await;
        rt.restart_dockershim().await.expect("restart dockershim");
        self.rt = rt.runtime.clone();
        self.img = rt.image.clone();
    }

    /// The dockershim root directory (from verbose Status).
    pub async fn root_directory(&mut self) -> PathBuf {
        let info = self
            .rt
            .status(cri::StatusRequest { verbose: true })
            .await
            .expect("Status")
            .into_inner()
            .info;
        let config: serde_json::Value =
            serde_json::from_str(info.get("config").expect("config info")).expect("json");
        PathBuf::from(config["rootDirectory"].as_str().expect("rootDirectory"))
    }
}

/// A direct Docker client (to act behind dockershim's back).
pub fn docker(tb: &Testbed) -> bollard::Docker {
    let path = docker_socket(tb);
    bollard::Docker::connect_with_unix(&path.to_string_lossy(), 120, bollard::API_DEFAULT_VERSION)
        .expect("docker")
}

/// Commits `<image>:<tag>` from the test bed's busybox in Docker: after running `sh -c cmd` in
/// it to its end when `cmd` is given, with `config` (a HEALTHCHECK, say) over busybox's own.
pub async fn commit_busybox(
    tb: &Testbed,
    image: &str,
    tag: &str,
    cmd: Option<String>,
    config: bollard::models::ContainerConfig,
) {
    use bollard::query_parameters::{
        CommitContainerOptions, CreateContainerOptions, RemoveContainerOptions,
        StartContainerOptions, WaitContainerOptions,
    };
    use futures::StreamExt;

    let d = docker(tb);
    let name = integration::fixtures::unique_name("commit-src");
    let run = cmd.is_some();
    d.create_container(
        Some(CreateContainerOptions {
            name: Some(name.clone()),
            ..Default::default()
        }),
        bollard::models::ContainerCreateBody {
            image: Some(tb.busybox_image.clone()),
            cmd: cmd.map(|c| vec!["sh".into(), "-c".into(), c]),
            ..Default::default()
        },
    )
    .await
    .expect("create the image's container");
    if run {
        d.start_container(&name, None::<StartContainerOptions>)
            .await
            .expect("start it");
        let _ = d
            .wait_container(&name, None::<WaitContainerOptions>)
            .collect::<Vec<_>>()
            .await;
    }
    let committed = d
        .commit_container(
            CommitContainerOptions {
                container: Some(name.clone()),
                repo: Some(image.to_string()),
                tag: Some(tag.to_string()),
                ..Default::default()
            },
            config,
        )
        .await;
    let _ = d
        .remove_container(
            &name,
            Some(RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        )
        .await;
    committed.expect("commit");
}

/// Pushes `<registry>/<repo>:1`, busybox plus a layer of `bytes` random bytes that no other
/// image has, and removes it from Docker again, so that pulling it downloads that layer on any
/// runtime (an image of its own for a test that pulls and removes, whatever else runs).
pub async fn push_fresh_image(tb: &Testbed, repo: &str, bytes: usize) {
    use bollard::query_parameters::{PushImageOptions, RemoveImageOptions};
    use futures::StreamExt;

    let image = format!("{}/{repo}", tb.registry);
    let cmd = format!("head -c {bytes} /dev/urandom > /blob");
    commit_busybox(tb, &image, "1", Some(cmd), Default::default()).await;
    let d = docker(tb);
    let pushed = d
        .push_image(
            &image,
            Some(PushImageOptions {
                tag: Some("1".into()),
                ..Default::default()
            }),
            None,
        )
        .collect::<Vec<_>>()
        .await;
    assert!(
        pushed
            .iter()
            .all(|m| m.as_ref().is_ok_and(|m| m.error_detail.is_none())),
        "push {image}:1: {pushed:?}"
    );
    d.remove_image(&format!("{image}:1"), None::<RemoveImageOptions>, None)
        .await
        .expect("remove the local copy");
}

/// The path of the test bed's Docker socket.
fn docker_socket(tb: &Testbed) -> PathBuf {
    PathBuf::from(
        tb.docker_endpoint
            .strip_prefix("unix://")
            .unwrap_or(&tb.docker_endpoint),
    )
}

/// A byte-level pass-through in front of Docker's socket that keeps what clients sent, so a
/// test can tell whether dockershim asked Docker something at all (a cache hit asks nothing).
pub struct DockerTap {
    /// `unix://` endpoint to give dockershim instead of Docker's.
    pub endpoint: String,
    sent: Arc<Mutex<Vec<u8>>>,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl DockerTap {
    pub async fn start(tb: &Testbed) -> DockerTap {
        let docker_path = docker_socket(tb);
        let dir = tempfile::Builder::new()
            .prefix("docker-tap-")
            .tempdir()
            .expect("tempdir");
        let sock = dir.path().join("docker.sock");
        let listener = tokio::net::UnixListener::bind(&sock).expect("bind tap");
        let sent = Arc::new(Mutex::new(Vec::new()));
        let log = sent.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = tokio::net::UnixStream::connect(&docker_path).await else {
                    continue;
                };
                let log = log.clone();
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let (mut cr, mut cw) = client.into_split();
                    let (mut ur, mut uw) = upstream.into_split();
                    let up = async {
                        let mut buf = vec![0u8; 64 * 1024];
                        while let Ok(n) = cr.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            log.lock().extend_from_slice(&buf[..n]);
                            if uw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        let _ = uw.shutdown().await;
                    };
                    let down = async {
                        let _ = tokio::io::copy(&mut ur, &mut cw).await;
                        let _ = cw.shutdown().await;
                    };
                    tokio::join!(up, down);
                });
            }
        });
        DockerTap {
            endpoint: format!("unix://{}", sock.display()),
            sent,
            _dir: dir,
            task,
        }
    }

    /// How many times clients have sent `needle` so far.
    pub fn count(&self, needle: &str) -> usize {
        let sent = self.sent.lock();
        sent.windows(needle.len())
            .filter(|w| *w == needle.as_bytes())
            .count()
    }
}

impl Drop for DockerTap {
    fn drop(&mut self) {
        self.task.abort();
    }
}
