//! The configMap volume plugin (upstream `pkg/volume/configmap`): the configMap's keys (or the
//! listed items) as files, from the API server's objects; a missing configMap or key fails
//! unless the volume is optional.

use std::path::Path;

use k8s_openapi::api::core::v1::ConfigMapVolumeSource;

use super::util::{key_files, write_volume_files};

/// Upstream configMap volume plugin directory.
pub const CONFIG_MAP_PLUGIN: &str = "kubernetes.io~configmap";

/// Upstream `SetUp` of the configMap plugin.
pub(super) fn set_up(
    c: &ConfigMapVolumeSource,
    path: &Path,
    objects: &crate::apiobjects::ApiObjects,
    fs_group: Option<u32>,
) -> Result<(), String> {
    let optional = c.optional.unwrap_or(false);
    let data = objects.config_map_data(&c.name, optional)?;
    let files = key_files(
        "configmap",
        data,
        c.items.as_deref(),
        c.default_mode,
        optional,
    )?;
    write_volume_files(path, &files, fs_group)
}
