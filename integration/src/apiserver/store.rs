//! The fixture API server's object store: objects as JSON by (resource, namespace, name), one
//! global resourceVersion counter like etcd's revision, a bounded history of changes so watches
//! can resume from a resourceVersion (older than the history: 410 Gone, as after an etcd
//! compaction), and a broadcast of new changes to open watches. It applies the API server's
//! write rules that the kubelet depends on: uid, creationTimestamp and resourceVersion set on
//! create; optimistic concurrency and uid/resourceVersion preconditions; the status
//! subresource (status-only writes, and main-resource writes that keep the old status); graceful
//! pod deletion (deletionTimestamp and deletionGracePeriodSeconds first, removal at grace 0);
//! a Secret's `stringData` written into `data` (base64), as the API server stores it.

use std::collections::{BTreeMap, VecDeque};

use parking_lot::{Mutex, MutexGuard};
use serde_json::{Value, json};
use tokio::sync::broadcast;

/// Errors shaped after the API server's `Status` reasons.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum StoreError {
    #[error("{resource} \"{name}\" not found")]
    NotFound { resource: String, name: String },
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists { resource: String, name: String },
    #[error("Operation cannot be fulfilled on {resource} \"{name}\": {message}")]
    Conflict {
        resource: String,
        name: String,
        message: String,
    },
    #[error("too old resource version: {requested} ({oldest})")]
    Gone { requested: u64, oldest: u64 },
    #[error("{0}")]
    Invalid(String),
}

impl StoreError {
    /// HTTP code and `Status.reason`.
    pub fn code_reason(&self) -> (u16, &'static str) {
        match self {
            StoreError::NotFound { .. } => (404, "NotFound"),
            StoreError::AlreadyExists { .. } => (409, "AlreadyExists"),
            StoreError::Conflict { .. } => (409, "Conflict"),
            StoreError::Gone { .. } => (410, "Expired"),
            StoreError::Invalid(_) => (422, "Invalid"),
        }
    }

    /// The `Status` object the API server would send.
    pub fn status(&self) -> Value {
        let (code, reason) = self.code_reason();
        let mut details = json!({});
        if let StoreError::NotFound { resource, name }
        | StoreError::AlreadyExists { resource, name }
        | StoreError::Conflict { resource, name, .. } = self
        {
            details = json!({"name": name, "kind": resource});
        }
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": reason,
            "details": details,
            "code": code,
        })
    }
}

/// Where an object lives.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub resource: String,
    /// Empty for cluster-scoped resources.
    pub namespace: String,
    pub name: String,
}

/// One change, as a watch reports it.
#[derive(Debug, Clone)]
pub struct Change {
    pub rv: u64,
    pub key: Key,
    /// ADDED, MODIFIED or DELETED.
    pub kind: &'static str,
    pub object: Value,
}

/// How many changes are kept for watches to resume from.
pub const HISTORY: usize = 10_000;

struct Inner {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Change>,
    /// Watches may resume from any resourceVersion >= this.
    oldest: u64,
    uid_seq: u64,
}

/// The objects, their history and the live change feed.
pub struct Store {
    inner: Mutex<Inner>,
    feed: broadcast::Sender<Change>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn rv_of(v: &Value) -> Option<&str> {
    v.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
}

fn set(v: &mut Value, pointer: &[&str], value: Value) {
    let mut cur = v;
    for (i, k) in pointer.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let Some(map) = cur.as_object_mut() else {
            return;
        };
        if i + 1 == pointer.len() {
            map.insert(k.to_string(), value);
            return;
        }
        cur = map.entry(k.to_string()).or_insert_with(|| json!({}));
    }
}

