//! Unix-socket transport for CRI gRPC: parsing kubelet-style endpoints,
//! binding a server socket safely (stale-socket cleanup, refusal when a live
//! server owns the path, mode 0660, removal on exit), serving a tonic router
//! until a cancellation token fires, eagerly dialing a socket with a bounded
//! timeout, and building generated clients/servers with the kubelet's
//! 16 MiB message limits.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Router;
use tonic::transport::{Channel, Endpoint, Uri};
use tracing::{debug, info, warn};

use crate::authority::AuthorityFix;
use crate::runtime::v1::image_service_client::ImageServiceClient;
use crate::runtime::v1::image_service_server::{ImageService, ImageServiceServer};
use crate::runtime::v1::runtime_service_client::RuntimeServiceClient;
use crate::runtime::v1::runtime_service_server::{RuntimeService, RuntimeServiceServer};

/// Largest gRPC message accepted or sent, in bytes (the kubelet's
/// `maxMsgSize`, 16 MiB).
pub const MAX_MSG_SIZE: usize = 16 * 1024 * 1024;

/// File mode given to a freshly bound server socket.
pub const SOCKET_MODE: u32 = 0o660;

/// How long the stale-socket probe waits for a peer to accept.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Errors from endpoint parsing, binding, serving and dialing.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The endpoint string is not a unix socket endpoint we understand.
    #[error("invalid CRI endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// Why it was rejected.
        reason: String,
    },
    /// Another live server accepts connections on this socket path.
    #[error("socket {} is already in use by a live server", path.display())]
    AddrInUse {
        /// The socket path.
        path: PathBuf,
    },
    /// The path exists but is not a unix socket, so it is left alone.
    #[error("{} exists and is not a unix socket; refusing to replace it", path.display())]
    NotASocket {
        /// The offending path.
        path: PathBuf,
    },
    /// A filesystem or socket operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done (e.g. "bind", "create directory for").
        op: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Dialing the socket failed.
    #[error("connect to CRI socket {}: {source}", path.display())]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// The underlying error (kind preserved from the dial).
        #[source]
        source: io::Error,
    },
    /// Dialing the socket did not finish in time.
    #[error("connect to CRI socket {} timed out after {timeout:?}", path.display())]
    ConnectTimeout {
        /// The socket path.
        path: PathBuf,
        /// The timeout that elapsed.
        timeout: Duration,
    },
    /// The gRPC server stopped with an error.
    #[error("gRPC server on {} failed: {source}", path.display())]
    Serve {
        /// The socket path.
        path: PathBuf,
        /// The tonic error.
        #[source]
        source: tonic::transport::Error,
    },
}

impl TransportError {
    fn io(op: &'static str, path: &Path, source: io::Error) -> Self {
        TransportError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Turn a kubelet-style endpoint into a socket path.
///
/// Accepts `unix:///abs/path.sock` and a bare absolute path. Any other
/// scheme (`tcp://`, `npipe://`, ...) or a relative path is rejected with
/// [`TransportError::InvalidEndpoint`].
pub fn parse_endpoint(endpoint: &str) -> Result<PathBuf, TransportError> {
    let invalid = |reason: &str| TransportError::InvalidEndpoint {
        endpoint: endpoint.to_string(),
        reason: reason.to_string(),
    };
    let trimmed = endpoint.trim();
    if trimmed.is_empty() {
        return Err(invalid("endpoint is empty"));
    }
    let path = if let Some(rest) = trimmed.strip_prefix("unix://") {
        rest
    } else if let Some((scheme, _)) = trimmed.split_once("://") {
        return Err(invalid(&format!(
            "unsupported scheme {scheme:?}; only unix:// sockets are supported"
        )));
    } else {
        trimmed
    };
    if path.is_empty() {
        return Err(invalid("socket path is empty"));
    }
    if !path.starts_with('/') {
        return Err(invalid("socket path must be absolute"));
    }
    if path.contains('\0') {
        return Err(invalid("socket path contains a NUL byte"));
    }
    Ok(PathBuf::from(path))
}

/// Bind a unix listener at `path`, ready to serve.
///
/// Creates the parent directory, removes a stale socket file nobody
/// answers on, refuses with [`TransportError::AddrInUse`] when a live server
/// answers, refuses with [`TransportError::NotASocket`] when the path is some
/// other kind of file, then binds and sets mode 0660. Must run inside a
/// tokio runtime.
pub async fn bind_unix(path: impl AsRef<Path>) -> Result<UnixListener, TransportError> {
    let path = path.as_ref();
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| TransportError::io("create directory for", path, e))?;
    }

    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => remove_if_stale(path).await?,
        Ok(_) => {
            return Err(TransportError::NotASocket {
                path: path.to_path_buf(),
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(TransportError::io("stat", path, e)),
    }

    let listener = UnixListener::bind(path).map_err(|e| {
        if e.kind() == io::ErrorKind::AddrInUse {
            TransportError::AddrInUse {
                path: path.to_path_buf(),
            }
        } else {
            TransportError::io("bind", path, e)
        }
    })?;
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE)) {
        // Do not leave a socket with the wrong mode behind.
        let _ = std::fs::remove_file(path);
        return Err(TransportError::io("chmod", path, e));
    }
    info!(socket = %path.display(), "CRI socket bound");
    Ok(listener)
}

