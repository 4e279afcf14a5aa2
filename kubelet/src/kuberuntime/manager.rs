//! The CRI-speaking runtime manager (upstream `kuberuntime_manager.go`, `kuberuntime_sandbox.go`,
//! `kuberuntime_container.go`, `kuberuntime_image.go`, `kuberuntime_gc.go`). This module owns
//! every RPC the kubelet makes to the runtime: reading a pod's [`PodStatus`] and listing all
//! pods ([`RuntimePod`]) for the PLEG, `SyncPod` (kill / create sandbox / start init and app
//! containers with image pulls and back-off), killing pods and containers with a grace period,
//! and removing dead containers and sandboxes.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use cri_proto::runtime::v1 as cri;
use cri_proto::{ImageServiceClient, RuntimeServiceClient};
use k8s_openapi::api::core::v1::{Container, Pod};
use tokio::time::Instant;
use tonic::transport::Channel;

use super::backoff::{Backoff, backoff_message, container_backoff_key};
use super::container_config::generate_container_config;
use super::labels::{
    self, CONTAINER_NAME_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL,
};
use super::pod_actions::compute_pod_actions;
use super::sandbox::{generate_pod_sandbox_config, pod_logs_directory};
use crate::container::{
    ContainerID, ContainerState, ContainerStatus, NamespaceMode, PodStatus, SandboxState,
    SandboxStatus, pod_full_name,
};
use crate::metrics::Metrics;

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

/// A failed runtime call.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The runtime answered with an error.
    #[error("{op}: {}", status.message())]
    Rpc {
        /// The CRI operation.
        op: &'static str,
        /// Its status.
        status: tonic::Status,
    },
    /// The runtime did not answer in time.
    #[error("{op}: timed out after {timeout:?}")]
    Timeout {
        /// The CRI operation.
        op: &'static str,
        /// The deadline.
        timeout: Duration,
    },
    /// Could not connect.
    #[error("connecting to the runtime: {0}")]
    Connect(#[from] cri_proto::TransportError),
}

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
    runtime: RuntimeServiceClient<Channel>,
    image: ImageServiceClient<Channel>,
    timeout: Duration,
    runtime_name: String,
    runtime_version: String,
    metrics: Arc<Metrics>,
    root_dir: PathBuf,
    probe_results: crate::prober::ProbeResults,
    credentials: Arc<crate::credentials::DockerKeyring>,
    cm: Arc<crate::cm::ContainerManager>,
    /// Where events about pods go.
    events: crate::events::EventRecorder,
    /// Pod DNS (cluster DNS, domain, resolver file).
    dns: Arc<crate::dns::DnsConfigurer>,
    /// The API objects each pod's last sync fetched, by pod UID (env of new containers).
    api_objects: Arc<std::sync::RwLock<HashMap<String, Arc<crate::apiobjects::ApiObjects>>>>,
}

impl KubeGenericRuntimeManager {
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

    /// The runtime's (first) image filesystem (CRI `ImageFsInfo`).
    pub async fn image_fs(&self) -> Result<Option<cri::FilesystemUsage>, RuntimeError> {
        let r = self
            .img("image_fs_info", self.timeout, |mut c| async move {
                c.image_fs_info(cri::ImageFsInfoRequest::default()).await
            })
            .await?;
        Ok(r.image_filesystems.into_iter().next())
    }

    /// Every container's stats (CRI `ListContainerStats`).
    pub async fn list_container_stats(&self) -> Result<Vec<cri::ContainerStats>, RuntimeError> {
        Ok(self
            .rt("list_container_stats", self.timeout, |mut c| async move {
                c.list_container_stats(cri::ListContainerStatsRequest::default())
                    .await
            })
            .await?
            .stats)
    }

    /// The runtime's images as (names: repo tags then repo digests, size).
    pub async fn image_names_and_sizes(&self) -> Result<Vec<(Vec<String>, u64)>, RuntimeError> {
        let list = self
            .img("list_images", self.timeout, |mut c| async move {
                c.list_images(cri::ListImagesRequest::default()).await
            })
            .await?;
        Ok(list
            .images
            .into_iter()
            .map(|i| {
                let mut names = i.repo_digests;
                names.splice(0..0, i.repo_tags);
                if names.is_empty() {
                    names.push(i.id);
                }
                (names, i.size)
            })
            .collect())
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

    /// Remembers the API objects fetched for pod `uid` (`None` forgets them).
    pub fn set_api_objects(&self, uid: &str, objects: Option<crate::apiobjects::ApiObjects>) {
        if let Ok(mut m) = self.api_objects.write() {
            match objects {
                Some(o) => {
                    m.insert(uid.to_string(), Arc::new(o));
                }
                None => {
                    m.remove(uid);
                }
            }
        }
    }

    fn api_objects_for(&self, pod: &Pod) -> Arc<crate::apiobjects::ApiObjects> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        self.api_objects
            .read()
            .ok()
            .and_then(|m| m.get(uid).cloned())
            .unwrap_or_else(|| {
                Arc::new(crate::apiobjects::ApiObjects::standalone(
                    pod.metadata.namespace.as_deref().unwrap_or_default(),
                ))
            })
    }

