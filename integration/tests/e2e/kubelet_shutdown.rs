//! End to end: graceful node shutdown of the `kubelet` BINARY on both runtimes (containerd's CRI
//! and the embedded dockershim on Docker), with systemd-logind played by a fake on a private
//! D-Bus system bus (a real `dbus-daemon`; the kubelet finds it through
//! `DBUS_SYSTEM_BUS_ADDRESS`, as any D-Bus client does). With `shutdownGracePeriod: 20s` and
//! `shutdownGracePeriodCriticalPods: 10s` in its config file, the kubelet reads logind's
//! `InhibitDelayMaxUSec` and takes a `delay` inhibitor lock for `shutdown` as "kubelet". When
//! logind sends `PrepareForShutdown(true)`, the static pod (critical) is killed: it ends Failed
//! with reason `Terminated` and upstream's message, its containers stop, and only then is the
//! inhibitor lock released (the fake sees its end of the lock close). A pod offered during the
//! shutdown is rejected with reason `NodeShutdown` (message as upstream's `rejectPod` makes it). A second test: with no logind reachable the
//! kubelet says so in one warning and runs its pods.

use crate::kubelet_support;

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use kubelet_support::*;
use parking_lot::Mutex;

const MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";

/// What the fake logind saw: the Inhibit calls and its ends of the locks it handed out.
#[derive(Default, Clone)]
struct Seen {
    inhibits: Arc<Mutex<Vec<[String; 4]>>>,
    locks: Arc<Mutex<Vec<UnixStream>>>,
}

impl Seen {
    fn inhibits(&self) -> Vec<[String; 4]> {
        self.inhibits.lock().clone()
    }

    /// How many handed-out locks the kubelet still holds open.
    fn held(&self) -> usize {
        self.locks
            .lock()
            .iter()
            .filter(|s| {
                let _ = s.set_nonblocking(true);
                let mut b = [0u8; 1];
                // EOF: the kubelet closed its end; WouldBlock: still open.
                !matches!(std::io::Read::read(&mut &**s, &mut b), Ok(0))
            })
            .count()
    }
}

struct FakeLogind {
    seen: Seen,
}

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl FakeLogind {
    fn inhibit(
        &self,
        what: &str,
        who: &str,
        why: &str,
        mode: &str,
    ) -> zbus::fdo::Result<zbus::zvariant::OwnedFd> {
        let (ours, theirs) =
            UnixStream::pair().map_err(|e| zbus::fdo::Error::Failed(e.to_string()))?;
        self.seen
            .inhibits
            .lock()
            .push([what.into(), who.into(), why.into(), mode.into()]);
        self.seen.locks.lock().push(ours);
        Ok(std::os::fd::OwnedFd::from(theirs).into())
    }

    #[zbus(property, name = "InhibitDelayMaxUSec")]
    fn inhibit_delay_max_usec(&self) -> u64 {
        30_000_000
    }

    #[zbus(signal)]
    async fn prepare_for_shutdown(
        emitter: &zbus::object_server::SignalEmitter<'_>,
        start: bool,
    ) -> zbus::Result<()>;
}

/// A private system bus (`dbus-daemon`) with the fake logind on it.
struct Bus {
    daemon: tokio::process::Child,
    address: String,
    conn: zbus::Connection,
    seen: Seen,
}

