//! Pod DNS (upstream `pkg/kubelet/network/dns`, Kubernetes 1.26): the resolver configuration a
//! pod's sandbox gets through CRI `PodSandboxConfig.dns_config`, from the pod's `dnsPolicy` and
//! `dnsConfig`, the kubelet's `clusterDNS` / `clusterDomain` and the host's resolver file
//! (`resolvConf`). Upstream rules kept:
//! - `ClusterFirst` (and `ClusterFirstWithHostNet`; `ClusterFirst` on a host-network pod falls
//!   back to `Default`): the cluster DNS servers only, search `<ns>.svc.<domain> svc.<domain>
//!   <domain>` then the host's, options `ndots:5`. Without cluster DNS configured it falls back
//!   to `Default`, with a `MissingClusterDNS` warning event.
//! - `Default`: the host file as it is; with `resolvConf` set to "" the pod gets `127.0.0.1`
//!   (`::1` for IPv6 nodes) and search `.`, which disables lookups as upstream does.
//! - `None`: nothing but the pod's `dnsConfig`.
//! - `dnsConfig` is appended: servers and searches without duplicates, options merged by name
//!   (the pod's value wins).
//! - Limits of 1.26 (ExpandedDNSConfig on by default): 3 nameservers, 32 search paths, 2048
//!   characters of search line, no path over 253 characters; anything cut is reported by a
//!   `DNSConfigForming` warning event and an error log line, as upstream.
//!
//! The only I/O is reading the resolver file, on every call (upstream reads it per sandbox).

use std::net::IpAddr;
use std::path::PathBuf;

use cri_proto::runtime::v1 as cri;
use k8s_openapi::api::core::v1::{Pod, PodDNSConfigOption};

use crate::events::{EventRecorder, EventType};

/// Upstream `validation.MaxDNSNameservers`.
pub const MAX_DNS_NAMESERVERS: usize = 3;
/// Upstream `validation.MaxDNSSearchPathsExpanded` (ExpandedDNSConfig, beta and on in 1.26).
pub const MAX_DNS_SEARCH_PATHS: usize = 32;
/// Upstream `validation.MaxDNSSearchListCharsExpanded`.
pub const MAX_DNS_SEARCH_LIST_CHARS: usize = 2048;
/// Upstream `DNS1123SubdomainMaxLength`: longer search paths are dropped.
pub const MAX_SEARCH_PATH_LEN: usize = 253;
/// Upstream `maxResolveConfLength`.
pub const MAX_RESOLV_CONF_LEN: u64 = 10 << 20;
/// Upstream `kubetypes.ResolvConfDefault`.
pub const RESOLV_CONF_DEFAULT: &str = "/etc/resolv.conf";
/// Upstream `defaultDNSOptions`.
pub const DEFAULT_DNS_OPTIONS: &[&str] = &["ndots:5"];

/// Errors forming a pod's DNS configuration.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    /// The resolver file cannot be read.
    #[error("open {path}: {source}")]
    ResolvConf {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The resolver file is malformed (a `nameserver` line without address).
    #[error("parse {path}: {reason}")]
    Parse { path: PathBuf, reason: String },
}

/// The kubelet's DNS settings (upstream `dns.Configurer`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DnsConfigurer {
    /// `clusterDNS` (`--cluster-dns`).
    pub cluster_dns: Vec<IpAddr>,
    /// `clusterDomain` (`--cluster-domain`).
    pub cluster_domain: String,
    /// `resolvConf` (`--resolv-conf`); empty disables the host's resolver for `Default`.
    pub resolver_config: String,
    /// The node's IPs (for the `resolvConf: ""` loopback server).
    pub node_ips: Vec<IpAddr>,
}

/// A parsed resolv.conf: (nameservers, searches, options).
pub type ResolvConf = (Vec<String>, Vec<String>, Vec<String>);

/// Parsed resolv.conf: (nameservers, searches, options) (upstream `parseResolvConf`):
/// nameserver lines accumulate; the last `search` and the last `options` line win; search
/// domains lose a trailing dot; `#` lines are comments.
pub fn parse_resolv_conf(text: &str) -> Result<ResolvConf, String> {
    let (mut servers, mut searches, mut options) = (vec![], vec![], vec![]);
    let mut errors = vec![];
    for line in text.split('\n') {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.first() {
            Some(&"nameserver") => match fields.get(1) {
                Some(s) => servers.push(s.to_string()),
                None => errors.push("nameserver list is empty "),
            },
            Some(&"search") => {
                searches = fields[1..]
                    .iter()
                    .map(|s| s.strip_suffix('.').unwrap_or(s).to_string())
                    .collect()
            }
            Some(&"options") => options = fields[1..].iter().map(|s| s.to_string()).collect(),
            _ => {}
        }
    }
    if errors.is_empty() {
        Ok((servers, searches, options))
    } else {
        Err(errors.join(", "))
    }
}

