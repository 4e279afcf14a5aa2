//! The soak's node: the `kubelet` binary on a runtime of the soak's own — a private containerd,
//! or a standalone `dockershim` process on a private dockerd — with a private CNI network, and
//! the means to kill any of those processes with SIGKILL and start it again on the same state.
//! The test bed's shared Docker and containerd are never touched. The pids of the kubelet and
//! dockershim are published for the RSS sampler after every start.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use parking_lot::Mutex;

use crate::containerd::PrivateContainerd;
use crate::dockerd::PrivateDockerd;
use crate::kubelet_proc::{KubeletProc, start_kubelet_with};
use crate::runtimes::{ShimProcess, workspace_binary};
use crate::soak::network::CniNetwork;
use crate::testbed::Testbed;

/// The runtime a soak runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SoakRuntime {
    /// A private containerd with its CRI plugin.
    Containerd,
    /// A standalone `dockershim` process on a private dockerd.
    Dockershim,
}

impl SoakRuntime {
    pub fn name(self) -> &'static str {
        match self {
            SoakRuntime::Containerd => "containerd",
            SoakRuntime::Dockershim => "dockershim",
        }
    }

    /// The processes the soak kills on this runtime.
    pub fn targets(self) -> &'static [Target] {
        match self {
            SoakRuntime::Containerd => &[Target::Kubelet, Target::Containerd],
            SoakRuntime::Dockershim => &[Target::Kubelet, Target::Dockershim, Target::Dockerd],
        }
    }
}

impl std::str::FromStr for SoakRuntime {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "containerd" => Ok(SoakRuntime::Containerd),
            "dockershim" => Ok(SoakRuntime::Dockershim),
            other => Err(format!(
                "unknown runtime {other:?}: containerd or dockershim"
            )),
        }
    }
}

/// A process the soak kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    Kubelet,
    Dockershim,
    Dockerd,
    Containerd,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Kubelet => "kubelet",
            Target::Dockershim => "dockershim",
            Target::Dockerd => "dockerd",
            Target::Containerd => "containerd",
        }
    }

    /// Whether it is the container runtime itself (its death may take containers with it).
    pub fn is_runtime(self) -> bool {
        matches!(self, Target::Dockerd | Target::Containerd)
    }
}

/// The pids the RSS sampler reads (`None` while a process is down).
#[derive(Debug, Default, Clone, Copy)]
pub struct Pids {
    pub kubelet: Option<u32>,
    pub dockershim: Option<u32>,
}

/// The runtime's processes.
enum Runtime {
    Containerd(PrivateContainerd),
    Dockershim {
        dockerd: PrivateDockerd,
        shim: Option<ShimProcess>,
        shim_dir: PathBuf,
        shim_args: Vec<OsString>,
    },
}

/// The kubelet and its runtime.
pub struct Node {
    pub kind: SoakRuntime,
    tb: Testbed,
    /// The kubelet's directory: `root/`, `manifests/`, `kubelet.log`.
    pub kubelet_dir: PathBuf,
    /// The CRI endpoint the kubelet uses.
    pub endpoint: String,
    pub node_name: String,
    kubelet_args: Vec<String>,
    kubelet: Option<KubeletProc>,
    runtime: Runtime,
    // Dropped after the runtime (fields drop in order): the bridge outlives the pods.
    pub net: CniNetwork,
    pids: Arc<Mutex<Pids>>,
}

