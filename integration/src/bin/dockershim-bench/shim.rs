//! The dockershim process under test: where its binary is, and its resident set size.

use std::path::PathBuf;

use anyhow::{Result, anyhow};

/// VmRSS of `pid` in KiB.
pub(crate) fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no VmRSS for pid {pid}"))
}

pub(crate) fn find_shim_binary(arg: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(p) = arg {
        return Ok(p);
    }
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        candidates.push(dir.join("dockershim"));
    }
    candidates.push(PathBuf::from("target/release/dockershim"));
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow!("no dockershim binary: run `cargo build --workspace --release`"))
}
