//! PersistentVolumeClaim volumes: the claim resolved to its PersistentVolume as upstream's
//! desired-state-of-world populator does (`getPVCExtractPV`, `getPVSpec` in
//! `pkg/kubelet/volumemanager/populator`), then mounted by the PV's source through the plugins a
//! node serves without a CSI driver: `hostPath` (upstream `pkg/volume/hostpath`: the host's
//! path as given, with the type check) and `local` (upstream `pkg/volume/local`: a bind mount
//! of `spec.local.path` at `<pod dir>/volumes/kubernetes.io~local-volume/<PV name>`, `ro` for a
//! read-only claim). Any other source is refused, naming the PV and its source.
//!
//! The claim and the volume come from the API server through [`ApiObjects`] (GET at each sync,
//! see `crate::apiobjects::fetch`); the claim must be Bound to a volume whose `claimRef` points
//! back at it.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaimVolumeSource};

use super::mount::{c_path, is_mount_point};
use crate::apiobjects::ApiObjects;

/// Upstream local volume plugin directory (`kubernetes.io~local-volume`).
pub const LOCAL_VOLUME_PLUGIN: &str = "kubernetes.io~local-volume";

/// The PV sources this node mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimSource {
    /// `spec.hostPath`: path and type.
    HostPath { path: PathBuf, type_: String },
    /// `spec.local.path`.
    Local { path: PathBuf },
}

/// A claim resolved to its bound volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedClaim {
    /// The claim's namespace (the pod's).
    pub namespace: String,
    /// The claim's name.
    pub claim: String,
    /// The bound PersistentVolume's name.
    pub volume: String,
    /// Its source.
    pub source: ClaimSource,
    /// The pod's `persistentVolumeClaim.readOnly` (upstream `spec.ReadOnly` of a PV-backed
    /// volume; the hostPath and local PV sources have no `readOnly` of their own).
    pub read_only: bool,
}

impl ResolvedClaim {
    /// The upstream plugin name (`volume_manager_total_volumes`).
    pub fn plugin_name(&self) -> &'static str {
        match self.source {
            ClaimSource::HostPath { .. } => "kubernetes.io/host-path",
            ClaimSource::Local { .. } => "kubernetes.io/local-volume",
        }
    }

    /// Where the containers mount the volume from: the hostPath as given, the local volume's
    /// bind mount under the pod directory.
    pub fn host_path(&self, pod_dir: &Path) -> PathBuf {
        match &self.source {
            ClaimSource::HostPath { path, .. } => path.clone(),
            ClaimSource::Local { .. } => {
                super::plugin_dir(pod_dir, LOCAL_VOLUME_PLUGIN, &self.volume)
            }
        }
    }

    /// Whether the plugin has a metrics provider: upstream's local plugin has `MetricsStatFS`,
    /// hostPath `MetricsNil`.
    pub fn has_metrics(&self) -> bool {
        matches!(self.source, ClaimSource::Local { .. })
    }
}

/// The fields of a `PersistentVolumeSpec` that are not its source.
const NOT_SOURCES: [&str; 8] = [
    "accessModes",
    "capacity",
    "claimRef",
    "mountOptions",
    "nodeAffinity",
    "persistentVolumeReclaimPolicy",
    "storageClassName",
    "volumeMode",
];

/// The name of a PV's source (`nfs`, `csi`, …) as its spec's field is named.
fn source_name(pv: &PersistentVolume) -> String {
    let spec = serde_json::to_value(pv.spec.clone().unwrap_or_default()).unwrap_or_default();
    spec.as_object()
        .into_iter()
        .flat_map(|m| m.keys())
        .find(|k| !NOT_SOURCES.contains(&k.as_str()))
        .cloned()
        .unwrap_or_else(|| "none".into())
}

