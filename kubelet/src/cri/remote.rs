//! The CRI traits over gRPC (upstream `pkg/kubelet/cri/remote`: `remoteRuntimeService`,
//! `remoteImageService`): each call gets upstream's deadline and is counted and timed in the
//! kubelet's runtime-operation metrics under upstream's operation names.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cri_proto::runtime::v1 as cri;
use cri_proto::{ImageServiceClient, RuntimeServiceClient};
use futures::StreamExt;
use tonic::transport::Channel;

use super::{ContainerEventStream, ImageManagerService, Result, RuntimeError, RuntimeService};
use crate::metrics::Metrics;

/// One CRI call with a deadline (`None`: none), counted and timed in `metrics`.
async fn call<T, Fut>(
    metrics: &Metrics,
    op: &'static str,
    timeout: Option<Duration>,
    fut: Fut,
) -> Result<T>
where
    Fut: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
{
    let began = std::time::Instant::now();
    let answer = match timeout {
        Some(t) => tokio::time::timeout(t, fut)
            .await
            .map_err(|_| RuntimeError::Timeout { op, timeout: t }),
        None => Ok(fut.await),
    };
    let r = match answer {
        Err(e) => Err(e),
        Ok(Err(status)) => Err(RuntimeError::Rpc { op, status }),
        Ok(Ok(resp)) => Ok(resp.into_inner()),
    };
    metrics.runtime_operation_took(op, r.is_err(), began.elapsed());
    r
}

/// `RuntimeService` over a CRI socket.
#[derive(Debug, Clone)]
pub struct RemoteRuntimeService {
    client: RuntimeServiceClient<Channel>,
    timeout: Duration,
    metrics: Arc<Metrics>,
}

impl RemoteRuntimeService {
    /// A client on `channel`; `timeout` is the per-call deadline (`--runtime-request-timeout`).
    pub fn new(channel: Channel, timeout: Duration, metrics: Arc<Metrics>) -> Self {
        Self {
            client: cri_proto::runtime_client(channel),
            timeout,
            metrics,
        }
    }

    async fn call<T, F, Fut>(&self, op: &'static str, timeout: Option<Duration>, f: F) -> Result<T>
    where
        F: FnOnce(RuntimeServiceClient<Channel>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        call(&self.metrics, op, timeout, f(self.client.clone())).await
    }
}

#[async_trait]
impl RuntimeService for RemoteRuntimeService {
    async fn version(&self) -> Result<cri::VersionResponse> {
        self.call("version", Some(self.timeout), |mut c| async move {
            c.version(cri::VersionRequest::default()).await
        })
        .await
    }

    async fn run_pod_sandbox(
        &self,
        config: cri::PodSandboxConfig,
        handler: &str,
    ) -> Result<String> {
        let req = cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: handler.to_string(),
        };
        // Upstream: twice the timeout, RunPodSandbox may pull the pause image.
        let began = std::time::Instant::now();
        let r = self
            .call(
                "run_podsandbox",
                Some(self.timeout * 2),
                |mut c| async move { c.run_pod_sandbox(req).await },
            )
            .await
            .map(|r| r.pod_sandbox_id);
        // Upstream's instrumented service: by RuntimeClass handler.
        self.metrics
            .run_podsandbox(handler, r.is_err(), began.elapsed());
        r
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        let req = cri::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        self.call("stop_podsandbox", Some(self.timeout), |mut c| async move {
            c.stop_pod_sandbox(req).await
        })
        .await
        .map(|_| ())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        let req = cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        self.call(
            "remove_podsandbox",
            Some(self.timeout),
            |mut c| async move { c.remove_pod_sandbox(req).await },
        )
        .await
        .map(|_| ())
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatus> {
        let req = cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: false,
        };
        self.call(
            "podsandbox_status",
            Some(self.timeout),
            |mut c| async move { c.pod_sandbox_status(req).await },
        )
        .await
        .map(|r| r.status.unwrap_or_default())
    }

