//! Serving a kubelet-side runtime over CRI: [`CriServer`] answers the `runtime.v1`
//! RuntimeService and ImageService gRPC calls with any implementation of this module's two
//! ports ([`RuntimeService`], [`ImageManagerService`]) — in practice the in-memory
//! [`fake`](super::fake), which the `fake-runtime` binary serves on a socket so that any
//! kubelet (this one, the Go kubelet, crictl) can run on it without containers, as upstream
//! kubemark's hollow nodes do in-process.
//!
//! The runtime-level calls the ports do not carry are answered here: `Status` (ready),
//! `UpdateRuntimeConfig` (accepted), the single-object stats calls (from the list calls), and
//! `UpdateContainerResources` (accepted when the container exists). An error from the port
//! keeps its gRPC status; a time-out is `DeadlineExceeded`.

use std::sync::Arc;

use cri_proto::runtime::v1 as cri;
use futures::StreamExt;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use super::{ImageManagerService, RuntimeError, RuntimeService};

/// The gRPC face of a runtime implementing both ports.
#[derive(Debug)]
pub struct CriServer<T> {
    inner: Arc<T>,
}

impl<T> Clone for CriServer<T> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> CriServer<T>
where
    T: RuntimeService + ImageManagerService + 'static,
{
    /// Serves `inner`.
    pub fn new(inner: Arc<T>) -> Self {
        Self { inner }
    }

    /// A router with both services, ready for [`cri_proto::serve_with_listener`].
    pub fn router(self) -> tonic::transport::server::Router {
        tonic::transport::Server::builder()
            .add_service(cri_proto::runtime_server(self.clone()))
            .add_service(cri_proto::image_server(self))
    }
}

/// The status a port's error is answered with.
fn status(e: RuntimeError) -> Status {
    match e {
        RuntimeError::Rpc { status, .. } => status,
        RuntimeError::Timeout { op, timeout } => {
            Status::deadline_exceeded(format!("{op}: timed out after {timeout:?}"))
        }
        RuntimeError::Connect(e) => Status::unavailable(e.to_string()),
    }
}

type R<T> = Result<Response<T>, Status>;

fn ok<T>(v: T) -> R<T> {
    Ok(Response::new(v))
}

fn ready(kind: &str) -> cri::RuntimeCondition {
    cri::RuntimeCondition {
        r#type: kind.to_string(),
        status: true,
        ..Default::default()
    }
}

