//! The kubelet's port to the container runtime (upstream `k8s.io/cri-api/pkg/apis`
//! `RuntimeService` and `ImageManagerService`, the `internalapi` every kubelet manager holds).
//! Every CRI call the kubelet makes goes through these two traits, by name: [`remote`] speaks
//! them over gRPC to a CRI socket (upstream `pkg/kubelet/cri/remote`), [`fake`] keeps pods,
//! containers and images in memory for unit tests (upstream `cri-api/pkg/apis/testing`) and
//! for hollow nodes, and [`server`] serves either port over gRPC (the `fake-runtime` binary).
//!
//! Ports layer: imports only [`crate::metrics`] (the remote client counts its calls).

pub mod fake;
pub mod remote;
pub mod server;

use std::time::Duration;

use async_trait::async_trait;
use cri_proto::runtime::v1 as cri;
use futures::stream::BoxStream;

pub use remote::{RemoteImageService, RemoteRuntimeService};

/// A failed runtime call.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The runtime answered with an error.
    #[error("{op}: {}", status.message())]
    Rpc {
        /// The CRI operation.
        op: &'static str,
        /// Its status.
        status: tonic::Status,
    },
    /// The runtime did not answer in time.
    #[error("{op}: timed out after {timeout:?}")]
    Timeout {
        /// The CRI operation.
        op: &'static str,
        /// The deadline.
        timeout: Duration,
    },
    /// Could not connect.
    #[error("connecting to the runtime: {0}")]
    Connect(#[from] cri_proto::TransportError),
}

impl RuntimeError {
    /// The gRPC code of a runtime's answer (`None` for time-outs and connection errors).
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            RuntimeError::Rpc { status, .. } => Some(status.code()),
            _ => None,
        }
    }
}

/// What a runtime call returns.
pub type Result<T> = std::result::Result<T, RuntimeError>;

/// The runtime's container event stream (CRI `GetContainerEvents`).
pub type ContainerEventStream = BoxStream<'static, Result<cri::ContainerEventResponse>>;

/// The CRI `RuntimeService` as the kubelet uses it (upstream `internalapi.RuntimeService`).
#[async_trait]
pub trait RuntimeService: Send + Sync + std::fmt::Debug {
    /// CRI `Version`.
    async fn version(&self) -> Result<cri::VersionResponse>;
    /// CRI `RunPodSandbox`: the new sandbox's id.
    async fn run_pod_sandbox(&self, config: cri::PodSandboxConfig, handler: &str)
    -> Result<String>;
    /// CRI `StopPodSandbox`.
    async fn stop_pod_sandbox(&self, id: &str) -> Result<()>;
    /// CRI `RemovePodSandbox`.
    async fn remove_pod_sandbox(&self, id: &str) -> Result<()>;
    /// CRI `PodSandboxStatus`.
    async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatus>;
    /// CRI `ListPodSandbox`.
    async fn list_pod_sandbox(
        &self,
        filter: Option<cri::PodSandboxFilter>,
    ) -> Result<Vec<cri::PodSandbox>>;
    /// CRI `CreateContainer`: the new container's id.
    async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox_config: cri::PodSandboxConfig,
    ) -> Result<String>;
    /// CRI `StartContainer`.
    async fn start_container(&self, id: &str) -> Result<()>;
    /// CRI `StopContainer` with a grace period in seconds.
    async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<()>;
    /// CRI `RemoveContainer`.
    async fn remove_container(&self, id: &str) -> Result<()>;
    /// CRI `ListContainers`.
    async fn list_containers(
        &self,
        filter: Option<cri::ContainerFilter>,
    ) -> Result<Vec<cri::Container>>;
    /// CRI `ContainerStatus`.
    async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus>;
    /// CRI `ReopenContainerLog`.
    async fn reopen_container_log(&self, id: &str) -> Result<()>;
    /// CRI `ExecSync` with the command's own deadline.
    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<cri::ExecSyncResponse>;
    /// CRI `Exec`: the streaming URL.
    async fn exec(&self, req: cri::ExecRequest) -> Result<String>;
    /// CRI `Attach`: the streaming URL.
    async fn attach(&self, req: cri::AttachRequest) -> Result<String>;
    /// CRI `PortForward`: the streaming URL.
    async fn port_forward(&self, req: cri::PortForwardRequest) -> Result<String>;
    /// CRI `ListContainerStats`.
    async fn list_container_stats(
        &self,
        filter: Option<cri::ContainerStatsFilter>,
    ) -> Result<Vec<cri::ContainerStats>>;
    /// CRI `ListPodSandboxStats` (the pods' network; the kubelet asks for nothing else of it).
    async fn list_pod_sandbox_stats(
        &self,
        filter: Option<cri::PodSandboxStatsFilter>,
    ) -> Result<Vec<cri::PodSandboxStats>>;
    /// CRI `RuntimeConfig`.
    async fn runtime_config(&self) -> Result<cri::RuntimeConfigResponse>;
    /// CRI `GetContainerEvents`.
    async fn get_container_events(&self) -> Result<ContainerEventStream>;
}

/// The CRI `ImageService` as the kubelet uses it (upstream `internalapi.ImageManagerService`).
#[async_trait]
pub trait ImageManagerService: Send + Sync + std::fmt::Debug {
    /// CRI `ListImages`.
    async fn list_images(&self, filter: Option<cri::ImageFilter>) -> Result<Vec<cri::Image>>;
    /// CRI `ImageStatus`: `None` when the image is not present.
    async fn image_status(&self, image: cri::ImageSpec) -> Result<Option<cri::Image>>;
    /// CRI `PullImage` with `auth`: the image reference.
    async fn pull_image(
        &self,
        image: cri::ImageSpec,
        auth: Option<cri::AuthConfig>,
        sandbox_config: Option<cri::PodSandboxConfig>,
    ) -> Result<String>;
    /// CRI `RemoveImage`.
    async fn remove_image(&self, image: cri::ImageSpec) -> Result<()>;
    /// CRI `ImageFsInfo`.
    async fn image_fs_info(&self) -> Result<Vec<cri::FilesystemUsage>>;
}