/// Probe an existing socket file: remove it if nothing accepts on it,
/// otherwise report that the address is in use.
async fn remove_if_stale(path: &Path) -> Result<(), TransportError> {
    match tokio::time::timeout(PROBE_TIMEOUT, UnixStream::connect(path)).await {
        Ok(Ok(_)) | Err(_) => Err(TransportError::AddrInUse {
            path: path.to_path_buf(),
        }),
        Ok(Err(e))
            if matches!(
                e.kind(),
                io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound
            ) =>
        {
            warn!(socket = %path.display(), "removing stale CRI socket");
            match std::fs::remove_file(path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(TransportError::io("remove stale socket", path, e)),
            }
        }
        Ok(Err(e)) => Err(TransportError::io("probe existing socket", path, e)),
    }
}

/// Removes the socket file when dropped, if it is still the one we bound.
struct SocketGuard {
    path: PathBuf,
    ident: Option<(u64, u64)>,
}

impl SocketGuard {
    fn new(path: PathBuf) -> Self {
        let ident = std::fs::symlink_metadata(&path)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        SocketGuard { path, ident }
    }
}

impl Drop for SocketGuard {
    fn drop(&mut self) {
        let current = std::fs::symlink_metadata(&self.path)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        if current.is_some() && current == self.ident {
            match std::fs::remove_file(&self.path) {
                Ok(()) => debug!(socket = %self.path.display(), "CRI socket removed"),
                Err(e) => {
                    warn!(socket = %self.path.display(), error = %e, "failed to remove CRI socket")
                }
            }
        }
    }
}

/// Serve `router` on an already bound listener until `shutdown` is
/// cancelled, then remove the socket file. Clients may send any `:authority`
/// (see [`crate::authority`]).
pub async fn serve_with_listener(
    router: Router,
    listener: UnixListener,
    shutdown: CancellationToken,
) -> Result<(), TransportError> {
    serve_listener(router, listener, shutdown, true).await
}

/// [`serve_with_listener`] for a socket handed over by a service manager (see
/// [`crate::activation`]): the socket file stays when serving stops, it is not ours.
pub async fn serve_activated(
    router: Router,
    listener: UnixListener,
    shutdown: CancellationToken,
) -> Result<(), TransportError> {
    serve_listener(router, listener, shutdown, false).await
}

async fn serve_listener(
    router: Router,
    listener: UnixListener,
    shutdown: CancellationToken,
    remove_on_exit: bool,
) -> Result<(), TransportError> {
    let path = listener
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(Path::to_path_buf))
        .unwrap_or_default();
    let _guard =
        (remove_on_exit && !path.as_os_str().is_empty()).then(|| SocketGuard::new(path.clone()));
    // Every connection goes through the `:authority` adapter: Go and grpcio clients send the
    // socket path, which tonic's h2 would refuse (see `authority`).
    let incoming = UnixListenerStream::new(listener).map(|conn| conn.map(AuthorityFix::new));
    let result = router
        .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
        .await;
    info!(socket = %path.display(), removed = remove_on_exit, "CRI server stopped");
    result.map_err(|source| TransportError::Serve { path, source })
}

