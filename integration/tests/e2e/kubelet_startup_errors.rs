//! The `kubelet` binary refuses to start on a configuration upstream's refuses: an unusable
//! `--kubeconfig` (missing, not a kubeconfig, no current context, a context whose cluster is
//! missing, a cluster without a server), a feature gate 1.26 does not know (`--feature-gates` or
//! the config file's `featureGates`), out-of-range values (`--read-only-port`, `--port`,
//! `--max-pods`) and a conflicting combination (`shutdownGracePeriod` with the
//! `GracefulNodeShutdown` gate off). Each exits with status 1 before anything is started (its
//! root directory is never created) and prints exactly one line on stderr naming the flag or
//! field and why; a malformed command line exits 2, also with one line.
//!
//! Needs only the binary (`cargo build --workspace` first; hack/test.sh does), not the test bed.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::kubelet_support::kubelet_binary;

/// Runs the kubelet with `args` (its root directory in `dir`): exit code and stderr. A kubelet
/// that starts instead of refusing is killed after 20 s and reported as exit `None`.
fn run(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(kubelet_binary())
        .arg("--root-dir")
        .arg(dir.join("root"))
        .arg("--hostname-override")
        .arg("startup-errors")
        .args([
            "--port",
            "0",
            "--healthz-port",
            "0",
            "--read-only-port",
            "0",
        ])
        .args(args)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kubelet");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut killed = false;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            killed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let code = if killed { None } else { out.status.code() };
    (code, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Asserts the refusal: `status`, one stderr line equal to `want` (or starting with it when
/// `want` ends with `…`), and no root directory.
fn refused(dir: &Path, args: &[&str], status: i32, want: &str) {
    let (code, stderr) = run(dir, args);
    assert_eq!(
        code,
        Some(status),
        "{args:?}: want exit {status}, stderr:\n{stderr}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: want one line, got:\n{stderr}");
    match want.strip_suffix('…') {
        Some(prefix) => assert!(lines[0].starts_with(prefix), "{args:?}: {:?}", lines[0]),
        None => assert_eq!(lines[0], want, "{args:?}"),
    }
    assert!(
        !dir.join("root").exists(),
        "{args:?}: refused, yet it started (created its root directory)"
    );
}

#[test]
fn unknown_feature_gates_exit_with_upstreams_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    refused(
        d,
        &["--feature-gates", "EventedPLEG=true,Foo=true"],
        1,
        "kubelet: invalid value for --feature-gates: unrecognized feature gate: Foo",
    );
    let config = d.join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates:\n  GracefulNodeShutdown: true\n  Foo: true\n",
    )
    .expect("write");
    let c = config.to_str().expect("utf8");
    refused(
        d,
        &["--config", c],
        1,
        &format!(
            "kubelet: invalid kubelet config file {config:?}: featureGates: unrecognized feature gate: Foo"
        ),
    );
}

#[test]
fn out_of_range_and_conflicting_values_exit_naming_field_and_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    refused(
        d,
        &["--read-only-port", "70000"],
        1,
        "kubelet: invalid configuration: readOnlyPort (--read-only-port) 70000 must be between 0 and 65535, inclusive",
    );
    refused(
        d,
        &["--port", "-1"],
        1,
        "kubelet: invalid configuration: port (--port) -1 must be between 0 and 65535, inclusive",
    );
    refused(
        d,
        &["--max-pods", "-3"],
        1,
        "kubelet: invalid configuration: maxPods (--max-pods) -3 must not be a negative number",
    );
    let config = d.join("config.yaml");
    std::fs::write(
        &config,
        "shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\nfeatureGates:\n  GracefulNodeShutdown: false\n",
    )
    .expect("write");
    refused(
        d,
        &["--config", config.to_str().expect("utf8")],
        1,
        "kubelet: invalid configuration: specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown",
    );
    std::fs::write(
        &config,
        "shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 30s\n",
    )
    .expect("write");
    refused(
        d,
        &["--config", config.to_str().expect("utf8")],
        1,
        &format!(
            "kubelet: invalid kubelet config file {config:?}: shutdownGracePeriodCriticalPods must be <= shutdownGracePeriod"
        ),
    );
    // A malformed command line: clap's usage error in one line, status 2.
    refused(
        d,
        &["--no-such-flag"],
        2,
        "kubelet: unexpected argument '--no-such-flag' found",
    );
}

#[test]
fn an_unusable_kubeconfig_exits_instead_of_running_standalone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let kc = d.join("kubelet.conf");
    let k = kc.to_str().expect("utf8");
    let flag = format!("kubelet: invalid value for --kubeconfig: {kc:?}");
    refused(
        d,
        &["--kubeconfig", k],
        1,
        &format!("{flag}: cannot read it: No such file or directory (os error 2)"),
    );
    // kubeadm's pair before `kubeadm init`: TLS bootstrap is tried, and the bootstrap
    // kubeconfig is missing too (upstream: "unable to load bootstrap kubeconfig").
    refused(
        d,
        &[
            "--kubeconfig",
            k,
            "--bootstrap-kubeconfig",
            "/nonexistent/bootstrap.conf",
        ],
        1,
        "kubelet: failed to run Kubelet: TLS bootstrap from \"/nonexistent/bootstrap.conf\": /nonexistent/bootstrap.conf: …",
    );
    let ctx = "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context:\n    cluster: k\n    user: u\nusers:\n- name: u\n  user: {}\n";
    for (text, reason) in [
        ("\u{0}\u{1}binary junk {{{", "not a kubeconfig: …"),
        (
            "apiVersion: v1\nkind: Config\nclusters: []\n",
            "no current-context is set",
        ),
        (
            &*format!("{ctx}clusters: []\n"),
            "failed to load the cluster of context: k",
        ),
        (
            &*format!("{ctx}clusters:\n- name: k\n  cluster: {{}}\n"),
            "cluster url is missing on selected cluster",
        ),
    ] {
        std::fs::write(&kc, text).expect("write");
        refused(d, &["--kubeconfig", k], 1, &format!("{flag}: {reason}"));
    }
}

#[test]
fn a_webhook_without_an_api_server_exits_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    refused(
        d,
        &["--authentication-token-webhook"],
        1,
        "kubelet: no client provided, cannot use webhook authentication (it needs the API server: give --kubeconfig, or turn it off with --authentication-token-webhook=false)",
    );
    refused(
        d,
        &["--authorization-mode", "Webhook"],
        1,
        "kubelet: no client provided, cannot use webhook authorization (it needs the API server: give --kubeconfig, or turn it off with --authorization-mode=AlwaysAllow)",
    );
    refused(
        d,
        &["--authorization-mode", "RBAC"],
        1,
        "kubelet: invalid value for --authorization-mode: unknown authorization mode RBAC",
    );
    // A config file's defaults are upstream's v1beta1 ones: both webhooks on.
    let config = d.join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
    )
    .expect("write");
    refused(
        d,
        &["--config", config.to_str().expect("utf8")],
        1,
        "kubelet: no client provided, cannot use webhook authentication …",
    );
}
