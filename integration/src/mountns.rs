//! A benchmark that starts Go kubelets runs in a mount namespace of its own, with private
//! (tmpfs) `/var/log/pods` and `/var/log/containers`: the Go kubelet's container garbage
//! collector removes every pod log directory there whose pod it does not know, which on a shared
//! machine are other kubelets' (test runs, soaks) directories.

use std::process::Command;

use anyhow::{Context, Result, bail};

/// Set in the re-executed program: it already runs in its own mount namespace.
const IN_NAMESPACE: &str = "INTEGRATION_PRIVATE_POD_LOGS";

/// The pod log directories made private.
pub const POD_LOG_DIRS: [&str; 2] = ["/var/log/pods", "/var/log/containers"];

/// Outside the namespace: runs this program again under `unshare --mount --propagation
/// private` (util-linux) with the same arguments and exits with its status; needs root. Inside
/// it: mounts a tmpfs on each of [`POD_LOG_DIRS`] and returns. Call it before starting any
/// runtime or thread.
pub fn enter_with_private_pod_logs(program: &str) -> Result<()> {
    if std::env::var_os(IN_NAMESPACE).is_none() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("{program} needs root (a mount namespace of its own)");
        }
        let exe = std::env::current_exe().context("own executable")?;
        let st = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--"])
            .arg(exe)
            .args(std::env::args_os().skip(1))
            .env(IN_NAMESPACE, "1")
            .status()
            .context("unshare (util-linux)")?;
        std::process::exit(st.code().unwrap_or(1));
    }
    for d in POD_LOG_DIRS {
        std::fs::create_dir_all(d).with_context(|| d.to_string())?;
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "tmpfs", d])
            .status()
            .context("mount")?;
        if !st.success() {
            bail!("cannot mount a private tmpfs on {d}");
        }
    }
    Ok(())
}
