//! The command line end to end: every cri-dockerd flag accepted with its defaults, our own
//! flags and aliases, and each bad value refused with the flag, the value and the reason.

use std::time::Duration;

use clap::Parser;
use tracing::level_filters::LevelFilter;

use super::*;

fn flags(args: &[&str]) -> Flags {
    Flags::try_parse_from(std::iter::once("dockershim").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn config(args: &[&str]) -> ShimConfig {
    flags(args)
        .into_config()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn error(args: &[&str]) -> FlagError {
    match flags(args).into_config() {
        Ok(c) => panic!("{args:?} should be refused, got {c:?}"),
        Err(e) => e,
    }
}

#[test]
fn defaults_are_cri_dockerds() {
    let f = flags(&[]);
    assert_eq!(
        f.container_runtime_endpoint,
        "unix:///var/run/cri-dockerd.sock"
    );
    assert_eq!(f.root_directory, "/var/lib/cri-dockerd");
    assert_eq!(f.docker_endpoint, "unix:///var/run/docker.sock");
    assert_eq!(f.pod_infra_container_image, "registry.k8s.io/pause:3.6");
    assert_eq!(f.network_plugin, "cni");
    assert_eq!(f.network_plugin_mtu, "0");
    assert_eq!(f.cni.cni_bin_dir, "/opt/cni/bin");
    assert_eq!(f.cni.cni_conf_dir, "/etc/cni/net.d");
    assert_eq!(f.cni.cni_cache_dir, "/var/lib/cni/cache");
    assert_eq!(f.hairpin_mode, "none");
    assert!(!f.ipv6_dual_stack);
    assert_eq!(f.pod_cidr, "");
    assert_eq!(f.image_pull_progress_deadline, "1m0s");
    assert_eq!(f.runtime_request_timeout, "0s");
    assert_eq!(f.runtime_cgroups, "");
    assert_eq!(f.log_level, "info");
    assert!(!f.version && !f.buildinfo);
    // The one deliberate difference (see DEFAULT_STREAMING_BIND_ADDR).
    assert_eq!(f.streaming_bind_addr, "127.0.0.1");

    let cfg = f.into_config().unwrap();
    assert_eq!(cfg.endpoint, "unix:///var/run/cri-dockerd.sock");
    assert_eq!(cfg.root_directory, PathBuf::from("/var/lib/cri-dockerd"));
    assert_eq!(cfg.docker_endpoint, "unix:///var/run/docker.sock");
    assert_eq!(cfg.pod_infra_image, "registry.k8s.io/pause:3.6");
    let cni = cfg.cni.expect("cni is cri-dockerd's default plugin");
    assert_eq!(cni.bin_dirs, vec![PathBuf::from("/opt/cni/bin")]);
    assert_eq!(cni.conf_dir, PathBuf::from("/etc/cni/net.d"));
    assert_eq!(cni.cache_dir, PathBuf::from("/var/lib/cni/cache"));
    assert_eq!(cfg.network_plugin_mtu, 0);
    assert_eq!(cfg.hairpin_mode, HairpinMode::None);
    assert_eq!(cfg.image_pull_progress_deadline, Duration::from_secs(60));
    assert_eq!(cfg.runtime_request_timeout, DEFAULT_RUNTIME_REQUEST_TIMEOUT);
    assert_eq!(cfg.streaming_bind_addr, "127.0.0.1:0");
    assert_eq!(cfg.streaming_idle_timeout, Duration::from_secs(4 * 3600));
    assert_eq!(cfg.streaming_max_sessions, 128);
    assert_eq!(cfg.sandbox_oom_score_adj, None);
    assert_eq!(flags(&[]).log_level(), Ok(LevelFilter::INFO));
}

#[test]
fn embedded_defaults_keep_dockers_bridge() {
    let cfg = ShimConfig::with_endpoint("unix:///tmp/x.sock");
    assert_eq!(cfg.endpoint, "unix:///tmp/x.sock");
    assert!(cfg.cni.is_none());
    assert_eq!(cfg.streaming_bind_addr, "127.0.0.1:0");
}

#[test]
fn every_cri_dockerd_flag_is_accepted() {
    let cfg = config(&[
        "--container-runtime-endpoint",
        "unix:///run/cri-dockerd.sock",
        "--cri-dockerd-root-directory",
        "/var/lib/x",
        "--docker-endpoint",
        "tcp://127.0.0.1:2375",
        "--pod-infra-container-image",
        "registry.k8s.io/pause:3.9",
        "--network-plugin",
        "cni",
        "--network-plugin-mtu",
        "1450",
        "--cni-bin-dir",
        "/usr/lib/cni,/opt/cni/bin",
        "--cni-conf-dir",
        "/etc/x",
        "--cni-cache-dir",
        "/var/cache/x",
        "--hairpin-mode",
        "hairpin-veth",
        "--ipv6-dual-stack",
        "--pod-cidr",
        "10.244.0.0/24,fd00:10:244::/64",
        "--image-pull-progress-deadline",
        "2m30s",
        "--runtime-request-timeout",
        "30s",
        "--runtime-cgroups",
        "/system.slice/cri-docker.service",
        "--streaming-bind-addr",
        "127.0.0.1:10010",
        "--log-level",
        "debug",
    ]);
    assert_eq!(cfg.endpoint, "unix:///run/cri-dockerd.sock");
    assert_eq!(cfg.root_directory, PathBuf::from("/var/lib/x"));
    assert_eq!(cfg.docker_endpoint, "tcp://127.0.0.1:2375");
    assert_eq!(cfg.pod_infra_image, "registry.k8s.io/pause:3.9");
    let cni = cfg.cni.expect("cni");
    assert_eq!(
        cni.bin_dirs,
        vec![PathBuf::from("/usr/lib/cni"), PathBuf::from("/opt/cni/bin")]
    );
    assert_eq!(cni.conf_dir, PathBuf::from("/etc/x"));
    assert_eq!(cni.cache_dir, PathBuf::from("/var/cache/x"));
    assert_eq!(cfg.network_plugin_mtu, 1450);
    assert_eq!(cfg.hairpin_mode, HairpinMode::HairpinVeth);
    assert!(cfg.ipv6_dual_stack);
    assert_eq!(cfg.pod_cidr, "10.244.0.0/24,fd00:10:244::/64");
    assert_eq!(cfg.image_pull_progress_deadline, Duration::from_secs(150));
    assert_eq!(cfg.runtime_request_timeout, Duration::from_secs(30));
    assert_eq!(cfg.runtime_cgroups, "/system.slice/cri-docker.service");
    assert_eq!(cfg.streaming_bind_addr, "127.0.0.1:10010");
    let f = flags(&["--log-level", "debug"]);
    assert_eq!(f.log_level(), Ok(LevelFilter::DEBUG));
    // pflag's `--flag=value` form, and booleans with a value after `=`.
    let f = flags(&[
        "--ipv6-dual-stack=false",
        "--version=false",
        "--buildinfo=0",
        "--network-plugin=",
    ]);
    assert!(!f.ipv6_dual_stack && !f.version && !f.buildinfo);
    assert!(f.into_config().unwrap().cni.is_none());
    assert!(flags(&["--version"]).version);
    assert!(flags(&["--buildinfo"]).buildinfo);
    assert!(flags(&["--ipv6-dual-stack=T"]).ipv6_dual_stack);
}

#[test]
fn our_own_flags_and_aliases() {
    let cfg = config(&[
        "--root-directory",
        "/var/lib/dockershim",
        "--streaming-connection-idle-timeout",
        "5m",
        "--streaming-max-sessions",
        "4",
        "--sandbox-oom-score-adj",
        "-998",
        "-v",
        "5",
    ]);
    assert_eq!(cfg.root_directory, PathBuf::from("/var/lib/dockershim"));
    assert_eq!(cfg.streaming_idle_timeout, Duration::from_secs(300));
    assert_eq!(cfg.streaming_max_sessions, 4);
    assert_eq!(cfg.sandbox_oom_score_adj, Some(-998));
    assert_eq!(flags(&["-v", "2"]).log_level(), Ok(LevelFilter::DEBUG));
    assert_eq!(
        flags(&["--v=5", "--log-level=warn"]).log_level(),
        Ok(LevelFilter::TRACE)
    );
    // As with pflag, the last of repeated flags wins (a drop-in adding to ExecStart).
    let cfg = config(&["--network-plugin", "cni", "--network-plugin", "no-op"]);
    assert!(cfg.cni.is_none());
}

#[test]
fn log_levels_are_logrus_names() {
    for (name, want) in [
        ("panic", LevelFilter::ERROR),
        ("fatal", LevelFilter::ERROR),
        ("error", LevelFilter::ERROR),
        ("warn", LevelFilter::WARN),
        ("warning", LevelFilter::WARN),
        ("info", LevelFilter::INFO),
        ("debug", LevelFilter::DEBUG),
        ("trace", LevelFilter::TRACE),
        ("DEBUG", LevelFilter::DEBUG),
    ] {
        assert_eq!(
            flags(&["--log-level", name]).log_level(),
            Ok(want),
            "{name}"
        );
    }
}

#[test]
fn endpoints() {
    for ok in [
        "unix:///run/x.sock",
        "/run/x.sock",
        "fd://",
        "fd://3",
        "fd://cri-docker.socket",
    ] {
        assert_eq!(config(&["--container-runtime-endpoint", ok]).endpoint, ok);
    }
    assert_eq!(
        config(&["--container-runtime-endpoint", "fd://"])
            .fd_selector()
            .unwrap(),
        Some(FdSelector::First)
    );
    for ok in [
        "unix:///x.sock",
        "/x.sock",
        "tcp://10.0.0.1:2375",
        "http://h:2375",
    ] {
        assert_eq!(config(&["--docker-endpoint", ok]).docker_endpoint, ok);
    }
}

#[test]
fn streaming_bind_addr_forms() {
    for (given, want) in [
        ("127.0.0.1", "127.0.0.1:0"),
        ("127.0.0.1:10010", "127.0.0.1:10010"),
        ("::1", "[::1]:0"),
        ("[::1]", "[::1]:0"),
        ("[::1]:10010", "[::1]:10010"),
        ("0.0.0.0", "0.0.0.0:0"),
        ("", "0.0.0.0:0"),
    ] {
        assert_eq!(
            config(&["--streaming-bind-addr", given]).streaming_bind_addr,
            want,
            "{given}"
        );
    }
}

#[test]
fn bad_values_name_flag_value_and_reason() {
    for (args, flag, why) in [
        (
            &["--container-runtime-endpoint", "tcp://1.2.3.4:5"][..],
            "container-runtime-endpoint",
            "tcp endpoints are not supported",
        ),
        (
            &["--container-runtime-endpoint", "relative.sock"],
            "container-runtime-endpoint",
            "absolute",
        ),
        (
            &["--container-runtime-endpoint", "fd://1"],
            "container-runtime-endpoint",
            "not a passed socket",
        ),
        (
            &["--container-runtime-endpoint", "npipe:////./pipe/x"],
            "container-runtime-endpoint",
            "named pipes",
        ),
        (
            &["--cri-dockerd-root-directory", ""],
            "cri-dockerd-root-directory",
            "empty",
        ),
        (
            &["--docker-endpoint", "ssh://me@host"],
            "docker-endpoint",
            "ssh",
        ),
        (
            &["--docker-endpoint", "tcp://host"],
            "docker-endpoint",
            "host:port",
        ),
        (
            &["--docker-endpoint", "unix://rel.sock"],
            "docker-endpoint",
            "absolute",
        ),
        (
            &["--pod-infra-container-image", " "],
            "pod-infra-container-image",
            "image reference",
        ),
        (
            &["--network-plugin", "flannel"],
            "network-plugin",
            "unknown network plugin",
        ),
        (
            &["--network-plugin", "kubenet"],
            "network-plugin",
            "kubenet is not implemented",
        ),
        (
            &["--network-plugin-mtu", "abc"],
            "network-plugin-mtu",
            "whole number",
        ),
        (
            &["--network-plugin-mtu", "100"],
            "network-plugin-mtu",
            "576 to 65535",
        ),
        (
            &["--network-plugin-mtu", "70000"],
            "network-plugin-mtu",
            "576 to 65535",
        ),
        (&["--cni-bin-dir", ","], "cni-bin-dir", "at least one"),
        (&["--cni-conf-dir", ""], "cni-conf-dir", "needs this"),
        (&["--cni-cache-dir", ""], "cni-cache-dir", "needs this"),
        (
            &["--hairpin-mode", "hairpin"],
            "hairpin-mode",
            "promiscuous-bridge, hairpin-veth, none",
        ),
        (&["--pod-cidr", "10.0.0.0"], "pod-cidr", "not a CIDR"),
        (&["--pod-cidr", "10.0.0.0/33"], "pod-cidr", "prefix length"),
        (&["--pod-cidr", "x/8"], "pod-cidr", "not an IP address"),
        (
            &["--pod-cidr", "10.0.0.0/8,fd00::/64"],
            "pod-cidr",
            "--ipv6-dual-stack",
        ),
        (
            &["--pod-cidr", "10.0.0.0/8,10.1.0.0/16", "--ipv6-dual-stack"],
            "pod-cidr",
            "one IPv4 and one IPv6",
        ),
        (
            &["--image-pull-progress-deadline", "60"],
            "image-pull-progress-deadline",
            "missing unit",
        ),
        (
            &["--image-pull-progress-deadline", "0"],
            "image-pull-progress-deadline",
            "more than 0",
        ),
        (
            &["--runtime-request-timeout", "2 minutes"],
            "runtime-request-timeout",
            "unknown unit",
        ),
        (
            &["--runtime-request-timeout", "-1s"],
            "runtime-request-timeout",
            "negative",
        ),
        (
            &["--runtime-cgroups", "system.slice"],
            "runtime-cgroups",
            "absolute",
        ),
        (
            &["--streaming-bind-addr", "localhost:10010"],
            "streaming-bind-addr",
            "host names",
        ),
        (
            &["--streaming-bind-addr", "127.0.0.1:99999"],
            "streaming-bind-addr",
            "from 0 to 65535",
        ),
        (
            &["--log-level", "verbose"],
            "log-level",
            "unknown log level",
        ),
        (
            &["--streaming-connection-idle-timeout", "5"],
            "streaming-connection-idle-timeout",
            "missing unit",
        ),
        (
            &["--streaming-max-sessions", "0"],
            "streaming-max-sessions",
            "1 or more",
        ),
        (
            &["--sandbox-oom-score-adj", "-1001"],
            "sandbox-oom-score-adj",
            "-1000 to 1000",
        ),
    ] {
        let e = error(args);
        assert_eq!(e.flag, flag, "{args:?}");
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("invalid value {:?} for --{flag}: ", e.value)),
            "{text}"
        );
        assert!(text.contains(why), "{args:?}: {text}");
        assert!(!text.contains('\n'), "{text}");
    }
}

#[test]
fn clap_errors_are_one_line() {
    let line = |args: &[&str]| {
        let e = Flags::try_parse_from(std::iter::once("dockershim").chain(args.iter().copied()))
            .unwrap_err();
        clap_error_line(&e)
    };
    let l = line(&["--ipv6-dual-stack=maybe"]);
    assert!(
        l.starts_with("invalid value \"maybe\" for --ipv6-dual-stack: must be true or false"),
        "{l}"
    );
    let l = line(&["--no-such-flag"]);
    assert!(l.contains("--no-such-flag"), "{l}");
    let l = line(&["-v", "x"]);
    assert!(l.starts_with("invalid value \"x\" for --v: "), "{l}");
    let l = line(&["--docker-endpoint"]);
    assert!(
        l.starts_with("a value is required for '--docker-endpoint"),
        "{l}"
    );
    assert!(!l.contains('\n'));
}
