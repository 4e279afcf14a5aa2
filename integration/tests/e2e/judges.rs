//! Outside judges against the `dockershim` binary: the released Go tools of the Kubernetes 1.26
//! era, built by hand from their public sources (never committed; see docs/testing.md,
//! "Judging with crictl and critest"). They are found through environment variables and the
//! tests say loudly when one is absent instead of failing:
//! - `CRICTL`: crictl v1.26.1 drives a pod through dockershim (version, pull, runp, create,
//!   start, exec, logs, stats, stopp, rmp).
//! - `CRITEST`: critest v1.26.1 as published runs against containerd and dockershim; every
//!   spec containerd passes must pass on dockershim, except those of the host's documented
//!   limit (`privileged` on Docker); the differences are printed spec by spec. The sandboxes
//!   critest leaves behind (a RunPodSandbox that fails after creating the sandbox container,
//!   which upstream's dockershim leaves to the kubelet's garbage collector) are removed after
//!   each run, and none may remain in the test bed's Docker.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use integration::runtimes::ShimProcess;
use integration::testbed::Testbed;

/// The judge named by `var`, or `None` with a loud message.
fn judge(var: &str, test: &str) -> Option<PathBuf> {
    match std::env::var_os(var).map(PathBuf::from) {
        Some(p) if p.is_file() => Some(p),
        Some(p) => panic!("{test}: {var}={} is not a file", p.display()),
        None => {
            eprintln!(
                "SKIPPED {test}: {var} is not set (an outside judge built by hand from its \
                 public sources; see docs/testing.md)"
            );
            None
        }
    }
}

fn crictl(bin: &Path, endpoint: &str, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(["--runtime-endpoint", endpoint, "--image-endpoint", endpoint])
        .args(["--timeout", "60s"])
        .args(args)
        .output()
        .expect("run crictl");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "crictl {args:?} failed ({}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crictl_drives_dockershim() {
    const TEST: &str = "crictl_drives_dockershim";
    let Some(bin) = judge("CRICTL", TEST) else {
        return;
    };
    let Some(tb) = Testbed::get(TEST) else {
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("crictl-")
        .tempdir()
        .unwrap();
    let shim = ShimProcess::start(&tb, dir.path())
        .await
        .expect("dockershim");
    let ep = shim.endpoint.clone();
    let uniq = format!(
        "{}-{}",
        std::process::id(),
        dir.path().display().to_string().len()
    );
    let marker = format!("started-{uniq}");
    let pod = serde_json::json!({
        "metadata": {"name": format!("crictl-{uniq}"), "namespace": "judges", "uid": format!("uid-{uniq}"), "attempt": 0},
        "log_directory": dir.path().join("logs").display().to_string(),
        "linux": {}
    });
    let ctr = serde_json::json!({
        "metadata": {"name": "main"},
        "image": {"image": tb.busybox_image},
        "command": ["sh", "-c", format!("echo {marker}; exec sleep 3600")],
        "log_path": "main/0.log",
        "linux": {}
    });
    let pod_file = dir.path().join("pod.json");
    let ctr_file = dir.path().join("ctr.json");
    std::fs::write(&pod_file, pod.to_string()).unwrap();
    std::fs::write(&ctr_file, ctr.to_string()).unwrap();
    std::fs::create_dir_all(dir.path().join("logs/main")).unwrap();
    let (pod_path, ctr_path) = (pod_file.to_str().unwrap(), ctr_file.to_str().unwrap());

    let version = crictl(&bin, &ep, &["version"]);
    assert!(version.contains("RuntimeName:  docker"), "{version}");
    crictl(&bin, &ep, &["pull", &tb.busybox_image]);
    let pod_id = crictl(&bin, &ep, &["runp", pod_path]).trim().to_string();
    let ctr_id = crictl(&bin, &ep, &["create", &pod_id, ctr_path, pod_path])
        .trim()
        .to_string();
    crictl(&bin, &ep, &["start", &ctr_id]);
    let exec = crictl(&bin, &ep, &["exec", &ctr_id, "echo", "hello-from-exec"]);
    assert_eq!(exec.trim(), "hello-from-exec");
    let mut logs = String::new();
    for _ in 0..50 {
        logs = crictl(&bin, &ep, &["logs", &ctr_id]);
        if logs.contains(&marker) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(logs.contains(&marker), "logs: {logs:?}");
    let stats = crictl(&bin, &ep, &["stats", "-o", "json", &ctr_id]);
    let stats: serde_json::Value = serde_json::from_str(&stats).expect("stats JSON");
    assert_eq!(
        stats["stats"][0]["attributes"]["id"].as_str(),
        Some(ctr_id.as_str()),
        "{stats}"
    );
    assert!(
        stats["stats"][0]["memory"]["workingSetBytes"]["value"].is_string(),
        "{stats}"
    );
    crictl(&bin, &ep, &["stopp", &pod_id]);
    crictl(&bin, &ep, &["rmp", &pod_id]);
    let left = crictl(&bin, &ep, &["pods", "-q"]);
    assert!(!left.contains(&pod_id), "pod still listed: {left}");
}

/// Spec name -> passed, from critest's JUnit report(s) in `dir`.
fn junit_results(dir: &Path) -> BTreeMap<String, Option<bool>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("report dir").flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("xml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for case in text.split("<testcase").skip(1) {
            let Some(name) = case
                .split_once("name=\"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(n, _)| {
                    n.replace("&#34;", "\"")
                        .replace("&#39;", "'")
                        .replace("&amp;", "&")
                })
            else {
                continue;
            };
            let body = case.split("</testcase>").next().unwrap_or("");
            let verdict = if body.contains("<skipped") {
                None
            } else {
                Some(!body.contains("<failure") && !body.contains("<error"))
            };
            out.insert(name, verdict);
        }
    }
    out
}

