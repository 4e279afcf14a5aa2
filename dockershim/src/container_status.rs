//! Reading containers back (upstream `docker_container.go`'s ListContainers and
//! ContainerStatus): Docker's listing and inspect data as CRI containers and statuses, with
//! every ListContainers filter, Docker's states mapped to CRI's, the exit reason (Completed,
//! Error, OOMKilled, also from an `oom` event Docker's flag missed), the pullable image
//! reference, and mounts and resources read back from the host config.

use std::collections::HashMap;

use bollard::models::ContainerInspectResponse;
use cri_proto::runtime::v1 as cri;

use crate::docker::DockerApi;
use crate::errors::Result;
use crate::filter::{id_matches, matches_selector, may_match_selector, summary_label};
use crate::labels;
use crate::naming;
use crate::shim::Shim;
use crate::timestamp::docker_time_ns;

/// Docker container state -> CRI state.
pub fn container_state(status: Option<&str>) -> cri::ContainerState {
    match status {
        Some("running") | Some("paused") | Some("restarting") => {
            cri::ContainerState::ContainerRunning
        }
        Some("created") => cri::ContainerState::ContainerCreated,
        Some("exited") | Some("dead") => cri::ContainerState::ContainerExited,
        _ => cri::ContainerState::ContainerUnknown,
    }
}

/// Upstream's image reference for a container: `docker-pullable://repo@digest` when the image
/// has a repo digest, `docker://sha256:...` otherwise.
pub fn pullable_image_ref(image_id: &str, repo_digests: &[String]) -> String {
    match repo_digests.first() {
        Some(d) => format!("docker-pullable://{d}"),
        None => format!("docker://{image_id}"),
    }
}

/// How long ContainerStatus of an exited container waits for its log copier to finish (as
/// Docker waits for its own log copier before it marks a container stopped).
const LOG_DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

impl<D: DockerApi> Shim<D> {
    /// ListContainers with every filter (id or unique prefix, state, sandbox id, labels).
    pub async fn list_containers(
        &self,
        filter: Option<cri::ContainerFilter>,
    ) -> Result<Vec<cri::Container>> {
        let filter = filter.unwrap_or_default();
        let list = self.our_containers_labelled(&filter.label_selector).await?;
        let mut out = Vec::with_capacity(list.len());
        let no_labels = HashMap::new();
        for c in list.iter().filter(|c| {
            summary_label(c, labels::CONTAINER_TYPE_LABEL_KEY)
                == Some(labels::CONTAINER_TYPE_LABEL_CONTAINER)
                && id_matches(c, &filter.id)
                && may_match_selector(c, &filter.label_selector)
                && (filter.pod_sandbox_id.is_empty()
                    || summary_label(c, labels::SANDBOX_ID_LABEL_KEY)
                        == Some(filter.pod_sandbox_id.as_str()))
        }) {
            let Some(id) = c.id.clone() else { continue };
            let Some(parts) = c
                .names
                .as_ref()
                .and_then(|n| n.first())
                .and_then(|n| naming::parse_container_name(n).ok())
            else {
                continue;
            };
            let sandbox_id = summary_label(c, labels::SANDBOX_ID_LABEL_KEY)
                .unwrap_or_default()
                .to_string();
            let (labels, annotations) =
                labels::extract_labels(c.labels.as_ref().unwrap_or(&no_labels));
            let state = container_state(c.state.as_ref().map(|s| s.to_string()).as_deref());
            if filter
                .state
                .as_ref()
                .is_some_and(|s| s.state != state as i32)
                || !matches_selector(&labels, &filter.label_selector)
            {
                continue;
            }
            let image_id = c.image_id.clone().unwrap_or_default();
            out.push(cri::Container {
                id,
                pod_sandbox_id: sandbox_id,
                metadata: Some(cri::ContainerMetadata {
                    name: parts.name,
                    attempt: parts.attempt,
                }),
                image: Some(cri::ImageSpec {
                    image: c.image.clone().unwrap_or_default(),
                    ..Default::default()
                }),
                image_ref: image_id.clone(),
                state: state as i32,
                created_at: c.created.unwrap_or(0).saturating_mul(1_000_000_000),
                labels,
                annotations,
                image_id,
            });
        }
        Ok(out)
    }

