//! The API objects a pod refers to: the configMaps and secrets named by its volumes (also as
//! projected sources), `env[].valueFrom` and `envFrom`, and its `imagePullSecrets`, and its
//! service account tokens. Before each sync the pod worker registers the pod with the
//! kubelet's [`ObjectManager`] (upstream `configmap.Manager` / `secret.Manager`; by default one
//! shared watch per referenced object, [`watch_cache`]) and reads them from it into
//! [`ApiObjects`], so a running pod's configMap and secret volumes follow changes at the next
//! sync; volume setup and the environment read them from there. The PersistentVolumeClaims
//! its volumes name, and the PersistentVolumes they are bound to, are read with a GET at each
//! sync, as upstream's desired-state-of-world populator reads them (no watch), and resolved by
//! the volume manager. In standalone mode there is no client and every lookup fails with
//! upstream's "no kubeClient defined".

pub mod manager;
pub mod watch_cache;

pub use manager::{ChangeDetectionStrategy, ObjectManager};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use kube::{Api, Client};
use parking_lot::Mutex;

/// The objects fetched for one pod.
#[derive(Debug, Clone, Default)]
pub struct ApiObjects {
    /// False in standalone mode.
    available: bool,
    namespace: String,
    /// By name: the object, `None` when it does not exist, `Err` when it could not be read.
    config_maps: HashMap<String, Result<Option<ConfigMap>, String>>,
    secrets: HashMap<String, Result<Option<Secret>, String>>,
    /// Service account tokens by (audience, expirationSeconds).
    tokens: HashMap<(String, i64), Result<String, String>>,
    /// The PersistentVolumeClaims the pod's volumes name, by name, like `config_maps`.
    claims: HashMap<String, Result<Option<PersistentVolumeClaim>, String>>,
    /// The PersistentVolumes those claims are bound to, by name.
    volumes: HashMap<String, Result<Option<PersistentVolume>, String>>,
}

/// An object read for the pod, by name: `Ok(None)` when it does not exist, the read's error
/// when it failed.
fn lookup<'a, T>(
    objects: &'a HashMap<String, Result<Option<T>, String>>,
    name: &str,
) -> Result<Option<&'a T>, String> {
    match objects.get(name) {
        Some(Ok(o)) => Ok(o.as_ref()),
        Some(Err(e)) => Err(e.clone()),
        None => Ok(None),
    }
}

/// A service account token source's key: its audience (empty: the API server's) and lifetime
/// (upstream default 3600 s).
pub fn token_key(src: &k8s_openapi::api::core::v1::ServiceAccountTokenProjection) -> (String, i64) {
    (
        src.audience.clone().unwrap_or_default(),
        src.expiration_seconds.unwrap_or(3600),
    )
}

/// (namespace, service account, pod UID, audience, lifetime).
type TokenKey = (String, String, String, String, i64);

/// Service account tokens already issued, reused until 80 % of their lifetime passed (upstream
/// token manager), with the instant they are due for renewal.
#[derive(Debug, Clone, Default)]
pub struct TokenCache(Arc<Mutex<HashMap<TokenKey, (String, std::time::Instant)>>>);

/// Upstream's not-found wording (`configmap "x" not found`).
fn not_found(kind: &str, name: &str) -> String {
    format!("{kind} \"{name}\" not found")
}

impl ApiObjects {
    /// No API server: every lookup fails.
    pub fn standalone(namespace: &str) -> Self {
        Self {
            available: false,
            namespace: namespace.to_string(),
            ..Default::default()
        }
    }

