//! Creating a named Docker container (upstream `recoverFromCreationConflictIfNeeded` and
//! containerd's name registrar): a [`NameReservation`] keeps a second RunPodSandbox or
//! CreateContainer for the same metadata from racing the first one, and
//! `Shim::create_named` recovers from Docker's name conflicts without letting one name stand
//! for two live containers. Shared by `sandbox` and `container`.

use bollard::models::ContainerCreateBody;
use tracing::{info, warn};

use crate::docker::{DockerApi, DockerError};
use crate::errors::{Result, ShimError};
use crate::naming;
use crate::shim::Shim;

/// Docker names being created by an RPC in flight in this process (containerd's name
/// registrar): a second RunPodSandbox or CreateContainer for the same name fails at once with
/// AlreadyExists instead of racing the first one. Docker names are global to the daemon, so the
/// set is too.
static RESERVED_NAMES: parking_lot::Mutex<Vec<String>> = parking_lot::Mutex::new(Vec::new());

/// A Docker name reserved for the lifetime of the value (see [`RESERVED_NAMES`]).
#[derive(Debug)]
pub(crate) struct NameReservation(String);

impl NameReservation {
    /// Reserves `name`, or fails with AlreadyExists when a request in flight holds it.
    pub(crate) fn take(name: &str) -> Result<Self> {
        let mut names = RESERVED_NAMES.lock();
        if names.iter().any(|n| n == name) {
            return Err(ShimError::AlreadyExists(format!(
                "the name {name:?} is reserved by a request in progress for the same metadata"
            )));
        }
        names.push(name.to_string());
        Ok(NameReservation(name.to_string()))
    }
}

impl Drop for NameReservation {
    fn drop(&mut self) {
        let mut names = RESERVED_NAMES.lock();
        if let Some(i) = names.iter().position(|n| *n == self.0) {
            names.swap_remove(i);
        }
    }
}

impl<D: DockerApi> Shim<D> {
    /// Creates a container under `name` (held by a [`NameReservation`] of the caller). On a
    /// name conflict it recovers like upstream's `recoverFromCreationConflictIfNeeded`, but never
    /// lets one name stand for two live containers:
    /// - the holder has exited (or is dead): it is removed, unforced, and the name reused (a
    ///   leftover of an earlier failed call, upstream's case);
    /// - the holder is created, running, paused or restarting: AlreadyExists, naming it (upstream
    ///   picked a randomized name for a running holder, so the same RunPodSandbox twice left two
    ///   ready sandboxes);
    /// - the holder has vanished (Docker's name-conflict bug): a randomized name.
    pub(crate) async fn create_named(
        &self,
        name: &str,
        body: ContainerCreateBody,
    ) -> Result<String> {
        match self.docker.create_container(name, body.clone()).await {
            Ok(id) => Ok(id),
            Err(DockerError::Conflict { message }) => {
                warn!(name, %message, "container name conflict");
                let existing = match self.docker.inspect_container(name).await {
                    Ok(c) => Some(c),
                    Err(e) if e.is_not_found() => None,
                    Err(e) => return Err(e.into()),
                };
                let Some(holder) = existing else {
                    return Ok(self
                        .docker
                        .create_container(&naming::randomize_name(name), body)
                        .await?);
                };
                let holder_id = holder.id.clone().unwrap_or_default();
                let status = holder
                    .state
                    .as_ref()
                    .and_then(|s| s.status)
                    .map(|s| s.to_string())
                    .unwrap_or_default();
                if !matches!(status.as_str(), "exited" | "dead") {
                    return Err(ShimError::AlreadyExists(format!(
                        "the name {name:?} is already in use by container {holder_id} ({status}): \
                         remove it first, or use another attempt number"
                    )));
                }
                self.facts.forget(&holder_id);
                match self.docker.remove_container(&holder_id).await {
                    Ok(()) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => {
                        return Err(ShimError::AlreadyExists(format!(
                            "the name {name:?} is in use by container {holder_id}, which could \
                             not be removed: {e}"
                        )));
                    }
                }
                info!(name, old = %holder_id, "removed the exited container holding the name");
                Ok(self.docker.create_container(name, body).await?)
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserved_name_is_refused_until_released() {
        let name = "k8s_POD_reserve-test_ns_uid_0";
        let first = NameReservation::take(name).expect("free name");
        let err = NameReservation::take(name).expect_err("reserved twice");
        assert_eq!(err.code(), tonic::Code::AlreadyExists);
        assert!(err.to_string().contains("reserved"), "{err}");
        let other = NameReservation::take("k8s_POD_reserve-test_ns_uid_1").expect("other name");
        drop(first);
        let again = NameReservation::take(name).expect("released");
        drop((again, other));
    }
}
