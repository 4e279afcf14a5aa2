//! Upstream `configmap.Manager` and `secret.Manager` (`pkg/kubelet/configmap`,
//! `pkg/kubelet/secret`, `pkg/kubelet/util/manager`): how the configMaps and secrets of the
//! registered pods are read, by the kubelet config's `configMapAndSecretChangeDetectionStrategy`:
//! `Watch` (the default; [`super::watch_cache`]), `Cache` (a GET per object at most once per TTL
//! and after each registration of a pod referring to it) or `Get` (a GET per read). Pods are
//! registered with the objects they refer to when the pod worker syncs them and unregistered
//! when they are gone.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::{Api, Client};
use parking_lot::Mutex;

use super::watch_cache::{ApiWatcher, ObjectCache, ObjectWatcher};

/// `configMapAndSecretChangeDetectionStrategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChangeDetectionStrategy {
    /// A GET per read.
    Get,
    /// GETs cached for a TTL (upstream's default TTL, one minute).
    Cache,
    /// One watch per referenced object (upstream's default).
    #[default]
    Watch,
}

impl std::str::FromStr for ChangeDetectionStrategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "Get" => Ok(Self::Get),
            "Cache" => Ok(Self::Cache),
            "Watch" | "" => Ok(Self::Watch),
            other => Err(format!(
                "unknown configMapAndSecretChangeDetectionStrategy {other:?}: must be one of Get, Cache, Watch"
            )),
        }
    }
}

/// Upstream `defaultTTL` of the `Cache` strategy (without the node's TTL annotation).
pub const CACHE_TTL: Duration = Duration::from_secs(60);

/// The objects of one kind for the `Cache` strategy (upstream `objectStore`).
struct TtlCache<K> {
    /// Upstream's group resource (`configmap`, `secret`).
    resource: &'static str,
    /// By (namespace, name): the references and the last read, if still valid.
    items: Mutex<HashMap<(String, String), TtlItem<K>>>,
}

type Fetched<K> = (Result<Option<K>, String>, Instant);

struct TtlItem<K> {
    refs: usize,
    data: Option<Fetched<K>>,
}

impl<K: super::watch_cache::Object> TtlCache<K> {
    fn new(resource: &'static str) -> Self {
        Self {
            resource,
            items: Mutex::default(),
        }
    }

    /// A new reference also invalidates the object: the next read fetches it.
    fn add_reference(&self, namespace: &str, name: &str) {
        let mut items = self.items.lock();
        let item = items
            .entry((namespace.to_string(), name.to_string()))
            .or_insert(TtlItem {
                refs: 0,
                data: None,
            });
        item.refs += 1;
        item.data = None;
    }

    fn delete_reference(&self, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        let mut items = self.items.lock();
        if let Some(item) = items.get_mut(&key) {
            item.refs = item.refs.saturating_sub(1);
            if item.refs == 0 {
                items.remove(&key);
            }
        }
    }

    async fn get(&self, client: &Client, namespace: &str, name: &str) -> Result<Option<K>, String> {
        let key = (namespace.to_string(), name.to_string());
        {
            let items = self.items.lock();
            let Some(item) = items.get(&key) else {
                return Err(format!("object {namespace:?}/{name:?} not registered"));
            };
            if let Some((v, at)) = &item.data
                && at.elapsed() < CACHE_TTL
            {
                return v.clone();
            }
        }
        tracing::trace!(resource = self.resource, namespace, name, "fetching");
        let v = get(&Api::namespaced(client.clone(), namespace), name).await;
        if let Some(item) = self.items.lock().get_mut(&key) {
            item.data = Some((v.clone(), Instant::now()));
        }
        v
    }
}

/// One GET.
async fn get<K>(api: &Api<K>, name: &str) -> Result<Option<K>, String>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.map_err(|e| e.to_string())
}

enum Backend {
    Get,
    Cache {
        config_maps: TtlCache<ConfigMap>,
        secrets: TtlCache<Secret>,
    },
    Watch {
        config_maps: ObjectCache<ConfigMap>,
        secrets: ObjectCache<Secret>,
    },
}