fn omit_duplicates(v: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    v.into_iter().filter(|s| seen.insert(s.clone())).collect()
}

/// Upstream `mergeDNSOptions`: options by name, the pod's overriding the base's. Order: the
/// base's, then new names (upstream's map order is random; ours is stable).
pub fn merge_dns_options(base: &[String], pod: &[PodDNSConfigOption]) -> Vec<String> {
    let mut merged: Vec<(String, String)> = vec![];
    let mut set = |name: &str, value: &str| match merged.iter_mut().find(|(n, _)| n == name) {
        Some(e) => e.1 = value.to_string(),
        None => merged.push((name.to_string(), value.to_string())),
    };
    for op in base {
        match op.split_once(':') {
            Some((n, v)) => set(n, v),
            None => set(op, ""),
        }
    }
    for op in pod {
        set(
            op.name.as_deref().unwrap_or_default(),
            op.value.as_deref().unwrap_or_default(),
        );
    }
    merged
        .into_iter()
        .map(|(n, v)| if v.is_empty() { n } else { format!("{n}:{v}") })
        .collect()
}

/// How a pod's DNS is formed (upstream `podDNSType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodDnsType {
    Cluster,
    Host,
    None,
}

/// Upstream `getPodDNSType`; an unknown policy is an error and means `Cluster`.
pub fn pod_dns_type(pod: &Pod) -> Result<PodDnsType, String> {
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.dns_policy.as_deref())
        // The API server defaults an empty policy to ClusterFirst.
        .unwrap_or("ClusterFirst");
    match policy {
        "None" => Ok(PodDnsType::None),
        "ClusterFirstWithHostNet" => Ok(PodDnsType::Cluster),
        "ClusterFirst" if !crate::container::is_host_network_pod(pod) => Ok(PodDnsType::Cluster),
        "ClusterFirst" | "Default" => Ok(PodDnsType::Host),
        other => Err(format!("invalid DNSPolicy={other}")),
    }
}

impl DnsConfigurer {
    /// The host's resolver settings (upstream `getHostDNSConfig`).
    pub fn host_dns_config(&self) -> Result<cri::DnsConfig, DnsError> {
        if self.resolver_config.is_empty() {
            return Ok(cri::DnsConfig::default());
        }
        let path = PathBuf::from(&self.resolver_config);
        let text = read_at_most(&path).map_err(|source| DnsError::ResolvConf {
            path: path.clone(),
            source,
        })?;
        let (servers, searches, options) =
            parse_resolv_conf(&text).map_err(|reason| DnsError::Parse { path, reason })?;
        Ok(cri::DnsConfig {
            servers,
            searches,
            options,
        })
    }

    fn cluster_searches(&self, host: Vec<String>, pod: &Pod) -> Vec<String> {
        if self.cluster_domain.is_empty() {
            return host;
        }
        let d = &self.cluster_domain;
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut v = vec![format!("{ns}.svc.{d}"), format!("svc.{d}"), d.clone()];
        v.extend(host);
        omit_duplicates(v)
    }

    /// Upstream `GetPodDNS`; events about the pod go to `events`.
    pub fn get_pod_dns(
        &self,
        pod: &Pod,
        events: &EventRecorder,
    ) -> Result<cri::DnsConfig, DnsError> {
        let mut dns = self.host_dns_config()?;
        let pod_name = crate::container::pod_full_name(pod);
        let dns_type = pod_dns_type(pod).unwrap_or_else(|e| {
            tracing::error!(pod = %pod_name, error = %e, "Failed to get DNS type for pod. Falling back to DNSClusterFirst policy.");
            PodDnsType::Cluster
        });
        let mut host = dns_type == PodDnsType::Host;
        match dns_type {
            PodDnsType::None => dns = cri::DnsConfig::default(),
            PodDnsType::Cluster if !self.cluster_dns.is_empty() => {
                dns.servers = self.cluster_dns.iter().map(ToString::to_string).collect();
                dns.searches = self.cluster_searches(std::mem::take(&mut dns.searches), pod);
                dns.options = DEFAULT_DNS_OPTIONS.iter().map(|s| s.to_string()).collect();
            }
            PodDnsType::Cluster => {
                let msg = "kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.";
                // Upstream only records the events (every sync of such a pod makes them).
                tracing::debug!(pod = %pod_name, reason = "MissingClusterDNS", "{msg}");
                events.event(
                    pod,
                    None,
                    EventType::Warning,
                    "MissingClusterDNS",
                    format!("pod: {pod_name:?}. {msg}"),
                );
                host = true;
            }
            PodDnsType::Host => {}
        }
        if host && self.resolver_config.is_empty() {
            dns.servers = self
                .node_ips
                .iter()
                .map(|ip| if ip.is_ipv6() { "::1" } else { "127.0.0.1" }.to_string())
                .collect();
            if dns.servers.is_empty() {
                dns.servers.push("127.0.0.1".into());
            }
            dns.searches = vec![".".into()];
        }
        if let Some(cfg) = pod.spec.as_ref().and_then(|s| s.dns_config.as_ref()) {
            dns.servers
                .extend(cfg.nameservers.iter().flatten().cloned());
            dns.servers = omit_duplicates(std::mem::take(&mut dns.servers));
            dns.searches.extend(cfg.searches.iter().flatten().cloned());
            dns.searches = omit_duplicates(std::mem::take(&mut dns.searches));
            dns.options = merge_dns_options(&dns.options, cfg.options.as_deref().unwrap_or(&[]));
        }
        Ok(self.fits_limits(dns, pod, events))
    }