    /// The pod-level container manager.
    pub fn container_manager(&self) -> &crate::cm::ContainerManager {
        &self.cm
    }

    /// The cgroup driver the runtime reports through CRI `RuntimeConfig` (upstream
    /// `KubeletCgroupDriverFromCRI`); `None` when it does not implement the call.
    pub async fn runtime_cgroup_driver(&self) -> Option<String> {
        let r = self
            .rt("runtime_config", self.timeout, |mut c| async move {
                c.runtime_config(cri::RuntimeConfigRequest::default()).await
            })
            .await
            .ok()?;
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
    pub fn with_probe_results(mut self, results: crate::prober::ProbeResults) -> Self {
        self.probe_results = results;
        self
    }

    /// Upstream `RunInContainer` / CRI `ExecSync`: the command's exit code.
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<i32, RuntimeError> {
        let req = cri::ExecSyncRequest {
            container_id: id.to_string(),
            cmd,
            timeout: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        };
        self.rt("exec_sync", self.timeout + timeout, |mut c| async move {
            c.exec_sync(req).await
        })
        .await
        .map(|r| r.exit_code)
    }

    /// CRI `ContainerStatus`: the container's log path and whether it runs.
    pub async fn container_log_info(&self, id: &str) -> Result<(String, bool), RuntimeError> {
        let req = cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        };
        let st = self
            .rt("container_status", self.timeout, |mut c| async move {
                c.container_status(req).await
            })
            .await?
            .status
            .unwrap_or_default();
        Ok((
            st.log_path,
            st.state == cri::ContainerState::ContainerRunning as i32,
        ))
    }

    /// Running containers as (id, pod name, log path) (for the container log manager).
    pub async fn running_container_logs(
        &self,
    ) -> Result<Vec<(String, String, String)>, RuntimeError> {
        let req = cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter {
                state: Some(cri::ContainerStateValue {
                    state: cri::ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            }),
        };
        let list = self
            .rt("list_containers", self.timeout, |mut c| async move {
                c.list_containers(req).await
            })
            .await?
            .containers;
        let mut out = Vec::new();
        for c in list {
            let pod = c.labels.get(POD_NAME_LABEL).cloned().unwrap_or_default();
            match self.container_log_info(&c.id).await {
                Ok((path, _)) => out.push((c.id, pod, path)),
                Err(e) => {
                    tracing::debug!(container = %c.id, error = %e, "container vanished while reading its log path")
                }
            }
        }
        Ok(out)
    }

    /// CRI `GetContainerEvents`: the runtime's container event stream (for the evented PLEG).
    pub async fn container_events(
        &self,
    ) -> Result<tonic::Streaming<cri::ContainerEventResponse>, RuntimeError> {
        self.rt("get_container_events", self.timeout, |mut c| async move {
            c.get_container_events(cri::GetEventsRequest {}).await
        })
        .await
    }

    /// CRI `ReopenContainerLog`.
    pub async fn reopen_container_log(&self, id: &str) -> Result<(), RuntimeError> {
        let req = cri::ReopenContainerLogRequest {
            container_id: id.to_string(),
        };
        self.rt("reopen_container_log", self.timeout, |mut c| async move {
            c.reopen_container_log(req).await
        })
        .await
        .map(|_| ())
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
        let mut m = Self {
            runtime: cri_proto::runtime_client(ch),
            image: cri_proto::image_client(ich),
            timeout,
            runtime_name: String::new(),
            metrics,
            root_dir: PathBuf::from("/var/lib/kubelet"),
            runtime_version: String::new(),
            probe_results: crate::prober::ProbeResults::default(),
            credentials: Arc::default(),
            cm: Arc::default(),
            events: Default::default(),
            dns: Arc::new(crate::dns::DnsConfigurer {
                resolver_config: crate::dns::RESOLV_CONF_DEFAULT.into(),
                ..Default::default()
            }),
            api_objects: Arc::default(),
        };
        let v = m
            .rt("version", timeout, |mut c| async move {
                c.version(cri::VersionRequest::default()).await
            })
            .await?;
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

    /// One CRI call on `client` with a deadline, counted and timed in the runtime metrics.
    async fn call<C, T, F, Fut>(
        &self,
        client: C,
        op: &'static str,
        timeout: Duration,
        f: F,
    ) -> Result<T, RuntimeError>
    where
        F: FnOnce(C) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let began = std::time::Instant::now();
        let r = match tokio::time::timeout(timeout, f(client)).await {
            Err(_) => Err(RuntimeError::Timeout { op, timeout }),
            Ok(Err(status)) => Err(RuntimeError::Rpc { op, status }),
            Ok(Ok(resp)) => Ok(resp.into_inner()),
        };
        self.metrics
            .runtime_operation_took(op, r.is_err(), began.elapsed());
        r
    }

