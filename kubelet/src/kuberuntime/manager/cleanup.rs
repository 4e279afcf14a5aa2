//! What a pod leaves on the node outside the runtime once its containers and sandboxes are
//! gone: its pod cgroups, its volumes and pod directory (`<root>/pods/<uid>`) and its log
//! directory. The pod's worker removes them when it has terminated the pod (upstream
//! `syncTerminatedPod` and the garbage collector); housekeeping removes those of pods whose
//! termination was cut short, the kubelet killed after the runtime's removal and before these
//! (upstream `cleanupOrphanedPodDirs` and `cleanupOrphanedPodCgroups`). A directory under
//! `<root>/pods` marks a pod this kubelet ran, so housekeeping touches no other kubelet's pods:
//! the pod directory goes last, once the cgroups are gone; a process still in the cgroups of
//! such a pod (one its runtime lost track of) is killed, as upstream's `Destroy` does, and a
//! cgroup still busy is retried.

use std::path::PathBuf;

use super::KubeGenericRuntimeManager;

impl KubeGenericRuntimeManager {
    /// The uids of the pods with a directory under `<root>/pods`.
    pub fn pod_dir_uids(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.root_dir.join("pods")) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|uid| !uid.is_empty() && !uid.starts_with('.'))
            .collect()
    }

    /// The log directories (`<namespace>_<name>_<uid>`) of pod `uid` under the pod log root:
    /// for a pod known by its uid only.
    pub fn pod_log_dirs_of(&self, uid: &str) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.pod_logs_root) else {
            return Vec::new();
        };
        let suffix = format!("_{uid}");
        entries
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.ends_with(&suffix) && n.len() > suffix.len())
            })
            .map(|e| e.path())
            .collect()
    }

    /// Removes pod `uid`'s log directories `logs` and, when `with_pod_dir`, its pod directory
    /// with its volumes unmounted. Whether everything asked for is gone.
    pub fn remove_pod_dirs(&self, uid: &str, logs: &[PathBuf], with_pod_dir: bool) -> bool {
        if uid.is_empty() {
            return false;
        }
        let pod_dir = with_pod_dir.then(|| self.pod_dir(uid));
        let mut gone = true;
        for dir in logs.iter().chain(pod_dir.as_ref()) {
            if dir.exists()
                && let Err(e) = crate::volumemanager::remove_pod_dir(dir)
            {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot remove pod directory");
                gone = false;
            }
        }
        gone
    }

    /// Upstream `cleanupOrphanedPodCgroups` and `cleanupOrphanedPodDirs` for one pod this
    /// kubelet ran that nothing knows any more (no source, no worker, nothing on the runtime):
    /// its cgroups, log directories and, once the cgroups are gone, its pod directory.
    pub fn clean_up_orphaned_pod(&self, uid: &str) -> bool {
        let mut cgroups_gone = self.cm.remove_pod_cgroups(uid) != Some(false);
        if !cgroups_gone && self.cm.kill_pod_cgroup_processes(uid) > 0 {
            // Upstream `Destroy`: the processes killed, the cgroups go once they are reaped
            // (here, or at the next housekeeping).
            std::thread::sleep(std::time::Duration::from_millis(100));
            cgroups_gone = self.cm.remove_pod_cgroups(uid) != Some(false);
        }
        let logs = self.pod_log_dirs_of(uid);
        let gone = self.remove_pod_dirs(uid, &logs, cgroups_gone) && cgroups_gone;
        if gone {
            tracing::info!(pod_uid = %uid, "cleaned up what was left of a pod no source knows");
        } else {
            // Tried again at every housekeeping.
            tracing::debug!(pod_uid = %uid, "a pod no source knows still has cgroups in use");
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_orphaned_pods_directories_are_found_by_uid_and_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_fake, runtime) = KubeGenericRuntimeManager::fake(dir.path()).await;
        for d in [
            "kubelet/pods/u1/volumes/x",
            "kubelet/pods/u2",
            "logs/ns_a_u1/c",
            "logs/ns_b_u12",
        ] {
            std::fs::create_dir_all(dir.path().join(d)).expect("mkdir");
        }
        let mut uids = runtime.pod_dir_uids();
        uids.sort();
        assert_eq!(uids, vec!["u1", "u2"]);
        assert_eq!(
            runtime.pod_log_dirs_of("u1"),
            vec![dir.path().join("logs/ns_a_u1")],
            "u12's directory is not u1's"
        );
        // The fake's container manager manages no cgroups: nothing keeps the pod directory.
        assert!(runtime.clean_up_orphaned_pod("u1"));
        assert!(!dir.path().join("kubelet/pods/u1").exists());
        assert!(!dir.path().join("logs/ns_a_u1").exists());
        assert!(dir.path().join("logs/ns_b_u12").exists());
        assert!(dir.path().join("kubelet/pods/u2").exists());
        // The log directories only: the pod directory stays (its cgroups are still busy).
        std::fs::create_dir_all(dir.path().join("logs/ns_c_u2")).expect("mkdir");
        let logs = runtime.pod_log_dirs_of("u2");
        assert!(runtime.remove_pod_dirs("u2", &logs, false));
        assert!(dir.path().join("kubelet/pods/u2").exists());
        assert!(!dir.path().join("logs/ns_c_u2").exists());
    }
}