    /// Upstream `formDNSConfigFitsLimits`.
    fn fits_limits(
        &self,
        mut dns: cri::DnsConfig,
        pod: &Pod,
        events: &EventRecorder,
    ) -> cri::DnsConfig {
        if dns.servers.len() > MAX_DNS_NAMESERVERS {
            dns.servers.truncate(MAX_DNS_NAMESERVERS);
            let msg = format!(
                "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
                dns.servers.join(" ")
            );
            tracing::error!(pod = %crate::container::pod_full_name(pod), error = %msg, "Nameserver limits exceeded");
            events.event(pod, None, EventType::Warning, "DNSConfigForming", msg);
        }
        let (searches, exceeded) = search_fits_limits(std::mem::take(&mut dns.searches));
        if exceeded {
            let msg = format!(
                "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
                searches.join(" ")
            );
            tracing::error!(pod = %crate::container::pod_full_name(pod), error = %msg, "Search Line limits exceeded");
            events.event(pod, None, EventType::Warning, "DNSConfigForming", msg);
        }
        dns.searches = searches;
        dns
    }

    /// Upstream `CheckLimitsForResolvConf`, run once at start-up: a warning when the host file
    /// cannot be read or its search line cannot fit next to the cluster's three paths.
    pub fn check_limits_for_resolv_conf(&self) -> Option<String> {
        if self.resolver_config.is_empty() {
            return None;
        }
        let text = match read_at_most(std::path::Path::new(&self.resolver_config)) {
            Ok(t) => t,
            Err(e) => return Some(format!("open {}: {e}", self.resolver_config)),
        };
        let (_, search, _) = match parse_resolv_conf(&text) {
            Ok(v) => v,
            Err(e) => return Some(e),
        };
        let mut limit = MAX_DNS_SEARCH_PATHS;
        if !self.cluster_domain.is_empty() {
            limit -= 3;
        }
        let f = &self.resolver_config;
        if search.len() > limit {
            return Some(format!(
                "Resolv.conf file '{f}' contains search line consisting of more than {limit} domains!"
            ));
        }
        if search.iter().any(|s| s.len() > MAX_SEARCH_PATH_LEN) {
            return Some(format!(
                "Resolv.conf file {f:?} contains a search path which length is more than allowed {MAX_SEARCH_PATH_LEN} chars!"
            ));
        }
        if search.join(" ").len() > MAX_DNS_SEARCH_LIST_CHARS {
            return Some(format!(
                "Resolv.conf file '{f}' contains search line which length is more than allowed {MAX_DNS_SEARCH_LIST_CHARS} chars!"
            ));
        }
        None
    }
}

/// Upstream `formDNSSearchFitsLimits`: (the searches kept, whether any was cut).
pub fn search_fits_limits(mut search: Vec<String>) -> (Vec<String>, bool) {
    let mut exceeded = false;
    if search.len() > MAX_DNS_SEARCH_PATHS {
        search.truncate(MAX_DNS_SEARCH_PATHS);
        exceeded = true;
    }
    let before = search.len();
    search.retain(|s| s.len() <= MAX_SEARCH_PATH_LEN);
    exceeded |= search.len() != before;
    let total = search.join(" ").len();
    if total > MAX_DNS_SEARCH_LIST_CHARS {
        let mut cut_len = 0;
        let mut cut = 0;
        for s in search.iter().rev() {
            cut_len += s.len() + 1;
            cut += 1;
            if total.saturating_sub(cut_len) <= MAX_DNS_SEARCH_LIST_CHARS {
                break;
            }
        }
        search.truncate(search.len() - cut);
        exceeded = true;
    }
    (search, exceeded)
}

