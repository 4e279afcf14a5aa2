//! A containerd of a test's own, configured from the test bed's configuration file (so its CRI
//! plugin runs as the test bed's: overlayfs, runc with cgroupfs, the test bed's pause image,
//! CNI plugins and registry mirrors in `certs.d`), but with its own root, state, socket and runc root, and the CNI configuration
//! directory the caller gives, so that a test or benchmark may kill it (SIGKILL) and start it
//! again without disturbing the tests that share the test bed's containerd. The containers'
//! shims outlive a killed containerd, as on a real node. On drop: containerd is stopped, the shims it started are
//! killed, the mounts under its directories are undone and the directories removed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;

/// The test bed's containerd configuration (`hack/testbed.sh`'s `CTD_CONFIG`), which a private
/// containerd's is made from.
pub const TESTBED_CONFIG: &str = "/etc/cri-testbed/containerd/config.toml";

/// A private `containerd`.
pub struct PrivateContainerd {
    dir: PathBuf,
    state: PathBuf,
    child: Option<Child>,
    /// `unix://…/containerd.sock`.
    pub endpoint: String,
}

impl PrivateContainerd {
    /// Starts a containerd whose root and socket live in `dir` (which must exist) and whose
    /// CRI plugin runs pods on the CNI network configured in `cni_conf_dir`, and waits until
    /// its CRI plugin answers.
    pub fn start(dir: &Path, cni_conf_dir: &Path) -> anyhow::Result<PrivateContainerd> {
        // The state directory holds the runc and shim sockets' bundles: keep it under /run.
        let state = PathBuf::from("/run").join(crate::fixtures::unique_name("itc"));
        std::fs::create_dir_all(&state).context("containerd state dir")?;
        let sock = dir.join("containerd.sock");
        let testbed = std::fs::read_to_string(TESTBED_CONFIG)
            .with_context(|| format!("{TESTBED_CONFIG}: run hack/testbed.sh up"))?;
        std::fs::write(
            dir.join("config.toml"),
            config_toml(&testbed, &dir.join("root"), &state, &sock, cni_conf_dir),
        )
        .context("config.toml")?;
        let mut c = PrivateContainerd {
            dir: dir.to_path_buf(),
            state,
            child: None,
            endpoint: format!("unix://{}", sock.display()),
        };
        c.spawn()?;
        Ok(c)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log())?;
        let child = Command::new("containerd")
            .arg("--config")
            .arg(self.dir.join("config.toml"))
            .args(["--log-level", "info"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting containerd")?;
        let (sock, log) = (self.socket(), self.log());
        let child = self.child.insert(child);
        crate::daemon::wait_ready(child, "containerd", &log, Duration::from_secs(60), || {
            cri_ok(&sock)
        })
    }

    /// Runs `ctr` against this containerd.
    pub fn ctr(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        ctr_at(&self.socket(), args)
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// Its log file.
    pub fn log(&self) -> PathBuf {
        self.dir.join("containerd.log")
    }

    /// Its root (images, snapshots, container metadata) and state (bundles, runc's state):
    /// the directories its mounts live under.
    pub fn directories(&self) -> [PathBuf; 2] {
        [self.dir.join("root"), self.state.clone()]
    }

    /// The pid of the running containerd, if any.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills containerd with SIGKILL and reaps it; the shims and their containers keep running.
    pub fn kill(&mut self) {
        if let Some(c) = self.child.take() {
            crate::daemon::kill(c);
        }
    }

    /// Starts containerd again on the same state and waits until its CRI plugin answers.
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        self.spawn()
    }

    /// Stops containerd with SIGTERM and waits (SIGKILL after 30 s).
    pub fn stop(&mut self) {
        if let Some(c) = self.child.take() {
            crate::daemon::stop(c, Duration::from_secs(30));
        }
    }

    /// The pids of the shims serving this containerd (`containerd-shim-runc-v2 … -address
    /// <our socket>`), alive or not yet reaped by init.
    pub fn shim_pids(&self) -> Vec<u32> {
        let sock = self.socket().display().to_string();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
            .filter(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
                args.first()
                    .is_some_and(|a| a.ends_with(b"containerd-shim-runc-v2"))
                    && args
                        .windows(2)
                        .any(|w| w[0] == b"-address".as_slice() && w[1] == sock.as_bytes())
            })
            .collect()
    }
}

