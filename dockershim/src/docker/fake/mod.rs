//! An in-memory [`DockerApi`] for unit tests (upstream dockershim's `libdocker.FakeDockerClient`):
//! containers and images are plain state, every call is recorded as one line of text
//! (`create k8s_POD_...`, `stop <id> 10`), a failure can be queued for the next call of an
//! operation, and container lifecycle changes are published as Docker events (`create`,
//! `start`, `die`, `destroy`) carrying the container's labels, replayed from `since` to a new
//! follower. It answers the way the Engine does where the shim depends on it: `No such
//! container` / `No such image` as [`DockerError::NotFound`], a name already in use as
//! [`DockerError::Conflict`], ids resolved in full, by name or by unique prefix, list filters on
//! labels and status. Test-only; nothing in it touches the host.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::auth::DockerCredentials;
use bollard::models::{
    ContainerCpuStats, ContainerCpuUsage, ContainerCreateBody, ContainerInspectResponse,
    ContainerMemoryStats, ContainerStateStatusEnum, ContainerStatsResponse, ContainerSummary,
    ContainerUpdateBody, EventActor, EventMessage, EventMessageTypeEnum, ImageConfig, ImageInspect,
    ImageSummary, SystemInfo, SystemVersion,
};
use futures::StreamExt;
use node_common::pull_progress::{PullPublisher, PullReport};
use parking_lot::{Mutex, MutexGuard};
use sha2::{Digest, Sha256};
use tokio::sync::broadcast;

use super::{DockerApi, DockerError, DockerStream, ExecOutput, LogChunk};

#[cfg(test)]
mod tests;
mod views;

/// The Engine version the fake reports.
pub const FAKE_VERSION: &str = "27.0.0-fake";
/// The fake's first container pid; far above any real pid, so nothing reads a live process.
const FIRST_PID: i64 = 4_000_000;

/// One container of the fake Engine.
#[derive(Debug, Clone)]
pub struct FakeContainer {
    pub id: String,
    /// Without Docker's leading `/`.
    pub name: String,
    /// What the shim asked for.
    pub body: ContainerCreateBody,
    pub status: ContainerStateStatusEnum,
    pub pid: i64,
    pub exit_code: i64,
    pub oom_killed: bool,
    /// Unix seconds.
    pub created: i64,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// The bridge address the Engine gave it (bridge network mode only).
    pub ip: String,
    /// The output `logs` replays.
    pub output: Vec<LogChunk>,
    /// How many of `output`'s last chunks a follow read leaves out, as Docker 20.10's follow
    /// stream can lose an exited container's last unterminated output.
    pub follow_drops: usize,
    /// Every UpdateContainer body, oldest first.
    pub updates: Vec<ContainerUpdateBody>,
    /// The cumulative CPU usage `stats` reports (core-nanoseconds).
    pub cpu_usage: u64,
}

impl FakeContainer {
    pub fn labels(&self) -> HashMap<String, String> {
        self.body.labels.clone().unwrap_or_default()
    }

    pub fn running(&self) -> bool {
        self.status == ContainerStateStatusEnum::RUNNING
    }
}

/// One image of the fake Engine.
#[derive(Debug, Clone, Default)]
pub struct FakeImage {
    /// `sha256:<64 hex>`.
    pub id: String,
    pub tags: Vec<String>,
    pub digests: Vec<String>,
    /// The image config's `User`.
    pub user: String,
    pub size: i64,
}

#[derive(Default)]
struct State {
    containers: Vec<FakeContainer>,
    images: Vec<FakeImage>,
    pullable: HashSet<String>,
    calls: Vec<String>,
    failures: HashMap<&'static str, VecDeque<DockerError>>,
    exec_results: VecDeque<Result<ExecOutput, DockerError>>,
    serial: u64,
    /// Every event published, for `events(since)` to replay as the Engine does.
    history: Vec<EventMessage>,
}

/// The fake Engine. Cheap to build; share it as `Arc<FakeDocker>`.
pub struct FakeDocker {
    state: Mutex<State>,
    events: broadcast::Sender<EventMessage>,
    /// Where containers' `resolv.conf` files go (none when unset).
    files: Option<PathBuf>,
}

