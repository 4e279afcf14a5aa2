//! An in-memory CRI runtime for unit tests (upstream `cri-api/pkg/apis/testing`
//! `FakeRuntimeService` and `FakeImageService`): sandboxes, containers and images live in a
//! map, every call is recorded by name, and a test can inject an error for the next call of an
//! operation, make a container exit, or make an image unpullable. It follows CRI's rules where
//! the kubelet relies on them: stop and remove are idempotent, a missing object is `NotFound`,
//! `CreateContainer` needs its sandbox and image, stopping a sandbox stops its containers, and
//! container changes are published on the `GetContainerEvents` stream.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Duration;

use async_trait::async_trait;
use cri_proto::runtime::v1 as cri;
use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::broadcast;
use tonic::Status;

use super::{ContainerEventStream, ImageManagerService, Result, RuntimeError, RuntimeService};

#[derive(Debug)]
struct Container {
    sandbox_id: String,
    status: cri::ContainerStatus,
    /// The namespaces it was created with (`linux.security_context.namespace_options`).
    namespaces: Option<cri::NamespaceOption>,
}

impl Container {
    /// CRI's container filter: id, sandbox, state and labels, each when set.
    fn matches(&self, f: &cri::ContainerFilter) -> bool {
        (f.id.is_empty() || self.status.id == f.id)
            && (f.pod_sandbox_id.is_empty() || self.sandbox_id == f.pod_sandbox_id)
            && f.state
                .as_ref()
                .is_none_or(|st| st.state == self.status.state)
            && labels_match(&f.label_selector, &self.status.labels)
    }
}

#[derive(Debug, Default)]
struct State {
    sandboxes: BTreeMap<String, cri::PodSandboxStatus>,
    /// What `ListPodSandboxStats` reports as a sandbox's network.
    networks: HashMap<String, cri::NetworkUsage>,
    containers: BTreeMap<String, Container>,
    images: BTreeMap<String, cri::Image>,
    unpullable: HashSet<String>,
    calls: Vec<String>,
    errors: HashMap<String, VecDeque<Option<Status>>>,
    exec_results: VecDeque<cri::ExecSyncResponse>,
    pulls: Vec<(String, Option<cri::AuthConfig>)>,
    next_id: u64,
    clock_ns: i64,
    /// How long each `PodSandboxStatus` takes (a busy runtime), and how many were in flight
    /// at once: now and at most.
    sandbox_status_latency: std::time::Duration,
    sandbox_status_in_flight: usize,
    sandbox_status_max_in_flight: usize,
    /// Simulated time the slow operations take (see [`Latency`]).
    latency: Latency,
    /// Whether calls and pulls are recorded (tests) or not (a long-lived fake, which would
    /// otherwise grow without bound).
    quiet: bool,
}

/// How long the operations a real runtime spends time on take in the fake (on the tokio
/// clock), so that a kubelet on it sees startup latency as on a real runtime (upstream
/// kubemark's hollow nodes have none; a fake runtime served to other kubelets wants some).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Latency {
    /// `RunPodSandbox` (a real runtime: pause container and CNI, ~0.3–1 s).
    pub run_pod_sandbox: Duration,
    /// `PullImage`.
    pub pull_image: Duration,
    /// `CreateContainer`.
    pub create_container: Duration,
    /// `StartContainer`.
    pub start_container: Duration,
    /// `StopPodSandbox` and `StopContainer`.
    pub stop: Duration,
}

impl State {
    /// The wall clock in nanoseconds (as runtimes stamp objects), strictly increasing.
    fn tick(&mut self) -> i64 {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        self.clock_ns = wall.max(self.clock_ns + 1);
        self.clock_ns
    }
}

/// A fake CRI runtime and image service (see the module doc).
#[derive(Debug)]
pub struct FakeRuntime {
    state: Mutex<State>,
    events: broadcast::Sender<cri::ContainerEventResponse>,
}

impl Default for FakeRuntime {
    fn default() -> Self {
        Self::new()
    }
}

/// `image` with `:latest` when it names no tag or digest (how runtimes resolve it).
fn normalize(image: &str) -> String {
    let name = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || name.contains(':') {
        image.to_string()
    } else {
        format!("{image}:latest")
    }
}

