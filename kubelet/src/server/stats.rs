//! `/stats/summary`, `/metrics/resource` and `/metrics/cadvisor`, which both servers serve (upstream's
//! `InstallDefaultHandlers`: the read-only port has them too, with `/pods`, `/healthz` and
//! `/metrics`; only the debugging handlers are the secure port's alone).

use std::path::Path;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Response, StatusCode};

use super::{Body, json, text};
use crate::host::KubeletShared;
use crate::logs::query_pairs;
use crate::stats::{KnownPod, Scope};

/// The pods this kubelet runs (the test bed shares one runtime between kubelets: the summary
/// covers only this one's pods, as upstream's covers its runtime's), as the summary needs them
/// (not copies of the whole pods).
fn known_pods(shared: &KubeletShared) -> Vec<KnownPod> {
    let cm = shared.runtime.container_manager();
    shared
        .pods
        .read()
        .values()
        .filter_map(|p| KnownPod::of(p, cm))
        .collect()
}

/// `/stats/summary` (upstream `handleSummary`): the node's and pods' usage
/// ([`crate::stats`]); `?only_cpu_and_memory=true` gives only CPU and memory, with the last
/// CPU rates.
pub(crate) async fn stats_summary(
    shared: &KubeletShared,
    root_dir: &Path,
    query: &str,
) -> Response<Body> {
    let only: Vec<String> = query_pairs(query)
        .into_iter()
        .filter(|(k, _)| k == "only_cpu_and_memory")
        .map(|(_, v)| v)
        .collect();
    let scope = if only == ["true"] {
        Scope::CpuAndMemory
    } else {
        Scope::Full
    };
    let summary = shared
        .stats
        .summary(
            &shared.runtime,
            &shared.node_name,
            root_dir,
            &known_pods(shared),
            scope,
        )
        .await;
    match summary {
        Ok(mut s) => {
            if scope == Scope::Full {
                crate::stats::add_claim_volumes(&mut s.pods, &shared.metrics.volumes.claims());
            }
            // Straight to bytes: a `serde_json::Value` tree of 110 pods first held about a
            // megabyte of small allocations at the RSS peak of a scrape.
            json(&s)
        }
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("Internal Error: failed to get stats summary: {e}\n"),
        ),
    }
}

/// `/metrics/resource` (upstream's resource metrics collector): CPU and memory of the node,
/// pods and containers in the Prometheus text format.
pub(crate) async fn resource_metrics(shared: &KubeletShared, root_dir: &Path) -> Response<Body> {
    let summary = shared
        .stats
        .summary(
            &shared.runtime,
            &shared.node_name,
            root_dir,
            &known_pods(shared),
            Scope::CpuAndMemory,
        )
        .await;
    if let Err(e) = &summary {
        tracing::error!(error = %e, "Error getting summary for resourceMetric prometheus endpoint");
    }
    let body = crate::stats::resource_metrics::render(summary.as_ref().ok());
    let mut r = Response::new(Full::new(Bytes::from(body)).boxed());
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

/// `/metrics/cadvisor` (upstream's cAdvisor Prometheus collector): the `container_*` and
/// `machine_*` series of the node, the kubepods slices, the pods and their containers
/// ([`crate::cadvisor`]).
pub(crate) async fn cadvisor_metrics(shared: &KubeletShared) -> Response<Body> {
    use futures::StreamExt;
    let rx = crate::cadvisor::metrics_page(std::sync::Arc::clone(&shared.cadvisor));
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) })
            .map(|b| Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(b)));
    let mut r = Response::new(BodyExt::boxed(http_body_util::StreamBody::new(stream)));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        ),
    );
    r
}