fn read_at_most(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_RESOLV_CONF_LEN)
        .read_to_string(&mut text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodDNSConfig, PodSpec};

    const HOST: &str = "nameserver 10.0.0.2\nnameserver 10.0.0.3\n# comment\nsearch host.example. corp.example\noptions timeout:2 ndots:1\n";

    fn pod(policy: Option<&str>, host_network: bool, cfg: Option<PodDNSConfig>) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("web".into());
        p.metadata.namespace = Some("team-a".into());
        p.spec = Some(PodSpec {
            dns_policy: policy.map(Into::into),
            host_network: Some(host_network),
            dns_config: cfg,
            ..Default::default()
        });
        p
    }

    fn configurer(dir: &tempfile::TempDir, cluster_dns: &[&str]) -> DnsConfigurer {
        let path = dir.path().join("resolv.conf");
        std::fs::write(&path, HOST).expect("write");
        DnsConfigurer {
            cluster_dns: cluster_dns.iter().map(|s| s.parse().expect("ip")).collect(),
            cluster_domain: "cluster.local".into(),
            resolver_config: path.to_string_lossy().into_owned(),
            node_ips: vec!["192.168.1.5".parse().expect("ip")],
        }
    }

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_resolv_conf_like_upstream() {
        let (s, q, o) = parse_resolv_conf(
            "nameserver 1.1.1.1\n# x\nsearch a b\nsearch c. d\noptions ndots:5\noptions rotate\nnameserver 8.8.8.8",
        )
        .expect("parse");
        assert_eq!(s, strs(&["1.1.1.1", "8.8.8.8"]));
        assert_eq!(q, strs(&["c", "d"]));
        assert_eq!(o, strs(&["rotate"]));
        assert!(parse_resolv_conf("nameserver\n").is_err());
    }

    #[test]
    fn cluster_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = configurer(&dir, &["10.96.0.10"]);
        let ev = EventRecorder::default();
        for policy in [None, Some("ClusterFirst")] {
            let d = c.get_pod_dns(&pod(policy, false, None), &ev).expect("dns");
            assert_eq!(d.servers, strs(&["10.96.0.10"]));
            assert_eq!(
                d.searches,
                strs(&[
                    "team-a.svc.cluster.local",
                    "svc.cluster.local",
                    "cluster.local",
                    "host.example",
                    "corp.example"
                ])
            );
            assert_eq!(d.options, strs(&["ndots:5"]));
        }
        // Host-network pods: ClusterFirst means Default, ClusterFirstWithHostNet the cluster.
        let d = c
            .get_pod_dns(&pod(Some("ClusterFirst"), true, None), &ev)
            .expect("dns");
        assert_eq!(d.servers, strs(&["10.0.0.2", "10.0.0.3"]));
        let d = c
            .get_pod_dns(&pod(Some("ClusterFirstWithHostNet"), true, None), &ev)
            .expect("dns");
        assert_eq!(d.servers, strs(&["10.96.0.10"]));
        assert_eq!(d.searches[0], "team-a.svc.cluster.local");
        // Without a cluster domain the host's search line is kept as it is.
        let mut c2 = c.clone();
        c2.cluster_domain.clear();
        let d = c2.get_pod_dns(&pod(None, false, None), &ev).expect("dns");
        assert_eq!(d.searches, strs(&["host.example", "corp.example"]));
    }

    #[test]
    fn cluster_first_without_cluster_dns_falls_back_to_default_with_an_event() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = configurer(&dir, &[]);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let ev = EventRecorder::new(tx);
        let d = c.get_pod_dns(&pod(None, false, None), &ev).expect("dns");
        assert_eq!(d.servers, strs(&["10.0.0.2", "10.0.0.3"]));
        assert_eq!(d.searches, strs(&["host.example", "corp.example"]));
        assert_eq!(d.options, strs(&["timeout:2", "ndots:1"]));
        let e = rx.try_recv().expect("event");
        assert_eq!(e.reason, "MissingClusterDNS");
        assert!(
            e.message.contains("Falling back to \"Default\" policy"),
            "{}",
            e.message
        );
    }

    #[test]
    fn default_and_empty_resolv_conf() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut c = configurer(&dir, &["10.96.0.10"]);
        let ev = EventRecorder::default();
        let d = c
            .get_pod_dns(&pod(Some("Default"), false, None), &ev)
            .expect("dns");
        assert_eq!(d.servers, strs(&["10.0.0.2", "10.0.0.3"]));
        assert_eq!(d.searches, strs(&["host.example", "corp.example"]));
        assert_eq!(d.options, strs(&["timeout:2", "ndots:1"]));
        c.resolver_config.clear();
        let d = c
            .get_pod_dns(&pod(Some("Default"), false, None), &ev)
            .expect("dns");
        assert_eq!(d.servers, strs(&["127.0.0.1"]));
        assert_eq!(d.searches, strs(&["."]));
        // A missing file fails the pod's sandbox as upstream.
        c.resolver_config = dir.path().join("absent").to_string_lossy().into_owned();
        assert!(
            c.get_pod_dns(&pod(Some("Default"), false, None), &ev)
                .is_err()
        );
    }

    #[test]
    fn none_with_dns_config_and_merging() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = configurer(&dir, &["10.96.0.10"]);
        let ev = EventRecorder::default();
        let cfg = PodDNSConfig {
            nameservers: Some(strs(&["1.2.3.4", "1.2.3.4"])),
            searches: Some(strs(&["ns1.svc.example", "my.dns.search.suffix"])),
            options: Some(vec![
                PodDNSConfigOption {
                    name: Some("ndots".into()),
                    value: Some("2".into()),
                },
                PodDNSConfigOption {
                    name: Some("edns0".into()),
                    value: None,
                },
            ]),
        };
        let d = c
            .get_pod_dns(&pod(Some("None"), false, Some(cfg.clone())), &ev)
            .expect("dns");
        assert_eq!(d.servers, strs(&["1.2.3.4"]));
        assert_eq!(
            d.searches,
            strs(&["ns1.svc.example", "my.dns.search.suffix"])
        );
        assert_eq!(d.options, strs(&["ndots:2", "edns0"]));
        // Appended to ClusterFirst's; the pod's ndots wins.
        let d = c
            .get_pod_dns(&pod(None, false, Some(cfg)), &ev)
            .expect("dns");
        assert_eq!(d.servers, strs(&["10.96.0.10", "1.2.3.4"]));
        assert_eq!(d.searches.len(), 7);
        assert_eq!(d.options, strs(&["ndots:2", "edns0"]));
    }

    #[test]
    fn limits_cut_with_an_event() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = configurer(&dir, &["10.96.0.10"]);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let ev = EventRecorder::new(tx);
        let cfg = PodDNSConfig {
            nameservers: Some(strs(&["1.1.1.1", "2.2.2.2", "3.3.3.3"])),
            searches: Some((0..40).map(|i| format!("s{i}.example")).collect()),
            options: None,
        };
        let d = c
            .get_pod_dns(&pod(None, false, Some(cfg)), &ev)
            .expect("dns");
        assert_eq!(d.servers, strs(&["10.96.0.10", "1.1.1.1", "2.2.2.2"]));
        assert_eq!(d.searches.len(), MAX_DNS_SEARCH_PATHS);
        let reasons: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|e| e.message)
            .collect();
        assert_eq!(reasons.len(), 2, "{reasons:?}");
        assert!(reasons[0].starts_with("Nameserver limits were exceeded"));
        assert!(reasons[1].starts_with("Search Line limits were exceeded"));
        // Characters: 2048 at most; over-long paths are dropped.
        let long: Vec<String> = (0..20).map(|i| format!("{i:0>150}")).collect();
        let (kept, cut) = search_fits_limits(long);
        assert!(cut);
        assert!(kept.join(" ").len() <= MAX_DNS_SEARCH_LIST_CHARS);
        assert_eq!(kept.len(), 13);
        let (kept, cut) = search_fits_limits(vec!["a".repeat(254), "b".into()]);
        assert!(cut);
        assert_eq!(kept, strs(&["b"]));
        let (_, cut) = search_fits_limits(strs(&["a", "b"]));
        assert!(!cut);
    }

    #[test]
    fn resolv_conf_limit_check() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut c = configurer(&dir, &[]);
        assert_eq!(c.check_limits_for_resolv_conf(), None);
        let path = dir.path().join("many");
        let line: Vec<String> = (0..30).map(|i| format!("d{i}")).collect();
        std::fs::write(&path, format!("search {}\n", line.join(" "))).expect("write");
        c.resolver_config = path.to_string_lossy().into_owned();
        let w = c.check_limits_for_resolv_conf().expect("warning");
        assert!(w.contains("more than 29 domains"), "{w}");
        c.resolver_config = "/nonexistent/resolv.conf".into();
        assert!(c.check_limits_for_resolv_conf().is_some());
    }
}
