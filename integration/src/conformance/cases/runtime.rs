//! `[runtime]` cases: Version names the runtime and speaks CRI v1; Status reports RuntimeReady
//! and NetworkReady.

use cri_proto::runtime::v1 as cri;

use crate::conformance::{CaseResult, Ctx};
use crate::ensure;

pub(super) async fn runtime_version(mut ctx: Ctx) -> CaseResult {
    let v = ctx
        .runtime
        .version(cri::VersionRequest {
            version: "v1".into(),
        })
        .await?
        .into_inner();
    ensure!(!v.runtime_name.is_empty(), "empty runtime_name");
    ensure!(!v.runtime_version.is_empty(), "empty runtime_version");
    ensure!(
        v.runtime_api_version == "v1" || v.runtime_api_version.starts_with("v1"),
        "runtime_api_version {:?}",
        v.runtime_api_version
    );
    Ok(())
}

pub(super) async fn runtime_status(mut ctx: Ctx) -> CaseResult {
    let st = ctx
        .runtime
        .status(cri::StatusRequest { verbose: false })
        .await?
        .into_inner();
    let conds = st.status.map(|s| s.conditions).unwrap_or_default();
    for want in ["RuntimeReady", "NetworkReady"] {
        let c = conds.iter().find(|c| c.r#type == want);
        ensure!(c.is_some(), "condition {want} missing from {conds:?}");
        ensure!(
            c.is_some_and(|c| c.status),
            "condition {want} is false: {c:?}"
        );
    }
    Ok(())
}
