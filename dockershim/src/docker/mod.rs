//! The Docker Engine adapter (upstream `libdocker`): the small set of Docker calls dockershim
//! makes, as the [`DockerApi`] trait, with the error type the gRPC mapping reads. The CRI
//! translation above only ever sees this trait: `client` implements it on the real Engine
//! through bollard ([`BollardDocker`]: connection, API-version negotiation, exec timeouts that
//! kill the process, the pull stall timeout and its progress reports (`progress`)), and, in
//! tests, `fake` in memory.

mod client;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fake;
pub mod progress;
mod transport;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bollard::auth::DockerCredentials;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerStatsResponse, ContainerSummary,
    ContainerUpdateBody, EventMessage, ImageInspect, ImageSummary, SystemInfo, SystemVersion,
};
use futures::Stream;
use node_common::pull_progress::PullPublisher;

pub use client::{BollardDocker, kill_process_tree, split_reference};
/// Which part of a container's output a log chunk came from (the CRI log's stream).
pub use node_common::crilog::LogStream;

/// A boxed stream of Docker results.
pub type DockerStream<T> = Pin<Box<dyn Stream<Item = Result<T, DockerError>> + Send>>;

/// What went wrong talking to Docker, kept close to Docker's own answer so that the gRPC
/// mapping (in `errors`) can pick the right code and keep Docker's message.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error("{message}")]
    NotFound { message: String },
    #[error("{message}")]
    Conflict { message: String },
    #[error("{message}")]
    BadRequest { message: String },
    #[error("docker: {message} (HTTP {status})")]
    Server { status: u16, message: String },
    #[error("docker: {0}")]
    Stream(String),
    #[error("docker: operation timed out after {0:?}")]
    Timeout(Duration),
    #[error("docker: cannot reach the Docker Engine: {0}")]
    Connection(String),
}

impl DockerError {
    /// True when Docker said the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, DockerError::NotFound { .. })
    }
}

/// The result of an exec run to completion.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i32,
}

/// One chunk of a container's output.
#[derive(Debug, Clone)]
pub struct LogChunk {
    pub stream: LogStream,
    pub bytes: bytes::Bytes,
}

/// The Docker calls dockershim needs. Every method maps to one Docker Engine API call, except
/// [`DockerApi::exec`] (create + start + inspect, with a timeout that kills the process) and
/// [`DockerApi::pull_image`] (a progress stream with a stall timeout).
pub trait DockerApi: Send + Sync + 'static {
    fn version(&self) -> impl Future<Output = Result<SystemVersion, DockerError>> + Send;
    fn info(&self) -> impl Future<Output = Result<SystemInfo, DockerError>> + Send;
    fn create_container(
        &self,
        name: &str,
        body: ContainerCreateBody,
    ) -> impl Future<Output = Result<String, DockerError>> + Send;
    fn start_container(&self, id: &str) -> impl Future<Output = Result<(), DockerError>> + Send;
    fn stop_container(
        &self,
        id: &str,
        timeout_secs: i64,
    ) -> impl Future<Output = Result<(), DockerError>> + Send;
    fn remove_container(&self, id: &str) -> impl Future<Output = Result<(), DockerError>> + Send;
    fn inspect_container(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<ContainerInspectResponse, DockerError>> + Send;
    fn list_containers(
        &self,
        filters: HashMap<String, Vec<String>>,
    ) -> impl Future<Output = Result<Vec<ContainerSummary>, DockerError>> + Send;
    fn update_container(
        &self,
        id: &str,
        update: ContainerUpdateBody,
    ) -> impl Future<Output = Result<(), DockerError>> + Send;
    fn stats(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<ContainerStatsResponse, DockerError>> + Send;
    fn exec(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Option<Duration>,
        max_output: usize,
    ) -> impl Future<Output = Result<ExecOutput, DockerError>> + Send;
    /// A container's output from `since` (unix seconds, 0 = from the start); with `follow`, the
    /// stream goes on until the container stops.
    fn logs(&self, id: &str, since: i64, follow: bool) -> DockerStream<LogChunk>;
    /// Container and image events, replaying those since `since` (unix seconds) first.
    fn events(&self, since: Option<i64>) -> DockerStream<EventMessage>;
    fn inspect_image(
        &self,
        reference: &str,
    ) -> impl Future<Output = Result<ImageInspect, DockerError>> + Send;
    fn list_images(&self) -> impl Future<Output = Result<Vec<ImageSummary>, DockerError>> + Send;
    /// Pulls `reference`, posting its progress to `progress` (the kubelet's, when it watches)
    /// as the stream tells it.
    fn pull_image(
        &self,
        reference: &str,
        auth: Option<DockerCredentials>,
        stall_timeout: Duration,
        progress: Option<PullPublisher>,
    ) -> impl Future<Output = Result<(), DockerError>> + Send;
    /// Removes (untags) `reference`; answers the ids of the images Docker deleted (none when
    /// the image only lost that reference and stays).
    fn remove_image(
        &self,
        reference: &str,
    ) -> impl Future<Output = Result<Vec<String>, DockerError>> + Send;
    /// Loads a `docker save` style archive.
    fn load_image(&self, archive: Vec<u8>) -> impl Future<Output = Result<(), DockerError>> + Send;
    /// Sizes of the writable layers of every container (the expensive `/system/df` call; the
    /// stats cache runs it in the background, never on a request path).
    fn container_sizes(
        &self,
    ) -> impl Future<Output = Result<HashMap<String, u64>, DockerError>> + Send;
}