/// Parse `endpoint_or_path`, bind it (see [`bind_unix`]) and serve `router`
/// until `shutdown` is cancelled. The socket file is removed on exit.
pub async fn serve_unix(
    router: Router,
    endpoint_or_path: &str,
    shutdown: CancellationToken,
) -> Result<(), TransportError> {
    let path = parse_endpoint(endpoint_or_path)?;
    let listener = bind_unix(&path).await?;
    serve_with_listener(router, listener, shutdown).await
}

/// Dial a CRI endpoint eagerly, giving up after `connect_timeout`.
///
/// A missing or dead socket yields [`TransportError::Connect`] naming the
/// path and the dial error; a hung dial yields
/// [`TransportError::ConnectTimeout`].
pub async fn connect(endpoint: &str, connect_timeout: Duration) -> Result<Channel, TransportError> {
    let path = parse_endpoint(endpoint)?;
    // The authority is a placeholder; the connector below ignores the URI.
    let ep = Endpoint::from_static("http://[::]:50051").connect_timeout(connect_timeout);
    let dial_path = path.clone();
    let connector = tower::service_fn(move |_: Uri| {
        let p = dial_path.clone();
        async move { UnixStream::connect(p).await.map(TokioIo::new) }
    });
    match tokio::time::timeout(connect_timeout, ep.connect_with_connector(connector)).await {
        Ok(Ok(channel)) => {
            debug!(socket = %path.display(), "connected to CRI socket");
            Ok(channel)
        }
        Ok(Err(e)) => Err(TransportError::Connect {
            source: io_error_in_chain(&e),
            path,
        }),
        Err(_) => Err(TransportError::ConnectTimeout {
            path,
            timeout: connect_timeout,
        }),
    }
}

/// Find the innermost `io::Error` in an error chain and copy its kind and
/// message; fall back to the whole chain as text.
fn io_error_in_chain(err: &(dyn std::error::Error + 'static)) -> io::Error {
    let mut found: Option<&io::Error> = None;
    let mut text = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        if let Some(ioe) = e.downcast_ref::<io::Error>() {
            found = Some(ioe);
        }
        text.push_str(": ");
        text.push_str(&e.to_string());
        cur = e.source();
    }
    match found {
        Some(ioe) => io::Error::new(ioe.kind(), ioe.to_string()),
        None => io::Error::other(text),
    }
}

/// A `RuntimeService` client with 16 MiB limits both ways.
pub fn runtime_client(channel: Channel) -> RuntimeServiceClient<Channel> {
    RuntimeServiceClient::new(channel)
        .max_decoding_message_size(MAX_MSG_SIZE)
        .max_encoding_message_size(MAX_MSG_SIZE)
}

/// An `ImageService` client with 16 MiB limits both ways.
pub fn image_client(channel: Channel) -> ImageServiceClient<Channel> {
    ImageServiceClient::new(channel)
        .max_decoding_message_size(MAX_MSG_SIZE)
        .max_encoding_message_size(MAX_MSG_SIZE)
}

/// A `RuntimeService` server with 16 MiB limits both ways; an oversize request is answered
/// `RESOURCE_EXHAUSTED` (see [`OversizeAsResourceExhausted`]).
pub fn runtime_server<S: RuntimeService>(
    svc: S,
) -> OversizeAsResourceExhausted<RuntimeServiceServer<S>> {
    OversizeAsResourceExhausted(
        RuntimeServiceServer::new(svc)
            .max_decoding_message_size(MAX_MSG_SIZE)
            .max_encoding_message_size(MAX_MSG_SIZE),
    )
}

/// An `ImageService` server with 16 MiB limits both ways; an oversize request is answered
/// `RESOURCE_EXHAUSTED` (see [`OversizeAsResourceExhausted`]).
pub fn image_server<S: ImageService>(svc: S) -> OversizeAsResourceExhausted<ImageServiceServer<S>> {
    OversizeAsResourceExhausted(
        ImageServiceServer::new(svc)
            .max_decoding_message_size(MAX_MSG_SIZE)
            .max_encoding_message_size(MAX_MSG_SIZE),
    )
}