    /// Objects given directly (tests).
    pub fn from_objects(
        namespace: &str,
        config_maps: Vec<ConfigMap>,
        secrets: Vec<Secret>,
    ) -> Self {
        let name = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            m.name.clone().unwrap_or_default()
        };
        Self {
            available: true,
            namespace: namespace.to_string(),
            config_maps: config_maps
                .into_iter()
                .map(|c| (name(&c.metadata), Ok(Some(c))))
                .collect(),
            secrets: secrets
                .into_iter()
                .map(|s| (name(&s.metadata), Ok(Some(s))))
                .collect(),
            tokens: HashMap::new(),
            claims: HashMap::new(),
            volumes: HashMap::new(),
        }
    }

    /// These objects with `claims` and `volumes` added (tests).
    pub fn with_persistent_volumes(
        mut self,
        claims: Vec<PersistentVolumeClaim>,
        volumes: Vec<PersistentVolume>,
    ) -> Self {
        for c in claims {
            let name = c.metadata.name.clone().unwrap_or_default();
            self.claims.insert(name, Ok(Some(c)));
        }
        for v in volumes {
            let name = v.metadata.name.clone().unwrap_or_default();
            self.volumes.insert(name, Ok(Some(v)));
        }
        self
    }

    /// The namespace of the pod these objects were read for.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The PersistentVolumeClaim `name` of the pod's namespace: `Ok(None)` when it does not
    /// exist.
    pub fn persistent_volume_claim(
        &self,
        name: &str,
    ) -> Result<Option<&PersistentVolumeClaim>, String> {
        if !self.available {
            return Err(format!(
                "couldn't get PersistentVolumeClaim {}/{name}, no kubeClient defined",
                self.namespace
            ));
        }
        lookup(&self.claims, name)
    }

    /// The PersistentVolume `name`: `Ok(None)` when it does not exist.
    pub fn persistent_volume(&self, name: &str) -> Result<Option<&PersistentVolume>, String> {
        if !self.available {
            return Err(format!(
                "couldn't get PersistentVolume {name}, no kubeClient defined"
            ));
        }
        lookup(&self.volumes, name)
    }

    /// The configMap `name`: `Ok(None)` when it does not exist.
    pub fn config_map(&self, name: &str) -> Result<Option<&ConfigMap>, String> {
        if !self.available {
            return Err(format!(
                "couldn't get configMap {}/{name}, no kubeClient defined",
                self.namespace
            ));
        }
        lookup(&self.config_maps, name)
    }

    /// The secret `name`: `Ok(None)` when it does not exist.
    pub fn secret(&self, name: &str) -> Result<Option<&Secret>, String> {
        if !self.available {
            return Err(format!(
                "couldn't get secret {}/{name}, no kubeClient defined",
                self.namespace
            ));
        }
        lookup(&self.secrets, name)
    }

    /// The service account token for a projected `serviceAccountToken` source.
    pub fn token(
        &self,
        src: &k8s_openapi::api::core::v1::ServiceAccountTokenProjection,
    ) -> Result<String, String> {
        if !self.available {
            return Err("cannot get a service account token, no kubeClient defined".into());
        }
        match self.tokens.get(&token_key(src)) {
            Some(r) => r.clone(),
            None => Err("service account token not requested".into()),
        }
    }

    /// A configMap's keys and values (`data` and `binaryData`), or the error a required one
    /// gives; `Ok(None)` for a missing optional one.
    pub fn config_map_data(
        &self,
        name: &str,
        optional: bool,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        match self.config_map(name)? {
            Some(c) => {
                let mut data: BTreeMap<String, Vec<u8>> = c
                    .data
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
                    .collect();
                for (k, v) in c.binary_data.iter().flatten() {
                    data.insert(k.clone(), v.0.clone());
                }
                Ok(Some(data))
            }
            None if optional => Ok(None),
            None => Err(not_found("configmap", name)),
        }
    }

    /// A secret's keys and values, like [`ApiObjects::config_map_data`].
    pub fn secret_data(
        &self,
        name: &str,
        optional: bool,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        match self.secret(name)? {
            Some(s) => {
                let mut data: BTreeMap<String, Vec<u8>> = s
                    .data
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.0.clone()))
                    .collect();
                for (k, v) in s.string_data.iter().flatten() {
                    data.insert(k.clone(), v.clone().into_bytes());
                }
                Ok(Some(data))
            }
            None if optional => Ok(None),
            None => Err(not_found("secret", name)),
        }
    }
}

