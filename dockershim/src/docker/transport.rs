//! The connection to the Docker Engine's unix socket: HTTP keep-alive, as cri-dockerd's Go
//! client has, with every kept connection forgotten as soon as the socket file is no longer
//! the one they were made to.
//!
//! bollard's own unix client keeps no idle connection (`pool_max_idle_per_host(0)`): every call
//! connects anew, a connect and an accept with a new goroutine in dockerd each time. Keeping
//! connections has one hazard, found by `kubelet_runtime_restarts::dockerd_restart_*`: a
//! stopping dockerd closes its listener first (Go unlinks the socket file with it) but goes on
//! serving the connections it has until it exits, which with containers to stop takes seconds.
//! Calls on kept connections would still create and start containers on the Engine that is
//! going away, while every new connection is refused. So before each request the socket file
//! is looked at (one `stat`): when it is gone or is another file (a new Engine made it) the
//! kept connections are dropped and the request connects anew, failing as bollard's own
//! client would while no Engine listens.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error as BollardError;
use bytes::Bytes;
use http_body_util::{Either, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use parking_lot::Mutex;

/// How long an idle connection to the Engine's socket is kept for the next request.
const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);
/// How many idle connections to the Engine are kept at most. Every ended stream (a container's
/// log follower when it exits, a pull) hands its connection back: without a bound, 110 pods
/// torn down would leave 110 idle connections, each with its buffers here and a goroutine in
/// dockerd. The kubelet's bursts rarely have more calls in flight than this.
pub(crate) const MAX_IDLE_CONNECTIONS: usize = 8;

/// The request body bollard hands a custom transport (its `BodyType`).
type Body = Either<
    Full<Bytes>,
    StreamBody<Pin<Box<dyn futures::Stream<Item = Result<Frame<Bytes>, std::io::Error>> + Send>>>,
>;
type Pool = Client<hyperlocal::UnixConnector, Body>;

/// Which file a socket path names: device and inode.
type SocketFile = (u64, u64);

fn socket_file(path: &Path) -> Option<SocketFile> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn new_pool() -> Pool {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(IDLE_CONNECTION_TIMEOUT)
        .pool_max_idle_per_host(MAX_IDLE_CONNECTIONS)
        .pool_timer(TokioTimer::new())
        .build(hyperlocal::UnixConnector)
}

/// Kept connections to one socket path, and the socket file they were made to.
struct KeptConnections {
    path: PathBuf,
    /// The pool and the socket file seen when it was made. A request holds the lock only to
    /// compare and clone.
    pool: Mutex<(Option<SocketFile>, Pool)>,
}

impl KeptConnections {
    /// The pool for the next request: the kept one while the socket file is the same, else a
    /// new, empty one (the old one's idle connections close when it drops; streams in flight
    /// on them end with the Engine that serves them).
    fn pool(&self) -> Pool {
        let now = socket_file(&self.path);
        let mut kept = self.pool.lock();
        if kept.0 != now {
            if kept.0.is_some() {
                tracing::debug!(
                    socket = %self.path.display(),
                    "the Engine's socket changed: dropping the connections kept to it"
                );
            }
            *kept = (now, new_pool());
        }
        kept.1.clone()
    }
}

