//! API-server mode: what the kubelet runs besides its sync loop when it has a `--kubeconfig`.
//! One task registers the Node and keeps its status current (every
//! `--node-status-update-frequency`, written only on change or every
//! `--node-status-report-frequency`) and the node Lease renewed (every quarter of
//! `--node-lease-duration-seconds`); another writes the API pods' statuses and the final
//! deletion of terminated pods (on every status change and every second, only what changed);
//! a third keeps the mirror pods of static pods. The `api` pod source itself is
//! `config::apiserver`, fed into PodConfig by the kubelet. The tasks own their API clients and
//! read the kubelet's state through [`KubeletShared`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::host::KubeletShared;
use crate::nodestatus::{
    Health, LeaseRenewer, Machine, NodeSpecInputs, NodeStatusSyncer, initial_node, node_status,
};
use crate::status::api::{ApiStatusSyncer, PodState};
use crate::types::{API_SOURCE, CONFIG_SOURCE_ANNOTATION};
use crate::util::wait::JitterUntil;

/// Upstream's jitter factor for the node status and lease loops (`kubelet.go`, `nodelease`).
const JITTER_FACTOR: f64 = 0.04;

/// How often pod statuses are checked for writing.
pub const STATUS_SYNC_PERIOD: Duration = Duration::from_secs(1);

/// Errors setting up API-server mode. Each renders as one line naming `--kubeconfig`, the
/// file and why it cannot be used (`main` prints it and exits non-zero, as upstream's
/// `invalid kubeconfig` does).
#[derive(Debug, thiserror::Error)]
pub enum ApiModeError {
    #[error("invalid value for --kubeconfig: {path:?}: {reason}")]
    Kubeconfig { path: PathBuf, reason: String },
    #[error("invalid value for --kubeconfig: {path:?}: building the API client: {reason}")]
    Client { path: PathBuf, reason: String },
}

/// API-server mode settings (flags of the same names).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiModeConfig {
    pub kubeconfig: PathBuf,
    pub register_node: bool,
    pub node_labels: BTreeMap<String, String>,
    pub node_status_update_frequency: Duration,
    pub node_status_report_frequency: Duration,
    pub node_lease_duration_seconds: i32,
    pub kubelet_port: i32,
    pub max_pods: u32,
    /// Taints of the Node at its registration (`--register-with-taints`,
    /// `registerWithTaints`); upstream sets them only when it creates the Node.
    pub register_with_taints: Vec<k8s_openapi::api::core::v1::Taint>,
    /// Images in the node status (`nodeStatusMaxImages`; -1: all).
    pub node_status_max_images: i32,
}

/// The Node to register: [`initial_node`] with the configured taints.
pub fn node_to_register(
    inputs: &NodeSpecInputs,
    machine: &Machine,
    taints: &[k8s_openapi::api::core::v1::Taint],
) -> k8s_openapi::api::core::v1::Node {
    let mut node = initial_node(inputs, machine);
    if !taints.is_empty() {
        node.spec.get_or_insert_with(Default::default).taints = Some(taints.to_vec());
    }
    node
}

/// The first line of an error's message (serde-saphyr's parse errors quote the source below).
fn one_line(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("unknown error");
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

/// A client from a kubeconfig file (client certificates and bearer tokens are kube-rs's). Every
/// way the file can be unusable is an error: missing or unreadable, not a kubeconfig, no
/// current context, a context, cluster or user it names missing, no server, unreadable
/// certificates.
pub async fn client_from_kubeconfig(path: &Path) -> Result<Client, ApiModeError> {
    use kube::config::KubeconfigError as E;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let bad = |reason: String| ApiModeError::Kubeconfig {
        path: path.to_path_buf(),
        reason,
    };
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| match e {
        E::ReadConfig(io, _) => bad(format!("cannot read it: {io}")),
        E::Parse(p) => bad(format!("not a kubeconfig: {}", one_line(&p))),
        other => bad(one_line(&other)),
    })?;
    if kc.current_context.as_deref().is_none_or(str::is_empty) {
        return Err(bad("no current-context is set".into()));
    }
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| bad(one_line(&e)))?;
    crate::metrics::rest_client::client(config).map_err(|e| ApiModeError::Client {
        path: path.to_path_buf(),
        reason: one_line(&e),
    })
}

/// Is `pod` from the API server (not a static pod)?
pub fn is_api_pod(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_SOURCE_ANNOTATION))
        .is_some_and(|s| s == API_SOURCE)
}

