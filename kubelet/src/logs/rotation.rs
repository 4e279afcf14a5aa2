//! Container log rotation and removal (upstream `pkg/kubelet/logs/container_log_manager.go`):
//! [`ContainerLogManager`] renames a log that reached `containerLogMaxSize` to
//! `<path>.<timestamp>`, asks the runtime to reopen it (CRI `ReopenContainerLog`) and keeps at
//! most `containerLogMaxFiles` files; [`remove_container_logs`] is its `Clean`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use cri_proto::runtime::v1 as cri;

use super::{LogError, log_files};
use crate::cri::RuntimeService;
use crate::types::POD_NAME_LABEL;

/// The suffix format of rotated files (Go `20060102-150405`).
pub const ROTATION_TIMESTAMP_FORMAT: &str = "%Y%m%d-%H%M%S";

/// Remove a container's log file and its rotated files (upstream `ContainerLogManager.Clean`).
pub fn remove_container_logs(path: &Path) {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return;
    };
    let prefix = format!("{name}.");
    let Some(dir) = path.parent() else { return };
    let victims = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n == name || n.starts_with(&prefix))
                })
                .map(|e| e.path())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    for v in victims {
        if let Err(e) = std::fs::remove_file(&v) {
            tracing::debug!(path = %v.display(), error = %e, "cannot remove container log");
        }
    }
}

/// Rotation policy (upstream `LogRotatePolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRotatePolicy {
    /// Rotate when the current file reaches this size in bytes (0: never).
    pub max_size: u64,
    /// Files kept per container, the current one included (at least 2).
    pub max_files: usize,
}

/// The rotated files of `path` to delete so that after one more rotation at most
/// `max_files` files exist (upstream `removeExcessLogs`: keep `max_files - 2` rotated ones).
pub fn excess_rotated_logs(path: &Path, max_files: usize) -> Vec<PathBuf> {
    let mut rotated = log_files(path);
    if rotated.last().is_some_and(|l| l.as_path() == path) {
        rotated.pop();
    }
    let keep = max_files.saturating_sub(2);
    let n = rotated.len().saturating_sub(keep);
    rotated.truncate(n);
    rotated
}

/// Rotate `path` if it reached the policy's size: returns the rotated file's name when it did.
/// `reopen` asks the runtime to reopen the file; on failure the rename is undone.
pub async fn rotate_log_if_needed<F, Fut>(
    path: &Path,
    policy: LogRotatePolicy,
    now: DateTime<Utc>,
    reopen: F,
) -> Result<Option<PathBuf>, LogError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let io = |source| LogError::Io {
        path: path.to_path_buf(),
        source,
    };
    if policy.max_size == 0 {
        return Ok(None);
    }
    let size = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    if size < policy.max_size {
        return Ok(None);
    }
    for old in excess_rotated_logs(path, policy.max_files) {
        if let Err(e) = std::fs::remove_file(&old) {
            tracing::warn!(path = %old.display(), error = %e, "cannot remove old rotated log");
        }
    }
    let rotated = PathBuf::from(format!(
        "{}.{}",
        path.display(),
        now.format(ROTATION_TIMESTAMP_FORMAT)
    ));
    if rotated.exists() {
        // Rotated within the same second already: wait for the next round.
        return Ok(None);
    }
    std::fs::rename(path, &rotated).map_err(io)?;
    if let Err(e) = reopen().await {
        tracing::warn!(path = %path.display(), error = %e, "reopening the container log failed; undoing the rotation");
        std::fs::rename(&rotated, path).map_err(io)?;
        return Err(LogError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(e),
        });
    }
    Ok(Some(rotated))
}

/// The container log manager (upstream `containerLogManager`): rotates the logs of this
/// node's running containers every monitor interval.
///
/// A container's log path is fixed when it is created, so it is asked of the runtime
/// (`ContainerStatus`) once per container, not on every round as upstream does: with 110 pods
/// that was 110 calls every 10 s of an idle kubelet.
#[derive(Debug, Clone)]
pub struct ContainerLogManager {
    runtime: Arc<dyn RuntimeService>,
    policy: LogRotatePolicy,
    interval: Duration,
    node_name: String,
    /// Log paths of the running containers of the last round, by container id.
    log_paths: Arc<parking_lot::Mutex<HashMap<String, String>>>,
}

impl ContainerLogManager {
    /// A manager for `runtime`'s containers of pods of `node_name`.
    pub fn new(
        runtime: Arc<dyn RuntimeService>,
        policy: LogRotatePolicy,
        interval: Duration,
        node_name: String,
    ) -> Self {
        Self {
            runtime,
            policy,
            interval,
            node_name,
            log_paths: Arc::default(),
        }
    }

    /// Running containers as (id, pod name, log path).
    async fn running_container_logs(
        &self,
    ) -> Result<Vec<(String, String, String)>, crate::cri::RuntimeError> {
        let filter = cri::ContainerFilter {
            state: Some(cri::ContainerStateValue {
                state: cri::ContainerState::ContainerRunning as i32,
            }),
            ..Default::default()
        };
        let mut out = Vec::new();
        let mut known = std::mem::take(&mut *self.log_paths.lock());
        let mut paths = HashMap::new();
        for c in self.runtime.list_containers(Some(filter)).await? {
            let pod = c.labels.get(POD_NAME_LABEL).cloned().unwrap_or_default();
            let path = match known.remove(&c.id) {
                Some(path) => path,
                None => match self.runtime.container_status(&c.id).await {
                    Ok(st) => st.log_path,
                    Err(e) => {
                        tracing::debug!(container = %c.id, error = %e, "container vanished while reading its log path");
                        continue;
                    }
                },
            };
            paths.insert(c.id.clone(), path.clone());
            out.push((c.id, pod, path));
        }
        // Containers no longer running are forgotten.
        *self.log_paths.lock() = paths;
        Ok(out)
    }

