//! The conformance suite passes against containerd's CRI plugin (the reference: evidence that the
//! cases encode real CRI semantics) and against our dockershim, and it can fail: a runtime that
//! answers wrongly (a wrapper that drops one label from PodSandboxStatus) makes the relevant case
//! fail with a clear reason; a runtime answering Unimplemented to everything passes no case; a
//! runtime that dies mid-run is blamed once, on the case during which it died, and the rest are
//! summarized as not run (the last two need no test bed: in-process fake servers).

use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use cri_proto::runtime::v1::runtime_service_client::RuntimeServiceClient;
use integration::conformance::{self, Ctx, Outcome, Settings, report};
use integration::require_testbed;
use integration::runtimes::{RuntimeKind, TestRuntime};
use integration::testbed::Testbed;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

fn settings(tb: &Testbed, log_root: &std::path::Path) -> Settings {
    Settings {
        busybox_image: tb.busybox_image.clone(),
        registry: tb.registry.clone(),
        auth_registry: Some((
            tb.auth_registry.clone(),
            tb.auth_user.clone(),
            tb.auth_password.clone(),
        )),
        log_root: log_root.to_path_buf(),
    }
}

async fn full_pass(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("conformance[{}]", kind.name()));
    let rt = TestRuntime::new(kind, &tb).await.expect("runtime");
    let logs = tempfile::tempdir().expect("tempdir");
    let ctx = Ctx {
        runtime: rt.runtime.clone(),
        image: rt.image.clone(),
        settings: settings(&tb, logs.path()),
    };
    let reports =
        conformance::run(ctx, conformance::cases::all(), 4, Duration::from_secs(120)).await;
    let failed: Vec<_> = reports
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Fail(_)))
        .collect();
    // The failures first: a CI log keeps the head of a long output, not its tail.
    for r in &failed {
        if let Outcome::Fail(why) = &r.outcome {
            println!("FAILED on {}: {}: {why}", kind.name(), r.name);
        }
    }
    println!("{}", report::table(&rt.endpoint, &reports));
    assert!(
        failed.is_empty(),
        "failed cases on {}: {failed:#?}",
        kind.name()
    );
    // Skips are allowed only for the optional RPCs the runtime declares Unimplemented and for
    // what the test bed's probe says this host cannot do (privileged containers here).
    for r in &reports {
        if let Outcome::Skip(why) = &r.outcome {
            assert!(
                why.contains("which is optional") || why.contains("this host cannot"),
                "{} skipped: {why}",
                r.name
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_containerd() {
    full_pass(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_dockershim() {
    full_pass(RuntimeKind::Dockershim).await;
}

/// Forwards the sandbox RPCs to a real runtime but drops one label from PodSandboxStatus.
struct LabelDropper {
    inner: RuntimeServiceClient<Channel>,
}

#[tonic::async_trait]
impl cri_proto::RuntimeService for LabelDropper {
    async fn run_pod_sandbox(
        &self,
        req: Request<cri::RunPodSandboxRequest>,
    ) -> Result<Response<cri::RunPodSandboxResponse>, Status> {
        self.inner.clone().run_pod_sandbox(req.into_inner()).await
    }
    async fn pod_sandbox_status(
        &self,
        req: Request<cri::PodSandboxStatusRequest>,
    ) -> Result<Response<cri::PodSandboxStatusResponse>, Status> {
        let mut resp = self
            .inner
            .clone()
            .pod_sandbox_status(req.into_inner())
            .await?
            .into_inner();
        if let Some(st) = resp.status.as_mut() {
            st.labels.remove("pod");
        }
        Ok(Response::new(resp))
    }
    async fn stop_pod_sandbox(
        &self,
        req: Request<cri::StopPodSandboxRequest>,
    ) -> Result<Response<cri::StopPodSandboxResponse>, Status> {
        self.inner.clone().stop_pod_sandbox(req.into_inner()).await
    }
    async fn remove_pod_sandbox(
        &self,
        req: Request<cri::RemovePodSandboxRequest>,
    ) -> Result<Response<cri::RemovePodSandboxResponse>, Status> {
        self.inner
            .clone()
            .remove_pod_sandbox(req.into_inner())
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_runtime_fails_the_relevant_case() {
    let tb = require_testbed!("a_wrong_runtime_fails_the_relevant_case");
    let rt = TestRuntime::new(RuntimeKind::Dockershim, &tb)
        .await
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("wrong.sock");
    let listener = cri_proto::bind_unix(&sock).await.expect("bind");
    let stop = CancellationToken::new();
    let router =
        tonic::transport::Server::builder().add_service(cri_proto::runtime_server(LabelDropper {
            inner: rt.runtime.clone(),
        }));
    let server = tokio::spawn(cri_proto::serve_with_listener(
        router,
        listener,
        stop.clone(),
    ));
    let ch = cri_proto::connect(
        &format!("unix://{}", sock.display()),
        Duration::from_secs(5),
    )
    .await
    .expect("connect");
    let ctx = Ctx {
        runtime: cri_proto::runtime_client(ch),
        image: rt.image.clone(),
        settings: settings(&tb, dir.path()),
    };
    let focus = regex::Regex::new(r"^\[sandbox\] run, status").expect("regex");
    let cases = conformance::select(conformance::cases::all(), Some(&focus), None);
    assert_eq!(cases.len(), 1);
    let reports = conformance::run(ctx, cases, 1, Duration::from_secs(60)).await;
    stop.cancel();
    let _ = server.await;
    match &reports[0].outcome {
        Outcome::Fail(why) => assert!(why.contains("labels"), "reason names the field: {why}"),
        other => panic!("a runtime dropping a label passed the case: {other:?}"),
    }
}

/// Answers `Unimplemented` to every RPC (the generated servers' default stubs).
struct ImplementsNothing;

#[tonic::async_trait]
impl cri_proto::RuntimeService for ImplementsNothing {}

#[tonic::async_trait]
impl cri_proto::ImageService for ImplementsNothing {}

/// Serves `runtime` and `image` on `sock` until `stop`.
fn serve_fake<R: cri_proto::RuntimeService, I: cri_proto::ImageService>(
    sock: &std::path::Path,
    runtime: R,
    image: I,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let listener = std::os::unix::net::UnixListener::bind(sock).expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let listener = tokio::net::UnixListener::from_std(listener).expect("listener");
    let router = tonic::transport::Server::builder()
        .add_service(cri_proto::runtime_server(runtime))
        .add_service(cri_proto::image_server(image));
    tokio::spawn(async move {
        let _ = cri_proto::serve_with_listener(router, listener, stop).await;
    })
}

async fn fake_ctx(sock: &std::path::Path, log_root: &std::path::Path) -> Ctx {
    let ch = cri_proto::connect(
        &format!("unix://{}", sock.display()),
        Duration::from_secs(5),
    )
    .await
    .expect("connect");
    Ctx {
        runtime: cri_proto::runtime_client(ch.clone()),
        image: cri_proto::image_client(ch),
        settings: Settings {
            busybox_image: "127.0.0.1:5000/busybox:latest".into(),
            registry: "127.0.0.1:5000".into(),
            auth_registry: Some((
                "127.0.0.1:5001".into(),
                "testuser".into(),
                "testpassword".into(),
            )),
            log_root: log_root.to_path_buf(),
        },
    }
}

/// A runtime that implements nothing cannot pass: `Unimplemented` skips a case only for the
/// optional RPCs (conformance::OPTIONAL_RPCS); everything else fails. Needs no test bed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_implementing_nothing_fails_the_suite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("nothing.sock");
    let stop = CancellationToken::new();
    let server = serve_fake(&sock, ImplementsNothing, ImplementsNothing, stop.clone());
    let ctx = fake_ctx(&sock, dir.path()).await;
    let all = conformance::cases::all();
    let n = all.len();
    let reports = conformance::run(ctx, all, 8, Duration::from_secs(30)).await;
    stop.cancel();
    let _ = server.await;
    println!("{}", report::table("implements-nothing", &reports));
    let (passed, failed, skipped) = report::counts(&reports);
    assert_eq!(
        passed, 0,
        "a case passed against a runtime implementing nothing"
    );
    assert_eq!(report::not_run(&reports), 0, "the runtime never died");
    for r in &reports {
        if let Outcome::Skip(why) = &r.outcome {
            assert!(
                why.contains("which is optional") || why.contains("this host cannot"),
                "{} skipped for a reason other than an optional RPC: {why}",
                r.name
            );
        }
    }
    // Only the case whose first call is an optional RPC (GetContainerEvents) and host-limited
    // ones may skip; every other case fails.
    assert!(skipped <= 3, "{skipped} skipped");
    assert_eq!(failed + skipped, n);
}

/// Serves Version; its Status kills the runtime (the test's proxy drops every connection and
/// the socket), as a runtime crashing on a request would.
struct DiesOnStatus {
    kill: CancellationToken,
}

#[tonic::async_trait]
impl cri_proto::RuntimeService for DiesOnStatus {
    async fn version(
        &self,
        _req: Request<cri::VersionRequest>,
    ) -> Result<Response<cri::VersionResponse>, Status> {
        Ok(Response::new(cri::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "dies-on-status".into(),
            runtime_version: "1.0.0".into(),
            runtime_api_version: "v1".into(),
        }))
    }
    async fn status(
        &self,
        _req: Request<cri::StatusRequest>,
    ) -> Result<Response<cri::StatusResponse>, Status> {
        self.kill.cancel();
        tokio::time::sleep(Duration::from_secs(2)).await;
        Err(Status::internal("unreachable: the connection is gone"))
    }
}

/// A byte-level proxy from `listen` to `target` that, once `kill` fires, drops every connection
/// and its socket: the runtime behind it is gone for good.
async fn killable_proxy(
    listen: std::path::PathBuf,
    target: std::path::PathBuf,
    kill: CancellationToken,
) {
    let listener = tokio::net::UnixListener::bind(&listen).expect("bind proxy");
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = kill.cancelled() => break,
            acc = listener.accept() => {
                let Ok((mut a, _)) = acc else { continue };
                let target = target.clone();
                conns.spawn(async move {
                    if let Ok(mut b) = tokio::net::UnixStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
                    }
                });
            }
        }
    }
    // The socket goes first: once a client sees its connection die, nothing answers any more.
    drop(listener);
    let _ = std::fs::remove_file(&listen);
    conns.abort_all();
    while conns.join_next().await.is_some() {}
}

/// A runtime dying mid-run is reported once, by the case during which it died; the cases after
/// it are summarized as not run instead of failing one by one with "connection refused".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_dying_mid_run_is_reported_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let inner = dir.path().join("inner.sock");
    let outer = dir.path().join("outer.sock");
    let stop = CancellationToken::new();
    let kill = CancellationToken::new();
    let server = serve_fake(
        &inner,
        DiesOnStatus { kill: kill.clone() },
        ImplementsNothing,
        stop.clone(),
    );
    let proxy = tokio::spawn(killable_proxy(outer.clone(), inner, kill.clone()));
    for _ in 0..100 {
        if outer.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ctx = fake_ctx(&outer, dir.path()).await;
    let all = conformance::cases::all();
    let n = all.len();
    assert!(
        all[0].name.starts_with("[runtime] Version"),
        "{}",
        all[0].name
    );
    assert!(
        all[1].name.starts_with("[runtime] Status"),
        "{}",
        all[1].name
    );
    // One at a time, in order: Version passes, Status kills the runtime.
    let reports = conformance::run(ctx, all, 1, Duration::from_secs(30)).await;
    stop.cancel();
    let _ = server.await;
    let _ = proxy.await;
    let table = report::table("dies-on-status", &reports);
    println!("{table}");
    let outcome = |prefix: &str| {
        reports
            .iter()
            .find(|r| r.name.starts_with(prefix))
            .map(|r| r.outcome.clone())
            .expect("case")
    };
    assert_eq!(outcome("[runtime] Version"), Outcome::Pass);
    match outcome("[runtime] Status") {
        Outcome::Fail(why) => assert!(why.contains("stopped answering during this case"), "{why}"),
        other => panic!("the case that killed the runtime: {other:?}"),
    }
    assert_eq!(report::counts(&reports), (1, 1, 0), "{table}");
    assert_eq!(report::not_run(&reports), n - 2, "{table}");
    assert_eq!(table.matches("runtime unavailable").count(), 1, "{table}");
    assert!(
        table.contains(&format!("{} cases not run", n - 2)),
        "{table}"
    );
}
