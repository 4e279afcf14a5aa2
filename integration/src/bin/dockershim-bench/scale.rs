//! The scale phase: many running containers, then CRI ListContainers against `docker ps` and
//! ListContainerStats against `docker ps` plus one-shot stats of each, interleaved, and the
//! dockershim RSS under that load.

use std::time::Instant;

use anyhow::{Result, bail};
use cri_proto::runtime::v1 as cri;
use dockershim::labels;
use futures::StreamExt;

use crate::args::Args;
use crate::ctx::{Ctx, bounded};
use crate::shim::rss_kib;
use crate::summary::{ScaleResult, summarize};

/// The shim's ListContainerStats concurrency (dockershim/src/stats.rs STATS_CONCURRENCY).
pub(crate) const SHIM_STATS_CONCURRENCY: usize = 32;

pub(crate) async fn scale_phase(
    ctx: &Ctx,
    args: &Args,
    shim_pid: u32,
    out: &mut ScaleResult,
    rss_loaded: &mut Option<u64>,
) -> Result<()> {
    let setup = Instant::now();
    let mut sandboxes = Vec::new();
    for _ in 0..args.sandboxes.max(1) {
        let sb = ctx.sandbox_config();
        let sid = bounded(
            "RunPodSandbox",
            ctx.rt.clone().run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(sb.clone()),
                runtime_handler: String::new(),
            }),
        )
        .await?
        .into_inner()
        .pod_sandbox_id;
        sandboxes.push((sid, sb));
    }
    let jobs: Vec<(usize, String, cri::PodSandboxConfig)> = (0..args.containers)
        .map(|i| {
            let (sid, sb) = &sandboxes[i % sandboxes.len()];
            (i, sid.clone(), sb.clone())
        })
        .collect();
    let results: Vec<Result<()>> = futures::stream::iter(jobs)
        .map(|(i, sid, sb)| async move {
            let mut rt = ctx.rt.clone();
            let cid = bounded(
                "CreateContainer",
                rt.create_container(cri::CreateContainerRequest {
                    pod_sandbox_id: sid,
                    config: Some(ctx.container_config(&format!("c{i}"))),
                    sandbox_config: Some(sb),
                }),
            )
            .await?
            .into_inner()
            .container_id;
            bounded(
                "StartContainer",
                rt.start_container(cri::StartContainerRequest { container_id: cid }),
            )
            .await?;
            Ok(())
        })
        .buffer_unordered(args.concurrency.max(1))
        .collect()
        .await;
    let failed: Vec<_> = results.into_iter().filter_map(|r| r.err()).collect();
    if let Some(e) = failed.first() {
        bail!(
            "{} of {} containers failed: {e}",
            failed.len(),
            args.containers
        );
    }
    out.setup_seconds = setup.elapsed().as_secs_f64();
    eprintln!(
        "{} containers in {} sandboxes created and started in {:.1} s",
        args.containers,
        sandboxes.len(),
        out.setup_seconds
    );

    // ListContainers vs docker ps, interleaved.
    let type_label = format!(
        "{}={}",
        labels::CONTAINER_TYPE_LABEL_KEY,
        labels::CONTAINER_TYPE_LABEL_CONTAINER
    );
    let (mut shim, mut direct) = (Vec::new(), Vec::new());
    for i in 0..args.list_calls {
        for side in if i % 2 == 0 { [0, 1] } else { [1, 0] } {
            let s = Instant::now();
            if side == 0 {
                let n = bounded(
                    "ListContainers",
                    ctx.rt
                        .clone()
                        .list_containers(cri::ListContainersRequest { filter: None }),
                )
                .await?
                .into_inner()
                .containers
                .len();
                shim.push(s.elapsed());
                out.list_containers_returned = n;
            } else {
                ctx.d_list(type_label.clone(), false).await?;
                direct.push(s.elapsed());
            }
        }
    }
    out.list_containers = Some(summarize(&shim));
    out.docker_list = Some(summarize(&direct));

    // What a size=true list would cost (dockershim never does this on the request path).
    let mut sized = Vec::new();
    for _ in 0..3 {
        let s = Instant::now();
        ctx.d_list(type_label.clone(), true).await?;
        sized.push(s.elapsed());
    }
    out.docker_list_with_sizes = Some(summarize(&sized));

    // ListContainerStats vs list + N one-shot stats with the shim's concurrency, interleaved.
    let (mut shim, mut direct) = (Vec::new(), Vec::new());
    for i in 0..args.stats_calls {
        for side in if i % 2 == 0 { [0, 1] } else { [1, 0] } {
            let s = Instant::now();
            if side == 0 {
                let n = bounded(
                    "ListContainerStats",
                    ctx.rt
                        .clone()
                        .list_container_stats(cri::ListContainerStatsRequest { filter: None }),
                )
                .await?
                .into_inner()
                .stats
                .len();
                shim.push(s.elapsed());
                out.list_container_stats_returned = n;
            } else {
                let ids: Vec<String> = ctx
                    .d_list(type_label.clone(), false)
                    .await?
                    .into_iter()
                    .filter(|c| {
                        c.state.as_ref().map(|s| s.to_string()).as_deref() == Some("running")
                    })
                    .filter_map(|c| c.id)
                    .collect();
                // Like the shim, a container that stopped between list and stats is skipped
                // (other users of this Docker may be starting and stopping containers).
                futures::stream::iter(ids)
                    .map(|id| async move { ctx.d_stats(&id).await })
                    .buffer_unordered(SHIM_STATS_CONCURRENCY)
                    .collect::<Vec<Result<()>>>()
                    .await;
                direct.push(s.elapsed());
            }
        }
    }
    out.list_container_stats = Some(summarize(&shim));
    out.direct_stats = Some(summarize(&direct));
    *rss_loaded = rss_kib(shim_pid).ok();
    Ok(())
}
