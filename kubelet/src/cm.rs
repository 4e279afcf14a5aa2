//! The container manager's pod-level part (upstream `pkg/kubelet/cm`: `qosContainerManager`,
//! `podContainerManager`, `qos.GetContainerOOMScoreAdjust`). It owns the cgroup layout of pods
//! by QoS class: Guaranteed pods under `<root>/kubepods/pod<uid>`, Burstable ones under
//! `<root>/kubepods/burstable/pod<uid>`, BestEffort ones under `<root>/kubepods/besteffort/
//! pod<uid>` (with the systemd driver, the matching `kubepods-burstable-pod<uid>.slice`
//! names), given to the runtime as the sandbox's cgroup parent; each container's
//! oom_score_adj from its pod's QoS class and memory request; and removing a pod's cgroup once
//! the pod is gone. The runtime creates the directories when it starts the sandbox.
//! Deviation: pod-level resource limits are not written (the containers' own limits apply).

use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::qos::get_pod_qos;
use crate::resource::parse_quantity_scaled;

/// Upstream `guaranteedOOMScoreAdj`.
pub const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
/// Upstream `besteffortOOMScoreAdj`.
pub const BESTEFFORT_OOM_SCORE_ADJ: i64 = 1000;
/// Upstream `defaultNodeAllocatableCgroupName`.
pub const KUBEPODS: &str = "kubepods";
/// Upstream's system-node-critical priority class name.
pub const SYSTEM_NODE_CRITICAL: &str = "system-node-critical";

/// Cgroup settings (`--cgroups-per-qos`, `--cgroup-driver`, `--cgroup-root`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupConfig {
    pub per_qos: bool,
    /// `cgroupfs` or `systemd`.
    pub driver: String,
    /// Empty means `/`.
    pub root: String,
}

impl Default for CgroupConfig {
    fn default() -> Self {
        Self {
            per_qos: true,
            driver: "cgroupfs".into(),
            root: String::new(),
        }
    }
}

/// The pod-level container manager.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerManager {
    pub config: CgroupConfig,
    /// The node's memory (bytes), for Burstable oom_score_adj.
    pub memory_capacity: u64,
}

impl ContainerManager {
    /// A manager with the node's memory read from `/proc/meminfo`.
    pub fn new(config: CgroupConfig) -> Self {
        let memory_capacity = crate::fsstats::mem_total(&crate::fsstats::read_meminfo());
        Self {
            config,
            memory_capacity,
        }
    }

