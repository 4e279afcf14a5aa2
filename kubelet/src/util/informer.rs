//! A cluster-wide informer for one API object type (upstream's shared informers with their
//! listers and `HasSynced`, as the kubelet keeps for services and RuntimeClasses): kube-runtime's
//! reflector store, fed a watcher's events (a relist replaces it whole once complete). Cheap to
//! clone; clones share the store. [`Informer::run`] keeps it equal to the API server's objects
//! until cancelled, resuming a broken watch (relisting when it must).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

/// The objects of one type as the API server's watch last told them.
pub struct Informer<K: Resource<DynamicType = ()> + Clone + 'static> {
    reader: reflector::Store<K>,
    writer: Arc<parking_lot::Mutex<reflector::store::Writer<K>>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Self {
            reader: self.reader.clone(),
            writer: Arc::clone(&self.writer),
        }
    }
}

impl<K> Default for Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    fn default() -> Self {
        let (reader, writer) = reflector::store();
        Self {
            reader,
            writer: Arc::new(parking_lot::Mutex::new(writer)),
        }
    }
}

impl<K> std::fmt::Debug for Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync,
    K: 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer")
            .field("kind", &K::kind(&()))
            .field("objects", &self.reader.len())
            .field("synced", &self.has_synced())
            .finish()
    }
}

impl<K> Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync,
    K: 'static,
{
    /// One event of the watch.
    pub fn apply_event(&self, event: &watcher::Event<K>) {
        self.writer.lock().apply_watcher_event(event);
    }

    /// A complete listing: the store becomes exactly `objects` and counts as synced.
    pub fn replace(&self, objects: impl IntoIterator<Item = K>) {
        self.apply_event(&watcher::Event::Init);
        for o in objects {
            self.apply_event(&watcher::Event::InitApply(o));
        }
        self.apply_event(&watcher::Event::InitDone);
    }

    /// An object was added or changed.
    pub fn apply(&self, o: K) {
        self.apply_event(&watcher::Event::Apply(o));
    }

    /// An object was deleted.
    pub fn delete(&self, o: &K) {
        self.apply_event(&watcher::Event::Delete(o.clone()));
    }

    /// Has a complete listing arrived (upstream `HasSynced`)?
    pub fn has_synced(&self) -> bool {
        use futures::FutureExt as _;
        self.reader
            .wait_until_ready()
            .now_or_never()
            .is_some_and(|r| r.is_ok())
    }

    /// Waits at most `limit` for the first complete listing; true once it has arrived.
    pub async fn wait_synced(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, self.reader.wait_until_ready())
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Every object known.
    pub fn list(&self) -> Vec<K> {
        self.reader.state().iter().map(|o| (**o).clone()).collect()
    }

    /// One of the objects (for an informer of one object), if any.
    pub fn first(&self) -> Option<Arc<K>> {
        self.reader.state().into_iter().next()
    }

    /// The cluster-scoped object `name`, if known.
    pub fn get(&self, name: &str) -> Option<Arc<K>> {
        self.reader.get(&ObjectRef::new(name))
    }

    /// Keeps the store equal to what `api` lists (selected by `config`) until `cancel` fires. A
    /// broken watch is resumed (relisting when it must, the relist replacing the store whole).
    pub async fn run(self, api: Api<K>, config: watcher::Config, cancel: CancellationToken) {
        let mut stream = watcher::watcher(api, config).default_backoff().boxed();
        loop {
            let ev = tokio::select! {
                _ = cancel.cancelled() => return,
                ev = stream.next() => ev,
            };
            match ev {
                None => return,
                Some(Err(e)) => {
                    tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying")
                }
                Some(Ok(e)) => self.apply_event(&e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::node::v1::RuntimeClass;

    fn rc(name: &str, handler: &str) -> RuntimeClass {
        RuntimeClass {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            handler: handler.into(),
            ..Default::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn objects_are_found_by_name_once_listed_and_follow_changes() {
        let inf = Informer::<RuntimeClass>::default();
        assert!(!inf.has_synced());
        assert!(!inf.wait_synced(Duration::from_secs(1)).await);
        inf.replace([rc("a", "runc"), rc("b", "kata")]);
        assert!(inf.has_synced() && inf.wait_synced(Duration::from_secs(1)).await);
        assert_eq!(inf.get("b").map(|o| o.handler.clone()), Some("kata".into()));
        inf.apply(rc("b", "gvisor"));
        assert_eq!(
            inf.get("b").map(|o| o.handler.clone()),
            Some("gvisor".into())
        );
        inf.delete(&rc("a", "runc"));
        assert!(inf.get("a").is_none());
        assert_eq!(inf.list().len(), 1);
        inf.replace([rc("c", "")]);
        assert!(inf.get("b").is_none(), "a relist replaces the store whole");
    }
}
