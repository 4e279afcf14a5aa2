//! The gRPC face of dockershim: [`DockerService`] implements the CRI RuntimeService and
//! ImageService traits by handing each request to the [`Shim`] and converting its errors to
//! gRPC statuses (in `errors`, the one place codes are chosen). The runtime-level RPCs that have
//! no module of their own (Version, Status, RuntimeConfig, UpdateRuntimeConfig) live here.
//! RPCs not listed answer `Unimplemented` through the generated default stubs.

use std::sync::Arc;

use cri_proto::runtime::v1 as cri;
use cri_proto::{ImageService, RuntimeService};
use futures::StreamExt;
use tokio_stream::wrappers::BroadcastStream;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use crate::docker::DockerApi;
use crate::shim::Shim;

/// The CRI API version dockershim speaks.
pub const CRI_VERSION: &str = "0.1.0";
/// The runtime name reported by Version (as upstream).
pub const RUNTIME_NAME: &str = "docker";

/// RuntimeService + ImageService on a [`Shim`].
pub struct DockerService<D: DockerApi> {
    shim: Arc<Shim<D>>,
}

impl<D: DockerApi> Clone for DockerService<D> {
    fn clone(&self) -> Self {
        Self {
            shim: self.shim.clone(),
        }
    }
}

impl<D: DockerApi> DockerService<D> {
    pub fn new(shim: Arc<Shim<D>>) -> Self {
        Self { shim }
    }

    pub fn shim(&self) -> &Arc<Shim<D>> {
        &self.shim
    }

    /// Passes on the result of an RPC that may have changed containers, after marking the
    /// listing cache stale (whether it succeeded or not), so the caller lists what it just did.
    fn mutated<T>(&self, r: T) -> T {
        self.shim.listing.invalidate();
        r
    }
}

type R<T> = Result<Response<T>, Status>;

fn ok<T>(v: T) -> R<T> {
    Ok(Response::new(v))
}

#[tonic::async_trait]
impl<D: DockerApi> RuntimeService for DockerService<D> {
    async fn version(&self, _req: Request<cri::VersionRequest>) -> R<cri::VersionResponse> {
        ok(cri::VersionResponse {
            version: CRI_VERSION.to_string(),
            runtime_name: RUNTIME_NAME.to_string(),
            runtime_version: self.shim.docker_version.clone(),
            runtime_api_version: "v1".to_string(),
        })
    }

