//! Feature gates (upstream `pkg/features/kube_features.go` and the gates of the libraries the
//! kubelet links, `k8s.io/component-base/featuregate`): the names a 1.26 kubelet recognizes.
//! Like upstream, a gate that is not in the list is an error ("unrecognized feature gate: Foo"),
//! from `--feature-gates` and from the config file's `featureGates` alike. A recognized gate is
//! accepted; this kubelet acts on `EventedPLEG` and `GracefulNodeShutdown` and ignores the rest
//! (most concern other components, or features this kubelet does not have).
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
}
