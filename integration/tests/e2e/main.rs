//! Every end-to-end test of the workspace in one test binary (`cargo test --test e2e`), one
//! module per area. One binary instead of one per file: each links the kubelet, dockershim,
//! kube-rs and bollard, and two dozen copies of that filled CI disks and cost minutes of
//! linking. Filter by module as usual: `cargo test --test e2e kubelet_pods::`.
//!
//! The tests are written to run in parallel with each other on one test bed: unique pod names,
//! their own kubelet and dockershim processes, and cleanup whatever happened.

mod dockershim_support;
mod kubelet_support;

mod apiserver_fixture;
mod binaries;
mod conformance;
mod cri_bench;
mod cri_hardening;
mod cri_lifecycle;
mod dockershim_containers;
mod dockershim_critest;
mod dockershim_errors;
mod dockershim_events_stats;
mod dockershim_flags;
mod dockershim_images;
mod dockershim_listing;
mod dockershim_logs;
mod dockershim_network;
mod dockershim_restart;
mod dockershim_swap;
mod grpc_clients;
mod hollow_nodes;
mod judges;
mod kubelet_allocatable;
mod kubelet_api_features;
mod kubelet_api_mode;
mod kubelet_api_source;
mod kubelet_api_status;
mod kubelet_bench;
mod kubelet_cadvisor_metrics;
mod kubelet_conformance_admission;
mod kubelet_conformance_env;
mod kubelet_conformance_fsgroup;
mod kubelet_conformance_lifecycle;
mod kubelet_conformance_logs;
mod kubelet_conformance_volumes;
mod kubelet_credentials;
mod kubelet_evented_pleg;
mod kubelet_eviction;
mod kubelet_faults;
mod kubelet_gc;
mod kubelet_hostile_manifests;
mod kubelet_image_pull;
mod kubelet_judge;
mod kubelet_kubeadm;
mod kubelet_logs;
mod kubelet_max_pods;
mod kubelet_metrics;
mod kubelet_node_api;
mod kubelet_object_watch;
mod kubelet_persistent_volumes;
mod kubelet_pods;
mod kubelet_probes;
mod kubelet_prometheus;
mod kubelet_qos;
mod kubelet_resource_metrics;
mod kubelet_restart_policy;
mod kubelet_runtime_class;
mod kubelet_runtime_restarts;
mod kubelet_secure_port;
mod kubelet_shutdown;
mod kubelet_sidecars;
mod kubelet_startup_errors;
mod kubelet_subpath;
mod kubelet_swap;
mod kubelet_swap_api;
mod kubelet_swap_api_self;
mod kubelet_three_nodes;
mod kubelet_tls_bootstrap;
mod kubelet_volumes;
mod kubelet_webhook_auth;
mod packages;
mod scrape_bench;
mod soak;
mod socket_activation;
mod streaming;
