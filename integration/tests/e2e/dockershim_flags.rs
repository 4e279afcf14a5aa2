//! The `dockershim` binary's command line (cri-dockerd 0.3's): a bad value of any flag exits
//! non-zero before anything starts, with exactly one line on stderr naming the flag, the value
//! and the reason; a failed start (Docker unreachable, socket in use, fd:// without a passed
//! socket) ends with one line holding the whole cause chain, and leaves no socket file behind.
//! On the test bed, cri-dockerd's `--streaming-bind-addr 127.0.0.1` form (an address without a
//! port, which used to fail with an empty cause) starts and serves.
//!
//! The binary is `dockershim` of the same cargo profile: `cargo build --workspace` must run
//! first (hack/test.sh does).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use integration::runtimes::{ShimProcess, clients, workspace_binary};
use integration::testbed::Testbed;

fn dockershim_binary() -> PathBuf {
    workspace_binary("dockershim")
        .unwrap_or_else(|e| panic!("{e} (`cargo build --workspace`; hack/test.sh does)"))
}

/// Runs dockershim with `args` after a base that keeps it away from the host's defaults (its
/// socket, root and Docker endpoint in `dir`; later flags win, as with pflag): exit code and
/// stderr. Killed after 30 s.
fn run(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let sock = format!("unix://{}", dir.join("cri.sock").display());
    let root = dir.join("root");
    let docker = format!("unix://{}", dir.join("no-docker.sock").display());
    let mut child = Command::new(dockershim_binary())
        .arg("--container-runtime-endpoint")
        .arg(&sock)
        .arg("--cri-dockerd-root-directory")
        .arg(&root)
        .arg("--docker-endpoint")
        .arg(&docker)
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("LISTEN_PID")
        .env_remove("LISTEN_FDS")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dockershim");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("dockershim-flags-")
        .tempdir()
        .expect("tempdir")
}

