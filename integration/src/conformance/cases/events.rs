//! `[events]` case: GetContainerEvents (an optional RPC) reports a container's created, started,
//! stopped and deleted events in order.

use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use futures::StreamExt;

use super::common::{container, in_sandbox};
use crate::conformance::{CaseResult, Ctx, optional};
use crate::ensure_eq;

pub(super) async fn events(ctx: Ctx) -> CaseResult {
    let mut sub = ctx.clone();
    let stream = sub
        .runtime
        .get_container_events(cri::GetEventsRequest {})
        .await
        .map_err(optional("GetContainerEvents"))?
        .into_inner();
    in_sandbox(
        &ctx,
        "cf-events",
        |_| {},
        move |mut ctx, id, cfg| async move {
            let c = container(&mut ctx, &id, &cfg, "ev", "sleep 3600", |_| {}, true).await?;
            ctx.runtime
                .stop_container(cri::StopContainerRequest {
                    container_id: c.clone(),
                    timeout: 0,
                })
                .await?;
            ctx.runtime
                .remove_container(cri::RemoveContainerRequest {
                    container_id: c.clone(),
                })
                .await?;
            let want = [
                cri::ContainerEventType::ContainerCreatedEvent,
                cri::ContainerEventType::ContainerStartedEvent,
                cri::ContainerEventType::ContainerStoppedEvent,
                cri::ContainerEventType::ContainerDeletedEvent,
            ];
            let mut got = Vec::new();
            let mut stream = stream;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while got.len() < want.len() {
                let next = tokio::time::timeout_at(deadline, stream.next()).await;
                match next {
                    Ok(Some(Ok(ev))) if ev.container_id == c => got.push(ev.container_event_type),
                    Ok(Some(Ok(_))) => {}
                    Ok(Some(Err(e))) => return Err(e.into()),
                    Ok(None) | Err(_) => break,
                }
            }
            let want: Vec<i32> = want.iter().map(|w| *w as i32).collect();
            ensure_eq!(got, want, "events of the container");
            Ok(())
        },
    )
    .await
}
