//! What the private daemons of tests (`dockerd`, `containerd`) share as child processes:
//! waiting until a freshly spawned one answers, stopping one with SIGTERM (SIGKILL when it
//! takes too long) or killing it with SIGKILL, and undoing the mounts it left under its own
//! directories before they are removed.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::bail;

/// Waits (at most `timeout`) until `ready` answers true for the daemon `name` just spawned as
/// `child`; an error naming `log` when it exits first or never answers.
pub fn wait_ready(
    child: &mut Child,
    name: &str,
    log: &Path,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if ready() {
            return Ok(());
        }
        if let Ok(Some(st)) = child.try_wait() {
            bail!("{name} exited early ({st}); see {}", log.display());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    bail!(
        "{name} did not answer within {timeout:?}; see {}",
        log.display()
    )
}

/// Sends `child` SIGTERM and waits for it to exit, SIGKILL after `timeout`.
pub fn stop(mut child: Child, timeout: Duration) {
    // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    kill(child);
}

/// Kills `child` with SIGKILL (no chance to clean anything up) and reaps it.
pub fn kill(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Unmounts (lazily, deepest first) every mount point under any of `dirs`.
pub fn unmount_under(dirs: &[PathBuf]) {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts: Vec<&str> = mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| dirs.iter().any(|d| Path::new(m).starts_with(d)))
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in mounts {
        if let Ok(c) = std::ffi::CString::new(m) {
            // SAFETY: umount2(2) with a NUL-terminated path under the caller's directories.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_daemon_that_exits_early_is_an_error_naming_its_log() {
        let mut child = std::process::Command::new("true").spawn().expect("true");
        let err = wait_ready(
            &mut child,
            "truth",
            Path::new("/tmp/truth.log"),
            Duration::from_secs(10),
            || false,
        )
        .expect_err("it exits");
        assert!(err.to_string().contains("truth exited early"), "{err}");
        assert!(err.to_string().contains("/tmp/truth.log"), "{err}");
    }

    #[test]
    fn a_daemon_that_answers_is_ready_and_stops_on_sigterm() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("sleep");
        let mut polls = 0;
        wait_ready(
            &mut child,
            "sleep",
            Path::new("/x"),
            Duration::from_secs(10),
            || {
                polls += 1;
                polls > 2
            },
        )
        .expect("ready");
        let start = Instant::now();
        stop(child, Duration::from_secs(30));
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "SIGTERM ended it"
        );
    }
}
