//! CRI runtimes to test against: our dockershim, started in-process on a private socket with a
//! private root directory (CNI mode on the test bed's network), or any existing CRI endpoint
//! (the test bed's containerd). Either way the test gets plain CRI clients over a unix socket,
//! so every test runs unchanged against every runtime.

use std::time::Duration;

use cri_proto::runtime::v1::image_service_client::ImageServiceClient;
use cri_proto::runtime::v1::runtime_service_client::RuntimeServiceClient;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use crate::testbed::Testbed;

/// Which runtime a test talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeKind {
    Dockershim,
    Containerd,
}

impl RuntimeKind {
    pub fn name(self) -> &'static str {
        match self {
            RuntimeKind::Dockershim => "dockershim",
            RuntimeKind::Containerd => "containerd",
        }
    }
}

/// A CRI runtime under test and its clients.
pub struct TestRuntime {
    pub kind: RuntimeKind,
    pub endpoint: String,
    pub runtime: RuntimeServiceClient<Channel>,
    pub image: ImageServiceClient<Channel>,
    dockershim: Option<InProcessShim>,
}

/// A dockershim served in-process.
pub struct InProcessShim {
    pub dir: TempDir,
    pub config: dockershim::ShimConfig,
    shutdown: CancellationToken,
    server: Option<tokio::task::JoinHandle<Result<(), cri_proto::TransportError>>>,
}

impl InProcessShim {
    /// Starts dockershim on a socket in a fresh temp dir, in CNI mode on the test bed's network.
    pub async fn start(tb: &Testbed) -> anyhow::Result<InProcessShim> {
        let dir = tempfile::Builder::new()
            .prefix("dockershim-it-")
            .tempdir()?;
        let endpoint = format!("unix://{}/dockershim.sock", dir.path().display());
        let mut config = dockershim::ShimConfig::with_endpoint(endpoint);
        config.docker_endpoint = tb.docker_endpoint.clone();
        config.pod_infra_image = tb.pause_image.clone();
        config.root_directory = dir.path().join("root");
        config.cni = Some(dockershim::config::CniSettings {
            bin_dirs: vec![tb.cni_bin_dir.clone()],
            conf_dir: tb.dockershim_cni_conf_dir.clone(),
            cache_dir: tb.dockershim_cni_cache_dir.clone(),
        });
        let mut shim = InProcessShim {
            dir,
            config,
            shutdown: CancellationToken::new(),
            server: None,
        };
        shim.serve().await?;
        Ok(shim)
    }

    async fn serve(&mut self) -> anyhow::Result<()> {
        self.shutdown = CancellationToken::new();
        let running = dockershim::start(self.config.clone(), self.shutdown.clone()).await?;
        self.server = Some(running.server);
        Ok(())
    }

    /// Stops serving (containers keep running) and waits until the socket is gone.
    pub async fn stop(&mut self) {
        self.shutdown.cancel();
        if let Some(s) = self.server.take() {
            let _ = s.await;
        }
    }

    /// Stops and starts again with the same root directory: a dockershim restart.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop().await;
        self.serve().await
    }
}

impl Drop for InProcessShim {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Connects CRI clients to `endpoint`.
pub async fn clients(
    endpoint: &str,
) -> anyhow::Result<(RuntimeServiceClient<Channel>, ImageServiceClient<Channel>)> {
    let ch = cri_proto::connect(endpoint, Duration::from_secs(10)).await?;
    Ok((
        cri_proto::runtime_client(ch.clone()),
        cri_proto::image_client(ch),
    ))
}

impl TestRuntime {
    /// Starts or connects to `kind`.
    pub async fn new(kind: RuntimeKind, tb: &Testbed) -> anyhow::Result<TestRuntime> {
        let (endpoint, dockershim) = match kind {
            RuntimeKind::Containerd => (tb.containerd_endpoint.clone(), None),
            RuntimeKind::Dockershim => {
                let shim = InProcessShim::start(tb).await?;
                (shim.config.endpoint.clone(), Some(shim))
            }
        };
        let (runtime, image) = clients(&endpoint).await?;
        Ok(TestRuntime {
            kind,
            endpoint,
            runtime,
            image,
            dockershim,
        })
    }

    /// Restarts the runtime when it is our dockershim (containerd is left alone) and reconnects.
    pub async fn restart_dockershim(&mut self) -> anyhow::Result<()> {
        if let Some(shim) = &mut self.dockershim {
            shim.restart().await?;
            let (r, i) = clients(&self.endpoint).await?;
            self.runtime = r;
            self.image = i;
        }
        Ok(())
    }
}