impl ApiObjects {
    /// Credentials for pulling `image` from the pod's `imagePullSecrets` (of type
    /// `kubernetes.io/dockerconfigjson` or `kubernetes.io/dockercfg`), most specific first;
    /// upstream tries them before the node's own.
    pub fn pull_credentials(
        &self,
        pod: &Pod,
        image: &str,
    ) -> Vec<cri_proto::runtime::v1::AuthConfig> {
        let mut out = Vec::new();
        let names = pod
            .spec
            .iter()
            .flat_map(|s| s.image_pull_secrets.iter().flatten())
            .map(|r| r.name.as_str());
        for name in names {
            let Ok(Some(secret)) = self.secret(name) else {
                continue;
            };
            let key = match secret.type_.as_deref() {
                Some("kubernetes.io/dockercfg") => ".dockercfg",
                _ => ".dockerconfigjson",
            };
            let Some(data) = secret.data.as_ref().and_then(|d| d.get(key)) else {
                continue;
            };
            let text = String::from_utf8_lossy(&data.0);
            match crate::credentials::DockerKeyring::parse(
                &text,
                &format!("secret {}/{name}", self.namespace),
            ) {
                Ok(k) => out.extend(k.lookup(image)),
                Err(e) => tracing::warn!(secret = %name, error = %e, "unusable image pull secret"),
            }
        }
        out
    }
}

/// The configMap and secret names `pod` refers to.
pub fn referenced(pod: &Pod) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut cms, mut secrets) = (BTreeSet::new(), BTreeSet::new());
    let Some(spec) = pod.spec.as_ref() else {
        return (cms, secrets);
    };
    for v in spec.volumes.iter().flatten() {
        if let Some(c) = &v.config_map {
            cms.insert(c.name.clone());
        }
        if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            secrets.insert(s);
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(c) = &src.config_map {
                cms.insert(c.name.clone());
            }
            if let Some(s) = &src.secret {
                secrets.insert(s.name.clone());
            }
        }
    }
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in containers {
        for e in c.env_from.iter().flatten() {
            if let Some(r) = &e.config_map_ref {
                cms.insert(r.name.clone());
            }
            if let Some(r) = &e.secret_ref {
                secrets.insert(r.name.clone());
            }
        }
        for e in c.env.iter().flatten() {
            if let Some(vf) = &e.value_from {
                if let Some(k) = &vf.config_map_key_ref {
                    cms.insert(k.name.clone());
                }
                if let Some(k) = &vf.secret_key_ref {
                    secrets.insert(k.name.clone());
                }
            }
        }
    }
    for s in spec.image_pull_secrets.iter().flatten() {
        secrets.insert(s.name.clone());
    }
    cms.retain(|n| !n.is_empty());
    secrets.retain(|n| !n.is_empty());
    (cms, secrets)
}

/// Upstream `TokenRequest` for `pod`'s service account, bound to the pod.
async fn request_token(
    client: &Client,
    pod: &Pod,
    audience: &str,
    expiration: i64,
) -> Result<String, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".into());
    let api: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), ns);
    let req = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": if audience.is_empty() { vec![] } else { vec![audience.to_string()] },
            "expirationSeconds": expiration,
            "boundObjectRef": {
                "apiVersion": "v1", "kind": "Pod",
                "name": pod.metadata.name, "uid": pod.metadata.uid,
            },
        },
    });
    let resp: k8s_openapi::api::authentication::v1::TokenRequest = api
        .create_subresource("token", &sa, &kube::api::PostParams::default(), &req)
        .await
        .map_err(|e| format!("failed to fetch token: {e}"))?;
    resp.status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| "failed to fetch token: empty token".into())
}

