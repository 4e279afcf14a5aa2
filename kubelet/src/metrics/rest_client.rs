//! client-go's REST client metrics (component-base `restclient` adapters, registered in every
//! component's registry): `rest_client_requests_total{code,method,host}` and
//! `rest_client_request_duration_seconds{verb,host}`, recorded by [`RestClientLayer`], a tower
//! layer on kube's client stack. The families are process-wide, as client-go's are: clients are
//! built before the kubelet's registry, which registers them.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use super::Buckets;

/// client-go's request latency buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// Labels of `rest_client_requests_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The HTTP status code, or `<error>` when no response came.
    pub code: String,
    /// The HTTP method.
    pub method: String,
    /// The server's `host:port`.
    pub host: String,
}

/// Labels of `rest_client_request_duration_seconds`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    /// The HTTP method.
    pub verb: String,
    /// The server's `host:port`.
    pub host: String,
}

/// The two families.
#[derive(Debug, Clone)]
pub struct RestClientMetrics {
    /// `rest_client_requests_total`.
    pub requests: Family<RequestLabels, Counter>,
    /// `rest_client_request_duration_seconds`.
    pub duration: Family<LatencyLabels, Histogram, Buckets>,
}

impl RestClientMetrics {
    /// Record one request of `method` to `host` answered with `code` (`None`: failed).
    pub fn observe(&self, method: &str, host: &str, code: Option<u16>, took: std::time::Duration) {
        let code = code.map_or_else(|| "<error>".to_string(), |c| c.to_string());
        self.requests
            .get_or_create(&RequestLabels {
                code,
                method: method.to_string(),
                host: host.to_string(),
            })
            .inc();
        self.duration
            .get_or_create(&LatencyLabels {
                verb: method.to_string(),
                host: host.to_string(),
            })
            .observe(took.as_secs_f64());
    }
}

/// The process's REST client metrics.
pub fn global() -> &'static RestClientMetrics {
    static METRICS: OnceLock<RestClientMetrics> = OnceLock::new();
    METRICS.get_or_init(|| RestClientMetrics {
        requests: Family::default(),
        duration: Family::new_with_constructor(Buckets(&LATENCY_BUCKETS)),
    })
}

/// A tower layer counting and timing each request of the service below it (put it below
/// kube's base-URI layer, so requests carry the server's host).
#[derive(Debug, Clone, Copy, Default)]
pub struct RestClientLayer;

impl<S> tower::Layer<S> for RestClientLayer {
    type Service = RestClientService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RestClientService { inner }
    }
}

/// The service of [`RestClientLayer`].
#[derive(Debug, Clone)]
pub struct RestClientService<S> {
    inner: S,
}

impl<S, B, R> tower::Service<hyper::Request<B>> for RestClientService<S>
where
    S: tower::Service<hyper::Request<B>, Response = hyper::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: hyper::Request<B>) -> Self::Future {
        let method = req.method().as_str().to_string();
        let host = req
            .uri()
            .authority()
            .map(|a| a.as_str().to_string())
            .unwrap_or_default();
        let began = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let r = fut.await;
            let code = r.as_ref().ok().map(|resp| resp.status().as_u16());
            global().observe(&method, &host, code, began.elapsed());
            r
        })
    }
}

/// A kube client for `config` whose requests are counted (what `kube::Client::try_from` builds,
/// plus [`RestClientLayer`]).
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&RestClientLayer)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Service, ServiceExt};

    #[tokio::test]
    async fn counts_requests_by_code_method_and_host() {
        let svc = tower::service_fn(|req: hyper::Request<String>| async move {
            let status = if req.uri().path() == "/missing" {
                404
            } else {
                200
            };
            Ok::<_, std::convert::Infallible>(
                hyper::Response::builder()
                    .status(status)
                    .body(String::new())
                    .expect("response"),
            )
        });
        let mut svc = tower::Layer::layer(&RestClientLayer, svc);
        for path in ["/api", "/missing"] {
            let req = hyper::Request::get(format!("https://rest-client-test:6443{path}"))
                .body(String::new())
                .expect("request");
            svc.ready()
                .await
                .expect("ready")
                .call(req)
                .await
                .expect("answered");
        }
        let count = |code: &str| {
            global()
                .requests
                .get_or_create(&RequestLabels {
                    code: code.into(),
                    method: "GET".into(),
                    host: "rest-client-test:6443".into(),
                })
                .get()
        };
        assert_eq!((count("200"), count("404")), (1, 1));
    }
}