/// What a registered pod refers to: its namespace, configMaps and secrets.
#[derive(Debug, Clone, Default, PartialEq)]
struct Refs {
    namespace: String,
    config_maps: BTreeSet<String>,
    secrets: BTreeSet<String>,
}

struct Inner {
    client: Client,
    backend: Backend,
    /// Registered pods by UID.
    pods: Mutex<HashMap<String, Refs>>,
}

/// The configMap and secret manager of the kubelet (API-server mode). Cheap to clone; clones
/// share it.
#[derive(Clone)]
pub struct ObjectManager(Arc<Inner>);

impl std::fmt::Debug for ObjectManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectManager")
            .field("pods", &self.0.pods.lock().len())
            .finish_non_exhaustive()
    }
}

impl ObjectManager {
    /// A manager reading through `client` with `strategy`.
    pub fn new(client: Client, strategy: ChangeDetectionStrategy) -> Self {
        let watcher = Arc::new(ApiWatcher(client.clone()));
        Self::with_watchers(client, strategy, watcher.clone(), watcher)
    }

    /// A manager whose `Watch` strategy watches through the given watchers (tests).
    pub fn with_watchers(
        client: Client,
        strategy: ChangeDetectionStrategy,
        config_maps: Arc<dyn ObjectWatcher<ConfigMap>>,
        secrets: Arc<dyn ObjectWatcher<Secret>>,
    ) -> Self {
        let backend = match strategy {
            ChangeDetectionStrategy::Get => Backend::Get,
            ChangeDetectionStrategy::Cache => Backend::Cache {
                config_maps: TtlCache::new("configmap"),
                secrets: TtlCache::new("secret"),
            },
            ChangeDetectionStrategy::Watch => Backend::Watch {
                config_maps: ObjectCache::new("configmap", config_maps),
                secrets: ObjectCache::new("secret", secrets),
            },
        };
        Self(Arc::new(Inner {
            client,
            backend,
            pods: Mutex::default(),
        }))
    }

    /// The client (service account tokens).
    pub fn client(&self) -> &Client {
        &self.0.client
    }

