//! Flags plus config file into one [`KubeletConfig`] (upstream `NewKubeletCommand`'s merge of
//! the `--config` file and the flags given on the command line, with `applyLegacyDefaults`):
//! defaults, then the file, then every flag given explicitly (clap's
//! `ArgMatches::value_source`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::ArgMatches;
use clap::parser::ValueSource;
use k8s_openapi::api::core::v1::Taint;

use super::options::KubeletFlags;
use super::parsers::{
    parse_feature_gates, parse_header_pairs, parse_node_labels, parse_taints, taint,
};
use crate::kubeletconfig::{ConfigError, KubeletConfig, KubeletConfiguration, system_hostname};

fn file_taints(t: &[crate::kubeletconfig::Taint]) -> Result<Vec<Taint>, ConfigError> {
    t.iter()
        .map(|t| {
            taint(
                t.key.as_deref().unwrap_or_default(),
                t.value.as_deref(),
                t.effect.as_deref().unwrap_or_default(),
            )
            .map_err(|reason| ConfigError::Flag {
                flag: "register-with-taints",
                reason: format!("registerWithTaints: {reason}"),
            })
        })
        .collect()
}

fn explicit(m: &ArgMatches, id: &str) -> bool {
    matches!(m.value_source(id), Some(ValueSource::CommandLine))
}

