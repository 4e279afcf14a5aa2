//! What the file-backed volume plugins (downwardAPI, configMap, secret, projected) share
//! (upstream `pkg/volume/util`: the payload handed to `atomic_writer.go` and the key-to-path
//! payload rule of the configMap/secret `MakePayload`): item paths checked to stay inside the
//! volume, the payload handed to the atomic writer (`super::atomic_writer`) with its modes.

use std::collections::BTreeMap;
use std::path::Path;

pub(super) fn valid_relative_path(p: &str) -> bool {
    !p.is_empty()
        && !Path::new(p).is_absolute()
        && !Path::new(p)
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
}

/// A file of a volume: relative path, content, mode (upstream `FileProjection`).
pub(super) type VolumeFile = (String, Vec<u8>, i32);

/// Writes `files` into `dir` with upstream's atomic writer (`super::atomic_writer`): a new
/// timestamped directory behind `..data` when the payload changed, nothing otherwise. The
/// pod's `fs_group` is applied to the whole volume (upstream `SetVolumeOwnership` as the
/// writer's `setPerms`: files `| 0440`) before the new directory is published.
pub(super) fn write_volume_files(
    dir: &Path,
    files: &[VolumeFile],
    fs_group: Option<u32>,
) -> Result<(), String> {
    super::atomic_writer::write(dir, files, |_| {
        super::ownership::set_volume_ownership(dir, fs_group, true)
    })
    .map(|_| ())
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
