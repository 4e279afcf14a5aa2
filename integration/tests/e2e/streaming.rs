//! Streaming end to end on the real runtimes: the `[streaming]` conformance cases (exec with
//! and without a TTY and stdin, attach, port-forward into a CNI pod and a host-network pod, each
//! over SPDY and WebSocket) pass against containerd's Go streaming server — proving our client
//! interoperates — and against our dockershim. Plus what only dockershim lets us set up: an
//! expired token is refused, the session cap answers 503, an idle session is closed, and a
//! not-running container gets FailedPrecondition.

use std::sync::Arc;
use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use dockershim::streaming::tokens::CachedRequest;
use dockershim::streaming::{self, StreamingConfig};
use integration::conformance::{self, Ctx, Outcome, Settings, report};
use integration::fixtures::{busybox_container, cleanup_sandboxes, ensure_image, sandbox_config};
use integration::require_testbed;
use integration::runtimes::{RuntimeKind, TestRuntime};
use integration::streaming::{self as client, ClientError, StdioRequest, Transport};
use tokio_util::sync::CancellationToken;

async fn streaming_cases(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("streaming[{}]", kind.name()));
    let rt = TestRuntime::new(kind, &tb).await.expect("runtime");
    let logs = tempfile::tempdir().expect("tempdir");
    let ctx = Ctx {
        runtime: rt.runtime.clone(),
        image: rt.image.clone(),
        settings: Settings {
            busybox_image: tb.busybox_image.clone(),
            registry: tb.registry.clone(),
            auth_registry: None,
            log_root: logs.path().to_path_buf(),
        },
    };
    let focus = regex::Regex::new(r"^\[streaming\]").expect("regex");
    let cases = conformance::select(conformance::cases::all(), Some(&focus), None);
    assert!(cases.len() >= 6, "streaming cases registered");
    let reports = conformance::run(ctx, cases, 3, Duration::from_secs(180)).await;
    println!("{}", report::table(&rt.endpoint, &reports));
    let bad: Vec<_> = reports
        .iter()
        .filter(|r| r.outcome != Outcome::Pass)
        .collect();
    assert!(bad.is_empty(), "{}: {bad:#?}", kind.name());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_cases_pass_on_containerd() {
    streaming_cases(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_cases_pass_on_dockershim() {
    streaming_cases(RuntimeKind::Dockershim).await;
}

/// A streaming server whose tokens expire at once refuses them (404), over both transports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_refused() {
    let tb = require_testbed!("an_expired_token_is_refused");
    let docker = Arc::new(
        dockershim::BollardDocker::connect(&tb.docker_endpoint, Duration::from_secs(30))
            .await
            .expect("docker"),
    );
    let mut cfg = StreamingConfig::new("127.0.0.1:0");
    cfg.token_ttl = Duration::ZERO;
    let stop = CancellationToken::new();
    let handle = streaming::start(&cfg, docker, stop.clone())
        .await
        .expect("streaming server");
    assert!(handle.addr.ip().is_loopback());
    for t in [Transport::Spdy, Transport::WebSocket] {
        let url = handle
            .url_for(CachedRequest::Exec(cri::ExecRequest {
                container_id: "whatever".into(),
                cmd: vec!["true".into()],
                stdout: true,
                ..Default::default()
            }))
            .expect("url");
        let req = StdioRequest {
            stdout: true,
            ..Default::default()
        };
        match client::connect(&url, t, req, None).await {
            Err(ClientError::Refused { status: 404, .. }) => {}
            Err(e) => panic!("{}: expired token refused oddly: {e}", t.name()),
            Ok(_) => panic!("{}: an expired token was accepted", t.name()),
        }
    }
    stop.cancel();
}

/// With no session slots left, a valid token gets 503 (and is used up all the same).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_cap_refuses_with_503() {
    let tb = require_testbed!("the_session_cap_refuses_with_503");
    let docker = Arc::new(
        dockershim::BollardDocker::connect(&tb.docker_endpoint, Duration::from_secs(30))
            .await
            .expect("docker"),
    );
    let mut cfg = StreamingConfig::new("127.0.0.1:0");
    cfg.limits.max_sessions = 0;
    let stop = CancellationToken::new();
    let handle = streaming::start(&cfg, docker, stop.clone())
        .await
        .expect("streaming server");
    let req = StdioRequest {
        stdout: true,
        ..Default::default()
    };
    for t in [Transport::Spdy, Transport::WebSocket] {
        let url = handle
            .url_for(CachedRequest::Exec(cri::ExecRequest {
                container_id: "whatever".into(),
                cmd: vec!["true".into()],
                stdout: true,
                ..Default::default()
            }))
            .expect("url");
        match client::connect(&url, t, req, None).await {
            Err(ClientError::Refused { status: 503, .. }) => {}
            Err(e) => panic!("{}: refused oddly: {e}", t.name()),
            Ok(_) => panic!("{}: a session beyond the cap was accepted", t.name()),
        }
        match client::connect(&url, t, req, None).await {
            Err(ClientError::Refused { status: 404, .. }) => {}
            Err(e) => panic!("{}: reuse refused oddly: {e}", t.name()),
            Ok(_) => panic!("{}: a token was used twice", t.name()),
        }
    }
    stop.cancel();
}

