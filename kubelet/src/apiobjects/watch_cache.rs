//! Upstream `objectCache` (`pkg/kubelet/util/manager/watch_based_manager.go`), the `Watch`
//! change-detection strategy: one watch per referenced object, shared by every pod referring to
//! it. The watch (kube-runtime's watcher, a list then a watch with fieldSelector
//! `metadata.name=<name>` in the object's namespace, resumed on errors) starts when the first
//! pod refers to the object and stops when the last reference is deleted; reads come from its
//! reflector store, waiting (bounded) for its first listing.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;

/// Upstream's wait for a new watch's first listing (`wait.PollImmediate(..., time.Second, ...)`).
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(1);

/// What can be watched and cached: a namespaced API object type (`ConfigMap`, `Secret`).
pub trait Object:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Object for K where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}

/// Stops its object's watch when dropped.
pub type WatchGuard = Box<dyn Send + Sync>;

/// Starts the watch of one object, feeding `writer` (a trait so the reference counting is
/// testable without an API server).
pub trait ObjectWatcher<K: Object>: Send + Sync {
    /// Watches `namespace/name` into `writer` until the returned guard is dropped.
    fn start(&self, namespace: &str, name: &str, writer: reflector::store::Writer<K>)
    -> WatchGuard;
}

/// The API server's watch of one object (upstream's reflector with a `metadata.name` field
/// selector).
pub struct ApiWatcher(pub Client);

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<K: Object> ObjectWatcher<K> for ApiWatcher {
    fn start(
        &self,
        namespace: &str,
        name: &str,
        mut writer: reflector::store::Writer<K>,
    ) -> WatchGuard {
        let api: Api<K> = Api::namespaced(self.0.clone(), namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let (ns, name) = (namespace.to_string(), name.to_string());
        let task = tokio::spawn(async move {
            let mut stream = watcher::watcher(api, config).default_backoff().boxed();
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(e) => writer.apply_watcher_event(&e),
                    Err(e) => {
                        tracing::warn!(namespace = %ns, name = %name, kind = %K::kind(&()), error = %e, "object watch failed; retrying")
                    }
                }
            }
        });
        Box::new(AbortOnDrop(task.abort_handle()))
    }
}

/// One watched object: the pods referring to it (by UID, counted like upstream's `refMap`),
/// its store and its watch.
struct Item<K: Object> {
    refs: HashMap<String, usize>,
    store: Store<K>,
    _watch: WatchGuard,
}

/// The watched objects of one kind (upstream `objectCache`).
pub struct ObjectCache<K: Object> {
    /// Upstream's group resource in messages (`configmap`, `secret`).
    resource: &'static str,
    watcher: Arc<dyn ObjectWatcher<K>>,
    items: Mutex<HashMap<(String, String), Item<K>>>,
    sync_timeout: Duration,
}

impl<K: Object> ObjectCache<K> {
    /// An empty cache whose watches `watcher` starts.
    pub fn new(resource: &'static str, watcher: Arc<dyn ObjectWatcher<K>>) -> Self {
        Self {
            resource,
            watcher,
            items: Mutex::default(),
            sync_timeout: SYNC_TIMEOUT,
        }
    }

    /// Upstream `AddReference`: pod `from` refers to `namespace/name`; the first reference
    /// starts the object's watch.
    pub fn add_reference(&self, namespace: &str, name: &str, from: &str) {
        let mut items = self.items.lock();
        let item = items
            .entry((namespace.to_string(), name.to_string()))
            .or_insert_with(|| {
                tracing::debug!(namespace, name, kind = %K::kind(&()), "starting object watch");
                let (store, writer) = reflector::store();
                let watch = self.watcher.start(namespace, name, writer);
                Item {
                    refs: HashMap::new(),
                    store,
                    _watch: watch,
                }
            });
        *item.refs.entry(from.to_string()).or_default() += 1;
    }

