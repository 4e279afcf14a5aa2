//! The kubelet: the Kubernetes node agent, rebuilt in Rust following the upstream Go kubelet's
//! structure and names (see `design/KUBELET_FLOW.md`).
//!
//! Pure-logic core: flags and config file ([`flags`], [`kubeletconfig`]), Go durations
//! ([`duration`]), pod sources and their merge ([`config`]), runtime-neutral container types
//! ([`container`]), the API status ([`status`]) and the runtime manager's decisions and config
//! builders ([`kuberuntime`]). Running parts: the CRI runtime manager
//! ([`kuberuntime::KubeGenericRuntimeManager`]), the PLEG ([`pleg`]), per-pod workers
//! ([`pod_workers`]), volumes ([`volumemanager`]), probes ([`prober`]), the sync loop
//! ([`kubelet::Kubelet`]), the read-only HTTP server ([`server`]) and metrics ([`metrics`]).

pub mod apimode;
pub mod apiobjects;
pub mod cm;
pub mod config;
pub mod container;
pub mod credentials;
pub mod cri;
pub mod dns;
pub use node_common::duration;
pub mod envvars;
pub mod events;
pub mod eviction;
pub mod flags;
pub mod fsstats;
pub mod gc;
pub mod host;
pub mod images;
pub mod kubelet;
pub mod kubeletconfig;
pub mod kuberuntime;
pub mod logging;
pub mod logs;
pub mod metrics;
pub mod mirror;
pub mod nodestatus;
pub mod pleg;
pub mod pod_workers;
pub mod probe;
pub mod prober;
pub mod qos;
pub mod resource;
pub mod server;
pub mod status;
pub mod types;
pub mod version;
pub mod volumemanager;
