//! What the proto integration tests share: a RuntimeService that only implements `Version`.

use cri_proto::RuntimeService;
use cri_proto::runtime::v1::{VersionRequest, VersionResponse};
use tonic::{Request, Response, Status};

/// Echoes the request's `version` back in `runtime_version`.
pub struct VersionOnly;

#[tonic::async_trait]
impl RuntimeService for VersionOnly {
    async fn version(
        &self,
        req: Request<VersionRequest>,
    ) -> Result<Response<VersionResponse>, Status> {
        Ok(Response::new(VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "test".into(),
            runtime_version: req.into_inner().version,
            runtime_api_version: "v1".into(),
        }))
    }
}
