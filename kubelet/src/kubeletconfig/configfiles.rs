//! Reading the config file (upstream `pkg/kubelet/kubeletconfig/configfiles` and the parts of
//! `pkg/kubelet/apis/config/validation` this kubelet relies on): strict YAML or JSON decoding
//! with short messages that name the unknown field and its line, the `apiVersion`/`kind`
//! check, and validation of values.

use std::path::Path;

use super::ConfigError;
use super::v1beta1::{API_VERSION, KIND, KubeletConfiguration};

impl KubeletConfiguration {
    /// Decode strictly from YAML or JSON text; `path` is for messages. Zero values are kept
    /// as written ([`Self::normalize`] applies upstream's defaulting).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let decode = |reason: String| ConfigError::Decode {
            path: path.to_path_buf(),
            reason,
        };
        let cfg: Self = if text.trim().is_empty() {
            Self::default()
        } else if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|e| decode(e.to_string()))?
        } else {
            serde_saphyr::from_str(text).map_err(|e| decode(short_yaml_error(&e.to_string())))?
        };
        for (field, value, want) in [
            ("apiVersion", &cfg.api_version, API_VERSION),
            ("kind", &cfg.kind, KIND),
        ] {
            if let Some(v) = value
                && v != want
            {
                return Err(ConfigError::TypeMeta {
                    path: path.to_path_buf(),
                    field,
                    value: v.clone(),
                    want,
                });
            }
        }
        cfg.validate().map_err(|reason| ConfigError::FileInvalid {
            path: path.to_path_buf(),
            reason,
        })?;
        Ok(cfg)
    }

    /// Read and decode a file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Values upstream's validation refuses and this kubelet relies on.
    fn validate(&self) -> Result<(), String> {
        let one_of = |field: &str, v: &Option<String>, allowed: &[&str]| match v {
            Some(v) if !allowed.contains(&v.as_str()) => Err(format!(
                "invalid value {v:?} for {field}: must be one of {}",
                allowed.join(", ")
            )),
            _ => Ok(()),
        };
        one_of(
            "authorization.mode",
            &self.authorization.as_ref().and_then(|a| a.mode.clone()),
            &["AlwaysAllow", "Webhook"],
        )?;
        one_of(
            "logging.format",
            &self.logging.as_ref().and_then(|l| l.format.clone()),
            &["text", "json"],
        )?;
        one_of(
            "memorySwap.swapBehavior",
            &self
                .memory_swap
                .as_ref()
                .and_then(|m| m.swap_behavior.clone()),
            &["", "LimitedSwap", "UnlimitedSwap"],
        )?;
        one_of(
            "configMapAndSecretChangeDetectionStrategy",
            &self.config_map_and_secret_change_detection_strategy,
            &["Get", "Cache", "Watch"],
        )?;
        one_of(
            "cgroupDriver",
            &self.cgroup_driver,
            &["", "cgroupfs", "systemd"],
        )?;
        for ip in self.cluster_dns.iter().flatten() {
            if ip.parse::<std::net::IpAddr>().is_err() {
                return Err(format!(
                    "invalid value {ip:?} for clusterDNS: not an IP address"
                ));
            }
        }
        if let Some(p) = self.healthz_port
            && !(0..=65535).contains(&p)
        {
            return Err(format!(
                "invalid value {p} for healthzPort: must be 0 to 65535"
            ));
        }
        if let Some(gates) = &self.feature_gates {
            super::features::check(gates.keys().map(String::as_str))
                .map_err(|e| format!("featureGates: {e}"))?;
        }
        if let (Some(g), Some(c)) = (
            self.shutdown_grace_period,
            self.shutdown_grace_period_critical_pods,
        ) && c > g
        {
            return Err(
                "shutdownGracePeriodCriticalPods must be <= shutdownGracePeriod".to_string(),
            );
        }
        Ok(())
    }
}

