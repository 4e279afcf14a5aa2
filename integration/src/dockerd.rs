//! A Docker Engine of a test's own: the test bed's `dockerd` binary started with its own data
//! root, exec root, socket, pid file and bridge (made here, on a free 172.30.N.0/24), and no
//! iptables rules, so that a test may
//! restart or kill it (or run a node on it) without disturbing the tests that share the test
//! bed's Docker. Images are copied in from the test bed's Docker (`docker save | docker load`),
//! since the pause image cannot be pulled here. Stopped and removed on drop, bridge included.
//!
//! Not `--bridge=none`: a dockerd started so deletes the host's `docker0`, which belongs to
//! the test bed's Docker.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

/// A private `dockerd`.
pub struct PrivateDockerd {
    dir: PathBuf,
    exec_root: PathBuf,
    bridge: String,
    live_restore: bool,
    child: Option<Child>,
    /// `unix://…/docker.sock`.
    pub endpoint: String,
}

impl PrivateDockerd {
    /// Starts a dockerd whose state lives in `dir` (which must exist), with `--live-restore`
    /// when asked, and waits until it answers.
    pub fn start(dir: &Path, live_restore: bool) -> anyhow::Result<PrivateDockerd> {
        // The exec root holds containerd's socket: keep it short (sun_path is 108 bytes).
        let exec_root = PathBuf::from("/run").join(crate::fixtures::unique_name("itd"));
        let (bridge, _) = make_bridge("itd")?;
        let mut d = PrivateDockerd {
            dir: dir.to_path_buf(),
            endpoint: format!("unix://{}", dir.join("docker.sock").display()),
            exec_root,
            bridge,
            live_restore,
            child: None,
        };
        std::fs::write(dir.join("daemon.json"), "{}").context("daemon.json")?;
        d.spawn()?;
        Ok(d)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("dockerd.log"))?;
        let mut cmd = Command::new("dockerd");
        cmd.arg("--host")
            .arg(&self.endpoint)
            .arg("--config-file")
            .arg(self.dir.join("daemon.json"))
            .arg("--data-root")
            .arg(self.dir.join("data"))
            .arg("--exec-root")
            .arg(&self.exec_root)
            .arg("--pidfile")
            .arg(self.dir.join("docker.pid"))
            .arg("--bridge")
            .arg(&self.bridge)
            .args(["--iptables=false", "--ip-masq=false"]);
        if self.live_restore {
            cmd.arg("--live-restore");
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting dockerd")?;
        let (endpoint, log) = (self.endpoint.clone(), self.log());
        let child = self.child.insert(child);
        crate::daemon::wait_ready(child, "dockerd", &log, Duration::from_secs(60), || {
            docker_at(&endpoint, &["version", "--format", "{{.Server.Version}}"])
                .is_ok_and(|o| o.status.success())
        })
    }

    /// Kills dockerd with SIGKILL (no chance to stop its containers or clean anything up) and
    /// reaps it. Its containerd and the containers' shims are left as they are.
    pub fn kill(&mut self) {
        if let Some(c) = self.child.take() {
            crate::daemon::kill(c);
        }
    }