    /// The CRI status of a container from its inspect data.
    pub(crate) async fn container_status_of(
        &self,
        c: &ContainerInspectResponse,
    ) -> cri::ContainerStatus {
        let id = c.id.clone().unwrap_or_default();
        let parts = c
            .name
            .as_deref()
            .and_then(|n| naming::parse_container_name(n).ok());
        let cfg = c.config.as_ref();
        let docker_labels = cfg.and_then(|c| c.labels.clone()).unwrap_or_default();
        let log_path = docker_labels
            .get(labels::CONTAINER_LOG_PATH_LABEL_KEY)
            .cloned()
            .unwrap_or_default();
        let (labels, annotations) = labels::extract_labels(&docker_labels);
        let st = c.state.as_ref();
        let state = container_state(
            st.and_then(|s| s.status.as_ref())
                .map(|s| s.to_string())
                .as_deref(),
        );
        let exit_code = st.and_then(|s| s.exit_code).unwrap_or(0) as i32;
        let finished_at = docker_time_ns(st.and_then(|s| s.finished_at.as_deref()));
        let (reason, message) = if state == cri::ContainerState::ContainerExited {
            let oom_event =
                c.id.as_ref()
                    .is_some_and(|id| self.oom_killed.lock().contains(id));
            let reason = if st.and_then(|s| s.oom_killed).unwrap_or(false) || oom_event {
                "OOMKilled"
            } else if exit_code == 0 {
                "Completed"
            } else {
                "Error"
            };
            (
                reason.to_string(),
                st.and_then(|s| s.error.clone()).unwrap_or_default(),
            )
        } else {
            (String::new(), String::new())
        };
        let image_id = c.image.clone().unwrap_or_default();
        let repo_digests = match self.image_refs.get(&image_id) {
            Some(d) => d,
            None => {
                let ticket = self.image_refs.ticket();
                match self.docker.inspect_image(&image_id).await {
                    Ok(i) => {
                        let d = i.repo_digests.unwrap_or_default();
                        self.image_refs.put(ticket, &image_id, d.clone());
                        d
                    }
                    Err(_) => Vec::new(),
                }
            }
        };
        let config_mounts: HashMap<String, String> = c
            .host_config
            .as_ref()
            .and_then(|h| h.binds.clone())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|b| {
                let mut it = b.splitn(3, ':');
                let host = it.next()?.to_string();
                let ctr = it.next()?.to_string();
                Some((ctr, host))
            })
            .collect();
        let mounts = c
            .mounts
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m.typ.as_ref().map(|t| t.to_string()) == Some("bind".to_string()))
            .map(|m| {
                let dest = m.destination.clone().unwrap_or_default();
                cri::Mount {
                    host_path: config_mounts
                        .get(&dest)
                        .cloned()
                        .or(m.source.clone())
                        .unwrap_or_default(),
                    container_path: dest,
                    readonly: !m.rw.unwrap_or(true),
                    selinux_relabel: m.mode.as_deref().is_some_and(|s| s.contains('Z')),
                    propagation: match m.propagation.as_deref() {
                        Some("rslave") | Some("slave") => {
                            cri::MountPropagation::PropagationHostToContainer as i32
                        }
                        Some("rshared") | Some("shared") => {
                            cri::MountPropagation::PropagationBidirectional as i32
                        }
                        _ => cri::MountPropagation::PropagationPrivate as i32,
                    },
                    ..Default::default()
                }
            })
            .collect();
        let hc = c.host_config.as_ref();
        let resources = hc.map(|h| cri::ContainerResources {
            linux: Some(cri::LinuxContainerResources {
                cpu_period: h.cpu_period.unwrap_or(0),
                cpu_quota: h.cpu_quota.unwrap_or(0),
                cpu_shares: h.cpu_shares.unwrap_or(0),
                memory_limit_in_bytes: h.memory.unwrap_or(0),
                oom_score_adj: h.oom_score_adj.unwrap_or(0),
                cpuset_cpus: h.cpuset_cpus.clone().unwrap_or_default(),
                cpuset_mems: h.cpuset_mems.clone().unwrap_or_default(),
                memory_swap_limit_in_bytes: h.memory_swap.unwrap_or(0),
                ..Default::default()
            }),
            windows: None,
        });
        cri::ContainerStatus {
            id,
            metadata: parts.map(|p| cri::ContainerMetadata {
                name: p.name,
                attempt: p.attempt,
            }),
            state: state as i32,
            created_at: docker_time_ns(c.created.as_deref()),
            started_at: docker_time_ns(st.and_then(|s| s.started_at.as_deref())),
            finished_at,
            exit_code,
            image: Some(cri::ImageSpec {
                image: cfg.and_then(|c| c.image.clone()).unwrap_or_default(),
                ..Default::default()
            }),
            image_ref: pullable_image_ref(&image_id, &repo_digests),
            reason,
            message,
            labels,
            annotations,
            mounts,
            log_path,
            resources,
            image_id,
            user: None,
            stop_signal: 0,
        }
    }

    /// ContainerStatus.
    pub async fn container_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> Result<cri::ContainerStatusResponse> {
        let c = self.inspect_app_container(id).await?;
        let status = c.state.as_ref().and_then(|s| s.status.as_ref());
        if container_state(status.map(|s| s.to_string()).as_deref())
            == cri::ContainerState::ContainerExited
            && let Some(full) = &c.id
        {
            // Whoever reads the log on seeing the exit must find its last lines.
            self.logs.drained(full, LOG_DRAIN_LIMIT).await;
        }
        let status = self.container_status_of(&c).await;
        let mut info = HashMap::new();
        if verbose {
            info.insert(
                "info".to_string(),
                serde_json::json!({
                    "pid": c.state.as_ref().and_then(|s| s.pid).unwrap_or(0),
                    "sandboxID": c.config.as_ref().and_then(|cfg| cfg.labels.as_ref()).and_then(|l| l.get(labels::SANDBOX_ID_LABEL_KEY)),
                    "hostConfig": c.host_config,
                })
                .to_string(),
            );
        }
        Ok(cri::ContainerStatusResponse {
            status: Some(status),
            info,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_map_like_upstream() {
        assert_eq!(
            container_state(Some("running")),
            cri::ContainerState::ContainerRunning
        );
        assert_eq!(
            container_state(Some("created")),
            cri::ContainerState::ContainerCreated
        );
        assert_eq!(
            container_state(Some("exited")),
            cri::ContainerState::ContainerExited
        );
        assert_eq!(
            container_state(Some("dead")),
            cri::ContainerState::ContainerExited
        );
        assert_eq!(
            container_state(Some("removing")),
            cri::ContainerState::ContainerUnknown
        );
    }

    #[test]
    fn image_refs_prefer_digests() {
        assert_eq!(
            pullable_image_ref("sha256:abc", &["r/b@sha256:def".to_string()]),
            "docker-pullable://r/b@sha256:def"
        );
        assert_eq!(pullable_image_ref("sha256:abc", &[]), "docker://sha256:abc");
    }
}