/// Starts the node and pod-status tasks.
pub fn spawn(
    client: Client,
    cfg: ApiModeConfig,
    shared: Arc<KubeletShared>,
    root_dir: PathBuf,
    runtime_version: String,
    cancel: CancellationToken,
) {
    let node_name = shared.node_name.clone();
    let inputs = NodeSpecInputs {
        node_name: node_name.clone(),
        node_ip: shared.runtime.node_ip().get(),
        hostname: node_name.clone(),
        max_pods: cfg.max_pods,
        labels: cfg.node_labels.clone(),
        kubelet_port: cfg.kubelet_port,
        container_runtime_version: runtime_version,
        kubelet_version: crate::version::KUBERNETES_VERSION.to_string(),
        reserved: shared.reserved.clone(),
    };
    tokio::spawn(node_loop(
        client.clone(),
        cfg,
        inputs,
        shared.clone(),
        root_dir,
        cancel.clone(),
    ));
    let statics = {
        let shared = shared.clone();
        Arc::new(move || {
            shared
                .pods
                .read()
                .values()
                .filter(|p| !is_api_pod(p) && p.metadata.deletion_timestamp.is_none())
                .cloned()
                .collect()
        })
    };
    tokio::spawn(crate::mirror::run(
        client.clone(),
        node_name,
        shared.mirrors.clone(),
        statics,
        cancel.clone(),
    ));
    tokio::spawn(pod_status_loop(client, shared, cancel));
}

async fn node_loop(
    client: Client,
    cfg: ApiModeConfig,
    mut inputs: NodeSpecInputs,
    shared: Arc<KubeletShared>,
    root_dir: PathBuf,
    cancel: CancellationToken,
) {
    let machine = Machine::read(&root_dir);
    let mut syncer = NodeStatusSyncer::new(
        client.clone(),
        &inputs.node_name,
        cfg.node_status_report_frequency,
    );
    let node = loop {
        if !cfg.register_node {
            break None;
        }
        match syncer
            .register(&node_to_register(
                &inputs,
                &machine,
                &cfg.register_with_taints,
            ))
            .await
        {
            Ok(n) => {
                info!(node = %inputs.node_name, "node registered");
                break Some(n);
            }
            Err(e) => warn!(error = %e, "registering the node failed; retrying"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    };
    let mut lease = LeaseRenewer::new(
        client,
        &inputs.node_name,
        cfg.node_lease_duration_seconds,
        node.as_ref(),
    );
    // Upstream runs both loops with `wait.JitterUntil(…, 0.04, sliding)`: the lease every
    // quarter of its duration (nodelease's `renewInterval`), the status every
    // `nodeStatusUpdateFrequency`, each period counted from the end of the previous write.
    {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let mut ticker = JitterUntil::new(lease.interval(), JITTER_FACTOR);
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = ticker.tick() => {}
                }
                if let Err(e) = lease.renew().await {
                    warn!(error = %e, "renewing the node lease failed");
                }
            }
        });
    }
    let mut status_tick = JitterUntil::new(cfg.node_status_update_frequency, JITTER_FACTOR);
    let mut images = Vec::new();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = status_tick.tick() => {
                use crate::eviction::NodeCondition;
                let health = Health {
                    not_ready: if shared.shutdown.shutting_down() {
                        Some(crate::nodeshutdown::NOT_READY_MESSAGE.to_string())
                    } else {
                        shared.healthz().err()
                    },
                    memory_pressure: shared.eviction.has(NodeCondition::MemoryPressure),
                    disk_pressure: shared.eviction.has(NodeCondition::DiskPressure),
                    pid_pressure: shared.eviction.has(NodeCondition::PidPressure),
                };
                // Upstream `setNodeImages`: the largest 50, kept from the last good listing.
                if let Ok(list) = shared.runtime.image_names_and_sizes().await {
                    images = crate::nodestatus::top_images_max(list, cfg.node_status_max_images);
                }
                // Upstream's NodeAddress setter: the address is detected again at each update
                // unless --node-ip gave it; whatever watches it (the serving certificate)
                // sees a change.
                inputs.node_ip = shared.runtime.node_ip().refresh();
                let st = node_status(&inputs, &machine, &health, images.clone(), syncer.last_status());
                if let Err(e) = syncer.sync(st).await {
                    warn!(error = %e, "updating node status failed");
                }
            }
        }
    }
}