impl Drop for PrivateContainerd {
    fn drop(&mut self) {
        self.stop();
        for pid in self.shim_pids() {
            // SAFETY: kill(2) on a shim this containerd started (its command line names our
            // socket); its containers die with it.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(300));
        crate::daemon::unmount_under(&self.directories());
        let _ = std::fs::remove_dir_all(&self.state);
        let _ = std::fs::remove_dir_all(self.dir.join("root"));
    }
}

/// Whether the CRI plugin of the containerd at `sock` is loaded and ok (`ctr plugins ls`).
fn cri_ok(sock: &Path) -> bool {
    ctr_at(sock, &["plugins", "ls"]).is_ok_and(|o| {
        o.status.success()
            && String::from_utf8_lossy(&o.stdout).lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.first() == Some(&"io.containerd.grpc.v1")
                    && f.get(1) == Some(&"cri")
                    && f.last() == Some(&"ok")
            })
    })
}

/// Runs `ctr` against the containerd at `sock`.
fn ctr_at(sock: &Path, args: &[&str]) -> anyhow::Result<std::process::Output> {
    Command::new("ctr")
        .arg("--address")
        .arg(sock)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running ctr")
}

/// This instance's configuration: the test bed's (`testbed`, the text of [`TESTBED_CONFIG`]),
/// so that it runs pods as the test bed's containerd does, with this instance's root, state,
/// sockets, runc root and CNI configuration directory instead of the test bed's.
fn config_toml(
    testbed: &str,
    root: &Path,
    state: &Path,
    sock: &Path,
    cni_conf_dir: &Path,
) -> String {
    let mut section = String::new();
    let mut out = String::new();
    for line in testbed.lines() {
        let t = line.trim_start();
        if t.starts_with('[') {
            section = t.to_string();
        }
        let indent = &line[..line.len() - t.len()];
        let key = t.split('=').next().unwrap_or("").trim();
        let value = match (key, section.as_str()) {
            ("root", "") => Some(root.display().to_string()),
            ("state", "") => Some(state.display().to_string()),
            ("address", "[grpc]") => Some(sock.display().to_string()),
            ("address", "[ttrpc]") => Some(format!("{}.ttrpc", sock.display())),
            ("Root", s) if s.contains(".runc.options]") => {
                Some(state.join("runc").display().to_string())
            }
            ("conf_dir", s) if s.ends_with(".cni]") => Some(cni_conf_dir.display().to_string()),
            _ => None,
        };
        match value {
            Some(v) => out.push_str(&format!("{indent}{key} = \"{v}\"\n")),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_names_only_this_instances_paths() {
        // The test bed's configuration as hack/testbed.sh writes it.
        let testbed = include_str!("../testdata/containerd-testbed.toml");
        let text = config_toml(
            testbed,
            Path::new("/tmp/x/root"),
            Path::new("/run/itc-1"),
            Path::new("/tmp/x/containerd.sock"),
            Path::new("/tmp/x/net.d"),
        );
        assert!(text.contains("root = \"/tmp/x/root\""));
        assert!(text.contains("state = \"/run/itc-1\""));
        assert!(text.contains("address = \"/tmp/x/containerd.sock\""));
        assert!(text.contains("address = \"/tmp/x/containerd.sock.ttrpc\""));
        assert!(text.contains("Root = \"/run/itc-1/runc\""));
        assert!(text.contains("conf_dir = \"/tmp/x/net.d\""));
        assert!(!text.contains("/run/cri-testbed"), "{text}");
        assert!(!text.contains("/var/lib/cri-testbed"), "{text}");
        // The rest is the test bed's.
        assert!(text.contains("sandbox_image = \"registry.k8s.io/pause:3.9\""));
        assert!(text.contains("config_path = \"/etc/cri-testbed/containerd/certs.d\""));
        assert!(text.contains("bin_dir = \"/usr/lib/cni\""));
        assert_eq!(text.lines().count(), testbed.lines().count());
    }
}