    /// A RuntimeService call.
    pub(crate) async fn rt<T, F, Fut>(
        &self,
        op: &'static str,
        timeout: Duration,
        f: F,
    ) -> Result<T, RuntimeError>
    where
        F: FnOnce(RuntimeServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.call(self.runtime.clone(), op, timeout, f).await
    }

    /// An ImageService call.
    pub(crate) async fn img<T, F, Fut>(
        &self,
        op: &'static str,
        timeout: Duration,
        f: F,
    ) -> Result<T, RuntimeError>
    where
        F: FnOnce(ImageServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.call(self.image.clone(), op, timeout, f).await
    }

    pub(crate) async fn list_sandboxes(
        &self,
        labels: HashMap<String, String>,
    ) -> Result<Vec<cri::PodSandbox>, RuntimeError> {
        let req = cri::ListPodSandboxRequest {
            filter: Some(cri::PodSandboxFilter {
                label_selector: labels,
                ..Default::default()
            }),
        };
        Ok(self
            .rt("list_podsandbox", self.timeout, |mut c| async move {
                c.list_pod_sandbox(req).await
            })
            .await?
            .items)
    }

    pub(crate) async fn list_containers(
        &self,
        labels: HashMap<String, String>,
    ) -> Result<Vec<cri::Container>, RuntimeError> {
        let req = cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter {
                label_selector: labels,
                ..Default::default()
            }),
        };
        Ok(self
            .rt("list_containers", self.timeout, |mut c| async move {
                c.list_containers(req).await
            })
            .await?
            .containers)
    }

    /// All pods on the runtime that the kubelet created (upstream `GetPods(all=true)`), grouped
    /// by the pod UID label.
    pub async fn get_pods(&self, all: bool) -> Result<Vec<RuntimePod>, RuntimeError> {
        let sandboxes = self.list_sandboxes(HashMap::new()).await?;
        let containers = self.list_containers(HashMap::new()).await?;
        let mut pods: HashMap<String, RuntimePod> = HashMap::new();
        let mut entry = |l: &HashMap<String, String>| -> Option<String> {
            let uid = l.get(POD_UID_LABEL)?.clone();
            let p = pods.entry(uid.clone()).or_insert_with(|| RuntimePod {
                id: uid.clone(),
                ..Default::default()
            });
            if p.name.is_empty() {
                p.name = l.get(POD_NAME_LABEL).cloned().unwrap_or_default();
                p.namespace = l.get(POD_NAMESPACE_LABEL).cloned().unwrap_or_default();
            }
            Some(uid)
        };
        let mut sb_entries = vec![];
        for s in sandboxes {
            if !all && s.state != cri::PodSandboxState::SandboxReady as i32 {
                continue;
            }
            if let Some(uid) = entry(&s.labels) {
                sb_entries.push((
                    uid,
                    RuntimeContainer {
                        id: s.id,
                        name: String::new(),
                        state: sandbox_state(s.state),
                        grace_period: None,
                        created_at: s.created_at,
                    },
                ));
            }
        }
        let mut c_entries = vec![];
        for c in containers {
            if !all && c.state != cri::ContainerState::ContainerRunning as i32 {
                continue;
            }
            if let Some(uid) = entry(&c.labels) {
                c_entries.push((
                    uid,
                    RuntimeContainer {
                        name: c
                            .labels
                            .get(CONTAINER_NAME_LABEL)
                            .cloned()
                            .or_else(|| c.metadata.as_ref().map(|m| m.name.clone()))
                            .unwrap_or_default(),
                        id: c.id,
                        state: cri_state(c.state),
                        grace_period: labels::termination_grace_period(&c.annotations),
                        created_at: c.created_at,
                    },
                ));
            }
        }
        for (uid, s) in sb_entries {
            if let Some(p) = pods.get_mut(&uid) {
                p.sandboxes.push(s);
            }
        }
        for (uid, c) in c_entries {
            if let Some(p) = pods.get_mut(&uid) {
                p.containers.push(c);
            }
        }
        let mut out: Vec<RuntimePod> = pods.into_values().collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// The runtime's view of one pod (upstream `GetPodStatus`): sandboxes newest first with
    /// their IPs, containers newest first with restart count and spec hash from annotations.
    pub async fn get_pod_status(
        &self,
        uid: &str,
        name: &str,
        namespace: &str,
    ) -> Result<PodStatus, RuntimeError> {
        let sel = HashMap::from([(POD_UID_LABEL.to_string(), uid.to_string())]);
        let mut sandboxes = self.list_sandboxes(sel.clone()).await?;
        sandboxes.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        let mut status = PodStatus {
            id: uid.to_string(),
            name: name.to_string(),
            namespace: namespace.to_string(),
            ..Default::default()
        };
        for (i, s) in sandboxes.iter().enumerate() {
            let id = s.id.clone();
            let req = cri::PodSandboxStatusRequest {
                pod_sandbox_id: id.clone(),
                verbose: false,
            };
            let st = match self
                .rt("podsandbox_status", self.timeout, |mut c| async move {
                    c.pod_sandbox_status(req).await
                })
                .await
            {
                Ok(r) => r.status.unwrap_or_default(),
                Err(e) => {
                    tracing::debug!(sandbox = %id, error = %e, "sandbox vanished while reading status");
                    continue;
                }
            };
            let netns = st
                .linux
                .as_ref()
                .and_then(|l| l.namespaces.as_ref())
                .and_then(|n| n.options.as_ref())
                .map(|o| o.network)
                .unwrap_or(0);
            let ready = st.state == cri::PodSandboxState::SandboxReady as i32;
            let mut ips = vec![];
            if let Some(n) = st.network.as_ref()
                && !n.ip.is_empty()
            {
                ips.push(n.ip.clone());
                ips.extend(n.additional_ips.iter().map(|i| i.ip.clone()));
            }
            if i == 0 && ready {
                status.ips.clone_from(&ips);
            }
            status.sandbox_statuses.push(SandboxStatus {
                id: st.id,
                state: if ready {
                    SandboxState::Ready
                } else {
                    SandboxState::NotReady
                },
                attempt: st.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
                network_namespace_mode: if netns == cri::NamespaceMode::Node as i32 {
                    NamespaceMode::Node
                } else {
                    NamespaceMode::Pod
                },
                ips,
                created_at: ts(st.created_at),
            });
        }
        let mut containers = self.list_containers(sel).await?;
        containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        for c in containers {
            let id = c.id.clone();
            let req = cri::ContainerStatusRequest {
                container_id: id.clone(),
                verbose: false,
            };
            let st = match self
                .rt("container_status", self.timeout, |mut c| async move {
                    c.container_status(req).await
                })
                .await
            {
                Ok(r) => r.status.unwrap_or_default(),
                Err(e) => {
                    tracing::debug!(container = %id, error = %e, "container vanished while reading status");
                    continue;
                }
            };
            let mut message = st.message.clone();
            let tmsg = crate::volumemanager::termination_message(&st).await;
            if !tmsg.is_empty() {
                if !message.is_empty() {
                    message.push_str(": ");
                }
                message.push_str(&tmsg);
            }
            let annotations = if st.annotations.is_empty() {
                &c.annotations
            } else {
                &st.annotations
            };
            let name = st
                .labels
                .get(CONTAINER_NAME_LABEL)
                .or_else(|| c.labels.get(CONTAINER_NAME_LABEL))
                .cloned()
                .or_else(|| st.metadata.as_ref().map(|m| m.name.clone()))
                .unwrap_or_default();
            let image = st
                .image
                .as_ref()
                .map(|i| {
                    if i.user_specified_image.is_empty() {
                        i.image.clone()
                    } else {
                        i.user_specified_image.clone()
                    }
                })
                .unwrap_or_default();
            status.container_statuses.push(ContainerStatus {
                id: ContainerID::new(self.runtime_name.clone(), st.id.clone()),
                name,
                state: cri_state(st.state),
                created_at: ts(st.created_at),
                started_at: ts(st.started_at),
                finished_at: ts(st.finished_at),
                exit_code: st.exit_code,
                image,
                image_id: if st.image_id.is_empty() {
                    st.image_ref.clone()
                } else {
                    st.image_id.clone()
                },
                image_ref: st.image_ref.clone(),
                hash: labels::container_hash(annotations),
                restart_count: labels::restart_count(annotations),
                reason: st.reason.clone(),
                message,
            });
        }
        Ok(status)
    }

    /// Upstream `SyncPod`: bring the runtime in line with the pod's spec.
    pub async fn sync_pod(
        &self,
        pod: &Pod,
        status: &PodStatus,
        backoff: &mut Backoff,
    ) -> SyncResult {
        let mut result = SyncResult::default();
        let actions = compute_pod_actions(pod, status, &self.probe_results.failures(status));
        let pod_name = pod_full_name(pod);
        tracing::debug!(pod = %pod_name, ?actions, "computed pod actions");
        let grace = grace_period_for(Some(pod), None);

        if actions.kill_pod {
            if !status.sandbox_statuses.is_empty() || !status.container_statuses.is_empty() {
                result.changed = true;
                tracing::info!(pod = %pod_name, create_sandbox = actions.create_sandbox, "killing pod to recreate its sandbox or because it is done");
                if let Err(e) = self.kill_pod_status(Some(pod), status, grace).await {
                    result.fail("", reasons::KILL_ERROR, e.to_string());
                    return result;
                }
            }
        } else {
            for (id, k) in &actions.containers_to_kill {
                result.changed = true;
                tracing::info!(pod = %pod_name, container = %k.name, reason = k.reason.as_str(), message = %k.message, "killing container");
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
                tracing::warn!(pod = %pod_name, error = %e, "failed to generate the pod's DNS config");
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
        if let (Some(linux), Some(parent)) = (
            sandbox_config.linux.as_mut(),
            self.cm.pod_cgroup_parent(pod),
        ) {
            linux.cgroup_parent = parent;
        }
        if actions.create_sandbox {
            result.changed = true;
            let logdir = pod_logs_directory(pod);
            if let Err(e) = std::fs::create_dir_all(&logdir) {
                tracing::warn!(pod = %pod_name, dir = %logdir.display(), error = %e, "cannot create pod log directory");
            }
            let req = cri::RunPodSandboxRequest {
                config: Some(sandbox_config.clone()),
                runtime_handler: String::new(),
            };
            // RunPodSandbox may pull the pause image: allow it more time.
            match self
                .rt("run_podsandbox", self.timeout * 2, |mut c| async move {
                    c.run_pod_sandbox(req).await
                })
                .await
            {
                Ok(r) => {
                    tracing::info!(pod = %pod_name, sandbox = %r.pod_sandbox_id, attempt = actions.attempt, "created pod sandbox");
                    sandbox_id = r.pod_sandbox_id;
                }
                Err(e) => {
                    tracing::warn!(pod = %pod_name, error = %e, "failed to create pod sandbox");
                    result.fail("", reasons::CREATE_POD_SANDBOX_ERROR, e.to_string());
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
        if let Some(i) = actions.next_init_container_to_start
            && let Some(c) = spec
                .and_then(|s| s.init_containers.as_ref())
                .and_then(|v| v.get(i))
        {
            result.changed = true;
            if let Err((reason, msg)) = self.start_container(&target, c, pod, status, backoff).await
            {
                result.fail(&c.name, &reason, msg);
                return result;
            }
        }
        for &i in &actions.containers_to_start {
            let Some(c) = spec.and_then(|s| s.containers.get(i)) else {
                continue;
            };
            result.changed = true;
            if let Some(msg) = self.do_backoff(pod, c, status, backoff) {
                tracing::info!(pod = %pod_name, container = %c.name, "{msg}");
                result.fail(&c.name, reasons::CRASH_LOOP_BACK_OFF, msg);
                continue;
            }
            if let Err((reason, msg)) = self.start_container(&target, c, pod, status, backoff).await
            {
                tracing::warn!(pod = %pod_name, container = %c.name, reason = %reason, message = %msg, "failed to start container");
                result.fail(&c.name, &reason, msg);
            }
        }
        result
    }

    async fn sandbox_ips(&self, id: &str) -> Vec<String> {
        let req = cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: false,
        };
        match self
            .rt("podsandbox_status", self.timeout, |mut c| async move {
                c.pod_sandbox_status(req).await
            })
            .await
        {
            Ok(r) => r
                .status
                .and_then(|s| s.network)
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

    /// Upstream `doBackOff`: the CrashLoopBackOff message when `c` must still wait.
    fn do_backoff(
        &self,
        pod: &Pod,
        c: &Container,
        status: &PodStatus,
        backoff: &mut Backoff,
    ) -> Option<String> {
        let cs = status
            .find_container_status_by_name(&c.name)
            .filter(|s| s.state == ContainerState::Exited)?;
        let key = container_backoff_key(pod, c);
        let now = Instant::now();
        let event = instant_of(cs.finished_at, now);
        if backoff.is_in_backoff_since(&key, event, now) {
            let delay = backoff.get(&key).unwrap_or_default();
            self.events.event(
                pod,
                Some(&c.name),
                crate::events::EventType::Warning,
                "BackOff",
                format!(
                    "Back-off restarting failed container {} in pod {}",
                    c.name,
                    pod_full_name(pod)
                ),
            );
            return Some(backoff_message(delay, &c.name, &pod_full_name(pod)));
        }
        backoff.next(&key, event);
        None
    }

    /// Upstream `EnsureImageExists`: the image reference to run, or (reason, message).
    async fn ensure_image_exists(
        &self,
        pod: &Pod,
        c: &Container,
        backoff: &mut Backoff,
    ) -> Result<String, (String, String)> {
        let image = c.image.clone().unwrap_or_default();
        let policy = c
            .image_pull_policy
            .clone()
            .unwrap_or_else(|| crate::config::defaults::default_image_pull_policy(&image).into());
        let spec = cri::ImageSpec {
            image: image.clone(),
            ..Default::default()
        };
        let present = if policy == "Always" {
            None
        } else {
            let req = cri::ImageStatusRequest {
                image: Some(spec.clone()),
                verbose: false,
            };
            match self
                .img("image_status", self.timeout, |mut c| async move {
                    c.image_status(req).await
                })
                .await
            {
                Ok(r) => r.image.map(|i| i.id),
                Err(e) => return Err(("ImageInspectError".into(), e.to_string())),
            }
        };
        if let Some(id) = present {
            self.events.event(
                pod,
                Some(&c.name),
                crate::events::EventType::Normal,
                "Pulled",
                format!("Container image {image:?} already present on machine"),
            );
            return Ok(id);
        }
        if policy == "Never" {
            return Err((
                reasons::ERR_IMAGE_NEVER_PULL.into(),
                format!("Container image {image:?} is not present with pull policy of Never"),
            ));
        }
        let key = format!(
            "image_{}_{}",
            pod.metadata.uid.as_deref().unwrap_or_default(),
            image
        );
        let now = Instant::now();
        if backoff.is_in_backoff(&key, now) {
            self.events.event(
                pod,
                Some(&c.name),
                crate::events::EventType::Normal,
                "BackOff",
                format!("Back-off pulling image {image:?}"),
            );
            return Err((
                reasons::IMAGE_PULL_BACK_OFF.into(),
                format!("Back-off pulling image {image:?}"),
            ));
        }
        tracing::info!(pod = %pod_full_name(pod), container = %c.name, image = %image, "pulling image");
        self.events.event(
            pod,
            Some(&c.name),
            crate::events::EventType::Normal,
            "Pulling",
            format!("Pulling image {image:?}"),
        );
        let pull_start = Instant::now();
        // Upstream `pullImage`: each matching credential in turn, anonymous when none match.
        let mut auths: Vec<Option<cri::AuthConfig>> = self
            .api_objects_for(pod)
            .pull_credentials(pod, &image)
            .into_iter()
            .chain(self.credentials.lookup(&image))
            .map(Some)
            .collect();
        if auths.is_empty() {
            auths.push(None);
        }
        let mut result = Err(RuntimeError::Timeout {
            op: "pull_image",
            timeout: Duration::ZERO,
        });
        for auth in auths {
            let req = cri::PullImageRequest {
                image: Some(spec.clone()),
                auth,
                sandbox_config: None,
            };
            result = self
                .img("pull_image", self.timeout * 5, |mut c| async move {
                    c.pull_image(req).await
                })
                .await;
            if result.is_ok() {
                break;
            }
        }
        match result {
            Ok(r) => {
                backoff.reset(&key);
                self.events.event(
                    pod,
                    Some(&c.name),
                    crate::events::EventType::Normal,
                    "Pulled",
                    format!(
                        "Successfully pulled image {image:?} in {:.3}s",
                        pull_start.elapsed().as_secs_f64()
                    ),
                );
                Ok(r.image_ref)
            }
            Err(e) => {
                backoff.next(&key, now);
                self.events.event(
                    pod,
                    Some(&c.name),
                    crate::events::EventType::Warning,
                    "Failed",
                    format!("Failed to pull image {image:?}: {e}"),
                );
                Err((reasons::ERR_IMAGE_PULL.into(), e.to_string()))
            }
        }
    }

    /// Upstream `startContainer`: pull, create, start.
    async fn start_container(
        &self,
        target: &SandboxTarget<'_>,
        c: &Container,
        pod: &Pod,
        status: &PodStatus,
        backoff: &mut Backoff,
    ) -> Result<(), (String, String)> {
        let image_ref = self.ensure_image_exists(pod, c, backoff).await?;
        let restart_count = status
            .find_container_status_by_name(&c.name)
            .map(|s| s.restart_count + 1)
            .unwrap_or(0);
        let logdir = pod_logs_directory(pod).join(&c.name);
        if let Err(e) = std::fs::create_dir_all(&logdir) {
            tracing::warn!(container = %c.name, dir = %logdir.display(), error = %e, "cannot create container log directory");
        }
        let mut config = generate_container_config(
            c,
            pod,
            restart_count,
            &image_ref,
            target.ips,
            &crate::nodestatus::node_ip(),
            &self.api_objects_for(pod),
        )
        .map_err(|e| {
            (
                reasons::CREATE_CONTAINER_CONFIG_ERROR.to_string(),
                e.to_string(),
            )
        })?;
        if let Some(r) = config.linux.as_mut().and_then(|l| l.resources.as_mut()) {
            r.oom_score_adj = self.cm.oom_score_adj(pod, c);
        }
        let pod_dir = self.pod_dir(pod.metadata.uid.as_deref().unwrap_or_default());
        let volumes = crate::volumemanager::volume_host_paths(pod, &pod_dir);
        let config_error = |e: crate::volumemanager::VolumeError| {
            (
                reasons::CREATE_CONTAINER_CONFIG_ERROR.to_string(),
                e.to_string(),
            )
        };
        config.mounts = crate::volumemanager::make_mounts(c, &volumes).map_err(config_error)?;
        let managed = crate::volumemanager::kubelet_managed_mounts(
            pod,
            c,
            &pod_dir,
            target.ips,
            &config.mounts,
        )
        .map_err(config_error)?;
        config.mounts.extend(managed);
        let req = cri::CreateContainerRequest {
            pod_sandbox_id: target.id.to_string(),
            config: Some(config),
            sandbox_config: Some(target.config.clone()),
        };
        let id = self
            .rt("create_container", self.timeout, |mut c| async move {
                c.create_container(req).await
            })
            .await
            .map_err(|e| {
                self.events.event(
                    pod,
                    Some(&c.name),
                    crate::events::EventType::Warning,
                    "Failed",
                    format!("Error: {e}"),
                );
                (reasons::CREATE_CONTAINER_ERROR.to_string(), e.to_string())
            })?
            .container_id;
        self.events.event(
            pod,
            Some(&c.name),
            crate::events::EventType::Normal,
            "Created",
            format!("Created container {}", c.name),
        );
        let req = cri::StartContainerRequest {
            container_id: id.clone(),
        };
        self.rt("start_container", self.timeout, |mut c| async move {
            c.start_container(req).await
        })
        .await
        .map_err(|e| (reasons::RUN_CONTAINER_ERROR.to_string(), e.to_string()))?;
        tracing::info!(pod = %pod_full_name(pod), container = %c.name, id = %id, restart_count, "started container");
        self.events.event(
            pod,
            Some(&c.name),
            crate::events::EventType::Normal,
            "Started",
            format!("Started container {}", c.name),
        );
        if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
            let pod_ip = target.ips.first().map(String::as_str).unwrap_or_default();
            if let Err(msg) = self.run_hook(&id, h, c, pod_ip, self.timeout).await {
                tracing::warn!(pod = %pod_full_name(pod), container = %c.name, error = %msg, "postStart hook failed, killing the container");
                let grace = grace_period_for(Some(pod), None);
                let _ = self.kill_container(&id, grace).await;
                return Err((
                    reasons::POST_START_HOOK_ERROR.to_string(),
                    format!("PostStartHook failed: {msg}"),
                ));
            }
        }
        Ok(())
    }

    /// Upstream `handlerRunner.Run`: exec (CRI `ExecSync`), httpGet, tcpSocket or sleep.
    async fn run_hook(
        &self,
        id: &str,
        h: &k8s_openapi::api::core::v1::LifecycleHandler,
        c: &Container,
        pod_ip: &str,
        timeout: Duration,
    ) -> Result<(), String> {
        if let Some(s) = &h.sleep {
            tokio::time::sleep(Duration::from_secs(u64::try_from(s.seconds).unwrap_or(0))).await;
            return Ok(());
        }
        let probe = k8s_openapi::api::core::v1::Probe {
            exec: h.exec.clone(),
            http_get: h.http_get.clone(),
            tcp_socket: h.tcp_socket.clone(),
            timeout_seconds: i32::try_from(timeout.as_secs()).ok(),
            ..Default::default()
        };
        crate::prober::run_probe(self, &probe, c, id, pod_ip).await
    }

    /// Upstream `killContainer` with the container's spec: run `preStop` (bounded by the grace
    /// period, which it uses up), then `StopContainer` with what remains.
    pub async fn kill_container_with_hook(
        &self,
        id: &str,
        spec: Option<&Container>,
        pod_ip: &str,
        grace_secs: i64,
    ) -> Result<(), RuntimeError> {
        let mut grace = grace_secs;
        if let Some(c) = spec
            && let Some(h) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref())
        {
            let start = std::time::Instant::now();
            let budget = Duration::from_secs(u64::try_from(grace_secs).unwrap_or(0));
            match tokio::time::timeout(budget, self.run_hook(id, h, c, pod_ip, budget)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(container = %c.name, error = %e, "preStop hook failed")
                }
                Err(_) => {
                    tracing::warn!(container = %c.name, "preStop hook did not finish in the grace period")
                }
            }
            let used = i64::try_from(start.elapsed().as_secs()).unwrap_or(i64::MAX);
            grace = (grace_secs - used).max(MINIMUM_GRACE_PERIOD_SECONDS);
        }
        self.kill_container(id, grace).await
    }

    /// Upstream `killContainer`: `StopContainer` with the grace period.
    pub async fn kill_container(&self, id: &str, grace_secs: i64) -> Result<(), RuntimeError> {
        let req = cri::StopContainerRequest {
            container_id: id.to_string(),
            timeout: grace_secs,
        };
        let secs = u64::try_from(grace_secs).unwrap_or(0);
        self.rt(
            "stop_container",
            self.timeout + Duration::from_secs(secs),
            |mut c| async move { c.stop_container(req).await },
        )
        .await
        .map(|_| ())
    }

    async fn stop_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        let req = cri::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        self.rt("stop_podsandbox", self.timeout, |mut c| async move {
            c.stop_pod_sandbox(req).await
        })
        .await
        .map(|_| ())
    }

    async fn kill_all(
        &self,
        containers: Vec<(String, i64, Option<Container>)>,
        pod_ip: &str,
        sandboxes: Vec<String>,
    ) -> Result<(), RuntimeError> {
        let kills = containers.iter().map(|(id, grace, spec)| {
            self.kill_container_with_hook(id, spec.as_ref(), pod_ip, *grace)
        });
        let mut first_err = None;
        for r in futures::future::join_all(kills).await {
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        for s in sandboxes {
            self.stop_sandbox(&s).await?;
        }
        Ok(())
    }

    /// Kill a pod from its status: stop running containers in parallel, then its sandboxes.
    /// With `pod`, containers' `preStop` hooks run first.
    pub async fn kill_pod_status(
        &self,
        pod: Option<&Pod>,
        status: &PodStatus,
        grace: i64,
    ) -> Result<(), RuntimeError> {
        let spec_of = |name: &str| {
            pod.and_then(|p| p.spec.as_ref())
                .and_then(|s| s.containers.iter().find(|c| c.name == name))
                .cloned()
        };
        let containers = status
            .container_statuses
            .iter()
            .filter(|c| {
                matches!(
                    c.state,
                    ContainerState::Running | ContainerState::Unknown | ContainerState::Created
                )
            })
            .map(|c| (c.id.id.clone(), grace, spec_of(&c.name)))
            .collect::<Vec<_>>();
        if let Some(p) = pod {
            for (_, _, spec) in &containers {
                if let Some(c) = spec {
                    self.events.event(
                        p,
                        Some(&c.name),
                        crate::events::EventType::Normal,
                        "Killing",
                        format!("Stopping container {}", c.name),
                    );
                }
            }
        }
        let sandboxes = status
            .sandbox_statuses
            .iter()
            .filter(|s| s.state == SandboxState::Ready)
            .map(|s| s.id.clone())
            .collect();
        let pod_ip = status.ips.first().cloned().unwrap_or_default();
        self.kill_all(containers, &pod_ip, sandboxes).await
    }

    /// Kill a pod the kubelet only knows from the runtime (upstream `KillPod` with a runtime
    /// pod): grace from the container annotations unless `grace_override`.
    pub async fn kill_runtime_pod(
        &self,
        pod: &RuntimePod,
        grace_override: Option<i64>,
    ) -> Result<(), RuntimeError> {
        let containers = pod
            .containers
            .iter()
            .filter(|c| c.state != ContainerState::Exited)
            .map(|c| {
                (
                    c.id.clone(),
                    grace_override
                        .or(c.grace_period)
                        .unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS)
                        .max(MINIMUM_GRACE_PERIOD_SECONDS),
                    None,
                )
            })
            .collect();
        let sandboxes = pod
            .sandboxes
            .iter()
            .filter(|s| s.state == ContainerState::Running)
            .map(|s| s.id.clone())
            .collect();
        self.kill_all(containers, "", sandboxes).await
    }

    pub(crate) async fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        let req = cri::RemoveContainerRequest {
            container_id: id.to_string(),
        };
        self.rt("remove_container", self.timeout, |mut c| async move {
            c.remove_container(req).await
        })
        .await
        .map(|_| ())
    }

    pub(crate) async fn remove_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        let req = cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        self.rt("remove_podsandbox", self.timeout, |mut c| async move {
            c.remove_pod_sandbox(req).await
        })
        .await
        .map(|_| ())
    }

    /// Remove every stopped container and not-ready sandbox of pod `uid` (the terminated pod's
    /// cleanup; upstream does it through the garbage collector).
    pub async fn remove_pod(&self, uid: &str) -> Result<(), RuntimeError> {
        let sel = HashMap::from([(POD_UID_LABEL.to_string(), uid.to_string())]);
        for c in self.list_containers(sel.clone()).await? {
            if c.state != cri::ContainerState::ContainerRunning as i32 {
                self.remove_container(&c.id).await?;
            }
        }
        for s in self.list_sandboxes(sel).await? {
            if s.state != cri::PodSandboxState::SandboxReady as i32 {
                self.remove_sandbox(&s.id).await?;
            }
        }
        Ok(())
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
}
