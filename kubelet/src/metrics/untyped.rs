//! Upstream counters whose names do not end in `_total` (`kubelet_evictions`,
//! `kubelet_server_expiration_renew_errors`, `kubelet_pleg_discard_events`, …).
//!
//! Both of prometheus-client's text encoders append `_total` to every counter sample, so a
//! `Counter` registered as `kubelet_evictions` would be scraped as `kubelet_evictions_total`, a
//! series the kubernetes-mixin alerts never query. [`UntypedCounter`] counts like a counter but
//! is exposed with the `unknown` type (`untyped` in the Prometheus text format), whose samples
//! carry the registered name unchanged, so Prometheus stores exactly upstream's series name in
//! either format. (`promtool check metrics` also flags a counter without `_total`; an untyped
//! metric passes.)

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::{MetricType, TypedMetric};

/// A monotonically increasing count exposed under its registered name, type `unknown`.
#[derive(Debug, Clone, Default)]
pub struct UntypedCounter(Counter);

impl UntypedCounter {
    /// Add one.
    pub fn inc(&self) -> u64 {
        self.0.inc()
    }

    /// The current count.
    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

impl TypedMetric for UntypedCounter {
    const TYPE: MetricType = MetricType::Unknown;
}

impl EncodeMetric for UntypedCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.0.get())
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}
