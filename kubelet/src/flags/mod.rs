//! Command-line flags (upstream `cmd/kubelet/app/options` `KubeletFlags` and the
//! `KubeletConfiguration` flags), with upstream names and defaults, and the resolution of flags
//! plus config file into one [`KubeletConfig`]. Rule, like upstream: defaults, then the values
//! of the `--config` file, then every flag given explicitly on the command line (detected with
//! clap's `ArgMatches::value_source`).
//!
//! Layout: `options.rs` (the clap [`KubeletFlags`]), `parsers.rs` (flag values with a syntax of
//! their own), `resolve.rs` (flags plus file into [`KubeletConfig`]); this file has [`load`],
//! what `main` calls, and re-exports their public items.

mod options;
mod parsers;
mod resolve;

use std::ffi::OsString;

use clap::{CommandFactory, FromArgMatches};

use crate::kubeletconfig::{ConfigError, KubeletConfig, KubeletConfiguration};

pub use options::KubeletFlags;
pub use parsers::{parse_feature_gates, parse_header_pairs, parse_node_labels, parse_taints};
pub use resolve::resolve;

/// Parse the command line, load `--config` if given, and resolve (what `main` calls).
pub fn load<I, T>(args: I) -> Result<(KubeletFlags, KubeletConfig), ConfigError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let matches = KubeletFlags::command().try_get_matches_from(args)?;
    let flags = KubeletFlags::from_arg_matches(&matches)?;
    let file = flags
        .config
        .as_deref()
        .map(KubeletConfiguration::load)
        .transpose()?;
    let cfg = resolve(&flags, &matches, file)?;
    Ok((flags, cfg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::time::Duration;

    fn load_with(args: &[&str]) -> KubeletConfig {
        let mut all = vec!["kubelet", "--hostname-override", "Node-1"];
        all.extend_from_slice(args);
        load(all).expect("load").1
    }

    #[test]
    fn allowed_unsafe_sysctls_come_from_the_flag_or_the_file_and_bad_ones_stop_the_start() {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "spec": {"containers": [], "securityContext": {"sysctls": [
                {"name": "kernel.msgmax", "value": "1"}]}}
        }))
        .expect("pod");
        assert!(load_with(&[]).sysctls.admit(&pod).is_err());
        let c = load_with(&["--allowed-unsafe-sysctls", "kernel.msg*,net.core.somaxconn"]);
        assert_eq!(c.sysctls.admit(&pod), Ok(()));
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            "kind: KubeletConfiguration\nallowedUnsafeSysctls: [kernel.msgmax]\n",
        )
        .expect("write");
        let c = load_with(&["--config", path.to_str().expect("utf8")]);
        assert_eq!(c.sysctls.admit(&pod), Ok(()));
        let e = load(["kubelet", "--allowed-unsafe-sysctls", "kernel.panic"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid value for --allowed-unsafe-sysctls: the sysctl \"kernel.panic\" are not known to be namespaced"
        );
    }

    #[test]
    fn command_is_well_formed() {
        KubeletFlags::command().debug_assert();
    }

    #[test]
    fn defaults() {
        let c = load_with(&[]);
        assert_eq!(c.node_name, "node-1");
        assert_eq!(c.container_runtime_endpoint, None);
        assert_eq!(c.docker_endpoint, "unix:///var/run/docker.sock");
        assert_eq!(c.pod_infra_container_image, "registry.k8s.io/pause:3.9");
        assert_eq!(c.file_check_frequency, Duration::from_secs(20));
        assert_eq!(c.http_check_frequency, Duration::from_secs(20));
        assert_eq!(c.sync_frequency, Duration::from_secs(60));
        assert_eq!(c.runtime_request_timeout, Duration::from_secs(120));
        assert_eq!(c.root_dir, PathBuf::from("/var/lib/kubelet"));
        assert_eq!((c.max_pods, c.read_only_port), (110, 10255));
        assert_eq!(c.address, "127.0.0.1");
        assert!(!c.evented_pleg);
        assert_eq!(c.verbosity, 0);
        assert!(c.static_pod_url_header.is_empty());
        assert_eq!(
            c.config_map_and_secret_change_detection_strategy,
            crate::apiobjects::ChangeDetectionStrategy::Watch
        );
    }

    #[test]
    fn log_and_gc_flags() {
        let c = load_with(&[]);
        assert_eq!(c.container_log_max_size, 10 * 1024 * 1024);
        assert_eq!(c.container_log_max_files, 5);
        assert_eq!(c.container_log_monitor_interval, Duration::from_secs(10));
        assert_eq!((c.max_per_pod_container, c.max_containers), (1, -1));
        assert_eq!(c.minimum_container_ttl_duration, Duration::ZERO);
        assert_eq!(
            (
                c.image_gc_high_threshold_percent,
                c.image_gc_low_threshold_percent
            ),
            (85, 80)
        );
        assert_eq!(c.image_minimum_gc_age, Duration::from_secs(120));
        assert_eq!(c.container_gc_period, Duration::from_secs(60));
        assert_eq!(c.image_gc_period, Duration::from_secs(300));
        let c = load_with(&[
            "--container-log-max-size=4Ki",
            "--container-log-max-files=2",
            "--maximum-dead-containers-per-container=-1",
            "--maximum-dead-containers=3",
            "--minimum-container-ttl-duration=10s",
            "--image-gc-high-threshold=1",
            "--image-gc-low-threshold=0",
        ]);
        assert_eq!(c.container_log_max_size, 4096);
        assert_eq!(c.container_log_max_files, 2);
        assert_eq!((c.max_per_pod_container, c.max_containers), (-1, 3));
        assert_eq!(c.minimum_container_ttl_duration, Duration::from_secs(10));
        assert_eq!(
            (
                c.image_gc_high_threshold_percent,
                c.image_gc_low_threshold_percent
            ),
            (1, 0)
        );
        for bad in [
            "--container-log-max-files=1",
            "--container-log-max-size=lots",
            "--image-gc-high-threshold=101",
            "--image-gc-low-threshold=90",
        ] {
            assert!(load(["kubelet", bad]).is_err(), "{bad}");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            "containerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\nimageGCHighThresholdPercent: 70\nimageGCLowThresholdPercent: 60\nimageMinimumGCAge: 1m\n",
        )
        .expect("write");
        let c = load_with(&["--config", path.to_str().expect("utf8")]);
        assert_eq!(c.container_log_max_size, 1024 * 1024);
        assert_eq!(c.container_log_max_files, 3);
        assert_eq!(c.container_log_monitor_interval, Duration::from_secs(3));
        assert_eq!(
            (
                c.image_gc_high_threshold_percent,
                c.image_gc_low_threshold_percent
            ),
            (70, 60)
        );
        assert_eq!(c.image_minimum_gc_age, Duration::from_secs(60));
    }

    #[test]
    fn flags_and_headers() {
        let c = load_with(&[
            "--v=4",
            "--evented-pleg",
            "--sync-frequency=1m30s",
            "--manifest-url=http://h/pods",
            "--manifest-url-header=a:hello,b:again",
            "--manifest-url-header",
            "b:beautiful,c:x:y",
            "--container-runtime-endpoint",
            "unix:///run/containerd/containerd.sock",
        ]);
        assert_eq!(c.verbosity, 4);
        assert!(c.evented_pleg);
        assert_eq!(c.sync_frequency, Duration::from_secs(90));
        assert_eq!(c.static_pod_url.as_deref(), Some("http://h/pods"));
        assert_eq!(
            c.static_pod_url_header,
            BTreeMap::from([
                ("a".to_string(), vec!["hello".to_string()]),
                (
                    "b".to_string(),
                    vec!["again".to_string(), "beautiful".to_string()]
                ),
                ("c".to_string(), vec!["x:y".to_string()]),
            ])
        );
        assert!(load(["kubelet", "--manifest-url-header=nocolon"]).is_err());
        assert!(load(["kubelet", "--sync-frequency=5x"]).is_err());
        let c = load_with(&["-v", "2"]);
        assert_eq!(c.verbosity, 2);
    }

    #[test]
    fn explicit_flag_wins_over_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: /from/file\nsyncFrequency: 10s\nmaxPods: 20\nreadOnlyPort: 0\nstaticPodURLHeader:\n  f: [\"1\"]\n",
        )
        .expect("write");
        let p = path.to_str().expect("utf8");
        // File values beat defaults.
        let c = load_with(&["--config", p]);
        assert_eq!(c.static_pod_path, Some(PathBuf::from("/from/file")));
        assert_eq!(c.sync_frequency, Duration::from_secs(10));
        assert_eq!((c.max_pods, c.read_only_port), (20, 0));
        assert_eq!(
            c.static_pod_url_header.get("f"),
            Some(&vec!["1".to_string()])
        );
        // Explicit flags beat the file, even when equal to the default.
        let c = load_with(&[
            "--config",
            p,
            "--pod-manifest-path=/from/flag",
            "--sync-frequency=1m",
            "--max-pods=110",
            "--manifest-url-header=g:2",
        ]);
        assert_eq!(c.static_pod_path, Some(PathBuf::from("/from/flag")));
        assert_eq!(c.sync_frequency, Duration::from_secs(60));
        assert_eq!(c.max_pods, 110);
        assert_eq!(c.read_only_port, 0);
        assert!(!c.static_pod_url_header.contains_key("f"));
        // An unknown field in the file is an error naming it.
        std::fs::write(&path, "maxPods: 1\nbogusField: true\n").expect("write");
        let err = load(["kubelet", "--config", p]).expect_err("unknown field");
        assert!(err.to_string().contains("bogusField"), "{err}");
    }

    #[test]
    fn sidecar_containers_gate_is_on_by_default() {
        assert!(load_with(&[]).sidecar_containers);
        assert!(!load_with(&["--feature-gates", "SidecarContainers=false"]).sidecar_containers);
    }

    #[test]
    fn feature_gates_turn_on_the_evented_pleg() {
        assert!(load_with(&["--feature-gates", "EventedPLEG=true"]).evented_pleg);
        assert!(
            !load_with(&["--feature-gates", "EventedPLEG=false,SeccompDefault=true"]).evented_pleg
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, "featureGates:\n  EventedPLEG: true\n").expect("write");
        assert!(load_with(&["--config", path.to_str().expect("utf8")]).evented_pleg);
        let bad = load(["kubelet", "--feature-gates", "EventedPLEG=yes"]);
        assert!(bad.is_err());
    }

    fn load_err(args: &[&str]) -> String {
        let mut all = vec!["kubelet", "--hostname-override", "n"];
        all.extend_from_slice(args);
        match load(all) {
            Ok(_) => panic!("{args:?} must be refused"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn unknown_feature_gates_are_refused_like_upstream() {
        assert_eq!(
            load_err(&["--feature-gates", "EventedPLEG=true,Foo=true"]),
            "invalid value for --feature-gates: unrecognized feature gate: Foo"
        );
        // Recognized 1.26 gates this kubelet does not implement are accepted.
        load_with(&[
            "--feature-gates",
            "RotateKubeletServerCertificate=true,KubeletCredentialProviders=true,AllAlpha=false",
        ]);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, "featureGates:\n  EventedPLEG: true\n  Foo: false\n").expect("write");
        let p = path.to_str().expect("utf8");
        assert_eq!(
            load_err(&["--config", p]),
            format!(
                "invalid kubelet config file {:?}: featureGates: unrecognized feature gate: Foo",
                path
            )
        );
    }

    #[test]
    fn out_of_range_and_conflicting_values_are_refused_with_field_and_flag() {
        assert_eq!(
            load_err(&["--read-only-port", "70000"]),
            "invalid configuration: readOnlyPort (--read-only-port) 70000 must be between 0 and 65535, inclusive"
        );
        assert_eq!(
            load_err(&["--port", "-1"]),
            "invalid configuration: port (--port) -1 must be between 0 and 65535, inclusive"
        );
        assert_eq!(
            load_err(&["--max-pods", "-3"]),
            "invalid configuration: maxPods (--max-pods) -3 must not be a negative number"
        );
        assert_eq!(
            load_err(&["--kubeconfig", "/kc", "--node-lease-duration-seconds", "0"]),
            "invalid configuration: nodeLeaseDurationSeconds (--node-lease-duration-seconds) 0 must be greater than 0"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, "readOnlyPort: 65536\n").expect("write");
        let p = path.to_str().expect("utf8");
        assert!(
            load_err(&["--config", p]).contains("readOnlyPort (--read-only-port) 65536"),
            "the file's value is checked too"
        );
        // The gate off and the periods set: upstream refuses the combination.
        std::fs::write(
            &path,
            "shutdownGracePeriod: 30s\nfeatureGates:\n  GracefulNodeShutdown: false\n",
        )
        .expect("write");
        assert_eq!(
            load_err(&["--config", p]),
            "invalid configuration: specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown"
        );
        // The flag's gate wins over the file's.
        let c = load_with(&[
            "--config",
            p,
            "--feature-gates",
            "GracefulNodeShutdown=true",
        ]);
        assert_eq!(c.shutdown.grace_period, Duration::from_secs(30));
    }

    #[test]
    fn webhook_auth_defaults_differ_with_and_without_a_config_file() {
        use crate::server::auth::AuthorizationMode;
        let secs = Duration::from_secs;
        // Flags alone: upstream's legacy defaults.
        let c = load_with(&["--root-dir", "/srv/k"]);
        assert!(!c.auth.token_webhook);
        assert_eq!(c.auth.mode, AuthorizationMode::AlwaysAllow);
        assert_eq!(
            (
                c.auth.token_cache_ttl,
                c.auth.authorized_ttl,
                c.auth.unauthorized_ttl
            ),
            (secs(120), secs(300), secs(30))
        );
        let c = load_with(&[
            "--authentication-token-webhook",
            "--authentication-token-webhook-cache-ttl=10s",
            "--authorization-mode=Webhook",
            "--authorization-webhook-cache-authorized-ttl=1m",
            "--authorization-webhook-cache-unauthorized-ttl=0s",
        ]);
        assert!(c.auth.token_webhook);
        assert_eq!(c.auth.mode, AuthorizationMode::Webhook);
        assert_eq!(
            (
                c.auth.token_cache_ttl,
                c.auth.authorized_ttl,
                c.auth.unauthorized_ttl
            ),
            (secs(10), secs(60), Duration::ZERO)
        );
        let e = load(["kubelet", "--authorization-mode", "RBAC"]).unwrap_err();
        assert!(
            e.to_string().contains("unknown authorization mode RBAC"),
            "{e}"
        );
        // A file: the v1beta1 defaults (webhooks on); its zero TTLs mean the defaults.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, "kind: KubeletConfiguration\n").expect("write");
        let file = path.to_str().expect("utf8");
        let c = load_with(&["--config", file]);
        assert!(c.auth.token_webhook);
        assert_eq!(c.auth.mode, AuthorizationMode::Webhook);
        std::fs::write(
            &path,
            "authentication:\n  webhook:\n    enabled: false\n    cacheTTL: 0s\n\
             authorization:\n  mode: AlwaysAllow\n  webhook:\n    cacheAuthorizedTTL: 1m\n\
             \x20   cacheUnauthorizedTTL: 0s\n",
        )
        .expect("write");
        let c = load_with(&["--config", file]);
        assert!(!c.auth.token_webhook);
        assert_eq!(c.auth.mode, AuthorizationMode::AlwaysAllow);
        assert_eq!(
            (
                c.auth.token_cache_ttl,
                c.auth.authorized_ttl,
                c.auth.unauthorized_ttl
            ),
            (secs(120), secs(60), secs(30))
        );
        // Explicit flags win over the file.
        let c = load_with(&[
            "--config",
            file,
            "--authentication-token-webhook=true",
            "--authorization-mode",
            "Webhook",
            "--authorization-webhook-cache-authorized-ttl",
            "2m",
        ]);
        assert!(c.auth.token_webhook);
        assert_eq!(c.auth.mode, AuthorizationMode::Webhook);
        assert_eq!(c.auth.authorized_ttl, secs(120));
    }

    #[test]
    fn eviction_tls_and_cgroup_settings_from_flags_and_config() {
        use crate::eviction::{Signal, Value};
        // Defaults: upstream's hard thresholds, the secure port with a cert dir under root.
        let c = load_with(&["--root-dir", "/srv/k"]);
        assert_eq!(c.eviction.thresholds.len(), 5);
        assert_eq!(c.port, 10250);
        assert_eq!(c.tls.cert_dir, PathBuf::from("/srv/k/pki"));
        assert!(!c.tls.anonymous_auth);
        assert!(c.cgroups.per_qos);
        assert_eq!(c.cgroups.driver, "cgroupfs");
        // The config file's maps and fields.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            "evictionHard:\n  memory.available: 1Gi\nevictionSoft:\n  nodefs.available: 20%\n\
             evictionSoftGracePeriod:\n  nodefs.available: 1m\n\
             evictionPressureTransitionPeriod: 30s\ncgroupDriver: systemd\n\
             tlsCertFile: /etc/k/tls.crt\ntlsPrivateKeyFile: /etc/k/tls.key\n\
             authentication:\n  x509:\n    clientCAFile: /etc/k/ca.crt\n  anonymous:\n    enabled: true\n",
        )
        .expect("write");
        let file = path.to_str().expect("utf8");
        let c = load_with(&["--config", file]);
        let hard: Vec<_> = c
            .eviction
            .thresholds
            .iter()
            .filter(|t| t.is_hard())
            .collect();
        assert_eq!(hard.len(), 1, "the file's map replaces the defaults");
        assert_eq!(hard[0].value, Value::Quantity(1 << 30));
        let soft = c
            .eviction
            .thresholds
            .iter()
            .find(|t| !t.is_hard())
            .expect("soft");
        assert_eq!(soft.signal, Signal::NodeFsAvailable);
        assert_eq!(soft.grace_period, Duration::from_secs(60));
        assert_eq!(
            c.eviction.pressure_transition_period,
            Duration::from_secs(30)
        );
        assert_eq!(c.cgroups.driver, "systemd");
        assert_eq!(c.tls.tls_cert_file, Some(PathBuf::from("/etc/k/tls.crt")));
        assert_eq!(c.tls.client_ca_file, Some(PathBuf::from("/etc/k/ca.crt")));
        assert!(c.tls.anonymous_auth);
        // Explicit flags win over the file; a flag given twice takes the last value.
        let c = load_with(&[
            "--config",
            file,
            "--eviction-hard",
            "nodefs.available<5%",
            "--anonymous-auth=false",
            "--port",
            "1",
            "--port",
            "0",
        ]);
        let hard: Vec<_> = c
            .eviction
            .thresholds
            .iter()
            .filter(|t| t.is_hard())
            .collect();
        assert_eq!(hard.len(), 1);
        assert_eq!(hard[0].signal, Signal::NodeFsAvailable);
        assert!(!c.tls.anonymous_auth);
        assert_eq!(c.port, 0);
        // Bad values name the flag.
        let e = load(["kubelet", "--eviction-hard", "memory.available=1Gi"]).unwrap_err();
        assert!(e.to_string().contains("eviction-hard"), "{e}");
        let e = load(["kubelet", "--cgroup-driver", "lxc"]).unwrap_err();
        assert!(e.to_string().contains("cgroup-driver"), "{e}");
    }

    #[test]
    fn kubeconfig_turns_on_api_server_mode() {
        assert!(load_with(&[]).api.is_none());
        let c = load_with(&[
            "--kubeconfig",
            "/tmp/kc",
            "--node-labels",
            "a=1,b=2",
            "--node-status-update-frequency",
            "2s",
        ]);
        let api = c.api.expect("api mode");
        assert_eq!(api.node_labels.get("b").map(String::as_str), Some("2"));
        assert_eq!(api.node_status_update_frequency, Duration::from_secs(2));
        assert_eq!(api.node_status_report_frequency, Duration::from_secs(300));
        assert_eq!(
            (api.node_lease_duration_seconds, api.kubelet_port),
            (40, 10250)
        );
        assert!(api.register_node);
    }

    #[test]
    fn kubeadm_config_resolves_to_upstream_defaults_and_flags_win() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            include_str!("../../../integration/tests/fixtures/kubeadm/config-1.26.yaml"),
        )
        .expect("write");
        let p = path.to_str().expect("utf8");
        let c = load_with(&["--config", p]);
        // kubeadm's 0s are upstream's defaults.
        assert_eq!(c.sync_frequency, Duration::from_secs(60));
        assert_eq!(c.file_check_frequency, Duration::from_secs(20));
        assert_eq!(c.runtime_request_timeout, Duration::from_secs(120));
        assert_eq!(c.image_minimum_gc_age, Duration::from_secs(120));
        assert_eq!(
            c.streaming_connection_idle_timeout,
            Duration::from_secs(4 * 3600)
        );
        assert_eq!(
            c.eviction.pressure_transition_period,
            Duration::from_secs(300)
        );
        // Fields the file leaves out take the v1beta1 defaults.
        assert_eq!(c.read_only_port, 0);
        assert_eq!(c.address, "0.0.0.0");
        assert_eq!(c.port, 10250);
        assert_eq!(
            (c.healthz_bind_address.as_str(), c.healthz_port),
            ("127.0.0.1", 10248)
        );
        assert_eq!(
            c.dns.cluster_dns,
            vec!["10.96.0.10".parse::<std::net::IpAddr>().expect("ip")]
        );
        assert_eq!(c.dns.cluster_domain, "cluster.local");
        assert_eq!(c.dns.resolver_config, "/run/systemd/resolve/resolv.conf");
        assert_eq!(c.cgroups.driver, "systemd");
        assert_eq!(
            c.static_pod_path,
            Some(PathBuf::from("/etc/kubernetes/manifests"))
        );
        assert_eq!(c.logging_format, "text");
        assert_eq!(c.verbosity, 0);
        assert_eq!(c.ignored_fields.len(), 1);
        // kubeadm's webhooks, with its 0s TTLs meaning upstream's defaults.
        assert!(c.auth.token_webhook);
        assert_eq!(c.auth.mode, crate::server::auth::AuthorizationMode::Webhook);
        assert_eq!(
            (
                c.auth.token_cache_ttl,
                c.auth.authorized_ttl,
                c.auth.unauthorized_ttl
            ),
            (
                Duration::from_secs(120),
                Duration::from_secs(300),
                Duration::from_secs(30)
            )
        );
        // kubeadm's file turns client certificate rotation on.
        assert!(c.tls.rotate_certificates);
        assert!(!c.tls.server_tls_bootstrap);
        // Flags win over the file.
        let c = load_with(&[
            "--config",
            p,
            "--healthz-port",
            "0",
            "--cluster-dns",
            "10.0.0.10,fd00::a",
            "--cluster-domain",
            "example.org",
            "--resolv-conf=",
            "--read-only-port",
            "10255",
            "-v",
            "3",
            "--logging-format",
            "json",
            "--rotate-certificates=false",
            "--rotate-server-certificates",
        ]);
        assert_eq!(c.healthz_port, 0);
        assert!(!c.tls.rotate_certificates);
        assert!(c.tls.server_tls_bootstrap);
        assert_eq!(c.dns.cluster_dns.len(), 2);
        assert_eq!(c.dns.cluster_domain, "example.org");
        assert_eq!(c.dns.resolver_config, "");
        assert_eq!(c.read_only_port, 10255);
        assert_eq!(c.verbosity, 3);
        assert_eq!(c.logging_format, "json");
        // Without a file: the flag defaults (no cluster DNS, /etc/resolv.conf).
        let c = load_with(&[]);
        assert!(c.dns.cluster_dns.is_empty());
        assert_eq!(c.dns.resolver_config, "/etc/resolv.conf");
        assert_eq!(c.read_only_port, 10255);
        assert!(c.ignored_fields.is_empty());
        assert!(!c.tls.rotate_certificates && !c.tls.server_tls_bootstrap);
        assert_eq!(c.tls.cert_dir, PathBuf::from("/var/lib/kubelet/pki"));
        // kubeadm's flags are accepted.
        let c = load_with(&[
            "--container-runtime=remote",
            "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
            "--pod-infra-container-image=registry.k8s.io/pause:3.9",
            "--node-ip=10.1.2.3",
            "--node-labels=a=b",
            "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
        ]);
        assert_eq!(c.node_ip.as_deref(), Some("10.1.2.3"));
        let api = c.api.expect("api");
        assert_eq!(api.node_labels.get("a").map(String::as_str), Some("b"));
        assert!(load(["kubelet", "--cluster-dns", "nope"]).is_err());
        // --node-ip as upstream 1.26 parses it: a dual-stack pair gives its first address, an
        // unparsable entry is ignored, two of one family or three addresses are refused.
        let ip = |v: &str| load(["kubelet", &format!("--node-ip={v}")]).map(|(_, c)| c.node_ip);
        assert_eq!(
            ip("10.0.0.7,fd00::7").ok().flatten().as_deref(),
            Some("10.0.0.7")
        );
        assert_eq!(ip("nope").ok().flatten(), None);
        assert_eq!(
            ip("nope,10.0.0.8").ok().flatten().as_deref(),
            Some("10.0.0.8")
        );
        for bad in ["10.0.0.1,10.0.0.2", "10.0.0.1,fd00::1,10.0.0.2"] {
            let e = ip(bad).expect_err(bad).to_string();
            assert!(
                e.starts_with("invalid value for --node-ip:") && e.contains("dual-stack pair"),
                "{e}"
            );
        }
        let c = load_with(&[
            "--kubeconfig=/kc",
            "--register-with-taints=dedicated=infra:NoSchedule,gpu:NoExecute",
        ]);
        let t = c.api.expect("api").register_with_taints;
        assert_eq!(t.len(), 2);
        assert_eq!(
            (
                t[0].key.as_str(),
                t[0].value.as_deref(),
                t[0].effect.as_str()
            ),
            ("dedicated", Some("infra"), "NoSchedule")
        );
        assert_eq!((t[1].key.as_str(), t[1].value.as_deref()), ("gpu", None));
        for bad in ["a=b:Sometimes", "novalue", "=v:NoSchedule"] {
            let arg = format!("--register-with-taints={bad}");
            assert!(
                load(["kubelet", "--kubeconfig=/kc", &arg]).is_err(),
                "{bad}"
            );
        }
        std::fs::write(
            &path,
            "registerWithTaints:\n- key: k\n  value: v\n  effect: NoExecute\n",
        )
        .expect("write");
        let t = load_with(&["--config", p, "--kubeconfig=/kc"])
            .api
            .expect("api")
            .register_with_taints;
        assert_eq!(
            (t[0].key.as_str(), t[0].effect.as_str()),
            ("k", "NoExecute")
        );
        assert!(load(["kubelet", "--healthz-port", "70000"]).is_err());
        assert!(load(["kubelet", "--container-runtime", "rkt"]).is_err());
        // A file with the secure server off, and an update frequency only.
        std::fs::write(
            &path,
            "enableServer: false\nnodeStatusUpdateFrequency: 4s\nlogging:\n  verbosity: 5\n",
        )
        .expect("write");
        let c = load_with(&["--config", p, "--kubeconfig", "/kc"]);
        assert_eq!(c.port, 0);
        assert_eq!(c.verbosity, 5);
        let api = c.api.expect("api");
        assert_eq!(api.node_status_report_frequency, Duration::from_secs(4));
    }
}
