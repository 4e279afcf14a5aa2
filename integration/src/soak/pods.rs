//! The soak's pods: static pod manifests with unique uids (`<run>-<name>`), each with a
//! disk-backed and a memory-backed (tmpfs mount) emptyDir and a container that logs a line and
//! sleeps; the churn — at random moments from a seeded generator, a new pod, a pod deleted, or
//! a pod edited (its container replaced) — and the "keepers", pods no one touches, whose
//! containers must survive every kill of the kubelet and dockershim: their container ids and
//! restart counts as the kubelet's `/pods` reports them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::RngExt;
use rand::rngs::StdRng;
use serde::Serialize;

/// What the churn did.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ChurnCounts {
    pub added: u64,
    pub deleted: u64,
    pub edited: u64,
}

impl ChurnCounts {
    pub fn total(&self) -> u64 {
        self.added + self.deleted + self.edited
    }
}

/// A static pod manifest: `name` with uid `uid`; `generation` is in the container's command,
/// so a new generation is a new container spec (an edit replaces the container). The container
/// sleeps for good: a keeper whose command ended (a `sleep 3600` did, every hour) would be
/// restarted by the kubelet and counted as an unexpected restart.
pub fn manifest(name: &str, uid: &str, image: &str, generation: u64) -> String {
    let script =
        format!("trap 'exit 0' TERM; echo generation {generation}; sleep 2147483647 & wait");
    let command = serde_json::to_string(&["sh", "-c", &script]).unwrap_or_default();
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  uid: {uid}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: {image}
    imagePullPolicy: IfNotPresent
    command: {command}
    volumeMounts:
    - name: scratch
      mountPath: /scratch
    - name: mem
      mountPath: /mem
  volumes:
  - name: scratch
    emptyDir: {{}}
  - name: mem
    emptyDir:
      medium: Memory
      sizeLimit: 1Mi
"
    )
}

/// The churned pods of a run and the manifests they live in.
pub struct Churn {
    run: String,
    image: String,
    manifests: PathBuf,
    max_pods: usize,
    next: u64,
    /// name -> generation of the pods whose manifest exists.
    live: BTreeMap<String, u64>,
    pub counts: ChurnCounts,
}

impl Churn {
    pub fn new(run: &str, image: &str, manifests: &Path, max_pods: usize) -> Churn {
        Churn {
            run: run.to_string(),
            image: image.to_string(),
            manifests: manifests.to_path_buf(),
            max_pods: max_pods.max(1),
            next: 0,
            live: BTreeMap::new(),
            counts: ChurnCounts::default(),
        }
    }

    /// The uid of pod `name`.
    pub fn uid(&self, name: &str) -> String {
        format!("{}-{name}", self.run)
    }

    fn write(&self, name: &str, generation: u64) -> std::io::Result<()> {
        let text = manifest(name, &self.uid(name), &self.image, generation);
        // Written aside and renamed: the kubelet never reads half a manifest.
        let tmp = self.manifests.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, self.manifests.join(format!("{name}.yaml")))
    }

    /// One random change: a new pod (always when none is left, never at `max_pods`), a pod
    /// deleted or a pod edited.
    pub fn step(&mut self, rng: &mut StdRng) -> std::io::Result<()> {
        let roll: u32 = rng.random_range(0..100);
        let n = self.live.len();
        if n == 0 || (n < self.max_pods && roll < 45) {
            let name = format!("churn{}", self.next);
            self.next += 1;
            self.write(&name, 0)?;
            self.live.insert(name, 0);
            self.counts.added += 1;
            return Ok(());
        }
        let i = rng.random_range(0..n);
        let Some(name) = self.live.keys().nth(i).cloned() else {
            return Ok(());
        };
        if roll < 75 {
            std::fs::remove_file(self.manifests.join(format!("{name}.yaml")))?;
            self.live.remove(&name);
            self.counts.deleted += 1;
        } else {
            let generation = self.live.get(&name).copied().unwrap_or(0) + 1;
            self.write(&name, generation)?;
            self.live.insert(name, generation);
            self.counts.edited += 1;
        }
        Ok(())
    }

    /// The uids of the pods that should run now.
    pub fn live_uids(&self) -> Vec<String> {
        self.live.keys().map(|n| self.uid(n)).collect()
    }
}

