//! What the fake Engine shows of its records: an inspect and a list entry of a container, the
//! list filters, its clock, and the RepoTags of a loaded `docker save` archive. Pure functions
//! over the parent's `FakeContainer`.

use std::collections::HashMap;

use bollard::models::{
    ContainerConfig, ContainerInspectResponse, ContainerState, ContainerStateStatusEnum,
    ContainerSummary, ContainerSummaryStateEnum, EndpointSettings, MountPoint, NetworkSettings,
};

use super::FakeContainer;

/// An RFC 3339 time `secs` seconds after the fake's epoch (2024-01-01T00:00:00Z).
pub(super) fn fake_time(secs: i64) -> String {
    chrono::DateTime::from_timestamp(1_704_067_200 + secs, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

/// The `RepoTags` of the first manifest of a `docker save` tar archive.
pub(super) fn archive_tags(archive: &[u8]) -> Vec<String> {
    let mut at = 0;
    while at + 512 <= archive.len() {
        let header = &archive[at..at + 512];
        let name_end = header[..100].iter().position(|b| *b == 0).unwrap_or(100);
        let name = String::from_utf8_lossy(&header[..name_end]).into_owned();
        if name.is_empty() {
            break;
        }
        let size_field = String::from_utf8_lossy(&header[124..136]);
        let size =
            usize::from_str_radix(size_field.trim_matches(|c: char| c == '\0' || c == ' '), 8)
                .unwrap_or(0);
        let body = archive.get(at + 512..at + 512 + size).unwrap_or_default();
        if name == "manifest.json" {
            let manifest: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
            return manifest[0]["RepoTags"]
                .as_array()
                .map(|tags| {
                    tags.iter()
                        .filter_map(|t| t.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
        }
        at += 512 + size.div_ceil(512) * 512;
    }
    Vec::new()
}

/// What the Engine answers to an inspect of `c`, whose image has id `image_id`.
pub(super) fn inspect(
    c: &FakeContainer,
    image_id: String,
    resolv_conf_path: Option<String>,
) -> ContainerInspectResponse {
    let b = &c.body;
    let binds = b
        .host_config
        .as_ref()
        .and_then(|h| h.binds.clone())
        .unwrap_or_default();
    let mounts = binds
        .iter()
        .filter_map(|bind| {
            let mut it = bind.splitn(3, ':');
            let source = it.next()?.to_string();
            let destination = it.next()?.to_string();
            let opts: Vec<&str> = it.next().unwrap_or_default().split(',').collect();
            let propagation = opts
                .iter()
                .find(|o| o.contains("slave") || o.contains("shared") || o.contains("private"))
                .map_or("rprivate", |p| p);
            Some(MountPoint {
                typ: Some("bind".to_string()),
                source: Some(source),
                destination: Some(destination),
                mode: Some(opts.join(",")),
                rw: Some(!opts.contains(&"ro")),
                propagation: Some(propagation.to_string()),
                ..Default::default()
            })
        })
        .collect();
    let network_mode = b.host_config.as_ref().and_then(|h| h.network_mode.clone());
    let networks = (network_mode.is_none() && c.running()).then(|| {
        HashMap::from([(
            "bridge".to_string(),
            EndpointSettings {
                ip_address: Some(c.ip.clone()),
                ..Default::default()
            },
        )])
    });
    ContainerInspectResponse {
        id: Some(c.id.clone()),
        name: Some(format!("/{}", c.name)),
        created: Some(fake_time(c.created)),
        image: Some(image_id),
        // Docker writes no resolv.conf for a container without its networking.
        resolv_conf_path: if b.network_disabled == Some(true) {
            Some(String::new())
        } else {
            resolv_conf_path
        },
        state: Some(ContainerState {
            status: Some(c.status),
            running: Some(c.running()),
            pid: Some(if c.running() { c.pid } else { 0 }),
            exit_code: Some(c.exit_code),
            oom_killed: Some(c.oom_killed),
            started_at: Some(
                c.started_at
                    .clone()
                    .unwrap_or_else(|| "0001-01-01T00:00:00Z".into()),
            ),
            finished_at: Some(
                c.finished_at
                    .clone()
                    .unwrap_or_else(|| "0001-01-01T00:00:00Z".into()),
            ),
            ..Default::default()
        }),
        config: Some(ContainerConfig {
            hostname: b.hostname.clone(),
            user: b.user.clone(),
            env: b.env.clone(),
            cmd: b.cmd.clone(),
            entrypoint: b.entrypoint.clone(),
            image: b.image.clone(),
            labels: b.labels.clone(),
            working_dir: b.working_dir.clone(),
            tty: b.tty,
            open_stdin: b.open_stdin,
            stdin_once: b.stdin_once,
            attach_stdin: b.attach_stdin,
            exposed_ports: b.exposed_ports.clone(),
            network_disabled: b.network_disabled,
            ..Default::default()
        }),
        host_config: b.host_config.clone(),
        mounts: Some(mounts),
        network_settings: Some(NetworkSettings {
            networks,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `c` as the Engine lists it, its image having id `image_id`.
pub(super) fn summary(c: &FakeContainer, image_id: Option<String>) -> ContainerSummary {
    let state = match c.status {
        ContainerStateStatusEnum::CREATED => ContainerSummaryStateEnum::CREATED,
        ContainerStateStatusEnum::RUNNING => ContainerSummaryStateEnum::RUNNING,
        ContainerStateStatusEnum::EXITED => ContainerSummaryStateEnum::EXITED,
        ContainerStateStatusEnum::DEAD => ContainerSummaryStateEnum::DEAD,
        _ => ContainerSummaryStateEnum::EMPTY,
    };
    ContainerSummary {
        id: Some(c.id.clone()),
        names: Some(vec![format!("/{}", c.name)]),
        image: c.body.image.clone(),
        image_id,
        created: Some(1_704_067_200 + c.created),
        labels: Some(c.labels()),
        state: Some(state),
        ..Default::default()
    }
}

/// Does `c` pass Docker's list filters (`label` as `key` or `key=value`, `status`)?
pub(super) fn passes(c: &FakeContainer, filters: &HashMap<String, Vec<String>>) -> bool {
    let labels = c.labels();
    let label_ok = filters.get("label").is_none_or(|want| {
        want.iter().all(|w| match w.split_once('=') {
            Some((k, v)) => labels.get(k).map(String::as_str) == Some(v),
            None => labels.contains_key(w),
        })
    });
    let status_ok = filters
        .get("status")
        .is_none_or(|want| want.iter().any(|w| *w == c.status.to_string()));
    label_ok && status_ok
}
