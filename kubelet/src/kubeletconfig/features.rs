//! Feature gates (upstream `pkg/features/kube_features.go` and the gates of the libraries the
//! kubelet links, `k8s.io/component-base/featuregate`): the names a 1.26 kubelet recognizes.
//! Like upstream, a gate that is not in the list is an error ("unrecognized feature gate: Foo"),
//! from `--feature-gates` and from the config file's `featureGates` alike. A recognized gate is
//! accepted; this kubelet acts on `EventedPLEG`, `GracefulNodeShutdown` and `SidecarContainers`
//! and ignores the rest (most concern other components, or features this kubelet does not have).
//!
//! `SidecarContainers` (KEP-753) is not a 1.26 gate: it came in 1.28 (alpha, off) and is beta
//! and on by default from 1.29. This kubelet implements it with the 1.29 semantics and default:
//! on unless `SidecarContainers=false`.
//!
//! The list: every gate of the 1.26 feature-gate reference, alpha, beta and the graduated or
//! deprecated gates still accepted in 1.26 (locked to their default upstream; accepted here),
//! plus the special `AllAlpha` and `AllBeta`.

/// The gates a 1.26 kubelet recognizes, sorted (byte order).
pub const KNOWN_FEATURE_GATES: &[&str] = &[
    "APIListChunking",
    "APIPriorityAndFairness",
    "APIResponseCompression",
    "APISelfSubjectReview",
    "APIServerIdentity",
    "APIServerTracing",
    "AdvancedAuditing",
    "AggregatedDiscoveryEndpoint",
    "AllAlpha",
    "AllBeta",
    "AnyVolumeDataSource",
    "AppArmor",
    "CPUManager",
    "CPUManagerPolicyAlphaOptions",
    "CPUManagerPolicyBetaOptions",
    "CPUManagerPolicyOptions",
    "CSIInlineVolume",
    "CSIMigration",
    "CSIMigrationAWS",
    "CSIMigrationAzureDisk",
    "CSIMigrationAzureFile",
    "CSIMigrationGCE",
    "CSIMigrationPortworx",
    "CSIMigrationRBD",
    "CSIMigrationvSphere",
    "CSINodeExpandSecret",
    "CSIStorageCapacity",
    "CSIVolumeHealth",
    "ComponentSLIs",
    "ConsistentHTTPGetHandlers",
    "ContainerCheckpoint",
    "ContextualLogging",
    "ControllerManagerLeaderMigration",
    "CronJobTimeZone",
    "CrossNamespaceVolumeDataSource",
    "CustomCPUCFSQuotaPeriod",
    "CustomResourceValidationExpressions",
    "DaemonSetUpdateSurge",
    "DelegateFSGroupToCSIDriver",
    "DevicePlugins",
    "DisableAcceleratorUsageMetrics",
    "DisableCloudProviders",
    "DisableKubeletCloudCredentialProviders",
    "DownwardAPIHugePages",
    "DryRun",
    "DynamicResourceAllocation",
    "EfficientWatchResumption",
    "EndpointSliceTerminatingCondition",
    "EphemeralContainers",
    "EventedPLEG",
    "ExecProbeTimeout",
    "ExpandCSIVolumes",
    "ExpandInUsePersistentVolumes",
    "ExpandPersistentVolumes",
    "ExpandedDNSConfig",
    "ExperimentalHostUserNamespaceDefaulting",
    "GRPCContainerProbe",
    "GracefulNodeShutdown",
    "GracefulNodeShutdownBasedOnPodPriority",
    "HPAContainerMetrics",
    "HPAScaleToZero",
    "HonorPVReclaimPolicy",
    "IPTablesOwnershipCleanup",
    "IdentifyPodOS",
    "InTreePluginAWSUnregister",
    "InTreePluginAzureDiskUnregister",
    "InTreePluginAzureFileUnregister",
    "InTreePluginGCEUnregister",
    "InTreePluginOpenStackUnregister",
    "InTreePluginPortworxUnregister",
    "InTreePluginRBDUnregister",
    "InTreePluginvSphereUnregister",
    "JobMutableNodeSchedulingDirectives",
    "JobPodFailurePolicy",
    "JobReadyPods",
    "JobTrackingWithFinalizers",
    "KMSv2",
    "KubeletCredentialProviders",
    "KubeletInUserNamespace",
    "KubeletPodResources",
    "KubeletPodResourcesGetAllocatable",
    "KubeletTracing",
    "LegacyServiceAccountTokenNoAutoGeneration",
    "LegacyServiceAccountTokenTracking",
    "LocalStorageCapacityIsolation",
    "LocalStorageCapacityIsolationFSQuotaMonitoring",
    "LogarithmicScaleDown",
    "LoggingAlphaOptions",
    "LoggingBetaOptions",
    "MatchLabelKeysInPodTopologySpread",
    "MaxUnavailableStatefulSet",
    "MemoryManager",
    "MemoryQoS",
    "MinDomainsInPodTopologySpread",
    "MinimizeIPTablesRestore",
    "MixedProtocolLBService",
    "MultiCIDRRangeAllocator",
    "NetworkPolicyEndPort",
    "NetworkPolicyStatus",
    "NodeInclusionPolicyInPodTopologySpread",
    "NodeOutOfServiceVolumeDetach",
    "NodeSwap",
    "OpenAPIEnums",
    "OpenAPIV3",
    "PDBUnhealthyPodEvictionPolicy",
    "PodAndContainerStatsFromCRI",
    "PodDeletionCost",
    "PodDisruptionConditions",
    "PodHasNetworkCondition",
    "PodSchedulingReadiness",
    "PodSecurity",
    "ProbeTerminationGracePeriod",
    "ProcMountType",
    "ProxyTerminatingEndpoints",
    "QOSReserved",
    "ReadWriteOncePod",
    "RecoverVolumeExpansionFailure",
    "RemainingItemCount",
    "RemoveSelfLink",
    "RetroactiveDefaultStorageClass",
    "RotateKubeletServerCertificate",
    "SELinuxMountReadWriteOncePod",
    "SeccompDefault",
    "ServerSideApply",
    "ServerSideFieldValidation",
    "ServiceIPStaticSubrange",
    "ServiceInternalTrafficPolicy",
    "SidecarContainers",
    "SizeMemoryBackedVolumes",
    "StatefulSetAutoDeletePVC",
    "StatefulSetMinReadySeconds",
    "StatefulSetStartOrdinal",
    "StorageVersionAPI",
    "StorageVersionHash",
    "TopologyAwareHints",
    "TopologyManager",
    "TopologyManagerPolicyAlphaOptions",
    "TopologyManagerPolicyBetaOptions",
    "TopologyManagerPolicyOptions",
    "UserNamespacesStatelessPodsSupport",
    "ValidatingAdmissionPolicy",
    "VolumeCapacityPriority",
    "WatchBookmark",
    "WinDSR",
    "WinOverlay",
    "WindowsHostNetwork",
    "WindowsHostProcessContainers",
];