/// A session with no traffic either way is closed after the idle timeout (the command keeps
/// running: the session, not the process, is what times out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_is_closed() {
    use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
    let tb = require_testbed!("an_idle_session_is_closed");
    let docker = Arc::new(
        dockershim::BollardDocker::connect(&tb.docker_endpoint, Duration::from_secs(30))
            .await
            .expect("docker"),
    );
    let name = integration::fixtures::unique_name("streaming-idle");
    let id = docker
        .client()
        .create_container(
            Some(CreateContainerOptions {
                name: Some(name),
                platform: String::new(),
            }),
            bollard::models::ContainerCreateBody {
                image: Some(tb.busybox_image.clone()),
                cmd: Some(vec!["sleep".into(), "3600".into()]),
                ..Default::default()
            },
        )
        .await
        .expect("create")
        .id;
    docker
        .client()
        .start_container(&id, None)
        .await
        .expect("start");
    let mut cfg = StreamingConfig::new("127.0.0.1:0");
    cfg.limits.idle_timeout = Duration::from_millis(300);
    let stop = CancellationToken::new();
    let handle = streaming::start(&cfg, docker.clone(), stop.clone())
        .await
        .expect("streaming server");
    let req = StdioRequest {
        stdout: true,
        ..Default::default()
    };
    for t in [Transport::Spdy, Transport::WebSocket] {
        let url = handle
            .url_for(CachedRequest::Exec(cri::ExecRequest {
                container_id: id.clone(),
                cmd: vec!["sleep".into(), "3600".into()],
                stdout: true,
                ..Default::default()
            }))
            .expect("url");
        let s = client::connect(&url, t, req, None).await.expect("connect");
        let r = s
            .wait(Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{}: an idle session stayed open: {e}", t.name()));
        assert_eq!(
            r.exit_code,
            None,
            "{}: no exit status for a timed-out session",
            t.name()
        );
    }
    stop.cancel();
    let _ = docker
        .client()
        .remove_container(
            &id,
            Some(RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        )
        .await;
}

/// dockershim answers FailedPrecondition for a container that is not running — also right
/// after it was stopped, or killed behind dockershim's back, once it had been seen running (a
/// running container is remembered: a second Exec asks Docker nothing) — and the streaming
/// server listens on loopback by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_refuses_a_container_that_is_not_running() {
    let tb = require_testbed!("dockershim_refuses_a_container_that_is_not_running");
    // dockershim talks to Docker through a tap, to see which inspects it makes.
    let tap = crate::dockershim_support::DockerTap::start(&tb).await;
    let mut tapped = tb.clone();
    tapped.docker_endpoint = tap.endpoint.clone();
    let mut rt = TestRuntime::new(RuntimeKind::Dockershim, &tapped)
        .await
        .expect("runtime");
    let logs = tempfile::tempdir().expect("tempdir");
    ensure_image(&mut rt.image, &tb.busybox_image)
        .await
        .expect("image");
    let scfg = sandbox_config("st-notrunning", logs.path());
    let sb = rt
        .runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(scfg.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("sandbox")
        .into_inner()
        .pod_sandbox_id;
    let result = async {
        let c = rt
            .runtime
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sb.clone(),
                config: Some(busybox_container("c", &tb.busybox_image, "sleep 3600")),
                sandbox_config: Some(scfg.clone()),
            })
            .await
            .expect("create")
            .into_inner()
            .container_id;
        let err = rt
            .runtime
            .exec(cri::ExecRequest {
                container_id: c.clone(),
                cmd: vec!["true".into()],
                stdout: true,
                ..Default::default()
            })
            .await
            .expect_err("exec in a created container");
        assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
        let err = rt
            .runtime
            .attach(cri::AttachRequest {
                container_id: c,
                stdout: true,
                ..Default::default()
            })
            .await
            .expect_err("attach to a created container");
        assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
        let err = rt
            .runtime
            .exec(cri::ExecRequest {
                container_id: "c".into(),
                cmd: vec!["true".into()],
                stdout: true,
                tty: true,
                stderr: true,
                ..Default::default()
            })
            .await
            .expect_err("tty with stderr");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        let url = rt
            .runtime
            .port_forward(cri::PortForwardRequest {
                pod_sandbox_id: sb.clone(),
                port: vec![80],
            })
            .await
            .expect("port forward url")
            .into_inner()
            .url;
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");

        // A running container is remembered between Execs (no inspect each time); stopping
        // it through CRI, or killing it behind dockershim's back, is noticed.
        let exec_true = |id: String| cri::ExecRequest {
            container_id: id,
            cmd: vec!["true".into()],
            stdout: true,
            ..Default::default()
        };
        let mut started = Vec::new();
        for name in ["stopped", "killed"] {
            let id = rt
                .runtime
                .create_container(cri::CreateContainerRequest {
                    pod_sandbox_id: sb.clone(),
                    config: Some(busybox_container(name, &tb.busybox_image, "sleep 3600")),
                    sandbox_config: Some(scfg.clone()),
                })
                .await
                .expect("create")
                .into_inner()
                .container_id;
            rt.runtime
                .start_container(cri::StartContainerRequest {
                    container_id: id.clone(),
                })
                .await
                .expect("start");
            // Docker sees the first Exec's inspect; a later Exec is answered without one.
            // Any change to one of dockershim's containers (other tests share this Docker)
            // empties the cache, so a few Execs may inspect again before two in a row do not.
            let inspect = format!("/containers/{id}/json");
            let mut inspects = vec![tap.count(&inspect)];
            for _ in 0..10 {
                rt.runtime
                    .exec(exec_true(id.clone()))
                    .await
                    .expect("exec in a running container");
                inspects.push(tap.count(&inspect));
                let n = inspects.len();
                if n >= 3 && inspects[n - 1] == inspects[n - 2] {
                    break;
                }
            }
            assert!(
                inspects[1] > inspects[0],
                "the first Exec inspects {id}: {inspects:?}"
            );
            assert!(
                inspects.windows(2).skip(1).any(|w| w[0] == w[1]),
                "a second Exec is answered from the cache: {inspects:?}"
            );
            started.push(id);
        }
        rt.runtime
            .stop_container(cri::StopContainerRequest {
                container_id: started[0].clone(),
                timeout: 1,
            })
            .await
            .expect("stop");
        let err = rt
            .runtime
            .exec(exec_true(started[0].clone()))
            .await
            .expect_err("exec right after StopContainer");
        assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
        crate::dockershim_support::docker(&tb)
            .kill_container(
                &started[1],
                None::<bollard::query_parameters::KillContainerOptions>,
            )
            .await
            .expect("docker kill");
        // Docker's die event reaches dockershim a moment later. Wait at most half the cache's
        // safety-net age: a refusal only after the entry expired would mean the event was
        // not heard.
        let mut refused = None;
        let deadline = tokio::time::Instant::now() + dockershim::cache::LIST_MAX_AGE / 2;
        while tokio::time::Instant::now() < deadline {
            match rt.runtime.exec(exec_true(started[1].clone())).await {
                Err(e) => {
                    refused = Some(e.code());
                    break;
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        assert_eq!(
            refused,
            Some(tonic::Code::FailedPrecondition),
            "exec after a kill behind dockershim's back"
        );
    };
    result.await;
    cleanup_sandboxes(&mut rt.runtime, &[sb]).await;
}
