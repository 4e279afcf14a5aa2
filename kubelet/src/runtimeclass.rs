//! Upstream `pkg/kubelet/runtimeclass`: the RuntimeClasses (`node.k8s.io/v1`) as the API-server
//! mode's watch keeps them, and the runtime handler a pod's `spec.runtimeClassName` resolves to,
//! which the kubelet passes to RunPodSandbox. No name (or an empty one) is the default handler,
//! the empty string. A name no RuntimeClass has fails the pod's sandbox creation (the pod stays
//! pending and is tried again at its next sync), as upstream's lister lookup does. A standalone
//! kubelet has no manager and runs every pod with the default handler, as upstream does
//! without a client.

use std::time::Duration;

use k8s_openapi::api::node::v1::RuntimeClass;
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use crate::util::informer::Informer;

/// How long a lookup waits for the watch's first listing (a kubelet just started).
const SYNC_WAIT: Duration = Duration::from_secs(1);

/// Why a pod's runtime handler cannot be known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeClassError {
    /// Upstream's lister NotFound error, word for word.
    #[error("runtimeclass.node.k8s.io \"{0}\" not found")]
    NotFound(String),
}

/// The RuntimeClasses known to this kubelet (upstream `runtimeclass.Manager`). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct RuntimeClassManager {
    classes: Informer<RuntimeClass>,
}

impl RuntimeClassManager {
    /// A manager whose RuntimeClasses a watch on `client` keeps until `cancel` fires.
    pub fn start(client: Client, cancel: CancellationToken) -> Self {
        let m = Self::default();
        let watch = m
            .classes
            .clone()
            .run(Api::all(client), Default::default(), cancel);
        tokio::spawn(watch);
        m
    }

    /// The store the watch feeds (tests fill it by hand).
    pub fn classes(&self) -> &Informer<RuntimeClass> {
        &self.classes
    }

    /// Upstream `LookupRuntimeHandler`: the handler of RuntimeClass `name`; none or an empty
    /// name is the default handler `""`.
    pub async fn lookup_runtime_handler(
        &self,
        name: Option<&str>,
    ) -> Result<String, RuntimeClassError> {
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            return Ok(String::new());
        };
        // At once when listed; else waits (bounded) for the first listing.
        self.classes.wait_synced(SYNC_WAIT).await;
        self.classes
            .get(name)
            .map(|rc| rc.handler.clone())
            .ok_or_else(|| RuntimeClassError::NotFound(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_name_resolves_to_its_handler_none_to_the_default_and_an_unknown_one_fails() {
        let m = RuntimeClassManager::default();
        assert_eq!(m.lookup_runtime_handler(None).await, Ok(String::new()));
        assert_eq!(m.lookup_runtime_handler(Some("")).await, Ok(String::new()));
        assert_eq!(
            m.lookup_runtime_handler(Some("kata")).await,
            Err(RuntimeClassError::NotFound("kata".into())),
            "not listed yet: not found after the wait"
        );
        m.classes().replace([RuntimeClass {
            metadata: kube::api::ObjectMeta {
                name: Some("kata".into()),
                ..Default::default()
            },
            handler: "kata-qemu".into(),
            ..Default::default()
        }]);
        assert_eq!(
            m.lookup_runtime_handler(Some("kata")).await,
            Ok("kata-qemu".into())
        );
        let e = m.lookup_runtime_handler(Some("gvisor")).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"runtimeclass.node.k8s.io "gvisor" not found"#
        );
    }
}
