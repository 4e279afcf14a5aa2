//! The packaged systemd units (packaging/systemd/cri-docker.socket and cri-docker.service) run
//! the way systemd runs them, with `systemd-socket-activate` standing in for systemd: the socket
//! unit's `ListenStream=` (with `%t` in a temp dir) is created, with its `SocketMode=` and
//! `SocketGroup=`, before dockershim exists, the service's `ExecStart=` arguments (`--container-runtime-endpoint fd://`,
//! the binary swapped for the built one, plus the test bed's Docker and CNI flags and a temp
//! root directory) are started on the first connection with the socket passed as fd 3, and
//! `Type=notify` is honoured (READY=1 on a NOTIFY_SOCKET of ours).
//!
//! On that socket: CRI Version, a pod sandbox with a running container (its checkpoint in the
//! root directory given), and the project's `kubelet` binary pointed at
//! `unix://<that socket>` running a static pod. Then SIGTERM: dockershim exits cleanly, says
//! STOPPING=1, and leaves the socket file alone (it is systemd's: same inode, mode and group).
//! Whatever happens, every pod is removed afterwards. With two passed sockets, `fd://NAME` and
//! `fd://N` serve the one named, and a name or number not passed fails with a line listing them.
//!
//! Needs the test bed, the `dockershim` and `kubelet` binaries (`cargo build --workspace`), and /usr/bin/systemd-socket-activate (Debian's systemd package).

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use integration::fixtures::{
    busybox_container, cleanup_sandboxes, ensure_image, sandbox_config, unique_name,
};
use integration::runtimes::{InProcessShim, RuntimeKind, clients, workspace_binary};
use integration::testbed::Testbed;
use parking_lot::Mutex;

use crate::dockershim_support::docker;
use crate::kubelet_support::{
    Kubelet, cleanup_runtime, pod, pod_manifest, running_ids, runtime_sandboxes, stop_kubelet,
    wait_for,
};

const NAME: &str = "socket_activation";
const SOCKET_ACTIVATE: &str = "/usr/bin/systemd-socket-activate";

fn repo_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path)
}

/// The values of `key=` in `[section]` of a unit file, in order (continuation lines and
/// comments handled; an empty assignment resets the list, as systemd does).
fn unit_values(text: &str, section: &str, key: &str) -> Vec<String> {
    let mut joined: Vec<String> = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim();
        if pending.is_empty() && (line.starts_with('#') || line.starts_with(';')) {
            continue;
        }
        if let Some(cont) = line.strip_suffix('\\') {
            pending.push_str(cont);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        joined.push(std::mem::take(&mut pending));
    }
    let mut current = String::new();
    let mut values = Vec::new();
    for line in joined {
        if line.starts_with('[') && line.ends_with(']') {
            current = line[1..line.len() - 1].to_string();
        } else if current == section
            && let Some((k, v)) = line.split_once('=')
            && k.trim() == key
        {
            let v = v.trim();
            if v.is_empty() {
                values.clear();
            } else {
                values.push(v.to_string());
            }
        }
    }
    values
}