/// Merge `flags` (with their `matches`, to know what was explicit) and the config `file`.
pub fn resolve(
    flags: &KubeletFlags,
    matches: &ArgMatches,
    file: Option<KubeletConfiguration>,
) -> Result<KubeletConfig, ConfigError> {
    let with_file = file.is_some();
    let mut f = file.unwrap_or_default();
    let ignored: Vec<String> = f.ignored_fields().into_iter().map(String::from).collect();
    f.normalize();
    let mut gates = f.feature_gates.clone().unwrap_or_default();
    gates.extend(parse_feature_gates(&flags.feature_gates)?);
    // With a file, a field it leaves out takes upstream's v1beta1 default, which differs from
    // the flag's (legacy) default for these two (upstream `applyLegacyDefaults`).
    if with_file {
        f.read_only_port.get_or_insert(0);
        f.address.get_or_insert_with(|| "0.0.0.0".to_string());
    }
    if f.enable_server == Some(false) {
        f.port = Some(0);
    }
    // Upstream: nodeStatusReportFrequency defaults to nodeStatusUpdateFrequency when only
    // the latter is set.
    if f.node_status_report_frequency.is_none() {
        f.node_status_report_frequency = f.node_status_update_frequency;
    }
    let eviction = eviction_config(flags, matches, &f)?;
    let auth = auth_config(flags, matches, &f, with_file)?;
    let reservation = |flag: &'static str, value: &str, file: &Option<BTreeMap<String, String>>| {
        let map = if explicit(matches, &flag.replace('-', "_")) {
            crate::cliflag::map_string_string(value, '=')
                .map(|v| v.into_iter().collect::<BTreeMap<_, _>>())
                .map_err(|pair| ConfigError::Flag {
                    flag,
                    reason: format!("malformed pair {pair:?}, expect resource=quantity"),
                })?
        } else {
            file.clone().unwrap_or_default()
        };
        crate::resource::parse_reservation(&map)
            .map_err(|reason| ConfigError::Flag { flag, reason })
    };
    let kube_reserved = reservation("kube-reserved", &flags.kube_reserved, &f.kube_reserved)?;
    let system_reserved = reservation(
        "system-reserved",
        &flags.system_reserved,
        &f.system_reserved,
    )?;
    let pick = |id: &str, flag: Option<String>, file: Option<String>| {
        if explicit(matches, id) {
            flag
        } else {
            file.or(flag)
        }
    };
    macro_rules! val {
        ($id:literal, $flag:expr, $file:expr) => {
            if explicit(matches, $id) {
                $flag
            } else {
                $file.unwrap_or($flag)
            }
        };
    }
    let header = if explicit(matches, "manifest_url_header") {
        parse_header_pairs(&flags.manifest_url_header)?
    } else {
        match f.static_pod_url_header {
            Some(h) => h,
            None => parse_header_pairs(&flags.manifest_url_header)?,
        }
    };
    let high = val!(
        "image_gc_high_threshold",
        flags.image_gc_high_threshold,
        f.image_gc_high_threshold_percent
    );
    let low = val!(
        "image_gc_low_threshold",
        flags.image_gc_low_threshold,
        f.image_gc_low_threshold_percent
    );
    for (flag, v) in [
        ("image-gc-high-threshold", high),
        ("image-gc-low-threshold", low),
    ] {
        if !(0..=100).contains(&v) {
            return Err(ConfigError::Flag {
                flag,
                reason: format!("{v} must be between 0 and 100, inclusive"),
            });
        }
    }
    if low >= high {
        return Err(ConfigError::Flag {
            flag: "image-gc-low-threshold",
            reason: format!(
                "imageGCLowThresholdPercent ({low}) must be less than imageGCHighThresholdPercent ({high})"
            ),
        });
    }
    let node_name = flags
        .hostname_override
        .as_deref()
        .map(|h| h.trim().to_lowercase())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(system_hostname);
    Ok(KubeletConfig {
        node_ip: crate::nodestatus::parse_node_ip_flag(flags.node_ip.as_deref()).map_err(|e| {
            ConfigError::Flag {
                flag: "node-ip",
                reason: e.to_string(),
            }
        })?,
        node_name,
        container_runtime_endpoint: pick(
            "container_runtime_endpoint",
            flags.container_runtime_endpoint.clone(),
            f.container_runtime_endpoint,
        ),
        image_service_endpoint: pick(
            "image_service_endpoint",
            flags.image_service_endpoint.clone(),
            f.image_service_endpoint,
        ),
        docker_endpoint: flags.docker_endpoint.clone(),
        pod_infra_container_image: flags.pod_infra_container_image.clone(),
        static_pod_path: if explicit(matches, "pod_manifest_path") {
            flags.pod_manifest_path.clone()
        } else {
            f.static_pod_path
                .or_else(|| flags.pod_manifest_path.clone())
        },
        static_pod_url: pick("manifest_url", flags.manifest_url.clone(), f.static_pod_url),
        static_pod_url_header: header,
        file_check_frequency: val!(
            "file_check_frequency",
            flags.file_check_frequency,
            f.file_check_frequency
        ),
        http_check_frequency: val!(
            "http_check_frequency",
            flags.http_check_frequency,
            f.http_check_frequency
        ),
        sync_frequency: val!("sync_frequency", flags.sync_frequency, f.sync_frequency),
        root_dir: flags.root_dir.clone(),
        max_pods: {
            let n = val!("max_pods", flags.max_pods, f.max_pods);
            if n < 0 {
                return Err(ConfigError::Invalid(format!(
                    "maxPods (--max-pods) {n} must not be a negative number"
                )));
            }
            n
        },
        address: val!("address", flags.address.clone(), f.address),
        read_only_port: port_in_range(
            "readOnlyPort (--read-only-port)",
            val!("read_only_port", flags.read_only_port, f.read_only_port),
        )?,
        runtime_request_timeout: val!(
            "runtime_request_timeout",
            flags.runtime_request_timeout,
            f.runtime_request_timeout
        ),
        node_reservation: [kube_reserved, system_reserved].into_iter().flatten().fold(
            BTreeMap::new(),
            |mut acc, (k, v)| {
                let e: &mut i64 = acc.entry(k).or_default();
                *e = e.saturating_add(v);
                acc
            },
        ),
        node_labels: parse_node_labels(&flags.node_labels)?,
        sysctls: {
            let list = val!(
                "allowed_unsafe_sysctls",
                flags.allowed_unsafe_sysctls.clone(),
                f.allowed_unsafe_sysctls.clone()
            );
            crate::sysctl::Allowlist::with_unsafe(&list).map_err(|e| ConfigError::Flag {
                flag: "allowed-unsafe-sysctls",
                reason: e.to_string(),
            })?
        },
        evented_pleg: flags.evented_pleg || gates.get("EventedPLEG").copied().unwrap_or(false),
        sidecar_containers: crate::kubeletconfig::features::sidecar_containers(&gates),
        // Upstream: beta and on by default since 1.21; the periods come from the file only.
        shutdown: {
            let grace = crate::nodeshutdown::ShutdownConfig {
                grace_period: f.shutdown_grace_period.unwrap_or_default(),
                grace_period_critical_pods: f
                    .shutdown_grace_period_critical_pods
                    .unwrap_or_default(),
            };
            if gates.get("GracefulNodeShutdown").copied().unwrap_or(true) {
                grace
            } else if grace != crate::nodeshutdown::ShutdownConfig::default() {
                return Err(ConfigError::Invalid(
                    "specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown".into(),
                ));
            } else {
                grace
            }
        },
        // An empty --kubeconfig is no kubeconfig (upstream: standalone).
        api: match flags
            .kubeconfig
            .as_ref()
            .filter(|p| !p.as_os_str().is_empty())
        {
            None => None,
            Some(path) => Some(crate::apimode::ApiModeConfig {
                kubeconfig: path.clone(),
                register_node: val!("register_node", flags.register_node, f.register_node),
                node_labels: parse_node_labels(&flags.node_labels)?,
                node_status_update_frequency: val!(
                    "node_status_update_frequency",
                    flags.node_status_update_frequency,
                    f.node_status_update_frequency
                ),
                node_status_report_frequency: val!(
                    "node_status_report_frequency",
                    flags.node_status_report_frequency,
                    f.node_status_report_frequency
                ),
                node_lease_duration_seconds: {
                    let n = val!(
                        "node_lease_duration_seconds",
                        flags.node_lease_duration_seconds,
                        f.node_lease_duration_seconds
                    );
                    if n <= 0 {
                        return Err(ConfigError::Invalid(format!(
                            "nodeLeaseDurationSeconds (--node-lease-duration-seconds) {n} must be greater than 0"
                        )));
                    }
                    n
                },
                kubelet_port: val!("port", flags.port, f.port),
                max_pods: u32::try_from(val!("max_pods", flags.max_pods, f.max_pods)).unwrap_or(0),
                node_status_max_images: {
                    let n = val!(
                        "node_status_max_images",
                        flags.node_status_max_images,
                        f.node_status_max_images
                    );
                    if n < -1 {
                        return Err(ConfigError::Flag {
                            flag: "node-status-max-images",
                            reason: format!("{n} must be -1 or greater"),
                        });
                    }
                    n
                },
                register_with_taints: if explicit(matches, "register_with_taints") {
                    parse_taints(&flags.register_with_taints)?
                } else {
                    match &f.register_with_taints {
                        Some(t) => file_taints(t)?,
                        None => parse_taints(&flags.register_with_taints)?,
                    }
                },
            }),
        },
        verbosity: val!(
            "v",
            flags.v,
            f.logging
                .as_ref()
                .and_then(|l| l.verbosity)
                .and_then(|v| i32::try_from(v).ok())
        ),
        container_log_max_size: {
            let q = val!(
                "container_log_max_size",
                flags.container_log_max_size.clone(),
                f.container_log_max_size
            );
            crate::resource::parse_quantity_scaled(&q, 1.0)
                .and_then(|v| u64::try_from(v).ok())
                .ok_or_else(|| ConfigError::Flag {
                    flag: "container-log-max-size",
                    reason: format!("invalid quantity {q:?}"),
                })?
        },
        container_log_max_files: {
            let n = val!(
                "container_log_max_files",
                flags.container_log_max_files,
                f.container_log_max_files
            );
            usize::try_from(n)
                .ok()
                .filter(|n| *n > 1)
                .ok_or_else(|| ConfigError::Flag {
                    flag: "container-log-max-files",
                    reason: format!("containerLogMaxFiles ({n}) must be > 1"),
                })?
        },
        container_log_monitor_interval: val!(
            "container_log_monitor_interval",
            flags.container_log_monitor_interval,
            f.container_log_monitor_interval
        ),
        minimum_container_ttl_duration: flags.minimum_container_ttl_duration,
        max_per_pod_container: flags.maximum_dead_containers_per_container,
        max_containers: flags.maximum_dead_containers,
        container_gc_period: flags.container_gc_period,
        image_gc_high_threshold_percent: high,
        image_gc_low_threshold_percent: low,
        image_minimum_gc_age: val!(
            "minimum_image_ttl_duration",
            flags.minimum_image_ttl_duration,
            f.image_minimum_gc_age
        ),
        image_gc_period: flags.image_gc_period,
        image_gc_ref_prefix: flags.image_gc_ref_prefix.clone(),
        eviction,
        port: port_in_range("port (--port)", val!("port", flags.port, f.port))?,
        tls: crate::server::secure::TlsConfig {
            tls_cert_file: pick_path(
                explicit(matches, "tls_cert_file"),
                &flags.tls_cert_file,
                &f.tls_cert_file,
            ),
            tls_private_key_file: pick_path(
                explicit(matches, "tls_private_key_file"),
                &flags.tls_private_key_file,
                &f.tls_private_key_file,
            ),
            rotate_certificates: val!(
                "rotate_certificates",
                flags.rotate_certificates,
                f.rotate_certificates
            ),
            server_tls_bootstrap: val!(
                "rotate_server_certificates",
                flags.rotate_server_certificates,
                f.server_tls_bootstrap
            ),
            cert_dir: flags
                .cert_dir
                .clone()
                .unwrap_or_else(|| flags.root_dir.join("pki")),
            client_ca_file: pick_path(
                explicit(matches, "client_ca_file"),
                &flags.client_ca_file,
                &f.authentication
                    .as_ref()
                    .and_then(|a| a.x509.as_ref())
                    .and_then(|x| x.client_ca_file.clone()),
            ),
            anonymous_auth: if explicit(matches, "anonymous_auth") {
                flags.anonymous_auth
            } else {
                f.authentication
                    .as_ref()
                    .and_then(|a| a.anonymous.as_ref())
                    .and_then(|a| a.enabled)
                    .unwrap_or(flags.anonymous_auth)
            },
        },
        auth,
        cgroups: {
            let driver = val!(
                "cgroup_driver",
                flags.cgroup_driver.clone(),
                f.cgroup_driver.clone()
            );
            if driver != "cgroupfs" && driver != "systemd" {
                return Err(ConfigError::Flag {
                    flag: "cgroup-driver",
                    reason: format!("{driver:?} is neither cgroupfs nor systemd"),
                });
            }
            crate::cm::CgroupConfig {
                per_qos: val!("cgroups_per_qos", flags.cgroups_per_qos, f.cgroups_per_qos),
                driver,
                root: val!(
                    "cgroup_root",
                    flags.cgroup_root.clone(),
                    f.cgroup_root.clone()
                ),
            }
        },
        dns: crate::dns::DnsConfigurer {
            cluster_dns: {
                let list = if explicit(matches, "cluster_dns") {
                    flags.cluster_dns.clone()
                } else {
                    f.cluster_dns
                        .clone()
                        .unwrap_or_else(|| flags.cluster_dns.clone())
                };
                list.iter()
                    .filter(|s| !s.trim().is_empty())
                    .map(|s| {
                        s.trim().parse().map_err(|_| ConfigError::Flag {
                            flag: "cluster-dns",
                            reason: format!("{s:?} is not an IP address"),
                        })
                    })
                    .collect::<Result<_, _>>()?
            },
            cluster_domain: val!(
                "cluster_domain",
                flags.cluster_domain.clone(),
                f.cluster_domain.clone()
            ),
            resolver_config: val!(
                "resolv_conf",
                flags.resolv_conf.clone(),
                f.resolv_conf.clone()
            ),
            node_ips: Vec::new(),
        },
        healthz_bind_address: val!(
            "healthz_bind_address",
            flags.healthz_bind_address.clone(),
            f.healthz_bind_address.clone()
        ),
        healthz_port: {
            let p = val!("healthz_port", flags.healthz_port, f.healthz_port);
            if !(0..=65535).contains(&p) {
                return Err(ConfigError::Flag {
                    flag: "healthz-port",
                    reason: format!("{p} must be between 0 and 65535, inclusive"),
                });
            }
            p
        },
        logging_format: val!(
            "logging_format",
            flags.logging_format.clone(),
            f.logging.as_ref().and_then(|l| l.format.clone())
        ),
        streaming_connection_idle_timeout: val!(
            "streaming_connection_idle_timeout",
            flags.streaming_connection_idle_timeout,
            f.streaming_connection_idle_timeout
        ),
        oom_score_adj: {
            let v = val!("oom_score_adj", flags.oom_score_adj, f.oom_score_adj);
            if !(-1000..=1000).contains(&v) {
                return Err(ConfigError::Flag {
                    flag: "oom-score-adj",
                    reason: format!("{v} must be between -1000 and 1000, inclusive"),
                });
            }
            v
        },
        max_open_files: val!(
            "max_open_files",
            flags.max_open_files,
            f.max_open_files.and_then(|n| u64::try_from(n).ok())
        ),
        fail_swap_on: val!("fail_swap_on", flags.fail_swap_on, f.fail_swap_on),
        config_map_and_secret_change_detection_strategy: f
            .config_map_and_secret_change_detection_strategy
            .as_deref()
            .unwrap_or_default()
            .parse()
            .map_err(|reason| ConfigError::Flag {
                flag: "config",
                reason,
            })?,
        config_file: flags.config.clone(),
        ignored_fields: ignored,
        image_credential_file: flags.image_credential_file.clone().or_else(|| {
            let p = flags.root_dir.join("config.json");
            p.exists().then_some(p)
        }),
    })
}

