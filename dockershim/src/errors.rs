//! dockershim's error type and its one mapping to gRPC statuses. Every RPC handler returns
//! [`ShimError`]; the conversion to [`tonic::Status`] here is the only place that picks codes, so
//! a Docker "No such container" is `NotFound` everywhere and Docker's message is kept.

use tonic::{Code, Status};

use crate::docker::DockerError;

/// Why a CRI request failed.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// The request itself is wrong (missing config, bad id, bad value).
    #[error("{0}")]
    InvalidArgument(String),
    /// The sandbox, container or image does not exist.
    #[error("{0}")]
    NotFound(String),
    /// A sandbox or container with the same metadata (so the same Docker name) exists or is
    /// being created.
    #[error("{0}")]
    AlreadyExists(String),
    /// The object exists but is in the wrong state for the request.
    #[error("{0}")]
    FailedPrecondition(String),
    /// Docker refused or failed.
    #[error(transparent)]
    Docker(#[from] DockerError),
    /// Pod networking (CNI) failed.
    #[error("network: {0}")]
    Network(String),
    /// The runtime cannot do this (yet).
    #[error("{0}")]
    Unimplemented(String),
    /// A deadline passed.
    #[error("{0}")]
    DeadlineExceeded(String),
    /// A bounded resource (pending streaming tokens) is full.
    #[error("{0}")]
    ResourceExhausted(String),
    /// Anything else on our side (checkpoint files, log files...).
    #[error("{0}")]
    Internal(String),
}

impl ShimError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        ShimError::InvalidArgument(msg.into())
    }

    pub fn internal(msg: impl std::fmt::Display) -> Self {
        ShimError::Internal(msg.to_string())
    }

    /// True for "does not exist", from us or from Docker.
    pub fn is_not_found(&self) -> bool {
        match self {
            ShimError::NotFound(_) => true,
            ShimError::Docker(e) => e.is_not_found(),
            _ => false,
        }
    }

    /// The gRPC code for this error.
    pub fn code(&self) -> Code {
        match self {
            ShimError::InvalidArgument(_) => Code::InvalidArgument,
            ShimError::NotFound(_) => Code::NotFound,
            ShimError::AlreadyExists(_) => Code::AlreadyExists,
            ShimError::FailedPrecondition(_) => Code::FailedPrecondition,
            ShimError::Unimplemented(_) => Code::Unimplemented,
            ShimError::DeadlineExceeded(_) => Code::DeadlineExceeded,
            ShimError::ResourceExhausted(_) => Code::ResourceExhausted,
            ShimError::Network(_) | ShimError::Internal(_) => Code::Unknown,
            ShimError::Docker(d) => match d {
                DockerError::NotFound { .. } => Code::NotFound,
                DockerError::Conflict { .. } => Code::FailedPrecondition,
                DockerError::BadRequest { .. } => Code::InvalidArgument,
                DockerError::Timeout(_) => Code::DeadlineExceeded,
                DockerError::Connection(_) => Code::Unavailable,
                DockerError::Server { .. } | DockerError::Stream(_) => Code::Unknown,
            },
        }
    }
}

impl From<ShimError> for Status {
    fn from(err: ShimError) -> Self {
        Status::new(err.code(), err.to_string())
    }
}

/// Result of a dockershim operation.
pub type Result<T, E = ShimError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_kind_of_failure() {
        let nf: Status = ShimError::Docker(DockerError::NotFound {
            message: "No such container: abc".into(),
        })
        .into();
        assert_eq!(nf.code(), Code::NotFound);
        assert_eq!(nf.message(), "No such container: abc");
        assert_eq!(
            Status::from(ShimError::invalid("config is required")).code(),
            Code::InvalidArgument
        );
        assert_eq!(
            Status::from(ShimError::Docker(DockerError::Conflict {
                message: "in use".into()
            }))
            .code(),
            Code::FailedPrecondition
        );
    }
}
