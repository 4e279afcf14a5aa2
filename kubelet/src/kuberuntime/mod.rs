//! The runtime manager of the kubelet (upstream `pkg/kubelet/kuberuntime`): the pure
//! `computePodActions` decision ([`pod_actions`]) and per-container restart back-off
//! ([`backoff`]), the CRI config builders ([`sandbox`], [`container_config`], [`labels`]) and the
//! CRI-speaking [`manager::KubeGenericRuntimeManager`] that runs `SyncPod`, and the order in
//! which a pod's containers stop ([`termination_order`]: sidecars last).

pub mod backoff;
pub mod container_config;
pub mod labels;
pub mod manager;
pub mod pod_actions;
pub mod sandbox;
pub mod termination;
pub mod termination_order;

pub use manager::{KubeGenericRuntimeManager, RuntimeError, RuntimePod, SyncResult};