/// A keeper's containers as the kubelet reports them: name -> (container id, restart count).
pub type KeeperState = BTreeMap<String, (String, i64)>;

/// The containers of pod `p` (as `/pods` gives it), when every one of them runs and is ready.
pub fn running_containers(p: &serde_json::Value) -> Option<KeeperState> {
    if !crate::kubelet_proc::pod_ready(p) {
        return None;
    }
    let mut out = KeeperState::new();
    for c in p["status"]["containerStatuses"].as_array()? {
        c["state"]["running"].as_object()?;
        out.insert(
            c["name"].as_str()?.to_string(),
            (
                c["containerID"].as_str()?.to_string(),
                c["restartCount"].as_i64()?,
            ),
        );
    }
    (!out.is_empty()).then_some(out)
}

/// The states of every pod of `uids` that runs, by uid, from the kubelet at `port`.
pub async fn running_states(port: u16, uids: &[String]) -> BTreeMap<String, KeeperState> {
    crate::kubelet_proc::pods(port)
        .await
        .unwrap_or_default()
        .iter()
        .filter_map(|p| {
            let uid = p["metadata"]["uid"].as_str()?;
            uids.iter()
                .any(|u| u == uid)
                .then(|| Some((uid.to_string(), running_containers(p)?)))?
        })
        .collect()
}

/// The keepers whose containers differ between `before` and `after` (new container id or
/// restart count): each as "uid: before -> after".
pub fn changed(
    before: &BTreeMap<String, KeeperState>,
    after: &BTreeMap<String, KeeperState>,
) -> Vec<String> {
    before
        .iter()
        .filter_map(|(uid, b)| {
            let a = after.get(uid);
            (a != Some(b)).then(|| format!("{uid}: {b:?} -> {a:?}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn the_manifest_is_a_pod_with_two_empty_dirs() {
        let text = manifest("p", "run-p", "busybox", 3);
        assert!(text.contains("uid: run-p"));
        assert!(text.contains("echo generation 3"));
        assert!(text.contains("medium: Memory"));
        assert_ne!(text, manifest("p", "run-p", "busybox", 4));
    }

    #[test]
    fn churn_never_exceeds_its_pods_and_counts_what_it_did() {
        let d = tempfile::tempdir().expect("tmp");
        let mut c = Churn::new("r", "busybox", d.path(), 3);
        let mut rng = StdRng::seed_from_u64(1);
        for _ in 0..200 {
            c.step(&mut rng).expect("step");
            assert!(c.live.len() <= 3);
        }
        let files = std::fs::read_dir(d.path()).expect("dir").count();
        assert_eq!(files, c.live.len(), "one manifest per live pod");
        assert_eq!(c.counts.added - c.counts.deleted, c.live.len() as u64);
        assert!(c.counts.edited > 0 && c.counts.deleted > 0);
        // The same seed makes the same churn.
        let d2 = tempfile::tempdir().expect("tmp");
        let mut c2 = Churn::new("r", "busybox", d2.path(), 3);
        let mut rng2 = StdRng::seed_from_u64(1);
        for _ in 0..200 {
            c2.step(&mut rng2).expect("step");
        }
        assert_eq!(c2.live, c.live);
    }

    #[test]
    fn a_keeper_changes_with_a_new_id_or_restart_count() {
        let pod = |id: &str, restarts: i64| {
            serde_json::json!({
                "metadata": {"uid": "u"},
                "status": {"phase": "Running", "containerStatuses": [
                    {"name": "app", "ready": true, "containerID": id,
                     "restartCount": restarts, "state": {"running": {}}}
                ]}
            })
        };
        let s = |p: serde_json::Value| {
            BTreeMap::from([("u".to_string(), running_containers(&p).expect("running"))])
        };
        assert!(changed(&s(pod("a", 0)), &s(pod("a", 0))).is_empty());
        assert_eq!(changed(&s(pod("a", 0)), &s(pod("b", 0))).len(), 1);
        assert_eq!(changed(&s(pod("a", 0)), &s(pod("a", 1))).len(), 1);
        assert_eq!(changed(&s(pod("a", 0)), &BTreeMap::new()).len(), 1);
        let mut waiting = pod("a", 0);
        waiting["status"]["containerStatuses"][0]["ready"] = false.into();
        assert!(running_containers(&waiting).is_none());
    }
}