/// `SidecarContainers`: on unless the gates turn it off (upstream 1.29 beta default).
pub fn sidecar_containers(gates: &std::collections::BTreeMap<String, bool>) -> bool {
    gates.get("SidecarContainers").copied().unwrap_or(true)
}

/// Upstream `dropDisabledFields` (`pkg/api/pod/util.go`) for the gates this kubelet acts on:
/// with `SidecarContainers` off, init containers lose `restartPolicy` (an API server with the
/// gate off drops it too) and run as plain init containers.
pub fn drop_disabled_pod_fields(pod: &mut k8s_openapi::api::core::v1::Pod, sidecars: bool) {
    if sidecars {
        return;
    }
    let inits = pod.spec.as_mut().and_then(|s| s.init_containers.as_mut());
    for c in inits.into_iter().flatten() {
        c.restart_policy = None;
    }
}

/// Upstream's error for a gate it does not know.
pub fn unrecognized(name: &str) -> String {
    format!("unrecognized feature gate: {name}")
}

/// Is `name` a gate a 1.26 kubelet recognizes?
pub fn is_known(name: &str) -> bool {
    KNOWN_FEATURE_GATES.binary_search(&name).is_ok()
}

/// The first gate of `names` that is not recognized, as upstream's error.
pub fn check<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<(), String> {
    match names.into_iter().find(|n| !is_known(n)) {
        Some(n) => Err(unrecognized(n)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_is_sorted_and_has_the_gates_clusters_set() {
        assert!(KNOWN_FEATURE_GATES.windows(2).all(|w| w[0] < w[1]));
        for g in [
            "EventedPLEG",
            "GracefulNodeShutdown",
            "GracefulNodeShutdownBasedOnPodPriority",
            "RotateKubeletServerCertificate",
            "KubeletCredentialProviders",
            "SeccompDefault",
            "NodeSwap",
            "MemoryQoS",
            "CPUManager",
            "TopologyManager",
            "AllAlpha",
            "AllBeta",
            "SidecarContainers",
        ] {
            assert!(is_known(g), "{g}");
        }
        assert!(!is_known("Foo"));
        assert!(!is_known("eventedpleg"), "names are case-sensitive");
        assert_eq!(
            check(["EventedPLEG", "Foo", "Bar"]),
            Err("unrecognized feature gate: Foo".to_string())
        );
        assert_eq!(check(["EventedPLEG"]), Ok(()));
    }

    #[test]
    fn sidecar_containers_is_on_unless_turned_off() {
        let mut gates = std::collections::BTreeMap::new();
        assert!(sidecar_containers(&gates));
        gates.insert("SidecarContainers".to_string(), false);
        assert!(!sidecar_containers(&gates));

        let mut pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "spec": {"initContainers": [{"name": "s", "restartPolicy": "Always"}],
                     "containers": [{"name": "a"}]}
        }))
        .expect("pod");
        let policy = |p: &k8s_openapi::api::core::v1::Pod| {
            p.spec
                .as_ref()
                .and_then(|s| s.init_containers.as_ref())
                .and_then(|v| v[0].restart_policy.clone())
        };
        drop_disabled_pod_fields(&mut pod, true);
        assert_eq!(policy(&pod).as_deref(), Some("Always"));
        drop_disabled_pod_fields(&mut pod, false);
        assert_eq!(policy(&pod), None);
    }
}