    async fn list_pod_sandbox(
        &self,
        filter: Option<cri::PodSandboxFilter>,
    ) -> Result<Vec<cri::PodSandbox>> {
        let req = cri::ListPodSandboxRequest { filter };
        self.call("list_podsandbox", Some(self.timeout), |mut c| async move {
            c.list_pod_sandbox(req).await
        })
        .await
        .map(|r| r.items)
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox_config: cri::PodSandboxConfig,
    ) -> Result<String> {
        let req = cri::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_string(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        self.call("create_container", Some(self.timeout), |mut c| async move {
            c.create_container(req).await
        })
        .await
        .map(|r| r.container_id)
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        let req = cri::StartContainerRequest {
            container_id: id.to_string(),
        };
        self.call("start_container", Some(self.timeout), |mut c| async move {
            c.start_container(req).await
        })
        .await
        .map(|_| ())
    }

    async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<()> {
        let req = cri::StopContainerRequest {
            container_id: id.to_string(),
            timeout: timeout_secs,
        };
        // Upstream: the request timeout plus the grace period.
        let grace = Duration::from_secs(u64::try_from(timeout_secs).unwrap_or(0));
        self.call(
            "stop_container",
            Some(self.timeout + grace),
            |mut c| async move { c.stop_container(req).await },
        )
        .await
        .map(|_| ())
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        let req = cri::RemoveContainerRequest {
            container_id: id.to_string(),
        };
        self.call("remove_container", Some(self.timeout), |mut c| async move {
            c.remove_container(req).await
        })
        .await
        .map(|_| ())
    }

    async fn list_containers(
        &self,
        filter: Option<cri::ContainerFilter>,
    ) -> Result<Vec<cri::Container>> {
        let req = cri::ListContainersRequest { filter };
        self.call("list_containers", Some(self.timeout), |mut c| async move {
            c.list_containers(req).await
        })
        .await
        .map(|r| r.containers)
    }

    async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus> {
        let req = cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        };
        self.call("container_status", Some(self.timeout), |mut c| async move {
            c.container_status(req).await
        })
        .await
        .map(|r| r.status.unwrap_or_default())
    }

    async fn reopen_container_log(&self, id: &str) -> Result<()> {
        let req = cri::ReopenContainerLogRequest {
            container_id: id.to_string(),
        };
        self.call(
            "reopen_container_log",
            Some(self.timeout),
            |mut c| async move { c.reopen_container_log(req).await },
        )
        .await
        .map(|_| ())
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<cri::ExecSyncResponse> {
        let req = cri::ExecSyncRequest {
            container_id: id.to_string(),
            cmd,
            timeout: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        };
        self.call(
            "exec_sync",
            Some(self.timeout + timeout),
            |mut c| async move { c.exec_sync(req).await },
        )
        .await
    }

    async fn exec(&self, req: cri::ExecRequest) -> Result<String> {
        self.call("exec", Some(self.timeout), |mut c| async move {
            c.exec(req).await
        })
        .await
        .map(|r| r.url)
    }

    async fn attach(&self, req: cri::AttachRequest) -> Result<String> {
        self.call("attach", Some(self.timeout), |mut c| async move {
            c.attach(req).await
        })
        .await
        .map(|r| r.url)
    }

    async fn port_forward(&self, req: cri::PortForwardRequest) -> Result<String> {
        self.call("port_forward", Some(self.timeout), |mut c| async move {
            c.port_forward(req).await
        })
        .await
        .map(|r| r.url)
    }

    async fn list_container_stats(
        &self,
        filter: Option<cri::ContainerStatsFilter>,
    ) -> Result<Vec<cri::ContainerStats>> {
        // Always a filter, if only an empty one, as upstream's stats provider sends
        // (see `list_pod_sandbox_stats`).
        let req = cri::ListContainerStatsRequest {
            filter: Some(filter.unwrap_or_default()),
        };
        self.call(
            "list_container_stats",
            Some(self.timeout),
            |mut c| async move { c.list_container_stats(req).await },
        )
        .await
        .map(|r| r.stats)
    }

    async fn list_pod_sandbox_stats(
        &self,
        filter: Option<cri::PodSandboxStatsFilter>,
    ) -> Result<Vec<cri::PodSandboxStats>> {
        // Always a filter, if only an empty one, as upstream's stats provider sends
        // (`&runtimeapi.PodSandboxStatsFilter{}`). containerd 1.6 reads a missing filter as
        // "every sandbox, ready or not" and fails the whole call on the first one that is not
        // ready; with a filter it skips those.
        let req = cri::ListPodSandboxStatsRequest {
            filter: Some(filter.unwrap_or_default()),
        };
        self.call(
            "list_podsandbox_stats",
            Some(self.timeout),
            |mut c| async move { c.list_pod_sandbox_stats(req).await },
        )
        .await
        .map(|r| r.stats)
    }

    async fn runtime_config(&self) -> Result<cri::RuntimeConfigResponse> {
        self.call("runtime_config", Some(self.timeout), |mut c| async move {
            c.runtime_config(cri::RuntimeConfigRequest::default()).await
        })
        .await
    }

    async fn get_container_events(&self) -> Result<ContainerEventStream> {
        let stream = self
            .call(
                "get_container_events",
                Some(self.timeout),
                |mut c| async move { c.get_container_events(cri::GetEventsRequest {}).await },
            )
            .await?;
        Ok(stream
            .map(|r| {
                r.map_err(|status| RuntimeError::Rpc {
                    op: "get_container_events",
                    status,
                })
            })
            .boxed())
    }
}

/// `ImageManagerService` over a CRI socket.
#[derive(Debug, Clone)]
pub struct RemoteImageService {
    client: ImageServiceClient<Channel>,
    timeout: Duration,
    metrics: Arc<Metrics>,
}

impl RemoteImageService {
    /// A client on `channel`; `timeout` is the per-call deadline (`--runtime-request-timeout`).
    pub fn new(channel: Channel, timeout: Duration, metrics: Arc<Metrics>) -> Self {
        Self {
            client: cri_proto::image_client(channel),
            timeout,
            metrics,
        }
    }

