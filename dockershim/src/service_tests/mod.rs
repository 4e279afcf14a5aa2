//! Unit tests of the CRI service on the fake Docker Engine (`docker::fake`): each test builds
//! its own shim over its own `FakeDocker` with [`Fixture`] (root directory, log directories and
//! the containers' `resolv.conf` files in a temp directory; CNI only where a test sets it up,
//! with fake plugins), calls the gRPC face (`DockerService`, so the error -> status mapping is
//! part of what is checked) and asserts on the CRI answers and on the Docker calls the fake
//! recorded. No Docker, no network, milliseconds per test. The end-to-end tests in
//! `integration` run the same RPCs on a real Engine.

mod container;
mod image;
mod listing;
mod sandbox;
mod stats;
mod streaming;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use cri_proto::RuntimeService;
use cri_proto::runtime::v1 as cri;
use tokio_util::sync::CancellationToken;
use tonic::{Code, Request};

use crate::config::ShimConfig;
use crate::docker::fake::FakeDocker;
use crate::service::DockerService;
use crate::shim::Shim;

/// The pod infra image (cri-dockerd's default), present in every fixture's fake Engine.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.6";
/// The application image present in every fixture's fake Engine.
pub const BUSYBOX: &str = "busybox:1.36";

/// A shim on a fake Engine, and the temp directory it keeps its files in.
pub struct Fixture {
    pub docker: Arc<FakeDocker>,
    pub shim: Arc<Shim<FakeDocker>>,
    pub svc: DockerService<FakeDocker>,
    pub dir: tempfile::TempDir,
    /// Sets this fixture's pod uids apart: the shim's name registrar is process-wide (Docker
    /// names are global to the daemon), and the tests run in parallel in one process.
    serial: u32,
    stop: CancellationToken,
}

static FIXTURES: AtomicU32 = AtomicU32::new(0);

impl Drop for Fixture {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Fixture {
    /// Docker's default bridge (no CNI), checkpoints under `<tmp>/root`.
    pub async fn new() -> Self {
        Self::with(|_, _| {}).await
    }

    /// Like [`Fixture::new`], with the config adjusted by `tune` (given the temp directory)
    /// before the shim is built.
    pub async fn with(tune: impl FnOnce(&mut ShimConfig, &Path)) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let docker = Arc::new(FakeDocker::with_files(&dir.path().join("docker")));
        docker.add_image(PAUSE_IMAGE);
        docker.add_image(BUSYBOX);
        let mut config = ShimConfig::with_endpoint("unix:///nonexistent/dockershim.sock");
        config.root_directory = dir.path().join("root");
        config.sandbox_oom_score_adj = Some(-998);
        tune(&mut config, dir.path());
        let stop = CancellationToken::new();
        let shim = crate::build_shim_with(docker.clone(), config, stop.clone(), true)
            .await
            .expect("shim on the fake Engine");
        let svc = DockerService::new(shim.clone());
        Self {
            docker,
            shim,
            svc,
            dir,
            serial: FIXTURES.fetch_add(1, Ordering::Relaxed),
            stop,
        }
    }

    /// Where the shim keeps sandbox checkpoints.
    pub fn checkpoint_path(&self, sandbox_id: &str) -> PathBuf {
        self.dir
            .path()
            .join("root")
            .join("sandbox")
            .join(sandbox_id)
    }

    /// The uid of this fixture's pod `name`.
    pub fn uid(&self, name: &str) -> String {
        format!("uid-{name}-{}", self.serial)
    }

    /// A pod `name` in namespace `default` (uid [`Fixture::uid`], attempt 0) with a label, an
    /// annotation and a log directory in the temp directory.
    pub fn sandbox_config(&self, name: &str) -> cri::PodSandboxConfig {
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.to_string(),
                namespace: "default".to_string(),
                uid: self.uid(name),
                attempt: 0,
            }),
            hostname: name.to_string(),
            log_directory: self
                .dir
                .path()
                .join("pods")
                .join(name)
                .to_string_lossy()
                .into_owned(),
            labels: HashMap::from([
                ("app".to_string(), name.to_string()),
                ("io.kubernetes.pod.name".to_string(), name.to_string()),
            ]),
            annotations: HashMap::from([(
                "kubernetes.io/config.source".to_string(),
                "api".to_string(),
            )]),
            ..Default::default()
        }
    }

    /// A busybox container `name` logging to `<name>/0.log`.
    pub fn container_config(&self, name: &str) -> cri::ContainerConfig {
        cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: name.to_string(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: BUSYBOX.to_string(),
                ..Default::default()
            }),
            command: vec!["sh".to_string(), "-c".to_string()],
            args: vec!["sleep 1000".to_string()],
            log_path: format!("{name}/0.log"),
            labels: HashMap::from([("tier".to_string(), name.to_string())]),
            annotations: HashMap::from([(
                "io.kubernetes.container.hash".to_string(),
                "ad01c60e".to_string(),
            )]),
            ..Default::default()
        }
    }

    pub async fn run_sandbox(&self, config: cri::PodSandboxConfig) -> String {
        self.svc
            .run_pod_sandbox(Request::new(cri::RunPodSandboxRequest {
                config: Some(config),
                ..Default::default()
            }))
            .await
            .expect("RunPodSandbox")
            .into_inner()
            .pod_sandbox_id
    }

    pub async fn create_container(
        &self,
        sandbox_id: &str,
        sandbox: &cri::PodSandboxConfig,
        config: cri::ContainerConfig,
    ) -> Result<String, tonic::Status> {
        self.svc
            .create_container(Request::new(cri::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.to_string(),
                config: Some(config),
                sandbox_config: Some(sandbox.clone()),
            }))
            .await
            .map(|r| r.into_inner().container_id)
    }

    pub async fn start_container(&self, id: &str) -> Result<(), tonic::Status> {
        self.svc
            .start_container(Request::new(cri::StartContainerRequest {
                container_id: id.to_string(),
            }))
            .await
            .map(|_| ())
    }

    /// A running sandbox `pod` with a running container `ctr`: (sandbox id, container id).
    pub async fn pod_with_container(&self, pod: &str, ctr: &str) -> (String, String) {
        let sandbox = self.sandbox_config(pod);
        let sandbox_id = self.run_sandbox(sandbox.clone()).await;
        let id = self
            .create_container(&sandbox_id, &sandbox, self.container_config(ctr))
            .await
            .expect("CreateContainer");
        self.start_container(&id).await.expect("StartContainer");
        (sandbox_id, id)
    }

    /// Something changed behind the shim's back (the test drove the fake Engine directly):
    /// the listing cache must not answer from before it. In production the Engine's event
    /// would do this a moment later.
    pub fn engine_changed(&self) {
        self.shim.listing.invalidate();
    }
}

/// The gRPC code of a failed call, or a panic naming what succeeded.
pub fn code_of<T: std::fmt::Debug>(r: Result<T, tonic::Status>) -> Code {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(s) => s.code(),
    }
}

#[tokio::test]
async fn the_fixture_builds_a_shim_from_the_engines_answers() {
    let fx = Fixture::new().await;
    assert_eq!(fx.shim.docker_version, crate::docker::fake::FAKE_VERSION);
    assert_eq!(fx.shim.cgroup_driver, "cgroupfs");
    assert_eq!(fx.shim.sandbox_oom_score_adj, -998);
    assert_eq!(fx.shim.oom_score_adj_floor, None);
    assert!(fx.dir.path().join("root").join("sandbox").is_dir());
    let calls = fx.docker.calls();
    assert_eq!(&calls[..2], ["version", "info"]);
}