fn run_critest(bin: &Path, endpoint: &str, report: &Path) {
    std::fs::create_dir_all(report).unwrap();
    // critest v1.26.1 accepts -report-dir but writes nothing there; ginkgo's own JUnit works.
    // No -parallel: above 1 it needs a ginkgo binary, and its port specs share host ports.
    let mut cmd = Command::new(bin);
    cmd.args(["--runtime-endpoint", endpoint, "--image-endpoint", endpoint])
        .arg(format!(
            "-ginkgo.junit-report={}",
            report.join("junit.xml").display()
        ))
        .arg("-ginkgo.no-color")
        .current_dir(report);
    if let Ok(extra) = std::env::var("CRITEST_ARGS") {
        cmd.args(extra.split_whitespace());
    }
    let out = cmd.output().expect("run critest");
    std::fs::write(
        report.join("critest.log"),
        [out.stdout, out.stderr].concat(),
    )
    .unwrap();
}

/// critest's container images (constants in cri-tools' pkg/framework and pkg/validate), which
/// `images/critest-images.sh` pushes to the test bed's registry under the same paths.
const CRITEST_CONTAINER_IMAGES: [&str; 6] = [
    "registry.k8s.io/e2e-test-images/busybox:1.29-2",
    "registry.k8s.io/e2e-test-images/nginx:1.14-2",
    "registry.k8s.io/e2e-test-images/httpd:2.4.39-4",
    "registry.k8s.io/e2e-test-images/nonewprivs:1.3",
    "gcr.io/k8s-staging-cri-tools/hostnet-nginx-amd64:latest",
    "gcr.io/k8s-staging-cri-tools/test-image-predefined-group:latest",
];