/// bollard on the Engine's unix socket at `path`, keeping connections between requests while
/// the socket file stays the same. Upgraded (hijacked) connections, attach and exec streams,
/// never return to the pool; a connection the Engine closed is dropped from it, and a request
/// that found it closed before sending anything is retried by hyper.
pub(crate) fn keep_alive_unix(path: &str, timeout: u64) -> Result<Docker, BollardError> {
    let socket = PathBuf::from(path);
    let Some(file) = socket_file(&socket) else {
        return Err(BollardError::SocketNotFoundError(path.to_string()));
    };
    let kept = Arc::new(KeptConnections {
        path: socket,
        pool: Mutex::new((Some(file), new_pool())),
    });
    Docker::connect_with_custom_transport(
        move |req: bollard::BollardRequest| {
            let pool = kept.pool();
            let (mut parts, body) = req.into_parts();
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            parts.uri = hyperlocal::Uri::new(&kept.path, path).into();
            async move {
                pool.request(http::Request::from_parts(parts, body))
                    .await
                    .map_err(BollardError::from)
            }
        },
        Some("http://docker"),
        timeout,
        bollard::API_DEFAULT_VERSION,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::docker::client::BollardDocker;
    use crate::docker::{DockerApi, DockerError};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A stand-in Engine on a unix socket: answers `/version` and a container inspect whose
    /// name is `name`, counts the connections it accepts, and, like dockerd, goes on serving
    /// the connections it has after its listener is gone.
    struct Engine {
        accepted: Arc<AtomicUsize>,
        listener: tokio::task::JoinHandle<()>,
    }

    impl Engine {
        async fn start(path: &Path, name: &'static str) -> Self {
            let listener = tokio::net::UnixListener::bind(path).expect("bind");
            let accepted = Arc::new(AtomicUsize::new(0));
            let count = accepted.clone();
            let listener = tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    count.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(
                            move |req: http::Request<_>| async move {
                                let body = if req.uri().path().ends_with("/version") {
                                    r#"{"Version":"28.2.2","ApiVersion":"1.50","MinAPIVersion":"1.24"}"#.to_string()
                                } else {
                                    format!(r#"{{"Id":"0123abcd","Name":"/{name}"}}"#)
                                };
                                Ok::<_, std::convert::Infallible>(
                                    http::Response::builder()
                                        .header("content-type", "application/json")
                                        .body(Full::new(Bytes::from(body)))
                                        .expect("response"),
                                )
                            },
                        );
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
            Self { accepted, listener }
        }

        fn accepted(&self) -> usize {
            self.accepted.load(Ordering::SeqCst)
        }

        /// Closes the listener and unlinks the socket, as a stopping dockerd does; the
        /// connections already accepted stay served.
        fn close_listener(&self, path: &Path) {
            self.listener.abort();
            std::fs::remove_file(path).expect("unlink the socket");
        }
    }

    /// A stand-in Engine named `name` on a socket in a fresh directory, and dockershim's
    /// client connected to it (the version negotiated: one connection accepted).
    async fn connected(name: &'static str) -> (tempfile::TempDir, PathBuf, Engine, BollardDocker) {
        let dir = tempfile::tempdir().expect("tempdir");
        let sock = dir.path().join("docker.sock");
        let engine = Engine::start(&sock, name).await;
        let endpoint = format!("unix://{}", sock.display());
        let docker = BollardDocker::connect(&endpoint, Duration::from_secs(5))
            .await
            .expect("connect and negotiate");
        (dir, sock, engine, docker)
    }

    async fn served_by(docker: &BollardDocker) -> Result<String, DockerError> {
        Ok(docker
            .inspect_container("c")
            .await?
            .name
            .unwrap_or_default())
    }

    /// Requests in a row share one connection to the Engine (issue 14: bollard's own unix
    /// client connected anew for every request), and after a burst only
    /// [`MAX_IDLE_CONNECTIONS`] stay kept.
    #[tokio::test]
    async fn requests_reuse_the_connection_to_the_engine() {
        let (_dir, _, engine, docker) = connected("c").await;
        for _ in 0..10 {
            assert_eq!(served_by(&docker).await.expect("inspect"), "/c");
        }
        assert_eq!(
            engine.accepted(),
            1,
            "the negotiation and ten inspects on one connection"
        );
        let burst = || async {
            let all = futures::future::join_all(
                (0..3 * MAX_IDLE_CONNECTIONS).map(|_| docker.inspect_container("c")),
            )
            .await;
            assert!(all.iter().all(Result::is_ok));
        };
        burst().await;
        let opened = engine.accepted();
        assert!(
            opened > 1 + MAX_IDLE_CONNECTIONS,
            "a burst of calls in flight together opens more connections: {opened}"
        );
        burst().await;
        let reused = 3 * MAX_IDLE_CONNECTIONS - (engine.accepted() - opened);
        assert!(
            reused <= MAX_IDLE_CONNECTIONS,
            "a second burst reuses at most the {MAX_IDLE_CONNECTIONS} kept: {reused}"
        );
    }

    /// An Engine that stops listening is not asked anything more on the connections kept to
    /// it, although it would still answer there (a stopping dockerd does, until its containers
    /// are stopped): calls fail to connect until a new Engine listens, and then reach it.
    #[tokio::test]
    async fn a_stopping_engine_gets_no_more_calls_on_kept_connections() {
        let (_dir, sock, old, docker) = connected("old").await;
        assert_eq!(served_by(&docker).await.expect("inspect"), "/old");
        assert_eq!(old.accepted(), 1);

        old.close_listener(&sock);
        let e = served_by(&docker)
            .await
            .expect_err("no Engine listens: the kept connection to the old one is not used");
        assert!(
            matches!(e, DockerError::Connection(_)),
            "a connection error: {e:?}"
        );

        let new = Engine::start(&sock, "new").await;
        for _ in 0..3 {
            assert_eq!(served_by(&docker).await.expect("inspect"), "/new");
        }
        assert_eq!(
            new.accepted(),
            1,
            "kept connections again, to the new Engine"
        );
        assert_eq!(old.accepted(), 1, "nothing more reached the old Engine");
    }

    /// A new Engine that replaced the socket before any call noticed the old one leaving gets
    /// the next call; the old one, still serving its connections, gets none.
    #[tokio::test]
    async fn a_replaced_socket_drops_the_kept_connections() {
        let (_dir, sock, old, docker) = connected("old").await;
        assert_eq!(served_by(&docker).await.expect("inspect"), "/old");
        old.close_listener(&sock);
        let _new = Engine::start(&sock, "new").await;
        assert_eq!(served_by(&docker).await.expect("inspect"), "/new");
        assert_eq!(old.accepted(), 1, "nothing more reached the old Engine");
    }
}
