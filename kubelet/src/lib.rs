//! The kubelet: the Kubernetes node agent, rebuilt in Rust following the upstream Go kubelet's
//! structure and names (`pkg/kubelet`, Kubernetes 1.26). The crate is layered: a module imports
//! only modules of lower layers, never one above it (`hack/check-layers.sh` checks it in CI;
//! `docs/architecture.md` draws the layers). Bottom to top:
//!
//! 1. **Vocabulary** — imports nothing of the crate: [`container`] (runtime-neutral pod and
//!    container status, hashing, names), [`types`] (sources, config annotations, pod label
//!    keys), [`resource`] (exact quantities), [`qos`], [`fsstats`] (statvfs, directory usage,
//!    `/proc/meminfo`), [`probe`] (running one probe, probe results), [`duration`] (Go
//!    durations, from `node-common`), [`version`], [`logging`], [`credentials`] (node pull
//!    credentials), [`active_deadline`] (`activeDeadlineSeconds`), [`events`] (event recorder), [`metrics`], [`cliflag`] (map-valued flags),
//!    [`predicate`] (admission by node selector, affinity, taints and OS), [`sysctl`] (the
//!    sysctl allowlist pods are admitted by).
//! 2. **Ports** — [`cri`]: the `RuntimeService` and `ImageManagerService` traits every manager
//!    holds, their gRPC implementation and an in-memory fake for unit tests; [`apiobjects`]
//!    (configMaps, secrets, tokens a pod refers to), [`certificate`] (TLS bootstrap and
//!    certificate rotation), [`dns`], [`mirror`] (mirror pods),
//!    [`nodestatus`] (the Node object and lease), [`nodelister`] (the Node as the API server
//!    has it).
//! 3. **Managers** — [`cm`] (pod cgroups), [`config`] (pod sources and their merge),
//!    [`envvars`], [`logs`] (reading and rotating container logs), [`status`] (API pod status
//!    and its sync to the API server), [`volumemanager`], [`kuberuntime`] (`SyncPod` and
//!    everything the kubelet asks the runtime, through [`cri`]), [`nodeshutdown`] (graceful node
//!    shutdown on logind's inhibitor lock).
//! 4. **Node-level policy** — [`eviction`] (given image and container GC as traits), [`gc`]
//!    (dead containers), [`images`] (image GC), [`pleg`] (generic and evented), [`prober`]
//!    (probe workers), [`stats`] (the summary of node, pod and container usage).
//! 5. **The loop** — [`host`] (what the servers read of the running kubelet), [`pod_workers`],
//!    [`server`] (read-only, authenticated and healthz servers), [`apimode`] (API-server mode),
//!    [`kubelet`] (the sync loop, which wires everything), [`kubemark`] (hollow nodes: the
//!    kubelet on the in-memory fake runtime).
//! 6. **Options** — [`kubeletconfig`] (the config file and the resolved configuration) and
//!    [`flags`]; the binary (`main.rs`) embeds dockershim, the library never uses it.

pub mod active_deadline;
pub mod apimode;
pub mod apiobjects;
pub mod cadvisor;
pub mod certificate;
pub mod cliflag;
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
pub mod kubemark;
pub mod kuberuntime;
pub mod logging;
pub mod logs;
pub mod metrics;
pub mod mirror;
pub mod nodelister;
pub mod nodeshutdown;
pub mod nodestatus;
pub mod pleg;
pub mod pod_workers;
pub mod predicate;
pub mod probe;
pub mod prober;
pub mod qos;
pub mod resource;
pub mod runtimeclass;
pub mod server;
pub mod stats;
pub mod status;
pub mod sysctl;
pub mod types;
pub mod util;
pub mod version;
pub mod volumemanager;