    /// Starts dockerd again on the same state after [`PrivateDockerd::kill`] or
    /// [`PrivateDockerd::stop`], and waits until it answers.
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        self.spawn()
    }

    /// The pid of the running dockerd, if any.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its data root (`--data-root`), where the containers' mounts live.
    pub fn data_root(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Its log file.
    pub fn log(&self) -> PathBuf {
        self.dir.join("dockerd.log")
    }

    /// Runs the `docker` CLI against this daemon.
    pub fn docker(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        docker_at(&self.endpoint, args)
    }

    /// Copies `images` from the Docker at `from` (a `unix://` endpoint) into this one.
    pub fn copy_images(&self, from: &str, images: &[&str]) -> anyhow::Result<()> {
        let mut save = Command::new("docker")
            .arg("--host")
            .arg(from)
            .arg("save")
            .args(images)
            .stdout(Stdio::piped())
            .spawn()
            .context("docker save")?;
        let out = save.stdout.take().context("docker save stdout")?;
        let load = Command::new("docker")
            .arg("--host")
            .arg(&self.endpoint)
            .arg("load")
            .stdin(out)
            .output()
            .context("docker load")?;
        let saved = save.wait()?;
        if !saved.success() || !load.status.success() {
            bail!(
                "copying {images:?}: save {saved}, load {}: {}",
                load.status,
                String::from_utf8_lossy(&load.stderr)
            );
        }
        Ok(())
    }

    /// Sends dockerd SIGTERM and returns at once: it closes its socket and then stops its
    /// containers, still serving the connections it has, until it exits. `restart`, `stop`
    /// and drop wait for the exit.
    pub fn terminate(&self) {
        if let Some(c) = &self.child {
            // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        }
    }

    /// Stops dockerd with SIGTERM and waits for it to exit (SIGKILL after 60 s). Without
    /// `--live-restore` Docker stops every container on the way out.
    pub fn stop(&mut self) {
        if let Some(c) = self.child.take() {
            crate::daemon::stop(c, Duration::from_secs(60));
        }
    }

    /// Stops and starts it again on the same state.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.stop();
        self.spawn()
    }

    /// The ids of running containers (`docker ps -q --no-trunc`).
    pub fn running_containers(&self) -> anyhow::Result<Vec<String>> {
        let out = self.docker(&["ps", "-q", "--no-trunc"])?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect())
    }
}

impl Drop for PrivateDockerd {
    fn drop(&mut self) {
        // Remove what is left, then stop: with --live-restore containers outlive dockerd.
        if self.child.is_some()
            && let Ok(out) = self.docker(&["ps", "-aq"])
        {
            let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_string)
                .collect();
            if !ids.is_empty() {
                let mut args = vec!["rm", "-f"];
                args.extend(ids.iter().map(String::as_str));
                let _ = self.docker(&args);
            }
        }
        self.stop();
        // The managed containerd may outlive dockerd with --live-restore.
        let pid_file = self.exec_root.join("containerd/containerd.pid");
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|p| p.trim().parse::<libc::pid_t>().ok())
        {
            // SAFETY: kill(2) on the pid of the containerd this dockerd started.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            std::thread::sleep(Duration::from_millis(500));
        }
        // Overlay mounts of removed containers are gone; anything left under the data root is
        // unmounted before removal.
        crate::daemon::unmount_under(&[self.data_root(), self.exec_root.clone()]);
        let _ = std::fs::remove_dir_all(&self.exec_root);
        delete_bridge(&self.bridge);
    }
}

/// Deletes a bridge made by [`make_bridge`] (best effort).
pub fn delete_bridge(name: &str) {
    let _ = ip(&["link", "del", name]);
}

/// Runs the `docker` CLI against the daemon at `endpoint`.
fn docker_at(endpoint: &str, args: &[&str]) -> anyhow::Result<std::process::Output> {
    Command::new("docker")
        .arg("--host")
        .arg(endpoint)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running docker")
}

fn ip(args: &[&str]) -> anyhow::Result<std::process::Output> {
    Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running ip")
}

/// A bridge of its own named `<prefix><6 hex digits>` (`prefix` at most 9 bytes), up, with the
/// first free 172.30.N.1/24 (N from 1 to 250, from a random start): its name and N. Deleted by
/// [`delete_bridge`].
pub fn make_bridge(prefix: &str) -> anyhow::Result<(String, u8)> {
    let name = format!("{prefix}{:06x}", rand::random::<u32>() & 0xff_ffff);
    let out = ip(&["link", "add", "name", &name, "type", "bridge"])?;
    if !out.status.success() {
        bail!(
            "cannot create bridge {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let start = rand::random::<u8>() % 250;
    for i in 0..250u16 {
        let n = (u16::from(start) + i) % 250 + 1;
        let used = ip(&["-4", "-o", "addr"])?;
        if String::from_utf8_lossy(&used.stdout).contains(&format!(" 172.30.{n}.")) {
            continue;
        }
        let addr = format!("172.30.{n}.1/24");
        if ip(&["addr", "add", &addr, "dev", &name])?.status.success()
            && ip(&["link", "set", &name, "up"])?.status.success()
        {
            // n is 1..=250.
            return Ok((name, n as u8));
        }
    }
    let _ = ip(&["link", "del", &name]);
    bail!("no free 172.30.N.0/24 for bridge {name}")
}
