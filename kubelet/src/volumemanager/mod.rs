//! Pod volumes, reduced to what a node without an API server can provide (upstream
//! `pkg/kubelet/volumemanager` and the `empty_dir`, `host_path`, `downwardapi` and `projected`
//! volume plugins, plus `makeMounts` in `kubelet_pods.go`). This module owns:
//! - where a pod's volumes live: `emptyDir` under
//!   `<root>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>` (medium `Memory`: a tmpfs
//!   mounted there, `size=<sizeLimit>`), `downwardAPI` / `projected` under
//!   `kubernetes.io~downward-api` / `kubernetes.io~projected`, `hostPath` as given;
//! - setting them up before containers start ("mounting"): hostPath type checks with upstream's
//!   messages, downward API files (metadata fields, labels, annotations, resource fields);
//!   configMap/secret (also as projected sources) need the API server and fail with a clear
//!   message; `persistentVolumeClaim` (API server too) is resolved to its bound
//!   PersistentVolume and mounted by the PV's source, `hostPath` or `local` (see `pvc`); other
//!   types are unsupported;
//! - container mounts: `volumeMounts` with `subPath` or `subPathExpr` (expanded with the
//!   container's environment; validated, created when missing inside the volume only, and
//!   given to the runtime as a bind mount of the checked directory: see `subpath`), the
//!   kubelet-managed `/etc/hosts` (`<pod dir>/etc-hosts`, for pods not on the host network), and
//!   the termination message file (`<pod dir>/containers/<name>/<id>`);
//! - the termination message of an exited container, with `FallbackToLogsOnError`;
//! - teardown: unmounting what was mounted under a pod directory before it is removed.
//!
//! Layout, as upstream's `pkg/volume/<plugin>`: one file per volume plugin (`emptydir`,
//! `hostpath`, `downwardapi`, `configmap`, `secret`, `projected`), each with its `SetUp`;
//! `atomic_writer` (upstream's `..data` layout of the file-backed volumes), `util` (item
//! payloads), `mount` (mount points, teardown) and `subpath` (safe
//! subPath mounts) and `ownership` (the pod's `fsGroup` applied to a volume) are what they
//! share. This file is the manager: the volumes' host paths, mounting a pod's volumes through
//! its plugins, container mounts and the pod directory's removal.

mod atomic_writer;
mod configmap;
mod downwardapi;
mod emptydir;
mod hostpath;
mod mount;
mod ownership;
mod projected;
mod pvc;
mod secret;
mod subpath;
mod util;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use cri_proto::runtime::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod, Volume};

use crate::envvars::NodeAllocatable;

pub use configmap::CONFIG_MAP_PLUGIN;
pub use downwardapi::{DOWNWARD_API_PLUGIN, downward_api_item_value};
pub use emptydir::EMPTY_DIR_PLUGIN;
pub use hostpath::check_host_path_type;
pub use mount::{is_mount_point, unmount_pod_dir};
pub use projected::PROJECTED_PLUGIN;
pub use pvc::{ClaimSource, LOCAL_VOLUME_PLUGIN, ResolvedClaim, resolve as resolve_claim};
pub use secret::SECRET_PLUGIN;
use util::valid_relative_path;

/// The kubelet-managed hosts file in the pod directory (upstream `etc-hosts`).
pub const ETC_HOSTS_FILE: &str = "etc-hosts";
/// The API default of `terminationMessagePath`.
pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";

/// Volume errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VolumeError {
    /// The volume type is not supported on this node.
    #[error(
        "volume {0:?}: unsupported volume type (emptyDir, hostPath, downwardAPI and projected downwardAPI only)"
    )]
    Unsupported(String),
    /// A PersistentVolumeClaim volume could not be resolved to a volume this node mounts
    /// (upstream's populator error, reported by `WaitForAttachAndMount`).
    #[error("unmounted volumes=[{name}], failed to process volumes=[{name}]: {reason}")]
    Claim {
        /// Volume name.
        name: String,
        /// Cause, as upstream words it.
        reason: String,
    },
    /// The host directory could not be prepared.
    #[error("volume {name:?}: cannot prepare {path}: {reason}")]
    Setup {
        /// Volume name.
        name: String,
        /// Host path.
        path: String,
        /// Cause.
        reason: String,
    },
    /// `MountVolume.SetUp` failed (hostPath type mismatch, API object needed, bad item).
    #[error("MountVolume.SetUp failed for volume {name:?} : {reason}")]
    SetUp {
        /// Volume name.
        name: String,
        /// Cause, as upstream words it.
        reason: String,
    },
    /// A volumeMount names no volume of the pod.
    #[error("container {container:?}: volumeMount {volume:?} names no volume of the pod")]
    UnknownVolume {
        /// Container.
        container: String,
        /// Volume name.
        volume: String,
    },
    /// A `subPathExpr` names variables the container does not have, or has empty (upstream
    /// `ExpandContainerVolumeMounts`: `missing value for A, B`).
    #[error("{0}")]
    SubPathExpr(String),
    /// A bad `subPath`.
    #[error("container {container:?}: volumeMount {volume:?}: {reason}")]
    SubPath {
        /// Container.
        container: String,
        /// Volume name.
        volume: String,
        /// Cause.
        reason: String,
    },
}

fn plugin_dir(pod_dir: &Path, plugin: &str, name: &str) -> PathBuf {
    pod_dir.join("volumes").join(plugin).join(name)
}

