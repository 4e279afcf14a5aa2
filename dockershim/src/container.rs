//! Containers (upstream `docker_container.go`): CRI ContainerConfig -> Docker create body
//! (entrypoint/cmd semantics, env, mounts with propagation and relabel, devices, resources,
//! security), and the lifecycle RPCs: CreateContainer, StartContainer, StopContainer,
//! RemoveContainer, UpdateContainerResources, ReopenContainerLog and ExecSync. Containers join
//! their sandbox's network and IPC (and PID when pod-shared). Reading containers back
//! (ListContainers, ContainerStatus) is `container_status`.

use std::path::Path;
use std::time::Duration;

use bollard::models::{
    ContainerCreateBody, ContainerUpdateBody, DeviceMapping, HealthConfig, HostConfig,
    RestartPolicy, RestartPolicyNameEnum,
};
use cri_proto::runtime::v1 as cri;
use tracing::{debug, info};

use crate::cache::Fact;
use crate::creation::NameReservation;
use crate::crilog::LogWriter;
use crate::docker::DockerApi;
use crate::errors::{Result, ShimError};
use crate::labels;
use crate::naming::{self, ContainerNameParts};
use crate::security::sandbox_ns_options;
use crate::shim::Shim;

/// The most ExecSync captures per stream (like containerd's 16 MiB cap on exec output).
pub const MAX_EXEC_SYNC_OUTPUT: usize = 16 * 1024 * 1024;

fn propagation_suffix(p: i32) -> Option<&'static str> {
    match cri::MountPropagation::try_from(p) {
        Ok(cri::MountPropagation::PropagationHostToContainer) => Some("rslave"),
        Ok(cri::MountPropagation::PropagationBidirectional) => Some("rshared"),
        _ => None,
    }
}

/// A CRI mount as a Docker bind (`host:container[:opts]`). Host paths that are symlinks are
/// resolved first, so the link's target is what gets mounted.
pub fn bind_of(m: &cri::Mount) -> String {
    let host = std::fs::canonicalize(&m.host_path)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| m.host_path.clone());
    let mut opts = Vec::new();
    if m.readonly {
        opts.push("ro");
    }
    if m.selinux_relabel {
        opts.push("Z");
    }
    if let Some(p) = propagation_suffix(m.propagation) {
        opts.push(p);
    }
    if opts.is_empty() {
        format!("{host}:{}", m.container_path)
    } else {
        format!("{host}:{}:{}", m.container_path, opts.join(","))
    }
}

/// `r` into Docker's host config; `oom_floor` (see `Shim::oom_score_adj_floor`) raises an
/// oom_score_adj this host could not apply.
fn apply_resources(r: &cri::LinuxContainerResources, oom_floor: Option<i64>, hc: &mut HostConfig) {
    let set = |v: i64| (v != 0).then_some(v);
    hc.cpu_shares = set(r.cpu_shares);
    hc.cpu_quota = set(r.cpu_quota);
    hc.cpu_period = set(r.cpu_period);
    hc.memory = set(r.memory_limit_in_bytes);
    hc.memory_swap = set(r.memory_swap_limit_in_bytes);
    let oom = oom_floor.map_or(r.oom_score_adj, |f| r.oom_score_adj.max(f));
    if oom != 0 {
        hc.oom_score_adj = Some(oom);
    }
    hc.cpuset_cpus = (!r.cpuset_cpus.is_empty()).then(|| r.cpuset_cpus.clone());
    hc.cpuset_mems = (!r.cpuset_mems.is_empty()).then(|| r.cpuset_mems.clone());
}

/// ExecSync's refusal of a container that is not running (Docker's own reason, if any, after).
fn not_running(id: &str, docker: &str) -> ShimError {
    let why = if docker.is_empty() {
        String::new()
    } else {
        format!(": {docker}")
    };
    ShimError::FailedPrecondition(format!("container {id:?} is not running{why}"))
}

/// Creates a container's log directory if needed and opens (creates) its CRI log file, both
/// in place (see [`LogWriter::open`]).
fn open_log(path: &Path) -> Result<LogWriter> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| {
            ShimError::internal(format!("create log directory {}: {e}", dir.display()))
        })?;
    }
    LogWriter::open(path).map_err(|e| ShimError::internal(format!("open container log: {e}")))
}