impl Bus {
    async fn start(dir: &Path) -> Bus {
        let sock = dir.join("system_bus_socket");
        let config = dir.join("bus.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_type="method_return"/>
    <allow send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="signal"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
  </policy>
</busconfig>
"#,
                sock.display()
            ),
        )
        .expect("bus config");
        let daemon = tokio::process::Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .arg("--nofork")
            .kill_on_drop(true)
            .spawn()
            .expect("dbus-daemon (Debian package dbus-daemon, installed by hack/testbed.sh)");
        for _ in 0..100 {
            if sock.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let address = format!("unix:path={}", sock.display());
        let seen = Seen::default();
        // The socket may exist a moment before the daemon accepts on it: retry for 5 s.
        let mut last_error = None;
        let mut conn = None;
        for _ in 0..50 {
            let built = zbus::connection::Builder::address(address.as_str())
                .and_then(|b| b.name("org.freedesktop.login1"))
                .and_then(|b| {
                    b.serve_at("/org/freedesktop/login1", FakeLogind { seen: seen.clone() })
                });
            match built {
                Ok(b) => match b.build().await {
                    Ok(c) => {
                        conn = Some(c);
                        break;
                    }
                    Err(e) => last_error = Some(e),
                },
                Err(e) => last_error = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let conn = conn
            .unwrap_or_else(|| panic!("fake logind on the private bus {address}: {last_error:?}"));
        Bus {
            daemon,
            address,
            conn,
            seen,
        }
    }

    async fn prepare_for_shutdown(&self, start: bool) {
        let iface = self
            .conn
            .object_server()
            .interface::<_, FakeLogind>("/org/freedesktop/login1")
            .await
            .expect("interface");
        FakeLogind::prepare_for_shutdown(iface.signal_emitter(), start)
            .await
            .expect("signal");
    }
}

fn config_file(dir: &Path) -> PathBuf {
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nauthentication:\n  webhook:\n    enabled: false\nauthorization:\n  mode: AlwaysAllow\nshutdownGracePeriod: 20s\nshutdownGracePeriodCriticalPods: 10s\n",
    )
    .expect("config file");
    path
}

async fn kubelet_graceful_shutdown(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_graceful_shutdown[{}]", kind.name()));
    let k = Kubelet::new(kind, "klshut");
    let node = k.node.clone();
    let (uid, late) = (format!("{node}-web"), format!("{node}-late"));
    let bus = Bus::start(k.dir.path()).await;
    // A container that stops on SIGTERM (sh as PID 1 ignores it otherwise).
    k.write_manifest(
        "web.yaml",
        &pod_manifest(
            "web",
            &uid,
            &tb.busybox_image,
            "trap 'exit 0' TERM; while true; do sleep 1; done",
            "",
        ),
    );
    let mut cmd = kubelet_command(
        kind,
        &tb,
        &k.root,
        Some(&k.manifests),
        k.port,
        &node,
        &k.log,
    );
    cmd.arg("--config")
        .arg(config_file(k.dir.path()))
        .env("DBUS_SYSTEM_BUS_ADDRESS", &bus.address);
    let mut child = cmd.spawn().expect("spawn kubelet");
    let (port, log, endpoint) = (k.port, k.log.clone(), k.endpoint(&tb));
    let body = async {
        wait_for("the static pod running", &log, || async {
            running_ids(&pod(port, &uid).await?)
        })
        .await;
        let seen = bus.seen.clone();
        wait_for("the kubelet's inhibitor lock", &log, || async {
            (seen.held() == 1).then_some(())
        })
        .await;
        assert_eq!(
            seen.inhibits(),
            vec![[
                "shutdown".to_string(),
                "kubelet".to_string(),
                "Kubelet needs time to handle node shutdown".to_string(),
                "delay".to_string()
            ]]
        );
        bus.prepare_for_shutdown(true).await;
        let p = wait_for("the pod terminated for the shutdown", &log, || async {
            let p = pod(port, &uid).await?;
            (p["status"]["phase"] == "Failed").then_some(p)
        })
        .await;
        assert_eq!(p["status"]["reason"], "Terminated", "{p}");
        assert_eq!(p["status"]["message"], MESSAGE, "{p}");
        let containers = runtime_containers(&endpoint, &uid)
            .await
            .expect("containers");
        assert!(
            containers
                .iter()
                .all(|c| c.state != cri_proto::runtime::v1::ContainerState::ContainerRunning as i32),
            "no container of the pod runs"
        );
        wait_for("the inhibitor lock released", &log, || async {
            (seen.held() == 0).then_some(())
        })
        .await;
        // A pod offered now is refused.
        k.write_manifest(
            "late.yaml",
            &pod_manifest("late", &late, &tb.busybox_image, "sleep 3600", ""),
        );
        let l = wait_for("the late pod rejected", &log, || async {
            let p = pod(port, &late).await?;
            (p["status"]["phase"] == "Failed").then_some(p)
        })
        .await;
        assert_eq!(l["status"]["reason"], "NodeShutdown", "{l}");
        // Upstream's `rejectPod` puts "Pod " before the admit handler's message, which itself
        // starts with "Pod": the doubled word is upstream's.
        assert_eq!(
            l["status"]["message"], "Pod Pod was rejected as the node is shutting down.",
            "{l}"
        );
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            text.contains("graceful node shutdown: shutdown event received"),
            "{}",
            log_tail(&log, 30)
        );
    };
    let outcome = tokio::time::timeout(Duration::from_secs(150), body).await;
    stop_kubelet(&mut child).await;
    cleanup_all(kind, &tb, &[uid, late]).await;
    drop(bus.daemon);
    outcome.unwrap_or_else(|_| panic!("timed out; kubelet log:\n{}", log_tail(&k.log, 60)));
}

#[tokio::test]
async fn kubelet_graceful_shutdown_containerd() {
    kubelet_graceful_shutdown(RuntimeKind::Containerd).await;
}

#[tokio::test]
async fn kubelet_graceful_shutdown_dockershim() {
    kubelet_graceful_shutdown(RuntimeKind::Dockershim).await;
}

/// Without a logind the kubelet warns once and runs its pods.
#[tokio::test]
async fn kubelet_without_logind_warns_and_runs() {
    let kind = RuntimeKind::Containerd;
    let tb = require_testbed!("kubelet_without_logind_warns_and_runs");
    let k = Kubelet::new(kind, "klnologind");
    let uid = format!("{}-web", k.node);
    k.write_manifest(
        "web.yaml",
        &pod_manifest("web", &uid, &tb.busybox_image, "sleep 3600", ""),
    );
    let mut cmd = kubelet_command(
        kind,
        &tb,
        &k.root,
        Some(&k.manifests),
        k.port,
        &k.node,
        &k.log,
    );
    let nobody = k.dir.path().join("no-bus-here");
    cmd.arg("--config").arg(config_file(k.dir.path())).env(
        "DBUS_SYSTEM_BUS_ADDRESS",
        format!("unix:path={}", nobody.display()),
    );
    let mut child = cmd.spawn().expect("spawn kubelet");
    let (port, log) = (k.port, k.log.clone());
    let body = async {
        wait_for("the pod running without logind", &log, || async {
            running_ids(&pod(port, &uid).await?)
        })
        .await;
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let warnings: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("systemd-logind cannot be reached"))
            .collect();
        assert_eq!(warnings.len(), 1, "{}", log_tail(&log, 30));
    };
    let outcome = tokio::time::timeout(Duration::from_secs(90), body).await;
    stop_kubelet(&mut child).await;
    cleanup_all(kind, &tb, &[uid]).await;
    outcome.unwrap_or_else(|_| panic!("timed out; kubelet log:\n{}", log_tail(&k.log, 60)));
}