/// Host paths of the pod's supported volumes (see [`mount_pod_volumes`]); a
/// persistentVolumeClaim volume's depends on its PersistentVolume, in `objects`, and is left
/// out while the claim does not resolve.
pub fn volume_host_paths(
    pod: &Pod,
    pod_dir: &Path,
    objects: &crate::apiobjects::ApiObjects,
) -> HashMap<String, PathBuf> {
    let mut out = HashMap::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let path = if let Some(c) = &v.persistent_volume_claim {
            match pvc::resolve(c, objects) {
                Ok(r) => r.host_path(pod_dir),
                Err(_) => continue,
            }
        } else if let Some(hp) = &v.host_path {
            PathBuf::from(&hp.path)
        } else if v.empty_dir.is_some() {
            plugin_dir(pod_dir, EMPTY_DIR_PLUGIN, &v.name)
        } else if v.downward_api.is_some() {
            plugin_dir(pod_dir, DOWNWARD_API_PLUGIN, &v.name)
        } else if v.projected.is_some() {
            plugin_dir(pod_dir, PROJECTED_PLUGIN, &v.name)
        } else if v.config_map.is_some() {
            plugin_dir(pod_dir, CONFIG_MAP_PLUGIN, &v.name)
        } else if v.secret.is_some() {
            plugin_dir(pod_dir, SECRET_PLUGIN, &v.name)
        } else {
            continue;
        };
        out.insert(v.name.clone(), path);
    }
    out
}

/// The upstream plugin name of each of the pod's supported volumes (`kubernetes.io/empty-dir`,
/// …), as `volume_manager_total_volumes` labels them (a claim's: its PV's, once resolved).
pub fn plugin_names(pod: &Pod, objects: &crate::apiobjects::ApiObjects) -> Vec<&'static str> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| {
            Some(if let Some(c) = &v.persistent_volume_claim {
                pvc::resolve(c, objects).ok()?.plugin_name()
            } else if v.host_path.is_some() {
                "kubernetes.io/host-path"
            } else if v.empty_dir.is_some() {
                "kubernetes.io/empty-dir"
            } else if v.downward_api.is_some() {
                "kubernetes.io/downward-api"
            } else if v.projected.is_some() {
                "kubernetes.io/projected"
            } else if v.config_map.is_some() {
                "kubernetes.io/configmap"
            } else if v.secret.is_some() {
                "kubernetes.io/secret"
            } else {
                return None;
            })
        })
        .collect()
}

/// Whether `v`'s plugin mounts it read-only whatever the volumeMount says (upstream
/// `Mounter.GetAttributes().ReadOnly`): true for the API data volumes — secret, configMap,
/// downwardAPI and projected (the service account token too) — false for emptyDir and hostPath;
/// a persistentVolumeClaim volume's is the claim source's `readOnly` (the local and hostPath
/// plugins' `spec.ReadOnly`).
pub fn must_mount_read_only(v: &Volume) -> bool {
    v.persistent_volume_claim
        .as_ref()
        .is_some_and(|c| c.read_only == Some(true))
        || v.secret.is_some()
        || v.config_map.is_some()
        || v.downward_api.is_some()
        || v.projected.is_some()
}

/// The names of the pod's volumes that [`must_mount_read_only`].
pub fn read_only_volumes(pod: &Pod) -> HashSet<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter(|v| must_mount_read_only(v))
        .map(|v| v.name.clone())
        .collect()
}

/// Remove a pod directory after unmounting its volumes. Refused while anything is still
/// mounted under it (upstream `cleanupOrphanedPodDirs` skips such pods): removing the
/// directory would delete what a local volume's bind mount shows, the PV's data.
pub fn remove_pod_dir(pod_dir: &Path) -> std::io::Result<()> {
    unmount_pod_dir(pod_dir);
    if let Some(m) = mount::mounts_under(pod_dir).first() {
        return Err(std::io::Error::other(format!(
            "{} is still mounted",
            m.display()
        )));
    }
    std::fs::remove_dir_all(pod_dir)
}

/// The pod's persistentVolumeClaim volumes as mounted (their claims, host paths and whether
/// their plugin has metrics), for `/stats/summary` and `kubelet_volume_stats_*`.
pub fn claim_volumes(
    pod: &Pod,
    pod_dir: &Path,
    objects: &crate::apiobjects::ApiObjects,
) -> Vec<crate::metrics::ClaimVolume> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| {
            let r = pvc::resolve(v.persistent_volume_claim.as_ref()?, objects).ok()?;
            Some(crate::metrics::ClaimVolume {
                volume: v.name.clone(),
                path: r.host_path(pod_dir),
                stat_fs: r.has_metrics(),
                namespace: r.namespace,
                claim: r.claim,
            })
        })
        .collect()
}

/// Set up one volume at `path` (upstream `SetUp` of its plugin).
fn set_up_volume(
    v: &Volume,
    path: &Path,
    pod: &Pod,
    node: &NodeAllocatable,
    objects: &crate::apiobjects::ApiObjects,
) -> Result<(), String> {
    let fs_group = ownership::pod_fs_group(pod);
    if let Some(c) = &v.persistent_volume_claim {
        let r = pvc::resolve(c, objects)?;
        return pvc::set_up(&r, path, fs_group);
    }
    if let Some(hp) = &v.host_path {
        return hostpath::set_up(hp, path);
    }
    if let Some(ed) = &v.empty_dir {
        return emptydir::set_up(ed, path, fs_group);
    }
    // The atomic-writer volumes: each write (a changed payload) gives the whole volume the
    // pod's fsGroup before the new data is published (upstream `setPerms`); read-only masks.
    if let Some(d) = &v.downward_api {
        downwardapi::set_up(d, path, pod, node, fs_group)
    } else if let Some(c) = &v.config_map {
        configmap::set_up(c, path, objects, fs_group)
    } else if let Some(s) = &v.secret {
        secret::set_up(s, path, objects, fs_group)
    } else if let Some(p) = &v.projected {
        projected::set_up(p, path, pod, node, objects, fs_group)
    } else {
        Err("unsupported volume type".into())
    }
}