    async fn status(&self, req: Request<cri::StatusRequest>) -> R<cri::StatusResponse> {
        let runtime = match self.shim.docker.version().await {
            Ok(_) => cri::RuntimeCondition {
                r#type: "RuntimeReady".to_string(),
                status: true,
                ..Default::default()
            },
            Err(e) => cri::RuntimeCondition {
                r#type: "RuntimeReady".to_string(),
                status: false,
                reason: "DockerDaemonNotReady".to_string(),
                message: format!("docker: failed to get docker version: {e}"),
            },
        };
        let network = match &self.shim.network {
            None => cri::RuntimeCondition {
                r#type: "NetworkReady".to_string(),
                status: true,
                ..Default::default()
            },
            Some(net) => match net.status() {
                Ok(()) => cri::RuntimeCondition {
                    r#type: "NetworkReady".to_string(),
                    status: true,
                    ..Default::default()
                },
                Err(reason) => cri::RuntimeCondition {
                    r#type: "NetworkReady".to_string(),
                    status: false,
                    reason: "NetworkPluginNotReady".to_string(),
                    message: format!("docker: network plugin is not ready: {reason}"),
                },
            },
        };
        let mut info = std::collections::HashMap::new();
        if req.into_inner().verbose {
            info.insert(
                "config".to_string(),
                serde_json::json!({
                    "podInfraContainerImage": self.shim.config.pod_infra_image,
                    "networkPlugin": if self.shim.network.is_some() { "cni" } else { "" },
                    "cniNetwork": self.shim.network_name(),
                    "rootDirectory": self.shim.config.root_directory,
                    "sandboxOomScoreAdj": self.shim.sandbox_oom_score_adj,
                    "podCIDR": *self.shim.pod_cidr.lock(),
                })
                .to_string(),
            );
        }
        ok(cri::StatusResponse {
            status: Some(cri::RuntimeStatus {
                conditions: vec![runtime, network],
            }),
            info,
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
        let driver = if self.shim.cgroup_driver == "systemd" {
            cri::CgroupDriver::Systemd
        } else {
            cri::CgroupDriver::Cgroupfs
        };
        ok(cri::RuntimeConfigResponse {
            linux: Some(cri::LinuxRuntimeConfiguration {
                cgroup_driver: driver as i32,
            }),
        })
    }

    async fn update_runtime_config(
        &self,
        req: Request<cri::UpdateRuntimeConfigRequest>,
    ) -> R<cri::UpdateRuntimeConfigResponse> {
        if let Some(cidr) = req
            .into_inner()
            .runtime_config
            .and_then(|c| c.network_config)
            .map(|n| n.pod_cidr)
        {
            *self.shim.pod_cidr.lock() = cidr;
        }
        ok(cri::UpdateRuntimeConfigResponse {})
    }

    async fn run_pod_sandbox(
        &self,
        req: Request<cri::RunPodSandboxRequest>,
    ) -> R<cri::RunPodSandboxResponse> {
        let pod_sandbox_id = self.mutated(self.shim.run_pod_sandbox(req.into_inner()).await)?;
        ok(cri::RunPodSandboxResponse { pod_sandbox_id })
    }

    async fn stop_pod_sandbox(
        &self,
        req: Request<cri::StopPodSandboxRequest>,
    ) -> R<cri::StopPodSandboxResponse> {
        let r = self
            .shim
            .stop_pod_sandbox(&req.into_inner().pod_sandbox_id)
            .await;
        self.mutated(r)?;
        ok(cri::StopPodSandboxResponse {})
    }

    async fn remove_pod_sandbox(
        &self,
        req: Request<cri::RemovePodSandboxRequest>,
    ) -> R<cri::RemovePodSandboxResponse> {
        let r = self
            .shim
            .remove_pod_sandbox(&req.into_inner().pod_sandbox_id)
            .await;
        self.mutated(r)?;
        ok(cri::RemovePodSandboxResponse {})
    }

    async fn pod_sandbox_status(
        &self,
        req: Request<cri::PodSandboxStatusRequest>,
    ) -> R<cri::PodSandboxStatusResponse> {
        let r = req.into_inner();
        ok(self
            .shim
            .pod_sandbox_status(&r.pod_sandbox_id, r.verbose)
            .await?)
    }

    async fn list_pod_sandbox(
        &self,
        req: Request<cri::ListPodSandboxRequest>,
    ) -> R<cri::ListPodSandboxResponse> {
        let items = self.shim.list_pod_sandbox(req.into_inner().filter).await?;
        ok(cri::ListPodSandboxResponse { items })
    }

    async fn create_container(
        &self,
        req: Request<cri::CreateContainerRequest>,
    ) -> R<cri::CreateContainerResponse> {
        let container_id = self.mutated(self.shim.create_container(req.into_inner()).await)?;
        ok(cri::CreateContainerResponse { container_id })
    }

    async fn start_container(
        &self,
        req: Request<cri::StartContainerRequest>,
    ) -> R<cri::StartContainerResponse> {
        let r = self
            .shim
            .start_container(&req.into_inner().container_id)
            .await;
        self.mutated(r)?;
        ok(cri::StartContainerResponse {})
    }

    async fn stop_container(
        &self,
        req: Request<cri::StopContainerRequest>,
    ) -> R<cri::StopContainerResponse> {
        let r = req.into_inner();
        self.mutated(self.shim.stop_container(&r.container_id, r.timeout).await)?;
        ok(cri::StopContainerResponse {})
    }

    async fn remove_container(
        &self,
        req: Request<cri::RemoveContainerRequest>,
    ) -> R<cri::RemoveContainerResponse> {
        let r = self
            .shim
            .remove_container(&req.into_inner().container_id)
            .await;
        self.mutated(r)?;
        ok(cri::RemoveContainerResponse {})
    }

    async fn list_containers(
        &self,
        req: Request<cri::ListContainersRequest>,
    ) -> R<cri::ListContainersResponse> {
        let containers = self.shim.list_containers(req.into_inner().filter).await?;
        ok(cri::ListContainersResponse { containers })
    }

    async fn container_status(
        &self,
        req: Request<cri::ContainerStatusRequest>,
    ) -> R<cri::ContainerStatusResponse> {
        let r = req.into_inner();
        ok(self
            .shim
            .container_status(&r.container_id, r.verbose)
            .await?)
    }

    async fn update_container_resources(
        &self,
        req: Request<cri::UpdateContainerResourcesRequest>,
    ) -> R<cri::UpdateContainerResourcesResponse> {
        self.shim
            .update_container_resources(req.into_inner())
            .await?;
        ok(cri::UpdateContainerResourcesResponse {})
    }

    async fn checkpoint_container(
        &self,
        _req: Request<cri::CheckpointContainerRequest>,
    ) -> R<cri::CheckpointContainerResponse> {
        Err(Status::unimplemented(
            "CheckpointContainer is not supported by dockershim yet: it needs Docker's experimental checkpoint API (CRIU)",
        ))
    }

    /// Best effort, as upstream: the pod-level cgroup belongs to the kubelet, and Docker has no
    /// pod object to resize, so there is nothing to apply beyond checking the sandbox exists.
    async fn update_pod_sandbox_resources(
        &self,
        req: Request<cri::UpdatePodSandboxResourcesRequest>,
    ) -> R<cri::UpdatePodSandboxResourcesResponse> {
        self.shim
            .inspect_sandbox(&req.into_inner().pod_sandbox_id)
            .await?;
        ok(cri::UpdatePodSandboxResourcesResponse {})
    }

    async fn reopen_container_log(
        &self,
        req: Request<cri::ReopenContainerLogRequest>,
    ) -> R<cri::ReopenContainerLogResponse> {
        self.shim
            .reopen_container_log(&req.into_inner().container_id)
            .await?;
        ok(cri::ReopenContainerLogResponse {})
    }

    async fn exec_sync(&self, req: Request<cri::ExecSyncRequest>) -> R<cri::ExecSyncResponse> {
        ok(self.shim.exec_sync(req.into_inner()).await?)
    }

    async fn exec(&self, req: Request<cri::ExecRequest>) -> R<cri::ExecResponse> {
        ok(self.shim.exec(req.into_inner()).await?)
    }

    async fn attach(&self, req: Request<cri::AttachRequest>) -> R<cri::AttachResponse> {
        ok(self.shim.attach(req.into_inner()).await?)
    }

    async fn port_forward(
        &self,
        req: Request<cri::PortForwardRequest>,
    ) -> R<cri::PortForwardResponse> {
        ok(self.shim.port_forward(req.into_inner()).await?)
    }

    async fn container_stats(
        &self,
        req: Request<cri::ContainerStatsRequest>,
    ) -> R<cri::ContainerStatsResponse> {
        let stats = self
            .shim
            .container_stats(&req.into_inner().container_id)
            .await?;
        ok(cri::ContainerStatsResponse { stats: Some(stats) })
    }

    async fn list_container_stats(
        &self,
        req: Request<cri::ListContainerStatsRequest>,
    ) -> R<cri::ListContainerStatsResponse> {
        let stats = self
            .shim
            .list_container_stats(req.into_inner().filter)
            .await?;
        ok(cri::ListContainerStatsResponse { stats })
    }

    async fn pod_sandbox_stats(
        &self,
        req: Request<cri::PodSandboxStatsRequest>,
    ) -> R<cri::PodSandboxStatsResponse> {
        let stats = self
            .shim
            .pod_sandbox_stats(&req.into_inner().pod_sandbox_id)
            .await?;
        ok(cri::PodSandboxStatsResponse { stats: Some(stats) })
    }

    async fn list_pod_sandbox_stats(
        &self,
        req: Request<cri::ListPodSandboxStatsRequest>,
    ) -> R<cri::ListPodSandboxStatsResponse> {
        let stats = self
            .shim
            .list_pod_sandbox_stats(req.into_inner().filter)
            .await?;
        ok(cri::ListPodSandboxStatsResponse { stats })
    }

    async fn list_metric_descriptors(
        &self,
        _req: Request<cri::ListMetricDescriptorsRequest>,
    ) -> R<cri::ListMetricDescriptorsResponse> {
        ok(cri::ListMetricDescriptorsResponse {
            descriptors: crate::stats::metric_descriptors(),
        })
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _req: Request<cri::ListPodSandboxMetricsRequest>,
    ) -> R<cri::ListPodSandboxMetricsResponse> {
        ok(cri::ListPodSandboxMetricsResponse {
            pod_metrics: self.shim.list_pod_sandbox_metrics().await?,
        })
    }

    async fn get_container_events(
        &self,
        _req: Request<cri::GetEventsRequest>,
    ) -> R<BoxStream<cri::ContainerEventResponse>> {
        let rx = self.shim.events.subscribe();
        let stream = BroadcastStream::new(rx).filter_map(|r| async move {
            match r {
                Ok(ev) => Some(Ok(ev)),
                // A subscriber that fell behind skips what it missed (the kubelet's relist
                // catches up), like containerd's bounded event channel.
                Err(_) => None,
            }
        });
        ok(Box::pin(stream))
    }
}

#[tonic::async_trait]
impl<D: DockerApi> ImageService for DockerService<D> {
    async fn list_images(
        &self,
        req: Request<cri::ListImagesRequest>,
    ) -> R<cri::ListImagesResponse> {
        let images = self.shim.list_images(req.into_inner().filter).await?;
        ok(cri::ListImagesResponse { images })
    }

    async fn image_status(
        &self,
        req: Request<cri::ImageStatusRequest>,
    ) -> R<cri::ImageStatusResponse> {
        ok(self.shim.image_status(req.into_inner()).await?)
    }

    async fn pull_image(&self, req: Request<cri::PullImageRequest>) -> R<cri::PullImageResponse> {
        let image_ref = self.shim.pull_image(req.into_inner()).await?;
        ok(cri::PullImageResponse { image_ref })
    }

    async fn remove_image(
        &self,
        req: Request<cri::RemoveImageRequest>,
    ) -> R<cri::RemoveImageResponse> {
        self.shim.remove_image(req.into_inner()).await?;
        ok(cri::RemoveImageResponse {})
    }

    async fn image_fs_info(
        &self,
        _req: Request<cri::ImageFsInfoRequest>,
    ) -> R<cri::ImageFsInfoResponse> {
        ok(self.shim.image_fs_info().await?)
    }
}
