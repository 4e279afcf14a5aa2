//! Pod status to the API server (upstream `status_manager.go` `syncBatch` / `syncPod`): each
//! API pod's status, as the status manager holds it, is patched to the pod's status
//! subresource only when it differs from what was last written, with the pod's UID as a
//! precondition so a recreated pod of the same name is never written over; and a pod being
//! deleted whose containers are all gone is deleted with grace 0 (and the same precondition),
//! which removes the object. It owns the record of what it wrote; the caller decides when to
//! run a batch (upstream: on every status change and every 10 s).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client};
use tracing::{debug, warn};

/// One pod the batch looks at.
#[derive(Debug, Clone)]
pub struct PodState {
    pub pod: Pod,
    /// The status the kubelet computed.
    pub status: Option<PodStatus>,
    /// Being deleted and every container and sandbox is gone.
    pub can_be_deleted: bool,
}

/// What one batch did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BatchResult {
    pub patched: usize,
    pub deleted: usize,
    pub failed: usize,
}

/// Writes pod statuses and final deletions to the API server.
pub struct ApiStatusSyncer {
    client: Client,
    /// The last status written, by pod UID.
    written: HashMap<String, PodStatus>,
}

impl ApiStatusSyncer {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            written: HashMap::new(),
        }
    }

    /// Is `status` worth writing over `last`? Upstream ignores nothing but exact equality;
    /// probe times live in the conditions, so equal statuses compare equal.
    fn needs_write(&self, uid: &str, status: &PodStatus) -> bool {
        self.written.get(uid) != Some(status)
    }

    /// Writes what changed; deletes what can be. `pods` are the API source's pods only.
    pub async fn sync_batch(&mut self, pods: &[PodState]) -> BatchResult {
        let mut result = BatchResult::default();
        for p in pods {
            let (Some(ns), Some(name), Some(uid)) = (
                p.pod.metadata.namespace.as_deref(),
                p.pod.metadata.name.as_deref(),
                p.pod.metadata.uid.as_deref(),
            ) else {
                continue;
            };
            let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            if let Some(status) = &p.status
                && self.needs_write(uid, status)
            {
                let patch = serde_json::json!({
                    "metadata": {"uid": uid},
                    "status": status,
                });
                match api
                    .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
                    .await
                {
                    Ok(_) => {
                        debug!(pod = name, namespace = ns, "pod status written");
                        self.written.insert(uid.to_string(), status.clone());
                        result.patched += 1;
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
                        // Gone, or another pod of the same name now: nothing of ours to write.
                        self.written.remove(uid);
                    }
                    Err(e) => {
                        warn!(pod = name, namespace = ns, error = %e, "writing pod status failed");
                        result.failed += 1;
                    }
                }
            }
            if p.can_be_deleted && p.pod.metadata.deletion_timestamp.is_some() {
                let dp = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: Some(uid.to_string()),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                match api.delete(name, &dp).await {
                    Ok(_) => {
                        debug!(pod = name, namespace = ns, "pod deleted from the API");
                        self.written.remove(uid);
                        result.deleted += 1;
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
                        self.written.remove(uid);
                    }
                    Err(e) => {
                        warn!(pod = name, namespace = ns, error = %e, "deleting pod failed");
                        result.failed += 1;
                    }
                }
            }
        }
        result
    }

    /// Forgets pods that are no longer known.
    pub fn retain(&mut self, known_uids: &dyn Fn(&str) -> bool) {
        self.written.retain(|uid, _| known_uids(uid));
    }
}
