//! Pod volumes, reduced to what a node without an API server can provide (upstream
//! `pkg/kubelet/volumemanager` and the `empty_dir`/`host_path` volume plugins). This module owns
//! where a pod's volumes live on the host (`emptyDir` under
//! `<root>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>`, `hostPath` as given), creating
//! them before containers start ("mounting"), and turning a container's `volumeMounts` into CRI
//! mounts. Volume types that need the API server (configMap, secret, PVCs, ...) are reported as
//! errors so the pod waits like upstream's `WaitForAttachAndMount`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cri_proto::runtime::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};

/// The emptyDir plugin's directory name (upstream `kubernetes.io~empty-dir`).
pub const EMPTY_DIR_PLUGIN: &str = "kubernetes.io~empty-dir";

/// Volume errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VolumeError {
    /// The volume type is not supported on this node.
    #[error("volume {0:?}: unsupported volume type (only emptyDir and hostPath)")]
    Unsupported(String),
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
    /// A volumeMount names no volume of the pod.
    #[error("container {container:?}: volumeMount {volume:?} names no volume of the pod")]
    UnknownVolume {
        /// Container.
        container: String,
        /// Volume name.
        volume: String,
    },
}

/// (capacity, available) bytes of the filesystem holding `path` (statvfs).
pub fn fs_capacity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs(3) with a valid NUL-terminated path and a zeroed out-struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: see above; `st` outlives the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize;
    Some((st.f_blocks * frsize, st.f_bavail * frsize))
}

/// Host paths of the pod's supported volumes (pure; see [`mount_pod_volumes`]).
pub fn volume_host_paths(pod: &Pod, pod_dir: &Path) -> HashMap<String, PathBuf> {
    let mut out = HashMap::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        if let Some(hp) = &v.host_path {
            out.insert(v.name.clone(), PathBuf::from(&hp.path));
        } else if v.empty_dir.is_some() {
            out.insert(
                v.name.clone(),
                pod_dir.join("volumes").join(EMPTY_DIR_PLUGIN).join(&v.name),
            );
        }
    }
    out
}

/// Prepare the pod's volumes: create emptyDirs and `DirectoryOrCreate` hostPaths; fail on
/// unsupported volume types (upstream `WaitForAttachAndMount`).
pub fn mount_pod_volumes(
    pod: &Pod,
    pod_dir: &Path,
) -> Result<HashMap<String, PathBuf>, VolumeError> {
    let paths = volume_host_paths(pod, pod_dir);
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let Some(path) = paths.get(&v.name) else {
            return Err(VolumeError::Unsupported(v.name.clone()));
        };
        let create = v.empty_dir.is_some()
            || v.host_path
                .as_ref()
                .is_some_and(|h| h.type_.as_deref() == Some("DirectoryOrCreate"));
        if create && let Err(e) = std::fs::create_dir_all(path) {
            return Err(VolumeError::Setup {
                name: v.name.clone(),
                path: path.display().to_string(),
                reason: e.to_string(),
            });
        }
    }
    Ok(paths)
}

/// CRI mounts for `c`'s volumeMounts (upstream `makeMounts`, without subPathExpr/propagation).
pub fn make_mounts(
    c: &Container,
    volumes: &HashMap<String, PathBuf>,
) -> Result<Vec<cri::Mount>, VolumeError> {
    c.volume_mounts
        .iter()
        .flatten()
        .map(|m| {
            let host = volumes
                .get(&m.name)
                .ok_or_else(|| VolumeError::UnknownVolume {
                    container: c.name.clone(),
                    volume: m.name.clone(),
                })?;
            let host = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                Some(sub) => host.join(sub),
                None => host.clone(),
            };
            Ok(cri::Mount {
                container_path: m.mount_path.clone(),
                host_path: host.to_string_lossy().into_owned(),
                readonly: m.read_only.unwrap_or(false),
                ..Default::default()
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        EmptyDirVolumeSource, HostPathVolumeSource, PodSpec, Volume, VolumeMount,
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
        let paths = volume_host_paths(&pod(), Path::new("/var/lib/kubelet/pods/u"));
        assert_eq!(
            paths["scratch"],
            PathBuf::from("/var/lib/kubelet/pods/u/volumes/kubernetes.io~empty-dir/scratch")
        );
        let c = Container {
            name: "c".into(),
            volume_mounts: Some(vec![VolumeMount {
                name: "host".into(),
                mount_path: "/data".into(),
                sub_path: Some("x".into()),
                read_only: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let m = make_mounts(&c, &paths).expect("mounts");
        assert_eq!(m[0].host_path, "/srv/data/x");
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
        assert!(make_mounts(&bad, &paths).is_err());
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
            mount_pod_volumes(&p, dir.path()),
            Err(VolumeError::Unsupported("cfg".into()))
        );
    }
}
