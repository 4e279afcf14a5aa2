//! The secret volume plugin (upstream `pkg/volume/secret`): the secret's keys (or the listed
//! items) as files, from the API server's objects; a missing secret or key fails unless the
//! volume is optional.

use std::path::Path;

use k8s_openapi::api::core::v1::SecretVolumeSource;

use super::util::{key_files, write_volume_files};

/// Upstream secret volume plugin directory.
pub const SECRET_PLUGIN: &str = "kubernetes.io~secret";

/// Upstream `SetUp` of the secret plugin.
pub(super) fn set_up(
    s: &SecretVolumeSource,
    path: &Path,
    objects: &crate::apiobjects::ApiObjects,
    fs_group: Option<u32>,
) -> Result<(), String> {
    let optional = s.optional.unwrap_or(false);
    let name = s.secret_name.as_deref().unwrap_or_default();
    let data = objects.secret_data(name, optional)?;
    let files = key_files("secret", data, s.items.as_deref(), s.default_mode, optional)?;
    write_volume_files(path, &files, fs_group)
}
