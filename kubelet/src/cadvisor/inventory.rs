//! The containers cAdvisor would watch for the kubelet, named as it names them: the node's root
//! cgroup (`id="/"`), the kubepods slices above the pods (`/kubepods`, `/kubepods/burstable`,
//! … or the systemd driver's `/kubepods.slice/kubepods-burstable.slice`), each pod's cgroup
//! (with the pod's `namespace` and `pod`, as upstream's `containerPrometheusLabelsFunc` finds
//! it through `GetPodByCgroupfs`; `container`, `image`, `name` empty), and below it each
//! running container and ready sandbox of the runtime, found as the pod cgroup's child whose
//! name holds the container's id — a plain `<id>` with the cgroupfs driver, `docker-<id>.scope`
//! or `cri-containerd-<id>.scope` with systemd — with cAdvisor's labels: `name` its runtime
//! name (Docker's `k8s_<container>_<pod>_<namespace>_<uid>_<attempt>`, containerd's id),
//! `image` its image as the pod spec names it (the runtimes' CRI listings give only the image
//! id, where cAdvisor asks the runtime for the name), `container` its Kubernetes name (`POD` for a Docker sandbox, empty for
//! containerd's, as their labels give).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cri_proto::runtime::v1 as cri;

use super::cgroup;

/// What an inventory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The root cgroup (`id="/"`): the machine's figures, its network the host's.
    Node,
    /// A cgroup above the pods (`kubepods`, QoS classes).
    Slice,
    Pod,
    Container,
    /// A pod sandbox (pause) container: it holds the pod's network namespace.
    Sandbox,
}

/// cAdvisor's labels of one container, as the kubelet gives them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Labels {
    pub name: String,
    pub image: String,
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// One container (cgroup) to sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// cAdvisor's name of it: the cgroup path, `/` for the root.
    pub id: String,
    /// Its directory below the hierarchies.
    pub dir: PathBuf,
    pub kind: Kind,
    pub labels: Labels,
    /// When the runtime made it (seconds since the epoch); the cgroup's own time otherwise.
    pub start_time: Option<f64>,
    /// The runtime's id of a container or sandbox.
    pub runtime_id: Option<String>,
    /// The UID of the pod whose cgroup this is (pod entries only).
    pub pod_uid: Option<String>,
}

impl Entry {
    fn cgroup(kind: Kind, dir: PathBuf, labels: Labels) -> Entry {
        Entry {
            id: format!("/{}", dir.display()),
            dir,
            kind,
            labels,
            start_time: None,
            runtime_id: None,
            pod_uid: None,
        }
    }
}

/// A pod this kubelet runs and its cgroup directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodCgroup {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    pub dir: PathBuf,
    /// The image of each of its containers (by name), as its spec gives it.
    pub images: std::collections::HashMap<String, String>,
}

/// What the inventory is built from: the runtime's name (`docker` names its containers
/// differently), the sandbox image, the kubelet's pods and the runtime's listing.
#[derive(Debug, Clone, Default)]
pub struct Sources<'a> {
    pub runtime_name: &'a str,
    pub pause_image: &'a str,
    pub pods: &'a [PodCgroup],
    pub sandboxes: &'a [cri::PodSandbox],
    pub containers: &'a [cri::Container],
}

fn secs(ns: i64) -> Option<f64> {
    (ns > 0).then(|| ns as f64 / 1e9)
}