/// Upstream's port check, with 0 allowed (it turns the server off: the read-only port as
/// upstream; the secure port is this kubelet's `--port 0`, where upstream wants 1 to 65535).
fn port_in_range(what: &str, p: i32) -> Result<i32, ConfigError> {
    if (0..=65535).contains(&p) {
        Ok(p)
    } else {
        Err(ConfigError::Invalid(format!(
            "{what} {p} must be between 0 and 65535, inclusive"
        )))
    }
}

fn pick_path(explicit: bool, flag: &Option<PathBuf>, file: &Option<PathBuf>) -> Option<PathBuf> {
    if explicit {
        flag.clone()
    } else {
        file.clone().or_else(|| flag.clone())
    }
}

/// The secure port's webhooks: an explicit flag wins; else the file's field, else, with a file,
/// upstream's v1beta1 defaults (token webhook on, `Webhook` mode), without one the flags'
/// (legacy) defaults (off, `AlwaysAllow`). A zero TTL in the file means the default (upstream
/// defaulting), a zero flag no caching.
fn auth_config(
    flags: &KubeletFlags,
    matches: &ArgMatches,
    f: &KubeletConfiguration,
    with_file: bool,
) -> Result<crate::server::auth::AuthConfig, ConfigError> {
    let file_authn = f.authentication.as_ref().and_then(|a| a.webhook.as_ref());
    let file_authz = f.authorization.as_ref();
    let nonzero = |d: Option<Duration>| d.filter(|d| !d.is_zero());
    let dur = |id: &str, flag: Duration, file: Option<Duration>| {
        if explicit(matches, id) {
            flag
        } else {
            nonzero(file).unwrap_or(flag)
        }
    };
    let token_webhook = if explicit(matches, "authentication_token_webhook") {
        flags.authentication_token_webhook
    } else {
        file_authn
            .and_then(|w| w.enabled)
            .unwrap_or(with_file || flags.authentication_token_webhook)
    };
    let mode = if explicit(matches, "authorization_mode") || !with_file {
        flags.authorization_mode.clone()
    } else {
        file_authz
            .and_then(|a| a.mode.clone())
            .unwrap_or_else(|| "Webhook".to_string())
    };
    let mode = mode.parse().map_err(|reason| ConfigError::Flag {
        flag: "authorization-mode",
        reason,
    })?;
    let authz_webhook = file_authz.and_then(|a| a.webhook.as_ref());
    Ok(crate::server::auth::AuthConfig {
        token_webhook,
        token_cache_ttl: dur(
            "authentication_token_webhook_cache_ttl",
            flags.authentication_token_webhook_cache_ttl,
            file_authn.and_then(|w| w.cache_ttl),
        ),
        mode,
        authorized_ttl: dur(
            "authorization_webhook_cache_authorized_ttl",
            flags.authorization_webhook_cache_authorized_ttl,
            authz_webhook.and_then(|w| w.cache_authorized_ttl),
        ),
        unauthorized_ttl: dur(
            "authorization_webhook_cache_unauthorized_ttl",
            flags.authorization_webhook_cache_unauthorized_ttl,
            authz_webhook.and_then(|w| w.cache_unauthorized_ttl),
        ),
    })
}

