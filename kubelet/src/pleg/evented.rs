//! The evented PLEG (upstream `pkg/kubelet/pleg/evented.go`, feature gate `EventedPLEG`): it
//! follows the runtime's CRI `GetContainerEvents` stream, turns each container event into a
//! [`PodLifecycleEvent`] and refreshes that pod's status in the cache from the runtime, so the
//! sync loop reacts to a change at once instead of at the next relist. The generic PLEG stays
//! as the safety net: while the stream is healthy it relists only every
//! [`EVENTED_RELIST_PERIOD`]; when the stream fails (or the runtime does not serve it) it is
//! put back to [`RELIST_PERIOD`] and the stream is retried with back-off. It owns the stream
//! and the period it tells the generic PLEG through a watch channel.

use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use futures::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::{PodCache, PodLifecycleEvent, PodLifecycleEventType, RELIST_PERIOD};
use crate::kuberuntime::KubeGenericRuntimeManager;

/// Upstream: with the evented PLEG on, the generic relist runs every 300 s.
pub const EVENTED_RELIST_PERIOD: Duration = Duration::from_secs(300);
/// Longest wait between attempts to (re)open the event stream.
pub const MAX_RETRY: Duration = Duration::from_secs(30);

/// The lifecycle event for a CRI container event, if it is one the sync loop cares about.
pub fn lifecycle_event(e: &cri::ContainerEventResponse) -> Option<PodLifecycleEvent> {
    let uid = e
        .pod_sandbox_status
        .as_ref()?
        .metadata
        .as_ref()?
        .uid
        .clone();
    let type_ = match cri::ContainerEventType::try_from(e.container_event_type).ok()? {
        cri::ContainerEventType::ContainerCreatedEvent => PodLifecycleEventType::ContainerChanged,
        cri::ContainerEventType::ContainerStartedEvent => PodLifecycleEventType::ContainerStarted,
        cri::ContainerEventType::ContainerStoppedEvent => PodLifecycleEventType::ContainerDied,
        cri::ContainerEventType::ContainerDeletedEvent => PodLifecycleEventType::ContainerRemoved,
    };
    Some(PodLifecycleEvent {
        id: uid,
        type_,
        data: e.container_id.clone(),
    })
}

/// The evented PLEG.
pub struct EventedPleg {
    runtime: KubeGenericRuntimeManager,
    events: mpsc::Sender<PodLifecycleEvent>,
    cache: PodCache,
    relist_period: watch::Sender<Duration>,
}

impl EventedPleg {
    /// Returns the PLEG and the receiver of the generic PLEG's relist period.
    pub fn new(
        runtime: KubeGenericRuntimeManager,
        events: mpsc::Sender<PodLifecycleEvent>,
        cache: PodCache,
    ) -> (Self, watch::Receiver<Duration>) {
        let (relist_period, rx) = watch::channel(RELIST_PERIOD);
        (
            Self {
                runtime,
                events,
                cache,
                relist_period,
            },
            rx,
        )
    }

    async fn handle(&self, e: cri::ContainerEventResponse) {
        let Some(ev) = lifecycle_event(&e) else {
            return;
        };
        if let Some(meta) = e
            .pod_sandbox_status
            .as_ref()
            .and_then(|s| s.metadata.as_ref())
        {
            let read_at = std::time::Instant::now();
            match self
                .runtime
                .get_pod_status(&meta.uid, &meta.name, &meta.namespace)
                .await
            {
                Ok(s) => self.cache.set(&meta.uid, s, read_at),
                Err(err) => {
                    tracing::warn!(pod = %meta.name, error = %err, "evented PLEG: cannot read pod status")
                }
            }
        }
        tracing::debug!(pod_uid = %ev.id, event = ?ev.type_, data = %ev.data, "evented PLEG event");
        if self.events.try_send(ev).is_err() {
            tracing::error!("PLEG event channel is full, discarding event");
        }
    }

    /// Follows the event stream until cancelled, re-opening it with back-off.
    pub async fn run(self, cancel: CancellationToken) {
        let mut retry = Duration::from_secs(1);
        loop {
            match self.runtime.container_events().await {
                Ok(mut stream) => {
                    tracing::info!("evented PLEG: following the runtime's container events");
                    let _ = self.relist_period.send(EVENTED_RELIST_PERIOD);
                    retry = Duration::from_secs(1);
                    loop {
                        let next = tokio::select! {
                            _ = cancel.cancelled() => return,
                            n = stream.next() => n,
                        };
                        match next {
                            Some(Ok(e)) => self.handle(e).await,
                            Some(Err(e)) => {
                                tracing::warn!(error = %e, "evented PLEG: event stream failed");
                                break;
                            }
                            None => {
                                tracing::warn!("evented PLEG: event stream ended");
                                break;
                            }
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "evented PLEG: cannot open the event stream; relisting every second");
                }
            }
            // Back to the generic PLEG's normal period until the stream is back.
            let _ = self.relist_period.send(RELIST_PERIOD);
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(retry) => {}
            }
            retry = (retry * 2).min(MAX_RETRY);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: cri::ContainerEventType) -> cri::ContainerEventResponse {
        cri::ContainerEventResponse {
            container_id: "c1".into(),
            container_event_type: kind as i32,
            created_at: 1,
            pod_sandbox_status: Some(cri::PodSandboxStatus {
                metadata: Some(cri::PodSandboxMetadata {
                    name: "p".into(),
                    uid: "u1".into(),
                    namespace: "ns".into(),
                    attempt: 0,
                }),
                ..Default::default()
            }),
            containers_statuses: Vec::new(),
        }
    }

    #[test]
    fn cri_events_map_to_lifecycle_events() {
        use cri::ContainerEventType::*;
        let cases = [
            (
                ContainerCreatedEvent,
                PodLifecycleEventType::ContainerChanged,
            ),
            (
                ContainerStartedEvent,
                PodLifecycleEventType::ContainerStarted,
            ),
            (ContainerStoppedEvent, PodLifecycleEventType::ContainerDied),
            (
                ContainerDeletedEvent,
                PodLifecycleEventType::ContainerRemoved,
            ),
        ];
        for (kind, want) in cases {
            let ev = lifecycle_event(&event(kind)).expect("event");
            assert_eq!(
                (ev.id.as_str(), ev.type_, ev.data.as_str()),
                ("u1", want, "c1")
            );
        }
        let mut no_pod = event(ContainerStartedEvent);
        no_pod.pod_sandbox_status = None;
        assert!(lifecycle_event(&no_pod).is_none());
        let mut bad = event(ContainerStartedEvent);
        bad.container_event_type = 99;
        assert!(lifecycle_event(&bad).is_none());
    }
}
