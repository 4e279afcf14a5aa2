//! GetContainerEvents: one background task follows Docker's event stream (created, started,
//! died, destroyed) for our containers and sandboxes, turns each event into a CRI
//! `ContainerEventResponse` carrying the pod sandbox status and the statuses of the pod's
//! containers, and fans it out to every subscriber through a broadcast channel. The task
//! reconnects with back-off when Docker's stream ends, replaying from a second before it was
//! lost so nothing is missed; `Replayed` remembers the events already handled so a replay does
//! not publish them again. (Docker stamps an event before it queues it, so concurrent events can
//! arrive slightly out of time order: the dedup is by identity, never by "older than the newest".)
//! The same stream keeps the listing and image caches of `cache` honest.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::models::{EventMessage, EventMessageTypeEnum};
use cri_proto::runtime::v1 as cri;
use futures::StreamExt;
use tracing::{debug, warn};

use crate::cache;
use crate::docker::DockerApi;
use crate::labels;
use crate::shim::Shim;

/// How many events a slow subscriber may lag behind before it misses some.
pub const EVENT_BUFFER: usize = 1024;

/// How long an event handled is remembered, to recognise it when a reconnect replays it. A
/// replay reaches back at most a second (plus Docker's whole-second `since`) before the stream
/// was lost, so this is ample.
const REPLAY_MEMORY: Duration = Duration::from_secs(60);

/// The identity of a Docker event: what happened, to which object, at which nanosecond.
type EventKey = (String, String, i64);

/// The Docker events handled recently, so one replayed after a reconnect is recognised.
#[derive(Default)]
struct Replayed {
    keys: HashSet<EventKey>,
    order: VecDeque<(Instant, EventKey)>,
}

impl Replayed {
    /// True the first time an event is seen (within `REPLAY_MEMORY`), false for a replay.
    fn first_time(&mut self, ev: &EventMessage, now: Instant) -> bool {
        while let Some((at, _)) = self.order.front() {
            if now.duration_since(*at) < REPLAY_MEMORY {
                break;
            }
            if let Some((_, key)) = self.order.pop_front() {
                self.keys.remove(&key);
            }
        }
        let Some(at) = event_time_ns(ev) else {
            return true; // no time: nothing to recognise it by
        };
        let id = ev
            .actor
            .as_ref()
            .and_then(|a| a.id.clone())
            .unwrap_or_default();
        let key = (ev.action.clone().unwrap_or_default(), id, at);
        if !self.keys.insert(key.clone()) {
            return false;
        }
        self.order.push_back((now, key));
        true
    }
}

/// When Docker says an event happened, in nanoseconds since the epoch.
fn event_time_ns(ev: &EventMessage) -> Option<i64> {
    ev.time_nano
        .or(ev.time.map(|t| t.saturating_mul(1_000_000_000)))
}

/// The CRI event type of a Docker container event action.
pub fn event_type(action: &str) -> Option<cri::ContainerEventType> {
    match action {
        "create" => Some(cri::ContainerEventType::ContainerCreatedEvent),
        "start" => Some(cri::ContainerEventType::ContainerStartedEvent),
        "die" => Some(cri::ContainerEventType::ContainerStoppedEvent),
        "destroy" => Some(cri::ContainerEventType::ContainerDeletedEvent),
        _ => None,
    }
}

impl<D: DockerApi> Shim<D> {
    /// Builds the CRI event for one Docker event, or None if it is not about one of ours.
    async fn container_event(&self, ev: EventMessage) -> Option<cri::ContainerEventResponse> {
        if ev.typ != Some(EventMessageTypeEnum::CONTAINER) {
            return None;
        }
        let kind = event_type(ev.action.as_deref()?)?;
        let created_at = event_time_ns(&ev).unwrap_or_else(crate::timestamp::now_ns);
        let actor = ev.actor?;
        let id = actor.id?;
        let attrs = actor.attributes.unwrap_or_default();
        let ctype = attrs.get(labels::CONTAINER_TYPE_LABEL_KEY)?.clone();
        let sandbox_id = if ctype == labels::CONTAINER_TYPE_LABEL_SANDBOX {
            id.clone()
        } else {
            attrs.get(labels::SANDBOX_ID_LABEL_KEY)?.clone()
        };
        let pod_sandbox_status = match self.docker.inspect_container(&sandbox_id).await {
            Ok(c) => Some(self.sandbox_status_of(&c).await),
            Err(_) => None,
        };
        let mut containers_statuses = Vec::new();
        if let Ok(ids) = self.sandbox_container_ids(&sandbox_id).await {
            for cid in ids {
                if let Ok(c) = self.docker.inspect_container(&cid).await {
                    containers_statuses.push(self.container_status_of(&c).await);
                }
            }
        }
        Some(cri::ContainerEventResponse {
            container_id: id,
            container_event_type: kind as i32,
            created_at,
            pod_sandbox_status,
            containers_statuses,
        })
    }

    /// Marks the caches stale for an event that changes what they hold.
    fn note_change(self: &Arc<Self>, ev: &EventMessage) {
        let action = ev.action.as_deref().unwrap_or_default();
        match ev.typ {
            Some(EventMessageTypeEnum::IMAGE) => {
                self.images.clear();
                self.note_image_change(ev)
            }
            Some(EventMessageTypeEnum::CONTAINER) if action == "oom" => {
                let actor = ev.actor.as_ref();
                let ours = actor
                    .and_then(|a| a.attributes.as_ref())
                    .is_some_and(|a| a.contains_key(labels::CONTAINER_TYPE_LABEL_KEY));
                if ours && let Some(id) = actor.and_then(|a| a.id.clone()) {
                    self.oom_killed.lock().insert(id);
                }
            }
            Some(EventMessageTypeEnum::CONTAINER) if cache::changes_listing(action) => {
                let ours = ev
                    .actor
                    .as_ref()
                    .and_then(|a| a.attributes.as_ref())
                    .is_some_and(|a| a.contains_key(labels::CONTAINER_TYPE_LABEL_KEY));
                if ours {
                    self.listing.invalidate();
                    if action == "destroy"
                        && let Some(id) = ev.actor.as_ref().and_then(|a| a.id.as_deref())
                    {
                        self.facts.forget(id);
                    }
                }
            }
            _ => {}
        }
    }

