//! The projected volume plugin (upstream `pkg/volume/projected`): downwardAPI, configMap,
//! secret and serviceAccountToken sources written together into one directory.

use std::path::Path;

use k8s_openapi::api::core::v1::{Pod, ProjectedVolumeSource};

use super::downwardapi::downward_files;
use super::util::{key_files, write_volume_files};
use crate::envvars::NodeAllocatable;

/// The projected plugin's directory name.
pub const PROJECTED_PLUGIN: &str = "kubernetes.io~projected";

/// Upstream `SetUp` of the projected plugin.
pub(super) fn set_up(
    p: &ProjectedVolumeSource,
    path: &Path,
    pod: &Pod,
    node: &NodeAllocatable,
    objects: &crate::apiobjects::ApiObjects,
    fs_group: Option<u32>,
) -> Result<(), String> {
    let mut files = Vec::new();
    for src in p.sources.iter().flatten() {
        if let Some(d) = &src.downward_api {
            files.extend(downward_files(
                d.items.as_deref().unwrap_or(&[]),
                p.default_mode,
                pod,
                node,
            )?);
        } else if let Some(c) = &src.config_map {
            let optional = c.optional.unwrap_or(false);
            let data = objects.config_map_data(&c.name, optional)?;
            files.extend(key_files(
                "configmap",
                data,
                c.items.as_deref(),
                p.default_mode,
                optional,
            )?);
        } else if let Some(s) = &src.secret {
            let optional = s.optional.unwrap_or(false);
            let data = objects.secret_data(&s.name, optional)?;
            files.extend(key_files(
                "secret",
                data,
                s.items.as_deref(),
                p.default_mode,
                optional,
            )?);
        } else if let Some(t) = &src.service_account_token {
            let token = objects.token(t)?;
            // Upstream writes the token with the volume's mode, but 0600 when the pod has an
            // fsGroup (the ownership step then makes it 0640).
            let mode = match fs_group {
                Some(_) => 0o600,
                None => p.default_mode.unwrap_or(0o600),
            };
            files.push((t.path.clone(), token.into_bytes(), mode));
        } else {
            return Err("unsupported projected volume source".into());
        }
    }
    write_volume_files(path, &files, fs_group)
}