impl Default for FakeDocker {
    fn default() -> Self {
        Self {
            state: Mutex::new(State::default()),
            events: broadcast::channel(1024).0,
            files: None,
        }
    }
}

/// `sha256` of `seed`, as 64 hex digits.
fn hex_id(seed: &str) -> String {
    hex::encode(Sha256::digest(seed.as_bytes()))
}

fn no_such_container(id: &str) -> DockerError {
    DockerError::NotFound {
        message: format!("No such container: {id}"),
    }
}

fn no_such_image(reference: &str) -> DockerError {
    DockerError::NotFound {
        message: format!("No such image: {reference}"),
    }
}

/// `busybox` -> `busybox:latest`; references with a tag or digest stay.
fn with_default_tag(reference: &str) -> String {
    let last = reference.rsplit('/').next().unwrap_or(reference);
    if last.contains(':') || reference.contains('@') {
        reference.to_string()
    } else {
        format!("{reference}:latest")
    }
}

impl FakeDocker {
    /// A fake that also creates each container's `resolv.conf` under `dir`, as the Engine does
    /// under its data root.
    pub fn with_files(dir: &Path) -> Self {
        Self {
            files: Some(dir.to_path_buf()),
            ..Self::default()
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Records `call` and returns the failure queued for `op`, if any.
    fn enter(&self, op: &'static str, call: String) -> Result<(), DockerError> {
        let mut s = self.state();
        s.calls.push(call);
        match s.failures.get_mut(op).and_then(VecDeque::pop_front) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Every call so far, oldest first.
    pub fn calls(&self) -> Vec<String> {
        self.state().calls.clone()
    }

    /// The calls of one operation (`"stop"`, `"create"`...), oldest first.
    pub fn calls_to(&self, op: &str) -> Vec<String> {
        let prefix = format!("{op} ");
        self.calls()
            .into_iter()
            .filter(|c| c == op || c.starts_with(&prefix))
            .collect()
    }

    /// Makes the next call of `op` fail with `err` (the call is still recorded).
    pub fn fail_next(&self, op: &'static str, err: DockerError) {
        self.state().failures.entry(op).or_default().push_back(err);
    }

    /// Adds an image tagged `tag` (its id derived from the tag) and returns its id.
    pub fn add_image(&self, tag: &str) -> String {
        let id = format!("sha256:{}", hex_id(tag));
        self.add_image_with(FakeImage {
            id: id.clone(),
            tags: vec![with_default_tag(tag)],
            size: 1024,
            ..Default::default()
        });
        id
    }

    pub fn add_image_with(&self, image: FakeImage) {
        self.state().images.push(image);
    }

    /// Lets `reference` be pulled (otherwise a pull answers "repository does not exist").
    pub fn allow_pull(&self, reference: &str) {
        self.state().pullable.insert(with_default_tag(reference));
    }

    pub fn images(&self) -> Vec<FakeImage> {
        self.state().images.clone()
    }

    /// The container `id` names (full id, name or unique id prefix).
    pub fn container(&self, id: &str) -> Option<FakeContainer> {
        let s = self.state();
        Self::find(&s, id).ok().map(|i| s.containers[i].clone())
    }

    pub fn containers(&self) -> Vec<FakeContainer> {
        self.state().containers.clone()
    }

    /// Makes a running container exit by itself (`die` event).
    pub fn exit(&self, id: &str, exit_code: i64, oom_killed: bool) {
        let mut s = self.state();
        let Ok(i) = Self::find(&s, id) else { return };
        let c = &mut s.containers[i];
        c.status = ContainerStateStatusEnum::EXITED;
        c.exit_code = exit_code;
        c.oom_killed = oom_killed;
        c.finished_at = Some(views::fake_time(3600));
        let event = Self::event(c, "die");
        self.publish(&mut s, event);
    }

    /// Sets the cumulative CPU usage (core-nanoseconds) `stats` reports for container `id`.
    pub fn set_cpu_usage(&self, id: &str, usage: u64) {
        let mut s = self.state();
        if let Ok(i) = Self::find(&s, id) {
            s.containers[i].cpu_usage = usage;
        }
    }

    /// Gives running container `id` the pid of a real process (its namespaces can be opened).
    pub fn set_pid(&self, id: &str, pid: i64) {
        let mut s = self.state();
        if let Ok(i) = Self::find(&s, id) {
            s.containers[i].pid = pid;
        }
    }

    /// What `logs` replays for container `id`.
    pub fn set_output(&self, id: &str, output: Vec<LogChunk>) {
        let mut s = self.state();
        if let Ok(i) = Self::find(&s, id) {
            s.containers[i].output = output;
        }
    }

    /// Makes a follow read of `id`'s output leave out its last `n` chunks (a plain read
    /// still has them).
    pub fn set_follow_drops(&self, id: &str, n: usize) {
        let mut s = self.state();
        if let Ok(i) = Self::find(&s, id) {
            s.containers[i].follow_drops = n;
        }
    }

    /// The result of the next exec (by default an exec prints its command line and exits 0).
    pub fn push_exec_result(&self, result: Result<ExecOutput, DockerError>) {
        self.state().exec_results.push_back(result);
    }

    /// Publishes a Docker event to whoever follows `events`.
    pub fn emit(&self, event: EventMessage) {
        let mut s = self.state();
        self.publish(&mut s, event);
    }

    /// Records `event` for replays and sends it to the live followers, under the state lock
    /// so that `events` never misses one between its replay and its subscription.
    fn publish(&self, s: &mut State, event: EventMessage) {
        s.history.push(event.clone());
        let _ = self.events.send(event);
    }

    /// Index of the container `id` names: the full id, a name (with or without `/`), or a
    /// unique id prefix, as the Engine resolves them.
    fn find(s: &State, id: &str) -> Result<usize, DockerError> {
        let name = id.strip_prefix('/').unwrap_or(id);
        if let Some(i) = s
            .containers
            .iter()
            .position(|c| c.id == id || c.name == name)
        {
            return Ok(i);
        }
        let matches: Vec<usize> = (0..s.containers.len())
            .filter(|i| !id.is_empty() && s.containers[*i].id.starts_with(id))
            .collect();
        match matches.as_slice() {
            [i] => Ok(*i),
            [] => Err(no_such_container(id)),
            _ => Err(DockerError::BadRequest {
                message: format!("multiple IDs found with provided prefix: {id}"),
            }),
        }
    }

    fn find_image<'a>(s: &'a State, reference: &str) -> Option<&'a FakeImage> {
        let tagged = with_default_tag(reference);
        let bare = reference.strip_prefix("sha256:").unwrap_or(reference);
        s.images.iter().find(|i| {
            i.id == reference
                || i.id.strip_prefix("sha256:") == Some(bare)
                || i.tags.contains(&tagged)
                || i.digests.iter().any(|d| d == reference)
        })
    }

    /// The id of the image container `c` was created from.
    fn image_id_of(s: &State, c: &FakeContainer) -> Option<String> {
        Self::find_image(s, c.body.image.as_deref().unwrap_or_default()).map(|i| i.id.clone())
    }

    fn event(c: &FakeContainer, action: &str) -> EventMessage {
        let mut attributes = c.labels();
        attributes.insert("name".into(), c.name.clone());
        attributes.insert("image".into(), c.body.image.clone().unwrap_or_default());
        EventMessage {
            typ: Some(EventMessageTypeEnum::CONTAINER),
            action: Some(action.to_string()),
            actor: Some(EventActor {
                id: Some(c.id.clone()),
                attributes: Some(attributes),
            }),
            time: Some(chrono::Utc::now().timestamp()),
            time_nano: chrono::Utc::now().timestamp_nanos_opt(),
            ..Default::default()
        }
    }

    fn resolv_conf_path(&self, id: &str) -> Option<String> {
        self.files.as_ref().map(|d| {
            d.join("containers")
                .join(id)
                .join("resolv.conf")
                .to_string_lossy()
                .into_owned()
        })
    }
}

impl DockerApi for FakeDocker {
    async fn version(&self) -> Result<SystemVersion, DockerError> {
        self.enter("version", "version".into())?;
        Ok(SystemVersion {
            version: Some(FAKE_VERSION.to_string()),
            api_version: Some("1.47".to_string()),
            ..Default::default()
        })
    }

