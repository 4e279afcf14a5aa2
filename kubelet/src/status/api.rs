//! Pod status to the API server (upstream `status_manager.go` `syncBatch` / `syncPod`): each
//! API pod's status, as the status manager holds it, is patched to the pod's status
//! subresource only when it differs from what was last written, with the pod's UID as a
//! precondition so a recreated pod of the same name is never written over; and a pod being
//! deleted whose containers are all gone is deleted with grace 0 (and the same precondition),
//! which removes the object. It owns the record of what it wrote; the caller decides when to
//! run a batch (upstream: on every status change and every 10 s).

use std::collections::{HashMap, HashSet};

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
    /// Since when each pod's newest status waits to be written.
    pending: HashMap<String, std::time::Instant>,
    /// `kubelet_pod_status_sync_duration_seconds`: from a changed status seen to it written.
    sync_duration: Option<prometheus_client::metrics::histogram::Histogram>,
    /// Pods deleted (or found gone) by UID: nothing more is sent for them while the source
    /// still lists them (its watch lags the deletion; upstream GETs the pod first instead).
    deleted: HashSet<String>,
}

impl ApiStatusSyncer {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            written: HashMap::new(),
            pending: HashMap::new(),
            sync_duration: None,
            deleted: HashSet::new(),
        }
    }

    /// Observe in `h` how long each changed status waited until it was written.
    pub fn with_sync_duration(
        mut self,
        h: prometheus_client::metrics::histogram::Histogram,
    ) -> Self {
        self.sync_duration = Some(h);
        self
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
            if self.deleted.contains(uid) {
                continue;
            }
            let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            if let Some(status) = &p.status
                && self.needs_write(uid, status)
            {
                let since = *self
                    .pending
                    .entry(uid.to_string())
                    .or_insert_with(std::time::Instant::now);
                let old_ips = old_pod_ips(&p.pod, self.written.get(uid));
                let patch = serde_json::json!({
                    "metadata": {"uid": uid},
                    "status": status_patch(status, &old_ips),
                });
                match api
                    .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
                    .await
                {
                    Ok(_) => {
                        debug!(pod = name, namespace = ns, "pod status written");
                        self.written.insert(uid.to_string(), status.clone());
                        self.pending.remove(uid);
                        if let Some(h) = &self.sync_duration {
                            h.observe(since.elapsed().as_secs_f64());
                        }
                        result.patched += 1;
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
                        // Gone, or another pod of the same name now: nothing of ours to write.
                        self.written.remove(uid);
                        self.pending.remove(uid);
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
                        self.deleted.insert(uid.to_string());
                        result.deleted += 1;
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
                        self.written.remove(uid);
                        self.deleted.insert(uid.to_string());
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
        self.pending.retain(|uid, _| known_uids(uid));
        self.deleted.retain(|uid| known_uids(uid));
    }
}

/// The addresses the API server may hold for a pod: those of the pod as the kubelet last saw
/// it and those it last wrote.
fn old_pod_ips<'a>(pod: &'a Pod, written: Option<&'a PodStatus>) -> Vec<&'a str> {
    [pod.status.as_ref(), written]
        .into_iter()
        .flatten()
        .flat_map(|s| s.pod_ips.iter().flatten().map(|i| i.ip.as_str()))
        .collect()
}

/// `status` as a strategic merge patch body: a container state holds exactly one of
/// `waiting`, `running` and `terminated`, so the two absent ones are sent as `null` (what
/// upstream's two-way merge patch does) — a merge would otherwise keep the old `running` beside
/// a new `terminated`. Likewise a condition's absent `reason` and `message` are `null`: a
/// `Ready` that turned `True` would otherwise keep the reason and message it had while `False`.
///
/// `podIPs` merges by `ip`: a pod whose sandbox was recreated with a new address would get the
/// new one beside the old, which the API server refuses ("may specify no more than one IP for
/// each IP family", 422) — and then no status of that pod is written again. As upstream's
/// two-way merge patch, each address in `old_ips` (what the API pod says and what was last
/// written) that is not in the new list is deleted (`$patch: delete`) and
/// `$setElementOrder/podIPs` gives the order. (The API server does not honour a
/// `$patch: replace` element in this list: it keeps it as an address "".)
fn status_patch(status: &PodStatus, old_ips: &[&str]) -> serde_json::Value {
    let mut v = serde_json::to_value(status).unwrap_or_default();
    if let (Some(ips), Some(obj)) = (status.pod_ips.as_deref(), v.as_object_mut()) {
        let new: Vec<&str> = ips.iter().map(|i| i.ip.as_str()).collect();
        let mut gone: Vec<&str> = old_ips
            .iter()
            .copied()
            .filter(|ip| !new.contains(ip))
            .collect();
        gone.sort_unstable();
        gone.dedup();
        let keep = new.iter().map(|ip| serde_json::json!({"ip": ip}));
        let list = keep.clone().chain(
            gone.iter()
                .map(|ip| serde_json::json!({"ip": ip, "$patch": "delete"})),
        );
        obj.insert("podIPs".into(), list.collect());
        obj.insert("$setElementOrder/podIPs".into(), keep.collect());
    }
    if let Some(conditions) = v
        .get_mut("conditions")
        .and_then(serde_json::Value::as_array_mut)
    {
        for c in conditions
            .iter_mut()
            .filter_map(serde_json::Value::as_object_mut)
        {
            for k in ["reason", "message"] {
                c.entry(k).or_insert(serde_json::Value::Null);
            }
        }
    }
    for list in [
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
    ] {
        let Some(items) = v.get_mut(list).and_then(serde_json::Value::as_array_mut) else {
            continue;
        };
        for item in items {
            for field in ["state", "lastState"] {
                let Some(state) = item
                    .get_mut(field)
                    .and_then(serde_json::Value::as_object_mut)
                else {
                    continue;
                };
                for k in ["waiting", "running", "terminated"] {
                    state.entry(k).or_insert(serde_json::Value::Null);
                }
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    //! The syncer against an API server played by a `tower` service that records each request
    //! and answers as the API server would.

    use super::*;
    use std::sync::Arc;

    use parking_lot::Mutex;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    type Seen = Arc<Mutex<Vec<(String, String, serde_json::Value)>>>;

    /// A client whose requests land in `seen`; `conflict` answers 409 to every request.
    fn client(seen: Seen, conflict: bool) -> Client {
        let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let seen = Arc::clone(&seen);
            async move {
                let (parts, body) = req.into_parts();
                let bytes = body
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
                seen.lock()
                    .push((parts.method.to_string(), parts.uri.path().to_string(), json));
                let (code, body) = if conflict {
                    (
                        409,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "Conflict", "code": 409, "message": "uid precondition failed"}),
                    )
                } else {
                    (
                        200,
                        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": "web", "namespace": "default", "uid": "u1"}}),
                    )
                };
                let resp = http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(body.to_string())))
                    .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(resp)
            }
        });
        Client::new(svc, "default")
    }

    fn state(phase: &str, deleting: bool, can_be_deleted: bool) -> PodState {
        PodState {
            pod: Pod {
                metadata: ObjectMeta {
                    name: Some("web".into()),
                    namespace: Some("default".into()),
                    uid: Some("u1".into()),
                    deletion_timestamp: deleting.then(|| Time(k8s_openapi::jiff::Timestamp::now())),
                    ..Default::default()
                },
                ..Default::default()
            },
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
            can_be_deleted,
        }
    }

    fn take(seen: &Seen) -> Vec<(String, String, serde_json::Value)> {
        std::mem::take(&mut *seen.lock())
    }

    #[test]
    fn container_states_in_the_patch_clear_the_other_states() {
        let status: PodStatus = serde_json::from_value(serde_json::json!({
            "containerStatuses": [{"name": "a", "image": "i", "imageID": "", "ready": false,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0}},
                "lastState": {}}]
        }))
        .expect("status");
        let p = status_patch(&status, &[]);
        let state = &p["containerStatuses"][0]["state"];
        assert!(state["running"].is_null() && state.get("running").is_some());
        assert!(state.get("waiting").is_some_and(serde_json::Value::is_null));
        assert_eq!(state["terminated"]["exitCode"], 0);
    }

    #[test]
    fn a_condition_without_reason_or_message_clears_the_old_ones() {
        let status: PodStatus = serde_json::from_value(serde_json::json!({
            "conditions": [{"type": "Ready", "status": "True"},
                           {"type": "Initialized", "status": "False",
                            "reason": "ContainersNotInitialized", "message": "m"}]
        }))
        .expect("status");
        let p = status_patch(&status, &[]);
        let ready = &p["conditions"][0];
        assert!(ready.get("reason").is_some_and(serde_json::Value::is_null));
        assert!(ready.get("message").is_some_and(serde_json::Value::is_null));
        assert_eq!(p["conditions"][1]["reason"], "ContainersNotInitialized");
    }

    #[tokio::test]
    async fn a_status_is_written_once_until_it_changes() {
        let seen = Seen::default();
        let synced = prometheus_client::metrics::histogram::Histogram::new([1.0]);
        let mut s = ApiStatusSyncer::new(client(Arc::clone(&seen), false))
            .with_sync_duration(synced.clone());
        let r = s.sync_batch(&[state("Pending", false, false)]).await;
        assert_eq!(
            r,
            BatchResult {
                patched: 1,
                deleted: 0,
                failed: 0
            }
        );
        let reqs = take(&seen);
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].0, "PATCH");
        assert_eq!(reqs[0].1, "/api/v1/namespaces/default/pods/web/status");
        // The UID rides along as a precondition, the status as written.
        assert_eq!(reqs[0].2["metadata"]["uid"], "u1");
        assert_eq!(reqs[0].2["status"]["phase"], "Pending");
        // Unchanged: nothing written.
        let r = s.sync_batch(&[state("Pending", false, false)]).await;
        assert_eq!(r, BatchResult::default());
        assert!(take(&seen).is_empty());
        // Changed: written again.
        let r = s.sync_batch(&[state("Running", false, false)]).await;
        assert_eq!(r.patched, 1);
        assert_eq!(take(&seen)[0].2["status"]["phase"], "Running");
        // `kubelet_pod_status_sync_duration_seconds`: one observation per status written.
        let mut text = String::new();
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("synced", "", synced);
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).expect("encode");
        assert!(text.contains("synced_count 2"), "{text}");
    }

    #[tokio::test]
    async fn a_terminated_pod_being_deleted_is_deleted_with_its_uid_as_precondition() {
        let seen = Seen::default();
        let mut s = ApiStatusSyncer::new(client(Arc::clone(&seen), false));
        // Being deleted but containers still there: status only.
        s.sync_batch(&[state("Running", true, false)]).await;
        assert!(take(&seen).iter().all(|r| r.0 == "PATCH"));
        let r = s.sync_batch(&[state("Succeeded", true, true)]).await;
        assert_eq!(r.deleted, 1);
        let reqs = take(&seen);
        let delete = reqs.iter().find(|r| r.0 == "DELETE").expect("a DELETE");
        assert_eq!(delete.1, "/api/v1/namespaces/default/pods/web");
        assert_eq!(delete.2["gracePeriodSeconds"], 0);
        assert_eq!(delete.2["preconditions"]["uid"], "u1");
        // Deleted once: a later batch that still sees it (the source's watch lags) sends
        // nothing more for it.
        let r = s.sync_batch(&[state("Succeeded", true, true)]).await;
        assert_eq!(r, BatchResult::default());
        assert!(take(&seen).is_empty());
        // A pod that is not being deleted is never deleted.
        let mut s = ApiStatusSyncer::new(client(Arc::clone(&seen), false));
        let r = s.sync_batch(&[state("Failed", false, true)]).await;
        assert_eq!(r.deleted, 0);
        assert!(take(&seen).iter().all(|r| r.0 != "DELETE"));
    }

    #[tokio::test]
    async fn a_conflict_means_another_pod_and_is_not_a_failure() {
        let seen = Seen::default();
        let mut s = ApiStatusSyncer::new(client(Arc::clone(&seen), true));
        let r = s.sync_batch(&[state("Running", false, false)]).await;
        assert_eq!(r, BatchResult::default());
        // Nothing recorded as written: the next batch tries again.
        s.sync_batch(&[state("Running", false, false)]).await;
        assert_eq!(take(&seen).len(), 2);
    }

    #[test]
    fn old_pod_ips_are_deleted_so_a_new_sandbox_address_is_not_merged_beside_them() {
        let status = PodStatus {
            pod_ip: Some("10.90.2.181".into()),
            pod_ips: Some(vec![k8s_openapi::api::core::v1::PodIP {
                ip: "10.90.2.181".into(),
            }]),
            ..Default::default()
        };
        let v = status_patch(&status, &["10.90.2.177", "10.90.2.181", "10.90.2.177"]);
        assert_eq!(
            v["podIPs"],
            serde_json::json!([{"ip": "10.90.2.181"}, {"ip": "10.90.2.177", "$patch": "delete"}])
        );
        assert_eq!(
            v["$setElementOrder/podIPs"],
            serde_json::json!([{"ip": "10.90.2.181"}])
        );
        assert_eq!(v["podIP"], "10.90.2.181");
        // No address (a pod not started yet): nothing is said about the list.
        let v = status_patch(&PodStatus::default(), &["10.90.2.177"]);
        assert!(v.get("podIPs").is_none(), "{v}");
    }
}
