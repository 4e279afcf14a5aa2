//! Container logs (upstream `pkg/kubelet/kuberuntime/logs` `ReadLogs` and
//! `pkg/kubelet/logs/container_log_manager.go`). This module owns:
//! - parsing log files in the CRI format (`<RFC3339Nano> <stdout|stderr> <P|F>[:tags] <log>`)
//!   and in Docker's json-file format (`{"log":..,"stream":..,"time":..}`), line by line;
//! - [`read_logs`]: the `/containerLogs` reader with `tailLines`, `sinceSeconds`/`sinceTime`,
//!   `timestamps`, `limitBytes` and `follow`, reading the rotated files of a container
//!   (`<path>.<YYYYMMDD-hhmmss>`, oldest first) before the current one, and in follow mode
//!   noticing when the current file is rotated away;
//! - [`ContainerLogManager`]: log rotation (`containerLogMaxSize` / `containerLogMaxFiles`):
//!   rename the current file to `<path>.<timestamp>`, ask the runtime to reopen it (CRI
//!   `ReopenContainerLog`), keep at most `maxFiles - 1` rotated files. Deviation: rotated files
//!   are not gzip-compressed, so that the reader can serve them.
//! - [`remove_container_logs`] (GC) and [`last_log_string`] (`FallbackToLogsOnError`).
//!
//! Layout: the line formats in `parser.rs`, the reader in `reader.rs`, rotation and removal in
//! `rotation.rs`; this file holds what they share (the error, the files of a container log)
//! and re-exports their public items.

mod parser;
mod reader;
mod rotation;

use std::path::{Path, PathBuf};

pub use parser::{LogMessage, LogStream, parse_cri_log, parse_docker_json_log, parse_log_line};
pub use reader::{
    LogOptions, RunningCheck, TERMINATION_LOG_BYTES, TERMINATION_LOG_LINES, last_log_string,
    read_logs, read_logs_to_vec,
};
pub(crate) use reader::{parse_bool, query_pairs};
pub use rotation::{
    ContainerLogManager, LogRotatePolicy, ROTATION_TIMESTAMP_FORMAT, excess_rotated_logs,
    remove_container_logs, rotate_log_if_needed,
};

/// Log errors.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A line is in neither supported format.
    #[error("malformed log line: {0}")]
    Parse(String),
    /// A query parameter is invalid.
    #[error("invalid log options: {0}")]
    Options(String),
    /// I/O on a log file.
    #[error("log file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
}

/// The files of a container log, oldest first: rotated `<path>.<timestamp>` files (not `.gz`
/// or `.tmp`), then `path` itself when it exists.
pub fn log_files(path: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return vec![];
    };
    let prefix = format!("{name}.");
    let mut rotated: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| {
                    let n = e.file_name().to_str()?.to_string();
                    let suffix = n.strip_prefix(&prefix)?;
                    (!suffix.ends_with(".gz") && !suffix.ends_with(".tmp")).then(|| dir.join(&n))
                })
                .collect()
        })
        .unwrap_or_default();
    rotated.sort();
    if path.exists() {
        rotated.push(path.to_path_buf());
    }
    rotated
}