/// The container's log file: the sandbox's `log_directory` joined with the container's
/// `log_path`, which must be relative and stay inside the directory (no `..` component, not
/// absolute): a `log_path` of `../../etc/x` would otherwise have dockershim create and write
/// a file anywhere on the host. InvalidArgument otherwise. The check is lexical; the kubelet
/// creates the directories below `log_directory` itself.
pub fn container_log_path(log_directory: &str, log_path: &str) -> Result<std::path::PathBuf> {
    use std::path::Component;
    let rel = Path::new(log_path);
    for c in rel.components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => {
                return Err(ShimError::invalid(format!(
                    "CreateContainer: log_path {log_path:?} leaves the sandbox's log directory \
                     {log_directory:?} ('..' is not allowed)"
                )));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(ShimError::invalid(format!(
                    "CreateContainer: log_path {log_path:?} must be relative to the sandbox's \
                     log directory {log_directory:?}"
                )));
            }
        }
    }
    Ok(Path::new(log_directory).join(rel))
}

impl<D: DockerApi> Shim<D> {
    /// Builds the Docker create body of a container in sandbox `sandbox_id`.
    pub(crate) fn container_create_body(
        &self,
        sandbox_id: &str,
        config: &cri::ContainerConfig,
        sandbox_config: Option<&cri::PodSandboxConfig>,
    ) -> Result<ContainerCreateBody> {
        let image = config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .filter(|i| !i.is_empty())
            .ok_or_else(|| ShimError::invalid("CreateContainer: config.image.image is required"))?;
        let mut docker_labels = labels::make_labels(&config.labels, &config.annotations);
        docker_labels.insert(
            labels::CONTAINER_TYPE_LABEL_KEY.to_string(),
            labels::CONTAINER_TYPE_LABEL_CONTAINER.to_string(),
        );
        docker_labels.insert(
            labels::SANDBOX_ID_LABEL_KEY.to_string(),
            sandbox_id.to_string(),
        );
        if !config.log_path.is_empty() {
            let dir = sandbox_config
                .map(|s| s.log_directory.as_str())
                .unwrap_or("");
            let path = container_log_path(dir, &config.log_path)?;
            docker_labels.insert(
                labels::CONTAINER_LOG_PATH_LABEL_KEY.to_string(),
                path.to_string_lossy().into_owned(),
            );
        }

        let sandbox_ns = sandbox_config.and_then(sandbox_ns_options);
        let container_ns = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .or(sandbox_ns);
        let pid_mode = container_ns
            .and_then(|n| cri::NamespaceMode::try_from(n.pid).ok())
            .unwrap_or(cri::NamespaceMode::Container);
        let sandbox_ref = format!("container:{sandbox_id}");
        let mut hc = HostConfig {
            network_mode: Some(sandbox_ref.clone()),
            ipc_mode: Some(sandbox_ref.clone()),
            pid_mode: match pid_mode {
                cri::NamespaceMode::Node => Some("host".to_string()),
                cri::NamespaceMode::Pod => Some(sandbox_ref.clone()),
                cri::NamespaceMode::Target
                    if !container_ns.map(|n| n.target_id.is_empty()).unwrap_or(true) =>
                {
                    container_ns.map(|n| format!("container:{}", n.target_id))
                }
                _ => None,
            },
            binds: Some(config.mounts.iter().map(bind_of).collect()),
            devices: (!config.devices.is_empty()).then(|| {
                config
                    .devices
                    .iter()
                    .map(|d| DeviceMapping {
                        path_on_host: Some(d.host_path.clone()),
                        path_in_container: Some(d.container_path.clone()),
                        cgroup_permissions: Some(if d.permissions.is_empty() {
                            "rwm".to_string()
                        } else {
                            d.permissions.clone()
                        }),
                    })
                    .collect()
            }),
            // Docker's default ("no"), named as cri-dockerd names it.
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: None,
            }),
            ..Default::default()
        };
        if let Some(parent) = sandbox_config
            .and_then(|s| s.linux.as_ref())
            .map(|l| l.cgroup_parent.clone())
            .filter(|p| !p.is_empty())
        {
            hc.cgroup_parent = Some(parent);
        }
        let mut user = None;
        if let Some(r) = config.linux.as_ref().and_then(|l| l.resources.as_ref()) {
            apply_resources(r, self.oom_score_adj_floor, &mut hc);
        }
        let sc = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref());
        crate::security::apply_container_security(sc, &mut user, &mut hc)?;
        Ok(ContainerCreateBody {
            image: Some(image),
            entrypoint: (!config.command.is_empty()).then(|| config.command.clone()),
            cmd: (!config.args.is_empty()).then(|| config.args.clone()),
            env: Some(
                config
                    .envs
                    .iter()
                    .map(|kv| format!("{}={}", kv.key, kv.value))
                    .collect(),
            ),
            working_dir: (!config.working_dir.is_empty()).then(|| config.working_dir.clone()),
            labels: Some(docker_labels),
            tty: Some(config.tty),
            open_stdin: Some(config.stdin),
            stdin_once: Some(config.stdin_once),
            attach_stdin: Some(config.stdin),
            // An image's HEALTHCHECK is not run: the kubelet probes (upstream dockershim and
            // cri-dockerd disable Docker's health check the same way).
            healthcheck: Some(HealthConfig {
                test: Some(vec!["NONE".to_string()]),
                ..Default::default()
            }),
            user,
            host_config: Some(hc),
            ..Default::default()
        })
    }

    /// CreateContainer.
    pub async fn create_container(&self, req: cri::CreateContainerRequest) -> Result<String> {
        let config = req
            .config
            .ok_or_else(|| ShimError::invalid("CreateContainer: config is required"))?;
        let meta = config
            .metadata
            .as_ref()
            .ok_or_else(|| ShimError::invalid("CreateContainer: config.metadata is required"))?;
        if meta.name.is_empty() {
            return Err(ShimError::invalid(
                "CreateContainer: metadata.name is required",
            ));
        }
        let sandbox_config = req
            .sandbox_config
            .as_ref()
            .ok_or_else(|| ShimError::invalid("CreateContainer: sandbox_config is required"))?;
        let sandbox_meta = sandbox_config.metadata.as_ref().ok_or_else(|| {
            ShimError::invalid("CreateContainer: sandbox_config.metadata is required")
        })?;
        for (what, value) in [
            ("metadata.name", &meta.name),
            ("sandbox_config.metadata.name", &sandbox_meta.name),
            ("sandbox_config.metadata.namespace", &sandbox_meta.namespace),
            ("sandbox_config.metadata.uid", &sandbox_meta.uid),
        ] {
            crate::naming::check_field(what, value)
                .map_err(|e| ShimError::invalid(format!("CreateContainer: {e}")))?;
        }
        let (sandbox_id, own_files) = self.sandbox_facts(&req.pod_sandbox_id).await?;
        let mut body = self.container_create_body(&sandbox_id, &config, Some(sandbox_config))?;
        // A sandbox in a namespace of its own (not Docker's network) gives its containers
        // dockershim's resolv.conf and hosts instead of Docker's.
        if own_files {
            body.host_config
                .get_or_insert_with(Default::default)
                .binds
                .get_or_insert_with(Vec::new)
                .extend(self.files.binds(&sandbox_id, &config.mounts));
        }
        let name = naming::make_container_name(&ContainerNameParts {
            name: meta.name.clone(),
            attempt: meta.attempt,
            pod: naming::SandboxNameParts {
                name: sandbox_meta.name.clone(),
                namespace: sandbox_meta.namespace.clone(),
                uid: sandbox_meta.uid.clone(),
                attempt: sandbox_meta.attempt,
            },
        });
        let log_path = body
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::CONTAINER_LOG_PATH_LABEL_KEY))
            .cloned();
        let _reserved = NameReservation::take(&name)?;
        let id = self.create_named(&name, body).await?;
        self.facts.learn(&id, Fact::Container { log_path });
        debug!(container = %id, name = %meta.name, sandbox = %sandbox_id, "container created");
        Ok(id)
    }

    /// StartContainer: opens (creates) its CRI log file, starts it, and starts copying its
    /// output into the file. The file exists, empty, before the answer (as with containerd):
    /// the kubelet and critest open it as soon as the start returns.
    pub async fn start_container(&self, id: &str) -> Result<()> {
        let (full_id, log_path) = self.container_facts(id).await?;
        let log = match &log_path {
            Some(path) => Some(open_log(Path::new(path))?),
            None => None,
        };
        self.docker.start_container(&full_id).await?;
        if let Some(writer) = log {
            self.logs
                .start_into(self.docker.clone(), &full_id, writer, 0);
        }
        info!(container = %full_id, "container started");
        Ok(())
    }

    /// StopContainer with a grace period in seconds. Stopping what is gone succeeds.
    pub async fn stop_container(&self, id: &str, timeout: i64) -> Result<()> {
        if id.is_empty() {
            return Err(ShimError::invalid("container id is required"));
        }
        match self.docker.stop_container(id, timeout.max(0)).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// RemoveContainer. Removing what is gone succeeds. A whole id (what CreateContainer
    /// answers, so what the kubelet sends) is removed in one Docker call; a prefix is resolved
    /// by an inspect first.
    pub async fn remove_container(&self, id: &str) -> Result<()> {
        if id.is_empty() {
            return Err(ShimError::invalid("container id is required"));
        }
        if naming::is_full_container_id(id) {
            return self.remove_container_by_full_id(id).await;
        }
        let full_id = match self.docker.inspect_container(id).await {
            Ok(c) => c.id.unwrap_or_else(|| id.to_string()),
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        self.remove_container_by_full_id(&full_id).await
    }

    /// Removes container `full_id` (a whole id, from a listing or an inspect): its log copier
    /// and OOM record go, then the container (forced, with its volumes). Gone already is fine.
    pub(crate) async fn remove_container_by_full_id(&self, full_id: &str) -> Result<()> {
        self.logs.stop(full_id);
        self.facts.forget(full_id);
        self.oom_killed.lock().remove(full_id);
        match self.docker.remove_container(full_id).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// UpdateContainerResources.
    pub async fn update_container_resources(
        &self,
        req: cri::UpdateContainerResourcesRequest,
    ) -> Result<()> {
        let c = self.inspect_app_container(&req.container_id).await?;
        let Some(r) = req.linux else { return Ok(()) };
        let set = |v: i64| (v != 0).then_some(v);
        let update = ContainerUpdateBody {
            cpu_shares: set(r.cpu_shares),
            cpu_period: set(r.cpu_period),
            cpu_quota: set(r.cpu_quota),
            memory: set(r.memory_limit_in_bytes),
            memory_swap: set(r.memory_swap_limit_in_bytes),
            cpuset_cpus: (!r.cpuset_cpus.is_empty()).then(|| r.cpuset_cpus.clone()),
            cpuset_mems: (!r.cpuset_mems.is_empty()).then(|| r.cpuset_mems.clone()),
            ..Default::default()
        };
        self.docker
            .update_container(c.id.as_deref().unwrap_or(&req.container_id), update)
            .await?;
        Ok(())
    }

    /// ReopenContainerLog: the running container's log file is reopened at its path (after the
    /// kubelet's rotation moved it away).
    pub async fn reopen_container_log(&self, id: &str) -> Result<()> {
        let c = self.inspect_app_container(id).await?;
        let running = c.state.as_ref().and_then(|s| s.running).unwrap_or(false);
        if !running {
            return Err(ShimError::FailedPrecondition(format!(
                "container {id:?} is not running"
            )));
        }
        let full_id = c.id.unwrap_or_else(|| id.to_string());
        self.logs
            .reopen(&full_id)
            .await
            .map_err(|e| ShimError::internal(format!("reopen log of container {full_id}: {e}")))
    }

    /// ExecSync: runs `cmd` in the container, capturing at most 16 MiB of each stream; a timeout
    /// kills the process and answers DeadlineExceeded.
    pub async fn exec_sync(&self, req: cri::ExecSyncRequest) -> Result<cri::ExecSyncResponse> {
        if req.cmd.is_empty() {
            return Err(ShimError::invalid("ExecSync: cmd is required"));
        }
        // A container dockershim knows (by its whole id) goes straight to Docker, whose exec
        // refuses a container that is not running (409, as FailedPrecondition below); any
        // other is inspected first, as cri-dockerd does for every exec.
        let full_id = match self.facts.get(&req.container_id) {
            Some(Fact::Container { .. }) => req.container_id.clone(),
            _ => {
                let c = self.inspect_app_container(&req.container_id).await?;
                if !c.state.as_ref().and_then(|s| s.running).unwrap_or(false) {
                    return Err(not_running(&req.container_id, ""));
                }
                c.id.unwrap_or_else(|| req.container_id.clone())
            }
        };
        let timeout = (req.timeout > 0).then(|| Duration::from_secs(req.timeout as u64));
        let out = self
            .docker
            .exec(&full_id, req.cmd, timeout, MAX_EXEC_SYNC_OUTPUT)
            .await
            .map_err(|e| match e {
                crate::docker::DockerError::Timeout(t) => {
                    ShimError::DeadlineExceeded(format!("command timed out after {t:?}"))
                }
                crate::docker::DockerError::Conflict { message } => {
                    not_running(&req.container_id, &message)
                }
                e => e.into(),
            })?;
        Ok(cri::ExecSyncResponse {
            stdout: out.stdout,
            stderr: out.stderr,
            exit_code: out.exit_code,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_path_stays_inside_the_log_directory() {
        let dir = "/var/log/pods/ns_p_u";
        for ok in [
            "web/0.log",
            "0.log",
            "./web/1.log",
            "web//2.log",
            "a..b/..c.log",
        ] {
            let p = container_log_path(dir, ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert!(p.starts_with(dir), "{ok} -> {}", p.display());
        }
        for bad in [
            "../x.log",
            "web/../../x.log",
            "..",
            "web/..",
            "/etc/x.log",
            "//x",
        ] {
            let e = container_log_path(dir, bad).expect_err(bad);
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}");
            assert!(e.to_string().contains(bad), "{bad}: {e}");
        }
    }

    /// The kubelet asks -997 for a Guaranteed pod's containers. Where the host cannot lower
    /// oom_score_adj (floor 0) Docker gets no value (0) instead: with -997 runc would fail to
    /// start the container, as it does under cri-dockerd 0.3.7, which passes it unchanged. A
    /// value at or above the floor, and any value on a host that can lower it, pass as asked.
    #[test]
    fn oom_score_adj_is_raised_to_the_hosts_floor() {
        let oom = |adj: i64, floor: Option<i64>| {
            let r = cri::LinuxContainerResources {
                oom_score_adj: adj,
                ..Default::default()
            };
            let mut hc = HostConfig::default();
            apply_resources(&r, floor, &mut hc);
            hc.oom_score_adj
        };
        assert_eq!(oom(-997, Some(0)), None);
        assert_eq!(oom(-997, None), Some(-997));
        assert_eq!(oom(999, Some(0)), Some(999));
        assert_eq!(oom(1000, None), Some(1000));
        assert_eq!(oom(-500, Some(-100)), Some(-100));
    }

    #[test]
    fn binds_carry_mode_relabel_and_propagation() {
        let m = cri::Mount {
            container_path: "/data".into(),
            host_path: "/nonexistent-host-path".into(),
            readonly: true,
            selinux_relabel: true,
            propagation: cri::MountPropagation::PropagationHostToContainer as i32,
            ..Default::default()
        };
        assert_eq!(bind_of(&m), "/nonexistent-host-path:/data:ro,Z,rslave");
        let m = cri::Mount {
            container_path: "/d".into(),
            host_path: "/nonexistent-2".into(),
            ..Default::default()
        };
        assert_eq!(bind_of(&m), "/nonexistent-2:/d");
    }

    #[test]
    fn symlinked_host_paths_are_resolved() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::create_dir(&target).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let m = cri::Mount {
            container_path: "/x".into(),
            host_path: link.to_string_lossy().into_owned(),
            ..Default::default()
        };
        let real = std::fs::canonicalize(&target).unwrap();
        assert_eq!(bind_of(&m), format!("{}:/x", real.display()));
    }
}
