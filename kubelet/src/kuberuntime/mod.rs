//! The runtime-manager logic of the kubelet that needs no CRI types (upstream
//! `pkg/kubelet/kuberuntime`): the `computePodActions` decision ([`pod_actions`]) and the
//! per-container restart back-off ([`backoff`]). The CRI-speaking `SyncPod` builds on these.

pub mod backoff;
pub mod pod_actions;