    /// The name components of `pod`'s cgroup below the root (upstream `GetPodContainerName`).
    fn components(pod: &Pod) -> Vec<String> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let mut c = vec![KUBEPODS.to_string()];
        match get_pod_qos(pod) {
            "Burstable" => c.push("burstable".into()),
            "BestEffort" => c.push("besteffort".into()),
            _ => {}
        }
        c.push(format!("pod{uid}"));
        c
    }

    /// The cgroup parent the runtime gets for `pod`'s sandbox and containers; `None` without
    /// `--cgroups-per-qos` and a root (the runtime's default then).
    pub fn pod_cgroup_parent(&self, pod: &Pod) -> Option<String> {
        let root = self.config.root.trim_end_matches('/');
        if !self.config.per_qos {
            return (!root.is_empty()).then(|| root.to_string());
        }
        let parts = Self::components(pod);
        if self.config.driver == "systemd" {
            // Upstream `ToSystemd`: each level is a slice named by the path so far, the last
            // one is what the runtime gets; `-` in names become `_`.
            let escaped: Vec<String> = parts.iter().map(|p| p.replace('-', "_")).collect();
            return Some(format!("{}.slice", escaped.join("-")));
        }
        Some(format!("{root}/{}", parts.join("/")))
    }

    /// Upstream `GetContainerOOMScoreAdjust`.
    pub fn oom_score_adj(&self, pod: &Pod, container: &Container) -> i64 {
        let node_critical = pod
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref())
            == Some(SYSTEM_NODE_CRITICAL);
        if node_critical {
            return GUARANTEED_OOM_SCORE_ADJ;
        }
        match get_pod_qos(pod) {
            "Guaranteed" => return GUARANTEED_OOM_SCORE_ADJ,
            "BestEffort" => return BESTEFFORT_OOM_SCORE_ADJ,
            _ => {}
        }
        let request = container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("memory"))
            .and_then(|q| parse_quantity_scaled(&q.0, 1.0))
            .unwrap_or(0)
            .max(0) as i128;
        let capacity = i128::from(self.memory_capacity);
        if capacity == 0 {
            return BESTEFFORT_OOM_SCORE_ADJ - 1;
        }
        let adj = 1000 - (1000 * request) / capacity;
        // Burstable pods always score above Guaranteed ones and below BestEffort ones.
        let adj = adj.max(1000 + i128::from(GUARANTEED_OOM_SCORE_ADJ));
        let adj = if adj == i128::from(BESTEFFORT_OOM_SCORE_ADJ) {
            adj - 1
        } else {
            adj
        };
        adj as i64
    }

    /// Removes the now empty cgroup directories of the pod `uid` (cgroupfs driver; the
    /// runtime removed the containers' own), under whichever QoS class it was (an orphan's
    /// class is unknown). Best effort: a directory still in use stays. `None` when this
    /// manager does not manage pod cgroups (so did not try: upstream's cgroup manager
    /// `Destroy`), else whether none of the pod's cgroup directories is left.
    pub fn remove_pod_cgroups(&self, uid: &str) -> Option<bool> {
        let rels = self.pod_cgroup_rels(uid)?;
        // Every path is tried, whatever the others gave.
        let mut gone = true;
        for rel in &rels {
            gone &= remove_cgroup_dirs(Path::new("/sys/fs/cgroup"), rel);
        }
        Some(gone)
    }

    /// The cgroup paths pod `uid` may have, one per QoS class (an orphan's class is unknown),
    /// when this manager manages pod cgroups (cgroupfs driver, per-QoS cgroups).
    fn pod_cgroup_rels(&self, uid: &str) -> Option<[String; 3]> {
        if self.config.driver != "cgroupfs" || !self.config.per_qos || uid.is_empty() {
            return None;
        }
        let root = self.config.root.trim_end_matches('/');
        Some(
            ["", "burstable/", "besteffort/"].map(|qos| format!("{root}/{KUBEPODS}/{qos}pod{uid}")),
        )
    }

    /// Sends SIGKILL to every process in pod `uid`'s cgroups and the cgroups below them,
    /// under whichever QoS class (cgroupfs driver): upstream's `podContainerManagerImpl.Destroy`
    /// does so (`tryKillingCgroupProcesses`) before it removes the cgroups of a pod that should
    /// not be running. Such a process is one its runtime lost track of, e.g. a `runc init` left
    /// waiting for a start that never came when dockerd died between a container's create and
    /// start. How many processes were signalled.
    pub fn kill_pod_cgroup_processes(&self, uid: &str) -> usize {
        let Some(rels) = self.pod_cgroup_rels(uid) else {
            return 0;
        };
        let pids: std::collections::BTreeSet<i32> = rels
            .iter()
            .flat_map(|rel| cgroup_procs(Path::new("/sys/fs/cgroup"), rel))
            .collect();
        let me = std::process::id() as i32;
        let mut killed = 0;
        for pid in pids.into_iter().filter(|p| *p > 1 && *p != me) {
            // SAFETY: kill(2) has no memory-safety preconditions.
            if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                tracing::info!(pod_uid = %uid, pid, "killed a process left in the cgroup of a pod no source knows");
                killed += 1;
            }
        }
        killed
    }
}

/// The pids in `cgroup.procs` of `<mount>/<controller>/<rel>` (every hierarchy) or
/// `<mount>/<rel>` (v2), and of the cgroups below it, down to [`MAX_CGROUP_DEPTH`].
fn cgroup_procs(mount: &Path, rel: &str) -> std::collections::BTreeSet<i32> {
    fn walk(dir: &Path, depth: usize, out: &mut std::collections::BTreeSet<i32>) {
        if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            out.extend(procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
        }
        if depth >= MAX_CGROUP_DEPTH {
            return;
        }
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    walk(&e.path(), depth + 1, out);
                }
            }
        }
    }
    let mut out = std::collections::BTreeSet::new();
    for d in hierarchy_dirs(mount, rel) {
        walk(&d, 0, &mut out);
    }
    out
}

