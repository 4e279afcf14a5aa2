//! What a soak checks once every pod is deleted: nothing of any pod may be left. Each check is
//! exact because everything the soak's node writes is its own — its runtime's containers and
//! sandboxes (CRI, and `docker ps -a` on the private dockerd), its CNI network's host-local
//! IPs and CNI result cache files, dockershim's sandbox checkpoints, the kubelet's pod log
//! directories (`/var/log/pods/<ns>_<name>_<uid>` with the run's uids), its pod directories
//! (`<root>/pods/<uid>`, volumes included), mounts under the kubelet's root and the runtime's
//! directories (`/proc/self/mountinfo`), the pods' cgroups under the kubelet's own
//! `--cgroup-root` in every hierarchy, veths on the network's bridge, and containerd's shims.

use std::path::{Path, PathBuf};

use cri_proto::runtime::v1 as cri;
use serde::Serialize;

use crate::soak::node::Node;

/// One thing left behind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Leak {
    /// What kind of thing: "container", "sandbox", "pod IP", "CNI cache file", "checkpoint",
    /// "log directory", "pod directory", "mount", "cgroup", "veth", "shim".
    pub kind: String,
    pub what: String,
}

fn leak(kind: &str, what: impl Into<String>) -> Leak {
    Leak {
        kind: kind.to_string(),
        what: what.into(),
    }
}

/// Where the cgroup hierarchies are mounted.
pub const CGROUP_MOUNT: &str = "/sys/fs/cgroup";
/// Where the kubelet keeps pod logs.
pub const POD_LOGS: &str = "/var/log/pods";

/// Everything of the soak `run` (its uids start with `<run>-`) left on `node`, whose kubelet
/// puts pod cgroups under `cgroup_root`.
pub async fn find(node: &Node, run: &str, cgroup_root: &str) -> Vec<Leak> {
    let mut out = Vec::new();
    match crate::runtimes::clients(&node.endpoint).await {
        Ok((mut rt, _)) => {
            match rt
                .list_containers(cri::ListContainersRequest { filter: None })
                .await
            {
                Ok(r) => out.extend(r.into_inner().containers.into_iter().map(|c| {
                    let name = c.metadata.map(|m| m.name).unwrap_or_default();
                    leak("container", format!("{} ({name})", c.id))
                })),
                Err(e) => out.push(leak("container", format!("ListContainers failed: {e}"))),
            }
            match rt
                .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
                .await
            {
                Ok(r) => out.extend(r.into_inner().items.into_iter().map(|s| {
                    let name = s.metadata.map(|m| m.name).unwrap_or_default();
                    leak("sandbox", format!("{} ({name})", s.id))
                })),
                Err(e) => out.push(leak("sandbox", format!("ListPodSandbox failed: {e}"))),
            }
        }
        Err(e) => out.push(leak(
            "container",
            format!("the runtime does not answer: {e}"),
        )),
    }
    if let Some(d) = node.dockerd()
        && let Ok(o) = d.docker(&["ps", "-aq", "--no-trunc"])
    {
        out.extend(
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(|id| leak("container", format!("{id} (docker ps -a)"))),
        );
    }
    if let Some(c) = node.containerd() {
        out.extend(
            c.shim_pids()
                .into_iter()
                .map(|p| leak("shim", format!("containerd-shim-runc-v2 pid {p}"))),
        );
    }
    out.extend(
        node.net
            .reserved_ips()
            .into_iter()
            .map(|(ip, owner)| leak("pod IP", format!("{ip} reserved for {owner}"))),
    );
    out.extend(
        node.net
            .cache_files()
            .into_iter()
            .map(|f| leak("CNI cache file", f.display().to_string())),
    );
    out.extend(
        node.net
            .attached_interfaces()
            .into_iter()
            .map(|i| leak("veth", format!("{i} on {}", node.net.bridge))),
    );
    if let Some(dir) = node.checkpoint_dir() {
        out.extend(
            entries(&dir)
                .into_iter()
                .map(|p| leak("checkpoint", p.display().to_string())),
        );
    }
    out.extend(
        log_dirs(Path::new(POD_LOGS), run)
            .into_iter()
            .map(|p| leak("log directory", p.display().to_string())),
    );
    out.extend(
        entries(&node.kubelet_root().join("pods"))
            .into_iter()
            .map(|p| leak("pod directory", p.display().to_string())),
    );
    let mut roots = node.runtime_mount_roots();
    roots.push(node.kubelet_root());
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    out.extend(
        mounts_under(&mountinfo, &roots)
            .into_iter()
            .map(|m| leak("mount", m)),
    );
    out.extend(
        pod_cgroups(Path::new(CGROUP_MOUNT), cgroup_root)
            .into_iter()
            .map(|p| leak("cgroup", p.display().to_string())),
    );
    out
}

