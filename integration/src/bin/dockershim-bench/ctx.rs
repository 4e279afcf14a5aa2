//! What every phase uses: the CRI client of the spawned dockershim and a Docker client, the run's
//! label, the CRI configs both sides start from, the Docker bodies dockershim would build for
//! them, and the direct Docker calls, each bounded by `CALL_TIMEOUT`; `sweep` removes whatever
//! the run left.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, ListContainersOptions, RemoveContainerOptions,
    StatsOptions, StopContainerOptions,
};
use cri_proto::runtime::v1 as cri;
use cri_proto::runtime::v1::runtime_service_client::RuntimeServiceClient;
use dockershim::labels;
use futures::StreamExt;
use integration::fixtures;
use integration::testbed::Testbed;
use tonic::transport::Channel;

/// Label put on everything this run creates (through the shim or directly), for the sweep.
pub(crate) const RUN_LABEL: &str = "cri-bench.run";
/// The most any single call may take before the benchmark gives up on it.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(120);

pub(crate) async fn bounded<T, E: std::fmt::Display>(
    what: &str,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(anyhow!("{what}: {e}")),
        Err(_) => Err(anyhow!("{what}: timed out after {CALL_TIMEOUT:?}")),
    }
}

pub(crate) struct Ctx {
    pub(crate) rt: RuntimeServiceClient<Channel>,
    pub(crate) docker: Docker,
    pub(crate) tb: Testbed,
    pub(crate) run_id: String,
    pub(crate) log_root: PathBuf,
    pub(crate) pause_image: String,
}

impl Ctx {
    pub(crate) fn sandbox_config(&self) -> cri::PodSandboxConfig {
        let mut c = fixtures::sandbox_config("bench", &self.log_root);
        c.labels.insert(RUN_LABEL.to_string(), self.run_id.clone());
        c
    }

    pub(crate) fn container_config(&self, name: &str) -> cri::ContainerConfig {
        let mut c = fixtures::busybox_container(name, &self.tb.busybox_image, "");
        c.command = vec!["sleep".to_string(), "3600".to_string()];
        c.labels.insert(RUN_LABEL.to_string(), self.run_id.clone());
        c
    }

    /// The pause container body dockershim builds for `config` on Docker's default bridge
    /// (dockershim/src/sandbox.rs `sandbox_create_body`, for a config with no security
    /// context, ports or cgroup parent), with `--sandbox-oom-score-adj 0`.
    pub(crate) fn direct_sandbox_body(
        &self,
        config: &cri::PodSandboxConfig,
    ) -> ContainerCreateBody {
        let mut l = labels::make_labels(&config.labels, &config.annotations);
        l.insert(
            labels::CONTAINER_TYPE_LABEL_KEY.to_string(),
            labels::CONTAINER_TYPE_LABEL_SANDBOX.to_string(),
        );
        ContainerCreateBody {
            image: Some(self.pause_image.clone()),
            hostname: Some(config.hostname.clone()),
            labels: Some(l),
            host_config: Some(HostConfig {
                ipc_mode: Some("shareable".to_string()),
                oom_score_adj: Some(0),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The container body dockershim builds (container.rs `container_create_body`).
    pub(crate) fn direct_container_body(
        &self,
        sandbox_id: &str,
        sandbox: &cri::PodSandboxConfig,
        config: &cri::ContainerConfig,
    ) -> ContainerCreateBody {
        let mut l = labels::make_labels(&config.labels, &config.annotations);
        l.insert(
            labels::CONTAINER_TYPE_LABEL_KEY.to_string(),
            labels::CONTAINER_TYPE_LABEL_CONTAINER.to_string(),
        );
        l.insert(
            labels::SANDBOX_ID_LABEL_KEY.to_string(),
            sandbox_id.to_string(),
        );
        l.insert(
            labels::CONTAINER_LOG_PATH_LABEL_KEY.to_string(),
            Path::new(&sandbox.log_directory)
                .join(&config.log_path)
                .to_string_lossy()
                .into_owned(),
        );
        let sref = format!("container:{sandbox_id}");
        ContainerCreateBody {
            image: config.image.as_ref().map(|i| i.image.clone()),
            entrypoint: Some(config.command.clone()),
            env: Some(Vec::new()),
            labels: Some(l),
            tty: Some(false),
            open_stdin: Some(false),
            stdin_once: Some(false),
            attach_stdin: Some(false),
            host_config: Some(HostConfig {
                network_mode: Some(sref.clone()),
                ipc_mode: Some(sref),
                binds: Some(Vec::new()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub(crate) async fn d_create(&self, name: &str, body: ContainerCreateBody) -> Result<String> {
        let opts = CreateContainerOptions {
            name: Some(name.to_string()),
            platform: String::new(),
        };
        Ok(bounded(
            "docker create",
            self.docker.create_container(Some(opts), body),
        )
        .await?
        .id)
    }
    pub(crate) async fn d_inspect(
        &self,
        id: &str,
    ) -> Result<bollard::models::ContainerInspectResponse> {
        bounded(
            "docker inspect",
            self.docker
                .inspect_container(id, None::<InspectContainerOptions>),
        )
        .await
    }
    pub(crate) async fn d_start(&self, id: &str) -> Result<()> {
        bounded("docker start", self.docker.start_container(id, None)).await
    }
    pub(crate) async fn d_stop(&self, id: &str, t: i32) -> Result<()> {
        let opts = StopContainerOptions {
            signal: None,
            t: Some(t),
        };
        bounded("docker stop", self.docker.stop_container(id, Some(opts))).await
    }
    pub(crate) async fn d_remove(&self, id: &str) -> Result<()> {
        let opts = RemoveContainerOptions {
            v: true,
            force: true,
            link: false,
        };
        bounded("docker rm", self.docker.remove_container(id, Some(opts))).await
    }
    pub(crate) async fn d_list(
        &self,
        label: String,
        size: bool,
    ) -> Result<Vec<bollard::models::ContainerSummary>> {
        let opts = ListContainersOptions {
            all: true,
            size,
            filters: Some(HashMap::from([("label".to_string(), vec![label])])),
            ..Default::default()
        };
        bounded("docker ps", self.docker.list_containers(Some(opts))).await
    }
    pub(crate) async fn d_stats(&self, id: &str) -> Result<()> {
        let opts = StatsOptions {
            stream: false,
            one_shot: true,
        };
        let mut s = self.docker.stats(id, Some(opts));
        match tokio::time::timeout(CALL_TIMEOUT, s.next()).await {
            Ok(Some(r)) => r.map(|_| ()).map_err(|e| anyhow!("docker stats: {e}")),
            Ok(None) => bail!("docker stats {id}: empty"),
            Err(_) => bail!("docker stats {id}: timed out"),
        }
    }
}

/// Stops (timeout 0) and removes, with bollard, everything labelled with this run's id.
pub(crate) async fn sweep(ctx: &Ctx) -> usize {
    let Ok(list) = ctx
        .d_list(format!("{RUN_LABEL}={}", ctx.run_id), false)
        .await
    else {
        return 0;
    };
    let ids: Vec<String> = list.into_iter().filter_map(|c| c.id).collect();
    let n = ids.len();
    futures::stream::iter(ids)
        .map(|id| async move {
            let _ = ctx.d_stop(&id, 0).await;
            let _ = ctx.d_remove(&id).await;
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    n
}
