//! Upstream's defaulting of zero values (`pkg/kubelet/apis/config/v1beta1/defaults.go`
//! `SetDefaults_KubeletConfiguration`): after [`KubeletConfiguration::normalize`], `None`
//! means "the default".

use std::time::Duration;

use super::v1beta1::KubeletConfiguration;

impl KubeletConfiguration {
    /// Upstream defaulting of zero values (`SetDefaults_KubeletConfiguration`): a zero
    /// duration, a zero port/count or an empty string means "the default" for the fields
    /// upstream defaults that way (kubeadm writes `0s` for most durations). After this, `None`
    /// means "the default".
    pub fn normalize(&mut self) {
        fn zero_dur(d: &mut Option<Duration>) {
            if *d == Some(Duration::ZERO) {
                *d = None;
            }
        }
        fn zero_int<T: Default + PartialEq>(v: &mut Option<T>) {
            if v.as_ref() == Some(&T::default()) {
                *v = None;
            }
        }
        for d in [
            &mut self.sync_frequency,
            &mut self.file_check_frequency,
            &mut self.http_check_frequency,
            &mut self.streaming_connection_idle_timeout,
            &mut self.node_status_update_frequency,
            &mut self.node_status_report_frequency,
            &mut self.image_minimum_gc_age,
            &mut self.volume_stats_agg_period,
            &mut self.cpu_manager_reconcile_period,
            &mut self.runtime_request_timeout,
            &mut self.eviction_pressure_transition_period,
        ] {
            zero_dur(d);
        }
        for v in [
            &mut self.port,
            &mut self.node_lease_duration_seconds,
            &mut self.max_pods,
            &mut self.registry_burst,
            &mut self.event_burst,
            &mut self.kube_api_burst,
        ] {
            zero_int(v);
        }
        zero_int(&mut self.max_open_files);
        for v in [
            &mut self.address,
            &mut self.healthz_bind_address,
            &mut self.cgroup_driver,
            &mut self.cpu_manager_policy,
            &mut self.memory_manager_policy,
            &mut self.topology_manager_policy,
            &mut self.topology_manager_scope,
            &mut self.hairpin_mode,
            &mut self.content_type,
            &mut self.container_log_max_size,
            &mut self.config_map_and_secret_change_detection_strategy,
            &mut self.volume_plugin_dir,
        ] {
            zero_int(v);
        }
        if let Some(p) = self.pod_pids_limit
            && p < 0
        {
            self.pod_pids_limit = None;
        }
    }
}