    async fn info(&self) -> Result<SystemInfo, DockerError> {
        self.enter("info", "info".into())?;
        Ok(SystemInfo {
            docker_root_dir: Some("/var/lib/docker".to_string()),
            driver: Some("overlay2".to_string()),
            ..Default::default()
        })
    }

    async fn create_container(
        &self,
        name: &str,
        body: ContainerCreateBody,
    ) -> Result<String, DockerError> {
        self.enter("create", format!("create {name}"))?;
        let mut s = self.state();
        if let Some(holder) = s.containers.iter().find(|c| c.name == name) {
            return Err(DockerError::Conflict {
                message: format!(
                    "Conflict. The container name \"/{name}\" is already in use by container \"{}\". You have to remove (or rename) that container to be able to reuse that name.",
                    holder.id
                ),
            });
        }
        let image = body.image.clone().unwrap_or_default();
        if Self::find_image(&s, &image).is_none() {
            return Err(no_such_image(&image));
        }
        s.serial += 1;
        let n = s.serial;
        let id = hex_id(&format!("container-{n}-{name}"));
        if let Some(path) = self.resolv_conf_path(&id)
            && let Some(dir) = Path::new(&path).parent()
        {
            let _ = std::fs::create_dir_all(dir);
            let _ = std::fs::write(&path, "nameserver 127.0.0.53\n");
        }
        let c = FakeContainer {
            id: id.clone(),
            name: name.to_string(),
            body,
            status: ContainerStateStatusEnum::CREATED,
            pid: 0,
            exit_code: 0,
            oom_killed: false,
            created: n as i64,
            started_at: None,
            finished_at: None,
            ip: format!("172.17.0.{}", n % 250 + 2),
            output: Vec::new(),
            follow_drops: 0,
            updates: Vec::new(),
            cpu_usage: 1_000_000,
        };
        let event = Self::event(&c, "create");
        s.containers.push(c);
        self.publish(&mut s, event);
        Ok(id)
    }