    /// Rotate every due log once (upstream `rotateLogs`).
    pub async fn rotate_logs(&self) {
        let containers = match self.running_container_logs().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "log rotation: cannot list containers");
                return;
            }
        };
        for (id, pod_name, log_path) in containers {
            if log_path.is_empty() || !crate::types::owned_by_node(&pod_name, &self.node_name) {
                continue;
            }
            let rt = self.runtime.clone();
            let cid = id.clone();
            let r = rotate_log_if_needed(
                Path::new(&log_path),
                self.policy,
                Utc::now(),
                || async move {
                    rt.reopen_container_log(&cid)
                        .await
                        .map_err(|e| e.to_string())
                },
            )
            .await;
            match r {
                Ok(Some(to)) => {
                    tracing::info!(container = %id, path = %log_path, rotated = %to.display(), "rotated container log")
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(container = %id, path = %log_path, error = %e, "failed to rotate container log")
                }
            }
        }
    }

    /// Run until cancelled.
    pub async fn run(self, cancel: CancellationToken) {
        if self.policy.max_size == 0 {
            return;
        }
        let mut tick = tokio::time::interval(self.interval.max(Duration::from_millis(100)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => self.rotate_logs().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0)
            .single()
            .expect("time")
    }

    #[tokio::test]
    async fn rotation_keeps_max_files_and_undoes_on_reopen_failure() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("0.log");
        let policy = LogRotatePolicy {
            max_size: 10,
            max_files: 3,
        };
        std::fs::write(&path, "short\n").expect("write");
        let ok = || async { Ok(()) };
        assert_eq!(
            rotate_log_if_needed(&path, policy, t(0), ok)
                .await
                .expect("r"),
            None,
            "below the size"
        );
        for i in 0..4 {
            std::fs::write(&path, format!("line number {i}\n")).expect("write");
            let r = rotate_log_if_needed(&path, policy, t(i), ok)
                .await
                .expect("rotate");
            assert!(r.is_some());
            // The runtime's reopen creates the new file.
            std::fs::write(&path, "").expect("reopen");
        }
        let files = log_files(&path);
        assert_eq!(files.len(), 3, "{files:?}");
        let last_rotated = std::fs::read_to_string(&files[1]).expect("read");
        assert_eq!(last_rotated, "line number 3\n");
        std::fs::write(&path, "a long enough line\n").expect("write");
        let fail = || async { Err("unimplemented".to_string()) };
        assert!(
            rotate_log_if_needed(&path, policy, t(10), fail)
                .await
                .is_err()
        );
        assert_eq!(
            std::fs::read_to_string(&path).expect("restored"),
            "a long enough line\n"
        );
        remove_container_logs(&path);
        assert!(log_files(&path).is_empty());
    }

    /// The manager asks the runtime for a running container's log path once, not on every
    /// round, and forgets containers that stopped running.
    #[tokio::test]
    async fn the_log_path_of_a_running_container_is_asked_once() {
        use crate::cri::fake::FakeRuntime;
        let dir = tempfile::tempdir().expect("tempdir");
        let fake = Arc::new(FakeRuntime::new());
        fake.add_image("busybox:1", 1);
        let sandbox = cri::PodSandboxConfig {
            log_directory: dir.path().to_string_lossy().into_owned(),
            labels: [(POD_NAME_LABEL.to_string(), "web-node1".to_string())].into(),
            ..Default::default()
        };
        let sid = fake
            .run_pod_sandbox(sandbox.clone(), "")
            .await
            .expect("sandbox");
        let start = |name: &'static str| {
            let fake = Arc::clone(&fake);
            let (sid, sandbox) = (sid.clone(), sandbox.clone());
            async move {
                let config = cri::ContainerConfig {
                    metadata: Some(cri::ContainerMetadata {
                        name: name.into(),
                        attempt: 0,
                    }),
                    image: Some(cri::ImageSpec {
                        image: "busybox:1".into(),
                        ..Default::default()
                    }),
                    labels: sandbox.labels.clone(),
                    log_path: format!("{name}.log"),
                    ..Default::default()
                };
                let id = fake
                    .create_container(&sid, config, sandbox)
                    .await
                    .expect("create");
                fake.start_container(&id).await.expect("start");
                id
            }
        };
        let a = start("a").await;
        start("b").await;
        let manager = ContainerLogManager::new(
            fake.clone(),
            LogRotatePolicy {
                max_size: 5,
                max_files: 3,
            },
            Duration::from_secs(10),
            "node1".into(),
        );
        std::fs::write(dir.path().join("a.log"), "longer than five\n").expect("write");
        manager.rotate_logs().await;
        assert_eq!(fake.call_count("container_status"), 2);
        assert_eq!(
            log_files(&dir.path().join("a.log")).len(),
            1,
            "a's log was rotated: the path was right"
        );
        manager.rotate_logs().await;
        assert_eq!(fake.call_count("container_status"), 2, "{:?}", fake.calls());
        start("c").await;
        manager.rotate_logs().await;
        assert_eq!(fake.call_count("container_status"), 3);
        fake.exit_container(&a, 0);
        manager.rotate_logs().await;
        assert_eq!(fake.call_count("container_status"), 3);
        assert_eq!(manager.log_paths.lock().len(), 2, "a is forgotten");
    }
}