    /// Upstream `RegisterPod`: `pod` refers to the objects it names now; references it no
    /// longer makes are dropped (after the new ones are added, so a shared watch stays up).
    pub fn register_pod(&self, pod: &Pod) {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return;
        };
        let (config_maps, secrets) = super::referenced(pod);
        let refs = Refs {
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            config_maps,
            secrets,
        };
        let mut pods = self.0.pods.lock();
        // Re-registering the same references changes nothing but the `Cache` strategy's
        // invalidation, which upstream does on pod updates, not on every sync.
        if pods.get(uid) == Some(&refs) {
            return;
        }
        self.add(uid, &refs);
        if let Some(old) = pods.insert(uid.to_string(), refs) {
            self.delete(uid, &old);
        }
    }

    /// Upstream `UnregisterPod`: pod `uid` is gone; objects no pod refers to any more are
    /// forgotten (their watches stop).
    pub fn unregister_pod(&self, uid: &str) {
        if let Some(old) = self.0.pods.lock().remove(uid) {
            self.delete(uid, &old);
        }
    }

    fn add(&self, uid: &str, r: &Refs) {
        let ns = &r.namespace;
        match &self.0.backend {
            Backend::Get => {}
            Backend::Cache {
                config_maps,
                secrets,
            } => {
                r.config_maps
                    .iter()
                    .for_each(|n| config_maps.add_reference(ns, n));
                r.secrets.iter().for_each(|n| secrets.add_reference(ns, n));
            }
            Backend::Watch {
                config_maps,
                secrets,
            } => {
                r.config_maps
                    .iter()
                    .for_each(|n| config_maps.add_reference(ns, n, uid));
                r.secrets
                    .iter()
                    .for_each(|n| secrets.add_reference(ns, n, uid));
            }
        }
    }

    fn delete(&self, uid: &str, r: &Refs) {
        let ns = &r.namespace;
        match &self.0.backend {
            Backend::Get => {}
            Backend::Cache {
                config_maps,
                secrets,
            } => {
                r.config_maps
                    .iter()
                    .for_each(|n| config_maps.delete_reference(ns, n));
                r.secrets
                    .iter()
                    .for_each(|n| secrets.delete_reference(ns, n));
            }
            Backend::Watch {
                config_maps,
                secrets,
            } => {
                r.config_maps
                    .iter()
                    .for_each(|n| config_maps.delete_reference(ns, n, uid));
                r.secrets
                    .iter()
                    .for_each(|n| secrets.delete_reference(ns, n, uid));
            }
        }
    }

    /// Upstream `GetConfigMap`: `Ok(None)` when it does not exist.
    pub async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ConfigMap>, String> {
        match &self.0.backend {
            Backend::Get => get(&Api::namespaced(self.0.client.clone(), namespace), name).await,
            Backend::Cache { config_maps, .. } => {
                config_maps.get(&self.0.client, namespace, name).await
            }
            Backend::Watch { config_maps, .. } => config_maps.get(namespace, name).await,
        }
    }

    /// Upstream `GetSecret`: `Ok(None)` when it does not exist.
    pub async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, String> {
        match &self.0.backend {
            Backend::Get => get(&Api::namespaced(self.0.client.clone(), namespace), name).await,
            Backend::Cache { secrets, .. } => secrets.get(&self.0.client, namespace, name).await,
            Backend::Watch { secrets, .. } => secrets.get(namespace, name).await,
        }
    }

    /// How many objects the `Watch` strategy watches (configMaps, secrets).
    pub fn watched(&self) -> (usize, usize) {
        match &self.0.backend {
            Backend::Watch {
                config_maps,
                secrets,
            } => (config_maps.watched(), secrets.watched()),
            _ => (0, 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::watch_cache::fake::FakeWatcher;
    use super::*;

    /// A client that is never called (the `Watch` strategy reads from the fake watchers).
    fn client() -> Client {
        let url = "http://127.0.0.1:9".parse().expect("url");
        Client::try_from(kube::Config::new(url)).expect("client")
    }

    fn pod(uid: &str, cms: &[&str]) -> Pod {
        let volumes: Vec<_> = cms
            .iter()
            .map(|c| serde_json::json!({"name": c, "configMap": {"name": c}}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "ns", "uid": uid},
            "spec": {"containers": [], "volumes": volumes}
        }))
        .expect("pod")
    }

    #[test]
    fn strategies_parse_like_upstream() {
        assert_eq!("Get".parse(), Ok(ChangeDetectionStrategy::Get));
        assert_eq!("Cache".parse(), Ok(ChangeDetectionStrategy::Cache));
        assert_eq!("Watch".parse(), Ok(ChangeDetectionStrategy::Watch));
        assert_eq!(
            ChangeDetectionStrategy::default(),
            ChangeDetectionStrategy::Watch
        );
        assert!("Poll".parse::<ChangeDetectionStrategy>().is_err());
    }

    #[tokio::test]
    async fn registered_pods_share_watches_and_unregistering_stops_them() {
        let cms = Arc::new(FakeWatcher::<ConfigMap>::default());
        let secrets = Arc::new(FakeWatcher::<Secret>::default());
        let m = ObjectManager::with_watchers(
            client(),
            ChangeDetectionStrategy::Watch,
            cms.clone(),
            secrets.clone(),
        );
        m.register_pod(&pod("a", &["shared", "only-a"]));
        m.register_pod(&pod("b", &["shared"]));
        // Every sync registers again: no new watch.
        m.register_pod(&pod("a", &["shared", "only-a"]));
        assert_eq!(cms.started(), 2);
        assert_eq!(m.watched(), (2, 0));
        // An update dropping a reference stops that watch only.
        m.register_pod(&pod("a", &["shared"]));
        assert_eq!((cms.stopped(), m.watched()), (1, (1, 0)));
        m.unregister_pod("a");
        assert_eq!(cms.stopped(), 1, "pod b still refers to it");
        cms.list("ns", "shared", vec![]);
        assert_eq!(m.config_map("ns", "shared").await, Ok(None));
        m.unregister_pod("b");
        assert_eq!((cms.stopped(), m.watched()), (2, (0, 0)));
        assert_eq!(secrets.started(), 0);
    }
}
