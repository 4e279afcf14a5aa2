//! End-to-end tests of the unix-socket transport: a tiny RuntimeService that
//! only implements `Version`, served on a temp-dir socket.

mod common;

use common::VersionOnly;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cri_proto::runtime::v1::runtime_service_client::RuntimeServiceClient;
use cri_proto::runtime::v1::{StatusRequest, VersionRequest};
use cri_proto::{MAX_MSG_SIZE, TransportError};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::transport::Server;

struct Running {
    path: PathBuf,
    token: CancellationToken,
    task: JoinHandle<Result<(), TransportError>>,
}

async fn start(path: &Path) -> Running {
    let listener = cri_proto::bind_unix(path).await.expect("bind");
    let token = CancellationToken::new();
    let router = Server::builder().add_service(cri_proto::runtime_server(VersionOnly));
    let task = tokio::spawn(cri_proto::serve_with_listener(
        router,
        listener,
        token.clone(),
    ));
    Running {
        path: path.to_path_buf(),
        token,
        task,
    }
}

impl Running {
    fn endpoint(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    async fn stop(self) {
        self.token.cancel();
        self.task.await.expect("join").expect("serve result");
    }
}

async fn client(endpoint: &str) -> RuntimeServiceClient<tonic::transport::Channel> {
    let ch = cri_proto::connect(endpoint, Duration::from_secs(5))
        .await
        .expect("connect");
    cri_proto::runtime_client(ch)
}

#[tokio::test]
async fn version_round_trip_and_unimplemented_status() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(&dir.path().join("sub/dir/cri.sock")).await;
    let mut c = client(&srv.endpoint()).await;

    let resp = c
        .version(VersionRequest {
            version: "v1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.runtime_name, "test");
    assert_eq!(resp.runtime_version, "v1");
    assert_eq!(resp.runtime_api_version, "v1");

    let err = c
        .status(StatusRequest { verbose: false })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);

    srv.stop().await;
}

#[tokio::test]
async fn socket_mode_is_0660_and_shutdown_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(&dir.path().join("cri.sock")).await;
    let mode = std::fs::metadata(&srv.path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660, "mode {mode:o}");
    let path = srv.path.clone();
    srv.stop().await;
    assert!(!path.exists(), "socket file left behind");
}

#[tokio::test]
async fn serve_unix_with_endpoint_string_and_token() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.sock");
    let endpoint = format!("unix://{}", path.display());
    let token = CancellationToken::new();
    let router = Server::builder().add_service(cri_proto::runtime_server(VersionOnly));
    let task = tokio::spawn({
        let endpoint = endpoint.clone();
        let token = token.clone();
        async move { cri_proto::serve_unix(router, &endpoint, token).await }
    });
    // Wait until the socket answers.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut c = loop {
        match cri_proto::connect(&endpoint, Duration::from_millis(200)).await {
            Ok(ch) => break cri_proto::runtime_client(ch),
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("server never came up: {e}"),
        }
    };
    c.version(VersionRequest::default()).await.unwrap();
    token.cancel();
    task.await.unwrap().unwrap();
    assert!(!path.exists());
}

#[tokio::test]
async fn stale_socket_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists(), "dropped std listener leaves the file");

    let srv = start(&path).await;
    let mut c = client(&srv.endpoint()).await;
    c.version(VersionRequest::default()).await.unwrap();
    srv.stop().await;
}

#[tokio::test]
async fn live_socket_is_addr_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.sock");
    let srv = start(&path).await;

    match cri_proto::bind_unix(&path).await {
        Err(TransportError::AddrInUse { path: p }) => assert_eq!(p, path),
        other => panic!("expected AddrInUse, got {other:?}"),
    }
    let router = Server::builder().add_service(cri_proto::runtime_server(VersionOnly));
    let err = cri_proto::serve_unix(router, path.to_str().unwrap(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::AddrInUse { .. }), "{err}");

    // The first server is untouched.
    let mut c = client(&srv.endpoint()).await;
    c.version(VersionRequest::default()).await.unwrap();
    srv.stop().await;
}

#[tokio::test]
async fn regular_file_is_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-a-socket");
    std::fs::write(&path, b"keep me").unwrap();
    let err = cri_proto::bind_unix(&path).await.unwrap_err();
    assert!(matches!(err, TransportError::NotASocket { .. }), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
}

#[tokio::test]
async fn connect_to_missing_socket_fails_fast_naming_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.sock");
    let started = Instant::now();
    let err = cri_proto::connect(
        &format!("unix://{}", path.display()),
        Duration::from_secs(3),
    )
    .await
    .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    let msg = err.to_string();
    assert!(msg.contains(path.to_str().unwrap()), "{msg}");
    match err {
        TransportError::Connect { source, .. } => {
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound, "{source}")
        }
        other => panic!("expected Connect error, got {other:?}"),
    }
}

#[tokio::test]
async fn connect_rejects_tcp_endpoint() {
    let err = cri_proto::connect("tcp://127.0.0.1:1", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        matches!(err, TransportError::InvalidEndpoint { .. }),
        "{err}"
    );
}

#[tokio::test]
async fn message_size_limit_is_16_mib() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(&dir.path().join("big.sock")).await;
    let mut c = client(&srv.endpoint()).await;

    // Just under the limit, both ways (the server echoes the string back).
    let under = "a".repeat(MAX_MSG_SIZE - 1024);
    let resp = c
        .version(VersionRequest {
            version: under.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.runtime_version.len(), under.len());
    drop(under);

    // Over the limit: refused by our client before sending.
    let over = "a".repeat(MAX_MSG_SIZE + 1024);
    let err = c
        .version(VersionRequest {
            version: over.clone(),
        })
        .await
        .unwrap_err();
    // tonic reports the local encode failure as a reset stream (Internal) or
    // OutOfRange depending on timing; either way the call must fail.
    assert!(
        matches!(err.code(), Code::Internal | Code::OutOfRange),
        "{err}"
    );

    // Over the limit with a client that would send it: refused by the server.
    let ch = cri_proto::connect(&srv.endpoint(), Duration::from_secs(5))
        .await
        .unwrap();
    let mut raw = RuntimeServiceClient::new(ch).max_encoding_message_size(4 * MAX_MSG_SIZE);
    let err = raw
        .version(VersionRequest { version: over })
        .await
        .unwrap_err();
    // As grpc-go servers answer (cri_proto::transport::OversizeAsResourceExhausted).
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    assert!(
        err.message()
            .starts_with("grpc: received message larger than max ("),
        "{err}"
    );

    srv.stop().await;
}