impl Node {
    /// Starts the runtime (with `images` in it) and the kubelet under `dir`, the kubelet with
    /// its pod cgroups under `cgroup_root`.
    pub async fn start(
        tb: &Testbed,
        kind: SoakRuntime,
        dir: &Path,
        node_name: &str,
        cgroup_root: &str,
        live_restore: bool,
        pids: Arc<Mutex<Pids>>,
    ) -> Result<Node> {
        let images = [tb.busybox_image.as_str(), tb.pause_image.as_str()];
        let (runtime, net, endpoint) = match kind {
            SoakRuntime::Containerd => {
                let net = CniNetwork::create(dir, Some(PathBuf::from("/var/lib/cni")))?;
                let cdir = dir.join("containerd");
                std::fs::create_dir_all(&cdir)?;
                let ctd =
                    tokio::task::block_in_place(|| PrivateContainerd::start(&cdir, &net.conf_dir))?;
                let (_, mut img) = crate::runtimes::clients(&ctd.endpoint).await?;
                for i in images {
                    crate::fixtures::ensure_image(&mut img, i)
                        .await
                        .with_context(|| format!("pulling {i} into the private containerd"))?;
                }
                let endpoint = ctd.endpoint.clone();
                (Runtime::Containerd(ctd), net, endpoint)
            }
            SoakRuntime::Dockershim => {
                let net = CniNetwork::create(dir, None)?;
                let ddir = dir.join("docker");
                std::fs::create_dir_all(&ddir)?;
                let dockerd = tokio::task::block_in_place(|| {
                    let d = PrivateDockerd::start(&ddir, live_restore)?;
                    d.copy_images(&tb.docker_endpoint, &images)?;
                    anyhow::Ok(d)
                })?;
                let shim_dir = dir.join("dockershim");
                std::fs::create_dir_all(&shim_dir)?;
                let mut shim_args: Vec<OsString> = vec![
                    "--pod-infra-container-image".into(),
                    tb.pause_image.clone().into(),
                ];
                shim_args.extend(tb.dockershim_args_on(
                    &dockerd.endpoint,
                    &net.conf_dir,
                    &net.cache_dir,
                ));
                let shim = ShimProcess::spawn(
                    &workspace_binary("dockershim")?,
                    &shim_dir,
                    shim_args.clone(),
                )
                .await?;
                let endpoint = shim.endpoint.clone();
                pids.lock().dockershim = Some(shim.pid());
                (
                    Runtime::Dockershim {
                        dockerd,
                        shim: Some(shim),
                        shim_dir,
                        shim_args,
                    },
                    net,
                    endpoint,
                )
            }
        };
        let kubelet_dir = dir.join("kubelet");
        std::fs::create_dir_all(&kubelet_dir)?;
        let mut node = Node {
            kind,
            tb: tb.clone(),
            kubelet_dir,
            endpoint,
            node_name: node_name.to_string(),
            kubelet_args: vec!["--cgroup-root".into(), cgroup_root.into()],
            kubelet: None,
            runtime,
            net,
            pids,
        };
        node.start_kubelet().await?;
        Ok(node)
    }

    async fn start_kubelet(&mut self) -> Result<()> {
        let runtime: Vec<OsString> = vec![
            "--container-runtime-endpoint".into(),
            self.endpoint.clone().into(),
        ];
        let mut k = start_kubelet_with(
            &self.tb,
            &runtime,
            &self.endpoint,
            &self.kubelet_dir,
            &self.node_name,
            &self.kubelet_args,
        )?;
        self.pids.lock().kubelet = Some(k.child.id());
        k.wait_healthy(Duration::from_secs(60)).await?;
        self.kubelet = Some(k);
        Ok(())
    }

    /// The kubelet's read-only port (`None` while it is down).
    pub fn kubelet_port(&self) -> Option<u16> {
        self.kubelet.as_ref().map(|k| k.port)
    }

    /// The static pod directory.
    pub fn manifests(&self) -> PathBuf {
        self.kubelet_dir.join("manifests")
    }

    /// The kubelet's root directory.
    pub fn kubelet_root(&self) -> PathBuf {
        self.kubelet_dir.join("root")
    }

    /// dockershim's sandbox checkpoints (`<root>/sandbox`), on the dockershim runtime.
    pub fn checkpoint_dir(&self) -> Option<PathBuf> {
        match &self.runtime {
            Runtime::Dockershim { shim_dir, .. } => Some(shim_dir.join("root").join("sandbox")),
            Runtime::Containerd(_) => None,
        }
    }