#[tonic::async_trait]
impl<T> cri_proto::RuntimeService for CriServer<T>
where
    T: RuntimeService + ImageManagerService + 'static,
{
    async fn version(&self, _req: Request<cri::VersionRequest>) -> R<cri::VersionResponse> {
        ok(RuntimeService::version(&*self.inner)
            .await
            .map_err(status)?)
    }

    async fn status(&self, _req: Request<cri::StatusRequest>) -> R<cri::StatusResponse> {
        ok(cri::StatusResponse {
            status: Some(cri::RuntimeStatus {
                conditions: vec![ready("RuntimeReady"), ready("NetworkReady")],
            }),
            info: Default::default(),
            runtime_handlers: vec![cri::RuntimeHandler {
                name: String::new(),
                features: Some(cri::RuntimeHandlerFeatures::default()),
            }],
            features: Some(cri::RuntimeFeatures::default()),
        })
    }

    async fn runtime_config(
        &self,
        _req: Request<cri::RuntimeConfigRequest>,
    ) -> R<cri::RuntimeConfigResponse> {
        ok(self.inner.runtime_config().await.map_err(status)?)
    }

    async fn update_runtime_config(
        &self,
        _req: Request<cri::UpdateRuntimeConfigRequest>,
    ) -> R<cri::UpdateRuntimeConfigResponse> {
        ok(cri::UpdateRuntimeConfigResponse {})
    }

    async fn run_pod_sandbox(
        &self,
        req: Request<cri::RunPodSandboxRequest>,
    ) -> R<cri::RunPodSandboxResponse> {
        let r = req.into_inner();
        let config = r
            .config
            .ok_or_else(|| Status::invalid_argument("PodSandboxConfig is nil"))?;
        let pod_sandbox_id = self
            .inner
            .run_pod_sandbox(config, &r.runtime_handler)
            .await
            .map_err(status)?;
        ok(cri::RunPodSandboxResponse { pod_sandbox_id })
    }

    async fn stop_pod_sandbox(
        &self,
        req: Request<cri::StopPodSandboxRequest>,
    ) -> R<cri::StopPodSandboxResponse> {
        self.inner
            .stop_pod_sandbox(&req.into_inner().pod_sandbox_id)
            .await
            .map_err(status)?;
        ok(cri::StopPodSandboxResponse {})
    }

    async fn remove_pod_sandbox(
        &self,
        req: Request<cri::RemovePodSandboxRequest>,
    ) -> R<cri::RemovePodSandboxResponse> {
        self.inner
            .remove_pod_sandbox(&req.into_inner().pod_sandbox_id)
            .await
            .map_err(status)?;
        ok(cri::RemovePodSandboxResponse {})
    }

    async fn pod_sandbox_status(
        &self,
        req: Request<cri::PodSandboxStatusRequest>,
    ) -> R<cri::PodSandboxStatusResponse> {
        let s = self
            .inner
            .pod_sandbox_status(&req.into_inner().pod_sandbox_id)
            .await
            .map_err(status)?;
        ok(cri::PodSandboxStatusResponse {
            status: Some(s),
            ..Default::default()
        })
    }

    async fn list_pod_sandbox(
        &self,
        req: Request<cri::ListPodSandboxRequest>,
    ) -> R<cri::ListPodSandboxResponse> {
        let items = self
            .inner
            .list_pod_sandbox(req.into_inner().filter)
            .await
            .map_err(status)?;
        ok(cri::ListPodSandboxResponse { items })
    }

    async fn create_container(
        &self,
        req: Request<cri::CreateContainerRequest>,
    ) -> R<cri::CreateContainerResponse> {
        let r = req.into_inner();
        let config = r
            .config
            .ok_or_else(|| Status::invalid_argument("ContainerConfig is nil"))?;
        let container_id = self
            .inner
            .create_container(
                &r.pod_sandbox_id,
                config,
                r.sandbox_config.unwrap_or_default(),
            )
            .await
            .map_err(status)?;
        ok(cri::CreateContainerResponse { container_id })
    }

    async fn start_container(
        &self,
        req: Request<cri::StartContainerRequest>,
    ) -> R<cri::StartContainerResponse> {
        self.inner
            .start_container(&req.into_inner().container_id)
            .await
            .map_err(status)?;
        ok(cri::StartContainerResponse {})
    }

    async fn stop_container(
        &self,
        req: Request<cri::StopContainerRequest>,
    ) -> R<cri::StopContainerResponse> {
        let r = req.into_inner();
        self.inner
            .stop_container(&r.container_id, r.timeout)
            .await
            .map_err(status)?;
        ok(cri::StopContainerResponse {})
    }

    async fn remove_container(
        &self,
        req: Request<cri::RemoveContainerRequest>,
    ) -> R<cri::RemoveContainerResponse> {
        self.inner
            .remove_container(&req.into_inner().container_id)
            .await
            .map_err(status)?;
        ok(cri::RemoveContainerResponse {})
    }

    async fn list_containers(
        &self,
        req: Request<cri::ListContainersRequest>,
    ) -> R<cri::ListContainersResponse> {
        let containers = self
            .inner
            .list_containers(req.into_inner().filter)
            .await
            .map_err(status)?;
        ok(cri::ListContainersResponse { containers })
    }

    async fn container_status(
        &self,
        req: Request<cri::ContainerStatusRequest>,
    ) -> R<cri::ContainerStatusResponse> {
        let s = self
            .inner
            .container_status(&req.into_inner().container_id)
            .await
            .map_err(status)?;
        ok(cri::ContainerStatusResponse {
            status: Some(s),
            ..Default::default()
        })
    }

    async fn update_container_resources(
        &self,
        req: Request<cri::UpdateContainerResourcesRequest>,
    ) -> R<cri::UpdateContainerResourcesResponse> {
        self.inner
            .container_status(&req.into_inner().container_id)
            .await
            .map_err(status)?;
        ok(cri::UpdateContainerResourcesResponse {})
    }

    async fn reopen_container_log(
        &self,
        req: Request<cri::ReopenContainerLogRequest>,
    ) -> R<cri::ReopenContainerLogResponse> {
        self.inner
            .reopen_container_log(&req.into_inner().container_id)
            .await
            .map_err(status)?;
        ok(cri::ReopenContainerLogResponse {})
    }

    async fn exec_sync(&self, req: Request<cri::ExecSyncRequest>) -> R<cri::ExecSyncResponse> {
        let r = req.into_inner();
        let timeout = std::time::Duration::from_secs(u64::try_from(r.timeout).unwrap_or(0));
        ok(self
            .inner
            .exec_sync(&r.container_id, r.cmd, timeout)
            .await
            .map_err(status)?)
    }

    async fn exec(&self, req: Request<cri::ExecRequest>) -> R<cri::ExecResponse> {
        let url = self.inner.exec(req.into_inner()).await.map_err(status)?;
        ok(cri::ExecResponse { url })
    }

    async fn attach(&self, req: Request<cri::AttachRequest>) -> R<cri::AttachResponse> {
        let url = self.inner.attach(req.into_inner()).await.map_err(status)?;
        ok(cri::AttachResponse { url })
    }

    async fn port_forward(
        &self,
        req: Request<cri::PortForwardRequest>,
    ) -> R<cri::PortForwardResponse> {
        let url = self
            .inner
            .port_forward(req.into_inner())
            .await
            .map_err(status)?;
        ok(cri::PortForwardResponse { url })
    }

    async fn container_stats(
        &self,
        req: Request<cri::ContainerStatsRequest>,
    ) -> R<cri::ContainerStatsResponse> {
        let id = req.into_inner().container_id;
        let filter = cri::ContainerStatsFilter {
            id: id.clone(),
            ..Default::default()
        };
        let stats = self
            .inner
            .list_container_stats(Some(filter))
            .await
            .map_err(status)?
            .into_iter()
            .next()
            .ok_or_else(|| Status::not_found(format!("container {id} not found")))?;
        ok(cri::ContainerStatsResponse { stats: Some(stats) })
    }

    async fn list_container_stats(
        &self,
        req: Request<cri::ListContainerStatsRequest>,
    ) -> R<cri::ListContainerStatsResponse> {
        let stats = self
            .inner
            .list_container_stats(req.into_inner().filter)
            .await
            .map_err(status)?;
        ok(cri::ListContainerStatsResponse { stats })
    }

    async fn pod_sandbox_stats(
        &self,
        req: Request<cri::PodSandboxStatsRequest>,
    ) -> R<cri::PodSandboxStatsResponse> {
        let id = req.into_inner().pod_sandbox_id;
        let filter = cri::PodSandboxStatsFilter {
            id: id.clone(),
            ..Default::default()
        };
        let stats = self
            .inner
            .list_pod_sandbox_stats(Some(filter))
            .await
            .map_err(status)?
            .into_iter()
            .next()
            .ok_or_else(|| Status::not_found(format!("sandbox {id} not found")))?;
        ok(cri::PodSandboxStatsResponse { stats: Some(stats) })
    }

    async fn list_pod_sandbox_stats(
        &self,
        req: Request<cri::ListPodSandboxStatsRequest>,
    ) -> R<cri::ListPodSandboxStatsResponse> {
        let stats = self
            .inner
            .list_pod_sandbox_stats(req.into_inner().filter)
            .await
            .map_err(status)?;
        ok(cri::ListPodSandboxStatsResponse { stats })
    }

    async fn get_container_events(
        &self,
        _req: Request<cri::GetEventsRequest>,
    ) -> R<BoxStream<cri::ContainerEventResponse>> {
        let events = self.inner.get_container_events().await.map_err(status)?;
        ok(Box::pin(events.map(|r| r.map_err(status))))
    }
}