/// Prepare the pod's volumes (upstream `WaitForAttachAndMount`): every volume is set up, or
/// the first failure is returned with upstream's wording.
pub fn mount_pod_volumes(
    pod: &Pod,
    pod_dir: &Path,
    objects: &crate::apiobjects::ApiObjects,
) -> Result<HashMap<String, PathBuf>, VolumeError> {
    let paths = volume_host_paths(pod, pod_dir, objects);
    let node = NodeAllocatable::node();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let set_up = |reason: String| VolumeError::SetUp {
            name: v.name.clone(),
            reason,
        };
        if let Some(c) = &v.persistent_volume_claim
            && let Err(reason) = pvc::resolve(c, objects)
        {
            return Err(VolumeError::Claim {
                name: v.name.clone(),
                reason,
            });
        }
        let Some(path) = paths.get(&v.name) else {
            return Err(VolumeError::Unsupported(v.name.clone()));
        };
        set_up_volume(v, path, pod, &node, objects).map_err(set_up)?;
    }
    Ok(paths)
}

/// CRI mounts for `c`'s volumeMounts (upstream `makeMounts`, without propagation): a
/// `subPathExpr` is expanded with the container's environment `env`
/// (`subpath::expand_sub_path_expr`) and used as the `subPath`; a `subPath` must be relative
/// without `..`; a missing one is created inside the volume (`subpath::safe_make_dir`) and the
/// runtime mounts a bind mount of the checked directory (`subpath::prepare_safe_subpath`),
/// never the path itself. A mount of a volume in `read_only` (see [`read_only_volumes`]) is
/// read-only even with `readOnly: false`, its subPath mounts too (upstream
/// `mount.ReadOnly || mustMountRO`).
pub fn make_mounts(
    c: &Container,
    volumes: &HashMap<String, PathBuf>,
    read_only: &HashSet<String>,
    pod_dir: &Path,
    env: &HashMap<String, String>,
) -> Result<Vec<cri::Mount>, VolumeError> {
    c.volume_mounts
        .iter()
        .flatten()
        .enumerate()
        .map(|(index, m)| {
            let host = volumes
                .get(&m.name)
                .ok_or_else(|| VolumeError::UnknownVolume {
                    container: c.name.clone(),
                    volume: m.name.clone(),
                })?;
            let expanded = match m.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
                Some(expr) => Some(
                    subpath::expand_sub_path_expr(expr, env).map_err(VolumeError::SubPathExpr)?,
                ),
                None => m.sub_path.clone(),
            };
            let host = match expanded.as_deref().filter(|s| !s.is_empty()) {
                Some(sub) => {
                    let err = |reason: String| VolumeError::SubPath {
                        container: c.name.clone(),
                        volume: m.name.clone(),
                        reason,
                    };
                    if Path::new(sub).is_absolute() {
                        return Err(err(format!(
                            "error SubPath `{sub}` must not be an absolute path"
                        )));
                    }
                    if !valid_relative_path(sub) {
                        return Err(err(format!("error SubPath `{sub}` must not contain '..'")));
                    }
                    let p = host.join(sub);
                    if std::fs::symlink_metadata(&p).is_err() && host.is_dir() {
                        use std::os::unix::fs::PermissionsExt;
                        let perm = std::fs::metadata(host)
                            .map(|md| md.permissions().mode() & 0o7777)
                            .unwrap_or(0o755);
                        subpath::safe_make_dir(Path::new(sub), host, perm).map_err(|e| {
                            tracing::warn!(container = %c.name, volume = %m.name, error = %e, "cannot create subPath");
                            err(format!(
                                "failed to create subPath directory for volumeMount {:?} of container {:?}",
                                m.name, c.name
                            ))
                        })?;
                    }
                    subpath::prepare_safe_subpath(&subpath::Subpath {
                        volume_mount_index: index,
                        path: &p,
                        volume_name: &m.name,
                        volume_path: host,
                        pod_dir,
                        container_name: &c.name,
                    })
                    .map_err(err)?
                }
                None => host.clone(),
            };
            Ok(cri::Mount {
                container_path: m.mount_path.clone(),
                host_path: host.to_string_lossy().into_owned(),
                readonly: m.read_only.unwrap_or(false) || read_only.contains(&m.name),
                ..Default::default()
            })
        })
        .collect()
}

/// Upstream `managedHostsFileContent`.
pub fn managed_hosts_file_content(
    ips: &[String],
    hostname: &str,
    aliases: &[k8s_openapi::api::core::v1::HostAlias],
) -> String {
    let mut s = String::from(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
    );
    for ip in ips {
        s.push_str(&format!("{ip}\t{hostname}\n"));
    }
    if !aliases.is_empty() {
        s.push_str("\n# Entries added by HostAliases.\n");
        for a in aliases {
            let names = a.hostnames.clone().unwrap_or_default().join("\t");
            s.push_str(&format!("{}\t{names}\n", a.ip));
        }
    }
    s
}