    /// The directories the runtime mounts containers' file systems under.
    pub fn runtime_mount_roots(&self) -> Vec<PathBuf> {
        match &self.runtime {
            Runtime::Containerd(c) => c.directories().to_vec(),
            Runtime::Dockershim { dockerd, .. } => vec![dockerd.data_root()],
        }
    }

    /// The private dockerd, on the dockershim runtime.
    pub fn dockerd(&self) -> Option<&PrivateDockerd> {
        match &self.runtime {
            Runtime::Dockershim { dockerd, .. } => Some(dockerd),
            Runtime::Containerd(_) => None,
        }
    }

    /// The private containerd, on the containerd runtime.
    pub fn containerd(&self) -> Option<&PrivateContainerd> {
        match &self.runtime {
            Runtime::Containerd(c) => Some(c),
            Runtime::Dockershim { .. } => None,
        }
    }

    /// Kills `target` with SIGKILL and reaps it.
    pub fn kill(&mut self, target: Target) {
        match (target, &mut self.runtime) {
            (Target::Kubelet, _) => {
                if let Some(mut k) = self.kubelet.take() {
                    self.pids.lock().kubelet = None;
                    k.kill();
                }
            }
            (Target::Dockershim, Runtime::Dockershim { shim, .. }) => {
                if let Some(mut s) = shim.take() {
                    self.pids.lock().dockershim = None;
                    // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
                    unsafe { libc::kill(s.pid() as libc::pid_t, libc::SIGKILL) };
                    // Reaps it (it has exited: no SIGTERM is sent).
                    s.terminate();
                }
            }
            (Target::Dockerd, Runtime::Dockershim { dockerd, .. }) => {
                tokio::task::block_in_place(|| dockerd.kill())
            }
            (Target::Containerd, Runtime::Containerd(c)) => {
                tokio::task::block_in_place(|| c.kill())
            }
            _ => {}
        }
    }

    /// Starts `target` again (after [`Node::kill`]) on the same state and waits until it
    /// answers (the kubelet: its `/healthz`).
    pub async fn restart(&mut self, target: Target) -> Result<()> {
        match target {
            Target::Kubelet => self.start_kubelet().await,
            Target::Dockershim => {
                let Runtime::Dockershim {
                    shim,
                    shim_dir,
                    shim_args,
                    ..
                } = &mut self.runtime
                else {
                    return Ok(());
                };
                // A killed dockershim leaves its socket behind: the wait for the socket must
                // see the new one.
                let _ = std::fs::remove_file(shim_dir.join("dockershim.sock"));
                let s = ShimProcess::spawn(
                    &workspace_binary("dockershim")?,
                    shim_dir,
                    shim_args.clone(),
                )
                .await?;
                self.pids.lock().dockershim = Some(s.pid());
                *shim = Some(s);
                Ok(())
            }
            Target::Dockerd => match &mut self.runtime {
                Runtime::Dockershim { dockerd, .. } => {
                    tokio::task::block_in_place(|| dockerd.start_again())
                }
                Runtime::Containerd(_) => Ok(()),
            },
            Target::Containerd => match &mut self.runtime {
                Runtime::Containerd(c) => tokio::task::block_in_place(|| c.start_again()),
                Runtime::Dockershim { .. } => Ok(()),
            },
        }
    }

    /// Stops the kubelet (SIGTERM) and then the runtime's processes, removing whatever pods
    /// are left in the runtime.
    pub async fn shutdown(mut self) {
        self.kubelet = None;
        self.pids.lock().kubelet = None;
        crate::runtimes::remove_all_sandboxes(&self.endpoint).await;
        if let Runtime::Dockershim { shim, .. } = &mut self.runtime {
            *shim = None;
            self.pids.lock().dockershim = None;
        }
        // The runtime's own drop (dockerd, containerd) then the network's.
        tokio::task::block_in_place(|| drop(self));
    }
}
