//! [`DockerApi`] on the real Docker Engine, through bollard: the connection (unix socket, with
//! keep-alive connections from `transport`, or TCP) with API-version negotiation, one bollard
//! call per trait method, Docker's status codes kept as [`DockerError`] kinds, exec with a
//! timeout that kills the exec'd process tree from the host (Docker has no exec kill), and
//! pulls cancelled when they stall.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::auth::DockerCredentials;
use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerStatsResponse, ContainerSummary,
    ContainerUpdateBody, EventMessage, ImageInspect, ImageSummary, SystemInfo, SystemVersion,
};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, EventsOptions, InspectContainerOptions,
    ListContainersOptions, ListImagesOptions, LogsOptions, RemoveContainerOptions,
    RemoveImageOptions, StatsOptions, StopContainerOptions,
};
use futures::{StreamExt, TryStreamExt};
use node_common::pull_progress::PullPublisher;

use super::{DockerApi, DockerError, DockerStream, ExecOutput, LogChunk, LogStream};

impl From<BollardError> for DockerError {
    fn from(err: BollardError) -> Self {
        match err {
            BollardError::DockerResponseServerError {
                status_code,
                message,
            } => match status_code {
                404 => DockerError::NotFound { message },
                409 => DockerError::Conflict { message },
                400 => DockerError::BadRequest { message },
                status => DockerError::Server { status, message },
            },
            BollardError::DockerStreamError { error } => DockerError::Stream(error),
            BollardError::RequestTimeoutError => DockerError::Timeout(Duration::ZERO),
            other => DockerError::Connection(other.to_string()),
        }
    }
}

/// [`DockerApi`] on the real Docker Engine, through bollard.
#[derive(Clone)]
pub struct BollardDocker {
    docker: Docker,
}

impl BollardDocker {
    /// Connects to `endpoint` (`unix:///var/run/docker.sock`, a bare socket path, or
    /// `tcp://host:port`) and negotiates the API version down to what the daemon speaks.
    pub async fn connect(endpoint: &str, timeout: Duration) -> Result<Self, DockerError> {
        let docker = if let Some(path) = endpoint.strip_prefix("unix://") {
            super::transport::keep_alive_unix(path, timeout.as_secs().max(1))
        } else if endpoint.starts_with('/') {
            super::transport::keep_alive_unix(endpoint, timeout.as_secs().max(1))
        } else if endpoint.starts_with("tcp://") || endpoint.starts_with("http://") {
            Docker::connect_with_http(
                endpoint,
                timeout.as_secs().max(1),
                bollard::API_DEFAULT_VERSION,
            )
        } else {
            return Err(DockerError::Connection(format!(
                "unsupported docker endpoint {endpoint:?}"
            )));
        }
        .map_err(|e| DockerError::Connection(e.to_string()))?;
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| DockerError::Connection(format!("{endpoint}: {e}")))?;
        Ok(Self { docker })
    }

    /// The underlying bollard client (for the streaming server and benchmarks).
    pub fn client(&self) -> &Docker {
        &self.docker
    }
}

/// The direct children of `pid`, from /proc (every thread's `children` list).
fn children_of(pid: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// SIGKILLs `pid` and every descendant of it. An exec'd `sh -c 'a; b'` forks its commands, and
/// killing only the shell would leave them running (reparented to the container's PID 1); so
/// the tree is stopped first (nothing forks or escapes while it is walked), then killed.
pub fn kill_process_tree(pid: libc::pid_t) {
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        // SAFETY: kill(2) on a pid of the tree being torn down.
        unsafe {
            libc::kill(tree[i], libc::SIGSTOP);
        }
        for child in children_of(tree[i]) {
            if !tree.contains(&child) {
                tree.push(child);
            }
        }
        i += 1;
    }
    for p in tree {
        // SAFETY: as above.
        unsafe {
            libc::kill(p, libc::SIGKILL);
        }
    }
}

fn chunk_of(out: LogOutput) -> Option<LogChunk> {
    match out {
        LogOutput::StdOut { message } | LogOutput::Console { message } => Some(LogChunk {
            stream: LogStream::Stdout,
            bytes: message,
        }),
        LogOutput::StdErr { message } => Some(LogChunk {
            stream: LogStream::Stderr,
            bytes: message,
        }),
        LogOutput::StdIn { .. } => None,
    }
}

/// How long a timed-out exec is waited for: for its process to appear, then to be gone.
const EXEC_END_LIMIT: Duration = Duration::from_secs(10);