/// A generated gRPC server whose answer to a request over its decoding limit is
/// `RESOURCE_EXHAUSTED` with grpc-go's message (`grpc: received message larger than max (N vs.
/// M)`), as the Go gRPC servers the kubelet was written against (containerd, cri-dockerd)
/// answer. tonic's decoder says `OUT_OF_RANGE` ("Error, decoded message length too large"); it
/// refuses such a request before the handler runs, in a trailers-only response, so the status
/// is in the response headers and is rewritten there. Every other response passes unchanged.
#[derive(Debug, Clone)]
pub struct OversizeAsResourceExhausted<S>(pub S);

impl<S: tonic::server::NamedService> tonic::server::NamedService
    for OversizeAsResourceExhausted<S>
{
    const NAME: &'static str = S::NAME;
}

impl<S, B, RB> tower::Service<http::Request<B>> for OversizeAsResourceExhausted<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<RB>;
    type Error = S::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let fut = self.0.call(req);
        Box::pin(async move {
            let mut resp = fut.await?;
            oversize_to_resource_exhausted(resp.headers_mut());
            Ok(resp)
        })
    }
}

/// Rewrites tonic's "decoded message length too large" `OUT_OF_RANGE` status in `headers` into
/// grpc-go's `RESOURCE_EXHAUSTED`; returns whether it did.
pub fn oversize_to_resource_exhausted(headers: &mut http::HeaderMap) -> bool {
    if headers.get("grpc-status").map(|v| v.as_bytes()) != Some(b"11") {
        return false;
    }
    let Some(status) = tonic::Status::from_header_map(headers) else {
        return false;
    };
    let Some(rest) = status
        .message()
        .strip_prefix("Error, decoded message length too large: found ")
    else {
        return false;
    };
    // "{len} bytes, the limit is: {limit} bytes"
    let mut numbers = rest
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty());
    let (Some(len), Some(limit)) = (numbers.next(), numbers.next()) else {
        return false;
    };
    let go = tonic::Status::resource_exhausted(format!(
        "grpc: received message larger than max ({len} vs. {limit})"
    ));
    go.add_header(headers).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversize_status_becomes_resource_exhausted() {
        let mut h = http::HeaderMap::new();
        tonic::Status::out_of_range(
            "Error, decoded message length too large: found 16777227 bytes, the limit is: 16777216 bytes",
        )
        .add_header(&mut h)
        .unwrap();
        assert!(oversize_to_resource_exhausted(&mut h));
        let st = tonic::Status::from_header_map(&h).unwrap();
        assert_eq!(st.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            st.message(),
            "grpc: received message larger than max (16777227 vs. 16777216)"
        );
        // Any other status, OUT_OF_RANGE included, is left alone.
        for other in [
            tonic::Status::out_of_range("attempt out of range"),
            tonic::Status::not_found("decoded message length too large"),
        ] {
            let mut h = http::HeaderMap::new();
            other.add_header(&mut h).unwrap();
            assert!(!oversize_to_resource_exhausted(&mut h));
            assert_eq!(
                tonic::Status::from_header_map(&h).unwrap().code(),
                other.code()
            );
        }
    }

    #[test]
    fn parse_unix_url() {
        assert_eq!(
            parse_endpoint("unix:///run/containerd/containerd.sock").unwrap(),
            PathBuf::from("/run/containerd/containerd.sock")
        );
    }

    #[test]
    fn parse_bare_absolute_path() {
        assert_eq!(
            parse_endpoint("/var/run/dockershim.sock").unwrap(),
            PathBuf::from("/var/run/dockershim.sock")
        );
    }

    #[test]
    fn parse_rejects_other_schemes_and_relative() {
        for bad in [
            "tcp://127.0.0.1:3735",
            "npipe:////./pipe/x",
            "http://localhost",
            "unix://relative.sock",
            "unix://",
            "relative/x.sock",
            "",
            "   ",
        ] {
            match parse_endpoint(bad) {
                Err(TransportError::InvalidEndpoint { endpoint, .. }) => assert_eq!(endpoint, bad),
                other => panic!("{bad:?} should be invalid, got {other:?}"),
            }
        }
        let msg = parse_endpoint("tcp://1.2.3.4:5").unwrap_err().to_string();
        assert!(msg.contains("tcp"), "{msg}");
    }
}
