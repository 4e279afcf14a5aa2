//! What the file-backed volume plugins (downwardAPI, configMap, secret, projected) share
//! (upstream `pkg/volume/util`: the atomic writer of `atomic_writer.go` and the key-to-path
//! payload rule of the configMap/secret `MakePayload`): item paths checked to stay inside the
//! volume, files written atomically with their modes, files of earlier versions pruned.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub(super) fn valid_relative_path(p: &str) -> bool {
    !p.is_empty()
        && !Path::new(p).is_absolute()
        && !Path::new(p)
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
}

/// Write files into `dir` (replacing changed ones atomically), with their modes.
/// A file of a volume: relative path, content, mode.
pub(super) type VolumeFile = (String, Vec<u8>, i32);

/// Writes `files` under `dir` (each replaced atomically when its content changed) and removes
/// files of earlier versions that are no longer part of the volume.
pub(super) fn write_volume_files(dir: &Path, files: &[VolumeFile]) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (rel, content, mode) in files {
        if !valid_relative_path(rel) {
            return Err(format!("invalid item path {rel:?}"));
        }
        let path = dir.join(rel);
        if std::fs::read(&path).is_ok_and(|c| &c == content) {
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        let tmp = path.with_extension("kubelet-tmp");
        std::fs::write(&tmp, content).map_err(|e| format!("write {}: {e}", tmp.display()))?;
        let mode = u32::try_from(*mode).unwrap_or(0o644) & 0o777;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
            .map_err(|e| e.to_string())?;
        std::fs::rename(&tmp, &path).map_err(|e| format!("rename {}: {e}", path.display()))?;
    }
    let keep: std::collections::HashSet<PathBuf> = files.iter().map(|f| dir.join(&f.0)).collect();
    prune(dir, &keep);
    Ok(())
}

/// Removes files under `dir` not in `keep`, and directories left empty.
fn prune(dir: &Path, keep: &std::collections::HashSet<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            prune(&p, keep);
            let _ = std::fs::remove_dir(&p);
        } else if !keep.contains(&p) {
            let _ = std::fs::remove_file(&p);
        }
    }
}

/// The files of a configMap or secret volume (upstream `MakePayload`): every key, or the
/// listed `items` (a missing key fails unless the volume is optional).
pub(super) fn key_files(
    kind: &str,
    data: Option<BTreeMap<String, Vec<u8>>>,
    items: Option<&[k8s_openapi::api::core::v1::KeyToPath]>,
    default_mode: Option<i32>,
    optional: bool,
) -> Result<Vec<VolumeFile>, String> {
    let Some(data) = data else {
        return Ok(Vec::new());
    };
    let mode = default_mode.unwrap_or(0o644);
    match items.filter(|i| !i.is_empty()) {
        None => Ok(data.into_iter().map(|(k, v)| (k, v, mode)).collect()),
        Some(items) => {
            let mut out = Vec::new();
            for i in items {
                match data.get(&i.key) {
                    Some(v) => out.push((i.path.clone(), v.clone(), i.mode.unwrap_or(mode))),
                    None if optional => {}
                    None => {
                        return Err(format!("{kind} references non-existent key: {}", i.key));
                    }
                }
            }
            Ok(out)
        }
    }
}