/// The entries of `dir` (none when it does not exist).
fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// The pod log directories (`<ns>_<name>_<uid>`) of the run's pods under `root`.
pub fn log_dirs(root: &Path, run: &str) -> Vec<PathBuf> {
    let marker = format!("_{run}-");
    entries(root)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().contains(&marker))
        })
        .collect()
}

/// The mount points of `mountinfo` under any of `roots` (a root itself may be a mount point:
/// dockerd makes its data root one).
pub fn mounts_under(mountinfo: &str, roots: &[PathBuf]) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| {
            roots
                .iter()
                .any(|r| Path::new(m).starts_with(r) && Path::new(m) != r.as_path())
        })
        .map(str::to_string)
        .collect()
}

/// The pod cgroups (directories named `pod<uid>`) under `<hierarchy>/<cgroup_root>` in every
/// hierarchy mounted under `mount` (and in `mount` itself, for a unified hierarchy).
pub fn pod_cgroups(mount: &Path, cgroup_root: &str) -> Vec<PathBuf> {
    let rel = cgroup_root.trim_start_matches('/');
    let mut bases = vec![mount.join(rel)];
    bases.extend(entries(mount).into_iter().map(|h| h.join(rel)));
    let mut out = Vec::new();
    for base in bases {
        walk(&base, 0, &mut out);
    }
    out.sort();
    out.dedup();
    out
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth > 4 {
        return;
    }
    for e in entries(dir) {
        if !e.is_dir() {
            continue;
        }
        if e.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("pod"))
        {
            out.push(e);
        } else {
            walk(&e, depth + 1, out);
        }
    }
}

/// Removes the (empty) cgroup directories under `<hierarchy>/<cgroup_root>` in every hierarchy,
/// deepest first, and the roots themselves: the soak's clean-up. Non-empty ones stay.
pub fn remove_cgroup_root(mount: &Path, cgroup_root: &str) {
    let rel = cgroup_root.trim_start_matches('/');
    if rel.is_empty() {
        return;
    }
    let mut bases = vec![mount.join(rel)];
    bases.extend(entries(mount).into_iter().map(|h| h.join(rel)));
    for base in bases {
        remove_tree(&base);
    }
}

fn remove_tree(dir: &Path) {
    for e in entries(dir) {
        if e.is_dir() {
            remove_tree(&e);
        }
    }
    // cgroupfs directories go with rmdir(2) only, and only when empty of cgroups and tasks.
    let _ = std::fs::remove_dir(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_are_matched_by_path_component() {
        let info = "35 25 0:30 / /tmp/s/root rw - ext4 /dev/vda rw\n\
                    36 25 0:31 / /tmp/s/root/pods/u/volumes/x rw - tmpfs tmpfs rw\n\
                    37 25 0:32 / /tmp/s/rootless rw - tmpfs tmpfs rw\n\
                    38 25 0:33 / /proc rw - proc proc rw\n";
        let roots = [PathBuf::from("/tmp/s/root")];
        assert_eq!(
            mounts_under(info, &roots),
            vec!["/tmp/s/root/pods/u/volumes/x".to_string()]
        );
    }

    #[test]
    fn pod_cgroups_are_found_in_every_hierarchy_under_the_root_only() {
        let d = tempfile::tempdir().expect("tmp");
        for p in [
            "memory/soak1/kubepods/besteffort/podabc",
            "cpu/soak1/kubepods/burstable",
            "cpu/soak1/kubepods/podguaranteed/ctr",
            "cpu/other/kubepods/besteffort/podnotours",
        ] {
            std::fs::create_dir_all(d.path().join(p)).expect("dir");
        }
        let found = pod_cgroups(d.path(), "/soak1");
        assert_eq!(
            found,
            vec![
                d.path().join("cpu/soak1/kubepods/podguaranteed"),
                d.path().join("memory/soak1/kubepods/besteffort/podabc"),
            ]
        );
        remove_cgroup_root(d.path(), "/soak1");
        assert!(!d.path().join("cpu/soak1").exists());
        assert!(!d.path().join("memory/soak1").exists());
        assert!(
            d.path()
                .join("cpu/other/kubepods/besteffort/podnotours")
                .exists()
        );
    }

    #[test]
    fn log_directories_of_the_run_only() {
        let d = tempfile::tempdir().expect("tmp");
        for n in [
            "default_churn1_run7-churn1",
            "default_x_run70-x",
            "default_k_other",
        ] {
            std::fs::create_dir_all(d.path().join(n)).expect("dir");
        }
        assert_eq!(
            log_dirs(d.path(), "run7"),
            vec![d.path().join("default_churn1_run7-churn1")]
        );
    }
}
