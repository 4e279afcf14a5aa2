//! Encoding a registry for a scrape, by content negotiation as upstream's `promhttp` handler
//! does: the OpenMetrics text format when the scraper's `Accept` asks for
//! `application/openmetrics-text` (Prometheus does by default), the Prometheus text format
//! 0.0.4 otherwise (curl, `promtool`, older scrapers). Series names are the same in both: counters
//! are registered without `_total` (both encoders add it) and upstream's counters without that
//! suffix are [`super::untyped::UntypedCounter`]s.

use prometheus_client::registry::Registry;

/// `Content-Type` of the OpenMetrics text format.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `Content-Type` of the Prometheus text format 0.0.4.
pub const PROMETHEUS_TEXT: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Whether an `Accept` header value asks for OpenMetrics (with a non-zero quality).
pub fn wants_openmetrics(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default();
        let zero = parts.any(|p| {
            p.strip_prefix("q=")
                .and_then(|q| q.parse::<f64>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        media.eq_ignore_ascii_case("application/openmetrics-text") && !zero
    })
}

/// `registry` encoded for a scraper that sent `accept`: the content type and the body.
pub fn encode(registry: &Registry, accept: &str) -> (&'static str, String) {
    let mut body = String::new();
    if wants_openmetrics(accept) {
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut body, registry);
        (OPENMETRICS, body)
    } else {
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut body, registry);
        (PROMETHEUS_TEXT, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiates_like_promhttp() {
        // Prometheus 2.x's default scrape Accept header.
        assert!(wants_openmetrics(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        ));
        assert!(!wants_openmetrics("text/plain;version=0.0.4"));
        assert!(!wants_openmetrics("*/*"));
        assert!(!wants_openmetrics(""));
        assert!(!wants_openmetrics("application/openmetrics-text;q=0"));
    }
}
