//! Reading the runtime for the runtime manager (upstream `kuberuntime_manager.go` `GetPods` and
//! `GetPodStatus`): every pod the kubelet created, grouped by the pod UID label, and one pod's
//! sandboxes and containers as a [`PodStatus`].

use super::*;

impl KubeGenericRuntimeManager {
    pub(crate) async fn list_sandboxes(
        &self,
        labels: HashMap<String, String>,
    ) -> Result<Vec<cri::PodSandbox>, RuntimeError> {
        let filter = cri::PodSandboxFilter {
            label_selector: labels,
            ..Default::default()
        };
        self.runtime.list_pod_sandbox(Some(filter)).await
    }

    pub(crate) async fn list_containers(
        &self,
        labels: HashMap<String, String>,
    ) -> Result<Vec<cri::Container>, RuntimeError> {
        let filter = cri::ContainerFilter {
            label_selector: labels,
            ..Default::default()
        };
        self.runtime.list_containers(Some(filter)).await
    }

    /// All pods on the runtime that the kubelet created (upstream `GetPods(all=true)`), grouped
    /// by the pod UID label.
    pub async fn get_pods(&self, all: bool) -> Result<Vec<RuntimePod>, RuntimeError> {
        let sandboxes = self.list_sandboxes(HashMap::new()).await?;
        let containers = self.list_containers(HashMap::new()).await?;
        let mut pods: HashMap<String, RuntimePod> = HashMap::new();
        let mut entry = |l: &HashMap<String, String>| -> Option<String> {
            let uid = l.get(POD_UID_LABEL)?.clone();
            let p = pods.entry(uid.clone()).or_insert_with(|| RuntimePod {
                id: uid.clone(),
                ..Default::default()
            });
            if p.name.is_empty() {
                p.name = l.get(POD_NAME_LABEL).cloned().unwrap_or_default();
                p.namespace = l.get(POD_NAMESPACE_LABEL).cloned().unwrap_or_default();
            }
            Some(uid)
        };
        let mut sb_entries = vec![];
        for s in sandboxes {
            if !all && s.state != cri::PodSandboxState::SandboxReady as i32 {
                continue;
            }
            if let Some(uid) = entry(&s.labels) {
                sb_entries.push((
                    uid,
                    RuntimeContainer {
                        id: s.id,
                        name: String::new(),
                        state: sandbox_state(s.state),
                        grace_period: None,
                        created_at: s.created_at,
                    },
                ));
            }
        }
        let mut c_entries = vec![];
        for c in containers {
            if !all && c.state != cri::ContainerState::ContainerRunning as i32 {
                continue;
            }
            if let Some(uid) = entry(&c.labels) {
                c_entries.push((
                    uid,
                    RuntimeContainer {
                        name: c
                            .labels
                            .get(CONTAINER_NAME_LABEL)
                            .cloned()
                            .or_else(|| c.metadata.as_ref().map(|m| m.name.clone()))
                            .unwrap_or_default(),
                        id: c.id,
                        state: cri_state(c.state),
                        grace_period: labels::termination_grace_period(&c.annotations),
                        created_at: c.created_at,
                    },
                ));
            }
        }
        for (uid, s) in sb_entries {
            if let Some(p) = pods.get_mut(&uid) {
                p.sandboxes.push(s);
            }
        }
        for (uid, c) in c_entries {
            if let Some(p) = pods.get_mut(&uid) {
                p.containers.push(c);
            }
        }
        let mut out: Vec<RuntimePod> = pods.into_values().collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// The runtime's view of one pod (upstream `GetPodStatus`): sandboxes newest first with
    /// their IPs, containers newest first with restart count and spec hash from annotations.
    pub async fn get_pod_status(
        &self,
        uid: &str,
        name: &str,
        namespace: &str,
    ) -> Result<PodStatus, RuntimeError> {
        // Upstream makes these calls one after the other; here the two lists go together,
        // then every sandbox's and container's status together: a read costs two round trips
        // to a busy runtime instead of 2 + one per sandbox and container, and it is on the
        // path of every pod start (the status after the sync's changes).
        let sel = HashMap::from([(POD_UID_LABEL.to_string(), uid.to_string())]);
        let (mut sandboxes, mut containers) =
            futures::try_join!(self.list_sandboxes(sel.clone()), self.list_containers(sel))?;
        sandboxes.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        let (sandbox_reads, container_reads) = futures::join!(
            futures::future::join_all(
                sandboxes
                    .iter()
                    .map(|s| self.runtime.pod_sandbox_status(&s.id))
            ),
            futures::future::join_all(
                containers
                    .iter()
                    .map(|c| self.runtime.container_status(&c.id))
            )
        );
        let mut status = PodStatus {
            id: uid.to_string(),
            name: name.to_string(),
            namespace: namespace.to_string(),
            ..Default::default()
        };
        for (i, (s, read)) in sandboxes.iter().zip(sandbox_reads).enumerate() {
            let id = &s.id;
            // Removed between the list and now: as if the list had not shown it. Any other
            // error (the runtime or Docker unreachable) fails the whole status, as upstream's:
            // a pod whose sandbox cannot be read must not look like a pod without a sandbox.
            let st = match read {
                Ok(st) => st,
                Err(e) if e.code() == Some(tonic::Code::NotFound) => {
                    tracing::debug!(sandbox = %id, error = %e, "sandbox vanished while reading status");
                    continue;
                }
                Err(e) => return Err(e),
            };
            let netns = st
                .linux
                .as_ref()
                .and_then(|l| l.namespaces.as_ref())
                .and_then(|n| n.options.as_ref())
                .map(|o| o.network)
                .unwrap_or(0);
            let ready = st.state == cri::PodSandboxState::SandboxReady as i32;
            let mut ips = vec![];
            if let Some(n) = st.network.as_ref()
                && !n.ip.is_empty()
            {
                ips.push(n.ip.clone());
                ips.extend(n.additional_ips.iter().map(|i| i.ip.clone()));
            }
            if i == 0 && ready {
                status.ips.clone_from(&ips);
            }
            status.sandbox_statuses.push(SandboxStatus {
                id: st.id,
                state: if ready {
                    SandboxState::Ready
                } else {
                    SandboxState::NotReady
                },
                attempt: st.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
                network_namespace_mode: if netns == cri::NamespaceMode::Node as i32 {
                    NamespaceMode::Node
                } else {
                    NamespaceMode::Pod
                },
                ips,
                created_at: ts(st.created_at),
            });
        }
        for (c, read) in containers.into_iter().zip(container_reads) {
            let id = &c.id;
            let st = match read {
                Ok(st) => st,
                Err(e) if e.code() == Some(tonic::Code::NotFound) => {
                    tracing::debug!(container = %id, error = %e, "container vanished while reading status");
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut message = st.message.clone();
            let tmsg = crate::kuberuntime::termination::termination_message(&st).await;
            if !tmsg.is_empty() {
                if !message.is_empty() {
                    message.push_str(": ");
                }
                message.push_str(&tmsg);
            }
            let annotations = if st.annotations.is_empty() {
                &c.annotations
            } else {
                &st.annotations
            };
            let name = st
                .labels
                .get(CONTAINER_NAME_LABEL)
                .or_else(|| c.labels.get(CONTAINER_NAME_LABEL))
                .cloned()
                .or_else(|| st.metadata.as_ref().map(|m| m.name.clone()))
                .unwrap_or_default();
            let image = st
                .image
                .as_ref()
                .map(|i| {
                    if i.user_specified_image.is_empty() {
                        i.image.clone()
                    } else {
                        i.user_specified_image.clone()
                    }
                })
                .unwrap_or_default();
            status.container_statuses.push(ContainerStatus {
                id: ContainerID::new(self.runtime_name.clone(), st.id.clone()),
                name,
                state: cri_state(st.state),
                created_at: ts(st.created_at),
                started_at: ts(st.started_at),
                finished_at: ts(st.finished_at),
                exit_code: st.exit_code,
                image,
                image_id: if st.image_id.is_empty() {
                    st.image_ref.clone()
                } else {
                    st.image_id.clone()
                },
                image_ref: st.image_ref.clone(),
                hash: labels::container_hash(annotations),
                restart_count: labels::restart_count(annotations),
                reason: st.reason.clone(),
                message,
            });
        }
        Ok(status)
    }
}