#[tonic::async_trait]
impl<T> cri_proto::ImageService for CriServer<T>
where
    T: RuntimeService + ImageManagerService + 'static,
{
    async fn list_images(
        &self,
        req: Request<cri::ListImagesRequest>,
    ) -> R<cri::ListImagesResponse> {
        let images = self
            .inner
            .list_images(req.into_inner().filter)
            .await
            .map_err(status)?;
        ok(cri::ListImagesResponse { images })
    }

    async fn image_status(
        &self,
        req: Request<cri::ImageStatusRequest>,
    ) -> R<cri::ImageStatusResponse> {
        let image = req
            .into_inner()
            .image
            .ok_or_else(|| Status::invalid_argument("ImageSpec is nil"))?;
        let image = self.inner.image_status(image).await.map_err(status)?;
        ok(cri::ImageStatusResponse {
            image,
            ..Default::default()
        })
    }

    async fn pull_image(&self, req: Request<cri::PullImageRequest>) -> R<cri::PullImageResponse> {
        let r = req.into_inner();
        let image = r
            .image
            .ok_or_else(|| Status::invalid_argument("ImageSpec is nil"))?;
        let image_ref = self
            .inner
            .pull_image(image, r.auth, r.sandbox_config)
            .await
            .map_err(status)?;
        ok(cri::PullImageResponse { image_ref })
    }

    async fn remove_image(
        &self,
        req: Request<cri::RemoveImageRequest>,
    ) -> R<cri::RemoveImageResponse> {
        let image = req
            .into_inner()
            .image
            .ok_or_else(|| Status::invalid_argument("ImageSpec is nil"))?;
        self.inner.remove_image(image).await.map_err(status)?;
        ok(cri::RemoveImageResponse {})
    }

    async fn image_fs_info(
        &self,
        _req: Request<cri::ImageFsInfoRequest>,
    ) -> R<cri::ImageFsInfoResponse> {
        let image_filesystems = self.inner.image_fs_info().await.map_err(status)?;
        ok(cri::ImageFsInfoResponse {
            image_filesystems,
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::fake::FakeRuntime;
    use crate::cri::{RemoteImageService, RemoteRuntimeService};
    use tokio_util::sync::CancellationToken;

    /// The fake served on a socket answers the kubelet's own remote client: a sandbox and a
    /// container made over gRPC are the fake's, errors keep their codes.
    #[tokio::test]
    async fn the_served_fake_answers_the_remote_client() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sock = dir.path().join("fake.sock");
        let fake = Arc::new(FakeRuntime::new());
        let listener = cri_proto::bind_unix(&sock).await.expect("bind");
        let cancel = CancellationToken::new();
        let server = tokio::spawn(cri_proto::serve_with_listener(
            CriServer::new(Arc::clone(&fake)).router(),
            listener,
            cancel.clone(),
        ));
        let endpoint = format!("unix://{}", sock.display());
        let timeout = std::time::Duration::from_secs(5);
        let ch = cri_proto::connect(&endpoint, timeout)
            .await
            .expect("connect");
        let metrics = Arc::new(crate::metrics::Metrics::default());
        let rt = RemoteRuntimeService::new(ch.clone(), timeout, Arc::clone(&metrics));
        let img = RemoteImageService::new(ch, timeout, metrics);

        let v = RuntimeService::version(&rt).await.expect("version");
        assert_eq!(v.runtime_name, "fake");
        img.pull_image(
            cri::ImageSpec {
                image: "busybox".into(),
                ..Default::default()
            },
            None,
            None,
        )
        .await
        .expect("pull");
        let config = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "p".into(),
                namespace: "ns".into(),
                uid: "u".into(),
                attempt: 0,
            }),
            ..Default::default()
        };
        let sandbox = rt
            .run_pod_sandbox(config.clone(), "")
            .await
            .expect("sandbox");
        let c = rt
            .create_container(
                &sandbox,
                cri::ContainerConfig {
                    metadata: Some(cri::ContainerMetadata {
                        name: "c".into(),
                        attempt: 0,
                    }),
                    image: Some(cri::ImageSpec {
                        image: "busybox".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                config,
            )
            .await
            .expect("create");
        rt.start_container(&c).await.expect("start");
        assert_eq!(fake.sandboxes().len(), 1);
        assert_eq!(
            fake.containers()[0].1.state,
            cri::ContainerState::ContainerRunning as i32
        );
        let missing = rt.container_status("nope").await.expect_err("missing");
        assert_eq!(missing.code(), Some(tonic::Code::NotFound));

        cancel.cancel();
        let _ = server.await;
    }
}