/// What the API server does with a Secret's write-only `stringData`: each value, base64
/// encoded, goes into `data` (over a `data` entry of the same key), and `stringData` is not
/// stored.
fn fold_string_data(secret: &mut Value) {
    use base64::Engine as _;
    let Some(obj) = secret.as_object_mut() else {
        return;
    };
    let Some(Value::Object(strings)) = obj.remove("stringData") else {
        return;
    };
    let data = obj.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    if let Some(data) = data.as_object_mut() {
        for (k, v) in strings {
            let text = v.as_str().unwrap_or_default();
            let encoded = base64::engine::general_purpose::STANDARD.encode(text);
            data.insert(k, Value::String(encoded));
        }
    }
}

/// Resources whose `status` is written only through the status subresource.
pub fn has_status_subresource(resource: &str) -> bool {
    matches!(resource, "pods" | "nodes")
}

impl Store {
    pub fn new() -> Self {
        let (feed, _) = broadcast::channel(4096);
        Self {
            inner: Mutex::new(Inner {
                rv: 1,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                oldest: 1,
                uid_seq: 0,
            }),
            feed,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    /// The current resourceVersion (of the whole store, as a list reports it).
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    fn record(&self, inner: &mut Inner, key: Key, kind: &'static str, object: Value) {
        let change = Change {
            rv: inner.rv,
            key,
            kind,
            object,
        };
        inner.history.push_back(change.clone());
        while inner.history.len() > HISTORY {
            if let Some(c) = inner.history.pop_front() {
                inner.oldest = c.rv;
            }
        }
        let _ = self.feed.send(change);
    }

    /// Objects of `resource` (in `namespace`, or all namespaces when None) and the list's
    /// resourceVersion.
    pub fn list(&self, resource: &str, namespace: Option<&str>) -> (Vec<Value>, u64) {
        let inner = self.lock();
        let items = inner
            .objects
            .iter()
            .filter(|(k, _)| k.resource == resource && namespace.is_none_or(|n| k.namespace == n))
            .map(|(_, v)| v.clone())
            .collect();
        (items, inner.rv)
    }

    pub fn get(&self, key: &Key) -> Result<Value, StoreError> {
        self.lock()
            .objects
            .get(key)
            .cloned()
            .ok_or_else(|| StoreError::NotFound {
                resource: key.resource.clone(),
                name: key.name.clone(),
            })
    }

    /// Create: metadata filled in as the API server does.
    pub fn create(&self, key: Key, mut obj: Value) -> Result<Value, StoreError> {
        if key.name.is_empty() {
            return Err(StoreError::Invalid("metadata.name: Required value".into()));
        }
        let mut inner = self.lock();
        if inner.objects.contains_key(&key) {
            return Err(StoreError::AlreadyExists {
                resource: key.resource.clone(),
                name: key.name.clone(),
            });
        }
        inner.rv += 1;
        inner.uid_seq += 1;
        let uid = format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            (inner.uid_seq as u32) ^ 0x5eed_0000,
            inner.rv & 0xffff,
            inner.uid_seq & 0xfff,
            (inner.rv >> 4) & 0xfff,
            chrono::Utc::now().timestamp_micros() as u64 & 0xffff_ffff_ffff
        );
        set(&mut obj, &["metadata", "name"], json!(key.name));
        if !key.namespace.is_empty() {
            set(&mut obj, &["metadata", "namespace"], json!(key.namespace));
        }
        set(&mut obj, &["metadata", "uid"], json!(uid));
        set(
            &mut obj,
            &["metadata", "creationTimestamp"],
            json!(now_rfc3339()),
        );
        set(
            &mut obj,
            &["metadata", "resourceVersion"],
            json!(inner.rv.to_string()),
        );
        set(&mut obj, &["metadata", "generation"], json!(1));
        if key.resource == "secrets" {
            fold_string_data(&mut obj);
        }
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("deletionTimestamp");
            m.remove("deletionGracePeriodSeconds");
        }
        inner.objects.insert(key.clone(), obj.clone());
        self.record(&mut inner, key, "ADDED", obj.clone());
        Ok(obj)
    }