/// Mounts the kubelet adds to every container (upstream `makeMounts`): the managed
/// `/etc/hosts` (pods not on the host network, with an IP, unless the container mounts
/// `/etc/hosts` itself) and the termination message file.
pub fn kubelet_managed_mounts(
    pod: &Pod,
    c: &Container,
    pod_dir: &Path,
    pod_ips: &[String],
    existing: &[cri::Mount],
) -> Result<Vec<cri::Mount>, VolumeError> {
    let setup = |path: &Path, e: std::io::Error| VolumeError::Setup {
        name: c.name.clone(),
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let mut out = Vec::new();
    let spec = pod.spec.as_ref();
    if !crate::container::is_host_network_pod(pod)
        && !pod_ips.is_empty()
        && !existing.iter().any(|m| m.container_path == "/etc/hosts")
    {
        let hostname = spec
            .and_then(|s| s.hostname.clone())
            .or_else(|| pod.metadata.name.clone())
            .unwrap_or_default();
        let hostname: String = hostname.chars().take(63).collect();
        let hostname = hostname.trim_end_matches(['-', '.']).to_string();
        let content = managed_hosts_file_content(
            pod_ips,
            &hostname,
            spec.and_then(|s| s.host_aliases.as_deref()).unwrap_or(&[]),
        );
        let path = pod_dir.join(ETC_HOSTS_FILE);
        std::fs::create_dir_all(pod_dir).map_err(|e| setup(pod_dir, e))?;
        std::fs::write(&path, content).map_err(|e| setup(&path, e))?;
        out.push(cri::Mount {
            container_path: "/etc/hosts".into(),
            host_path: path.to_string_lossy().into_owned(),
            ..Default::default()
        });
    }
    let tpath = c
        .termination_message_path
        .clone()
        .unwrap_or_else(|| DEFAULT_TERMINATION_MESSAGE_PATH.into());
    if !tpath.is_empty() {
        use std::os::unix::fs::PermissionsExt;
        let dir = pod_dir.join("containers").join(&c.name);
        std::fs::create_dir_all(&dir).map_err(|e| setup(&dir, e))?;
        let id = format!(
            "{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        );
        let file = dir.join(id);
        std::fs::write(&file, b"").map_err(|e| setup(&file, e))?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666))
            .map_err(|e| setup(&file, e))?;
        out.push(cri::Mount {
            container_path: tpath,
            host_path: file.to_string_lossy().into_owned(),
            ..Default::default()
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        DownwardAPIVolumeFile, EmptyDirVolumeSource, HostPathVolumeSource, PodSpec, Volume,
        VolumeMount,
    };

    fn pod() -> Pod {
        Pod {
            spec: Some(PodSpec {
                volumes: Some(vec![
                    Volume {
                        name: "scratch".into(),
                        empty_dir: Some(EmptyDirVolumeSource::default()),
                        ..Default::default()
                    },
                    Volume {
                        name: "host".into(),
                        host_path: Some(HostPathVolumeSource {
                            path: "/srv/data".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn paths_and_mounts() {
        let paths = volume_host_paths(
            &pod(),
            Path::new("/var/lib/kubelet/pods/u"),
            &crate::apiobjects::ApiObjects::standalone("default"),
        );
        assert_eq!(
            paths["scratch"],
            PathBuf::from("/var/lib/kubelet/pods/u/volumes/kubernetes.io~empty-dir/scratch")
        );
        let c = Container {
            name: "c".into(),
            volume_mounts: Some(vec![VolumeMount {
                name: "host".into(),
                mount_path: "/data".into(),
                read_only: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let m = make_mounts(
            &c,
            &paths,
            &HashSet::new(),
            Path::new("/nonexistent"),
            &HashMap::new(),
        )
        .expect("mounts");
        assert_eq!(m[0].host_path, "/srv/data");
        assert!(m[0].readonly);
        let bad = Container {
            name: "c".into(),
            volume_mounts: Some(vec![VolumeMount {
                name: "nope".into(),
                mount_path: "/x".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert!(
            make_mounts(
                &bad,
                &paths,
                &HashSet::new(),
                Path::new("/nonexistent"),
                &HashMap::new()
            )
            .is_err()
        );
    }

    /// Upstream `mount.ReadOnly || mustMountRO`: secret, configMap, downwardAPI and projected
    /// volumes are mounted read-only even with `readOnly: false`; emptyDir and hostPath follow
    /// the volumeMount.
    #[test]
    fn api_data_volumes_are_mounted_read_only() {
        use k8s_openapi::api::core::v1::{
            ConfigMapVolumeSource, DownwardAPIVolumeSource, ProjectedVolumeSource,
            SecretVolumeSource,
        };
        let mut p = pod();
        if let Some(v) = p.spec.as_mut().and_then(|s| s.volumes.as_mut()) {
            v.extend([
                Volume {
                    name: "cm".into(),
                    config_map: Some(ConfigMapVolumeSource::default()),
                    ..Default::default()
                },
                Volume {
                    name: "sec".into(),
                    secret: Some(SecretVolumeSource::default()),
                    ..Default::default()
                },
                Volume {
                    name: "info".into(),
                    downward_api: Some(DownwardAPIVolumeSource::default()),
                    ..Default::default()
                },
                Volume {
                    name: "token".into(),
                    projected: Some(ProjectedVolumeSource::default()),
                    ..Default::default()
                },
            ]);
        }
        let paths = volume_host_paths(
            &p,
            Path::new("/var/lib/kubelet/pods/u"),
            &crate::apiobjects::ApiObjects::standalone("default"),
        );
        let read_only = read_only_volumes(&p);
        let mount = |name: &str, ro: Option<bool>| VolumeMount {
            name: name.into(),
            mount_path: format!("/{name}-{ro:?}"),
            read_only: ro,
            ..Default::default()
        };
        let mut mounts = Vec::new();
        for name in ["scratch", "host", "cm", "sec", "info", "token"] {
            mounts.extend([
                mount(name, None),
                mount(name, Some(false)),
                mount(name, Some(true)),
            ]);
        }
        let c = Container {
            name: "c".into(),
            volume_mounts: Some(mounts),
            ..Default::default()
        };
        let got: Vec<(String, bool)> = make_mounts(
            &c,
            &paths,
            &read_only,
            Path::new("/nonexistent"),
            &HashMap::new(),
        )
        .expect("mounts")
        .into_iter()
        .map(|m| (m.container_path, m.readonly))
        .collect();
        let mut want = Vec::new();
        for (name, forced) in [
            ("scratch", false),
            ("host", false),
            ("cm", true),
            ("sec", true),
            ("info", true),
            ("token", true),
        ] {
            for ro in [None, Some(false), Some(true)] {
                want.push((format!("/{name}-{ro:?}"), forced || ro == Some(true)));
            }
        }
        assert_eq!(got, want);
    }

    #[test]
    fn unsupported_volume() {
        let mut p = pod();
        if let Some(v) = p.spec.as_mut().and_then(|s| s.volumes.as_mut()) {
            v.push(Volume {
                name: "cfg".into(),
                ..Default::default()
            });
        }
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            mount_pod_volumes(
                &p,
                dir.path(),
                &crate::apiobjects::ApiObjects::standalone("ns")
            ),
            Err(VolumeError::Unsupported("cfg".into()))
        );
    }

    #[test]
    fn downward_api_and_api_object_volumes() {
        use k8s_openapi::api::core::v1::{
            ConfigMapVolumeSource, DownwardAPIVolumeSource, ObjectFieldSelector,
            ProjectedVolumeSource, ResourceFieldSelector, VolumeProjection,
        };
        use std::collections::BTreeMap;
        let mut p = Pod::default();
        p.metadata.name = Some("web".into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.labels = Some(BTreeMap::from([
            ("app".to_string(), "x".to_string()),
            ("tier".to_string(), "fe".to_string()),
        ]));
        let item = |path: &str, field: &str| DownwardAPIVolumeFile {
            path: path.into(),
            field_ref: Some(ObjectFieldSelector {
                field_path: field.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let items = vec![
            item("name", "metadata.name"),
            item("labels", "metadata.labels"),
            item("sub/app", "metadata.labels['app']"),
            DownwardAPIVolumeFile {
                path: "cpu".into(),
                resource_field_ref: Some(ResourceFieldSelector {
                    container_name: Some("c".into()),
                    resource: "limits.cpu".into(),
                    divisor: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                        "1m".into(),
                    )),
                }),
                ..Default::default()
            },
        ];
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(k8s_openapi::api::core::v1::ResourceRequirements {
                    limits: Some(BTreeMap::from([(
                        "cpu".to_string(),
                        k8s_openapi::apimachinery::pkg::api::resource::Quantity("250m".into()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            volumes: Some(vec![
                Volume {
                    name: "info".into(),
                    downward_api: Some(DownwardAPIVolumeSource {
                        items: Some(items.clone()),
                        default_mode: Some(0o600),
                    }),
                    ..Default::default()
                },
                Volume {
                    name: "proj".into(),
                    projected: Some(ProjectedVolumeSource {
                        sources: Some(vec![VolumeProjection {
                            downward_api: Some(k8s_openapi::api::core::v1::DownwardAPIProjection {
                                items: Some(vec![item("ns", "metadata.namespace")]),
                            }),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = mount_pod_volumes(
            &p,
            dir.path(),
            &crate::apiobjects::ApiObjects::standalone("ns"),
        )
        .expect("mount");
        let read = |v: &str, f: &str| std::fs::read_to_string(paths[v].join(f)).expect("file");
        assert_eq!(read("info", "name"), "web");
        assert_eq!(read("info", "labels"), "app=\"x\"\ntier=\"fe\"");
        assert_eq!(read("info", "sub/app"), "x");
        assert_eq!(read("info", "cpu"), "250");
        assert_eq!(read("proj", "ns"), "ns");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(paths["info"].join("name"))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // Idempotent.
        mount_pod_volumes(
            &p,
            dir.path(),
            &crate::apiobjects::ApiObjects::standalone("ns"),
        )
        .expect("again");
        // configMap volumes need the API server.
        if let Some(v) = p.spec.as_mut().and_then(|s| s.volumes.as_mut()) {
            v.push(Volume {
                name: "cfg".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: "settings".into(),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        let err = mount_pod_volumes(
            &p,
            dir.path(),
            &crate::apiobjects::ApiObjects::standalone("ns"),
        )
        .expect_err("configMap");
        assert_eq!(
            err.to_string(),
            "MountVolume.SetUp failed for volume \"cfg\" : couldn't get configMap ns/settings, no kubeClient defined"
        );

        // With the API server: the keys as files; a change replaces them and drops old keys;
        // a missing configMap is an error unless optional.
        let cm = |data: serde_json::Value| -> k8s_openapi::api::core::v1::ConfigMap {
            serde_json::from_value(
                serde_json::json!({"metadata": {"name": "settings"}, "data": data}),
            )
            .unwrap()
        };
        let objs = crate::apiobjects::ApiObjects::from_objects(
            "ns",
            vec![cm(serde_json::json!({"a": "1", "b": "2"}))],
            vec![],
        );
        let paths = mount_pod_volumes(&p, dir.path(), &objs).expect("configMap volume");
        let cfg = &paths["cfg"];
        assert!(
            cfg.ends_with("volumes/kubernetes.io~configmap/cfg"),
            "{cfg:?}"
        );
        assert_eq!(std::fs::read_to_string(cfg.join("a")).unwrap(), "1");
        // Upstream's atomic-writer layout: `a -> ..data/a`, `..data -> ..<timestamp>`.
        assert_eq!(
            std::fs::read_link(cfg.join("a")).expect("a is a symlink"),
            Path::new("..data/a")
        );
        let ts = std::fs::read_link(cfg.join("..data")).expect("..data is a symlink");
        assert!(cfg.join(&ts).join("b").is_file(), "{ts:?}");
        let objs = crate::apiobjects::ApiObjects::from_objects(
            "ns",
            vec![cm(serde_json::json!({"a": "changed"}))],
            vec![],
        );
        mount_pod_volumes(&p, dir.path(), &objs).expect("updated");
        assert_eq!(std::fs::read_to_string(cfg.join("a")).unwrap(), "changed");
        assert!(!cfg.join("b").exists(), "a removed key's file goes");
        assert!(
            std::fs::symlink_metadata(cfg.join("b")).is_err(),
            "and its symlink"
        );
        assert!(
            !cfg.join(&ts).exists(),
            "the old timestamped directory goes"
        );
        let none = crate::apiobjects::ApiObjects::from_objects("ns", vec![], vec![]);
        let err = mount_pod_volumes(&p, dir.path(), &none).expect_err("missing");
        assert!(
            err.to_string()
                .ends_with("configmap \"settings\" not found"),
            "{err}"
        );
        if let Some(v) = p.spec.as_mut().and_then(|s| s.volumes.as_mut())
            && let Some(c) = v.last_mut().and_then(|v| v.config_map.as_mut())
        {
            c.optional = Some(true);
        }
        mount_pod_volumes(&p, dir.path(), &none).expect("optional and missing: empty");
    }

    /// Upstream `SetVolumeOwnership` after the secret, projected and emptyDir set-ups: the
    /// pod's fsGroup owns every file and directory, files get group read (read-only volumes)
    /// or read-write (emptyDir), directories setgid; without fsGroup nothing changes.
    #[test]
    fn fs_group_owns_secret_projected_and_empty_dir_volumes() {
        use k8s_openapi::api::core::v1::{
            KeyToPath, PodSecurityContext, ProjectedVolumeSource, SecretProjection,
            SecretVolumeSource, VolumeProjection,
        };
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED fsGroup ownership: chown to another group needs root");
            return;
        }
        let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "s"}, "data": {"data-1": "dmFsdWUtMQ=="}}),
        )
        .expect("secret");
        let objs = crate::apiobjects::ApiObjects::from_objects("ns", vec![], vec![secret]);
        let pod_with = |fs_group: Option<i64>, default_mode: i32| Pod {
            spec: Some(PodSpec {
                security_context: Some(PodSecurityContext {
                    fs_group,
                    ..Default::default()
                }),
                volumes: Some(vec![
                    Volume {
                        name: "sec".into(),
                        secret: Some(SecretVolumeSource {
                            secret_name: Some("s".into()),
                            default_mode: Some(default_mode),
                            items: Some(vec![KeyToPath {
                                key: "data-1".into(),
                                path: "sub/data-1".into(),
                                mode: None,
                            }]),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    Volume {
                        name: "proj".into(),
                        projected: Some(ProjectedVolumeSource {
                            default_mode: Some(default_mode),
                            sources: Some(vec![VolumeProjection {
                                secret: Some(SecretProjection {
                                    name: "s".into(),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            }]),
                        }),
                        ..Default::default()
                    },
                    Volume {
                        name: "scratch".into(),
                        empty_dir: Some(EmptyDirVolumeSource::default()),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        // Through the user-visible symlinks (`sub -> ..data/sub`): the files and directories
        // of the timestamped directory.
        let stat = |p: &Path| {
            let md = std::fs::metadata(p).expect("stat");
            (md.gid(), md.mode() & 0o7777)
        };
        for (default_mode, file_mode) in [(0o440, 0o440), (0o400, 0o440), (0o644, 0o644)] {
            let dir = tempfile::tempdir().expect("tempdir");
            let paths = mount_pod_volumes(&pod_with(Some(1001), default_mode), dir.path(), &objs)
                .expect("mount");
            assert_eq!(
                std::fs::read_to_string(paths["sec"].join("sub/data-1")).expect("read"),
                "value-1"
            );
            assert_eq!(stat(&paths["sec"].join("sub/data-1")), (1001, file_mode));
            assert_eq!(stat(&paths["sec"].join("sub")).0, 1001);
            assert_eq!(stat(&paths["sec"].join("sub")).1 & 0o2550, 0o2550);
            assert_eq!(stat(&paths["sec"]).0, 1001);
            assert_eq!(stat(&paths["proj"].join("data-1")), (1001, file_mode));
            assert_eq!(stat(&paths["scratch"]), (1001, 0o2777));
            // A file a container made in the emptyDir is not walked again on the next sync.
            let mine = paths["scratch"].join("mine");
            std::fs::write(&mine, b"x").expect("write");
            std::os::unix::fs::chown(&mine, None, Some(0)).expect("chown");
            mount_pod_volumes(&pod_with(Some(1001), default_mode), dir.path(), &objs)
                .expect("again");
            assert_eq!(stat(&mine).0, 0);
            assert_eq!(stat(&paths["scratch"]), (1001, 0o2777));
            assert_eq!(stat(&paths["sec"].join("sub/data-1")), (1001, file_mode));
        }
        // Without fsGroup: the modes as given, the kubelet's group.
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = mount_pod_volumes(&pod_with(None, 0o400), dir.path(), &objs).expect("mount");
        assert_eq!(stat(&paths["sec"].join("sub/data-1")), (0, 0o400));
        assert_eq!(stat(&paths["scratch"]), (0, 0o777));
    }

    /// A subPath into a configMap volume goes through the atomic writer's symlinks
    /// (`data-1 -> ..data/data-1`, `path -> ..data/path`) into the timestamped directory, which
    /// is inside the volume: allowed, as upstream, and the bind mount shows the key's content.
    #[test]
    fn sub_path_into_a_config_map_volume_resolves_its_symlinks() {
        use k8s_openapi::api::core::v1::{ConfigMapVolumeSource, KeyToPath};
        let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "cm"}, "data": {"data-1": "value-1", "data-2": "value-2"}}),
        )
        .expect("configMap");
        let objs = crate::apiobjects::ApiObjects::from_objects("ns", vec![cm], vec![]);
        let p = Pod {
            spec: Some(PodSpec {
                volumes: Some(vec![Volume {
                    name: "cfg".into(),
                    config_map: Some(ConfigMapVolumeSource {
                        name: "cm".into(),
                        items: Some(vec![
                            KeyToPath {
                                key: "data-1".into(),
                                path: "data-1".into(),
                                mode: None,
                            },
                            KeyToPath {
                                key: "data-2".into(),
                                path: "path/to/data-2".into(),
                                mode: None,
                            },
                        ]),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let pod_dir = dir.path().join("pod");
        let volumes = mount_pod_volumes(&p, &pod_dir, &objs).expect("mount");
        assert_eq!(
            std::fs::read_link(volumes["cfg"].join("data-1")).expect("symlink"),
            Path::new("..data/data-1")
        );
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED the subPath bind mount: needs root");
            return;
        }
        let c = Container {
            name: "c".into(),
            volume_mounts: Some(vec![
                VolumeMount {
                    name: "cfg".into(),
                    mount_path: "/etc/data-1".into(),
                    sub_path: Some("data-1".into()),
                    ..Default::default()
                },
                VolumeMount {
                    name: "cfg".into(),
                    mount_path: "/etc/to".into(),
                    sub_path: Some("path/to".into()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let mounts = make_mounts(
            &c,
            &volumes,
            &read_only_volumes(&p),
            &pod_dir,
            &HashMap::new(),
        )
        .expect("subPath mounts");
        let ro: Vec<bool> = mounts.iter().map(|m| m.readonly).collect();
        let got = std::fs::read_to_string(&mounts[0].host_path);
        let nested = std::fs::read_to_string(Path::new(&mounts[1].host_path).join("data-2"));
        unmount_pod_dir(&pod_dir);
        assert_eq!(got.expect("the key through its bind mount"), "value-1");
        assert_eq!(nested.expect("the nested key"), "value-2");
        assert_eq!(
            ro,
            [true, true],
            "subPath mounts of a configMap are read-only"
        );
    }

    #[test]
    fn sub_path_rules_and_managed_mounts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vol = dir.path().join("vol");
        std::fs::create_dir_all(&vol).expect("vol");
        let volumes = HashMap::from([("v".to_string(), vol.clone())]);
        let with_sub = |sub: &str| Container {
            name: "c".into(),
            volume_mounts: Some(vec![VolumeMount {
                name: "v".into(),
                mount_path: "/m".into(),
                sub_path: Some(sub.into()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let pod_dir = dir.path().join("pod");
        let mounts = |sub: &str| {
            make_mounts(
                &with_sub(sub),
                &volumes,
                &HashSet::new(),
                &pod_dir,
                &HashMap::new(),
            )
        };
        assert!(mounts("../x").is_err());
        assert!(mounts("/abs").is_err());
        std::os::unix::fs::symlink("/", vol.join("escape")).expect("symlink");
        let err = mounts("escape").expect_err("escape").to_string();
        assert!(err.contains("not within volume path"), "{err}");
        assert!(
            mounts("escape/new").is_err(),
            "not created through a symlink out"
        );
        assert!(!Path::new("/new").exists());
        // The bind mount needs CAP_SYS_ADMIN (the test bed runs as root).
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let m = mounts("a/b").expect("subpath");
            assert!(vol.join("a/b").is_dir(), "created");
            let target = pod_dir.join("volume-subpaths/v/c/0");
            assert_eq!(m[0].host_path, target.display().to_string());
            assert!(is_mount_point(&target));
            unmount_pod_dir(&pod_dir);
        } else {
            eprintln!("SKIPPED the subPath bind mount: needs root");
        }

        // subPathExpr: expanded with the container's environment, then checked as a subPath.
        let with_expr = |expr: &str| Container {
            name: "c".into(),
            volume_mounts: Some(vec![VolumeMount {
                name: "v".into(),
                mount_path: "/m".into(),
                sub_path_expr: Some(expr.into()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let env = HashMap::from([
            ("POD_NAME".to_string(), "pod-1".to_string()),
            ("UP".to_string(), "..".to_string()),
            ("ABS".to_string(), "/etc".to_string()),
        ]);
        let expr = |e: &str| make_mounts(&with_expr(e), &volumes, &HashSet::new(), &pod_dir, &env);
        assert_eq!(
            expr("$(MISSING)").expect_err("missing"),
            VolumeError::SubPathExpr("missing value for MISSING".into())
        );
        assert_eq!(
            expr("$(MISSING)").expect_err("missing").to_string(),
            "missing value for MISSING"
        );
        let err = expr("$(ABS)").expect_err("absolute").to_string();
        assert!(
            err.ends_with("error SubPath `/etc` must not be an absolute path"),
            "{err}"
        );
        let err = expr("$(UP)/x").expect_err("backsteps").to_string();
        assert!(err.contains("`../x` must not contain '..'"), "{err}");
        assert!(!vol.join("pod-1").exists());
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let m = expr("logs/$(POD_NAME)").expect("subPathExpr");
            assert!(
                vol.join("logs/pod-1").is_dir(),
                "created under the expanded name"
            );
            assert_eq!(
                m[0].host_path,
                pod_dir.join("volume-subpaths/v/c/0").display().to_string()
            );
            unmount_pod_dir(&pod_dir);
        } else {
            eprintln!("SKIPPED the subPathExpr bind mount: needs root");
        }

        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            host_aliases: Some(vec![k8s_openapi::api::core::v1::HostAlias {
                ip: "10.1.1.1".into(),
                hostnames: Some(vec!["a".into(), "b".into()]),
            }]),
            ..Default::default()
        });
        let c = Container {
            name: "c".into(),
            termination_message_path: Some("/dev/termination-log".into()),
            ..Default::default()
        };
        let mounts =
            kubelet_managed_mounts(&pod, &c, &pod_dir, &["10.0.0.5".into()], &[]).expect("managed");
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[0].container_path, "/etc/hosts");
        let hosts = std::fs::read_to_string(&mounts[0].host_path).expect("hosts");
        assert!(hosts.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(hosts.contains("\n10.0.0.5\tweb\n"), "{hosts}");
        assert!(hosts.ends_with("# Entries added by HostAliases.\n10.1.1.1\ta\tb\n"));
        assert_eq!(mounts[1].container_path, "/dev/termination-log");
        // Host network: no managed hosts file.
        if let Some(s) = pod.spec.as_mut() {
            s.host_network = Some(true);
        }
        let mounts =
            kubelet_managed_mounts(&pod, &c, &pod_dir, &["10.0.0.5".into()], &[]).expect("managed");
        assert_eq!(mounts.len(), 1);
    }

    /// A pod with claim volumes: the local PV is bind-mounted under the pod directory (a write
    /// there lands in the PV's path, a read-only claim's mount refuses writes), the hostPath PV
    /// is its path; an unbound claim fails with upstream's message; removing the pod directory
    /// unmounts and keeps the PV's data.
    #[test]
    fn claim_volumes_mount_by_their_volume_source() {
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: bind mounts need root");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let (local, host) = (dir.path().join("local"), dir.path().join("host"));
        std::fs::create_dir_all(&local).expect("local");
        std::fs::create_dir_all(&host).expect("host");
        let pod_dir = dir.path().join("pod");
        let claim = |name: &str,
                     pv: &str,
                     phase: &str|
         -> k8s_openapi::api::core::v1::PersistentVolumeClaim {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid")},
                "spec": {"volumeName": pv}, "status": {"phase": phase}
            }))
            .expect("pvc")
        };
        let pv = |name: &str,
                  claim: &str,
                  source: serde_json::Value|
         -> k8s_openapi::api::core::v1::PersistentVolume {
            let mut spec = serde_json::json!({"claimRef": {"namespace": "ns", "name": claim}});
            if let (Some(s), Some(src)) = (spec.as_object_mut(), source.as_object()) {
                s.extend(src.clone());
            }
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "spec": spec}))
                .expect("pv")
        };
        let objs = crate::apiobjects::ApiObjects::from_objects("ns", vec![], vec![])
            .with_persistent_volumes(
                vec![
                    claim("data", "pv-local", "Bound"),
                    claim("ro", "pv-local-ro", "Bound"),
                    claim("hp", "pv-host", "Bound"),
                    claim("waiting", "", "Pending"),
                ],
                vec![
                    pv(
                        "pv-local",
                        "data",
                        serde_json::json!({"local": {"path": local}}),
                    ),
                    pv(
                        "pv-local-ro",
                        "ro",
                        serde_json::json!({"local": {"path": local}}),
                    ),
                    pv(
                        "pv-host",
                        "hp",
                        serde_json::json!({"hostPath": {"path": host, "type": "Directory"}}),
                    ),
                ],
            );
        let volume = |name: &str, claim: &str, read_only: bool| Volume {
            name: name.into(),
            persistent_volume_claim: Some(
                k8s_openapi::api::core::v1::PersistentVolumeClaimVolumeSource {
                    claim_name: claim.into(),
                    read_only: Some(read_only),
                },
            ),
            ..Default::default()
        };
        let mut p = pod();
        p.metadata.namespace = Some("ns".into());
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            volumes: Some(vec![
                volume("data", "data", false),
                volume("ro", "ro", true),
                volume("hp", "hp", false),
            ]),
            ..Default::default()
        });
        let paths = mount_pod_volumes(&p, &pod_dir, &objs).expect("mount");
        assert_eq!(
            paths["data"],
            pod_dir.join("volumes/kubernetes.io~local-volume/pv-local")
        );
        assert_eq!(paths["hp"], host);
        assert!(is_mount_point(&paths["data"]) && is_mount_point(&paths["ro"]));
        std::fs::write(paths["data"].join("f"), "x").expect("write through the bind mount");
        assert_eq!(
            std::fs::read_to_string(local.join("f")).expect("on the PV"),
            "x"
        );
        let err = std::fs::write(paths["ro"].join("g"), "x").expect_err("read-only");
        assert_eq!(err.raw_os_error(), Some(libc::EROFS));
        assert_eq!(
            read_only_volumes(&p),
            HashSet::from(["ro".to_string()]),
            "the read-only claim mounts read-only"
        );
        assert_eq!(
            plugin_names(&p, &objs),
            [
                "kubernetes.io/local-volume",
                "kubernetes.io/local-volume",
                "kubernetes.io/host-path"
            ]
        );
        let claims = claim_volumes(&p, &pod_dir, &objs);
        assert_eq!(
            claims
                .iter()
                .map(|c| (c.volume.as_str(), c.claim.as_str(), c.stat_fs))
                .collect::<Vec<_>>(),
            [
                ("data", "data", true),
                ("ro", "ro", true),
                ("hp", "hp", false)
            ]
        );
        // Idempotent: mounted once.
        mount_pod_volumes(&p, &pod_dir, &objs).expect("again");
        assert_eq!(mount::mounts_under(&pod_dir).len(), 2);
        remove_pod_dir(&pod_dir).expect("remove");
        assert!(!pod_dir.exists());
        assert!(local.join("f").exists(), "the PV's data stays");
        // An unbound claim: no mount, upstream's message.
        let mut waiting = p.clone();
        waiting.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            volumes: Some(vec![volume("w", "waiting", false)]),
            ..Default::default()
        });
        let err = mount_pod_volumes(&waiting, &pod_dir, &objs).expect_err("unbound");
        assert_eq!(
            err.to_string(),
            "unmounted volumes=[w], failed to process volumes=[w]: error processing PVC ns/waiting: PVC is not bound"
        );
        assert!(claim_volumes(&waiting, &pod_dir, &objs).is_empty());
    }
}