/// `<mount>/<rel>` (cgroup v2) and `<mount>/<controller>/<rel>` for every v1 hierarchy: those
/// that exist.
fn hierarchy_dirs(mount: &Path, rel: &str) -> Vec<std::path::PathBuf> {
    let rel = rel.trim_start_matches('/');
    let mut dirs = vec![mount.join(rel)];
    if let Ok(rd) = std::fs::read_dir(mount) {
        dirs.extend(
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path().join(rel)),
        );
    }
    dirs.retain(|d| d.is_dir());
    dirs
}

/// `rmdir` of `<mount>/<controller>/<rel>` for every cgroup v1 controller hierarchy, or of
/// `<mount>/<rel>` on cgroup v2, with the cgroups below it first (a container's cgroup its
/// runtime left when it was killed mid-removal; upstream libcontainer's `RemovePath` removes
/// the subtree the same way). Whether none of them is left.
pub fn remove_cgroup_dirs(mount: &Path, rel: &str) -> bool {
    let mut gone = true;
    for d in hierarchy_dirs(mount, rel) {
        gone &= remove_cgroup_tree(&d, 0);
    }
    gone
}

/// How deep below a pod cgroup [`remove_cgroup_tree`] goes (pod, container, and a runtime's
/// own sub-cgroups).
const MAX_CGROUP_DEPTH: usize = 4;