    /// An image event: the image it names is forgotten by the repo digest cache. Docker's `pull`
    /// and `push` events name the reference, not the image: the cache is suspended while the
    /// reference is inspected in the background, then only the image it names is forgotten.
    fn note_image_change(self: &Arc<Self>, ev: &EventMessage) {
        match ev.actor.as_ref().and_then(|a| a.id.as_deref()) {
            Some(id) if id.starts_with("sha256:") && crate::image::is_image_id(id) => {
                self.image_refs.invalidate(id)
            }
            Some(reference) if !reference.is_empty() => {
                let resolving = self.image_refs.begin_resolve();
                let shim = self.clone();
                let reference = reference.to_string();
                tokio::spawn(async move {
                    match shim.docker.inspect_image(&reference).await {
                        Ok(img) => match img.id {
                            Some(id) => resolving.resolved(&id),
                            None => drop(resolving),
                        },
                        // Removed since: the removal's event names the image.
                        Err(e) if e.is_not_found() => resolving.gone(),
                        // Docker failed: the guard forgets everything.
                        Err(e) => {
                            debug!(image = %reference, error = %e, "resolving an image event")
                        }
                    }
                });
            }
            _ => self.image_refs.clear(),
        }
    }

    /// Follows Docker's events until shutdown, publishing CRI events.
    pub fn spawn_event_pump(self: &Arc<Self>) {
        let shim = self.clone();
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(100);
            let mut seen = Replayed::default();
            // Replay from a second before the stream was (last) lost.
            let mut since = chrono::Utc::now().timestamp() - 1;
            loop {
                let mut stream = shim.docker.events(Some(since));
                shim.listing.set_watching(true);
                shim.image_refs.set_watching(true);
                shim.images.set_watching(true);
                shim.facts.clear();
                loop {
                    let next = tokio::select! {
                        _ = shim.shutdown.cancelled() => return,
                        n = stream.next() => n,
                    };
                    match next {
                        Some(Ok(ev)) => {
                            backoff = Duration::from_millis(100);
                            shim.note_change(&ev);
                            if !seen.first_time(&ev, Instant::now())
                                || shim.events.receiver_count() == 0
                            {
                                continue;
                            }
                            if let Some(e) = shim.container_event(ev).await {
                                debug!(container = %e.container_id, kind = e.container_event_type, "container event");
                                let _ = shim.events.send(e);
                            }
                        }
                        Some(Err(e)) => {
                            warn!(error = %e, "docker event stream failed");
                            break;
                        }
                        None => break,
                    }
                }
                since = chrono::Utc::now().timestamp() - 1;
                shim.listing.set_watching(false);
                shim.image_refs.set_watching(false);
                shim.images.set_watching(false);
                tokio::select! {
                    _ = shim.shutdown.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_actions_map_to_cri_events() {
        assert_eq!(
            event_type("create"),
            Some(cri::ContainerEventType::ContainerCreatedEvent)
        );
        assert_eq!(
            event_type("start"),
            Some(cri::ContainerEventType::ContainerStartedEvent)
        );
        assert_eq!(
            event_type("die"),
            Some(cri::ContainerEventType::ContainerStoppedEvent)
        );
        assert_eq!(
            event_type("destroy"),
            Some(cri::ContainerEventType::ContainerDeletedEvent)
        );
        assert_eq!(event_type("exec_start: sh"), None);
    }

    fn docker_event(action: &str, id: &str, time_nano: i64) -> EventMessage {
        EventMessage {
            typ: Some(EventMessageTypeEnum::CONTAINER),
            action: Some(action.into()),
            actor: Some(bollard::models::EventActor {
                id: Some(id.into()),
                attributes: None,
            }),
            time: Some(time_nano / 1_000_000_000),
            time_nano: Some(time_nano),
            ..Default::default()
        }
    }

    #[test]
    fn events_out_of_time_order_are_all_new_and_replays_are_not() {
        let mut seen = Replayed::default();
        let t0 = Instant::now();
        // Docker stamps before it queues: "destroy" of b can follow "die" of a with an older
        // stamp. Both are new (the old newest-time rule dropped the second one).
        assert!(seen.first_time(&docker_event("die", "a", 2_000), t0));
        assert!(seen.first_time(&docker_event("destroy", "b", 1_999), t0));
        // Same object and instant, other action: new.
        assert!(seen.first_time(&docker_event("destroy", "a", 2_000), t0));
        // A reconnect replays them: none is new.
        let t1 = t0 + Duration::from_secs(3);
        assert!(!seen.first_time(&docker_event("die", "a", 2_000), t1));
        assert!(!seen.first_time(&docker_event("destroy", "b", 1_999), t1));
        assert!(seen.first_time(&docker_event("start", "c", 3_000), t1));
        // Memory is bounded: long after, the old keys are gone.
        let later = t1 + REPLAY_MEMORY;
        assert!(seen.first_time(&docker_event("die", "a", 2_000), later));
        assert_eq!(seen.keys.len(), seen.order.len());
        assert_eq!(seen.keys.len(), 1);
    }
}