/// Registers `pod` with `manager` and reads what it refers to from it (service account tokens
/// through `tokens`).
pub async fn fetch(manager: &ObjectManager, pod: &Pod, tokens: &TokenCache) -> ApiObjects {
    let client = manager.client();
    manager.register_pod(pod);
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let (cms, secrets) = referenced(pod);
    let mut out = ApiObjects {
        available: true,
        namespace: ns.clone(),
        ..Default::default()
    };
    for name in cms {
        let v = manager.config_map(&ns, &name).await;
        out.config_maps.insert(name, v);
    }
    for name in secrets {
        let v = manager.secret(&ns, &name).await;
        out.secrets.insert(name, v);
    }
    // Upstream `getPVCExtractPV` / `getPVSpec`: the claim, then the volume it is bound to.
    let claim_names: BTreeSet<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone())
        .collect();
    for name in claim_names {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
        let claim = api.get_opt(&name).await.map_err(|e| e.to_string());
        let bound_to = claim
            .as_ref()
            .ok()
            .and_then(Option::as_ref)
            .and_then(|c| c.spec.as_ref())
            .and_then(|s| s.volume_name.clone())
            .filter(|v| !v.is_empty());
        if let Some(pv) = bound_to
            && !out.volumes.contains_key(&pv)
        {
            let api: Api<PersistentVolume> = Api::all(client.clone());
            let got = api.get_opt(&pv).await.map_err(|e| e.to_string());
            out.volumes.insert(pv, got);
        }
        out.claims.insert(name, claim);
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_default();
    let sources = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.iter().flatten())
        .filter_map(|s| s.service_account_token.as_ref());
    for src in sources {
        let (aud, exp) = token_key(src);
        let key = (ns.clone(), sa.clone(), uid.clone(), aud.clone(), exp);
        let cached = tokens
            .0
            .lock()
            .get(&key)
            .cloned()
            .filter(|(_, refresh_at)| std::time::Instant::now() < *refresh_at);
        let token = match cached {
            Some((t, _)) => Ok(t),
            None => {
                let t = request_token(client, pod, &aud, exp).await;
                if let Ok(tok) = &t {
                    // Refreshed once 80 % of its lifetime passed.
                    let life = std::time::Duration::from_secs(u64::try_from(exp).unwrap_or(3600));
                    tokens.0.lock().insert(
                        key,
                        (tok.clone(), std::time::Instant::now() + life.mul_f64(0.8)),
                    );
                }
                t
            }
        };
        out.tokens.insert((aud, exp), token);
    }
    out
}

impl TokenCache {
    /// Forgets the tokens of pod `uid` (it is gone).
    pub fn forget(&self, uid: &str) {
        self.0.lock().retain(|k, _| k.2 != uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_come_from_volumes_env_and_pull_secrets() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "imagePullSecrets": [{"name": "regcred"}],
                "volumes": [
                    {"name": "a", "configMap": {"name": "cm-vol"}},
                    {"name": "b", "secret": {"secretName": "s-vol"}},
                    {"name": "c", "projected": {"sources": [
                        {"configMap": {"name": "cm-proj"}}, {"secret": {"name": "s-proj"}}]}}
                ],
                "containers": [{
                    "name": "c", "image": "i",
                    "envFrom": [{"configMapRef": {"name": "cm-from"}}],
                    "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s-env", "key": "k"}}}]
                }]
            }
        }))
        .unwrap();
        let (cms, secrets) = referenced(&pod);
        assert_eq!(
            cms.into_iter().collect::<Vec<_>>(),
            ["cm-from", "cm-proj", "cm-vol"]
        );
        assert_eq!(
            secrets.into_iter().collect::<Vec<_>>(),
            ["regcred", "s-env", "s-proj", "s-vol"]
        );
    }

    #[test]
    fn pull_secrets_give_credentials_for_their_registry() {
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "regcred"},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson":
                "eyJhdXRocyI6eyJyZWcuZXhhbXBsZTo1MDAwIjp7InVzZXJuYW1lIjoidSIsInBhc3N3b3JkIjoicCJ9fX0="}
        }))
        .unwrap();
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"imagePullSecrets": [{"name": "regcred"}, {"name": "missing"}],
                     "containers": []}
        }))
        .unwrap();
        let objs = ApiObjects::from_objects("ns", vec![], vec![secret]);
        let creds = objs.pull_credentials(&pod, "reg.example:5000/app:1");
        assert_eq!(creds.len(), 1);
        assert_eq!(
            (creds[0].username.as_str(), creds[0].password.as_str()),
            ("u", "p")
        );
        assert!(objs.pull_credentials(&pod, "other.example/app").is_empty());
    }

    #[test]
    fn lookups_follow_upstream_wording() {
        let standalone = ApiObjects::standalone("ns");
        assert_eq!(
            standalone.config_map_data("x", true).unwrap_err(),
            "couldn't get configMap ns/x, no kubeClient defined"
        );
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cfg"},
            "data": {"a": "1"},
            "binaryData": {"b": "AAE="}
        }))
        .unwrap();
        let objs = ApiObjects::from_objects("ns", vec![cm], vec![]);
        let data = objs.config_map_data("cfg", false).unwrap().unwrap();
        assert_eq!(data["a"], b"1");
        assert_eq!(data["b"], vec![0u8, 1]);
        assert_eq!(objs.config_map_data("nope", true).unwrap(), None);
        assert_eq!(
            objs.secret_data("nope", false).unwrap_err(),
            "secret \"nope\" not found"
        );
    }
}
