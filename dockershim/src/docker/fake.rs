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
use std::sync::Mutex;
use std::time::Duration;

use bollard::auth::DockerCredentials;
use bollard::models::{
    ContainerConfig, ContainerCpuStats, ContainerCpuUsage, ContainerCreateBody,
    ContainerInspectResponse, ContainerMemoryStats, ContainerState, ContainerStateStatusEnum,
    ContainerStatsResponse, ContainerSummary, ContainerSummaryStateEnum, ContainerUpdateBody,
    EndpointSettings, EventActor, EventMessage, EventMessageTypeEnum, ImageConfig, ImageInspect,
    ImageSummary, MountPoint, NetworkSettings, SystemInfo, SystemVersion,
};
use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::sync::broadcast;

use super::{DockerApi, DockerError, DockerStream, ExecOutput, LogChunk};

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
    /// Every UpdateContainer body, oldest first.
    pub updates: Vec<ContainerUpdateBody>,
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

/// An RFC 3339 time `secs` seconds after the fake's epoch (2024-01-01T00:00:00Z).
fn fake_time(secs: i64) -> String {
    chrono::DateTime::from_timestamp(1_704_067_200 + secs, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
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

/// The `RepoTags` of the first manifest of a `docker save` tar archive.
fn archive_tags(archive: &[u8]) -> Vec<String> {
    let mut at = 0;
    while at + 512 <= archive.len() {
        let header = &archive[at..at + 512];
        let name_end = header[..100].iter().position(|b| *b == 0).unwrap_or(100);
        let name = String::from_utf8_lossy(&header[..name_end]).into_owned();
        if name.is_empty() {
            break;
        }
        let size_field = String::from_utf8_lossy(&header[124..136]);
        let size =
            usize::from_str_radix(size_field.trim_matches(|c: char| c == '\0' || c == ' '), 8)
                .unwrap_or(0);
        let body = archive.get(at + 512..at + 512 + size).unwrap_or_default();
        if name == "manifest.json" {
            let manifest: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
            return manifest[0]["RepoTags"]
                .as_array()
                .map(|tags| {
                    tags.iter()
                        .filter_map(|t| t.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
        }
        at += 512 + size.div_ceil(512) * 512;
    }
    Vec::new()
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

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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
        c.finished_at = Some(fake_time(3600));
        let event = Self::event(c, "die");
        self.publish(&mut s, event);
    }

    /// What `logs` replays for container `id`.
    pub fn set_output(&self, id: &str, output: Vec<LogChunk>) {
        let mut s = self.state();
        if let Ok(i) = Self::find(&s, id) {
            s.containers[i].output = output;
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

    fn inspect_of(&self, s: &State, c: &FakeContainer) -> ContainerInspectResponse {
        let b = &c.body;
        let image_id = Self::find_image(s, b.image.as_deref().unwrap_or_default())
            .map(|i| i.id.clone())
            .unwrap_or_default();
        let binds = b
            .host_config
            .as_ref()
            .and_then(|h| h.binds.clone())
            .unwrap_or_default();
        let mounts = binds
            .iter()
            .filter_map(|bind| {
                let mut it = bind.splitn(3, ':');
                let source = it.next()?.to_string();
                let destination = it.next()?.to_string();
                let opts: Vec<&str> = it.next().unwrap_or_default().split(',').collect();
                let propagation = opts
                    .iter()
                    .find(|o| o.contains("slave") || o.contains("shared") || o.contains("private"))
                    .map_or("rprivate", |p| p);
                Some(MountPoint {
                    typ: Some("bind".to_string()),
                    source: Some(source),
                    destination: Some(destination),
                    mode: Some(opts.join(",")),
                    rw: Some(!opts.contains(&"ro")),
                    propagation: Some(propagation.to_string()),
                    ..Default::default()
                })
            })
            .collect();
        let network_mode = b.host_config.as_ref().and_then(|h| h.network_mode.clone());
        let networks = (network_mode.is_none() && c.running()).then(|| {
            HashMap::from([(
                "bridge".to_string(),
                EndpointSettings {
                    ip_address: Some(c.ip.clone()),
                    ..Default::default()
                },
            )])
        });
        ContainerInspectResponse {
            id: Some(c.id.clone()),
            name: Some(format!("/{}", c.name)),
            created: Some(fake_time(c.created)),
            image: Some(image_id),
            resolv_conf_path: self.resolv_conf_path(&c.id),
            state: Some(ContainerState {
                status: Some(c.status),
                running: Some(c.running()),
                pid: Some(if c.running() { c.pid } else { 0 }),
                exit_code: Some(c.exit_code),
                oom_killed: Some(c.oom_killed),
                started_at: Some(
                    c.started_at
                        .clone()
                        .unwrap_or_else(|| "0001-01-01T00:00:00Z".into()),
                ),
                finished_at: Some(
                    c.finished_at
                        .clone()
                        .unwrap_or_else(|| "0001-01-01T00:00:00Z".into()),
                ),
                ..Default::default()
            }),
            config: Some(ContainerConfig {
                hostname: b.hostname.clone(),
                user: b.user.clone(),
                env: b.env.clone(),
                cmd: b.cmd.clone(),
                entrypoint: b.entrypoint.clone(),
                image: b.image.clone(),
                labels: b.labels.clone(),
                working_dir: b.working_dir.clone(),
                tty: b.tty,
                open_stdin: b.open_stdin,
                stdin_once: b.stdin_once,
                attach_stdin: b.attach_stdin,
                exposed_ports: b.exposed_ports.clone(),
                ..Default::default()
            }),
            host_config: b.host_config.clone(),
            mounts: Some(mounts),
            network_settings: Some(NetworkSettings {
                networks,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn summary_of(s: &State, c: &FakeContainer) -> ContainerSummary {
        let state = match c.status {
            ContainerStateStatusEnum::CREATED => ContainerSummaryStateEnum::CREATED,
            ContainerStateStatusEnum::RUNNING => ContainerSummaryStateEnum::RUNNING,
            ContainerStateStatusEnum::EXITED => ContainerSummaryStateEnum::EXITED,
            ContainerStateStatusEnum::DEAD => ContainerSummaryStateEnum::DEAD,
            _ => ContainerSummaryStateEnum::EMPTY,
        };
        ContainerSummary {
            id: Some(c.id.clone()),
            names: Some(vec![format!("/{}", c.name)]),
            image: c.body.image.clone(),
            image_id: Self::find_image(s, c.body.image.as_deref().unwrap_or_default())
                .map(|i| i.id.clone()),
            created: Some(1_704_067_200 + c.created),
            labels: Some(c.labels()),
            state: Some(state),
            ..Default::default()
        }
    }

    /// Does `c` pass Docker's list filters (`label` as `key` or `key=value`, `status`)?
    fn passes(c: &FakeContainer, filters: &HashMap<String, Vec<String>>) -> bool {
        let labels = c.labels();
        let label_ok = filters.get("label").is_none_or(|want| {
            want.iter().all(|w| match w.split_once('=') {
                Some((k, v)) => labels.get(k).map(String::as_str) == Some(v),
                None => labels.contains_key(w),
            })
        });
        let status_ok = filters
            .get("status")
            .is_none_or(|want| want.iter().any(|w| *w == c.status.to_string()));
        label_ok && status_ok
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
            updates: Vec::new(),
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
        c.started_at = Some(fake_time(60 + c.created));
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
        c.finished_at = Some(fake_time(120 + c.created));
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
        Ok(self.inspect_of(&s, &s.containers[i]))
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
            .filter(|c| Self::passes(c, &filters))
            .map(|c| Self::summary_of(&s, c))
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
                    total_usage: Some(1_000_000),
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
        Self::find(&s, id)?;
        match s.exec_results.pop_front() {
            Some(r) => r,
            None => Ok(ExecOutput {
                stdout: format!("{}\n", cmd.join(" ")).into_bytes(),
                stderr: Vec::new(),
                exit_code: 0,
            }),
        }
    }

    fn logs(&self, id: &str, since: i64) -> DockerStream<LogChunk> {
        let output = match self.enter("logs", format!("logs {id} {since}")) {
            Err(e) => vec![Err(e)],
            Ok(()) => {
                let s = self.state();
                match Self::find(&s, id) {
                    Ok(i) => s.containers[i].output.iter().cloned().map(Ok).collect(),
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
        if Self::find_image(&self.state(), reference).is_none() {
            self.add_image(reference);
        }
        Ok(())
    }

    async fn remove_image(&self, reference: &str) -> Result<(), DockerError> {
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
            return Ok(());
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
        Ok(())
    }

    async fn load_image(&self, archive: Vec<u8>) -> Result<(), DockerError> {
        self.enter("load", format!("load {} bytes", archive.len()))?;
        let tags = archive_tags(&archive);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn body(image: &str) -> ContainerCreateBody {
        ContainerCreateBody {
            image: Some(image.into()),
            labels: Some(HashMap::from([("k".to_string(), "v".to_string())])),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn containers_follow_the_engine_lifecycle() {
        let d = FakeDocker::default();
        d.add_image("busybox");
        assert!(matches!(
            d.create_container("x", body("nope")).await,
            Err(DockerError::NotFound { .. })
        ));
        let id = d.create_container("x", body("busybox")).await.unwrap();
        assert_eq!(id.len(), 64);
        assert!(matches!(
            d.create_container("x", body("busybox")).await,
            Err(DockerError::Conflict { .. })
        ));
        // Full id, name, `/name` and a unique prefix all resolve.
        for key in [id.as_str(), "x", "/x", &id[..12]] {
            let c = d.inspect_container(key).await.unwrap();
            assert_eq!(c.id.as_deref(), Some(id.as_str()), "{key}");
        }
        d.start_container(&id).await.unwrap();
        assert!(d.container(&id).unwrap().running());
        let running = HashMap::from([("status".to_string(), vec!["running".to_string()])]);
        assert_eq!(d.list_containers(running.clone()).await.unwrap().len(), 1);
        d.stop_container(&id, 0).await.unwrap();
        assert_eq!(d.container(&id).unwrap().exit_code, 137);
        assert!(d.list_containers(running).await.unwrap().is_empty());
        let by_label = HashMap::from([("label".to_string(), vec!["k=v".to_string()])]);
        assert_eq!(d.list_containers(by_label).await.unwrap().len(), 1);
        d.remove_container(&id).await.unwrap();
        assert!(d.inspect_container(&id).await.unwrap_err().is_not_found());
        assert_eq!(
            d.calls_to("stop"),
            vec![format!("stop {id} 0")],
            "calls are recorded"
        );
    }

    #[tokio::test]
    async fn queued_failures_hit_the_next_call_only() {
        let d = FakeDocker::default();
        d.fail_next("version", DockerError::Connection("down".into()));
        assert!(matches!(d.version().await, Err(DockerError::Connection(_))));
        assert!(d.version().await.is_ok());
        assert_eq!(d.calls(), vec!["version", "version"]);
    }

    #[tokio::test]
    async fn lifecycle_changes_are_published_as_events() {
        let d = FakeDocker::default();
        d.add_image("busybox");
        let mut events = d.events(None);
        let id = d.create_container("x", body("busybox")).await.unwrap();
        d.start_container(&id).await.unwrap();
        d.exit(&id, 1, false);
        d.remove_container(&id).await.unwrap();
        let mut actions = Vec::new();
        for _ in 0..4 {
            let ev = events.next().await.unwrap().unwrap();
            let attrs = ev.actor.unwrap().attributes.unwrap();
            assert_eq!(attrs["k"], "v", "labels are event attributes");
            actions.push(ev.action.unwrap());
        }
        assert_eq!(actions, ["create", "start", "die", "destroy"]);
    }

    #[tokio::test]
    async fn images_resolve_by_tag_id_and_digest() {
        let d = FakeDocker::default();
        let id = d.add_image("busybox:1.36");
        d.add_image_with(FakeImage {
            id: "sha256:abc".into(),
            tags: vec!["a:1".into(), "b:1".into()],
            digests: vec!["a@sha256:def".into()],
            ..Default::default()
        });
        assert_eq!(
            d.inspect_image("busybox:1.36").await.unwrap().id,
            Some(id.clone())
        );
        assert!(d.inspect_image("busybox").await.unwrap_err().is_not_found());
        assert_eq!(
            d.inspect_image("a@sha256:def").await.unwrap().id.as_deref(),
            Some("sha256:abc")
        );
        assert!(matches!(
            d.remove_image("sha256:abc").await,
            Err(DockerError::Conflict { .. })
        ));
        d.remove_image("a:1").await.unwrap();
        assert_eq!(d.images()[1].tags, vec!["b:1".to_string()]);
        assert!(d.pull_image("x", None, Duration::ZERO).await.is_err());
        d.allow_pull("x");
        d.pull_image("x", None, Duration::ZERO).await.unwrap();
        assert!(d.inspect_image("x:latest").await.is_ok());
    }

    /// One ustar entry (header and padded data).
    fn tar_of(name: &str, data: &[u8]) -> Vec<u8> {
        let mut h = [0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[124..135].copy_from_slice(format!("{:011o}", data.len()).as_bytes());
        let mut out = h.to_vec();
        out.extend_from_slice(data);
        out.resize(512 + data.len().div_ceil(512) * 512, 0);
        out
    }

    #[test]
    fn archives_give_their_repo_tags() {
        let manifest = br#"[{"Config":"c.json","RepoTags":["example.com/pause:9"]}]"#;
        let entries = [
            tar_of("layer.tar", &[7u8; 600]),
            tar_of("manifest.json", manifest),
        ];
        let archive = [entries.concat(), vec![0u8; 1024]].concat();
        assert_eq!(
            archive_tags(&archive),
            vec!["example.com/pause:9".to_string()]
        );
        assert!(archive_tags(&tar_of("other", b"x")).is_empty());
        assert!(archive_tags(&[0u8; 1024]).is_empty());
    }
}