async fn pod_status_loop(client: Client, shared: Arc<KubeletShared>, cancel: CancellationToken) {
    let mut syncer =
        ApiStatusSyncer::new(client).with_sync_duration(shared.metrics.pod_status_sync.clone());
    let mut tick = tokio::time::interval(STATUS_SYNC_PERIOD);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
            _ = shared.status.changed() => {}
        }
        // Live pods: the status the kubelet computed (none yet: nothing to write).
        let live: Vec<Pod> = shared.pods.read().values().cloned().collect();
        let mut pods: Vec<PodState> = live
            .into_iter()
            .filter(is_api_pod)
            .map(|p| {
                let status = p
                    .metadata
                    .uid
                    .as_deref()
                    .and_then(|u| shared.status.get_pod_status(u));
                // Deleted only once its termination finished (see below).
                PodState {
                    can_be_deleted: false,
                    status,
                    pod: p,
                }
            })
            .collect();
        // Static pods: their status goes to their mirror pods (upstream writes it under the
        // mirror pod's UID).
        let statics: Vec<Pod> = shared
            .pods
            .read()
            .values()
            .filter(|p| !is_api_pod(p))
            .cloned()
            .collect();
        for s in statics {
            if let (Some(mirror), Some(status)) = (
                shared.mirrors.get(&s),
                s.metadata
                    .uid
                    .as_deref()
                    .and_then(|u| shared.status.get_pod_status(u)),
            ) && mirror.metadata.deletion_timestamp.is_none()
            {
                pods.push(PodState {
                    pod: mirror,
                    status: Some(status),
                    can_be_deleted: false,
                });
            }
        }
        // Pods whose graceful deletion finished: their objects go.
        let finished: Vec<Pod> = shared.terminated.write().drain().map(|(_, p)| p).collect();
        pods.extend(finished.into_iter().filter(is_api_pod).map(|p| PodState {
            pod: p,
            status: None,
            can_be_deleted: true,
        }));
        let known: std::collections::HashSet<String> = pods
            .iter()
            .filter_map(|p| p.pod.metadata.uid.clone())
            .collect();
        syncer.sync_batch(&pods).await;
        syncer.retain(&|uid| known.contains(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unusable_kubeconfig_is_one_line_naming_the_flag_file_and_reason() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ctx = "current-context: c\ncontexts:\n- name: c\n  context:\n    cluster: k\n    user: u\nusers:\n- name: u\n  user: {}\n";
        let cases = [
            (None, "cannot read it: No such file or directory"),
            (Some("{{{ not yaml"), "not a kubeconfig: line 1 column 3"),
            (
                Some("apiVersion: v1\nkind: Config\nclusters: []\n"),
                "no current-context is set",
            ),
            (
                Some(&*format!("{ctx}clusters: []\n")),
                "failed to load the cluster of context: k",
            ),
            (
                Some(&*format!("{ctx}clusters:\n- name: k\n  cluster: {{}}\n")),
                "cluster url is missing on selected cluster",
            ),
            (
                Some(&*format!(
                    "{}clusters:\n- name: k\n  cluster: {{server: https://10.0.0.1}}\n",
                    ctx.replace("current-context: c", "current-context: d")
                )),
                "failed to load current context: d",
            ),
        ];
        for (i, (text, want)) in cases.into_iter().enumerate() {
            let path = dir.path().join(format!("kc{i}"));
            if let Some(t) = text {
                std::fs::write(&path, t).expect("write");
            }
            let e = client_from_kubeconfig(&path)
                .await
                .err()
                .unwrap_or_else(|| panic!("case {i} must fail"))
                .to_string();
            assert!(
                e.starts_with(&format!("invalid value for --kubeconfig: {path:?}: {want}")),
                "case {i}: {e}"
            );
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        // A usable one builds a client (nothing is contacted yet).
        let path = dir.path().join("good");
        std::fs::write(
            &path,
            format!("{ctx}clusters:\n- name: k\n  cluster: {{server: https://10.0.0.1:6443}}\n"),
        )
        .expect("write");
        assert!(client_from_kubeconfig(&path).await.is_ok());
    }

    #[test]
    fn registered_node_carries_the_taints() {
        let inputs = NodeSpecInputs {
            node_name: "n".into(),
            ..Default::default()
        };
        let m = Machine::default();
        assert!(node_to_register(&inputs, &m, &[]).spec.is_none());
        let t = k8s_openapi::api::core::v1::Taint {
            key: "k".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let node = node_to_register(&inputs, &m, std::slice::from_ref(&t));
        assert_eq!(node.spec.and_then(|s| s.taints), Some(vec![t]));
    }
}