    async fn call<T, F, Fut>(&self, op: &'static str, timeout: Option<Duration>, f: F) -> Result<T>
    where
        F: FnOnce(ImageServiceClient<Channel>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        call(&self.metrics, op, timeout, f(self.client.clone())).await
    }
}

#[async_trait]
impl ImageManagerService for RemoteImageService {
    async fn list_images(&self, filter: Option<cri::ImageFilter>) -> Result<Vec<cri::Image>> {
        let req = cri::ListImagesRequest { filter };
        self.call("list_images", Some(self.timeout), |mut c| async move {
            c.list_images(req).await
        })
        .await
        .map(|r| r.images)
    }

    async fn image_status(&self, image: cri::ImageSpec) -> Result<Option<cri::Image>> {
        let req = cri::ImageStatusRequest {
            image: Some(image),
            verbose: false,
        };
        self.call("image_status", Some(self.timeout), |mut c| async move {
            c.image_status(req).await
        })
        .await
        .map(|r| r.image)
    }

    async fn pull_image(
        &self,
        image: cri::ImageSpec,
        auth: Option<cri::AuthConfig>,
        sandbox_config: Option<cri::PodSandboxConfig>,
    ) -> Result<String> {
        let req = cri::PullImageRequest {
            image: Some(image),
            auth,
            sandbox_config,
        };
        // Pulls are long: five request timeouts.
        self.call("pull_image", Some(self.timeout * 5), |mut c| async move {
            c.pull_image(req).await
        })
        .await
        .map(|r| r.image_ref)
    }

    async fn remove_image(&self, image: cri::ImageSpec) -> Result<()> {
        let req = cri::RemoveImageRequest { image: Some(image) };
        self.call("remove_image", Some(self.timeout), |mut c| async move {
            c.remove_image(req).await
        })
        .await
        .map(|_| ())
    }

    async fn image_fs_info(&self) -> Result<Vec<cri::FilesystemUsage>> {
        self.call("image_fs_info", Some(self.timeout), |mut c| async move {
            c.image_fs_info(cri::ImageFsInfoRequest::default()).await
        })
        .await
        .map(|r| r.image_filesystems)
    }
}

#[cfg(test)]
mod tests {
    //! The runtime-operation metrics every CRI call feeds (upstream's instrumented services).

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn each_call_is_counted_and_timed_and_its_failures_counted() {
        let m = Metrics::new("node1");
        let ok = call(&m, "version", None, async {
            Ok::<_, tonic::Status>(tonic::Response::new(1u8))
        })
        .await;
        assert!(ok.is_ok());
        let failed = call(&m, "version", None, async {
            Err::<tonic::Response<u8>, _>(tonic::Status::unavailable("down"))
        })
        .await;
        assert!(failed.is_err());
        let timed_out = call(
            &m,
            "run_podsandbox",
            Some(Duration::from_secs(1)),
            std::future::pending::<std::result::Result<tonic::Response<u8>, tonic::Status>>(),
        )
        .await;
        assert!(matches!(timed_out, Err(RuntimeError::Timeout { .. })));
        let text = m.render();
        for line in [
            "kubelet_runtime_operations_total{operation_type=\"version\"} 2",
            "kubelet_runtime_operations_errors_total{operation_type=\"version\"} 1",
            "kubelet_runtime_operations_duration_seconds_count{operation_type=\"version\"} 2",
            "kubelet_runtime_operations_errors_total{operation_type=\"run_podsandbox\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}