/// Upstream `getPVCExtractPV` and `getPVSpec`, then the plugin the PV's source needs: the
/// claim must exist, not be being deleted, be Bound with a `volumeName`; the volume must exist
/// and its `claimRef` name this claim (namespace and name, and its UID when the reference has
/// one); its source must be `hostPath` or `local`. Errors read as upstream's, prefixed with
/// `error processing PVC <ns>/<name>: `.
pub fn resolve(
    src: &PersistentVolumeClaimVolumeSource,
    objects: &ApiObjects,
) -> Result<ResolvedClaim, String> {
    let ns = objects.namespace().to_string();
    let name = src.claim_name.as_str();
    let fail = |m: String| format!("error processing PVC {ns}/{name}: {m}");
    let pvc = objects
        .persistent_volume_claim(name)
        .map_err(|e| fail(format!("failed to fetch PVC from API server: {e}")))?
        .ok_or_else(|| {
            fail(format!(
                "failed to fetch PVC from API server: persistentvolumeclaims \"{name}\" not found"
            ))
        })?;
    if pvc.metadata.deletion_timestamp.is_some() {
        return Err(fail("PVC is being deleted".into()));
    }
    if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
        return Err(fail("PVC is not bound".into()));
    }
    let pv_name = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| fail("PVC has empty pvc.Spec.VolumeName".into()))?;
    let pv = objects
        .persistent_volume(&pv_name)
        .map_err(|e| fail(format!("failed to fetch PV {pv_name} from API server: {e}")))?
        .ok_or_else(|| {
            fail(format!(
                "failed to fetch PV {pv_name} from API server: persistentvolumes \"{pv_name}\" not found"
            ))
        })?;
    let spec = pv.spec.clone().unwrap_or_default();
    let Some(r) = spec.claim_ref.as_ref() else {
        return Err(fail(format!(
            "found PV object {pv_name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        )));
    };
    let (ref_ns, ref_name) = (
        r.namespace.as_deref().unwrap_or_default(),
        r.name.as_deref().unwrap_or_default(),
    );
    if ref_ns != ns || ref_name != name {
        return Err(fail(format!(
            "found PV object {pv_name} but its pv.Spec.ClaimRef {ref_ns}/{ref_name} does not point to claim {ns}/{name}"
        )));
    }
    let claim_uid = pvc.metadata.uid.as_deref().unwrap_or_default();
    if let Some(uid) = r.uid.as_deref().filter(|u| !u.is_empty())
        && uid != claim_uid
    {
        return Err(fail(format!(
            "found PV object {pv_name} but its pv.Spec.ClaimRef.UID {uid} does not point to claim.UID {claim_uid}"
        )));
    }
    if spec.volume_mode.as_deref() == Some("Block") {
        return Err(fail(format!(
            "PV {pv_name}: volumeMode Block is not supported on this node (Filesystem only)"
        )));
    }
    let source = if let Some(hp) = &spec.host_path {
        ClaimSource::HostPath {
            path: PathBuf::from(&hp.path),
            type_: hp.type_.clone().unwrap_or_default(),
        }
    } else if let Some(l) = &spec.local {
        ClaimSource::Local {
            path: PathBuf::from(&l.path),
        }
    } else {
        return Err(fail(format!(
            "PV {pv_name}: unsupported volume source {} (this node mounts hostPath and local persistent volumes only)",
            source_name(pv)
        )));
    };
    Ok(ResolvedClaim {
        namespace: ns.clone(),
        claim: name.to_string(),
        volume: pv_name,
        source,
        read_only: src.read_only.unwrap_or(false),
    })
}

/// Bind-mount `src` at `dir` (`ro`: a read-only remount of the bind, as mount(8) does).
fn bind_mount(src: &Path, dir: &Path, read_only: bool) -> Result<(), String> {
    let (source, target) = (c_path(src)?, c_path(dir)?);
    let none = c"none";
    // SAFETY: mount(2) with valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            none.as_ptr(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "mount failed: bind {} on {}: {}",
            src.display(),
            dir.display(),
            std::io::Error::last_os_error()
        ));
    }
    if read_only {
        // SAFETY: as above.
        let rc = unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                none.as_ptr(),
                libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: umount2(2) with a valid NUL-terminated path.
            unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            return Err(format!(
                "mount failed: read-only remount of {}: {e}",
                dir.display()
            ));
        }
    }
    Ok(())
}