#[test]
fn bad_flag_values_exit_with_one_line_naming_flag_value_and_reason() {
    let dir = tempdir();
    // (arguments, flag named in the line, value named in the line, part of the reason)
    let cases: &[(&[&str], &str, &str, &str)] = &[
        (
            &["--container-runtime-endpoint", "tcp://127.0.0.1:3735"],
            "--container-runtime-endpoint",
            "tcp://127.0.0.1:3735",
            "tcp endpoints are not supported",
        ),
        (
            &["--container-runtime-endpoint", "run/x.sock"],
            "--container-runtime-endpoint",
            "run/x.sock",
            "absolute",
        ),
        (
            &["--container-runtime-endpoint", "fd://2"],
            "--container-runtime-endpoint",
            "fd://2",
            "not a passed socket",
        ),
        (
            &["--cri-dockerd-root-directory", ""],
            "--cri-dockerd-root-directory",
            "\"\"",
            "must not be empty",
        ),
        (
            &["--root-directory", " "],
            "--cri-dockerd-root-directory",
            "\" \"",
            "must not be empty",
        ),
        (
            &["--docker-endpoint", "ssh://me@docker-host"],
            "--docker-endpoint",
            "ssh://me@docker-host",
            "ssh endpoints are not supported",
        ),
        (
            &["--docker-endpoint", "tcp://docker-host"],
            "--docker-endpoint",
            "tcp://docker-host",
            "host:port",
        ),
        (
            &["--pod-infra-container-image", ""],
            "--pod-infra-container-image",
            "\"\"",
            "image reference",
        ),
        (
            &["--network-plugin", "flannel"],
            "--network-plugin",
            "flannel",
            "unknown network plugin",
        ),
        (
            &["--network-plugin", "kubenet"],
            "--network-plugin",
            "kubenet",
            "kubenet is not implemented",
        ),
        (
            &["--network-plugin-mtu", "1500b"],
            "--network-plugin-mtu",
            "1500b",
            "not a whole number",
        ),
        (
            &["--network-plugin-mtu", "100"],
            "--network-plugin-mtu",
            "100",
            "from 576 to 65535",
        ),
        (
            &["--network-plugin", "cni", "--cni-bin-dir", ","],
            "--cni-bin-dir",
            "\",\"",
            "at least one directory",
        ),
        (
            &["--cni-conf-dir", ""],
            "--cni-conf-dir",
            "\"\"",
            "needs this directory",
        ),
        (
            &["--cni-cache-dir", ""],
            "--cni-cache-dir",
            "\"\"",
            "needs this directory",
        ),
        (
            &["--hairpin-mode", "on"],
            "--hairpin-mode",
            "on",
            "promiscuous-bridge, hairpin-veth, none",
        ),
        (
            &["--ipv6-dual-stack=maybe"],
            "--ipv6-dual-stack",
            "maybe",
            "must be true or false",
        ),
        (
            &["--pod-cidr", "10.244.0.0/40"],
            "--pod-cidr",
            "10.244.0.0/40",
            "prefix length",
        ),
        (
            &["--pod-cidr", "10.244.0.0/16,fd00::/64"],
            "--pod-cidr",
            "10.244.0.0/16,fd00::/64",
            "--ipv6-dual-stack=true",
        ),
        (
            &["--image-pull-progress-deadline", "60"],
            "--image-pull-progress-deadline",
            "60",
            "missing unit",
        ),
        (
            &["--runtime-request-timeout", "2d"],
            "--runtime-request-timeout",
            "2d",
            "unknown unit",
        ),
        (
            &["--runtime-request-timeout", "-1m"],
            "--runtime-request-timeout",
            "-1m",
            "must not be negative",
        ),
        (
            &["--runtime-cgroups", "system.slice"],
            "--runtime-cgroups",
            "system.slice",
            "absolute cgroup name",
        ),
        (
            &["--streaming-bind-addr", "localhost"],
            "--streaming-bind-addr",
            "localhost",
            "host names are not accepted",
        ),
        (
            &["--streaming-bind-addr", "127.0.0.1:70000"],
            "--streaming-bind-addr",
            "127.0.0.1:70000",
            "from 0 to 65535",
        ),
        (
            &["--log-level", "verbose"],
            "--log-level",
            "verbose",
            "unknown log level",
        ),
        (
            &["--streaming-connection-idle-timeout", "10"],
            "--streaming-connection-idle-timeout",
            "10",
            "missing unit",
        ),
        (
            &["--streaming-max-sessions", "many"],
            "--streaming-max-sessions",
            "many",
            "whole number",
        ),
        (
            &["--sandbox-oom-score-adj", "-2000"],
            "--sandbox-oom-score-adj",
            "-2000",
            "from -1000 to 1000",
        ),
        (&["-v", "loud"], "--v", "loud", "invalid digit"),
        (
            &["--no-such-flag"],
            "--no-such-flag",
            "--no-such-flag",
            "unexpected argument",
        ),
        (
            &["--docker-endpoint"],
            "--docker-endpoint",
            "--docker-endpoint",
            "a value is required",
        ),
    ];
    let mut failures = Vec::new();
    for (args, flag, value, reason) in cases {
        let (code, stderr) = run(dir.path(), args);
        let lines: Vec<&str> = stderr.lines().collect();
        let ok = code == Some(2)
            && lines.len() == 1
            && stderr.ends_with('\n')
            && lines[0].starts_with("dockershim: ")
            && lines[0].contains(flag)
            && lines[0].contains(value)
            && lines[0].contains(reason);
        if !ok {
            failures.push(format!(
                "{args:?}: exit {code:?}, stderr {stderr:?} (want exit 2 and one line with {flag}, {value}, {reason:?})"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        !dir.path().join("cri.sock").exists() && !dir.path().join("root").exists(),
        "a bad command line must not create anything"
    );
}

#[test]
fn help_and_version_exit_zero() {
    let out = Command::new(dockershim_binary())
        .arg("--help")
        .output()
        .expect("run --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--container-runtime-endpoint",
        "--cri-dockerd-root-directory",
        "--docker-endpoint",
        "--pod-infra-container-image",
        "--network-plugin",
        "--network-plugin-mtu",
        "--cni-bin-dir",
        "--cni-conf-dir",
        "--cni-cache-dir",
        "--hairpin-mode",
        "--ipv6-dual-stack",
        "--pod-cidr",
        "--image-pull-progress-deadline",
        "--runtime-request-timeout",
        "--runtime-cgroups",
        "--streaming-bind-addr",
        "--log-level",
        "--version",
        "--buildinfo",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
    let out = Command::new(dockershim_binary())
        .arg("--version")
        .output()
        .expect("run --version");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("dockershim "));
    let out = Command::new(dockershim_binary())
        .arg("--buildinfo")
        .output()
        .expect("run --buildinfo");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Version: "));
}

/// The last stderr line of a failed start: `dockershim: starting: ...`, a whole chain.
fn start_failure(code: Option<i32>, stderr: &str) -> String {
    let last = stderr.lines().last().unwrap_or_default().to_string();
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert!(
        last.starts_with("dockershim: starting: "),
        "last line {last:?} of {stderr}"
    );
    assert!(
        !last.trim_end().ends_with(':') && last.len() > "dockershim: starting: ".len() + 10,
        "the cause chain is empty: {last:?}"
    );
    last
}

#[test]
fn start_failures_print_the_whole_cause_on_one_line() {
    // Docker unreachable: says so and names the socket; the CRI socket bound first is removed.
    let dir = tempdir();
    let (code, stderr) = run(dir.path(), &["--network-plugin=no-op"]);
    let line = start_failure(code, &stderr);
    assert!(
        line.contains("docker: cannot reach the Docker Engine")
            && line.contains(&dir.path().join("no-docker.sock").display().to_string()),
        "{line}"
    );
    assert!(
        !dir.path().join("cri.sock").exists(),
        "the CRI socket of a failed start must be removed"
    );

    // The socket is served by someone else: refused before Docker is even asked.
    let dir = tempdir();
    let sock = dir.path().join("cri.sock");
    let _live = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
    let (code, stderr) = run(dir.path(), &[]);
    let line = start_failure(code, &stderr);
    assert_eq!(
        line,
        format!(
            "dockershim: starting: cri socket: socket {} is already in use by a live server",
            sock.display()
        )
    );
    assert!(sock.exists(), "the live server's socket must be left alone");

    // fd:// without socket activation.
    let dir = tempdir();
    let (code, stderr) = run(dir.path(), &["--container-runtime-endpoint", "fd://"]);
    let line = start_failure(code, &stderr);
    assert!(
        line.starts_with(
            "dockershim: starting: cri socket fd://: no sockets found via socket activation"
        ),
        "{line}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn streaming_bind_addr_without_port_starts() {
    let Some(tb) = Testbed::get("dockershim_flags::streaming_bind_addr_without_port_starts") else {
        return;
    };
    let dir = tempdir();
    let mut args: Vec<std::ffi::OsString> = vec![
        "--pod-infra-container-image".into(),
        tb.pause_image.clone().into(),
        "--streaming-bind-addr".into(),
        "127.0.0.1".into(),
        "--runtime-request-timeout".into(),
        "1m30s".into(),
        "--image-pull-progress-deadline".into(),
        "2m".into(),
        "--log-level".into(),
        "debug".into(),
    ];
    args.extend(tb.dockershim_args());
    let mut shim = ShimProcess::spawn(&dockershim_binary(), dir.path(), args)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{e:#}; log:\n{}",
                std::fs::read_to_string(dir.path().join("dockershim.log")).unwrap_or_default()
            )
        });
    let (mut rt, _) = clients(&shim.endpoint).await.expect("connect");
    let v = rt
        .version(cri_proto::runtime::v1::VersionRequest::default())
        .await
        .expect("Version")
        .into_inner();
    assert_eq!(v.runtime_name, "docker");
    shim.terminate();
    let log = std::fs::read_to_string(dir.path().join("dockershim.log")).unwrap_or_default();
    assert!(
        log.contains("streaming server listening") && log.contains("127.0.0.1:"),
        "{log}"
    );
}
