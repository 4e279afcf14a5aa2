//! The CRI-speaking runtime manager (upstream `kuberuntime_manager.go`, `kuberuntime_sandbox.go`,
//! `kuberuntime_container.go`, `kuberuntime_image.go`, `kuberuntime_gc.go`). This module owns
//! every RPC the kubelet makes to the runtime: reading a pod's [`PodStatus`] and listing all
//! pods ([`RuntimePod`]) for the PLEG, `SyncPod` (kill / create sandbox / start init and app
//! containers with image pulls and back-off), killing pods and containers with a grace period,
//! and removing dead containers and sandboxes.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use cri_proto::runtime::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};
use tokio::time::Instant;

use super::backoff::{Backoff, backoff_message, container_backoff_key};
use super::container_config::generate_container_config;
use super::labels::{
    self, CONTAINER_NAME_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL,
};
use super::pod_actions::{compute_pod_actions, probe_failures};
use super::sandbox::{POD_LOGS_ROOT_DIRECTORY, generate_pod_sandbox_config, pod_logs_directory};
use super::termination_order::TerminationOrdering;
use crate::apiobjects::ApiObjects;
use crate::container::{
    ContainerID, ContainerState, ContainerStatus, NamespaceMode, PodStatus, SandboxState,
    SandboxStatus, ephemeral_as_container, is_restartable_init_container, pod_full_name,
};
use crate::cri::{ImageManagerService, RuntimeService};
use crate::metrics::Metrics;

mod cleanup;
mod container;
mod image;
mod pod_status;
#[cfg(test)]
mod sidecar_sync_tests;
#[cfg(test)]
mod sync_tests;
#[cfg(test)]
pub(crate) mod testing;

/// Upstream `minimumGracePeriodInSeconds`.
pub const MINIMUM_GRACE_PERIOD_SECONDS: i64 = 2;
/// Default pod grace period when the spec has none.
pub const DEFAULT_GRACE_PERIOD_SECONDS: i64 = 30;

/// Waiting reasons the status shows (upstream `kubecontainer` errors).
pub mod reasons {
    /// Container in restart back-off.
    pub const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";
    /// Image pull failed.
    pub const ERR_IMAGE_PULL: &str = "ErrImagePull";
    /// Image pull in back-off.
    pub const IMAGE_PULL_BACK_OFF: &str = "ImagePullBackOff";
    /// Image absent with `imagePullPolicy: Never`.
    pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
    /// The container config could not be generated (e.g. a bad volumeMount).
    pub const CREATE_CONTAINER_CONFIG_ERROR: &str = "CreateContainerConfigError";
    /// The postStart hook failed.
    pub const POST_START_HOOK_ERROR: &str = "PostStartHookError";
    /// `CreateContainer` failed.
    pub const CREATE_CONTAINER_ERROR: &str = "CreateContainerError";
    /// `StartContainer` failed.
    pub const RUN_CONTAINER_ERROR: &str = "RunContainerError";
    /// Sandbox creation failed.
    pub const CREATE_POD_SANDBOX_ERROR: &str = "CreatePodSandboxError";
    /// Killing failed.
    pub const KILL_ERROR: &str = "KillError";
}

pub use crate::cri::RuntimeError;

/// One step that failed in a sync (upstream `SyncResult` with an error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncError {
    /// The container name, or empty for the pod/sandbox.
    pub target: String,
    /// Machine-readable reason (`CrashLoopBackOff`, `ErrImagePull`, ...).
    pub reason: String,
    /// Message.
    pub message: String,
}

/// What a `SyncPod` did (upstream `PodSyncResult`, keeping only failures).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncResult {
    /// Failed steps.
    pub errors: Vec<SyncError>,
    /// True when any runtime change was attempted (containers started/killed).
    pub changed: bool,
}

impl SyncResult {
    fn fail(&mut self, target: &str, reason: &str, message: impl Into<String>) {
        self.errors.push(SyncError {
            target: target.to_string(),
            reason: reason.to_string(),
            message: message.into(),
        });
    }

