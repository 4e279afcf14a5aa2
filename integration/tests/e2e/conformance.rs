//! The conformance suite passes against containerd's CRI plugin (the reference: evidence that the
//! cases encode real CRI semantics) and against our dockershim, and it can fail: a runtime that
//! answers wrongly (a wrapper that drops one label from PodSandboxStatus) makes the relevant case
//! fail with a clear reason.

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
    println!("{}", report::table(&rt.endpoint, &reports));
    let failed: Vec<_> = reports
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Fail(_)))
        .collect();
    assert!(
        failed.is_empty(),
        "failed cases on {}: {failed:#?}",
        kind.name()
    );
    // Skips are allowed only for what the runtime declares Unimplemented and for what the test
    // bed's probe says this host cannot do (privileged containers here).
    for r in &reports {
        if let Outcome::Skip(why) = &r.outcome {
            assert!(
                why.contains("Unimplemented") || why.contains("this host cannot"),
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