/// The eviction settings: a flag given on the command line replaces the config file's map.
fn eviction_config(
    flags: &KubeletFlags,
    matches: &ArgMatches,
    f: &KubeletConfiguration,
) -> Result<crate::eviction::EvictionConfig, ConfigError> {
    use crate::eviction::{parse_pairs_flag, parse_threshold_flag, parse_thresholds};
    let bad = |flag: &'static str| move |reason: String| ConfigError::Flag { flag, reason };
    let pick = |id: &str,
                flag: &'static str,
                value: &str,
                file: &Option<BTreeMap<String, String>>,
                parse: fn(&str) -> Result<BTreeMap<String, String>, String>|
     -> Result<BTreeMap<String, String>, ConfigError> {
        match file {
            Some(m) if !explicit(matches, id) => Ok(m.clone()),
            _ => parse(value).map_err(bad(flag)),
        }
    };
    let hard = pick(
        "eviction_hard",
        "eviction-hard",
        &flags.eviction_hard,
        &f.eviction_hard,
        parse_threshold_flag,
    )?;
    let soft = pick(
        "eviction_soft",
        "eviction-soft",
        &flags.eviction_soft,
        &f.eviction_soft,
        parse_threshold_flag,
    )?;
    let grace = pick(
        "eviction_soft_grace_period",
        "eviction-soft-grace-period",
        &flags.eviction_soft_grace_period,
        &f.eviction_soft_grace_period,
        parse_pairs_flag,
    )?;
    let reclaim = pick(
        "eviction_minimum_reclaim",
        "eviction-minimum-reclaim",
        &flags.eviction_minimum_reclaim,
        &f.eviction_minimum_reclaim,
        parse_pairs_flag,
    )?;
    Ok(crate::eviction::EvictionConfig {
        thresholds: parse_thresholds(&hard, &soft, &grace, &reclaim)
            .map_err(bad("eviction-hard"))?,
        pressure_transition_period: if explicit(matches, "eviction_pressure_transition_period") {
            flags.eviction_pressure_transition_period
        } else {
            f.eviction_pressure_transition_period
                .unwrap_or(flags.eviction_pressure_transition_period)
        },
        max_pod_grace_period: if explicit(matches, "eviction_max_pod_grace_period") {
            flags.eviction_max_pod_grace_period
        } else {
            f.eviction_max_pod_grace_period
                .unwrap_or(flags.eviction_max_pod_grace_period)
        },
    })
}
