//! The config file fields this kubelet accepts but does not act on
//! ([`KubeletConfiguration::ignored_fields`]; docs/kubelet-config.md has the table): a field
//! is named when it is set to something other than the value under which upstream does
//! nothing either.

use std::time::Duration;

use super::v1beta1::KubeletConfiguration;

impl KubeletConfiguration {
    /// The fields set in the file to a value this kubelet does not act on (a feature it does
    /// not have), by their upstream names, in file order of the type. A field set to the value
    /// under which upstream does nothing either (`shutdownGracePeriod: 0s`, `memorySwap: {}`,
    /// `rotateCertificates: false`, ...) is not named. Call before [`Self::normalize`].
    pub fn ignored_fields(&self) -> Vec<&'static str> {
        let mut out = vec![];
        let mut note = |name: &'static str, ignored: bool| {
            if ignored {
                out.push(name);
            }
        };
        let nonempty_str = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.is_empty());
        let is_true = |v: &Option<bool>| *v == Some(true);
        let is_false = |v: &Option<bool>| *v == Some(false);
        note(
            "tlsCipherSuites",
            self.tls_cipher_suites
                .as_ref()
                .is_some_and(|v| !v.is_empty()),
        );
        note("tlsMinVersion", nonempty_str(&self.tls_min_version));
        note(
            "registryPullQPS",
            self.registry_pull_qps.is_some_and(|q| q != 0),
        );
        note(
            "registryBurst",
            self.registry_burst.is_some() && self.registry_pull_qps != Some(0),
        );
        note(
            "eventRecordQPS",
            self.event_record_qps.is_some_and(|q| q != 0),
        );
        note(
            "eventBurst",
            self.event_burst.is_some() && self.event_record_qps != Some(0),
        );
        note(
            "enableDebuggingHandlers",
            is_false(&self.enable_debugging_handlers),
        );
        note(
            "enableContentionProfiling",
            is_true(&self.enable_contention_profiling),
        );
        note(
            "volumeStatsAggPeriod",
            self.volume_stats_agg_period.is_some(),
        );
        note("kubeletCgroups", nonempty_str(&self.kubelet_cgroups));
        note("systemCgroups", nonempty_str(&self.system_cgroups));
        let static_cpu = self
            .cpu_manager_policy
            .as_deref()
            .is_some_and(|p| !p.is_empty() && !p.eq_ignore_ascii_case("none"));
        note("cpuManagerPolicy", static_cpu);
        note(
            "cpuManagerPolicyOptions",
            self.cpu_manager_policy_options
                .as_ref()
                .is_some_and(|m| !m.is_empty()),
        );
        note(
            "cpuManagerReconcilePeriod",
            static_cpu && self.cpu_manager_reconcile_period.is_some(),
        );
        note(
            "memoryManagerPolicy",
            self.memory_manager_policy
                .as_deref()
                .is_some_and(|p| !p.is_empty() && !p.eq_ignore_ascii_case("none")),
        );
        let topology = self
            .topology_manager_policy
            .as_deref()
            .is_some_and(|p| !p.is_empty() && p != "none");
        note("topologyManagerPolicy", topology);
        note(
            "topologyManagerScope",
            topology && self.topology_manager_scope.is_some(),
        );
        note(
            "topologyManagerPolicyOptions",
            self.topology_manager_policy_options
                .as_ref()
                .is_some_and(|m| !m.is_empty()),
        );
        note(
            "qosReserved",
            self.qos_reserved.as_ref().is_some_and(|m| !m.is_empty()),
        );
        note(
            "hairpinMode",
            self.hairpin_mode
                .as_deref()
                .is_some_and(|h| !h.is_empty() && h != "promiscuous-bridge"),
        );
        note("podCIDR", nonempty_str(&self.pod_cidr));
        note("podPidsLimit", self.pod_pids_limit.is_some_and(|p| p > 0));
        note("runOnce", is_true(&self.run_once));
        note("cpuCFSQuota", is_false(&self.cpu_cfs_quota));
        note(
            "cpuCFSQuotaPeriod",
            self.cpu_cfs_quota_period
                .is_some_and(|p| p != Duration::from_millis(100)),
        );
        note(
            "contentType",
            self.content_type
                .as_deref()
                .is_some_and(|c| !c.is_empty() && c != "application/json"),
        );
        note("kubeAPIQPS", self.kube_api_qps.is_some());
        note("kubeAPIBurst", self.kube_api_burst.is_some_and(|b| b != 0));
        note("serializeImagePulls", self.serialize_image_pulls.is_some());
        note("podsPerCore", self.pods_per_core.is_some_and(|n| n != 0));
        note(
            "enableControllerAttachDetach",
            is_false(&self.enable_controller_attach_detach),
        );
        note(
            "protectKernelDefaults",
            is_true(&self.protect_kernel_defaults),
        );
        note(
            "makeIPTablesUtilChains",
            self.make_iptables_util_chains.is_some() && !is_false(&self.make_iptables_util_chains),
        );
        note(
            "iptablesMasqueradeBit",
            self.iptables_masquerade_bit.is_some(),
        );
        note("iptablesDropBit", self.iptables_drop_bit.is_some());
        note(
            "memorySwap",
            self.memory_swap
                .as_ref()
                .is_some_and(|m| nonempty_str(&m.swap_behavior)),
        );
        note(
            "reservedSystemCPUs",
            nonempty_str(&self.reserved_system_cpus),
        );
        note(
            "showHiddenMetricsForVersion",
            nonempty_str(&self.show_hidden_metrics_for_version),
        );
        note(
            "systemReservedCgroup",
            nonempty_str(&self.system_reserved_cgroup),
        );
        note(
            "kubeReservedCgroup",
            nonempty_str(&self.kube_reserved_cgroup),
        );
        note(
            "enforceNodeAllocatable",
            self.enforce_node_allocatable
                .as_ref()
                .is_some_and(|v| v.iter().any(|e| e != "none")),
        );
        note("volumePluginDir", nonempty_str(&self.volume_plugin_dir));
        note("providerID", nonempty_str(&self.provider_id));
        note(
            "kernelMemcgNotification",
            is_true(&self.kernel_memcg_notification),
        );
        if let Some(l) = &self.logging {
            note(
                "logging.vmodule",
                l.vmodule.as_ref().is_some_and(|v| !v.is_empty()),
            );
            let json = l.options.as_ref().and_then(|o| o.json.as_ref());
            note(
                "logging.options.json.splitStream",
                json.is_some_and(|j| is_true(&j.split_stream)),
            );
            note(
                "logging.options.json.infoBufferSize",
                json.and_then(|j| j.info_buffer_size.as_ref())
                    .is_some_and(|b| !b.is_zero()),
            );
        }
        note(
            "enableSystemLogHandler",
            is_true(&self.enable_system_log_handler),
        );
        note(
            "shutdownGracePeriodByPodPriority",
            self.shutdown_grace_period_by_pod_priority
                .as_ref()
                .is_some_and(|v| !v.is_empty()),
        );
        note(
            "reservedMemory",
            self.reserved_memory.as_ref().is_some_and(|v| !v.is_empty()),
        );
        note(
            "enableProfilingHandler",
            is_true(&self.enable_profiling_handler),
        );
        note(
            "enableDebugFlagsHandler",
            is_true(&self.enable_debug_flags_handler),
        );
        note("seccompDefault", is_true(&self.seccomp_default));
        let gate = |name: &str| {
            self.feature_gates
                .as_ref()
                .and_then(|g| g.get(name))
                .copied()
                .unwrap_or(false)
        };
        note(
            "memoryThrottlingFactor",
            self.memory_throttling_factor.is_some() && gate("MemoryQoS"),
        );
        note("tracing", self.tracing.is_some());
        note(
            "localStorageCapacityIsolation",
            is_false(&self.local_storage_capacity_isolation),
        );
        out
    }
}