    /// True when nothing failed.
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }

    /// Waiting reasons per container name (for the API status).
    pub fn container_reasons(&self) -> HashMap<String, (String, String)> {
        self.errors
            .iter()
            .filter(|e| !e.target.is_empty())
            .map(|e| (e.target.clone(), (e.reason.clone(), e.message.clone())))
            .collect()
    }
}

/// A container or sandbox as the PLEG sees it (upstream `kubecontainer.Container`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeContainer {
    /// Runtime id.
    pub id: String,
    /// Container name (empty for sandboxes).
    pub name: String,
    /// State (sandboxes: ready = running, not ready = exited).
    pub state: ContainerState,
    /// The pod grace period recorded on the container.
    pub grace_period: Option<i64>,
    /// Creation time (ns).
    pub created_at: i64,
}

/// A pod as the runtime has it (upstream `kubecontainer.Pod`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuntimePod {
    /// Pod UID.
    pub id: String,
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// Sandboxes.
    pub sandboxes: Vec<RuntimeContainer>,
    /// Containers.
    pub containers: Vec<RuntimeContainer>,
}

impl RuntimePod {
    /// True when a sandbox is ready or a container runs.
    pub fn is_running(&self) -> bool {
        self.sandboxes
            .iter()
            .chain(&self.containers)
            .any(|c| c.state == ContainerState::Running)
    }
}

fn ts(ns: i64) -> Option<DateTime<Utc>> {
    (ns > 0).then(|| Utc.timestamp_nanos(ns))
}

fn cri_state(s: i32) -> ContainerState {
    match cri::ContainerState::try_from(s) {
        Ok(cri::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(cri::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(cri::ContainerState::ContainerExited) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    }
}

fn sandbox_state(s: i32) -> ContainerState {
    if s == cri::PodSandboxState::SandboxReady as i32 {
        ContainerState::Running
    } else {
        ContainerState::Exited
    }
}

/// The grace period for killing `pod`'s containers (upstream `killContainer`): the override
/// (deletion grace), else `terminationGracePeriodSeconds`, at least the minimum.
pub fn grace_period_for(pod: Option<&Pod>, override_secs: Option<i64>) -> i64 {
    let spec = pod
        .and_then(|p| p.spec.as_ref())
        .and_then(|s| s.termination_grace_period_seconds);
    override_secs
        .or(spec)
        .unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS)
        .max(MINIMUM_GRACE_PERIOD_SECONDS)
}

fn instant_of(t: Option<DateTime<Utc>>, now: Instant) -> Instant {
    match t {
        Some(t) => {
            let ago = (Utc::now() - t).to_std().unwrap_or_default();
            now.checked_sub(ago).unwrap_or(now)
        }
        None => now,
    }
}

/// The sandbox containers are started in: id, config and IPs (for the downward API).
struct SandboxTarget<'a> {
    id: &'a str,
    config: &'a cri::PodSandboxConfig,
    ips: &'a [String],
}

/// The CRI runtime manager (upstream `kubeGenericRuntimeManager`). Cheap to clone.
#[derive(Debug, Clone)]
pub struct KubeGenericRuntimeManager {
    runtime: Arc<dyn RuntimeService>,
    image: Arc<dyn ImageManagerService>,
    timeout: Duration,
    runtime_name: String,
    runtime_version: String,
    root_dir: PathBuf,
    /// Where pod log directories are made (upstream `podLogsRootDirectory`).
    pod_logs_root: PathBuf,
    probe_results: crate::probe::ProbeResults,
    credentials: Arc<crate::credentials::DockerKeyring>,
    cm: Arc<crate::cm::ContainerManager>,
    /// Where events about pods go.
    events: crate::events::EventRecorder,
    /// Pod DNS (cluster DNS, domain, resolver file).
    dns: Arc<crate::dns::DnsConfigurer>,
    /// The node's IP (the containers' `status.hostIP`).
    node_ip: crate::nodestatus::NodeIp,
    /// Where an embedded runtime posts the progress of the pulls we wait for.
    pull_progress: Option<node_common::pull_progress::PullProgressBoard>,
    /// The API-server mode's services, for the containers' service variables.
    services: Option<crate::envvars::ServiceStore>,
    /// Started pods and containers (`kubelet_started_*`), image pulls of starting pods.
    metrics: Arc<Metrics>,
    /// The RuntimeClasses pods' `runtimeClassName` resolve with (API-server mode).
    runtime_classes: Option<crate::runtimeclass::RuntimeClassManager>,
}

