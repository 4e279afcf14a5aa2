//! CRI runtimes to test against: our dockershim, started in-process on a private socket with a
//! private root directory (CNI mode on the test bed's network) or as its own process (the
//! `dockershim` binary, for benchmarks that compare it with another runtime's process), or any
//! existing CRI endpoint (the test bed's containerd). Either way the test gets plain CRI clients
//! over a unix socket, so every test runs unchanged against every runtime.

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
        Self::start_on(tb, &tb.docker_endpoint).await
    }

    /// As [`InProcessShim::start`], on the Docker Engine at `docker_endpoint`.
    pub async fn start_on(tb: &Testbed, docker_endpoint: &str) -> anyhow::Result<InProcessShim> {
        let dir = tempfile::Builder::new()
            .prefix("dockershim-it-")
            .tempdir()?;
        let endpoint = format!("unix://{}/dockershim.sock", dir.path().display());
        let mut config = dockershim::ShimConfig::with_endpoint(endpoint);
        config.docker_endpoint = docker_endpoint.to_string();
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

/// A binary of the workspace built with the running executable's cargo profile: next to it
/// (benchmarks in `target/<profile>/`) or one level up (test binaries in `target/<profile>/deps/`).
pub fn workspace_binary(name: &str) -> anyhow::Result<std::path::PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .ok_or_else(|| anyhow::anyhow!("no directory for {}", exe.display()))?;
    let profile_dir = if dir.ends_with("deps") {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    };
    let p = profile_dir.join(name);
    if !p.is_file() {
        anyhow::bail!("{} is missing: build the workspace first", p.display());
    }
    Ok(p)
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

/// Stops and removes every sandbox (and so every container) of the runtime at `endpoint`,
/// best effort: for clean-ups on a runtime of a test's own.
pub async fn remove_all_sandboxes(endpoint: &str) {
    use cri_proto::runtime::v1 as cri;
    let Ok((mut rt, _)) = clients(endpoint).await else {
        return;
    };
    let Ok(list) = rt
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
    else {
        return;
    };
    let ids: Vec<String> = list.into_inner().items.into_iter().map(|s| s.id).collect();
    crate::fixtures::cleanup_sandboxes(&mut rt, &ids).await;
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

    /// Connects to a runtime already serving on `endpoint` (e.g. a [`ShimProcess`]).
    pub async fn connect(kind: RuntimeKind, endpoint: &str) -> anyhow::Result<TestRuntime> {
        let (runtime, image) = clients(endpoint).await?;
        Ok(TestRuntime {
            kind,
            endpoint: endpoint.to_string(),
            runtime,
            image,
            dockershim: None,
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

/// Our `dockershim` binary run as its own process, serving on a socket in a directory of the
/// caller's; terminated on drop (SIGTERM, then SIGKILL after 5 s). Its log is appended to
/// `dir/dockershim.log`.
pub struct ShimProcess {
    child: std::process::Child,
    pub endpoint: String,
}

impl ShimProcess {
    /// The `dockershim` binary of the running executable's cargo profile.
    pub fn binary() -> anyhow::Result<std::path::PathBuf> {
        workspace_binary("dockershim")
    }

    /// Starts [`ShimProcess::binary`] on the test bed: its Docker, pause image and CNI network.
    pub async fn start(tb: &Testbed, dir: &std::path::Path) -> anyhow::Result<ShimProcess> {
        Self::start_binary(tb, dir, &Self::binary()?).await
    }

    /// Starts the dockershim-compatible `binary` on the test bed as [`ShimProcess::start`]
    /// starts ours (e.g. another build of dockershim, to compare two builds in one run).
    pub async fn start_binary(
        tb: &Testbed,
        dir: &std::path::Path,
        binary: &std::path::Path,
    ) -> anyhow::Result<ShimProcess> {
        let mut args: Vec<std::ffi::OsString> = vec![
            "--pod-infra-container-image".into(),
            tb.pause_image.clone().into(),
        ];
        args.extend(tb.dockershim_args());
        Self::spawn(binary, dir, args).await
    }

    /// Starts cri-dockerd (the binary named by `CRI_DOCKERD`, an outside judge built by hand)
    /// on the test bed exactly as [`ShimProcess::start`] starts dockershim: same Docker, pause
    /// image and CNI network. Its sandboxes get oom_score_adj 0 through
    /// `CRI_DOCKERD_SANDBOX_OOM_SCORE_ADJ`, which a build for these hosts must honour (they
    /// refuse cri-dockerd's -998).
    pub async fn start_cri_dockerd(
        tb: &Testbed,
        dir: &std::path::Path,
    ) -> anyhow::Result<ShimProcess> {
        let bin = std::env::var_os("CRI_DOCKERD")
            .map(std::path::PathBuf::from)
            .ok_or_else(|| {
                anyhow::anyhow!("CRI_DOCKERD is not set (path to a cri-dockerd v0.3 binary)")
            })?;
        let mut args: Vec<std::ffi::OsString> = vec![
            "--pod-infra-container-image".into(),
            tb.pause_image.clone().into(),
        ];
        args.extend(tb.dockershim_args());
        let env = [("CRI_DOCKERD_SANDBOX_OOM_SCORE_ADJ", "0")];
        Self::spawn_with_env(&bin, dir, args, &env).await
    }

    /// Starts `binary` with its socket and root directory in `dir` and `args`, and waits (30 s
    /// at most) for the socket.
    pub async fn spawn(
        binary: &std::path::Path,
        dir: &std::path::Path,
        args: impl IntoIterator<Item = std::ffi::OsString>,
    ) -> anyhow::Result<ShimProcess> {
        Self::spawn_with_env(binary, dir, args, &[]).await
    }

    /// [`ShimProcess::spawn`] with extra environment variables for the child.
    pub async fn spawn_with_env(
        binary: &std::path::Path,
        dir: &std::path::Path,
        args: impl IntoIterator<Item = std::ffi::OsString>,
        env: &[(&str, &str)],
    ) -> anyhow::Result<ShimProcess> {
        use anyhow::Context;
        use std::process::Stdio;
        let sock = dir.join("dockershim.sock");
        let endpoint = format!("unix://{}", sock.display());
        // Appended to: a runtime started again in `dir` (a restart, or a swap between
        // cri-dockerd and dockershim) keeps the earlier one's log.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("dockershim.log"))?;
        // cri-dockerd's flag names, which dockershim shares, so either binary can be spawned.
        let child = std::process::Command::new(binary)
            .arg("--container-runtime-endpoint")
            .arg(&endpoint)
            .arg("--cri-dockerd-root-directory")
            .arg(dir.join("root"))
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let mut shim = ShimProcess { child, endpoint };
        for _ in 0..600 {
            if sock.exists() {
                return Ok(shim);
            }
            if let Ok(Some(st)) = shim.child.try_wait() {
                anyhow::bail!("dockershim exited early: {st}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::bail!("dockershim did not create {} within 30 s", sock.display())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then SIGKILL if it has not exited within 5 s.
    pub fn terminate(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ShimProcess {
    fn drop(&mut self) {
        self.terminate();
    }
}
