//! What the conformance cases share: a fresh sandbox around a case body (`in_sandbox`), a busybox
//! container in it (`container`, with the log directory the kubelet would make), exec in it
//! (`exec`, `exec_out`), container status, image pull and status, label maps and the container
//! security-context setter. The area modules import from here; this module imports nothing of
//! theirs.

use std::collections::HashMap;
use std::future::Future;

use cri_proto::runtime::v1 as cri;

use crate::conformance::{CaseError, CaseResult, Ctx};
use crate::ensure;
use crate::fixtures::{busybox_container, cleanup_sandboxes, sandbox_config};

pub(super) fn spec(image: &str) -> Option<cri::ImageSpec> {
    Some(cri::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    })
}

pub(super) async fn pull(
    ctx: &mut Ctx,
    image: &str,
    auth: Option<cri::AuthConfig>,
) -> Result<String, CaseError> {
    Ok(ctx
        .image
        .pull_image(cri::PullImageRequest {
            image: spec(image),
            auth,
            sandbox_config: None,
        })
        .await?
        .into_inner()
        .image_ref)
}

pub(super) async fn image_status(
    ctx: &mut Ctx,
    image: &str,
) -> Result<Option<cri::Image>, CaseError> {
    Ok(ctx
        .image
        .image_status(cri::ImageStatusRequest {
            image: spec(image),
            verbose: false,
        })
        .await?
        .into_inner()
        .image)
}

/// Runs `body` in a fresh sandbox (config adjusted by `tweak`), removing it afterwards.
pub(super) async fn in_sandbox<T, F, Fut>(ctx: &Ctx, prefix: &str, tweak: T, body: F) -> CaseResult
where
    T: FnOnce(&mut cri::PodSandboxConfig),
    F: FnOnce(Ctx, String, cri::PodSandboxConfig) -> Fut,
    Fut: Future<Output = CaseResult>,
{
    let mut cfg = sandbox_config(prefix, &ctx.settings.log_root);
    tweak(&mut cfg);
    let mut c = ctx.clone();
    let id = c
        .runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(cfg.clone()),
            runtime_handler: String::new(),
        })
        .await?
        .into_inner()
        .pod_sandbox_id;
    let result = body(ctx.clone(), id.clone(), cfg).await;
    cleanup_sandboxes(&mut c.runtime, &[id]).await;
    result
}

/// Creates (and by default starts) a busybox container running `script` in `sandbox`.
pub(super) async fn container(
    ctx: &mut Ctx,
    sandbox: &str,
    scfg: &cri::PodSandboxConfig,
    name: &str,
    script: &str,
    tweak: impl FnOnce(&mut cri::ContainerConfig),
    start: bool,
) -> Result<String, CaseError> {
    let image = ctx.settings.busybox_image.clone();
    crate::fixtures::ensure_image(&mut ctx.image, &image).await?;
    let mut cfg = busybox_container(name, &image, script);
    tweak(&mut cfg);
    prepare_log_dir(scfg, &cfg)?;
    let id = ctx
        .runtime
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: sandbox.to_string(),
            config: Some(cfg),
            sandbox_config: Some(scfg.clone()),
        })
        .await?
        .into_inner()
        .container_id;
    if start {
        ctx.runtime
            .start_container(cri::StartContainerRequest {
                container_id: id.clone(),
            })
            .await?;
    }
    Ok(id)
}

/// Creates the directory the container's log file goes in (`<log_directory>/<container>/` for
/// `log_path` `<container>/<n>.log`), as the kubelet does before CreateContainer: a runtime
/// need not create it. The sandbox's `log_directory` itself is made by `sandbox_config`.
pub(super) fn prepare_log_dir(
    scfg: &cri::PodSandboxConfig,
    cfg: &cri::ContainerConfig,
) -> Result<(), CaseError> {
    if scfg.log_directory.is_empty() || cfg.log_path.is_empty() {
        return Ok(());
    }
    let path = std::path::Path::new(&scfg.log_directory).join(&cfg.log_path);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| CaseError::Fail(format!("log dir {}: {e}", dir.display())))?;
    }
    Ok(())
}

pub(super) async fn cstatus(ctx: &mut Ctx, id: &str) -> Result<cri::ContainerStatus, CaseError> {
    ctx.runtime
        .container_status(cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        })
        .await?
        .into_inner()
        .status
        .ok_or_else(|| CaseError::Fail("ContainerStatus without status".into()))
}

/// Waits (up to 30 s) until the container is EXITED; returns its status.
pub(super) async fn wait_exited(
    ctx: &mut Ctx,
    id: &str,
) -> Result<cri::ContainerStatus, CaseError> {
    for _ in 0..300 {
        let st = cstatus(ctx, id).await?;
        if st.state == cri::ContainerState::ContainerExited as i32 {
            return Ok(st);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(CaseError::Fail(format!(
        "container {id} did not exit in 30 s"
    )))
}

pub(super) async fn exec(
    ctx: &mut Ctx,
    id: &str,
    script: &str,
) -> Result<cri::ExecSyncResponse, CaseError> {
    Ok(ctx
        .runtime
        .exec_sync(cri::ExecSyncRequest {
            container_id: id.to_string(),
            cmd: vec!["sh".into(), "-c".into(), script.into()],
            timeout: 20,
        })
        .await?
        .into_inner())
}

pub(super) async fn exec_out(ctx: &mut Ctx, id: &str, script: &str) -> Result<String, CaseError> {
    let r = exec(ctx, id, script).await?;
    ensure!(
        r.exit_code == 0,
        "`{script}` exited {}: {}",
        r.exit_code,
        String::from_utf8_lossy(&r.stderr)
    );
    Ok(String::from_utf8_lossy(&r.stdout).trim().to_string())
}

pub(super) fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub(super) fn security(
    c: &mut cri::ContainerConfig,
    f: impl FnOnce(&mut cri::LinuxContainerSecurityContext),
) {
    let linux = c.linux.get_or_insert_with(Default::default);
    f(linux.security_context.get_or_insert_with(Default::default));
}
