//! The pod lifecycle measured on both sides: through dockershim's CRI, and the Docker calls
//! dockershim must make at minimum, made directly; each call's time recorded per operation.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use cri_proto::runtime::v1 as cri;
use dockershim::{labels, naming};

use crate::ctx::{Ctx, bounded};

pub(crate) const OPS: [&str; 8] = [
    "RunPodSandbox",
    "CreateContainer",
    "StartContainer",
    "ContainerStatus",
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
];

pub(crate) type Timings = HashMap<&'static str, Vec<Duration>>;

pub(crate) fn record(t: &mut Timings, op: &'static str, start: Instant) {
    t.entry(op).or_default().push(start.elapsed());
}

/// One pod lifecycle through dockershim. Created ids go into `created` for cleanup.
pub(crate) async fn shim_lifecycle(
    ctx: &Ctx,
    t: &mut Timings,
    created: &mut Vec<String>,
) -> Result<()> {
    let mut rt = ctx.rt.clone();
    let sb = ctx.sandbox_config();
    let s = Instant::now();
    let sid = bounded(
        "RunPodSandbox",
        rt.run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(sb.clone()),
            runtime_handler: String::new(),
        }),
    )
    .await?
    .into_inner()
    .pod_sandbox_id;
    record(t, "RunPodSandbox", s);
    created.push(sid.clone());

    let cfg = ctx.container_config("bench");
    let s = Instant::now();
    let cid = bounded(
        "CreateContainer",
        rt.create_container(cri::CreateContainerRequest {
            pod_sandbox_id: sid.clone(),
            config: Some(cfg),
            sandbox_config: Some(sb),
        }),
    )
    .await?
    .into_inner()
    .container_id;
    record(t, "CreateContainer", s);
    created.push(cid.clone());

    let s = Instant::now();
    bounded(
        "StartContainer",
        rt.start_container(cri::StartContainerRequest {
            container_id: cid.clone(),
        }),
    )
    .await?;
    record(t, "StartContainer", s);

    let s = Instant::now();
    let st = bounded(
        "ContainerStatus",
        rt.container_status(cri::ContainerStatusRequest {
            container_id: cid.clone(),
            verbose: false,
        }),
    )
    .await?
    .into_inner();
    record(t, "ContainerStatus", s);
    if st.status.map(|s| s.state) != Some(cri::ContainerState::ContainerRunning as i32) {
        bail!("container {cid} is not running after StartContainer");
    }

    let s = Instant::now();
    bounded(
        "StopContainer",
        rt.stop_container(cri::StopContainerRequest {
            container_id: cid.clone(),
            timeout: 0,
        }),
    )
    .await?;
    record(t, "StopContainer", s);

    let s = Instant::now();
    bounded(
        "RemoveContainer",
        rt.remove_container(cri::RemoveContainerRequest {
            container_id: cid.clone(),
        }),
    )
    .await?;
    record(t, "RemoveContainer", s);

    let s = Instant::now();
    bounded(
        "StopPodSandbox",
        rt.stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: sid.clone(),
        }),
    )
    .await?;
    record(t, "StopPodSandbox", s);

    let s = Instant::now();
    bounded(
        "RemovePodSandbox",
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest {
            pod_sandbox_id: sid.clone(),
        }),
    )
    .await?;
    record(t, "RemovePodSandbox", s);
    Ok(())
}

/// The same lifecycle with the Docker calls dockershim must make at minimum, made directly.
pub(crate) async fn direct_lifecycle(
    ctx: &Ctx,
    t: &mut Timings,
    created: &mut Vec<String>,
) -> Result<()> {
    let sb = ctx.sandbox_config();
    let meta = sb.metadata.clone().unwrap_or_default();
    let pod = naming::SandboxNameParts {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        attempt: 0,
    };

    // RunPodSandbox = create + start + inspect.
    let s = Instant::now();
    let sid = ctx
        .d_create(
            &naming::make_sandbox_name(&pod),
            ctx.direct_sandbox_body(&sb),
        )
        .await?;
    created.push(sid.clone());
    ctx.d_start(&sid).await?;
    ctx.d_inspect(&sid).await?;
    record(t, "RunPodSandbox", s);

    // CreateContainer = inspect sandbox + create.
    let cfg = ctx.container_config("bench");
    let s = Instant::now();
    let sandbox = ctx.d_inspect(&sid).await?;
    let full_sid = sandbox.id.unwrap_or(sid.clone());
    let name = naming::make_container_name(&naming::ContainerNameParts {
        name: "bench".to_string(),
        attempt: 0,
        pod,
    });
    let cid = ctx
        .d_create(&name, ctx.direct_container_body(&full_sid, &sb, &cfg))
        .await?;
    record(t, "CreateContainer", s);
    created.push(cid.clone());

    // StartContainer = inspect + start.
    let s = Instant::now();
    ctx.d_inspect(&cid).await?;
    ctx.d_start(&cid).await?;
    record(t, "StartContainer", s);

    // ContainerStatus = inspect + image inspect.
    let s = Instant::now();
    let c = ctx.d_inspect(&cid).await?;
    let image = c.image.unwrap_or_default();
    bounded("docker image inspect", ctx.docker.inspect_image(&image)).await?;
    record(t, "ContainerStatus", s);

    // StopContainer = stop.
    let s = Instant::now();
    ctx.d_stop(&cid, 0).await?;
    record(t, "StopContainer", s);

    // RemoveContainer = inspect + remove.
    let s = Instant::now();
    ctx.d_inspect(&cid).await?;
    ctx.d_remove(&cid).await?;
    record(t, "RemoveContainer", s);

    let pod_label = format!("{}={full_sid}", labels::SANDBOX_ID_LABEL_KEY);
    // StopPodSandbox = inspect + list + stop (the shim stops sandboxes with a 10 s grace;
    // pause exits on SIGTERM at once).
    let s = Instant::now();
    ctx.d_inspect(&sid).await?;
    for c in ctx.d_list(pod_label.clone(), false).await? {
        if let Some(id) = c.id {
            ctx.d_stop(&id, 10).await?;
        }
    }
    ctx.d_stop(&full_sid, 10).await?;
    record(t, "StopPodSandbox", s);

    // RemovePodSandbox = inspect + list + remove.
    let s = Instant::now();
    ctx.d_inspect(&sid).await?;
    for c in ctx.d_list(pod_label, false).await? {
        if let Some(id) = c.id {
            ctx.d_remove(&id).await?;
        }
    }
    ctx.d_remove(&full_sid).await?;
    record(t, "RemovePodSandbox", s);
    Ok(())
}