/// Upstream `SetUp` of the plugin the claim's volume needs, at `dir` (its
/// [`ResolvedClaim::host_path`]).
pub(super) fn set_up(c: &ResolvedClaim, dir: &Path, fs_group: Option<u32>) -> Result<(), String> {
    match &c.source {
        ClaimSource::HostPath { path, type_ } => super::hostpath::check_host_path_type(path, type_),
        ClaimSource::Local { path } => {
            // Upstream `localVolumeMounter.SetUpAt`: nothing to do when already mounted; the
            // volume's path must exist; the bind mount; the pod's fsGroup on a writable volume.
            if is_mount_point(dir) {
                return Ok(());
            }
            if std::fs::metadata(path).is_err() {
                return Err(format!(
                    "local volume {}: path {:?} does not exist",
                    c.volume,
                    path.display().to_string()
                ));
            }
            {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o750)
                    .create(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            }
            bind_mount(path, dir, c.read_only)?;
            tracing::info!(pv = %c.volume, src = %path.display(), dir = %dir.display(), read_only = c.read_only, "mounted local volume");
            if !c.read_only {
                super::ownership::set_volume_ownership(dir, fs_group, false)?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;

    fn claim(phase: &str, volume_name: &str) -> PersistentVolumeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "data", "namespace": "ns", "uid": "claim-uid"},
            "spec": {"volumeName": volume_name, "accessModes": ["ReadWriteOnce"]},
            "status": {"phase": phase}
        }))
        .expect("pvc")
    }

    fn volume(claim_ref: serde_json::Value, source: serde_json::Value) -> PersistentVolume {
        let mut spec = serde_json::json!({
            "capacity": {"storage": "8Mi"}, "accessModes": ["ReadWriteOnce"],
            "claimRef": claim_ref,
        });
        if let (Some(s), Some(src)) = (spec.as_object_mut(), source.as_object()) {
            s.extend(src.clone());
        }
        serde_json::from_value(serde_json::json!({"metadata": {"name": "pv1"}, "spec": spec}))
            .expect("pv")
    }

    fn good_ref() -> serde_json::Value {
        serde_json::json!({"namespace": "ns", "name": "data", "uid": "claim-uid"})
    }

    fn src(read_only: bool) -> PersistentVolumeClaimVolumeSource {
        PersistentVolumeClaimVolumeSource {
            claim_name: "data".into(),
            read_only: Some(read_only),
        }
    }

    fn objects(c: PersistentVolumeClaim, v: Option<PersistentVolume>) -> ApiObjects {
        ApiObjects::from_objects("ns", vec![], vec![])
            .with_persistent_volumes(vec![c], v.into_iter().collect())
    }

    #[test]
    fn an_unbound_claim_is_refused() {
        let local = volume(good_ref(), serde_json::json!({"local": {"path": "/mnt/x"}}));
        let err = resolve(
            &src(false),
            &objects(claim("Pending", ""), Some(local.clone())),
        )
        .expect_err("pending");
        assert_eq!(err, "error processing PVC ns/data: PVC is not bound");
        let err = resolve(&src(false), &objects(claim("Bound", ""), Some(local)))
            .expect_err("no volumeName");
        assert_eq!(
            err,
            "error processing PVC ns/data: PVC has empty pvc.Spec.VolumeName"
        );
        let missing = ApiObjects::from_objects("ns", vec![], vec![]);
        assert_eq!(
            resolve(&src(false), &missing).expect_err("missing"),
            "error processing PVC ns/data: failed to fetch PVC from API server: persistentvolumeclaims \"data\" not found"
        );
        assert!(
            resolve(&src(false), &ApiObjects::standalone("ns"))
                .expect_err("standalone")
                .contains("no kubeClient defined")
        );
        let err = resolve(&src(false), &objects(claim("Bound", "pv1"), None)).expect_err("no pv");
        assert!(
            err.contains("failed to fetch PV pv1 from API server"),
            "{err}"
        );
    }

    #[test]
    fn the_volume_must_point_back_at_the_claim() {
        let source = serde_json::json!({"local": {"path": "/mnt/x"}});
        for (claim_ref, want) in [
            (
                serde_json::json!({"namespace": "other", "name": "data"}),
                "does not point to claim ns/data",
            ),
            (
                serde_json::json!({"namespace": "ns", "name": "else"}),
                "does not point to claim ns/data",
            ),
            (
                serde_json::json!({"namespace": "ns", "name": "data", "uid": "old"}),
                "pv.Spec.ClaimRef.UID old does not point to claim.UID claim-uid",
            ),
        ] {
            let pv = volume(claim_ref, source.clone());
            let err = resolve(&src(false), &objects(claim("Bound", "pv1"), Some(pv)))
                .expect_err("mismatch");
            assert!(
                err.starts_with("error processing PVC ns/data: found PV object pv1")
                    && err.contains(want),
                "{err}"
            );
        }
        let mut pv = volume(serde_json::Value::Null, source.clone());
        if let Some(s) = pv.spec.as_mut() {
            s.claim_ref = None;
        }
        let err =
            resolve(&src(false), &objects(claim("Bound", "pv1"), Some(pv))).expect_err("nil ref");
        assert!(err.contains("nil pv.Spec.ClaimRef"), "{err}");
        // A reference without a UID matches by namespace and name.
        let pv = volume(
            serde_json::json!({"namespace": "ns", "name": "data"}),
            source,
        );
        assert!(resolve(&src(false), &objects(claim("Bound", "pv1"), Some(pv))).is_ok());
    }

    #[test]
    fn other_sources_are_unsupported() {
        let pv = volume(
            good_ref(),
            serde_json::json!({"nfs": {"server": "example", "path": "/export"}}),
        );
        let err = resolve(&src(false), &objects(claim("Bound", "pv1"), Some(pv))).expect_err("nfs");
        assert_eq!(
            err,
            "error processing PVC ns/data: PV pv1: unsupported volume source nfs (this node mounts hostPath and local persistent volumes only)"
        );
        let pv = volume(
            good_ref(),
            serde_json::json!({"csi": {"driver": "d", "volumeHandle": "h"}}),
        );
        let err = resolve(&src(false), &objects(claim("Bound", "pv1"), Some(pv))).expect_err("csi");
        assert!(err.contains("unsupported volume source csi"), "{err}");
    }

    #[test]
    fn local_and_host_path_volumes_resolve() {
        let pv = volume(good_ref(), serde_json::json!({"local": {"path": "/mnt/x"}}));
        let r = resolve(&src(true), &objects(claim("Bound", "pv1"), Some(pv))).expect("local");
        assert_eq!(
            r,
            ResolvedClaim {
                namespace: "ns".into(),
                claim: "data".into(),
                volume: "pv1".into(),
                source: ClaimSource::Local {
                    path: "/mnt/x".into()
                },
                read_only: true,
            }
        );
        assert_eq!(
            r.host_path(Path::new("/var/lib/kubelet/pods/u")),
            Path::new("/var/lib/kubelet/pods/u/volumes/kubernetes.io~local-volume/pv1")
        );
        assert!(r.has_metrics());
        assert_eq!(r.plugin_name(), "kubernetes.io/local-volume");
        let pv = volume(
            good_ref(),
            serde_json::json!({"hostPath": {"path": "/srv/data", "type": "Directory"}}),
        );
        let r = resolve(&src(false), &objects(claim("Bound", "pv1"), Some(pv))).expect("hostPath");
        assert_eq!(
            r.source,
            ClaimSource::HostPath {
                path: "/srv/data".into(),
                type_: "Directory".into()
            }
        );
        assert_eq!(r.host_path(Path::new("/p")), Path::new("/srv/data"));
        assert!(!r.has_metrics(), "hostPath: MetricsNil");
        assert!(!r.read_only);
    }
}
