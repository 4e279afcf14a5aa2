//! The http pod source (upstream `pkg/kubelet/config/http.go`). This module owns polling
//! `--manifest-url` every `http_check_frequency` with the `--manifest-url-header` headers over
//! plain HTTP (hyper client), decoding the body as a Pod or a PodList (YAML or JSON), turning
//! each pod into a static pod via [`super::common`], and sending a `SET` snapshot when the pods
//! changed. A zero-length body is an empty snapshot (so the source is marked seen) and an
//! error; a transient failure (connection error, non-200, malformed body) is logged and
//! published as a [`ManifestError`] and the previous pods are kept, like upstream. A body over
//! [`MAX_MANIFEST_BYTES`] is refused unparsed (and unread past the cap).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::common::{
    DecodeError, MAX_MANIFEST_BYTES, Manifest, decode_failure, decode_manifest, prepare_static_pod,
    validation_failures,
};
use super::{HTTP_SOURCE, ManifestError, PodOperation, SourceSender};

/// Per-request timeout (upstream's http.Client timeout).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why one poll of the manifest URL failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpSourceError {
    /// The URL or a header is not valid.
    #[error("invalid request: {0}")]
    Request(String),
    /// Connecting or reading failed.
    #[error("{url}: {reason}")]
    Transport {
        /// The URL.
        url: String,
        /// What failed.
        reason: String,
    },
    /// Non-200 answer.
    #[error("{url}: {status}")]
    Status {
        /// The URL.
        url: String,
        /// The HTTP status.
        status: hyper::StatusCode,
    },
    /// Empty body.
    #[error("zero-length data received from {0}")]
    Empty(String),
    /// The body was not a valid Pod or PodList.
    #[error("invalid manifest from {url}: {}", errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Manifest {
        /// The URL.
        url: String,
        /// What was wrong.
        errors: Vec<ManifestError>,
    },
}

/// The http source (upstream `sourceURL`).
#[derive(Debug)]
pub struct HttpSource {
    url: String,
    headers: BTreeMap<String, Vec<String>>,
    node_name: String,
    period: Duration,
    updates: SourceSender,
    errors: watch::Sender<Vec<ManifestError>>,
    client: Client<HttpConnector, Empty<Bytes>>,
    last_data: Option<Bytes>,
}

/// Decode a response body into static pods (upstream `extractFromURL` after the fetch).
pub fn pods_from_body(
    url: &str,
    body: &[u8],
    node_name: &str,
) -> Result<Vec<Pod>, HttpSourceError> {
    let bad = |errors| HttpSourceError::Manifest {
        url: url.to_string(),
        errors,
    };
    let (pods, is_list) = match decode_manifest(body, true) {
        Ok(Manifest::Pod(p)) => (vec![*p], false),
        Ok(Manifest::PodList(l)) => (l.items, true),
        Err(e) => return Err(bad(vec![decode_failure(HTTP_SOURCE, url, &e)])),
    };
    let mut out = Vec::with_capacity(pods.len());
    let mut errors = Vec::new();
    for (i, pod) in pods.into_iter().enumerate() {
        match prepare_static_pod(pod, HTTP_SOURCE, url, false, node_name) {
            Ok(p) => out.push(p),
            Err(errs) => {
                let mut me = validation_failures(HTTP_SOURCE, url, errs);
                if is_list {
                    for e in &mut me {
                        e.field = e.field.take().map(|f| format!("items[{i}].{f}"));
                    }
                }
                errors.extend(me);
            }
        }
    }
    // Upstream rejects the whole body when any pod in it is invalid.
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(bad(errors))
    }
}

impl HttpSource {
    /// An http source for `url`; returns it and the receiver of its current errors.
    pub fn new(
        url: impl Into<String>,
        headers: BTreeMap<String, Vec<String>>,
        node_name: impl Into<String>,
        period: Duration,
        updates: SourceSender,
    ) -> (Self, watch::Receiver<Vec<ManifestError>>) {
        let (errors, rx) = watch::channel(Vec::new());
        let client = Client::builder(TokioExecutor::new()).build_http();
        (
            Self {
                url: url.into(),
                headers,
                node_name: node_name.into(),
                period,
                updates,
                errors,
                client,
                last_data: None,
            },
            rx,
        )
    }