impl KubeGenericRuntimeManager {
    /// The node's IP, which pods see as their `hostIP` (default: detected once).
    pub fn with_node_ip(mut self, node_ip: crate::nodestatus::NodeIp) -> Self {
        self.node_ip = node_ip;
        self
    }

    /// Give containers the service variables of `services` (API-server mode; upstream
    /// `serviceLister`). Without it containers get none.
    pub fn with_services(mut self, services: Option<crate::envvars::ServiceStore>) -> Self {
        self.services = services;
        self
    }

    /// Resolve pods' `runtimeClassName` with `classes` (API-server mode; upstream
    /// `runtimeClassManager`). Without it every pod runs with the default handler.
    pub fn with_runtime_classes(
        mut self,
        classes: Option<crate::runtimeclass::RuntimeClassManager>,
    ) -> Self {
        self.runtime_classes = classes;
        self
    }

    /// Upstream `createPodSandbox` after the config is made: the pod's runtime handler, then
    /// RunPodSandbox with it. The error is the message the sync result and the event carry.
    async fn create_pod_sandbox(
        &self,
        pod: &Pod,
        config: &cri_proto::runtime::v1::PodSandboxConfig,
    ) -> Result<String, String> {
        let handler = match &self.runtime_classes {
            Some(classes) => {
                let name = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.runtime_class_name.as_deref());
                classes
                    .lookup_runtime_handler(name)
                    .await
                    .map_err(|e| e.to_string())?
            }
            None => String::new(),
        };
        if !handler.is_empty() {
            tracing::info!(handler = %handler, "running pod with runtime handler");
        }
        self.runtime
            .run_pod_sandbox(config.clone(), &handler)
            .await
            .map_err(|e| e.to_string())
    }

    /// The node's IP.
    pub fn node_ip(&self) -> &crate::nodestatus::NodeIp {
        &self.node_ip
    }

    /// Count started pods and containers in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The metrics this manager counts in.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Report the progress of image pulls from what the runtime in this process posts on
    /// `board` (the embedded dockershim); CRI itself carries no progress.
    pub fn with_pull_progress(
        mut self,
        board: node_common::pull_progress::PullProgressBoard,
    ) -> Self {
        self.pull_progress = Some(board);
        self
    }

    /// Pull images with the node's credentials (upstream `keyring`).
    pub fn with_credentials(mut self, keyring: crate::credentials::DockerKeyring) -> Self {
        self.credentials = Arc::new(keyring);
        self
    }

    /// Use `root` as the kubelet root directory (pod volumes live under `<root>/pods/<uid>`);
    /// the default is `/var/lib/kubelet`.
    pub fn with_root_dir(mut self, root: impl Into<PathBuf>) -> Self {
        self.root_dir = root.into();
        self
    }

    /// Place pods in cgroups and set oom_score_adj as `cm` says.
    pub fn with_container_manager(mut self, cm: crate::cm::ContainerManager) -> Self {
        self.cm = Arc::new(cm);
        self
    }

    /// Every container's stats (CRI `ListContainerStats`).
    pub async fn list_container_stats(&self) -> Result<Vec<cri::ContainerStats>, RuntimeError> {
        self.runtime.list_container_stats(None).await
    }

    /// Pod DNS settings (upstream `dns.Configurer`).
    pub fn with_dns(mut self, dns: crate::dns::DnsConfigurer) -> Self {
        self.dns = Arc::new(dns);
        self
    }

    /// Record events through `events`.
    pub fn with_events(mut self, events: crate::events::EventRecorder) -> Self {
        self.events = events;
        self
    }

    /// The event recorder.
    pub fn events(&self) -> &crate::events::EventRecorder {
        &self.events
    }

    /// The pod-level container manager.
    pub fn container_manager(&self) -> &crate::cm::ContainerManager {
        &self.cm
    }

    /// The cgroup driver the runtime reports through CRI `RuntimeConfig` (upstream
    /// `KubeletCgroupDriverFromCRI`); `None` when it does not implement the call.
    pub async fn runtime_cgroup_driver(&self) -> Option<String> {
        let r = self.runtime.runtime_config().await.ok()?;
        let linux = r.linux?;
        Some(
            match cri::CgroupDriver::try_from(linux.cgroup_driver) {
                Ok(cri::CgroupDriver::Cgroupfs) => "cgroupfs",
                _ => "systemd",
            }
            .to_string(),
        )
    }

    /// Read liveness/startup results from `results` (upstream `livenessManager` and
    /// `startupManager`).
    pub fn with_probe_results(mut self, results: crate::probe::ProbeResults) -> Self {
        self.probe_results = results;
        self
    }

    /// CRI `GetContainerEvents`: the runtime's container event stream (for the evented PLEG).
    pub async fn container_events(&self) -> Result<crate::cri::ContainerEventStream, RuntimeError> {
        self.runtime.get_container_events().await
    }

    /// A manager on an in-memory [`crate::cri::fake::FakeRuntime`] with its kubelet root and
    /// pod logs under `dir` (unit tests of the managers above the runtime).
    #[cfg(test)]
    pub(crate) async fn fake(dir: &std::path::Path) -> (Arc<crate::cri::fake::FakeRuntime>, Self) {
        let fake = Arc::new(crate::cri::fake::FakeRuntime::new());
        let manager = Self::new(fake.clone(), fake.clone(), Duration::from_secs(2))
            .await
            .map(|m| {
                m.with_root_dir(dir.join("kubelet"))
                    .with_pod_logs_root(dir.join("logs"))
            });
        match manager {
            Ok(m) => (fake, m),
            Err(e) => panic!("the fake runtime answers Version: {e}"),
        }
    }

    /// Make pod log directories under `root` instead of `/var/log/pods` (tests).
    pub fn with_pod_logs_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.pod_logs_root = root.into();
        self
    }

    /// The pod's log directory, `<logs root>/<ns>_<name>_<uid>`.
    pub fn pod_logs_dir(&self, pod: &Pod) -> PathBuf {
        let default = pod_logs_directory(pod);
        match default.file_name() {
            Some(name) => self.pod_logs_root.join(name),
            None => default,
        }
    }

    /// `<root>/pods/<uid>` (upstream `getPodDir`).
    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.root_dir.join("pods").join(uid)
    }

    /// Connect to `endpoint` (and `image_endpoint`, defaulting to it) and ask the runtime's name.
    pub async fn connect(
        endpoint: &str,
        image_endpoint: Option<&str>,
        timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Result<Self, RuntimeError> {
        let ch = cri_proto::connect(endpoint, timeout).await?;
        let ich = match image_endpoint {
            Some(e) if e != endpoint => cri_proto::connect(e, timeout).await?,
            _ => ch.clone(),
        };
        let runtime = crate::cri::RemoteRuntimeService::new(ch, timeout, metrics.clone());
        let image = crate::cri::RemoteImageService::new(ich, timeout, metrics.clone());
        Ok(Self::new(Arc::new(runtime), Arc::new(image), timeout)
            .await?
            .with_metrics(metrics))
    }

    /// A manager on `runtime` and `image` (the remote services, or a fake in tests); asks the
    /// runtime's name and version.
    pub async fn new(
        runtime: Arc<dyn RuntimeService>,
        image: Arc<dyn ImageManagerService>,
        timeout: Duration,
    ) -> Result<Self, RuntimeError> {
        let mut m = Self {
            runtime,
            image,
            timeout,
            runtime_name: String::new(),
            root_dir: PathBuf::from("/var/lib/kubelet"),
            pod_logs_root: PathBuf::from(POD_LOGS_ROOT_DIRECTORY),
            runtime_version: String::new(),
            probe_results: crate::probe::ProbeResults::default(),
            credentials: Arc::default(),
            cm: Arc::default(),
            events: Default::default(),
            dns: Arc::new(crate::dns::DnsConfigurer {
                resolver_config: crate::dns::RESOLV_CONF_DEFAULT.into(),
                ..Default::default()
            }),
            node_ip: crate::nodestatus::NodeIp::new(None),
            pull_progress: None,
            services: None,
            runtime_classes: None,
            metrics: Arc::default(),
        };
        let v = m.runtime.version().await?;
        tracing::info!(runtime = %v.runtime_name, version = %v.runtime_version, api = %v.runtime_api_version, "connected to container runtime");
        m.runtime_name = v.runtime_name;
        m.runtime_version = v.runtime_version;
        Ok(m)
    }

    /// `<name>://<version>`, as nodeInfo.containerRuntimeVersion reports it.
    pub fn runtime_version(&self) -> String {
        format!("{}://{}", self.runtime_name, self.runtime_version)
    }

    /// The runtime's name (`docker`, `containerd`): the type in container ids.
    pub fn runtime_name(&self) -> &str {
        &self.runtime_name
    }

    /// The CRI request timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The runtime service (for managers that make their own CRI calls, such as image GC).
    pub fn runtime_service(&self) -> &Arc<dyn RuntimeService> {
        &self.runtime
    }

    /// The image service.
    pub fn image_service(&self) -> &Arc<dyn ImageManagerService> {
        &self.image
    }

    /// Upstream `SyncPod`: bring the runtime in line with the pod's spec. `objects` are the
    /// configMaps, secrets and pull secrets this sync fetched for the pod.
    pub async fn sync_pod(
        &self,
        pod: &Pod,
        status: &PodStatus,
        objects: &ApiObjects,
        backoff: &mut Backoff,
    ) -> SyncResult {
        let mut result = SyncResult::default();
        let actions =
            compute_pod_actions(pod, status, &probe_failures(&self.probe_results, status));
        let pod_name = pod_full_name(pod);
        tracing::debug!(?actions, "computed pod actions");
        let grace = grace_period_for(Some(pod), None);

        if actions.kill_pod {
            if !status.sandbox_statuses.is_empty() || !status.container_statuses.is_empty() {
                result.changed = true;
                tracing::info!(
                    create_sandbox = actions.create_sandbox,
                    "killing pod to recreate its sandbox or because it is done"
                );
                if let Err(e) = self.kill_pod_status(Some(pod), status, grace).await {
                    result.fail("", reasons::KILL_ERROR, e.to_string());
                    return result;
                }
            }
        } else {
            for (id, k) in &actions.containers_to_kill {
                result.changed = true;
                tracing::info!(container = %k.name, reason = k.reason.as_str(), message = %k.message, "killing container");
                let spec = pod.spec.as_ref().and_then(|s| {
                    if k.init {
                        s.init_containers.as_ref().and_then(|v| v.get(k.index))
                    } else {
                        s.containers.get(k.index)
                    }
                });
                let pod_ip = status.ips.first().cloned().unwrap_or_default();
                self.events.event(
                    pod,
                    Some(&k.name),
                    crate::events::EventType::Normal,
                    "Killing",
                    k.message.clone(),
                );
                if let Err(e) = self
                    .kill_container_with_hook(&id.id, spec, &pod_ip, grace)
                    .await
                {
                    result.fail(&k.name, reasons::KILL_ERROR, e.to_string());
                    return result;
                }
            }
        }

        let mut sandbox_id = actions.sandbox_id.clone();
        let dns = match self.dns.get_pod_dns(pod, &self.events) {
            Ok(d) => d,
            Err(e) => {
                // Upstream `generatePodSandboxConfig` fails on an unreadable resolver file.
                let msg = format!("failed to generate sandbox config for pod {pod_name:?}: {e}");
                tracing::warn!(error = %e, "failed to generate the pod's DNS config");
                self.events.event(
                    pod,
                    None,
                    crate::events::EventType::Warning,
                    "FailedCreatePodSandBox",
                    msg.clone(),
                );
                result.fail("", reasons::CREATE_POD_SANDBOX_ERROR, msg);
                return result;
            }
        };
        let mut sandbox_config = generate_pod_sandbox_config(pod, actions.attempt, dns);
        sandbox_config.log_directory = self.pod_logs_dir(pod).to_string_lossy().into_owned();
        if let (Some(linux), Some(parent)) = (
            sandbox_config.linux.as_mut(),
            self.cm.pod_cgroup_parent(pod),
        ) {
            linux.cgroup_parent = parent;
        }
        if actions.create_sandbox {
            result.changed = true;
            let logdir = self.pod_logs_dir(pod);
            if let Err(e) = std::fs::create_dir_all(&logdir) {
                tracing::warn!(dir = %logdir.display(), error = %e, "cannot create pod log directory");
            }
            let created = self.create_pod_sandbox(pod, &sandbox_config).await;
            // Upstream `SyncPod`: StartedPodsTotal, and StartedPodsErrorsTotal on failure.
            self.metrics.pod_started(created.is_ok());
            match created {
                Ok(id) => {
                    tracing::info!(sandbox = %id, attempt = actions.attempt, "created pod sandbox");
                    sandbox_id = id;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "failed to create pod sandbox");
                    self.events.event(
                        pod,
                        None,
                        crate::events::EventType::Warning,
                        "FailedCreatePodSandBox",
                        format!("Failed to create pod sandbox: {e}"),
                    );
                    result.fail("", reasons::CREATE_POD_SANDBOX_ERROR, e);
                    return result;
                }
            }
        }
        if sandbox_id.is_empty() {
            return result;
        }
        // The pod IPs for the downward API: the new sandbox's, else the known ones.
        let pod_ips = if actions.create_sandbox {
            self.sandbox_ips(&sandbox_id).await
        } else {
            status.ips.clone()
        };
        let target = SandboxTarget {
            id: &sandbox_id,
            config: &sandbox_config,
            ips: &pod_ips,
        };
        let spec = pod.spec.as_ref();
        // Ephemeral containers first (upstream step 5): debugging must work even when an init
        // container cannot start.
        for &i in &actions.ephemeral_containers_to_start {
            let Some(e) = spec
                .and_then(|s| s.ephemeral_containers.as_ref())
                .and_then(|v| v.get(i))
            else {
                continue;
            };
            result.changed = true;
            let c = ephemeral_as_container(e);
            // Upstream `getTargetID`: the target must be known to the runtime.
            let pid_target = match e.target_container_name.as_deref().filter(|t| !t.is_empty()) {
                None => None,
                Some(t) => match status.find_container_status_by_name(t) {
                    Some(ts) => Some(ts.id.id.clone()),
                    None => {
                        let msg = format!("unable to find target container {t}");
                        result.fail(&c.name, reasons::CREATE_CONTAINER_CONFIG_ERROR, msg);
                        continue;
                    }
                },
            };
            if let Err((reason, msg)) = self
                .start_container(
                    &target,
                    &c,
                    pod,
                    status,
                    objects,
                    backoff,
                    pid_target.as_deref(),
                )
                .await
            {
                tracing::warn!(container = %c.name, reason = %reason, message = %msg, "failed to start ephemeral container");
                result.fail(&c.name, &reason, msg);
            }
        }
        // Init containers (upstream step 6): the next one, and sidecars to (re)start.
        for &i in &actions.init_containers_to_start {
            let Some(c) = spec
                .and_then(|s| s.init_containers.as_ref())
                .and_then(|v| v.get(i))
            else {
                continue;
            };
            result.changed = true;
            let sidecar = is_restartable_init_container(c);
            // Upstream `start` backs off every container it restarts: a failed regular init
            // container too (CrashLoopBackOff), which holds back the rest of the pod.
            if let Some(msg) = self.do_backoff(pod, c, status, backoff) {
                tracing::info!(container = %c.name, "{msg}");
                result.fail(&c.name, reasons::CRASH_LOOP_BACK_OFF, msg);
                if sidecar {
                    continue;
                }
                return result;
            }
            if let Err((reason, msg)) = self
                .start_container(&target, c, pod, status, objects, backoff, None)
                .await
            {
                result.fail(&c.name, &reason, msg);
                if sidecar {
                    // A sidecar that cannot start does not stop the others (upstream).
                    continue;
                }
                return result;
            }
        }
        for &i in &actions.containers_to_start {
            let Some(c) = spec.and_then(|s| s.containers.get(i)) else {
                continue;
            };
            result.changed = true;
            if let Some(msg) = self.do_backoff(pod, c, status, backoff) {
                tracing::info!(container = %c.name, "{msg}");
                result.fail(&c.name, reasons::CRASH_LOOP_BACK_OFF, msg);
                continue;
            }
            if let Err((reason, msg)) = self
                .start_container(&target, c, pod, status, objects, backoff, None)
                .await
            {
                tracing::warn!(container = %c.name, reason = %reason, message = %msg, "failed to start container");
                result.fail(&c.name, &reason, msg);
            }
        }
        result
    }

    async fn sandbox_ips(&self, id: &str) -> Vec<String> {
        match self.runtime.pod_sandbox_status(id).await {
            Ok(st) => st
                .network
                .filter(|n| !n.ip.is_empty())
                .map(|n| {
                    std::iter::once(n.ip)
                        .chain(n.additional_ips.into_iter().map(|i| i.ip))
                        .collect()
                })
                .unwrap_or_default(),
            Err(e) => {
                tracing::warn!(sandbox = %id, error = %e, "cannot read the new sandbox's IPs");
                vec![]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace() {
        assert_eq!(grace_period_for(None, None), 30);
        assert_eq!(grace_period_for(None, Some(1)), 2);
        let p = Pod {
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                termination_grace_period_seconds: Some(5),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(grace_period_for(Some(&p), None), 5);
    }

    #[test]
    fn sync_result_reasons() {
        let mut r = SyncResult::default();
        r.fail("a", reasons::CRASH_LOOP_BACK_OFF, "back-off");
        r.fail("", reasons::CREATE_POD_SANDBOX_ERROR, "x");
        assert!(!r.is_ok());
        let m = r.container_reasons();
        assert_eq!(m.len(), 1);
        assert_eq!(m["a"].0, "CrashLoopBackOff");
    }

    /// A pod's status read asks for its sandboxes' statuses at once, not one after the other,
    /// and still lists them newest first with the newest ready one's IP.
    #[tokio::test(start_paused = true)]
    async fn a_status_read_asks_for_its_sandboxes_at_once() {
        use crate::cri::RuntimeService;
        let dir = tempfile::tempdir().expect("tempdir");
        let (fake, manager) = KubeGenericRuntimeManager::fake(dir.path()).await;
        let mut ids = vec![];
        for attempt in 0..3 {
            let config = cri::PodSandboxConfig {
                metadata: Some(cri::PodSandboxMetadata {
                    name: "p".into(),
                    uid: "u".into(),
                    namespace: "default".into(),
                    attempt,
                }),
                labels: [(POD_UID_LABEL.to_string(), "u".to_string())].into(),
                ..Default::default()
            };
            let id = fake.run_pod_sandbox(config, "").await.expect("run");
            if attempt < 2 {
                fake.stop_pod_sandbox(&id).await.expect("stop");
            }
            ids.push(id);
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        fake.set_sandbox_status_latency(Duration::from_secs(2));
        let started = Instant::now();
        let status = manager
            .get_pod_status("u", "p", "default")
            .await
            .expect("status");
        assert_eq!(fake.sandbox_status_max_in_flight(), 3);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        let order: Vec<(String, u32)> = status
            .sandbox_statuses
            .iter()
            .map(|s| (s.id.clone(), s.attempt))
            .collect();
        ids.reverse();
        assert_eq!(order, ids.into_iter().zip([2, 1, 0]).collect::<Vec<_>>());
        assert_eq!(
            status.sandbox_statuses[0].state,
            crate::container::SandboxState::Ready
        );
    }
}
