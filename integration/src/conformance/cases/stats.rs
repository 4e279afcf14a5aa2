//! `[stats]` case: ContainerStats, ListContainerStats and (optional) PodSandboxStats report CPU
//! and memory for a container in a pod with its own cgroup parent.

use cri_proto::runtime::v1 as cri;

use super::common::{container, in_sandbox};
use crate::conformance::{CaseError, CaseResult, Ctx, optional};
use crate::{ensure, ensure_eq};

pub(super) async fn stats(ctx: Ctx) -> CaseResult {
    // Sandbox stats come from the pod's cgroup, which the kubelet always names.
    let parent = format!("/cri-conformance/{}", crate::fixtures::unique_name("stats"));
    let with_cgroup = {
        let parent = parent.clone();
        move |c: &mut cri::PodSandboxConfig| {
            if let Some(l) = c.linux.as_mut() {
                l.cgroup_parent = parent;
            }
        }
    };
    let result = stats_in(&ctx, with_cgroup).await;
    for sub in [
        "",
        "cpu,cpuacct",
        "memory",
        "pids",
        "cpu",
        "cpuacct",
        "blkio",
        "cpuset",
        "devices",
    ] {
        let _ = std::fs::remove_dir(format!("/sys/fs/cgroup/{sub}{parent}"));
    }
    result
}

async fn stats_in(ctx: &Ctx, tweak: impl FnOnce(&mut cri::PodSandboxConfig)) -> CaseResult {
    in_sandbox(ctx, "cf-stats", tweak, |mut ctx, id, cfg| async move {
        let c = container(&mut ctx, &id, &cfg, "busy", "sleep 3600", |_| {}, true).await?;
        let s = ctx
            .runtime
            .container_stats(cri::ContainerStatsRequest {
                container_id: c.clone(),
            })
            .await?
            .into_inner()
            .stats
            .ok_or_else(|| CaseError::Fail("no stats".into()))?;
        ensure_eq!(
            s.attributes.as_ref().map(|a| a.id.clone()),
            Some(c.clone()),
            "stats id"
        );
        ensure!(
            s.cpu
                .as_ref()
                .and_then(|c| c.usage_core_nano_seconds.as_ref())
                .is_some(),
            "no CPU usage"
        );
        ensure!(
            s.memory
                .as_ref()
                .and_then(|m| m.working_set_bytes.as_ref())
                .is_some_and(|v| v.value > 0),
            "no memory working set: {:?}",
            s.memory
        );
        let listed = ctx
            .runtime
            .list_container_stats(cri::ListContainerStatsRequest {
                filter: Some(cri::ContainerStatsFilter {
                    pod_sandbox_id: id.clone(),
                    ..Default::default()
                }),
            })
            .await?
            .into_inner()
            .stats;
        ensure!(
            listed
                .iter()
                .any(|s| s.attributes.as_ref().is_some_and(|a| a.id == c)),
            "ListContainerStats lacks the container"
        );
        let ps = ctx
            .runtime
            .pod_sandbox_stats(cri::PodSandboxStatsRequest {
                pod_sandbox_id: id.clone(),
            })
            .await
            .map_err(optional("PodSandboxStats"))?
            .into_inner()
            .stats
            .ok_or_else(|| CaseError::Fail("no sandbox stats".into()))?;
        let linux = ps
            .linux
            .ok_or_else(|| CaseError::Fail("no linux sandbox stats".into()))?;
        ensure!(
            linux.cpu.is_some() && linux.memory.is_some(),
            "sandbox stats lack cpu/memory"
        );
        Ok(())
    })
    .await
}
