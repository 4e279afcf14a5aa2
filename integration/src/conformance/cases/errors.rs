//! `[errors]` cases: stop and remove of missing or already removed objects succeed, unknown ids
//! are NotFound, a request over 16 MiB is ResourceExhausted, and requests without required
//! fields are refused.

use cri_proto::runtime::v1 as cri;

use super::common::{container, in_sandbox, spec};
use crate::conformance::{CaseError, CaseResult, Ctx};
use crate::{ensure, ensure_eq};

pub(super) async fn idempotency(mut ctx: Ctx) -> CaseResult {
    let missing = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".to_string();
    // Stopping an unknown container or sandbox may succeed or answer NotFound (containerd 1.6
    // does the latter); removing what is gone must succeed.
    let stop = ctx
        .runtime
        .stop_container(cri::StopContainerRequest {
            container_id: missing.clone(),
            timeout: 0,
        })
        .await;
    ensure!(
        stop.as_ref()
            .err()
            .is_none_or(|s| s.code() == tonic::Code::NotFound),
        "StopContainer of an unknown id: {stop:?}"
    );
    ctx.runtime
        .remove_container(cri::RemoveContainerRequest {
            container_id: missing.clone(),
        })
        .await?;
    let stop = ctx
        .runtime
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: missing.clone(),
        })
        .await;
    ensure!(
        stop.as_ref()
            .err()
            .is_none_or(|s| s.code() == tonic::Code::NotFound),
        "StopPodSandbox of an unknown id: {stop:?}"
    );
    ctx.runtime
        .remove_pod_sandbox(cri::RemovePodSandboxRequest {
            pod_sandbox_id: missing.clone(),
        })
        .await?;
    let image = format!("{}/does-not-exist:never", ctx.settings.registry);
    ctx.image
        .remove_image(cri::RemoveImageRequest {
            image: spec(&image),
        })
        .await?;
    // Stopping or removing twice what did exist succeeds.
    in_sandbox(
        &ctx,
        "cf-idem",
        |_| {},
        |mut ctx, id, cfg| async move {
            let c = container(&mut ctx, &id, &cfg, "twice", "sleep 3600", |_| {}, true).await?;
            for _ in 0..2 {
                ctx.runtime
                    .stop_container(cri::StopContainerRequest {
                        container_id: c.clone(),
                        timeout: 0,
                    })
                    .await?;
            }
            for _ in 0..2 {
                ctx.runtime
                    .remove_container(cri::RemoveContainerRequest {
                        container_id: c.clone(),
                    })
                    .await?;
            }
            for _ in 0..2 {
                ctx.runtime
                    .stop_pod_sandbox(cri::StopPodSandboxRequest {
                        pod_sandbox_id: id.clone(),
                    })
                    .await?;
            }
            for _ in 0..2 {
                ctx.runtime
                    .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                        pod_sandbox_id: id.clone(),
                    })
                    .await?;
            }
            Ok(())
        },
    )
    .await
}

/// grpc-go's servers answer a request over their 16 MiB limit RESOURCE_EXHAUSTED; the kubelet
/// sends no more (its client limit is the same).
pub(super) async fn oversize_request(ctx: Ctx) -> CaseResult {
    // The runtime must serve Version at all (a server refusing everything is no evidence).
    ctx.runtime
        .clone()
        .version(cri::VersionRequest {
            version: "v1".into(),
        })
        .await?;
    let mut rt = ctx
        .runtime
        .clone()
        .max_encoding_message_size(4 * cri_proto::MAX_MSG_SIZE);
    let r = rt
        .version(cri::VersionRequest {
            version: "v".repeat(cri_proto::MAX_MSG_SIZE + 1),
        })
        .await;
    match r {
        Ok(_) => Err(CaseError::Fail(
            "a Version request over 16 MiB was answered".into(),
        )),
        Err(s) if s.code() == tonic::Code::ResourceExhausted => Ok(()),
        Err(s) => Err(CaseError::Fail(format!(
            "a request over 16 MiB: got {:?} ({}), want ResourceExhausted",
            s.code(),
            s.message()
        ))),
    }
}

pub(super) async fn not_found(mut ctx: Ctx) -> CaseResult {
    let missing = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210".to_string();
    let c = ctx
        .runtime
        .container_status(cri::ContainerStatusRequest {
            container_id: missing.clone(),
            verbose: false,
        })
        .await;
    ensure_eq!(
        c.err().map(|s| s.code()),
        Some(tonic::Code::NotFound),
        "ContainerStatus of an unknown id"
    );
    let s = ctx
        .runtime
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: missing.clone(),
            verbose: false,
        })
        .await;
    ensure_eq!(
        s.err().map(|s| s.code()),
        Some(tonic::Code::NotFound),
        "PodSandboxStatus of an unknown id"
    );
    Ok(())
}

/// Requests missing what the CRI requires are refused. (Our dockershim answers InvalidArgument,
/// checked in its own tests; containerd 1.6, the reference, answers Unknown, so the suite only
/// requires an error.)
pub(super) async fn invalid_argument(mut ctx: Ctx) -> CaseResult {
    // A refusal is any error but one saying the RPC is not served at all (containerd 1.6
    // answers Unknown here, dockershim InvalidArgument).
    let refused = |what: &str, e: Option<tonic::Status>| -> CaseResult {
        match e {
            None => Err(CaseError::Fail(format!("{what} succeeded"))),
            Some(s)
                if matches!(
                    s.code(),
                    tonic::Code::Unimplemented | tonic::Code::Unavailable
                ) =>
            {
                Err(CaseError::from(s))
            }
            Some(_) => Ok(()),
        }
    };
    let e = ctx
        .runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(cri::PodSandboxConfig::default()),
            runtime_handler: String::new(),
        })
        .await
        .err();
    refused("RunPodSandbox without metadata", e)?;
    let e = ctx
        .image
        .pull_image(cri::PullImageRequest {
            image: None,
            auth: None,
            sandbox_config: None,
        })
        .await
        .err();
    refused("PullImage without an image", e)?;
    Ok(())
}