fn labels_match(selector: &HashMap<String, String>, labels: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

impl FakeRuntime {
    /// An empty runtime with no images.
    pub fn new() -> Self {
        Self {
            state: Mutex::default(),
            events: broadcast::channel(1024).0,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock())
    }

    /// Records the call `op` and returns the error injected for it, if any.
    fn enter(&self, op: &'static str) -> Result<()> {
        self.with(|s| {
            if !s.quiet {
                s.calls.push(op.to_string());
            }
            s.tick();
            match s.errors.get_mut(op).and_then(VecDeque::pop_front).flatten() {
                Some(status) => Err(RuntimeError::Rpc { op, status }),
                None => Ok(()),
            }
        })
    }

    fn publish(&self, id: &str, sandbox_id: &str, kind: cri::ContainerEventType, at: i64) {
        let _ = self.events.send(cri::ContainerEventResponse {
            container_id: id.to_string(),
            container_event_type: kind as i32,
            created_at: at,
            pod_sandbox_status: None,
            containers_statuses: vec![],
        });
        let _ = sandbox_id;
    }

    /// The names of the calls made so far, in order (`run_podsandbox`, `create_container`, …).
    pub fn calls(&self) -> Vec<String> {
        self.with(|s| s.calls.clone())
    }

    /// How many calls of `op` were made so far.
    pub fn call_count(&self, op: &str) -> usize {
        self.with(|s| s.calls.iter().filter(|c| *c == op).count())
    }

    /// Forgets the recorded calls.
    pub fn clear_calls(&self) {
        self.with(|s| s.calls.clear());
    }

    /// The slow operations take `latency` from now on (on the tokio clock).
    pub fn set_latency(&self, latency: Latency) {
        self.with(|s| s.latency = latency);
    }

    /// Stop recording calls and pulls (for a fake that lives long, as a served runtime):
    /// [`calls`](Self::calls) and [`pulls`](Self::pulls) stay empty from now on.
    pub fn set_quiet(&self) {
        self.with(|s| {
            s.quiet = true;
            s.calls = Vec::new();
            s.pulls = Vec::new();
        });
    }

    /// Waits out the simulated latency `pick` chooses.
    async fn delay(&self, pick: impl FnOnce(&Latency) -> Duration) {
        let d = self.with(|s| pick(&s.latency));
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
    }

    /// Every `PodSandboxStatus` takes `latency` from now on (on the tokio clock).
    pub fn set_sandbox_status_latency(&self, latency: std::time::Duration) {
        self.with(|s| s.sandbox_status_latency = latency);
    }

    /// The most `PodSandboxStatus` calls that were in flight at once.
    pub fn sandbox_status_max_in_flight(&self) -> usize {
        self.with(|s| s.sandbox_status_max_in_flight)
    }

    /// The next call of `op` fails with `status`.
    pub fn inject_error(&self, op: &str, status: Status) {
        self.with(|s| {
            s.errors
                .entry(op.to_string())
                .or_default()
                .push_back(Some(status))
        });
    }

    /// The next `skip` calls of `op` succeed, the one after fails with `status`.
    pub fn inject_error_after(&self, op: &str, skip: usize, status: Status) {
        self.with(|s| {
            let q = s.errors.entry(op.to_string()).or_default();
            q.extend(std::iter::repeat_n(None, skip));
            q.push_back(Some(status));
        });
    }

    /// Makes `image` present, as a pull would.
    pub fn add_image(&self, image: &str, size: u64) {
        self.with(|s| {
            s.next_id += 1;
            let name = normalize(image);
            let id = format!("sha256:{:064x}", s.next_id);
            s.images.insert(
                name.clone(),
                cri::Image {
                    id,
                    repo_tags: vec![name],
                    size,
                    ..Default::default()
                },
            );
        });
    }

    /// `ListPodSandboxStats` reports `usage` as sandbox `id`'s network.
    pub fn set_sandbox_network(&self, id: &str, usage: cri::NetworkUsage) {
        self.with(|s| s.networks.insert(id.to_string(), usage));
    }

    /// Pulling `image` fails with `NotFound`.
    pub fn make_unpullable(&self, image: &str) {
        self.with(|s| s.unpullable.insert(normalize(image)));
    }

    /// The images pulled so far with the credentials each pull carried.
    pub fn pulls(&self) -> Vec<(String, Option<cri::AuthConfig>)> {
        self.with(|s| s.pulls.clone())
    }

    /// The next `ExecSync` answers `response`.
    pub fn push_exec_result(&self, response: cri::ExecSyncResponse) {
        self.with(|s| s.exec_results.push_back(response));
    }

    /// The container `id` exits with `exit_code` (as if its process ended).
    pub fn exit_container(&self, id: &str, exit_code: i32) {
        let published = self.with(|s| {
            let now = s.tick();
            let c = s.containers.get_mut(id)?;
            c.status.state = cri::ContainerState::ContainerExited as i32;
            c.status.finished_at = now;
            c.status.exit_code = exit_code;
            c.status.reason = if exit_code == 0 { "Completed" } else { "Error" }.into();
            Some((c.sandbox_id.clone(), now))
        });
        if let Some((sandbox, at)) = published {
            self.publish(
                id,
                &sandbox,
                cri::ContainerEventType::ContainerStoppedEvent,
                at,
            );
        }
    }

    /// The namespaces container `id` was created with.
    pub fn container_namespaces(&self, id: &str) -> Option<cri::NamespaceOption> {
        self.with(|s| s.containers.get(id).and_then(|c| c.namespaces.clone()))
    }

    /// Every image.
    pub fn images(&self) -> Vec<cri::Image> {
        self.with(|s| s.images.values().cloned().collect())
    }

    /// Every sandbox's status.
    pub fn sandboxes(&self) -> Vec<cri::PodSandboxStatus> {
        self.with(|s| s.sandboxes.values().cloned().collect())
    }

    /// Every container's status with its sandbox id.
    pub fn containers(&self) -> Vec<(String, cri::ContainerStatus)> {
        self.with(|s| {
            s.containers
                .values()
                .map(|c| (c.sandbox_id.clone(), c.status.clone()))
                .collect()
        })
    }

    fn not_found(op: &'static str, what: &str) -> RuntimeError {
        RuntimeError::Rpc {
            op,
            status: Status::not_found(format!("{what} not found")),
        }
    }

    fn find_image(s: &State, image: &str) -> Option<cri::Image> {
        let name = normalize(image);
        s.images
            .values()
            .find(|i| {
                i.id == image
                    || i.repo_tags.contains(&name)
                    || i.repo_digests.iter().any(|d| d == image)
            })
            .cloned()
    }
}

#[async_trait]
impl RuntimeService for FakeRuntime {
    async fn version(&self) -> Result<cri::VersionResponse> {
        self.enter("version")?;
        Ok(cri::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "fake".into(),
            runtime_version: "0.1.0".into(),
            runtime_api_version: "v1".into(),
        })
    }

    async fn run_pod_sandbox(
        &self,
        config: cri::PodSandboxConfig,
        handler: &str,
    ) -> Result<String> {
        self.enter("run_podsandbox")?;
        self.delay(|l| l.run_pod_sandbox).await;
        Ok(self.with(|s| {
            s.next_id += 1;
            let id = format!("sandbox-{}", s.next_id);
            let ns = config
                .linux
                .as_ref()
                .and_then(|l| l.security_context.as_ref())
                .and_then(|c| c.namespace_options.clone());
            let host_network = ns
                .as_ref()
                .is_some_and(|o| o.network == cri::NamespaceMode::Node as i32);
            let ip = if host_network {
                String::new()
            } else {
                format!("10.88.0.{}", s.next_id % 250 + 2)
            };
            s.sandboxes.insert(
                id.clone(),
                cri::PodSandboxStatus {
                    id: id.clone(),
                    metadata: config.metadata.clone(),
                    state: cri::PodSandboxState::SandboxReady as i32,
                    created_at: s.clock_ns,
                    network: Some(cri::PodSandboxNetworkStatus {
                        ip,
                        additional_ips: vec![],
                    }),
                    linux: Some(cri::LinuxPodSandboxStatus {
                        namespaces: Some(cri::Namespace { options: ns }),
                    }),
                    labels: config.labels.clone(),
                    annotations: config.annotations.clone(),
                    runtime_handler: handler.to_string(),
                },
            );
            id
        }))
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        self.enter("stop_podsandbox")?;
        self.delay(|l| l.stop).await;
        let stopped = self.with(|s| {
            let now = s.clock_ns;
            if let Some(sb) = s.sandboxes.get_mut(id) {
                sb.state = cri::PodSandboxState::SandboxNotready as i32;
            }
            let mut stopped = vec![];
            for (cid, c) in s.containers.iter_mut() {
                if c.sandbox_id == id
                    && c.status.state == cri::ContainerState::ContainerRunning as i32
                {
                    c.status.state = cri::ContainerState::ContainerExited as i32;
                    c.status.finished_at = now;
                    c.status.exit_code = 137;
                    c.status.reason = "Error".into();
                    stopped.push(cid.clone());
                }
            }
            (stopped, now)
        });
        for c in stopped.0 {
            self.publish(
                &c,
                id,
                cri::ContainerEventType::ContainerStoppedEvent,
                stopped.1,
            );
        }
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        self.enter("remove_podsandbox")?;
        let removed = self.with(|s| {
            s.sandboxes.remove(id);
            let ids: Vec<String> = s
                .containers
                .iter()
                .filter(|(_, c)| c.sandbox_id == id)
                .map(|(k, _)| k.clone())
                .collect();
            for c in &ids {
                s.containers.remove(c);
            }
            (ids, s.clock_ns)
        });
        for c in removed.0 {
            self.publish(
                &c,
                id,
                cri::ContainerEventType::ContainerDeletedEvent,
                removed.1,
            );
        }
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatus> {
        self.enter("podsandbox_status")?;
        let latency = self.with(|s| {
            s.sandbox_status_in_flight += 1;
            s.sandbox_status_max_in_flight = s
                .sandbox_status_max_in_flight
                .max(s.sandbox_status_in_flight);
            s.sandbox_status_latency
        });
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        self.with(|s| s.sandbox_status_in_flight -= 1);
        self.with(|s| s.sandboxes.get(id).cloned())
            .ok_or_else(|| Self::not_found("podsandbox_status", &format!("sandbox {id}")))
    }

    async fn list_pod_sandbox(
        &self,
        filter: Option<cri::PodSandboxFilter>,
    ) -> Result<Vec<cri::PodSandbox>> {
        self.enter("list_podsandbox")?;
        let f = filter.unwrap_or_default();
        Ok(self.with(|s| {
            s.sandboxes
                .values()
                .filter(|sb| f.id.is_empty() || sb.id == f.id)
                .filter(|sb| f.state.as_ref().is_none_or(|st| st.state == sb.state))
                .filter(|sb| labels_match(&f.label_selector, &sb.labels))
                .map(|sb| cri::PodSandbox {
                    id: sb.id.clone(),
                    metadata: sb.metadata.clone(),
                    state: sb.state,
                    created_at: sb.created_at,
                    labels: sb.labels.clone(),
                    annotations: sb.annotations.clone(),
                    runtime_handler: sb.runtime_handler.clone(),
                })
                .collect()
        }))
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox_config: cri::PodSandboxConfig,
    ) -> Result<String> {
        self.enter("create_container")?;
        self.delay(|l| l.create_container).await;
        let image = config.image.clone().unwrap_or_default();
        let created = self.with(|s| {
            if !s.sandboxes.contains_key(sandbox_id) {
                return Err(Self::not_found(
                    "create_container",
                    &format!("sandbox {sandbox_id}"),
                ));
            }
            let Some(img) = Self::find_image(s, &image.image) else {
                return Err(Self::not_found(
                    "create_container",
                    &format!("image {}", image.image),
                ));
            };
            s.next_id += 1;
            let id = format!("container-{}", s.next_id);
            let log_path = if config.log_path.is_empty() {
                String::new()
            } else {
                format!("{}/{}", sandbox_config.log_directory, config.log_path)
            };
            let namespaces = config
                .linux
                .as_ref()
                .and_then(|l| l.security_context.as_ref())
                .and_then(|sc| sc.namespace_options.clone());
            s.containers.insert(
                id.clone(),
                Container {
                    sandbox_id: sandbox_id.to_string(),
                    namespaces,
                    status: cri::ContainerStatus {
                        id: id.clone(),
                        metadata: config.metadata.clone(),
                        state: cri::ContainerState::ContainerCreated as i32,
                        created_at: s.clock_ns,
                        image: Some(image.clone()),
                        image_ref: img.id.clone(),
                        labels: config.labels.clone(),
                        annotations: config.annotations.clone(),
                        mounts: config.mounts.clone(),
                        log_path,
                        ..Default::default()
                    },
                },
            );
            Ok((id, s.clock_ns))
        })?;
        self.publish(
            &created.0,
            sandbox_id,
            cri::ContainerEventType::ContainerCreatedEvent,
            created.1,
        );
        Ok(created.0)
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        self.enter("start_container")?;
        self.delay(|l| l.start_container).await;
        let started = self.with(|s| {
            let now = s.clock_ns;
            let c = s
                .containers
                .get_mut(id)
                .ok_or_else(|| Self::not_found("start_container", &format!("container {id}")))?;
            if c.status.state != cri::ContainerState::ContainerCreated as i32 {
                return Err(RuntimeError::Rpc {
                    op: "start_container",
                    status: Status::failed_precondition(format!("container {id} is not created")),
                });
            }
            c.status.state = cri::ContainerState::ContainerRunning as i32;
            c.status.started_at = now;
            Ok((c.sandbox_id.clone(), now))
        })?;
        self.publish(
            id,
            &started.0,
            cri::ContainerEventType::ContainerStartedEvent,
            started.1,
        );
        Ok(())
    }

    async fn stop_container(&self, id: &str, _timeout_secs: i64) -> Result<()> {
        self.enter("stop_container")?;
        self.delay(|l| l.stop).await;
        let stopped = self.with(|s| {
            let now = s.clock_ns;
            let c = s
                .containers
                .get_mut(id)
                .ok_or_else(|| Self::not_found("stop_container", &format!("container {id}")))?;
            if c.status.state != cri::ContainerState::ContainerRunning as i32 {
                return Ok::<_, RuntimeError>(None);
            }
            c.status.state = cri::ContainerState::ContainerExited as i32;
            c.status.finished_at = now;
            c.status.exit_code = 0;
            c.status.reason = "Completed".into();
            Ok(Some((c.sandbox_id.clone(), now)))
        })?;
        if let Some((sandbox, at)) = stopped {
            self.publish(
                id,
                &sandbox,
                cri::ContainerEventType::ContainerStoppedEvent,
                at,
            );
        }
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        self.enter("remove_container")?;
        let removed = self.with(|s| s.containers.remove(id).map(|c| (c.sandbox_id, s.clock_ns)));
        if let Some((sandbox, at)) = removed {
            self.publish(
                id,
                &sandbox,
                cri::ContainerEventType::ContainerDeletedEvent,
                at,
            );
        }
        Ok(())
    }

    async fn list_containers(
        &self,
        filter: Option<cri::ContainerFilter>,
    ) -> Result<Vec<cri::Container>> {
        self.enter("list_containers")?;
        let f = filter.unwrap_or_default();
        Ok(self.with(|s| {
            s.containers
                .values()
                .filter(|c| c.matches(&f))
                .map(|c| cri::Container {
                    id: c.status.id.clone(),
                    pod_sandbox_id: c.sandbox_id.clone(),
                    metadata: c.status.metadata.clone(),
                    image: c.status.image.clone(),
                    image_ref: c.status.image_ref.clone(),
                    state: c.status.state,
                    created_at: c.status.created_at,
                    labels: c.status.labels.clone(),
                    annotations: c.status.annotations.clone(),
                    ..Default::default()
                })
                .collect()
        }))
    }

    async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus> {
        self.enter("container_status")?;
        self.with(|s| s.containers.get(id).map(|c| c.status.clone()))
            .ok_or_else(|| Self::not_found("container_status", &format!("container {id}")))
    }

    async fn reopen_container_log(&self, id: &str) -> Result<()> {
        self.enter("reopen_container_log")?;
        let running = self.with(|s| {
            s.containers
                .get(id)
                .map(|c| c.status.state == cri::ContainerState::ContainerRunning as i32)
        });
        match running {
            Some(true) => Ok(()),
            Some(false) => Err(RuntimeError::Rpc {
                op: "reopen_container_log",
                status: Status::failed_precondition("container is not running"),
            }),
            None => Err(Self::not_found(
                "reopen_container_log",
                &format!("container {id}"),
            )),
        }
    }

    async fn exec_sync(
        &self,
        id: &str,
        _cmd: Vec<String>,
        _timeout: Duration,
    ) -> Result<cri::ExecSyncResponse> {
        self.enter("exec_sync")?;
        self.with(|s| {
            if !s.containers.contains_key(id) {
                return Err(Self::not_found("exec_sync", &format!("container {id}")));
            }
            Ok(s.exec_results.pop_front().unwrap_or_default())
        })
    }

    async fn exec(&self, req: cri::ExecRequest) -> Result<String> {
        self.enter("exec")?;
        Ok(format!("http://127.0.0.1:0/exec/{}", req.container_id))
    }

    async fn attach(&self, req: cri::AttachRequest) -> Result<String> {
        self.enter("attach")?;
        Ok(format!("http://127.0.0.1:0/attach/{}", req.container_id))
    }

    async fn port_forward(&self, req: cri::PortForwardRequest) -> Result<String> {
        self.enter("port_forward")?;
        Ok(format!(
            "http://127.0.0.1:0/portforward/{}",
            req.pod_sandbox_id
        ))
    }

    async fn list_pod_sandbox_stats(
        &self,
        filter: Option<cri::PodSandboxStatsFilter>,
    ) -> Result<Vec<cri::PodSandboxStats>> {
        self.enter("list_podsandbox_stats")?;
        let id = filter.map(|f| f.id).unwrap_or_default();
        Ok(self.with(|s| {
            s.sandboxes
                .values()
                .filter(|sb| id.is_empty() || sb.id == id)
                .map(|sb| cri::PodSandboxStats {
                    attributes: Some(cri::PodSandboxAttributes {
                        id: sb.id.clone(),
                        metadata: sb.metadata.clone(),
                        labels: sb.labels.clone(),
                        annotations: sb.annotations.clone(),
                    }),
                    linux: Some(cri::LinuxPodSandboxStats {
                        network: s.networks.get(&sb.id).cloned(),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect()
        }))
    }

    async fn list_container_stats(
        &self,
        filter: Option<cri::ContainerStatsFilter>,
    ) -> Result<Vec<cri::ContainerStats>> {
        self.enter("list_container_stats")?;
        let f = filter.unwrap_or_default();
        let f = cri::ContainerFilter {
            id: f.id,
            pod_sandbox_id: f.pod_sandbox_id,
            label_selector: f.label_selector,
            state: None,
        };
        Ok(self.with(|s| {
            s.containers
                .values()
                .filter(|c| c.matches(&f))
                .map(|c| cri::ContainerStats {
                    attributes: Some(cri::ContainerAttributes {
                        id: c.status.id.clone(),
                        metadata: c.status.metadata.clone(),
                        labels: c.status.labels.clone(),
                        annotations: c.status.annotations.clone(),
                    }),
                    ..Default::default()
                })
                .collect()
        }))
    }

    async fn runtime_config(&self) -> Result<cri::RuntimeConfigResponse> {
        self.enter("runtime_config")?;
        Ok(cri::RuntimeConfigResponse {
            linux: Some(cri::LinuxRuntimeConfiguration {
                cgroup_driver: cri::CgroupDriver::Cgroupfs as i32,
            }),
        })
    }

    async fn get_container_events(&self) -> Result<ContainerEventStream> {
        self.enter("get_container_events")?;
        let rx = self.events.subscribe();
        Ok(futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(e) => return Some((Ok(e), rx)),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
        .boxed())
    }
}

#[async_trait]
impl ImageManagerService for FakeRuntime {
    async fn list_images(&self, filter: Option<cri::ImageFilter>) -> Result<Vec<cri::Image>> {
        self.enter("list_images")?;
        let want = filter.and_then(|f| f.image).map(|i| i.image);
        Ok(self.with(|s| match want {
            Some(w) => Self::find_image(s, &w).into_iter().collect(),
            None => s.images.values().cloned().collect(),
        }))
    }

    async fn image_status(&self, image: cri::ImageSpec) -> Result<Option<cri::Image>> {
        self.enter("image_status")?;
        Ok(self.with(|s| Self::find_image(s, &image.image)))
    }

    async fn pull_image(
        &self,
        image: cri::ImageSpec,
        auth: Option<cri::AuthConfig>,
        _sandbox_config: Option<cri::PodSandboxConfig>,
    ) -> Result<String> {
        self.enter("pull_image")?;
        self.delay(|l| l.pull_image).await;
        let name = normalize(&image.image);
        self.with(|s| {
            if !s.quiet {
                s.pulls.push((image.image.clone(), auth));
            }
        });
        if self.with(|s| s.unpullable.contains(&name)) {
            return Err(RuntimeError::Rpc {
                op: "pull_image",
                status: Status::not_found(format!("pull access denied for {}", image.image)),
            });
        }
        if self.with(|s| Self::find_image(s, &image.image)).is_none() {
            self.add_image(&image.image, 1 << 20);
        }
        self.with(|s| Self::find_image(s, &image.image))
            .map(|i| i.id)
            .ok_or_else(|| Self::not_found("pull_image", &image.image))
    }

    async fn remove_image(&self, image: cri::ImageSpec) -> Result<()> {
        self.enter("remove_image")?;
        self.with(|s| {
            if let Some(found) = Self::find_image(s, &image.image) {
                s.images.retain(|_, i| i.id != found.id);
            }
        });
        Ok(())
    }

    async fn image_fs_info(&self) -> Result<Vec<cri::FilesystemUsage>> {
        self.enter("image_fs_info")?;
        let used: u64 = self.with(|s| s.images.values().map(|i| i.size).sum());
        Ok(vec![cri::FilesystemUsage {
            timestamp: self.with(|s| s.clock_ns),
            fs_id: Some(cri::FilesystemIdentifier {
                mountpoint: "/var/lib/fake".into(),
            }),
            used_bytes: Some(cri::UInt64Value { value: used }),
            inodes_used: Some(cri::UInt64Value {
                value: self.with(|s| s.images.len() as u64),
            }),
        }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox_config() -> cri::PodSandboxConfig {
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "p".into(),
                namespace: "ns".into(),
                uid: "u".into(),
                attempt: 0,
            }),
            ..Default::default()
        }
    }

    /// With a latency profile, `RunPodSandbox` and `PullImage` take that long on the tokio
    /// clock; the calls without one answer at once.
    #[tokio::test(start_paused = true)]
    async fn the_latency_profile_delays_the_slow_operations() {
        let fake = FakeRuntime::new();
        fake.set_latency(Latency {
            run_pod_sandbox: Duration::from_millis(800),
            pull_image: Duration::from_secs(2),
            ..Default::default()
        });
        let t0 = tokio::time::Instant::now();
        fake.run_pod_sandbox(sandbox_config(), "")
            .await
            .expect("sandbox");
        assert_eq!(t0.elapsed(), Duration::from_millis(800));
        let t1 = tokio::time::Instant::now();
        fake.pull_image(
            cri::ImageSpec {
                image: "busybox".into(),
                ..Default::default()
            },
            None,
            None,
        )
        .await
        .expect("pull");
        assert_eq!(t1.elapsed(), Duration::from_secs(2));
        let t2 = tokio::time::Instant::now();
        fake.list_pod_sandbox(None).await.expect("list");
        assert_eq!(t2.elapsed(), Duration::ZERO);
    }

    /// A quiet fake records no calls and no pulls (a long-lived served fake stays bounded),
    /// and still works.
    #[tokio::test]
    async fn a_quiet_fake_records_nothing() {
        let fake = FakeRuntime::new();
        fake.run_pod_sandbox(sandbox_config(), "")
            .await
            .expect("sandbox");
        assert_eq!(fake.calls(), vec!["run_podsandbox".to_string()]);
        fake.set_quiet();
        fake.run_pod_sandbox(sandbox_config(), "")
            .await
            .expect("sandbox");
        fake.pull_image(
            cri::ImageSpec {
                image: "busybox".into(),
                ..Default::default()
            },
            None,
            None,
        )
        .await
        .expect("pull");
        assert!(fake.calls().is_empty());
        assert!(fake.pulls().is_empty());
        assert_eq!(fake.sandboxes().len(), 2);
    }
}
