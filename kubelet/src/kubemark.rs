//! Hollow nodes (upstream `pkg/kubemark`, `HollowKubelet`): the real kubelet — sources, pod
//! workers, PLEG, status manager, node status and lease, probes that need no process — on
//! the in-memory [`FakeRuntime`] instead of a container runtime, so that hundreds of nodes
//! run on one machine against a real control plane and what each asks of the API server can
//! be measured. No container runs: a pod's sandbox and containers exist in the fake, take the
//! simulated [`Latency`] to start, and run until the kubelet stops them.
//!
//! [`LatencyFlags`] are the command-line form of the latency profile, shared by the
//! `hollow-node` and `fake-runtime` binaries.

use std::sync::Arc;
use std::time::Duration;

use node_common::duration::parse_duration_arg;
use tokio_util::sync::CancellationToken;

use crate::cri::fake::{FakeRuntime, Latency};
use crate::kubelet::Kubelet;
use crate::kubeletconfig::KubeletConfig;
use crate::kuberuntime::KubeGenericRuntimeManager;
use crate::metrics::Metrics;

/// The fake runtime's simulated latencies, as flags.
#[derive(Debug, Clone, clap::Args)]
pub struct LatencyFlags {
    /// How long RunPodSandbox takes (a real runtime: the pause container and CNI).
    #[arg(long, value_parser = parse_duration_arg, default_value = "250ms")]
    pub sandbox_latency: Duration,
    /// How long PullImage takes for an image not yet present.
    #[arg(long, value_parser = parse_duration_arg, default_value = "0s")]
    pub pull_latency: Duration,
    /// How long CreateContainer takes.
    #[arg(long, value_parser = parse_duration_arg, default_value = "30ms")]
    pub create_latency: Duration,
    /// How long StartContainer takes.
    #[arg(long, value_parser = parse_duration_arg, default_value = "60ms")]
    pub start_latency: Duration,
    /// How long StopPodSandbox and StopContainer take.
    #[arg(long, value_parser = parse_duration_arg, default_value = "0s")]
    pub stop_latency: Duration,
}

impl LatencyFlags {
    /// The profile the flags give.
    pub fn latency(&self) -> Latency {
        Latency {
            run_pod_sandbox: self.sandbox_latency,
            pull_image: self.pull_latency,
            create_container: self.create_latency,
            start_container: self.start_latency,
            stop: self.stop_latency,
        }
    }
}

/// A fake runtime for long-lived use: quiet (records nothing) with `latency`.
pub fn fake_runtime(latency: Latency) -> Arc<FakeRuntime> {
    let fake = Arc::new(FakeRuntime::new());
    fake.set_quiet();
    fake.set_latency(latency);
    fake
}

/// A hollow kubelet that could not start.
#[derive(Debug, thiserror::Error)]
pub enum HollowError {
    /// No `--kubeconfig`: a hollow node exists to talk to an API server.
    #[error("node {node}: a hollow node needs --kubeconfig")]
    NoApiServer { node: String },
    /// TLS bootstrap failed.
    #[error("node {node}: TLS bootstrap: {source}")]
    Bootstrap {
        node: String,
        #[source]
        source: crate::certificate::CertError,
    },
    /// The kubeconfig is unusable.
    #[error("node {node}: {source}")]
    Client {
        node: String,
        #[source]
        source: crate::apimode::ApiModeError,
    },
    /// The fake runtime did not answer (it always does; kept total).
    #[error("node {node}: {source}")]
    Runtime {
        node: String,
        #[source]
        source: crate::cri::RuntimeError,
    },
    /// The root directory could not be made.
    #[error("node {node}: creating {path}: {source}")]
    RootDir {
        node: String,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A started hollow kubelet: its fake runtime (to inspect) and the task running it.
pub struct HollowKubelet {
    /// The node name.
    pub node_name: String,
    /// The runtime its pods run on.
    pub runtime: Arc<FakeRuntime>,
    /// The kubelet's task; it ends after the cancellation token fires.
    pub task: tokio::task::JoinHandle<()>,
}

/// Starts `config`'s kubelet on a fresh fake runtime with `latency` (upstream
/// `NewHollowKubelet` + `Run`). With `bootstrap` (`--bootstrap-kubeconfig`), a missing or
/// expired kubeconfig is first made by TLS bootstrap, as the kubelet does. It serves no port
/// of its own (`config`'s servers are not started), registers its Node and runs what the
/// scheduler binds to it until `cancel`.
pub async fn start(
    config: KubeletConfig,
    bootstrap: Option<&std::path::Path>,
    latency: Latency,
    cancel: CancellationToken,
) -> Result<HollowKubelet, HollowError> {
    let node = config.node_name.clone();
    let Some(api) = config.api.as_ref() else {
        return Err(HollowError::NoApiServer { node });
    };
    if let Some(boot) = bootstrap {
        crate::certificate::bootstrap::load_client_cert(
            &api.kubeconfig,
            boot,
            &config.tls.cert_dir,
            &node,
            crate::certificate::csr::ISSUE_TIMEOUT,
        )
        .await
        .map_err(|source| HollowError::Bootstrap {
            node: node.clone(),
            source,
        })?;
    }
    let client = crate::apimode::client_from_kubeconfig(&api.kubeconfig)
        .await
        .map_err(|source| HollowError::Client {
            node: node.clone(),
            source,
        })?;
    std::fs::create_dir_all(&config.root_dir).map_err(|source| HollowError::RootDir {
        node: node.clone(),
        path: config.root_dir.clone(),
        source,
    })?;
    let fake = fake_runtime(latency);
    let runtime = KubeGenericRuntimeManager::new(
        Arc::clone(&fake) as Arc<dyn crate::cri::RuntimeService>,
        Arc::clone(&fake) as Arc<dyn crate::cri::ImageManagerService>,
        config.runtime_request_timeout,
    )
    .await
    .map_err(|source| HollowError::Runtime {
        node: node.clone(),
        source,
    })?
    .with_root_dir(config.root_dir.clone())
    .with_container_manager(crate::cm::ContainerManager::new(config.cgroups.clone()))
    .with_dns(config.dns.clone());
    let kl = Kubelet::new(config, runtime, Arc::new(Metrics::default())).with_api_client(client);
    let task = tokio::spawn(kl.run(cancel));
    Ok(HollowKubelet {
        node_name: node,
        runtime: fake,
        task,
    })
}
