//! The kubelet: the Kubernetes node agent, rebuilt in Rust following the upstream Go kubelet's
//! structure and names (see `design/KUBELET_FLOW.md`).
//!
//! This crate's pure-logic core: flags and config file ([`flags`], [`kubeletconfig`]), Go
//! durations ([`duration`]), pod sources and their merge ([`config`]), runtime-neutral
//! container types ([`container`]) and the runtime manager's decisions ([`kuberuntime`]).

pub mod config;
pub mod container;
pub mod duration;
pub mod flags;
pub mod kubelet;
pub mod kubeletconfig;
pub mod kuberuntime;
pub mod metrics;
pub mod pleg;
pub mod pod_workers;
pub mod server;
pub mod status;
pub mod volumemanager;