    async fn start_container(&self, id: &str) -> Result<(), DockerError> {
        self.enter("start", format!("start {id}"))?;
        let mut s = self.state();
        let i = Self::find(&s, id)?;
        let c = &mut s.containers[i];
        if c.running() {
            return Ok(());
        }
        c.status = ContainerStateStatusEnum::RUNNING;
        c.pid = FIRST_PID + c.created;
        c.exit_code = 0;
        c.started_at = Some(views::fake_time(60 + c.created));
        c.finished_at = None;
        let event = Self::event(c, "start");
        self.publish(&mut s, event);
        Ok(())
    }

    async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<(), DockerError> {
        self.enter("stop", format!("stop {id} {timeout_secs}"))?;
        let mut s = self.state();
        let i = Self::find(&s, id)?;
        let c = &mut s.containers[i];
        if !c.running() {
            return Ok(());
        }
        c.status = ContainerStateStatusEnum::EXITED;
        c.exit_code = if timeout_secs == 0 { 137 } else { 0 };
        c.finished_at = Some(views::fake_time(120 + c.created));
        let event = Self::event(c, "die");
        self.publish(&mut s, event);
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<(), DockerError> {
        self.enter("remove", format!("remove {id}"))?;
        let mut s = self.state();
        let i = Self::find(&s, id)?;
        let c = s.containers.remove(i);
        let event = Self::event(&c, "destroy");
        self.publish(&mut s, event);
        Ok(())
    }

    async fn inspect_container(&self, id: &str) -> Result<ContainerInspectResponse, DockerError> {
        self.enter("inspect", format!("inspect {id}"))?;
        let s = self.state();
        let i = Self::find(&s, id)?;
        let c = &s.containers[i];
        Ok(views::inspect(
            c,
            Self::image_id_of(&s, c).unwrap_or_default(),
            self.resolv_conf_path(&c.id),
        ))
    }

    async fn list_containers(
        &self,
        filters: HashMap<String, Vec<String>>,
    ) -> Result<Vec<ContainerSummary>, DockerError> {
        let mut described: Vec<String> = filters
            .iter()
            .map(|(k, v)| format!("{k}={}", v.join("|")))
            .collect();
        described.sort();
        self.enter("list", format!("list {}", described.join(" ")))?;
        let s = self.state();
        Ok(s.containers
            .iter()
            .rev() // newest first, as the Engine lists
            .filter(|c| views::passes(c, &filters))
            .map(|c| views::summary(c, Self::image_id_of(&s, c)))
            .collect())
    }

    async fn update_container(
        &self,
        id: &str,
        update: ContainerUpdateBody,
    ) -> Result<(), DockerError> {
        self.enter("update", format!("update {id}"))?;
        let mut s = self.state();
        let i = Self::find(&s, id)?;
        s.containers[i].updates.push(update);
        Ok(())
    }

    async fn stats(&self, id: &str) -> Result<ContainerStatsResponse, DockerError> {
        self.enter("stats", format!("stats {id}"))?;
        let s = self.state();
        let i = Self::find(&s, id)?;
        Ok(ContainerStatsResponse {
            id: Some(s.containers[i].id.clone()),
            cpu_stats: Some(ContainerCpuStats {
                cpu_usage: Some(ContainerCpuUsage {
                    total_usage: Some(s.containers[i].cpu_usage),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            memory_stats: Some(ContainerMemoryStats {
                usage: Some(4096),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    async fn exec(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Option<Duration>,
        max_output: usize,
    ) -> Result<ExecOutput, DockerError> {
        self.enter(
            "exec",
            format!(
                "exec {id} {} timeout={timeout:?} max={max_output}",
                cmd.join(" ")
            ),
        )?;
        let mut s = self.state();
        let i = Self::find(&s, id)?;
        if !s.containers[i].running() {
            // The Engine's exec create on a stopped (or paused, restarting) container.
            return Err(DockerError::Conflict {
                message: format!("container {id} is not running"),
            });
        }
        match s.exec_results.pop_front() {
            Some(r) => r,
            None => Ok(ExecOutput {
                stdout: format!("{}\n", cmd.join(" ")).into_bytes(),
                stderr: Vec::new(),
                exit_code: 0,
            }),
        }
    }

    fn logs(&self, id: &str, since: i64, follow: bool) -> DockerStream<LogChunk> {
        let output = match self.enter("logs", format!("logs {id} {since} follow={follow}")) {
            Err(e) => vec![Err(e)],
            Ok(()) => {
                let s = self.state();
                match Self::find(&s, id) {
                    Ok(i) => {
                        let c = &s.containers[i];
                        let n = if follow {
                            c.output.len().saturating_sub(c.follow_drops)
                        } else {
                            c.output.len()
                        };
                        c.output[..n].iter().cloned().map(Ok).collect()
                    }
                    Err(e) => vec![Err(e)],
                }
            }
        };
        futures::stream::iter(output).boxed()
    }

    fn events(&self, since: Option<i64>) -> DockerStream<EventMessage> {
        let _ = self.enter("events", format!("events {since:?}"));
        // Replay and subscription under one lock: nothing published falls between them.
        let s = self.state();
        let replay: Vec<_> = s
            .history
            .iter()
            .filter(|e| since.is_some_and(|t| e.time.unwrap_or(0) >= t))
            .cloned()
            .map(Ok)
            .collect();
        let rx = self.events.subscribe();
        drop(s);
        let live = futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(ev) => return Some((Ok(ev), rx)),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        futures::stream::iter(replay).chain(live).boxed()
    }

    async fn inspect_image(&self, reference: &str) -> Result<ImageInspect, DockerError> {
        self.enter("inspect_image", format!("inspect_image {reference}"))?;
        let s = self.state();
        let img = Self::find_image(&s, reference).ok_or_else(|| no_such_image(reference))?;
        Ok(ImageInspect {
            id: Some(img.id.clone()),
            repo_tags: Some(img.tags.clone()),
            repo_digests: Some(img.digests.clone()),
            size: Some(img.size),
            config: Some(ImageConfig {
                user: Some(img.user.clone()),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    async fn list_images(&self) -> Result<Vec<ImageSummary>, DockerError> {
        self.enter("list_images", "list_images".into())?;
        Ok(self
            .state()
            .images
            .iter()
            .map(|i| ImageSummary {
                id: i.id.clone(),
                repo_tags: i.tags.clone(),
                repo_digests: i.digests.clone(),
                size: i.size,
                ..Default::default()
            })
            .collect())
    }

    async fn pull_image(
        &self,
        reference: &str,
        auth: Option<DockerCredentials>,
        _stall_timeout: Duration,
        progress: Option<PullPublisher>,
    ) -> Result<(), DockerError> {
        let user = auth.and_then(|a| a.username).unwrap_or_default();
        self.enter("pull", format!("pull {reference} user={user}"))?;
        let tagged = with_default_tag(reference);
        if !self.state().pullable.contains(&tagged) {
            return Err(DockerError::NotFound {
                message: format!(
                    "pull access denied for {reference}, repository does not exist or may require 'docker login'"
                ),
            });
        }
        // One layer of 1 kB, as a real pull stream would report it.
        if let Some(p) = progress {
            p.publish(PullReport {
                layers_done: 1,
                layers: 1,
                downloaded: 1_000,
                total: 1_000,
            });
        }
        if Self::find_image(&self.state(), reference).is_none() {
            self.add_image(reference);
        }
        Ok(())
    }

    async fn remove_image(&self, reference: &str) -> Result<Vec<String>, DockerError> {
        self.enter("remove_image", format!("remove_image {reference}"))?;
        let mut s = self.state();
        let tagged = with_default_tag(reference);
        let Some(i) = s.images.iter().position(|i| {
            i.id == reference
                || i.tags.contains(&tagged)
                || i.digests.iter().any(|d| d == reference)
        }) else {
            return Err(no_such_image(reference));
        };
        let by_tag = s.images[i].tags.contains(&tagged);
        if by_tag && s.images[i].tags.len() > 1 {
            s.images[i].tags.retain(|t| *t != tagged);
            return Ok(Vec::new());
        }
        if !by_tag && s.images[i].tags.len() > 1 {
            return Err(DockerError::Conflict {
                message: format!(
                    "conflict: unable to delete {reference} (must be forced) - image is referenced in multiple repositories"
                ),
            });
        }
        let image_id = s.images[i].id.clone();
        let in_use = s.containers.iter().any(|c| {
            Self::find_image(&s, c.body.image.as_deref().unwrap_or_default())
                .is_some_and(|img| img.id == image_id)
        });
        if in_use {
            return Err(DockerError::Conflict {
                message: format!(
                    "conflict: unable to remove repository reference {reference:?} - container is using its referenced image"
                ),
            });
        }
        s.images.remove(i);
        Ok(vec![image_id])
    }

    async fn load_image(&self, archive: Vec<u8>) -> Result<(), DockerError> {
        self.enter("load", format!("load {} bytes", archive.len()))?;
        let tags = views::archive_tags(&archive);
        if tags.is_empty() {
            return Err(DockerError::BadRequest {
                message: "no manifest.json in the archive".into(),
            });
        }
        self.add_image_with(FakeImage {
            id: format!("sha256:{}", hex_id(&format!("loaded-{}", tags.join(",")))),
            tags,
            size: archive.len() as i64,
            ..Default::default()
        });
        Ok(())
    }

    async fn container_sizes(&self) -> Result<HashMap<String, u64>, DockerError> {
        self.enter("sizes", "sizes".into())?;
        Ok(self
            .state()
            .containers
            .iter()
            .map(|c| (c.id.clone(), 4096))
            .collect())
    }
}
