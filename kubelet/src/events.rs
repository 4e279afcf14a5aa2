//! Events to the API server (upstream `record.EventRecorder` with the kubelet's
//! `EventCorrelator`): what happens to a pod's containers — Pulling, Pulled, Created, Started,
//! Killing, BackOff, Failed, Unhealthy, FailedMount, Evicted — as `core/v1` Events naming the
//! pod (and the container as `spec.containers{name}`). [`EventRecorder`] is a cheap handle for
//! the rest of the kubelet; one task owns the API client and the correlation state: a repeat
//! of the same event within 10 minutes updates the existing Event's count and lastTimestamp
//! instead of creating another, and a token bucket per involved object (burst 25, one more
//! every 5 minutes, upstream's spam filter) drops the rest. Without an API server (standalone
//! mode) events are only logged.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One event to record.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub namespace: String,
    pub pod_name: String,
    pub pod_uid: String,
    /// `spec.containers{name}` or empty for the pod itself.
    pub field_path: String,
    pub type_: EventType,
    pub reason: String,
    pub message: String,
}

/// The handle the kubelet records events through.
#[derive(Debug, Clone, Default)]
pub struct EventRecorder {
    tx: Option<mpsc::UnboundedSender<Record>>,
}

impl EventRecorder {
    /// A recorder feeding `tx`.
    pub fn new(tx: mpsc::UnboundedSender<Record>) -> Self {
        Self { tx: Some(tx) }
    }

    /// Records an event about `pod` (and its container `container`, if any).
    pub fn event(
        &self,
        pod: &Pod,
        container: Option<&str>,
        type_: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        let message = message.into();
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        tracing::debug!(pod = %pod_name, container = ?container, reason, message = %message, "event");
        let Some(tx) = &self.tx else {
            return;
        };
        let _ = tx.send(Record {
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            pod_name,
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
            field_path: container
                .map(|c| format!("spec.containers{{{c}}}"))
                .unwrap_or_default(),
            type_,
            reason: reason.to_string(),
            message,
        });
    }
}

/// Upstream `defaultAggregateMaxEvents`' window for identical events.
pub const SIMILAR_WINDOW: Duration = Duration::from_secs(600);
/// Upstream spam filter: burst per object.
pub const SPAM_BURST: f64 = 25.0;
/// Upstream spam filter: one token every 5 minutes.
pub const SPAM_REFILL: Duration = Duration::from_secs(300);

/// Token buckets per involved object (upstream `EventSourceObjectSpamFilter`).
#[derive(Debug, Default)]
pub struct SpamFilter {
    buckets: HashMap<String, (f64, Instant)>,
}

impl SpamFilter {
    /// May an event about `object` be sent at `now`?
    pub fn allow(&mut self, object: &str, now: Instant) -> bool {
        let (tokens, last) = self
            .buckets
            .entry(object.to_string())
            .or_insert((SPAM_BURST, now));
        let refill = now.saturating_duration_since(*last).as_secs_f64() / SPAM_REFILL.as_secs_f64();
        *tokens = (*tokens + refill).min(SPAM_BURST);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// An Event already written, for aggregation.
#[derive(Debug, Clone)]
struct Written {
    name: String,
    count: i32,
    first: Time,
    at: Instant,
}

/// Writes events until `cancel`.
pub async fn run(
    client: Client,
    node_name: String,
    mut rx: mpsc::UnboundedReceiver<Record>,
    cancel: CancellationToken,
) {
    let mut spam = SpamFilter::default();
    let mut written: HashMap<(String, String, String, String), Written> = HashMap::new();
    let mut seq: u64 = 0;
    loop {
        let r = tokio::select! {
            _ = cancel.cancelled() => return,
            r = rx.recv() => match r { Some(r) => r, None => return },
        };
        let now = Instant::now();
        written.retain(|_, w| now.duration_since(w.at) < SIMILAR_WINDOW);
        if !spam.allow(&r.pod_uid, now) {
            continue;
        }
        let api: Api<Event> = Api::namespaced(client.clone(), &r.namespace);
        let ts = Time(k8s_openapi::jiff::Timestamp::now());
        let key = (
            r.pod_uid.clone(),
            r.field_path.clone(),
            r.reason.clone(),
            r.message.clone(),
        );
        if let Some(w) = written.get_mut(&key) {
            w.count += 1;
            w.at = now;
            let patch = serde_json::json!({"count": w.count, "lastTimestamp": ts});
            match api
                .patch(&w.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => continue,
                Err(e) => tracing::debug!(error = %e, "updating event failed; creating anew"),
            }
        }
        seq += 1;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!("{}.{:x}", r.pod_name, nanos + u128::from(seq));
        let first = written
            .get(&key)
            .map(|w| w.first.clone())
            .unwrap_or(ts.clone());
        let ev = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(r.namespace.clone()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(r.pod_name.clone()),
                namespace: Some(r.namespace.clone()),
                uid: Some(r.pod_uid.clone()),
                field_path: (!r.field_path.is_empty()).then(|| r.field_path.clone()),
                ..Default::default()
            },
            reason: Some(r.reason.clone()),
            message: Some(r.message.clone()),
            type_: Some(r.type_.as_str().into()),
            source: Some(EventSource {
                component: Some("kubelet".into()),
                host: Some(node_name.clone()),
            }),
            reporting_component: Some("kubelet".into()),
            reporting_instance: Some(node_name.clone()),
            first_timestamp: Some(first.clone()),
            last_timestamp: Some(ts),
            count: Some(1),
            ..Default::default()
        };
        match api.create(&PostParams::default(), &ev).await {
            Ok(_) => {
                written.insert(
                    key,
                    Written {
                        name,
                        count: 1,
                        first,
                        at: now,
                    },
                );
            }
            Err(e) => tracing::warn!(error = %e, reason = %r.reason, "writing event failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spam_filter_allows_a_burst_then_one_per_refill() {
        let mut f = SpamFilter::default();
        let t0 = Instant::now();
        let allowed = (0..30).filter(|_| f.allow("pod-a", t0)).count();
        assert_eq!(allowed, 25);
        assert!(f.allow("pod-b", t0), "buckets are per object");
        assert!(!f.allow("pod-a", t0 + Duration::from_secs(60)));
        assert!(f.allow("pod-a", t0 + SPAM_REFILL + Duration::from_secs(1)));
    }

    #[tokio::test]
    async fn records_name_the_container_and_standalone_only_logs() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let r = EventRecorder::new(tx);
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.metadata.uid = Some("u1".into());
        r.event(
            &pod,
            Some("app"),
            EventType::Normal,
            "Started",
            "Started container app",
        );
        let got = rx.recv().await.unwrap();
        assert_eq!(got.field_path, "spec.containers{app}");
        assert_eq!(got.namespace, "default");
        assert_eq!(got.reason, "Started");
        EventRecorder::default().event(&pod, None, EventType::Warning, "X", "nowhere to go");
    }
}
