//! The `api` pod source (upstream `config/apiserver.go`): a kube-rs watcher on the pods bound to
//! this node (`fieldSelector=spec.nodeName=<node>`), kept as a local set and sent to PodConfig
//! as a full SET after every change, as upstream's reflector into an UndeltaStore does.
//! PodConfig's merge turns consecutive SETs into ADD / UPDATE / DELETE (deletionTimestamp set)
//! / REMOVE / RECONCILE (status only). A watch that breaks (dropped connection, 410 Gone) is
//! resumed by the watcher, which relists when it must; since the relist arrives as one more
//! SET, a restart neither loses nor duplicates a pod. Mirror pods are not run: they go to
//! [`crate::mirror::MirrorPods`].
//!
//! [`watch_services`] is the kubelet's service informer (upstream `NewMainKubelet`'s
//! `serviceLister`): a watcher on the services of all namespaces that keeps a
//! [`ServiceStore`] for the containers' service variables; the store counts as synced once the
//! first listing is complete.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{PodOperation, SourceSender};
use crate::envvars::ServiceStore;

/// Keeps `store` equal to the services of all namespaces until `cancel` fires. A broken watch
/// is resumed (relisting when it must, the relist replacing the store whole).
pub async fn watch_services(client: Client, store: ServiceStore, cancel: CancellationToken) {
    store
        .run(Api::all(client), watcher::Config::default(), cancel)
        .await
}

/// The pods bound to one node, from the API server.
pub struct ApiSource {
    pods: Api<Pod>,
    node_name: String,
    updates: SourceSender,
    mirrors: crate::mirror::MirrorPods,
}

fn key(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or_default(),
        p.metadata.name.as_deref().unwrap_or_default()
    )
}

impl ApiSource {
    pub fn new(client: Client, node_name: impl Into<String>, updates: SourceSender) -> Self {
        Self {
            pods: Api::all(client),
            node_name: node_name.into(),
            updates,
            mirrors: Default::default(),
        }
    }

    /// Mirror pods seen go to `mirrors` (they are never run).
    pub fn with_mirrors(mut self, mirrors: crate::mirror::MirrorPods) -> Self {
        self.mirrors = mirrors;
        self
    }

    /// Runs until `cancel` fires or PodConfig is gone.
    pub async fn run(self, cancel: CancellationToken) {
        let config =
            watcher::Config::default().fields(&format!("spec.nodeName={}", self.node_name));
        let mut stream = watcher::watcher(self.pods.clone(), config)
            .default_backoff()
            .boxed();
        let mut current: BTreeMap<String, Pod> = BTreeMap::new();
        let mut relisting: Option<BTreeMap<String, Pod>> = None;
        loop {
            let ev = tokio::select! {
                _ = cancel.cancelled() => return,
                ev = stream.next() => ev,
            };
            let changed = match ev {
                None => return,
                Some(Err(e)) => {
                    warn!(error = %e, "pod watch failed; retrying");
                    false
                }
                Some(Ok(Event::Init)) => {
                    relisting = Some(BTreeMap::new());
                    false
                }
                Some(Ok(Event::InitApply(p))) => {
                    if let Some(r) = relisting.as_mut() {
                        r.insert(key(&p), p);
                    }
                    false
                }
                Some(Ok(Event::InitDone)) => {
                    if let Some(r) = relisting.take() {
                        current = r;
                    }
                    true
                }
                Some(Ok(Event::Apply(p))) => {
                    let k = key(&p);
                    let same = current.get(&k) == Some(&p);
                    current.insert(k, p);
                    !same
                }
                Some(Ok(Event::Delete(p))) => current.remove(&key(&p)).is_some(),
            };
            if changed {
                debug!(
                    pods = current.len(),
                    "api source: pods bound to this node changed"
                );
                let (mirrors, pods): (Vec<&Pod>, Vec<&Pod>) = current
                    .values()
                    .partition(|p| crate::mirror::is_mirror_pod(p));
                self.mirrors.set(
                    mirrors
                        .into_iter()
                        .map(|p| (crate::mirror::key(p), p.clone()))
                        .collect(),
                );
                let pods = pods.into_iter().cloned().collect();
                if self.updates.send(PodOperation::Set, pods).await.is_err() {
                    return;
                }
            }
        }
    }
}