/// serde-saphyr's message is several lines with a source excerpt and, for an unknown field,
/// every known name: keep the first line up to the list ("line 4 column 1: unknown field
/// `staticPodPaht`").
fn short_yaml_error(msg: &str) -> String {
    let first = msg.lines().next().unwrap_or(msg);
    let first = first.strip_prefix("error: ").unwrap_or(first);
    match first.find(", expected one of") {
        Some(i) => first[..i].to_string(),
        None => first.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn parses_upstream_field_names() {
        let yaml = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: /etc/kubernetes/manifests\nstaticPodURL: http://example/pods\nstaticPodURLHeader:\n  X-A: [\"1\", \"2\"]\nfileCheckFrequency: 5s\nhttpCheckFrequency: 1m30s\nsyncFrequency: 30s\naddress: 0.0.0.0\nreadOnlyPort: 0\nmaxPods: 50\nruntimeRequestTimeout: 10m\ncontainerRuntimeEndpoint: unix:///run/containerd/containerd.sock\nimageServiceEndpoint: unix:///run/img.sock\n";
        let c = KubeletConfiguration::parse(yaml, Path::new("c.yaml")).expect("parse");
        assert_eq!(
            c.static_pod_path.as_deref(),
            Some(Path::new("/etc/kubernetes/manifests"))
        );
        assert_eq!(c.static_pod_url.as_deref(), Some("http://example/pods"));
        assert_eq!(
            c.static_pod_url_header
                .as_ref()
                .and_then(|h| h.get("X-A"))
                .cloned(),
            Some(vec!["1".to_string(), "2".to_string()])
        );
        assert_eq!(c.file_check_frequency, Some(Duration::from_secs(5)));
        assert_eq!(c.http_check_frequency, Some(Duration::from_secs(90)));
        assert_eq!(c.sync_frequency, Some(Duration::from_secs(30)));
        assert_eq!(c.read_only_port, Some(0));
        assert_eq!(c.max_pods, Some(50));
        assert_eq!(c.runtime_request_timeout, Some(Duration::from_secs(600)));
        let json = serde_json::to_string(&c).expect("json");
        assert!(json.contains("\"staticPodURL\""));
        assert!(json.contains("\"httpCheckFrequency\":\"1m30s\""));
        assert_eq!(
            KubeletConfiguration::parse(&json, Path::new("c.json")).expect("json"),
            c
        );
    }

    #[test]
    fn unknown_field_is_named() {
        let err = KubeletConfiguration::parse("maxPods: 3\nfooBar: 1\n", Path::new("c.yaml"))
            .expect_err("unknown field");
        assert!(err.to_string().contains("fooBar"), "{err}");
        let err = KubeletConfiguration::parse("fileCheckFrequency: soon\n", Path::new("c.yaml"))
            .expect_err("bad duration");
        assert!(err.to_string().contains("invalid duration"), "{err}");
        let err =
            KubeletConfiguration::parse("kind: Pod\n", Path::new("c.yaml")).expect_err("kind");
        assert!(matches!(err, ConfigError::TypeMeta { field: "kind", .. }));
    }

    const KUBEADM: &str =
        include_str!("../../../integration/tests/fixtures/kubeadm/config-1.26.yaml");

    #[test]
    fn kubeadm_1_26_config_decodes_with_one_ignored_field() {
        let c = KubeletConfiguration::parse(KUBEADM, Path::new("config.yaml")).expect("kubeadm");
        assert_eq!(c.ignored_fields(), vec!["volumeStatsAggPeriod"]);
        assert_eq!(c.cluster_dns, Some(vec!["10.96.0.10".to_string()]));
        assert_eq!(c.healthz_port, Some(10248));
        assert_eq!(c.sync_frequency, Some(Duration::ZERO));
        let mut n = c.clone();
        n.normalize();
        // kubeadm's 0s mean "the default".
        assert_eq!(n.sync_frequency, None);
        assert_eq!(n.runtime_request_timeout, None);
        assert_eq!(n.streaming_connection_idle_timeout, None);
        assert_eq!(n.cluster_domain.as_deref(), Some("cluster.local"));
        assert_eq!(
            n.resolv_conf.as_deref(),
            Some("/run/systemd/resolve/resolv.conf")
        );
        // The same file as JSON decodes the same.
        let json = serde_json::to_string(&c).expect("json");
        assert_eq!(
            KubeletConfiguration::parse(&json, Path::new("c.json")).expect("json"),
            c
        );
    }

    #[test]
    fn misspelled_fields_are_named_with_their_line() {
        let text = KUBEADM.replace("clusterDomain:", "clusterDomian:");
        let err = KubeletConfiguration::parse(&text, Path::new("config.yaml"))
            .expect_err("misspelled")
            .to_string();
        assert!(err.contains("unknown field `clusterDomian`"), "{err}");
        assert!(err.contains("line 18"), "{err}");
        assert!(!err.contains("expected one of"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        // Nested structures are strict too.
        let text = KUBEADM.replace("    cacheTTL: 0s", "    cacheTtl: 0s");
        let err = KubeletConfiguration::parse(&text, Path::new("config.yaml"))
            .expect_err("nested")
            .to_string();
        assert!(err.contains("cacheTtl") && err.contains("line 6"), "{err}");
        let err =
            KubeletConfiguration::parse("logging:\n  format: xml\n", Path::new("config.yaml"))
                .expect_err("format");
        assert!(err.to_string().contains("logging.format"), "{err}");
        let err = KubeletConfiguration::parse(
            "configMapAndSecretChangeDetectionStrategy: Poll\n",
            Path::new("c.yaml"),
        )
        .expect_err("strategy");
        assert!(
            err.to_string()
                .contains("configMapAndSecretChangeDetectionStrategy"),
            "{err}"
        );
        let err = KubeletConfiguration::parse("clusterDNS: [dns]\n", Path::new("c.yaml"))
            .expect_err("ip");
        assert!(err.to_string().contains("clusterDNS"), "{err}");
    }

    #[test]
    fn every_1_26_field_is_known() {
        // Every field of the 1.26 v1beta1 type, each set once.
        let yaml = "enableServer: true\nstaticPodPath: /m\nsyncFrequency: 1m\nfileCheckFrequency: 20s\nhttpCheckFrequency: 20s\nstaticPodURL: http://x\nstaticPodURLHeader: {a: [b]}\naddress: 0.0.0.0\nport: 10250\nreadOnlyPort: 0\ntlsCertFile: /c\ntlsPrivateKeyFile: /k\ntlsCipherSuites: [TLS_AES_128_GCM_SHA256]\ntlsMinVersion: VersionTLS12\nrotateCertificates: true\nserverTLSBootstrap: true\nauthentication: {x509: {clientCAFile: /ca}, webhook: {enabled: true, cacheTTL: 2m}, anonymous: {enabled: false}}\nauthorization: {mode: Webhook, webhook: {cacheAuthorizedTTL: 5m, cacheUnauthorizedTTL: 30s}}\nregistryPullQPS: 5\nregistryBurst: 10\neventRecordQPS: 5\neventBurst: 10\nenableDebuggingHandlers: true\nenableContentionProfiling: false\nhealthzPort: 10248\nhealthzBindAddress: 127.0.0.1\noomScoreAdj: -999\nclusterDomain: cluster.local\nclusterDNS: [10.96.0.10]\nstreamingConnectionIdleTimeout: 4h\nnodeStatusUpdateFrequency: 10s\nnodeStatusReportFrequency: 5m\nnodeLeaseDurationSeconds: 40\nimageMinimumGCAge: 2m\nimageGCHighThresholdPercent: 85\nimageGCLowThresholdPercent: 80\nvolumeStatsAggPeriod: 1m\nkubeletCgroups: /k\nsystemCgroups: /s\ncgroupRoot: /\ncgroupsPerQOS: true\ncgroupDriver: cgroupfs\ncpuManagerPolicy: none\ncpuManagerPolicyOptions: {a: b}\ncpuManagerReconcilePeriod: 10s\nmemoryManagerPolicy: None\ntopologyManagerPolicy: none\ntopologyManagerScope: container\ntopologyManagerPolicyOptions: {a: b}\nqosReserved: {memory: 50%}\nruntimeRequestTimeout: 2m\nhairpinMode: promiscuous-bridge\nmaxPods: 110\npodCIDR: 10.0.0.0/24\npodPidsLimit: -1\nresolvConf: /etc/resolv.conf\nrunOnce: false\ncpuCFSQuota: true\ncpuCFSQuotaPeriod: 100ms\nnodeStatusMaxImages: 50\nmaxOpenFiles: 1000000\ncontentType: application/vnd.kubernetes.protobuf\nkubeAPIQPS: 5\nkubeAPIBurst: 10\nserializeImagePulls: true\nevictionHard: {memory.available: 100Mi}\nevictionSoft: {}\nevictionSoftGracePeriod: {}\nevictionPressureTransitionPeriod: 5m\nevictionMaxPodGracePeriod: 0\nevictionMinimumReclaim: {}\npodsPerCore: 0\nenableControllerAttachDetach: true\nprotectKernelDefaults: false\nmakeIPTablesUtilChains: true\niptablesMasqueradeBit: 14\niptablesDropBit: 15\nfeatureGates: {EventedPLEG: false}\nfailSwapOn: true\nmemorySwap: {swapBehavior: LimitedSwap}\ncontainerLogMaxSize: 10Mi\ncontainerLogMaxFiles: 5\nconfigMapAndSecretChangeDetectionStrategy: Watch\nsystemReserved: {cpu: 100m}\nkubeReserved: {cpu: 100m}\nreservedSystemCPUs: \"0\"\nshowHiddenMetricsForVersion: \"1.25\"\nsystemReservedCgroup: /s\nkubeReservedCgroup: /k\nenforceNodeAllocatable: [pods]\nallowedUnsafeSysctls: [net.core.somaxconn]\nvolumePluginDir: /v\nproviderID: p\nkernelMemcgNotification: false\nlogging: {format: json, flushFrequency: 5s, verbosity: 2, vmodule: [{filePattern: x, verbosity: 3}], options: {json: {splitStream: false, infoBufferSize: 0}}}\nenableSystemLogHandler: true\nshutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\nshutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 30}]\nreservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]\nenableProfilingHandler: true\nenableDebugFlagsHandler: true\nseccompDefault: false\nmemoryThrottlingFactor: 0.8\nregisterWithTaints: [{key: k, value: v, effect: NoSchedule}]\nregisterNode: true\ntracing: {endpoint: localhost:4317, samplingRatePerMillion: 0}\nlocalStorageCapacityIsolation: true\n";
        let c = KubeletConfiguration::parse(yaml, Path::new("all.yaml")).expect("every field");
        let set = serde_json::to_value(&c).expect("json");
        let nulls: Vec<&String> = set
            .as_object()
            .expect("object")
            .iter()
            .filter(|(_, v)| v.is_null())
            .map(|(k, _)| k)
            .collect();
        // Only the type meta and the three fields of later versions are left unset.
        assert_eq!(nulls.len(), 5, "{nulls:?}");
        let ignored = c.ignored_fields();
        for f in [
            "tlsCipherSuites",
            "memorySwap",
            "shutdownGracePeriodByPodPriority",
            "tracing",
            "logging.vmodule",
        ] {
            assert!(ignored.contains(&f), "{f}: {ignored:?}");
        }
        for f in [
            "rotateCertificates",
            "serverTLSBootstrap",
            "clusterDNS",
            "logging",
            "healthzPort",
            "oomScoreAdj",
            "shutdownGracePeriod",
            "shutdownGracePeriodCriticalPods",
            "configMapAndSecretChangeDetectionStrategy",
        ] {
            assert!(!ignored.contains(&f), "{f}");
        }
    }
}
