//! A containerd of a test's own, with the CRI plugin configured as `hack/testbed.sh` configures
//! the test bed's (overlayfs, runc with cgroupfs, the test bed's registry mirrors in
//! `certs.d`), but its own root, state, socket and runc root, and the CNI configuration
//! directory the caller gives, so that a test or benchmark may kill it (SIGKILL) and start it
//! again without disturbing the tests that share the test bed's containerd. The containers'
//! shims outlive a killed containerd, as on a real node. On drop: containerd is stopped, the shims it started are
//! killed, the mounts under its directories are undone and the directories removed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The test bed's registry configuration (`hosts.toml` per registry), which the private
/// containerd shares: it only reads it.
pub const TESTBED_CERTS_D: &str = "/etc/cri-testbed/containerd/certs.d";

/// A private `containerd`.
pub struct PrivateContainerd {
    dir: PathBuf,
    state: PathBuf,
    child: Option<Child>,
    /// `unix://…/containerd.sock`.
    pub endpoint: String,
}

impl PrivateContainerd {
    /// Starts a containerd whose root and socket live in `dir` (which must exist), whose CRI
    /// plugin runs pods on the CNI network configured in `cni_conf_dir` with the plugins of
    /// `cni_bin_dir` and `sandbox_image` as the pause image, and waits until its CRI plugin
    /// answers.
    pub fn start(
        dir: &Path,
        cni_conf_dir: &Path,
        cni_bin_dir: &Path,
        sandbox_image: &str,
    ) -> anyhow::Result<PrivateContainerd> {
        // The state directory holds the runc and shim sockets' bundles: keep it under /run.
        let state = PathBuf::from("/run").join(crate::fixtures::unique_name("itc"));
        std::fs::create_dir_all(&state).context("containerd state dir")?;
        let sock = dir.join("containerd.sock");
        std::fs::write(
            dir.join("config.toml"),
            config_toml(
                &dir.join("root"),
                &state,
                &sock,
                cni_conf_dir,
                cni_bin_dir,
                sandbox_image,
            ),
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
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.cri_ok() {
                return Ok(());
            }
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(st)) = c.try_wait()
            {
                bail!("containerd exited early ({st}); see {}", self.log().display());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        bail!(
            "containerd's CRI plugin is not ok within 60 s; see {}",
            self.log().display()
        )
    }

    /// Whether its CRI plugin is loaded and ok (`ctr plugins ls`).
    fn cri_ok(&self) -> bool {
        let out = self.ctr(&["plugins", "ls"]);
        out.is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout).lines().any(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    f.first() == Some(&"io.containerd.grpc.v1")
                        && f.get(1) == Some(&"cri")
                        && f.last() == Some(&"ok")
                })
        })
    }

    /// Runs `ctr` against this containerd.
    pub fn ctr(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        Command::new("ctr")
            .arg("--address")
            .arg(self.socket())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("running ctr")
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
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts containerd again on the same state and waits until its CRI plugin answers.
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        self.spawn()
    }

    /// Stops containerd with SIGTERM and waits (SIGKILL after 30 s).
    pub fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = c.kill();
        let _ = c.wait();
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
                    && args.windows(2).any(|w| {
                        w[0] == b"-address".as_slice() && w[1] == sock.as_bytes()
                    })
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
        let dirs = self.directories().map(|d| d.display().to_string());
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut mounts: Vec<&str> = mountinfo
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| dirs.iter().any(|d| m.starts_with(d.as_str())))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            if let Ok(c) = std::ffi::CString::new(m) {
                // SAFETY: umount2(2) with a NUL-terminated path under our own directories.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
        let _ = std::fs::remove_dir_all(&self.state);
        let _ = std::fs::remove_dir_all(self.dir.join("root"));
    }
}

/// The configuration file: the test bed's (`hack/testbed.sh`'s `write_configs`) with this
/// instance's paths.
fn config_toml(
    root: &Path,
    state: &Path,
    sock: &Path,
    cni_conf_dir: &Path,
    cni_bin_dir: &Path,
    sandbox_image: &str,
) -> String {
    let (root, state, sock) = (root.display(), state.display(), sock.display());
    let (conf, bin) = (cni_conf_dir.display(), cni_bin_dir.display());
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"
oom_score = 0

[grpc]
  address = "{sock}"

[ttrpc]
  address = "{sock}.ttrpc"

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{sandbox_image}"
    restrict_oom_score_adj = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "{state}/runc"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "{bin}"
      conf_dir = "{conf}"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "{TESTBED_CERTS_D}"
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_names_only_this_instances_paths() {
        let text = config_toml(
            Path::new("/tmp/x/root"),
            Path::new("/run/itc-1"),
            Path::new("/tmp/x/containerd.sock"),
            Path::new("/tmp/x/net.d"),
            Path::new("/usr/lib/cni"),
            "registry.k8s.io/pause:3.9",
        );
        assert!(text.contains("root = \"/tmp/x/root\""));
        assert!(text.contains("state = \"/run/itc-1\""));
        assert!(text.contains("address = \"/tmp/x/containerd.sock\""));
        assert!(text.contains("address = \"/tmp/x/containerd.sock.ttrpc\""));
        assert!(text.contains("Root = \"/run/itc-1/runc\""));
        assert!(text.contains("conf_dir = \"/tmp/x/net.d\""));
        assert!(!text.contains("/run/cri-testbed"), "{text}");
    }
}
