//! Real gRPC clients from the package registries against the `dockershim` binary, with
//! containerd (a Go server) as the control: Go gRPC from Debian dialing the socket path the way
//! the Go kubelet 1.26 does (`integration/clients/go-cri-client`), and grpcio from PyPI with
//! default options (`integration/clients/python/cri_client.py`). Both send the socket path as
//! the HTTP/2 `:authority` (raw and percent-encoded), which tonic alone refuses.

use std::path::{Path, PathBuf};
use std::process::Command;

use integration::runtimes::ShimProcess;
use integration::testbed::Testbed;

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients")
}

/// Builds the Go program `integration/clients/<name>` with Debian's Go (and its gRPC: GOPATH
/// mode, offline) into `out`.
pub(crate) fn build_go_program(name: &str, out: &Path) -> PathBuf {
    let bin = out.join(name);
    let res = Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(clients_dir().join(name))
        .env("GOPATH", "/usr/share/gocode")
        .env("GO111MODULE", "off")
        .env("GOFLAGS", "")
        .env("GOPROXY", "off")
        .env("GOCACHE", out.join("gocache"))
        .output()
        .expect("run go (golang-go, installed by hack/testbed.sh)");
    assert!(
        res.status.success(),
        "go build failed:\n{}",
        String::from_utf8_lossy(&res.stderr)
    );
    bin
}

/// Runs a client and returns its lines; fails the test with its output if it failed.
fn run_client(what: &str, cmd: &mut Command) -> Vec<String> {
    let res = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let stdout = String::from_utf8_lossy(&res.stdout).into_owned();
    assert!(
        res.status.success(),
        "{what} failed ({}):\n{stdout}{}",
        res.status,
        String::from_utf8_lossy(&res.stderr)
    );
    stdout.lines().map(str::to_string).collect()
}

fn expect_runtime(what: &str, lines: &[String], runtime_name: &str, calls: &[&str]) {
    let version = format!("OK Version runtime_name={runtime_name} runtime_api_version=v1");
    assert!(lines.contains(&version), "{what}: {lines:?}");
    for call in calls {
        assert!(
            lines.iter().any(|l| l.starts_with(&format!("OK {call} "))),
            "{what}: no successful {call}: {lines:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_and_python_grpc_clients_are_served() {
    let Some(tb) = Testbed::get("go_and_python_grpc_clients_are_served") else {
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("grpc-clients-")
        .tempdir()
        .unwrap();
    let go_client = build_go_program("go-cri-client", dir.path());
    let python_client = clients_dir().join("python").join("cri_client.py");
    let mut shim = ShimProcess::start(&tb, dir.path())
        .await
        .expect("dockershim");
    for (endpoint, runtime_name) in [
        (shim.endpoint.clone(), "docker"),
        (tb.containerd_endpoint.clone(), "containerd"),
    ] {
        let what = format!("Go gRPC client on {runtime_name}");
        let lines = run_client(&what, Command::new(&go_client).arg(&endpoint));
        expect_runtime(
            &what,
            &lines,
            runtime_name,
            &["Status", "ListPodSandbox", "ListImages"],
        );
        let what = format!("grpcio client on {runtime_name}");
        let lines = run_client(
            &what,
            Command::new("python3").arg(&python_client).arg(&endpoint),
        );
        expect_runtime(
            &what,
            &lines,
            runtime_name,
            &["ListPodSandbox", "ListImages"],
        );
    }
    shim.terminate();
}