/// Builds and pushes critest's images (idempotent), and gives Docker the container images under
/// their upstream names: containerd pulls those registries from the local one (the test bed's
/// mirrors), Docker cannot be told to.
fn prepare_critest_images(tb: &Testbed) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../images/critest-images.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .expect("run critest-images.sh");
    assert!(
        out.status.success(),
        "{} failed:\n{}{}",
        script.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let docker = |args: &[&str]| {
        let out = Command::new("/usr/bin/docker")
            .arg("-H")
            .arg(&tb.docker_endpoint)
            .args(args)
            .output()
            .expect("run docker");
        assert!(
            out.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    for image in CRITEST_CONTAINER_IMAGES {
        let (_, path) = image.split_once('/').expect("registry/path");
        let local = format!("{}/{path}", tb.registry);
        docker(&["pull", "-q", &local]);
        docker(&["tag", &local, image]);
        // Only the upstream name stays: critest compares an image's tags exactly.
        docker(&["rmi", &local]);
    }
}

/// Does gcr.io reach this host's loopback (where the local registry can stand in for it)? Docker
/// pulls critest's Image Manager images from gcr.io itself; without that, those specs cannot
/// pass on Docker here, for any Docker-based runtime.
fn gcr_is_local() -> bool {
    use std::net::ToSocketAddrs;
    ("gcr.io", 80)
        .to_socket_addrs()
        .map(|mut addrs| addrs.all(|a| a.ip().is_loopback()))
        .unwrap_or(false)
}

/// (passed, ran) over the specs of a [`junit_results`] map: its `[It]` entries. Ginkgo's JUnit
/// also has suite nodes (`[BeforeSuite]`, `[ReportAfterSuite]` …), which are not specs.
fn spec_counts(results: &BTreeMap<String, Option<bool>>) -> (usize, usize) {
    let specs = || results.iter().filter(|(name, _)| name.starts_with("[It]"));
    (
        specs().filter(|(_, v)| **v == Some(true)).count(),
        specs().filter(|(_, v)| v.is_some()).count(),
    )
}

/// critest names every pod's namespace with this prefix (`framework.DefaultNamespacePrefix`).
const CRITEST_NAMESPACE_PREFIX: &str = "cri-test-namespace";

/// Ids of the sandboxes of critest's pods that the runtime at `endpoint` lists.
async fn critest_sandboxes(endpoint: &str) -> Vec<String> {
    use cri_proto::runtime::v1 as cri;
    let (mut rt, _) = integration::runtimes::clients(endpoint)
        .await
        .expect("CRI clients");
    let list = rt
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .expect("ListPodSandbox")
        .into_inner();
    list.items
        .into_iter()
        .filter(|s| {
            s.metadata
                .as_ref()
                .is_some_and(|m| m.namespace.starts_with(CRITEST_NAMESPACE_PREFIX))
        })
        .map(|s| s.id)
        .collect()
}

/// Removes the sandboxes critest left on the runtime at `endpoint`: a spec whose
/// RunPodSandbox fails after the sandbox container was created gets no id to remove, and
/// dockershim, like upstream's, leaves that container to the kubelet's garbage collector.
/// Returns how many there were.
async fn remove_critest_leftovers(endpoint: &str) -> usize {
    let ids = critest_sandboxes(endpoint).await;
    let (mut rt, _) = integration::runtimes::clients(endpoint)
        .await
        .expect("CRI clients");
    integration::fixtures::cleanup_sandboxes(&mut rt, &ids).await;
    ids.len()
}

/// Names of the test bed Docker's containers (all states) of critest's pods.
async fn critest_docker_containers(tb: &Testbed) -> Vec<String> {
    let opts = bollard::query_parameters::ListContainersOptions {
        all: true,
        ..Default::default()
    };
    crate::dockershim_support::docker(tb)
        .list_containers(Some(opts))
        .await
        .expect("list the test bed Docker's containers")
        .into_iter()
        .flat_map(|c| c.names.unwrap_or_default())
        .filter(|n| n.contains(CRITEST_NAMESPACE_PREFIX))
        .collect()
}

/// Specs that need a privileged container (or all capabilities, which Docker applies the same
/// way), which Docker cannot run on these hosts (the test bed probes it): the security context
/// ones, and mount propagation, whose setup runs a privileged pod.
fn needs_privileged(spec: &str) -> bool {
    let s = spec.to_ascii_lowercase();
    (s.contains("privileged") && !s.contains("unprivileged"))
        || s.contains("adding all capabilities")
        || s.contains("mount propagation")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn critest_passes_on_dockershim_what_it_passes_on_containerd() {
    const TEST: &str = "critest_passes_on_dockershim_what_it_passes_on_containerd";
    let Some(bin) = judge("CRITEST", TEST) else {
        return;
    };
    let Some(tb) = Testbed::get(TEST) else {
        return;
    };
    prepare_critest_images(&tb);
    let dir = tempfile::Builder::new()
        .prefix("critest-")
        .tempdir()
        .unwrap();
    let shim = ShimProcess::start(&tb, dir.path())
        .await
        .expect("dockershim");
    let (ctd_report, shim_report) = (dir.path().join("containerd"), dir.path().join("dockershim"));
    let (b, ep) = (bin.clone(), tb.containerd_endpoint.clone());
    let r = ctd_report.clone();
    tokio::task::spawn_blocking(move || run_critest(&b, &ep, &r))
        .await
        .unwrap();
    let left = remove_critest_leftovers(&tb.containerd_endpoint).await;
    eprintln!("critest left {left} sandboxes on containerd (removed)");
    let (b, ep) = (bin.clone(), shim.endpoint.clone());
    let r = shim_report.clone();
    tokio::task::spawn_blocking(move || run_critest(&b, &ep, &r))
        .await
        .unwrap();
    let left = remove_critest_leftovers(&shim.endpoint).await;
    eprintln!("critest left {left} sandboxes on dockershim (removed)");
    let still = critest_sandboxes(&shim.endpoint).await;
    assert!(
        still.is_empty(),
        "critest's sandboxes not removed: {still:?}"
    );
    let in_docker = critest_docker_containers(&tb).await;
    assert!(
        in_docker.is_empty(),
        "critest's containers still in Docker after clean-up: {in_docker:#?}"
    );
    let ctd = junit_results(&ctd_report);
    let ours = junit_results(&shim_report);
    assert!(
        !ctd.is_empty(),
        "no JUnit from critest on containerd in {}",
        ctd_report.display()
    );
    let ((ctd_passed, ctd_ran), (our_passed, our_ran)) = (spec_counts(&ctd), spec_counts(&ours));
    eprintln!(
        "critest v1.26.1: containerd passed {ctd_passed} of {ctd_ran} specs, dockershim passed \
         {our_passed} of {our_ran}"
    );
    let gcr_local = gcr_is_local();
    let mut regressions = Vec::new();
    for (spec, verdict) in &ctd {
        let mine = ours.get(spec).copied().flatten();
        if mine == *verdict {
            continue;
        }
        let excuse = if !tb.can_run_privileged && needs_privileged(spec) {
            Some("host limit: privileged containers fail on Docker here")
        } else if spec.contains("Image Manager") && !gcr_local {
            Some("Docker pulls gcr.io itself, which is unreachable here")
        } else {
            None
        };
        let excused = excuse.is_some();
        eprintln!(
            "  differs: {spec}: containerd {verdict:?}, dockershim {mine:?}{}",
            excuse.map(|e| format!(" ({e})")).unwrap_or_default()
        );
        if *verdict == Some(true) && mine != Some(true) && !excused {
            regressions.push(spec.clone());
        }
    }
    assert!(
        regressions.is_empty(),
        "specs containerd passes and dockershim does not ({}): {regressions:#?}\nlogs: {}",
        regressions.len(),
        shim_report.join("critest.log").display()
    );
}

#[test]
fn spec_counts_count_specs_not_suite_nodes() {
    let dir = tempfile::Builder::new().prefix("junit-").tempdir().unwrap();
    // The shape of ginkgo v2's JUnit (critest v1.26.1): suite nodes are testcases too.
    let xml = r#"<testsuites><testsuite name="CRI validation">
<testcase name="[BeforeSuite]" classname="CRI validation" status="passed" time="0.1"></testcase>
<testcase name="[It] [k8s.io] Image Manager public image with tag should be pulled and removed [Conformance]" classname="CRI validation" status="passed" time="1"></testcase>
<testcase name="[It] [k8s.io] Security Context bucket runtime should support Privileged is true" classname="CRI validation" status="failed" time="1"><failure message="unable to apply caps" type="failed">x</failure></testcase>
<testcase name="[It] [k8s.io] Runtime benchmark should benchmark" classname="CRI validation" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
<testcase name="[ReportAfterSuite] Autogenerated ReportAfterSuite for --junit-report" classname="CRI validation" status="passed" time="0"></testcase>
</testsuite></testsuites>"#;
    std::fs::write(dir.path().join("junit.xml"), xml).unwrap();
    let results = junit_results(dir.path());
    assert_eq!(results.len(), 5);
    assert_eq!(spec_counts(&results), (1, 2));
}