    async fn fetch(&self) -> Result<Bytes, HttpSourceError> {
        let mut req = hyper::Request::get(&self.url);
        for (k, vs) in &self.headers {
            for v in vs {
                req = req.header(k.as_str(), v.as_str());
            }
        }
        let req = req
            .body(Empty::<Bytes>::new())
            .map_err(|e| HttpSourceError::Request(e.to_string()))?;
        let transport = |reason: String| HttpSourceError::Transport {
            url: self.url.clone(),
            reason,
        };
        let fut = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| transport(e.to_string()))?;
            let status = resp.status();
            if status != hyper::StatusCode::OK {
                return Err(HttpSourceError::Status {
                    url: self.url.clone(),
                    status,
                });
            }
            // Over the cap: refused before the body is read (a Content-Length that says so)
            // or as soon as it has read one byte too many.
            let too_large = |size: u64| HttpSourceError::Manifest {
                url: self.url.clone(),
                errors: vec![decode_failure(
                    HTTP_SOURCE,
                    &self.url,
                    &DecodeError::TooLarge { size },
                )],
            };
            if let Some(len) = resp
                .headers()
                .get(hyper::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|len| *len > MAX_MANIFEST_BYTES as u64)
            {
                return Err(too_large(len));
            }
            let body = Limited::new(resp.into_body(), MAX_MANIFEST_BYTES)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        too_large(MAX_MANIFEST_BYTES as u64 + 1)
                    } else {
                        transport(e.to_string())
                    }
                })?
                .to_bytes();
            Ok(body)
        };
        tokio::time::timeout(REQUEST_TIMEOUT, fut)
            .await
            .map_err(|_| transport("request timed out".into()))?
    }

    /// Poll once (upstream `extractFromURL`). Sends a SET when the body changed.
    pub async fn poll(&mut self) -> Result<(), HttpSourceError> {
        let data = self.fetch().await?;
        if data.is_empty() {
            // An empty snapshot lets the source be marked as seen.
            if self.last_data.as_ref().is_none_or(|d| !d.is_empty()) {
                self.last_data = Some(data);
                let _ = self.updates.send(PodOperation::Set, Vec::new()).await;
            }
            return Err(HttpSourceError::Empty(self.url.clone()));
        }
        if self.last_data.as_ref() == Some(&data) {
            return Ok(());
        }
        let pods = pods_from_body(&self.url, &data, &self.node_name)?;
        self.last_data = Some(data);
        self.updates
            .send(PodOperation::Set, pods)
            .await
            .map_err(|e| HttpSourceError::Request(e.to_string()))
    }

    fn publish(&self, result: &Result<(), HttpSourceError>) {
        let errs = match result {
            Ok(()) => Vec::new(),
            Err(HttpSourceError::Manifest { errors, .. }) => errors.clone(),
            Err(e) => vec![ManifestError {
                source_name: HTTP_SOURCE.into(),
                location: self.url.clone(),
                field: None,
                reason: e.to_string(),
            }],
        };
        self.errors.send_if_modified(|cur| {
            if *cur == errs {
                false
            } else {
                *cur = errs;
                true
            }
        });
    }

    /// Run until `cancel` fires: poll now, then every period.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(self.period);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let res = self.poll().await;
            if let Err(e) = &res {
                tracing::warn!(url = %self.url, error = %e, "failed to read pods from URL");
            }
            self.publish(&res);
            if self.updates.send_closed() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::mpsc;

    /// A one-connection-at-a-time HTTP server answering each request with the next canned
    /// (status, body); the request head is forwarded to `seen`.
    async fn server(answers: Vec<(u16, String)>) -> (String, mpsc::UnboundedReceiver<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (seen_tx, seen) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            for (status, body) in answers {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let _ = seen_tx.send(String::from_utf8_lossy(&buf[..n]).to_string());
                let resp = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
                let _ = s.shutdown().await;
            }
        });
        (format!("http://{addr}/pods"), seen)
    }

    const LIST: &str = r#"{"apiVersion":"v1","kind":"PodList","items":[
        {"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"nginx"}]}},
        {"metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"redis"}]}}]}"#;

    #[tokio::test]
    async fn polls_and_keeps_pods_on_failure() {
        let pod_yaml = "kind: Pod\nmetadata:\n  name: y\nspec:\n  containers:\n  - name: c\n    image: busybox\n";
        let (url, mut seen) = server(vec![
            (200, LIST.to_string()),
            (200, LIST.to_string()),
            (500, "boom".into()),
            (200, "{bad".into()),
            (200, pod_yaml.into()),
            (200, String::new()),
        ])
        .await;
        let (tx, mut rx) = mpsc::channel(16);
        let headers = BTreeMap::from([("X-Token".to_string(), vec!["s3cret".to_string()])]);
        let (mut src, _errors) = HttpSource::new(
            url.clone(),
            headers,
            "node1",
            Duration::from_secs(20),
            SourceSender::new("http", tx),
        );
        src.poll().await.expect("first poll");
        let u = rx.recv().await.expect("set");
        assert_eq!(u.op, PodOperation::Set);
        let names: Vec<_> = u
            .pods
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        assert_eq!(names, vec!["a-node1", "b-node1"]);
        assert!(
            seen.recv()
                .await
                .expect("req")
                .to_lowercase()
                .contains("x-token: s3cret")
        );

        src.poll().await.expect("unchanged");
        assert!(rx.try_recv().is_err(), "unchanged body sends nothing");
        assert!(matches!(
            src.poll().await,
            Err(HttpSourceError::Status { .. })
        ));
        assert!(matches!(
            src.poll().await,
            Err(HttpSourceError::Manifest { .. })
        ));
        assert!(rx.try_recv().is_err(), "failures keep the previous pods");

        src.poll().await.expect("single pod yaml");
        let u = rx.recv().await.expect("set");
        assert_eq!(u.pods[0].metadata.name.as_deref(), Some("y-node1"));
        assert!(matches!(src.poll().await, Err(HttpSourceError::Empty(_))));
        assert!(rx.recv().await.expect("empty set").pods.is_empty());
    }

    #[test]
    fn invalid_pod_in_list_names_the_item() {
        let body = LIST.replace("\"redis\"", "\"\"");
        let Err(HttpSourceError::Manifest { errors, .. }) =
            pods_from_body("http://x", body.as_bytes(), "n")
        else {
            panic!("expected manifest error");
        };
        assert_eq!(
            errors[0].field.as_deref(),
            Some("items[1].spec.containers[0].image")
        );
    }

    /// The first error of a failed poll, rendered.
    fn manifest_error(r: Result<(), HttpSourceError>) -> String {
        match r {
            Err(HttpSourceError::Manifest { errors, .. }) => errors[0].to_string(),
            other => panic!("want a manifest error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn bodies_over_the_cap_are_refused_unparsed() {
        // Content-Length says so: refused before the body is read.
        let big = "x".repeat(MAX_MANIFEST_BYTES + 1);
        let (url, _seen) = server(vec![(200, big)]).await;
        let (tx, mut rx) = mpsc::channel(16);
        let (mut src, _errors) = HttpSource::new(
            url.clone(),
            BTreeMap::new(),
            "n",
            Duration::from_secs(20),
            SourceSender::new("http", tx),
        );
        assert_eq!(
            manifest_error(src.poll().await),
            format!(
                "http: {url}: manifest is {} bytes, over the limit of {MAX_MANIFEST_BYTES} bytes (not parsed)",
                MAX_MANIFEST_BYTES + 1
            )
        );
        // No length, streamed until the connection closes: cut one byte past the cap.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let mut buf = vec![0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n")
                .await;
            let chunk = vec![b'x'; 64 * 1024];
            // 8 MiB unless the client hangs up first.
            for _ in 0..128 {
                if s.write_all(&chunk).await.is_err() {
                    return;
                }
            }
        });
        let url = format!("http://{addr}/pods");
        let (tx2, _rx2) = mpsc::channel(16);
        let (mut src, _errors) = HttpSource::new(
            url.clone(),
            BTreeMap::new(),
            "n",
            Duration::from_secs(20),
            SourceSender::new("http", tx2),
        );
        assert_eq!(
            manifest_error(src.poll().await),
            format!(
                "http: {url}: manifest is {} bytes, over the limit of {MAX_MANIFEST_BYTES} bytes (not parsed)",
                MAX_MANIFEST_BYTES + 1
            )
        );
        assert!(rx.try_recv().is_err(), "nothing sent");
    }
}
