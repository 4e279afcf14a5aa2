//! PersistentVolumes for end-to-end tests: a small tmpfs the test mounts as a `local` PV's
//! path (unmounted when dropped), a pre-bound claim and volume created through the API (as the
//! PV controller would leave them: the PV's `claimRef` naming the claim with its UID, the
//! claim's `spec.volumeName` and `status.phase: Bound`), and statfs(2) of a path, as upstream's
//! `MetricsStatFS` computes its figures.

use std::path::Path;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};

/// A tmpfs of `size` bytes mounted on a temporary directory; unmounted (then removed) when
/// dropped.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(size: u64) -> Tmpfs {
        let dir = tempfile::Builder::new()
            .prefix("e2e-local-pv-")
            .tempdir()
            .expect("tempdir");
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount");
        assert!(status.success(), "mount tmpfs on {}", dir.path().display());
        Tmpfs { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if let Ok(c) = std::ffi::CString::new(self.dir.path().as_os_str().as_encoded_bytes()) {
            // SAFETY: umount2(2) with a valid NUL-terminated path the test mounted.
            unsafe {
                libc::umount2(c.as_ptr(), libc::MNT_DETACH);
            }
        }
    }
}

/// upstream `fs.Info`'s figures of the filesystem at `path`: (capacity, available, used,
/// inodes, inodes free, inodes used).
pub fn statfs(path: &Path) -> [u64; 6] {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: statfs(2) with a valid NUL-terminated path and a zeroed out-struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    assert_eq!(rc, 0, "statfs {}", path.display());
    #[allow(clippy::unnecessary_cast)]
    let (blocks, bfree, bavail, bsize, files, ffree) = (
        st.f_blocks as u64,
        st.f_bfree as u64,
        st.f_bavail as u64,
        st.f_bsize as u64,
        st.f_files as u64,
        st.f_ffree as u64,
    );
    [
        blocks * bsize,
        bavail * bsize,
        (blocks - bfree) * bsize,
        files,
        ffree,
        files - ffree,
    ]
}

/// The `kubelet_volume_stats_*` names in the order of [`statfs`]'s figures.
pub const VOLUME_STATS: [&str; 6] = [
    "kubelet_volume_stats_capacity_bytes",
    "kubelet_volume_stats_available_bytes",
    "kubelet_volume_stats_used_bytes",
    "kubelet_volume_stats_inodes",
    "kubelet_volume_stats_inodes_free",
    "kubelet_volume_stats_inodes_used",
];

/// The claim `claim` in `ns`, requesting `storage`; with `volume` (a PV's JSON `spec` source,
/// e.g. `{"local": {"path": ...}}`) also the PV `pv` pre-bound to it and the claim Bound.
/// Without, the claim stays Pending (no status).
pub async fn create_claim(
    client: &Client,
    ns: &str,
    claim: &str,
    pv: &str,
    volume: Option<serde_json::Value>,
) {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let c: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": claim, "namespace": ns},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "8Mi"}},
            "storageClassName": "local-storage",
            "volumeName": if volume.is_some() { pv } else { "" },
        }
    }))
    .expect("pvc");
    let created = claims
        .create(&PostParams::default(), &c)
        .await
        .expect("create PVC");
    let Some(source) = volume else {
        return;
    };
    let uid = created.metadata.uid.clone().expect("PVC uid");
    let mut spec = serde_json::json!({
        "capacity": {"storage": "8Mi"},
        "accessModes": ["ReadWriteOnce"],
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": "local-storage",
        "volumeMode": "Filesystem",
        "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                     "namespace": ns, "name": claim, "uid": uid},
    });
    if let (Some(s), Some(src)) = (spec.as_object_mut(), source.as_object()) {
        s.extend(src.clone());
    }
    let v: PersistentVolume =
        serde_json::from_value(serde_json::json!({"metadata": {"name": pv}, "spec": spec}))
            .expect("pv");
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    volumes
        .create(&PostParams::default(), &v)
        .await
        .expect("create PV");
    volumes
        .patch_status(
            pv,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"phase": "Bound"}})),
        )
        .await
        .expect("PV status");
    claims
        .patch_status(
            claim,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {
                "phase": "Bound", "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "8Mi"}}})),
        )
        .await
        .expect("PVC status");
}

/// A `local` PV source at `path`, with the node affinity the API requires of one.
pub fn local_source(path: &Path, node: &str) -> serde_json::Value {
    serde_json::json!({
        "local": {"path": path},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
    })
}

/// Deletes the claims and volumes (clean-up; errors ignored).
pub async fn delete_claims(client: &Client, ns: &str, claims: &[String], pvs: &[String]) {
    let c: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    for n in claims {
        let _ = c.delete(n, &Default::default()).await;
    }
    let v: Api<PersistentVolume> = Api::all(client.clone());
    for n in pvs {
        let _ = v.delete(n, &Default::default()).await;
    }
}

/// The value of the sample `name{labels}` in a Prometheus text page (labels as written,
/// e.g. `namespace="default",persistentvolumeclaim="x"`).
pub fn sample(page: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    page.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}
