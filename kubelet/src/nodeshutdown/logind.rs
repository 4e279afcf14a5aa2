//! systemd-logind over D-Bus (upstream `pkg/kubelet/nodeshutdown/systemd/inhibit_linux.go`): the
//! `org.freedesktop.login1.Manager` calls the shutdown manager makes on the system bus (the bus
//! at `DBUS_SYSTEM_BUS_ADDRESS` when set): `InhibitDelayMaxUSec`, `Inhibit("shutdown", "kubelet",
//! …, "delay")`, the `PrepareForShutdown` signal, and the logind reload after writing
//! `InhibitDelayMaxSec` to a drop-in (`org.freedesktop.systemd1.Manager.KillUnit` with SIGHUP).

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;

use super::{InhibitLock, Logind};

/// Where the drop-in goes (upstream `logindConfigDirectory`).
pub const LOGIND_CONFIG_DIRECTORY: &str = "/etc/systemd/logind.conf.d/";
/// The drop-in's name (upstream `kubeletLogindConf`).
pub const KUBELET_LOGIND_CONF: &str = "99-kubelet.conf";

#[zbus::proxy(
    interface = "org.freedesktop.login1.Manager",
    default_service = "org.freedesktop.login1",
    default_path = "/org/freedesktop/login1"
)]
trait Login1Manager {
    fn inhibit(
        &self,
        what: &str,
        who: &str,
        why: &str,
        mode: &str,
    ) -> zbus::Result<zbus::zvariant::OwnedFd>;

    #[zbus(signal)]
    fn prepare_for_shutdown(&self, start: bool) -> zbus::Result<()>;

    #[zbus(property, name = "InhibitDelayMaxUSec")]
    fn inhibit_delay_max_usec(&self) -> zbus::Result<u64>;
}

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
trait Systemd1Manager {
    fn kill_unit(&self, name: &str, whom: &str, signal: i32) -> zbus::Result<()>;
}

/// The drop-in text that sets `InhibitDelayMaxSec` (upstream `OverrideInhibitDelay`).
pub fn drop_in(delay: Duration) -> String {
    format!(
        "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={}\n",
        delay.as_secs()
    )
}

/// Writes the drop-in into `dir` (created when missing).
pub fn write_drop_in(dir: &Path, delay: Duration) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(KUBELET_LOGIND_CONF);
    std::fs::write(&path, drop_in(delay))?;
    Ok(path)
}

/// An inhibitor lock: logind keeps the shutdown waiting while this file descriptor is open.
#[derive(Debug)]
struct Fd(#[allow(dead_code)] zbus::zvariant::OwnedFd);

/// systemd-logind on the system bus.
#[derive(Debug, Clone)]
pub struct DbusLogind {
    conn: zbus::Connection,
    config_dir: PathBuf,
}

impl DbusLogind {
    /// Connects to the system bus.
    pub async fn connect() -> Result<Self, String> {
        let conn = zbus::Connection::system()
            .await
            .map_err(|e| format!("cannot reach systemd-logind over D-Bus: {e}"))?;
        Ok(Self {
            conn,
            config_dir: PathBuf::from(LOGIND_CONFIG_DIRECTORY),
        })
    }

    async fn login1(&self) -> Result<Login1ManagerProxy<'_>, String> {
        Login1ManagerProxy::new(&self.conn)
            .await
            .map_err(|e| format!("systemd-logind: {e}"))
    }
}

#[async_trait]
impl Logind for DbusLogind {
    async fn inhibit_delay_max(&self) -> Result<Duration, String> {
        let usec = self
            .login1()
            .await?
            .inhibit_delay_max_usec()
            .await
            .map_err(|e| format!("reading logind's InhibitDelayMaxUSec: {e}"))?;
        Ok(Duration::from_micros(usec))
    }

    async fn override_inhibit_delay(&self, delay: Duration) -> Result<(), String> {
        let path = write_drop_in(&self.config_dir, delay)
            .map_err(|e| format!("writing {}: {e}", self.config_dir.display()))?;
        tracing::info!(path = %path.display(), ?delay, "graceful node shutdown: raised logind's InhibitDelayMaxSec, reloading logind");
        let systemd = Systemd1ManagerProxy::new(&self.conn)
            .await
            .map_err(|e| format!("systemd: {e}"))?;
        systemd
            .kill_unit("systemd-logind.service", "all", libc::SIGHUP)
            .await
            .map_err(|e| format!("reloading systemd-logind: {e}"))?;
        // logind rereads its configuration asynchronously (upstream waits a second too).
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(())
    }

    async fn inhibit_shutdown(&self) -> Result<InhibitLock, String> {
        let fd = self
            .login1()
            .await?
            .inhibit(
                "shutdown",
                "kubelet",
                "Kubelet needs time to handle node shutdown",
                "delay",
            )
            .await
            .map_err(|e| format!("taking a logind inhibitor lock: {e}"))?;
        Ok(Box::new(Fd(fd)))
    }

    async fn shutdown_events(&self) -> Result<BoxStream<'static, bool>, String> {
        let proxy = Login1ManagerProxy::new(&self.conn)
            .await
            .map_err(|e| format!("systemd-logind: {e}"))?;
        let signals = proxy
            .receive_prepare_for_shutdown()
            .await
            .map_err(|e| format!("subscribing to PrepareForShutdown: {e}"))?;
        Ok(signals
            .filter_map(|s| async move { s.args().ok().map(|a| a.start) })
            .boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drop_in_raises_inhibit_delay_max_sec() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_drop_in(&dir.path().join("logind.conf.d"), Duration::from_secs(45))
            .expect("written");
        assert!(path.ends_with("99-kubelet.conf"));
        let text = std::fs::read_to_string(path).expect("read");
        assert_eq!(
            text,
            "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=45\n"
        );
    }
}