/// An `ExecStart=` command line split into words (whitespace; double and single quotes), its
/// systemd prefixes (`-`, `@`, `:`, `+`, `!`) dropped.
fn split_command(line: &str) -> Vec<String> {
    let line = line.trim_start_matches(['-', '@', ':', '+', '!']);
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut in_word = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

#[test]
fn unit_file_parsing() {
    let text = "[Unit]\nRequires=a.socket\n[Service]\n# ExecStart=/nope\nExecStart=\nExecStart=-/bin/x --a \"b c\" \\\n  'd'\n";
    assert_eq!(unit_values(text, "Unit", "Requires"), ["a.socket"]);
    let exec = unit_values(text, "Service", "ExecStart");
    assert_eq!(exec.len(), 1);
    assert_eq!(split_command(&exec[0]), ["/bin/x", "--a", "b c", "d"]);
}

/// What the packaged units say.
struct Units {
    listen_stream: String,
    socket_mode: u32,
    socket_group: String,
    exec_start: Vec<String>,
}

fn packaged_units() -> Units {
    let socket = std::fs::read_to_string(repo_file("packaging/systemd/cri-docker.socket"))
        .expect("packaging/systemd/cri-docker.socket");
    let service = std::fs::read_to_string(repo_file("packaging/systemd/cri-docker.service"))
        .expect("packaging/systemd/cri-docker.service");
    let one = |text: &str, section: &str, key: &str| {
        let v = unit_values(text, section, key);
        assert_eq!(v.len(), 1, "{key}= in [{section}]: {v:?}");
        v[0].clone()
    };
    assert_eq!(one(&socket, "Unit", "PartOf"), "cri-docker.service");
    assert_eq!(one(&service, "Unit", "Requires"), "cri-docker.socket");
    assert_eq!(one(&service, "Service", "Type"), "notify");
    let exec_start = split_command(&one(&service, "Service", "ExecStart"));
    assert!(
        exec_start[0].ends_with("/dockershim"),
        "ExecStart runs {:?}",
        exec_start[0]
    );
    assert!(
        exec_start
            .windows(2)
            .any(|w| w == ["--container-runtime-endpoint", "fd://"]),
        "ExecStart must serve the passed socket: {exec_start:?}"
    );
    Units {
        listen_stream: one(&socket, "Socket", "ListenStream"),
        socket_mode: u32::from_str_radix(&one(&socket, "Socket", "SocketMode"), 8)
            .expect("SocketMode is octal"),
        socket_group: one(&socket, "Socket", "SocketGroup"),
        exec_start,
    }
}

/// The id of group `name`, if the host has it.
fn group_id(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: getgrnam(3) with a NUL-terminated name; the result is read at once, before any
    // other call that could reuse its static buffer.
    let gr = unsafe { libc::getgrnam(c.as_ptr()) };
    // SAFETY: a non-null result points at a valid group entry.
    (!gr.is_null()).then(|| unsafe { (*gr).gr_gid })
}

/// The activated dockershim; SIGKILLed if still running when dropped.
struct Activated {
    child: Child,
}

impl Drop for Activated {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What the final clean-up must remove if the test body did not.
#[derive(Default, Clone)]
struct Leftovers {
    sandboxes: Vec<String>,
    pod_uids: Vec<String>,
}

#[tokio::test(flavor = "multi_thread")]
async fn packaged_units_run_dockershim_socket_activated() {
    let Some(tb) = Testbed::get(NAME) else {
        return;
    };
    if !Path::new(SOCKET_ACTIVATE).exists() {
        assert!(
            std::env::var("CRI_TESTBED_REQUIRED").as_deref() != Ok("1"),
            "{NAME}: {SOCKET_ACTIVATE} is missing (Debian's systemd package)"
        );
        eprintln!("SKIPPED {NAME}: {SOCKET_ACTIVATE} is missing (Debian's systemd package)");
        return;
    }
    let leftovers = Arc::new(Mutex::new(Leftovers::default()));
    let outcome = tokio::spawn(tokio::time::timeout(
        Duration::from_secs(400),
        body(tb.clone(), leftovers.clone()),
    ))
    .await;
    let left = leftovers.lock().clone();
    if !left.sandboxes.is_empty() || !left.pod_uids.is_empty() {
        // The activated dockershim is gone (killed on drop): clean up through one of our own.
        if let Ok(mut shim) = InProcessShim::start(&tb).await {
            let ep = shim.config.endpoint.clone();
            if let Ok((mut rt, _)) = clients(&ep).await {
                cleanup_sandboxes(&mut rt, &left.sandboxes).await;
            }
            for uid in &left.pod_uids {
                cleanup_runtime(&ep, uid).await;
            }
            shim.stop().await;
        }
    }
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(_)) => panic!("{NAME}: timed out"),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("{NAME}: {e}"),
    }
}

