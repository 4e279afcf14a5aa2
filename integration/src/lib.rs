//! Shared pieces of the end-to-end tests, the CRI conformance suite and the benchmarks: where
//! the test bed is (`testbed`), how to get a CRI runtime to talk to — our dockershim started
//! in-process on a private socket, or any CRI endpoint such as the test bed's containerd
//! (`runtimes`), a Docker Engine of a test's own (`dockerd`) — builders for the CRI requests the tests send (`fixtures`), a client for CRI
//! streaming URLs over SPDY and WebSocket (`streaming`), and the CRI
//! conformance suite (`conformance`, binary `cri-conformance`); the Kubernetes API fixture for
//! API-server mode (`apiserver`), the kubelet as a child process (`kubelet_proc`) and the
//! CRI benchmark `cri-bench` (`benchmark`); for `hollow-bench`, its figures (`hollow`) and a
//! byte-counting TCP proxy between nodes and the API server (`byteproxy`); a containerd of a
//! test's own (`containerd`) and what it shares with the private dockerd (`daemon`); the soak,
//! pod churn under SIGKILLs of the kubelet and runtimes (`soak`, binary `soak`).

pub mod apiserver;
pub mod benchmark;
pub mod byteproxy;
pub mod conformance;
pub mod containerd;
pub mod daemon;
pub mod dockerd;
pub mod fixtures;
pub mod hollow;
pub mod interrupt;
pub mod kubelet_proc;
pub mod mountns;
pub mod runtimes;
pub mod soak;
pub mod streaming;
pub mod testbed;