/// `rmdir` of the cgroup directory `dir` after its child cgroups, deepest first: whether it is
/// gone. One with processes stays (`EBUSY`), and so do its ancestors.
fn remove_cgroup_tree(dir: &Path, depth: usize) -> bool {
    if depth < MAX_CGROUP_DEPTH
        && let Ok(rd) = std::fs::read_dir(dir)
    {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path(), depth + 1);
            }
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => {
            tracing::debug!(dir = %dir.display(), error = %e, "pod cgroup not removed");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn pod(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Pod {
        let q = |m: &[(&str, &str)]| {
            (!m.is_empty()).then(|| {
                m.iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        let mut p = Pod::default();
        p.metadata.uid = Some("1234-5678".into());
        p.spec = Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: q(requests),
                    limits: q(limits),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    fn manager(driver: &str, root: &str) -> ContainerManager {
        ContainerManager {
            config: CgroupConfig {
                per_qos: true,
                driver: driver.into(),
                root: root.into(),
            },
            memory_capacity: 1000 << 20,
        }
    }

    #[test]
    fn cgroup_parents_follow_the_qos_class_like_upstream() {
        let m = manager("cgroupfs", "");
        let be = pod(&[], &[]);
        let bu = pod(&[("memory", "100Mi")], &[]);
        let gu = pod(
            &[("memory", "1Gi"), ("cpu", "1")],
            &[("memory", "1Gi"), ("cpu", "1")],
        );
        assert_eq!(
            m.pod_cgroup_parent(&be).unwrap(),
            "/kubepods/besteffort/pod1234-5678"
        );
        assert_eq!(
            m.pod_cgroup_parent(&bu).unwrap(),
            "/kubepods/burstable/pod1234-5678"
        );
        assert_eq!(m.pod_cgroup_parent(&gu).unwrap(), "/kubepods/pod1234-5678");
        assert_eq!(
            manager("cgroupfs", "/custom/")
                .pod_cgroup_parent(&gu)
                .unwrap(),
            "/custom/kubepods/pod1234-5678"
        );
        assert_eq!(
            manager("systemd", "").pod_cgroup_parent(&bu).unwrap(),
            "kubepods-burstable-pod1234_5678.slice"
        );
        let mut flat = manager("cgroupfs", "");
        flat.config.per_qos = false;
        assert_eq!(flat.pod_cgroup_parent(&bu), None);
    }

    #[test]
    fn oom_score_adj_by_qos_and_request() {
        let m = manager("cgroupfs", "");
        let c = |p: &Pod| p.spec.as_ref().unwrap().containers[0].clone();
        let be = pod(&[], &[]);
        assert_eq!(m.oom_score_adj(&be, &c(&be)), 1000);
        let gu = pod(
            &[("memory", "1Gi"), ("cpu", "1")],
            &[("memory", "1Gi"), ("cpu", "1")],
        );
        assert_eq!(m.oom_score_adj(&gu, &c(&gu)), -997);
        // 100Mi of 1000Mi: 1000 - 100 = 900.
        let bu = pod(&[("memory", "100Mi")], &[]);
        assert_eq!(m.oom_score_adj(&bu, &c(&bu)), 900);
        // Requesting (nearly) everything stays above Guaranteed.
        let big = pod(&[("memory", "2000Mi")], &[]);
        assert_eq!(m.oom_score_adj(&big, &c(&big)), 3);
        // Requesting nothing stays below BestEffort.
        let cpu_only = pod(&[("cpu", "100m")], &[]);
        assert_eq!(m.oom_score_adj(&cpu_only, &c(&cpu_only)), 999);
        let mut critical = be.clone();
        critical.spec.as_mut().unwrap().priority_class_name = Some(SYSTEM_NODE_CRITICAL.into());
        assert_eq!(m.oom_score_adj(&critical, &c(&critical)), -997);
    }

    #[test]
    fn the_processes_of_a_pod_cgroup_tree_are_found_in_every_hierarchy() {
        let d = tempfile::tempdir().unwrap();
        let pod = "kubepods/besteffort/podx";
        for (dir, procs) in [
            (format!("pids/{pod}"), ""),
            // A container cgroup with a `runc init` its runtime forgot, seen in two hierarchies.
            (format!("pids/{pod}/c1"), "9672\n"),
            (format!("memory/{pod}/c1"), "9672\n"),
            (format!("memory/{pod}/c2/sub"), "12\n13\n"),
            // Another pod's: not this one's.
            ("pids/kubepods/besteffort/podxy/c".to_string(), "77\n"),
        ] {
            std::fs::create_dir_all(d.path().join(&dir)).unwrap();
            std::fs::write(d.path().join(&dir).join("cgroup.procs"), procs).unwrap();
        }
        let pids: Vec<i32> = cgroup_procs(d.path(), &format!("/{pod}"))
            .into_iter()
            .collect();
        assert_eq!(pids, vec![12, 13, 9672]);
        assert!(cgroup_procs(d.path(), "/kubepods/burstable/podx").is_empty());
    }

    #[test]
    fn empty_pod_cgroups_are_removed_in_every_hierarchy() {
        let d = tempfile::tempdir().unwrap();
        for ctrl in ["cpu", "memory"] {
            std::fs::create_dir_all(d.path().join(ctrl).join("kubepods/burstable/podx")).unwrap();
        }
        // A container's cgroup its runtime left behind (killed mid-removal) goes with the pod's.
        std::fs::create_dir_all(d.path().join("cpu/kubepods/burstable/podx/left/sub")).unwrap();
        // A busy one (here: a regular file, which rmdir refuses like a cgroup with processes).
        std::fs::create_dir_all(d.path().join("pids/kubepods/burstable/podx/busy")).unwrap();
        std::fs::write(
            d.path().join("pids/kubepods/burstable/podx/busy/procs"),
            "1",
        )
        .unwrap();
        assert!(
            !remove_cgroup_dirs(d.path(), "/kubepods/burstable/podx"),
            "one is still in use"
        );
        assert!(!d.path().join("cpu/kubepods/burstable/podx").exists());
        assert!(!d.path().join("memory/kubepods/burstable/podx").exists());
        assert!(
            d.path().join("cpu/kubepods/burstable").exists(),
            "QoS level kept"
        );
        assert!(
            d.path().join("pids/kubepods/burstable/podx").exists(),
            "busy one kept"
        );
        std::fs::remove_file(d.path().join("pids/kubepods/burstable/podx/busy/procs")).unwrap();
        assert!(remove_cgroup_dirs(d.path(), "/kubepods/burstable/podx"));
        assert!(!d.path().join("pids/kubepods/burstable/podx").exists());
    }
}