async fn body(tb: Testbed, leftovers: Arc<Mutex<Leftovers>>) {
    let units = packaged_units();
    let dir = tempfile::Builder::new()
        .prefix("socket-activation-")
        .tempdir()
        .expect("tempdir");
    let runtime_dir = dir.path().join("run");
    std::fs::create_dir_all(&runtime_dir).expect("runtime dir");
    let socket = PathBuf::from(
        units
            .listen_stream
            .replace("%t", &runtime_dir.display().to_string()),
    );
    assert!(socket.starts_with(&runtime_dir), "{}", socket.display());
    let endpoint = format!("unix://{}", socket.display());
    let notify_path = dir.path().join("notify");
    let notify = tokio::net::UnixDatagram::bind(&notify_path).expect("notify socket");
    let log = dir.path().join("dockershim.log");
    let root = dir.path().join("cri-dockerd-root");
    let dockershim = workspace_binary("dockershim")
        .unwrap_or_else(|e| panic!("{e} (`cargo build --workspace`; hack/test.sh does)"));

    // systemd-socket-activate binds ListenStream= and runs ExecStart= on the first connection.
    let mut cmd = Command::new(SOCKET_ACTIVATE);
    cmd.arg("-l")
        .arg(&socket)
        .arg("-E")
        .arg(format!("NOTIFY_SOCKET={}", notify_path.display()))
        .arg("-E")
        .arg("NO_COLOR=1")
        .arg(&dockershim)
        .args(&units.exec_start[1..])
        .arg("--cri-dockerd-root-directory")
        .arg(&root)
        .arg("--pod-infra-container-image")
        .arg(&tb.pause_image)
        .args(tb.dockershim_args())
        .stdin(Stdio::null())
        .stdout(Stdio::from(
            std::fs::File::create(dir.path().join("stdout.log")).expect("stdout log"),
        ))
        .stderr(Stdio::from(std::fs::File::create(&log).expect("log")));
    let mut activated = Activated {
        child: cmd.spawn().expect("spawn systemd-socket-activate"),
    };
    let pid = activated.child.id();
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    // The socket exists before dockershim runs. systemd applies SocketMode=/SocketGroup= as it
    // binds; systemd-socket-activate always makes 0644 root:root, so play systemd's part here,
    // before the first connection starts dockershim (which must then leave them alone).
    let mut waited = 0;
    while !socket.exists() {
        assert!(waited < 200, "no socket after 10 s; log:\n{}", log_text());
        if let Ok(Some(st)) = activated.child.try_wait() {
            panic!("systemd-socket-activate exited: {st}; log:\n{}", log_text());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += 1;
    }
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(units.socket_mode))
        .expect("SocketMode=");
    if let Some(gid) = group_id(&units.socket_group) {
        std::os::unix::fs::chown(&socket, Some(0), Some(gid)).expect("SocketGroup=");
    }
    let meta = std::fs::symlink_metadata(&socket).expect("stat socket");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, units.socket_mode);
    let (inode, gid) = (meta.ino(), meta.gid());

    // The first connection starts dockershim on the passed socket.
    let version = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            if let Ok((mut rt, _)) = clients(&endpoint).await
                && let Ok(v) = rt.version(cri::VersionRequest::default()).await
            {
                return v.into_inner();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no CRI Version within 120 s; log:\n{}", log_text()));
    assert_eq!(version.runtime_name, "docker");
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/exe")).expect("exe"),
        dockershim.canonicalize().expect("canonical path"),
        "the activated process is our dockershim"
    );
    let mut buf = [0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(30), notify.recv(&mut buf))
        .await
        .unwrap_or_else(|_| panic!("no READY=1 within 30 s; log:\n{}", log_text()))
        .expect("recv");
    assert_eq!(&buf[..n], b"READY=1");
    assert!(
        log_text().contains("passed by the service manager"),
        "{}",
        log_text()
    );

    // A pod sandbox and a container through the activated socket.
    let (mut rt, mut img) = clients(&endpoint).await.expect("clients");
    ensure_image(&mut img, &tb.busybox_image)
        .await
        .expect("busybox image");
    let logs = dir.path().join("pod-logs");
    let sconfig = sandbox_config("activated", &logs);
    let sandbox_id = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(sconfig.clone()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}; log:\n{}", log_text()))
        .into_inner()
        .pod_sandbox_id;
    leftovers.lock().sandboxes.push(sandbox_id.clone());
    assert!(
        root.join("sandbox").join(&sandbox_id).exists(),
        "the checkpoint is written under --cri-dockerd-root-directory"
    );
    let container_id = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.clone(),
            config: Some(busybox_container("main", &tb.busybox_image, "sleep 3600")),
            sandbox_config: Some(sconfig.clone()),
        })
        .await
        .expect("CreateContainer")
        .into_inner()
        .container_id;
    rt.start_container(cri::StartContainerRequest {
        container_id: container_id.clone(),
    })
    .await
    .expect("StartContainer");
    let out = rt
        .exec_sync(cri::ExecSyncRequest {
            container_id: container_id.clone(),
            cmd: vec!["echo".into(), "activated".into()],
            timeout: 10,
        })
        .await
        .expect("ExecSync")
        .into_inner();
    assert_eq!(out.exit_code, 0);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "activated");

    // The project's kubelet on the same socket runs a static pod.
    let mut kubelet = Kubelet::new(RuntimeKind::Dockershim, "activated-node");
    let pod_name = unique_name("activated-pod");
    let uid = format!("uid-{pod_name}");
    leftovers.lock().pod_uids.push(uid.clone());
    kubelet.write_manifest(
        "pod.yaml",
        &pod_manifest(&pod_name, &uid, &tb.busybox_image, "sleep 3600", ""),
    );
    kubelet.spawn(
        &tb,
        &["--container-runtime-endpoint".to_string(), endpoint.clone()],
    );
    let port = kubelet.port;
    wait_for(
        "the static pod running on the activated dockershim",
        &kubelet.log,
        || {
            let uid = uid.clone();
            async move { pod(port, &uid).await.as_ref().and_then(running_ids) }
        },
    )
    .await;
    let sandboxes = runtime_sandboxes(&endpoint, &uid).await.unwrap_or_default();
    assert!(
        sandboxes
            .iter()
            .any(|s| root.join("sandbox").join(&s.id).exists()),
        "the kubelet's pod was not made by the activated dockershim (no checkpoint in its root)"
    );
    for e in std::fs::read_dir(&kubelet.manifests)
        .expect("manifests")
        .flatten()
    {
        let _ = std::fs::remove_file(e.path());
    }
    if let Some(mut c) = kubelet.child.take() {
        stop_kubelet(&mut c).await;
    }
    cleanup_runtime(&endpoint, &uid).await;
    assert!(
        runtime_sandboxes(&endpoint, &uid)
            .await
            .unwrap_or_default()
            .is_empty(),
        "the kubelet's pod is still there"
    );
    leftovers.lock().pod_uids.clear();

    cleanup_sandboxes(&mut rt, std::slice::from_ref(&sandbox_id)).await;
    assert!(
        !root.join("sandbox").join(&sandbox_id).exists(),
        "RemovePodSandbox removes the checkpoint"
    );
    leftovers.lock().sandboxes.clear();
    drop(rt);
    drop(img);

    // SIGTERM, as `systemctl stop` sends: a clean exit that leaves systemd's socket alone.
    // SAFETY: kill(2) on the pid of our own child.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    let mut status = None;
    for _ in 0..300 {
        if let Ok(Some(st)) = activated.child.try_wait() {
            status = Some(st);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status =
        status.unwrap_or_else(|| panic!("no exit 15 s after SIGTERM; log:\n{}", log_text()));
    assert!(status.success(), "{status}; log:\n{}", log_text());
    let n = tokio::time::timeout(Duration::from_secs(5), notify.recv(&mut buf))
        .await
        .expect("STOPPING=1")
        .expect("recv");
    assert_eq!(&buf[..n], b"STOPPING=1");
    let meta = std::fs::symlink_metadata(&socket).expect("the socket file must stay");
    assert_eq!(meta.ino(), inode, "the socket file was replaced");
    assert_eq!(
        (meta.permissions().mode() & 0o777, meta.gid()),
        (units.socket_mode, gid),
        "dockershim changed the mode or group of systemd's socket"
    );
    let err = std::os::unix::net::UnixStream::connect(&socket).expect_err("nobody listens now");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    // Docker has nothing left of the pod.
    assert!(
        docker(&tb)
            .inspect_container(
                &sandbox_id,
                None::<bollard::query_parameters::InspectContainerOptions>
            )
            .await
            .is_err(),
        "the sandbox container is still in Docker"
    );
}

/// Waits (10 s at most) until every path exists.
async fn wait_for_sockets(paths: &[&Path], child: &mut Child, log: &Path) {
    for _ in 0..200 {
        if paths.iter().all(|p| p.exists()) {
            return;
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!(
                "systemd-socket-activate exited: {st}; log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("sockets {paths:?} not there after 10 s");
}

/// Two passed sockets named `first` and `second` (fds 3 and 4): `fd://NAME` and `fd://N` pick
/// one, and a name or number that was not passed ends the start with a line listing what was.
#[tokio::test(flavor = "multi_thread")]
async fn passed_sockets_by_name_and_number() {
    let test = "socket_activation::passed_sockets_by_name_and_number";
    if !Path::new(SOCKET_ACTIVATE).exists() {
        assert!(
            std::env::var("CRI_TESTBED_REQUIRED").as_deref() != Ok("1"),
            "{test}: {SOCKET_ACTIVATE} is missing (Debian's systemd package)"
        );
        eprintln!("SKIPPED {test}: {SOCKET_ACTIVATE} is missing (Debian's systemd package)");
        return;
    }
    let dockershim = workspace_binary("dockershim")
        .unwrap_or_else(|e| panic!("{e} (`cargo build --workspace`; hack/test.sh does)"));
    let tb = Testbed::get(test);
    let mut cases: Vec<(&str, Option<&str>)> = vec![
        (
            "fd://9",
            Some(
                "cri socket fd://9: fd 9 was not passed: the passed descriptors are 3 (first), 4 (second)",
            ),
        ),
        (
            "fd://third",
            Some(
                "cri socket fd://third: no passed socket is named \"third\": the passed descriptors are 3 (first), 4 (second)",
            ),
        ),
    ];
    if tb.is_some() {
        cases.push(("fd://second", None));
        cases.push(("fd://4", None));
    }
    for (endpoint, want_error) in cases {
        let dir = tempfile::Builder::new()
            .prefix("socket-activation-fds-")
            .tempdir()
            .expect("tempdir");
        let (first, second) = (
            dir.path().join("first.sock"),
            dir.path().join("second.sock"),
        );
        let log = dir.path().join("dockershim.log");
        let mut cmd = Command::new(SOCKET_ACTIVATE);
        cmd.arg("-l")
            .arg(&first)
            .arg("-l")
            .arg(&second)
            .arg("--fdname=first:second")
            .arg("-E")
            .arg("NO_COLOR=1")
            .arg(&dockershim)
            .arg("--container-runtime-endpoint")
            .arg(endpoint)
            .arg("--cri-dockerd-root-directory")
            .arg(dir.path().join("root"))
            .arg("--network-plugin=no-op");
        if let Some(tb) = &tb {
            cmd.arg("--docker-endpoint")
                .arg(&tb.docker_endpoint)
                .arg("--pod-infra-container-image")
                .arg(&tb.pause_image);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).expect("log")));
        let mut activated = Activated {
            child: cmd.spawn().expect("spawn systemd-socket-activate"),
        };
        wait_for_sockets(&[&first, &second], &mut activated.child, &log).await;
        let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
        match want_error {
            Some(want) => {
                // Any connection starts the service.
                let _conn = std::os::unix::net::UnixStream::connect(&first).expect("connect");
                let mut status = None;
                for _ in 0..200 {
                    if let Ok(Some(st)) = activated.child.try_wait() {
                        status = Some(st);
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let status = status
                    .unwrap_or_else(|| panic!("{endpoint}: still running; log:\n{}", log_text()));
                assert_eq!(status.code(), Some(1), "{endpoint}: {}", log_text());
                let text = log_text();
                let last = text.lines().last().unwrap_or_default();
                assert_eq!(last, format!("dockershim: starting: {want}"), "{endpoint}");
            }
            None => {
                let endpoint_b = format!("unix://{}", second.display());
                let version = tokio::time::timeout(Duration::from_secs(120), async {
                    loop {
                        if let Ok((mut rt, _)) = clients(&endpoint_b).await
                            && let Ok(v) = rt.version(cri::VersionRequest::default()).await
                        {
                            return v.into_inner();
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                })
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "{endpoint}: no Version on the second socket; log:\n{}",
                        log_text()
                    )
                });
                assert_eq!(version.runtime_name, "docker");
                assert!(
                    log_text().contains(&format!(
                        "{endpoint} ({}, passed by the service manager)",
                        second.display()
                    )),
                    "{endpoint}: {}",
                    log_text()
                );
                // SAFETY: kill(2) on the pid of our own child.
                unsafe { libc::kill(activated.child.id() as libc::pid_t, libc::SIGTERM) };
                let mut exited = false;
                for _ in 0..300 {
                    if let Ok(Some(st)) = activated.child.try_wait() {
                        assert!(st.success(), "{endpoint}: {st}; log:\n{}", log_text());
                        exited = true;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                assert!(
                    exited,
                    "{endpoint}: no exit after SIGTERM; log:\n{}",
                    log_text()
                );
                assert!(first.exists() && second.exists(), "the passed sockets stay");
            }
        }
    }
}