    /// Upstream `DeleteReference`: one reference of pod `from` is gone; the last reference
    /// stops the object's watch.
    pub fn delete_reference(&self, namespace: &str, name: &str, from: &str) {
        let key = (namespace.to_string(), name.to_string());
        let mut items = self.items.lock();
        let Some(item) = items.get_mut(&key) else {
            return;
        };
        if let Some(n) = item.refs.get_mut(from) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                item.refs.remove(from);
            }
        }
        if item.refs.is_empty() {
            tracing::debug!(namespace, name, kind = %K::kind(&()), "stopping object watch");
            items.remove(&key);
        }
    }

    /// Upstream `Get`: the object as its watch last saw it, `Ok(None)` when it does not exist;
    /// waits up to a second for the watch's first listing.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Option<K>, String> {
        let store = self
            .items
            .lock()
            .get(&(namespace.to_string(), name.to_string()))
            .map(|i| i.store.clone())
            .ok_or_else(|| format!("object {namespace:?}/{name:?} not registered"))?;
        match tokio::time::timeout(self.sync_timeout, store.wait_until_ready()).await {
            Ok(Ok(())) => {}
            _ => {
                return Err(format!(
                    "failed to sync {} cache: timed out waiting for the condition",
                    self.resource
                ));
            }
        }
        Ok(store
            .get(&ObjectRef::new(name).within(namespace))
            .map(|o| (*o).clone()))
    }

    /// How many objects are watched.
    pub fn watched(&self) -> usize {
        self.items.lock().len()
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A watcher whose events the test feeds.

    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Records the watches started and stopped; hands their writers to the test.
    pub struct FakeWatcher<K: Object> {
        pub writers: Mutex<HashMap<(String, String), reflector::store::Writer<K>>>,
        pub started: AtomicUsize,
        pub stopped: Arc<AtomicUsize>,
    }

    impl<K: Object> Default for FakeWatcher<K> {
        fn default() -> Self {
            Self {
                writers: Mutex::default(),
                started: AtomicUsize::new(0),
                stopped: Arc::default(),
            }
        }
    }

    struct Stop(Arc<AtomicUsize>);

    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl<K: Object> ObjectWatcher<K> for FakeWatcher<K> {
        fn start(
            &self,
            namespace: &str,
            name: &str,
            writer: reflector::store::Writer<K>,
        ) -> WatchGuard {
            self.started.fetch_add(1, Ordering::SeqCst);
            self.writers
                .lock()
                .insert((namespace.to_string(), name.to_string()), writer);
            Box::new(Stop(Arc::clone(&self.stopped)))
        }
    }

    impl<K: Object> FakeWatcher<K> {
        /// The watch of `namespace/name` delivers `event`.
        pub fn event(&self, namespace: &str, name: &str, event: watcher::Event<K>) {
            if let Some(w) = self
                .writers
                .lock()
                .get_mut(&(namespace.to_string(), name.to_string()))
            {
                w.apply_watcher_event(&event);
            }
        }

        /// The watch of `namespace/name` lists `objects`.
        pub fn list(&self, namespace: &str, name: &str, objects: Vec<K>) {
            self.event(namespace, name, watcher::Event::Init);
            for o in objects {
                self.event(namespace, name, watcher::Event::InitApply(o));
            }
            self.event(namespace, name, watcher::Event::InitDone);
        }

        pub fn started(&self) -> usize {
            self.started.load(Ordering::SeqCst)
        }

        pub fn stopped(&self) -> usize {
            self.stopped.load(Ordering::SeqCst)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeWatcher;
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: &str, v: &str) -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns"}, "data": {"k": v}
        }))
        .expect("configmap")
    }

    fn cache() -> (Arc<FakeWatcher<ConfigMap>>, ObjectCache<ConfigMap>) {
        let fake = Arc::new(FakeWatcher::default());
        let cache = ObjectCache::new("configmap", Arc::clone(&fake) as Arc<dyn ObjectWatcher<_>>);
        (fake, cache)
    }

    #[tokio::test]
    async fn pods_sharing_an_object_share_one_watch_until_the_last_is_gone() {
        let (fake, cache) = cache();
        cache.add_reference("ns", "cfg", "pod-a");
        cache.add_reference("ns", "cfg", "pod-b");
        // A re-registration of the same pod adds before it deletes (upstream `RegisterPod`).
        cache.add_reference("ns", "cfg", "pod-a");
        cache.delete_reference("ns", "cfg", "pod-a");
        assert_eq!(fake.started(), 1);
        assert_eq!(cache.watched(), 1);
        fake.list("ns", "cfg", vec![cm("cfg", "1")]);
        let got = cache
            .get("ns", "cfg")
            .await
            .expect("synced")
            .expect("exists");
        assert_eq!(got.data.expect("data")["k"], "1");
        cache.delete_reference("ns", "cfg", "pod-a");
        assert_eq!(fake.stopped(), 0, "pod-b still refers to it");
        cache.delete_reference("ns", "cfg", "pod-b");
        assert_eq!(fake.stopped(), 1);
        assert_eq!(cache.watched(), 0);
        assert_eq!(
            cache.get("ns", "cfg").await.unwrap_err(),
            "object \"ns\"/\"cfg\" not registered"
        );
        // A new reference starts a new watch.
        cache.add_reference("ns", "cfg", "pod-c");
        assert_eq!(fake.started(), 2);
    }

    #[tokio::test]
    async fn reads_wait_for_the_first_listing() {
        let (fake, cache) = cache();
        let cache = Arc::new(cache);
        cache.add_reference("ns", "cfg", "pod-a");
        let reader = {
            let cache = Arc::clone(&cache);
            tokio::spawn(async move { cache.get("ns", "cfg").await })
        };
        tokio::task::yield_now().await;
        assert!(!reader.is_finished());
        fake.list("ns", "cfg", vec![cm("cfg", "1")]);
        let got = reader.await.expect("join").expect("synced");
        assert!(got.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_that_never_lists_fails_like_upstream() {
        let (_fake, cache) = cache();
        cache.add_reference("ns", "cfg", "pod-a");
        assert_eq!(
            cache.get("ns", "cfg").await.unwrap_err(),
            "failed to sync configmap cache: timed out waiting for the condition"
        );
    }

    #[tokio::test]
    async fn updates_and_deletions_are_read_from_the_watch() {
        let (fake, cache) = cache();
        cache.add_reference("ns", "cfg", "pod-a");
        cache.add_reference("ns", "missing", "pod-a");
        fake.list("ns", "cfg", vec![cm("cfg", "1")]);
        fake.list("ns", "missing", vec![]);
        assert_eq!(cache.get("ns", "missing").await, Ok(None));
        fake.event("ns", "cfg", watcher::Event::Apply(cm("cfg", "2")));
        let got = cache
            .get("ns", "cfg")
            .await
            .expect("synced")
            .expect("exists");
        assert_eq!(got.data.expect("data")["k"], "2");
        fake.event("ns", "cfg", watcher::Event::Delete(cm("cfg", "2")));
        assert_eq!(cache.get("ns", "cfg").await, Ok(None));
    }
}