/// The inventory under the cgroup mount `root`.
pub fn build(root: &Path, src: &Sources<'_>) -> Vec<Entry> {
    let docker = src.runtime_name == "docker";
    let mut out = vec![Entry {
        id: "/".into(),
        dir: PathBuf::new(),
        kind: Kind::Node,
        labels: Labels::default(),
        start_time: None,
        runtime_id: None,
        pod_uid: None,
    }];
    let mut slices = BTreeSet::new();
    for p in src.pods {
        let mut up = p.dir.parent();
        while let Some(d) = up.filter(|d| !d.as_os_str().is_empty()) {
            slices.insert(d.to_path_buf());
            up = d.parent();
        }
    }
    out.extend(
        slices
            .into_iter()
            .map(|d| Entry::cgroup(Kind::Slice, d, Labels::default())),
    );
    for p in src.pods {
        let pod_labels = Labels {
            namespace: p.namespace.clone(),
            pod: p.name.clone(),
            ..Default::default()
        };
        let mut pod = Entry::cgroup(Kind::Pod, p.dir.clone(), pod_labels);
        pod.pod_uid = Some(p.uid.clone());
        out.push(pod);
        let children = cgroup::children(root, &p.dir);
        let child = |id: &str| -> Option<PathBuf> {
            (!id.is_empty())
                .then(|| children.iter().find(|c| c.contains(id)))
                .flatten()
                .map(|c| p.dir.join(c))
        };
        let sandboxes = src.sandboxes.iter().filter(|s| {
            s.state == cri::PodSandboxState::SandboxReady as i32
                && s.metadata.as_ref().is_some_and(|m| m.uid == p.uid)
        });
        for s in sandboxes {
            let Some(dir) = child(&s.id) else { continue };
            let attempt = s.metadata.as_ref().map_or(0, |m| m.attempt);
            let labels = Labels {
                name: if docker {
                    format!("k8s_POD_{}_{}_{}_{attempt}", p.name, p.namespace, p.uid)
                } else {
                    s.id.clone()
                },
                image: src.pause_image.to_string(),
                namespace: p.namespace.clone(),
                pod: p.name.clone(),
                container: if docker { "POD".into() } else { String::new() },
            };
            let mut e = Entry::cgroup(Kind::Sandbox, dir, labels);
            e.start_time = secs(s.created_at);
            e.runtime_id = Some(s.id.clone());
            out.push(e);
            for c in src.containers.iter().filter(|c| {
                c.pod_sandbox_id == s.id && c.state == cri::ContainerState::ContainerRunning as i32
            }) {
                let Some(dir) = child(&c.id) else { continue };
                let (name, attempt) = c
                    .metadata
                    .as_ref()
                    .map_or((String::new(), 0), |m| (m.name.clone(), m.attempt));
                let labels = Labels {
                    name: if docker {
                        format!("k8s_{name}_{}_{}_{}_{attempt}", p.name, p.namespace, p.uid)
                    } else {
                        c.id.clone()
                    },
                    image: p.images.get(&name).cloned().unwrap_or_else(|| {
                        c.image
                            .as_ref()
                            .map(|i| i.image.clone())
                            .unwrap_or_default()
                    }),
                    namespace: p.namespace.clone(),
                    pod: p.name.clone(),
                    container: name,
                };
                let mut e = Entry::cgroup(Kind::Container, dir, labels);
                e.start_time = secs(c.created_at);
                e.runtime_id = Some(c.id.clone());
                out.push(e);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(id: &str, uid: &str) -> cri::PodSandbox {
        cri::PodSandbox {
            id: id.into(),
            metadata: Some(cri::PodSandboxMetadata {
                name: "web".into(),
                uid: uid.into(),
                namespace: "ns".into(),
                attempt: 0,
            }),
            state: cri::PodSandboxState::SandboxReady as i32,
            created_at: 1_700_000_000_000_000_000,
            ..Default::default()
        }
    }

    fn container(id: &str, sandbox: &str) -> cri::Container {
        cri::Container {
            id: id.into(),
            pod_sandbox_id: sandbox.into(),
            metadata: Some(cri::ContainerMetadata {
                name: "main".into(),
                attempt: 2,
            }),
            image: Some(cri::ImageSpec {
                image: "registry/busybox:1".into(),
                ..Default::default()
            }),
            state: cri::ContainerState::ContainerRunning as i32,
            created_at: 1_700_000_001_000_000_000,
            ..Default::default()
        }
    }

    fn mkdirs(root: &Path, dirs: &[&str]) {
        for d in dirs {
            std::fs::create_dir_all(root.join("cpu").join(d)).unwrap();
        }
    }

    #[test]
    fn cgroupfs_containerd_pods_and_containers_get_cadvisors_labels() {
        let root = tempfile::tempdir().unwrap();
        mkdirs(
            root.path(),
            &[
                "kubepods/burstable/podu1/sandbox1",
                "kubepods/burstable/podu1/ctr1",
            ],
        );
        let pods = [PodCgroup {
            uid: "u1".into(),
            name: "web".into(),
            namespace: "ns".into(),
            dir: "kubepods/burstable/podu1".into(),
            images: [("main".to_string(), "busybox:1".to_string())].into(),
        }];
        let sandboxes = [sandbox("sandbox1", "u1"), sandbox("other", "u2")];
        let containers = [container("ctr1", "sandbox1"), container("ctr2", "other")];
        let inv = build(
            root.path(),
            &Sources {
                runtime_name: "containerd",
                pause_image: "registry/pause:3.9",
                pods: &pods,
                sandboxes: &sandboxes,
                containers: &containers,
            },
        );
        let ids: Vec<(&str, Kind)> = inv.iter().map(|e| (e.id.as_str(), e.kind)).collect();
        assert_eq!(
            ids,
            [
                ("/", Kind::Node),
                ("/kubepods", Kind::Slice),
                ("/kubepods/burstable", Kind::Slice),
                ("/kubepods/burstable/podu1", Kind::Pod),
                ("/kubepods/burstable/podu1/sandbox1", Kind::Sandbox),
                ("/kubepods/burstable/podu1/ctr1", Kind::Container),
            ]
        );
        assert_eq!(
            inv[3].labels,
            Labels {
                namespace: "ns".into(),
                pod: "web".into(),
                ..Default::default()
            }
        );
        assert_eq!(
            inv[4].labels,
            Labels {
                name: "sandbox1".into(),
                image: "registry/pause:3.9".into(),
                namespace: "ns".into(),
                pod: "web".into(),
                container: String::new(),
            }
        );
        assert_eq!(
            inv[5].labels,
            Labels {
                name: "ctr1".into(),
                image: "busybox:1".into(),
                namespace: "ns".into(),
                pod: "web".into(),
                container: "main".into(),
            }
        );
        assert_eq!(inv[5].start_time, Some(1_700_000_001.0));
        assert_eq!(inv[5].runtime_id.as_deref(), Some("ctr1"));
        assert_eq!(inv[3].pod_uid.as_deref(), Some("u1"));
    }

    #[test]
    fn systemd_docker_scopes_are_found_and_named_as_docker_names_them() {
        let root = tempfile::tempdir().unwrap();
        let pod = "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu1.slice";
        mkdirs(
            root.path(),
            &[
                &format!("{pod}/docker-sandbox1.scope"),
                &format!("{pod}/docker-ctr1.scope"),
            ],
        );
        let pods = [PodCgroup {
            uid: "u1".into(),
            name: "web".into(),
            namespace: "ns".into(),
            dir: pod.into(),
            images: Default::default(),
        }];
        let inv = build(
            root.path(),
            &Sources {
                runtime_name: "docker",
                pause_image: "registry/pause:3.9",
                pods: &pods,
                sandboxes: &[sandbox("sandbox1", "u1")],
                containers: &[container("ctr1", "sandbox1")],
            },
        );
        let by_kind = |k| inv.iter().find(|e| e.kind == k).unwrap();
        assert_eq!(
            by_kind(Kind::Sandbox).id,
            format!("/{pod}/docker-sandbox1.scope")
        );
        assert_eq!(by_kind(Kind::Sandbox).labels.container, "POD");
        assert_eq!(by_kind(Kind::Sandbox).labels.name, "k8s_POD_web_ns_u1_0");
        assert_eq!(
            by_kind(Kind::Container).id,
            format!("/{pod}/docker-ctr1.scope")
        );
        assert_eq!(by_kind(Kind::Container).labels.name, "k8s_main_web_ns_u1_2");
        assert_eq!(
            by_kind(Kind::Container).labels.image,
            "registry/busybox:1",
            "the runtime's when the spec has none"
        );
        let slices: Vec<&str> = inv
            .iter()
            .filter(|e| e.kind == Kind::Slice)
            .map(|e| e.id.as_str())
            .collect();
        assert_eq!(
            slices,
            [
                "/kubepods.slice",
                "/kubepods.slice/kubepods-besteffort.slice"
            ]
        );
    }
}