    /// Update (PUT or an applied PATCH): `new` replaces the object if its resourceVersion (when
    /// given) is current. `status_only` is the status subresource: only `.status` changes.
    /// Writes to the main resource of a kind with a status subresource keep the old status.
    pub fn update(
        &self,
        key: &Key,
        mut new: Value,
        status_only: bool,
    ) -> Result<Value, StoreError> {
        let mut inner = self.lock();
        let old = inner
            .objects
            .get(key)
            .cloned()
            .ok_or_else(|| StoreError::NotFound {
                resource: key.resource.clone(),
                name: key.name.clone(),
            })?;
        if let Some(want) = rv_of(&new)
            && !want.is_empty()
            && Some(want) != rv_of(&old)
        {
            return Err(StoreError::Conflict {
                resource: key.resource.clone(),
                name: key.name.clone(),
                message: "the object has been modified; please apply your changes to the latest version and try again".into(),
            });
        }
        if let Some(uid) = new.pointer("/metadata/uid").and_then(Value::as_str)
            && Some(uid) != old.pointer("/metadata/uid").and_then(Value::as_str)
        {
            return Err(StoreError::Conflict {
                resource: key.resource.clone(),
                name: key.name.clone(),
                message: format!("Precondition failed: UID in precondition: {uid}"),
            });
        }
        let merged = if status_only {
            let mut o = old.clone();
            set(
                &mut o,
                &["status"],
                new.get("status").cloned().unwrap_or(json!({})),
            );
            o
        } else {
            // Immutable or server-owned metadata stays.
            for f in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "namespace",
                "name",
            ] {
                match old.pointer(&format!("/metadata/{f}")) {
                    Some(v) => set(&mut new, &["metadata", f], v.clone()),
                    None => {
                        if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                            m.remove(f);
                        }
                    }
                }
            }
            if has_status_subresource(&key.resource) {
                match old.get("status") {
                    Some(s) => set(&mut new, &["status"], s.clone()),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
            let spec_changed = old.get("spec") != new.get("spec");
            let generation = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1)
                + i64::from(spec_changed);
            set(&mut new, &["metadata", "generation"], json!(generation));
            if key.resource == "secrets" {
                fold_string_data(&mut new);
            }
            new
        };
        // A write that changes nothing is not a change (no new resourceVersion, no event).
        let mut cmp_old = old.clone();
        let mut cmp_new = merged.clone();
        for v in [&mut cmp_old, &mut cmp_new] {
            if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
        }
        if cmp_old == cmp_new {
            return Ok(old);
        }
        let mut merged = merged;
        inner.rv += 1;
        set(
            &mut merged,
            &["metadata", "resourceVersion"],
            json!(inner.rv.to_string()),
        );
        inner.objects.insert(key.clone(), merged.clone());
        self.record(&mut inner, key.clone(), "MODIFIED", merged.clone());
        Ok(merged)
    }

    /// Delete with the API server's pod semantics: a pod bound to a node with a grace period is
    /// only marked (deletionTimestamp, deletionGracePeriodSeconds) and removed later by a
    /// delete with grace 0 (the kubelet's, once its containers are gone). `grace` None means the
    /// pod's terminationGracePeriodSeconds (30 when unset). Preconditions on uid and
    /// resourceVersion are checked.
    pub fn delete(
        &self,
        key: &Key,
        grace: Option<i64>,
        precondition_uid: Option<&str>,
        precondition_rv: Option<&str>,
    ) -> Result<Value, StoreError> {
        let mut inner = self.lock();
        let old = inner
            .objects
            .get(key)
            .cloned()
            .ok_or_else(|| StoreError::NotFound {
                resource: key.resource.clone(),
                name: key.name.clone(),
            })?;
        if let Some(uid) = precondition_uid
            && Some(uid) != old.pointer("/metadata/uid").and_then(Value::as_str)
        {
            return Err(StoreError::Conflict {
                resource: key.resource.clone(),
                name: key.name.clone(),
                message: format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    old.pointer("/metadata/uid")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                ),
            });
        }
        if let Some(rv) = precondition_rv
            && Some(rv) != rv_of(&old)
        {
            return Err(StoreError::Conflict {
                resource: key.resource.clone(),
                name: key.name.clone(),
                message: format!("Precondition failed: ResourceVersion in precondition: {rv}"),
            });
        }
        if key.resource == "pods" {
            let bound = old
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            let phase = old
                .pointer("/status/phase")
                .and_then(Value::as_str)
                .unwrap_or("");
            let terminal = phase == "Succeeded" || phase == "Failed";
            let grace = grace.unwrap_or_else(|| {
                old.pointer("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
                    .unwrap_or(30)
            });
            let current = old
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64);
            if bound && !terminal && grace > 0 {
                // Graceful: mark, or shorten an earlier mark; never lengthen it.
                if current.is_some_and(|c| c <= grace) {
                    return Ok(old);
                }
                let mut marked = old.clone();
                let at = chrono::Utc::now() + chrono::Duration::seconds(grace);
                set(
                    &mut marked,
                    &["metadata", "deletionTimestamp"],
                    json!(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                );
                set(
                    &mut marked,
                    &["metadata", "deletionGracePeriodSeconds"],
                    json!(grace),
                );
                inner.rv += 1;
                set(
                    &mut marked,
                    &["metadata", "resourceVersion"],
                    json!(inner.rv.to_string()),
                );
                inner.objects.insert(key.clone(), marked.clone());
                self.record(&mut inner, key.clone(), "MODIFIED", marked.clone());
                return Ok(marked);
            }
        }
        inner.objects.remove(key);
        inner.rv += 1;
        let mut gone = old;
        set(
            &mut gone,
            &["metadata", "resourceVersion"],
            json!(inner.rv.to_string()),
        );
        self.record(&mut inner, key.clone(), "DELETED", gone.clone());
        Ok(gone)
    }

    /// Changes after `rv` (matching `filter`) and a receiver for the ones to come, taken under
    /// one lock so nothing falls between them. Err(Gone) when `rv` is older than the history.
    #[allow(clippy::type_complexity)]
    pub fn watch_from(
        &self,
        rv: u64,
        filter: &dyn Fn(&Change) -> bool,
    ) -> Result<(Vec<Change>, broadcast::Receiver<Change>), StoreError> {
        let inner = self.lock();
        if rv < inner.oldest.saturating_sub(1) {
            return Err(StoreError::Gone {
                requested: rv,
                oldest: inner.oldest,
            });
        }
        let past = inner
            .history
            .iter()
            .filter(|c| c.rv > rv && filter(c))
            .cloned()
            .collect();
        Ok((past, self.feed.subscribe()))
    }

    /// Forgets the history (as an etcd compaction does): watches resuming from an older
    /// resourceVersion get 410 Gone.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.history.clear();
        inner.oldest = inner.rv + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_key(name: &str) -> Key {
        Key {
            resource: "pods".into(),
            namespace: "default".into(),
            name: name.into(),
        }
    }

    fn bound_pod(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
               "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}})
    }

    #[test]
    fn create_sets_server_metadata_and_rejects_duplicates() {
        let s = Store::new();
        let p = s.create(pod_key("a"), bound_pod("a")).expect("create");
        assert!(p.pointer("/metadata/uid").is_some());
        assert_eq!(p.pointer("/metadata/namespace"), Some(&json!("default")));
        assert_eq!(rv_of(&p), Some("2"));
        let e = s.create(pod_key("a"), bound_pod("a")).expect_err("dup");
        assert_eq!(e.code_reason(), (409, "AlreadyExists"));
    }

    #[test]
    fn secret_string_data_is_stored_as_data() {
        let s = Store::new();
        let key = Key {
            resource: "secrets".into(),
            namespace: "default".into(),
            name: "s".into(),
        };
        let secret = json!({"metadata": {"name": "s"},
            "data": {"kept": "YQ==", "token": "b2xk"},
            "stringData": {"token": "s3cr3t", "mode": "a&b"}});
        let got = s.create(key.clone(), secret).expect("create");
        assert_eq!(got.get("stringData"), None);
        assert_eq!(
            got["data"],
            json!({"kept": "YQ==", "token": "czNjcjN0", "mode": "YSZi"})
        );
        let mut upd = got.clone();
        set(&mut upd, &["stringData"], json!({"kept": "b"}));
        let got = s.update(&key, upd, false).expect("update");
        assert_eq!(got.get("stringData"), None);
        assert_eq!(got["data"]["kept"], "Yg==");
    }

    #[test]
    fn stale_resource_versions_conflict() {
        let s = Store::new();
        let p = s.create(pod_key("a"), bound_pod("a")).expect("create");
        let mut upd = p.clone();
        set(&mut upd, &["spec", "activeDeadlineSeconds"], json!(5));
        s.update(&pod_key("a"), upd.clone(), false).expect("update");
        let e = s.update(&pod_key("a"), upd, false).expect_err("stale");
        assert_eq!(e.code_reason(), (409, "Conflict"));
    }

    #[test]
    fn status_is_written_only_through_the_subresource() {
        let s = Store::new();
        let p = s.create(pod_key("a"), bound_pod("a")).expect("create");
        let mut with_status = p.clone();
        set(&mut with_status, &["status"], json!({"phase": "Running"}));
        set(
            &mut with_status,
            &["metadata", "resourceVersion"],
            json!(""),
        );
        let main = s
            .update(&pod_key("a"), with_status.clone(), false)
            .expect("main");
        assert_eq!(
            main.get("status"),
            None,
            "main resource writes keep the old status"
        );
        let st = s.update(&pod_key("a"), with_status, true).expect("status");
        assert_eq!(st.pointer("/status/phase"), Some(&json!("Running")));
        // Writing the same status again is no change at all.
        let rv = rv_of(&st).map(str::to_string);
        let again = s.update(&pod_key("a"), st.clone(), true).expect("same");
        assert_eq!(rv_of(&again).map(str::to_string), rv);
    }

    #[test]
    fn bound_pods_are_deleted_gracefully() {
        let s = Store::new();
        let p = s.create(pod_key("a"), bound_pod("a")).expect("create");
        let uid = p
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        let marked = s.delete(&pod_key("a"), None, None, None).expect("delete");
        assert_eq!(
            marked.pointer("/metadata/deletionGracePeriodSeconds"),
            Some(&json!(30))
        );
        assert!(
            s.get(&pod_key("a")).is_ok(),
            "still there during its grace period"
        );
        let e = s
            .delete(&pod_key("a"), Some(0), Some("other-uid"), None)
            .expect_err("precondition");
        assert_eq!(e.code_reason(), (409, "Conflict"));
        s.delete(&pod_key("a"), Some(0), uid.as_deref(), None)
            .expect("final");
        assert!(s.get(&pod_key("a")).is_err());
    }

    #[test]
    fn watches_resume_from_history_until_compacted() {
        let s = Store::new();
        let start = s.resource_version();
        s.create(pod_key("a"), bound_pod("a")).expect("create");
        s.create(pod_key("b"), bound_pod("b")).expect("create");
        let (past, _rx) = s.watch_from(start, &|_| true).expect("watch");
        assert_eq!(
            past.iter().map(|c| c.key.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        s.compact();
        let e = s.watch_from(start, &|_| true).expect_err("gone");
        assert_eq!(e.code_reason().0, 410);
        let now = s.resource_version();
        assert!(s.watch_from(now, &|_| true).is_ok());
    }
}