impl BollardDocker {
    /// Ends a timed-out exec's process and waits until Docker has seen it exit, so that a
    /// timed-out ExecSync leaves nothing running once it answers (critest looks for the process
    /// at once). Docker has no exec kill, so the process tree is killed from the host. Docker
    /// reports an exec running before its process exists (pid 0 until runc has started it, which
    /// takes from tens of milliseconds to more than the timeout on a busy host), so the pid is
    /// polled for rather than read once.
    async fn end_exec(&self, exec_id: &str) {
        let deadline = tokio::time::Instant::now() + EXEC_END_LIMIT;
        let mut killed = None;
        loop {
            match self.docker.inspect_exec(exec_id).await {
                Ok(info) if info.running != Some(true) => return,
                Ok(info) => {
                    if let Some(pid) = info.pid.filter(|p| *p > 0)
                        && killed != Some(pid)
                    {
                        kill_process_tree(pid as libc::pid_t);
                        killed = Some(pid);
                    }
                }
                Err(e) => {
                    tracing::warn!(exec = %exec_id, error = %e, "inspecting a timed-out exec");
                    return;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(exec = %exec_id, pid = ?killed, "timed-out exec still running after {EXEC_END_LIMIT:?}");
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl DockerApi for BollardDocker {
    #[tracing::instrument(level = "trace", name = "docker", skip_all, fields(op = "version"))]
    async fn version(&self) -> Result<SystemVersion, DockerError> {
        Ok(self.docker.version().await?)
    }

    #[tracing::instrument(level = "trace", name = "docker", skip_all, fields(op = "info"))]
    async fn info(&self) -> Result<SystemInfo, DockerError> {
        Ok(self.docker.info().await?)
    }

    #[tracing::instrument(level = "trace", name = "docker", skip_all, fields(op = "create_container", id = %name))]
    async fn create_container(
        &self,
        name: &str,
        body: ContainerCreateBody,
    ) -> Result<String, DockerError> {
        let opts = CreateContainerOptions {
            name: Some(name.to_string()),
            platform: String::new(),
        };
        Ok(self.docker.create_container(Some(opts), body).await?.id)
    }

    #[tracing::instrument(level = "trace", name = "docker", skip_all, fields(op = "start_container", id = %id))]
    async fn start_container(&self, id: &str) -> Result<(), DockerError> {
        Ok(self.docker.start_container(id, None).await?)
    }

    #[tracing::instrument(level = "trace", name = "docker", skip_all, fields(op = "stop_container", id = %id))]
    async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<(), DockerError> {
        let opts = StopContainerOptions {
            signal: None,
            t: Some(timeout_secs.clamp(0, i64::from(i32::MAX)) as i32),
        };
        Ok(self.docker.stop_container(id, Some(opts)).await?)
    }

    #[tracing::instrument(level = "trace", name = "docker", skip_all, fields(op = "remove_container", id = %id))]
    async fn remove_container(&self, id: &str) -> Result<(), DockerError> {
        let opts = RemoveContainerOptions {
            v: true,
            force: true,
            link: false,
        };
        Ok(self.docker.remove_container(id, Some(opts)).await?)
    }

    #[tracing::instrument(level = "trace", name = "docker", skip_all, fields(op = "inspect_container", id = %id))]
    async fn inspect_container(&self, id: &str) -> Result<ContainerInspectResponse, DockerError> {
        Ok(self
            .docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await?)
    }

    #[tracing::instrument(
        level = "trace",
        name = "docker",
        skip_all,
        fields(op = "list_containers")
    )]
    async fn list_containers(
        &self,
        filters: HashMap<String, Vec<String>>,
    ) -> Result<Vec<ContainerSummary>, DockerError> {
        let opts = ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        Ok(self.docker.list_containers(Some(opts)).await?)
    }

    #[tracing::instrument(level = "trace", name = "docker", skip_all, fields(op = "update_container", id = %id))]
    async fn update_container(
        &self,
        id: &str,
        update: ContainerUpdateBody,
    ) -> Result<(), DockerError> {
        self.docker.update_container(id, update).await?;
        Ok(())
    }

    #[tracing::instrument(level = "trace", name = "docker", skip_all, fields(op = "stats", id = %id))]
    async fn stats(&self, id: &str) -> Result<ContainerStatsResponse, DockerError> {
        let opts = StatsOptions {
            stream: false,
            one_shot: true,
        };
        let mut stream = self.docker.stats(id, Some(opts));
        match stream.next().await {
            Some(r) => Ok(r?),
            None => Err(DockerError::Stream(format!("no stats for container {id}"))),
        }
    }

    #[tracing::instrument(level = "trace", name = "docker", skip_all, fields(op = "exec", id = %id))]
    async fn exec(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Option<Duration>,
        max_output: usize,
    ) -> Result<ExecOutput, DockerError> {
        let created = self
            .docker
            .create_exec(
                id,
                CreateExecOptions {
                    cmd: Some(cmd),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await?;
        let exec_id = created.id;
        let started = self
            .docker
            .start_exec(&exec_id, None::<StartExecOptions>)
            .await?;
        let mut out = ExecOutput::default();
        if let StartExecResults::Attached { mut output, .. } = started {
            let collect = async {
                while let Some(item) = output.next().await {
                    if let Some(chunk) = chunk_of(item?) {
                        let buf = match chunk.stream {
                            LogStream::Stdout => &mut out.stdout,
                            LogStream::Stderr => &mut out.stderr,
                        };
                        let room = max_output.saturating_sub(buf.len());
                        buf.extend_from_slice(&chunk.bytes[..chunk.bytes.len().min(room)]);
                    }
                }
                Ok::<(), DockerError>(())
            };
            match timeout {
                Some(t) if !t.is_zero() => {
                    if tokio::time::timeout(t, collect).await.is_err() {
                        self.end_exec(&exec_id).await;
                        return Err(DockerError::Timeout(t));
                    }
                }
                _ => collect.await?,
            }
        }
        // The stream ends a moment before Docker records the exit code.
        for _ in 0..50 {
            let info = self.docker.inspect_exec(&exec_id).await?;
            if info.running != Some(true) {
                out.exit_code = info.exit_code.unwrap_or(0) as i32;
                return Ok(out);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Err(DockerError::Stream(format!(
            "exec {exec_id} still running after its output ended"
        )))
    }

    fn logs(&self, id: &str, since: i64, follow: bool) -> DockerStream<LogChunk> {
        let opts = LogsOptions {
            follow,
            stdout: true,
            stderr: true,
            since: since.clamp(0, i64::from(i32::MAX)) as i32,
            until: 0,
            timestamps: false,
            tail: "all".to_string(),
        };
        self.docker
            .logs(id, Some(opts))
            .map_err(DockerError::from)
            .try_filter_map(|o| async move { Ok(chunk_of(o)) })
            .boxed()
    }

    fn events(&self, since: Option<i64>) -> DockerStream<EventMessage> {
        let mut filters = HashMap::new();
        filters.insert(
            "type".to_string(),
            vec!["container".to_string(), "image".to_string()],
        );
        let opts = EventsOptions {
            since: since.map(|s| s.to_string()),
            until: None,
            filters: Some(filters),
        };
        self.docker
            .events(Some(opts))
            .map_err(DockerError::from)
            .boxed()
    }

    #[tracing::instrument(level = "trace", name = "docker", skip_all, fields(op = "inspect_image", image = %reference))]
    async fn inspect_image(&self, reference: &str) -> Result<ImageInspect, DockerError> {
        Ok(self.docker.inspect_image(reference).await?)
    }

    #[tracing::instrument(level = "trace", name = "docker", skip_all, fields(op = "list_images"))]
    async fn list_images(&self) -> Result<Vec<ImageSummary>, DockerError> {
        Ok(self
            .docker
            .list_images(Some(ListImagesOptions {
                all: false,
                ..Default::default()
            }))
            .await?)
    }

    #[tracing::instrument(level = "trace", name = "docker", skip_all, fields(op = "pull_image", image = %reference))]
    async fn pull_image(
        &self,
        reference: &str,
        auth: Option<DockerCredentials>,
        stall_timeout: Duration,
        publisher: Option<PullPublisher>,
    ) -> Result<(), DockerError> {
        let (from_image, tag) = split_reference(reference);
        let opts = CreateImageOptions {
            from_image: Some(from_image),
            tag: tag.map(str::to_string),
            ..Default::default()
        };
        let mut stream = self.docker.create_image(Some(opts), None, auth);
        // A pull that keeps reporting progress may take as long as it needs; one that reports
        // nothing for `stall_timeout` is cancelled (upstream's image pull progress deadline).
        // While it runs, its progress is logged every REPORT_INTERVAL, as upstream's.
        let started = tokio::time::Instant::now();
        let mut progress = super::progress::PullProgress::default();
        let mut report = tokio::time::interval_at(
            started + super::progress::REPORT_INTERVAL,
            super::progress::REPORT_INTERVAL,
        );
        let mut stall = Box::pin(tokio::time::sleep(stall_timeout));
        loop {
            tokio::select! {
                next = stream.next() => match next {
                    None => break,
                    Some(Err(e)) => return Err(e.into()),
                    Some(Ok(info)) => {
                        progress.update(&info);
                        if let Some(p) = &publisher {
                            p.publish(progress.report());
                        }
                        stall.as_mut().reset(tokio::time::Instant::now() + stall_timeout);
                    }
                },
                _ = report.tick() => {
                    tracing::info!(image = %reference, elapsed = ?started.elapsed(), "Pulling image: {}", progress.summary());
                }
                _ = &mut stall => {
                    tracing::warn!(image = %reference, "Cancel pulling image because of no progress for {:?}: {}", stall_timeout, progress.summary());
                    return Err(DockerError::Timeout(stall_timeout));
                }
            }
        }
        tracing::info!(image = %reference, elapsed = ?started.elapsed(), "Pulled image: {}", progress.summary());
        Ok(())
    }

    #[tracing::instrument(level = "trace", name = "docker", skip_all, fields(op = "remove_image", image = %reference))]
    async fn remove_image(&self, reference: &str) -> Result<Vec<String>, DockerError> {
        let items = self
            .docker
            .remove_image(
                reference,
                Some(RemoveImageOptions {
                    force: false,
                    noprune: false,
                    ..Default::default()
                }),
                None,
            )
            .await?;
        Ok(items.into_iter().filter_map(|i| i.deleted).collect())
    }

    #[tracing::instrument(level = "trace", name = "docker", skip_all, fields(op = "load_image"))]
    async fn load_image(&self, archive: Vec<u8>) -> Result<(), DockerError> {
        let opts = bollard::query_parameters::ImportImageOptions {
            quiet: true,
            ..Default::default()
        };
        let mut stream = self
            .docker
            .import_image(opts, bollard::body_full(archive.into()), None);
        while let Some(item) = stream.next().await {
            item?;
        }
        Ok(())
    }

    async fn container_sizes(&self) -> Result<HashMap<String, u64>, DockerError> {
        let opts = ListContainersOptions {
            all: true,
            size: true,
            ..Default::default()
        };
        let list = self.docker.list_containers(Some(opts)).await?;
        Ok(list
            .into_iter()
            .filter_map(|c| Some((c.id?, c.size_rw.unwrap_or(0).max(0) as u64)))
            .collect())
    }
}

/// Splits `repo[:tag][@digest]` into what Docker's create-image call wants: `fromImage` carries
/// the repository (with the digest, if any) and `tag` the tag. A `:` inside the registry host
/// (`127.0.0.1:5000/x`) is not a tag.
pub fn split_reference(reference: &str) -> (String, Option<&str>) {
    if reference.contains('@') {
        return (reference.to_string(), None);
    }
    let last_slash = reference.rfind('/').map(|i| i + 1).unwrap_or(0);
    match reference[last_slash..].rfind(':') {
        Some(i) => {
            let at = last_slash + i;
            (reference[..at].to_string(), Some(&reference[at + 1..]))
        }
        None => (reference.to_string(), Some("latest")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_process_tree_reaches_grandchildren() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 1000; true"])
            .spawn()
            .expect("spawn sh");
        let pid = child.id() as libc::pid_t;
        let mut grandchildren = Vec::new();
        for _ in 0..200 {
            grandchildren = children_of(pid);
            if !grandchildren.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(grandchildren.len(), 1, "sh forked its sleep");
        kill_process_tree(pid);
        let status = child.wait().expect("wait sh");
        assert!(!status.success());
        let gc = grandchildren[0];
        let mut gone = false;
        for _ in 0..200 {
            let stat = std::fs::read_to_string(format!("/proc/{gc}/stat")).unwrap_or_default();
            // Gone, or a zombie waiting for init to reap it.
            if stat.is_empty() || stat.contains(") Z ") {
                gone = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(gone, "the forked sleep survived its shell");
    }

    #[test]
    fn references_split_like_docker_pull() {
        assert_eq!(
            split_reference("busybox"),
            ("busybox".to_string(), Some("latest"))
        );
        assert_eq!(
            split_reference("127.0.0.1:5000/busybox:1.36"),
            ("127.0.0.1:5000/busybox".to_string(), Some("1.36"))
        );
        assert_eq!(
            split_reference("127.0.0.1:5000/busybox"),
            ("127.0.0.1:5000/busybox".to_string(), Some("latest"))
        );
        assert_eq!(
            split_reference("x/y@sha256:abcd"),
            ("x/y@sha256:abcd".to_string(), None)
        );
    }

    #[test]
    fn docker_status_codes_keep_their_meaning() {
        let e: DockerError = BollardError::DockerResponseServerError {
            status_code: 404,
            message: "No such container: x".into(),
        }
        .into();
        assert!(e.is_not_found());
        assert_eq!(e.to_string(), "No such container: x");
        let e: DockerError = BollardError::DockerResponseServerError {
            status_code: 409,
            message: "conflict".into(),
        }
        .into();
        assert!(matches!(e, DockerError::Conflict { .. }));
    }
}
