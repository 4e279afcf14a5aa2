//! The downwardAPI volume plugin (upstream `pkg/volume/downwardapi`): one file per item, with
//! pod metadata fields (name, namespace, uid, labels, annotations) or container resources.

use std::path::Path;

use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, DownwardAPIVolumeSource, Pod};

use super::util::{VolumeFile, write_volume_files};
use crate::envvars::{NodeAllocatable, container_resource_value, format_map};

/// The downwardAPI plugin's directory name.
pub const DOWNWARD_API_PLUGIN: &str = "kubernetes.io~downward-api";

/// The file content of one downwardAPI item (upstream `CollectData` of the downwardAPI plugin:
/// only pod metadata fields and container resources).
pub fn downward_api_item_value(
    item: &DownwardAPIVolumeFile,
    pod: &Pod,
    node: &NodeAllocatable,
) -> Result<String, String> {
    if let Some(f) = &item.field_ref {
        let m = &pod.metadata;
        return match f.field_path.as_str() {
            "metadata.labels" => Ok(format_map(m.labels.as_ref())),
            "metadata.annotations" => Ok(format_map(m.annotations.as_ref())),
            p @ ("metadata.name" | "metadata.namespace" | "metadata.uid") => {
                Ok(crate::envvars::pod_field_value(pod, p, &[], "").unwrap_or_default())
            }
            p if p.starts_with("metadata.labels['") || p.starts_with("metadata.annotations['") => {
                Ok(crate::envvars::pod_field_value(pod, p, &[], "").unwrap_or_default())
            }
            p => Err(format!("unsupported fieldPath: {p}")),
        };
    }
    if let Some(r) = &item.resource_field_ref {
        let name = r.container_name.as_deref().unwrap_or_default();
        let c = pod
            .spec
            .as_ref()
            .and_then(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
                    .find(|c| c.name == name)
            })
            .ok_or_else(|| format!("resourceFieldRef: container {name:?} not found"))?;
        return container_resource_value(r, c, node).map_err(|e| e.to_string());
    }
    Err(format!(
        "item {:?} has no fieldRef or resourceFieldRef",
        item.path
    ))
}

pub(super) fn downward_files(
    items: &[DownwardAPIVolumeFile],
    default_mode: Option<i32>,
    pod: &Pod,
    node: &NodeAllocatable,
) -> Result<Vec<VolumeFile>, String> {
    items
        .iter()
        .map(|i| {
            Ok((
                i.path.clone(),
                downward_api_item_value(i, pod, node)?.into_bytes(),
                i.mode.or(default_mode).unwrap_or(0o644),
            ))
        })
        .collect()
}

/// Upstream `SetUp` of the downwardAPI plugin.
pub(super) fn set_up(
    d: &DownwardAPIVolumeSource,
    path: &Path,
    pod: &Pod,
    node: &NodeAllocatable,
    fs_group: Option<u32>,
) -> Result<(), String> {
    let files = downward_files(d.items.as_deref().unwrap_or(&[]), d.default_mode, pod, node)?;
    write_volume_files(path, &files, fs_group)
}
