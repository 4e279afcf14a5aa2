//! The message an exited container leaves (upstream `kuberuntime_container.go`
//! `getTerminationMessage`, `readLastStringFromContainerLogs`): the file mounted at its
//! `terminationMessagePath`, or the tail of its log with `FallbackToLogsOnError`.

use std::path::Path;

use cri_proto::runtime::v1 as cri;

use super::labels::{
    CONTAINER_TERMINATION_MESSAGE_PATH_LABEL, CONTAINER_TERMINATION_MESSAGE_POLICY_LABEL,
};

/// Upstream `MaxContainerTerminationMessageLength`.
pub const MAX_TERMINATION_MESSAGE_LENGTH: u64 = 4096;

/// The last `max` bytes of a file.
fn read_at_most(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    if len > max {
        f.seek(SeekFrom::Start(len - max))?;
    }
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    Ok(buf)
}

/// Upstream `getTerminationMessage` + `readLastStringFromContainerLogs` for an exited
/// container: the file mounted at its terminationMessagePath (last 4 KiB), or, with
/// `FallbackToLogsOnError` after a failure and an empty file, the tail of its log.
pub async fn termination_message(st: &cri::ContainerStatus) -> String {
    if st.state != cri::ContainerState::ContainerExited as i32 {
        return String::new();
    }
    let path = st
        .annotations
        .get(CONTAINER_TERMINATION_MESSAGE_PATH_LABEL)
        .cloned()
        .unwrap_or_default();
    let fallback = st
        .annotations
        .get(CONTAINER_TERMINATION_MESSAGE_POLICY_LABEL)
        .is_some_and(|p| p == "FallbackToLogsOnError")
        && st.exit_code != 0
        && st.reason != "ContainerCannotRun";
    let mut check_logs = fallback;
    let mut msg = String::new();
    if !path.is_empty()
        && let Some(m) = st.mounts.iter().find(|m| m.container_path == path)
    {
        match read_at_most(Path::new(&m.host_path), MAX_TERMINATION_MESSAGE_LENGTH) {
            Ok(data) => {
                check_logs = fallback && data.is_empty();
                msg = String::from_utf8_lossy(&data).into_owned();
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return format!("Error on reading termination log {}: {e}", m.host_path);
            }
        }
    }
    if check_logs && !st.log_path.is_empty() {
        msg = crate::logs::last_log_string(Path::new(&st.log_path)).await;
    }
    msg
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[tokio::test]
    async fn termination_message_from_file_or_logs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let msg = dir.path().join("msg");
        std::fs::write(&msg, "").expect("msg");
        let log = dir.path().join("0.log");
        std::fs::write(&log, "2024-01-01T00:00:00Z stdout F oops\n").expect("log");
        let mut st = cri::ContainerStatus {
            state: cri::ContainerState::ContainerExited as i32,
            exit_code: 1,
            log_path: log.display().to_string(),
            mounts: vec![cri::Mount {
                container_path: "/dev/termination-log".into(),
                host_path: msg.display().to_string(),
                ..Default::default()
            }],
            annotations: HashMap::from([
                (
                    "io.kubernetes.container.terminationMessagePath".to_string(),
                    "/dev/termination-log".to_string(),
                ),
                (
                    "io.kubernetes.container.terminationMessagePolicy".to_string(),
                    "File".to_string(),
                ),
            ]),
            ..Default::default()
        };
        assert_eq!(termination_message(&st).await, "");
        st.annotations.insert(
            "io.kubernetes.container.terminationMessagePolicy".into(),
            "FallbackToLogsOnError".into(),
        );
        assert_eq!(termination_message(&st).await, "oops\n");
        std::fs::write(&msg, "bye").expect("msg");
        assert_eq!(termination_message(&st).await, "bye");
        st.exit_code = 0;
        std::fs::write(&msg, "").expect("msg");
        assert_eq!(termination_message(&st).await, "", "no fallback on success");
    }
}
