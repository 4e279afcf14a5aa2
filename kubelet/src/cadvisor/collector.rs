//! The Prometheus collector of `/metrics/cadvisor` (cAdvisor's `PrometheusCollector` with the
//! metric sets kubelet 1.26 includes, and its `PrometheusMachineCollector`), as a
//! `prometheus-client` [`Collector`]: per inventoried container the `container_*` series with
//! the kubelet's labels (`container`, `id`, `image`, `name`, `namespace`, `pod`), and the
//! `machine_*` series. Names, help texts, types and extra labels (`cpu="total"`, `interface`,
//! `device`, `failure_type`/`scope`) are upstream's; counters are registered without `_total`,
//! which the encoder appends. `container_memory_failcnt`, a counter upstream whose name has no
//! `_total`, is written untyped so that its name stays upstream's. Figures are read at scrape
//! time ([`scrape`]), so samples carry no time stamps of their own.

use std::collections::HashMap;
use std::path::Path;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use super::cgroup::{CgroupStats, device_name, read_cgroup};
use super::inventory::{Entry, Kind};
use super::network::{Interface, interfaces};

/// One container's figures at scrape time.
#[derive(Debug, Clone)]
pub struct Scraped {
    pub entry: Entry,
    pub stats: CgroupStats,
    pub network: Vec<Interface>,
}

/// The machine (cAdvisor's `MachineInfo`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Machine {
    pub cores: u64,
    pub physical_cores: u64,
    pub sockets: u64,
    pub memory_bytes: u64,
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
}

fn first_line(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// (logical, physical cores, sockets) of a `/proc/cpuinfo` text.
pub fn cpuinfo_counts(text: &str) -> (u64, u64, u64) {
    let mut logical = 0;
    let mut cores = std::collections::BTreeSet::new();
    let mut sockets = std::collections::BTreeSet::new();
    let mut socket = String::new();
    for l in text.lines() {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        match k.trim() {
            "processor" => logical += 1,
            "physical id" => {
                socket = v.trim().to_string();
                sockets.insert(socket.clone());
            }
            "core id" => {
                cores.insert((socket.clone(), v.trim().to_string()));
            }
            _ => {}
        }
    }
    let physical = if cores.is_empty() {
        logical
    } else {
        cores.len() as u64
    };
    (logical, physical, sockets.len().max(1) as u64)
}

impl Machine {
    /// The host's.
    pub fn read() -> Machine {
        let (logical, physical_cores, sockets) =
            cpuinfo_counts(&std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default());
        // SAFETY: sysconf(3) has no preconditions.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        Machine {
            cores: u64::try_from(online)
                .ok()
                .filter(|n| *n > 0)
                .unwrap_or(logical),
            physical_cores,
            sockets,
            memory_bytes: crate::fsstats::mem_total(&crate::fsstats::read_meminfo()),
            machine_id: first_line("/etc/machine-id"),
            system_uuid: first_line("/sys/class/dmi/id/product_uuid"),
            boot_id: first_line("/proc/sys/kernel/random/boot_id"),
        }
    }
}

/// Reads every container of `inventory` under the cgroup mount `root` now, with the network of
/// the node (the host's interfaces) and of each sandbox (its process's namespace).
pub fn scrape(root: &Path, inventory: &[Entry]) -> Vec<Scraped> {
    inventory
        .iter()
        .filter_map(|e| {
            let mut stats = read_cgroup(root, &e.dir)?;
            if e.kind == Kind::Node
                && stats.memory.is_none()
                && let Some(m) = node_memory()
            {
                // cgroup v2 has no memory.current at the root: /proc/meminfo's figures.
                stats.memory = Some(m);
            }
            let network = match e.kind {
                Kind::Node => interfaces(None),
                Kind::Sandbox => super::cgroup::first_pid(root, &e.dir)
                    .map(|pid| interfaces(Some(pid)))
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
            Some(Scraped {
                entry: e.clone(),
                stats,
                network,
            })
        })
        .collect()
}

fn node_memory() -> Option<super::cgroup::Memory> {
    let info = crate::fsstats::read_meminfo();
    let f = |k| crate::fsstats::meminfo_field(&info, k);
    let total = f("MemTotal")?;
    let usage = total.saturating_sub(f("MemFree")?);
    Some(super::cgroup::Memory {
        usage,
        working_set: total.saturating_sub(f("MemAvailable")?),
        cache: f("Cached").unwrap_or(0),
        ..Default::default()
    })
}

/// The collector of one scrape.
#[derive(Debug)]
pub struct CadvisorCollector {
    pub scraped: Vec<Scraped>,
    pub machine: Machine,
    /// The scrape's time (seconds since the epoch), for `container_last_seen`.
    pub now: f64,
}

type Extra = Vec<(&'static str, String)>;

/// A family: name (counters without `_total`), help, type, and its values per container.
struct Family {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    values: fn(&Scraped, &Ctx) -> Vec<(Extra, f64)>,
}

/// What value functions need beyond the container.
struct Ctx {
    now: f64,
    devices: HashMap<(u32, u32), String>,
}

fn one(v: Option<f64>) -> Vec<(Extra, f64)> {
    v.map(|v| vec![(Vec::new(), v)]).unwrap_or_default()
}

const NS: f64 = 1e9;

fn net(s: &Scraped, f: fn(&Interface) -> u64) -> Vec<(Extra, f64)> {
    s.network
        .iter()
        .map(|i| (vec![("interface", i.name.clone())], f(i) as f64))
        .collect()
}

fn disk(s: &Scraped, c: &Ctx, f: fn(&super::cgroup::DiskIo) -> u64) -> Vec<(Extra, f64)> {
    s.stats
        .disk_io
        .iter()
        .map(|(dev, io)| {
            let name = c.devices.get(dev).cloned().unwrap_or_default();
            (vec![("device", name)], f(io) as f64)
        })
        .collect()
}

fn throttled(s: &Scraped) -> Option<super::cgroup::Cfs> {
    // Upstream's condition: only containers with a CFS quota.
    s.stats.spec.cpu_quota.and(s.stats.cfs)
}

const FAMILIES: &[Family] = &[
    Family {
        name: "container_last_seen",
        help: "Last time a container was seen by the exporter",
        kind: MetricType::Gauge,
        values: |_, c| one(Some(c.now.floor())),
    },
    Family {
        name: "container_cpu_user_seconds",
        help: "Cumulative user cpu time consumed in seconds.",
        kind: MetricType::Counter,
        values: |s, _| one(s.stats.cpu.map(|c| c.user as f64 / NS)),
    },
    Family {
        name: "container_cpu_system_seconds",
        help: "Cumulative system cpu time consumed in seconds.",
        kind: MetricType::Counter,
        values: |s, _| one(s.stats.cpu.map(|c| c.system as f64 / NS)),
    },
    Family {
        name: "container_cpu_usage_seconds",
        help: "Cumulative cpu time consumed in seconds.",
        kind: MetricType::Counter,
        values: |s, _| {
            s.stats
                .cpu
                .filter(|c| c.total > 0)
                .map(|c| vec![(vec![("cpu", "total".to_string())], c.total as f64 / NS)])
                .unwrap_or_default()
        },
    },
    Family {
        name: "container_cpu_cfs_periods",
        help: "Number of elapsed enforcement period intervals.",
        kind: MetricType::Counter,
        values: |s, _| one(throttled(s).map(|c| c.periods as f64)),
    },
    Family {
        name: "container_cpu_cfs_throttled_periods",
        help: "Number of throttled period intervals.",
        kind: MetricType::Counter,
        values: |s, _| one(throttled(s).map(|c| c.throttled_periods as f64)),
    },
    Family {
        name: "container_cpu_cfs_throttled_seconds",
        help: "Total time duration the container has been throttled.",
        kind: MetricType::Counter,
        values: |s, _| one(throttled(s).map(|c| c.throttled_time as f64 / NS)),
    },
    Family {
        name: "container_memory_cache",
        help: "Number of bytes of page cache memory.",
        kind: MetricType::Gauge,
        values: |s, _| one(s.stats.memory.map(|m| m.cache as f64)),
    },
    Family {
        name: "container_memory_rss",
        help: "Size of RSS in bytes.",
        kind: MetricType::Gauge,
        values: |s, _| one(s.stats.memory.map(|m| m.rss as f64)),
    },
    Family {
        name: "container_memory_swap",
        help: "Container swap usage in bytes.",
        kind: MetricType::Gauge,
        values: |s, _| one(s.stats.memory.map(|m| m.swap as f64)),
    },
    Family {
        name: "container_memory_failcnt",
        help: "Number of memory usage hits limits",
        kind: MetricType::Unknown,
        values: |s, _| one(s.stats.memory.map(|m| m.failcnt as f64)),
    },
    Family {
        name: "container_memory_usage_bytes",
        help: "Current memory usage in bytes, including all memory regardless of when it was accessed",
        kind: MetricType::Gauge,
        values: |s, _| one(s.stats.memory.map(|m| m.usage as f64)),
    },
    Family {
        name: "container_memory_working_set_bytes",
        help: "Current working set in bytes.",
        kind: MetricType::Gauge,
        values: |s, _| one(s.stats.memory.map(|m| m.working_set as f64)),
    },
    Family {
        name: "container_memory_failures",
        help: "Cumulative count of memory allocation failures.",
        kind: MetricType::Counter,
        values: |s, _| {
            let Some(m) = s.stats.memory else {
                return Vec::new();
            };
            let l =
                |t: &str, scope: &str| vec![("failure_type", t.into()), ("scope", scope.into())];
            vec![
                (l("pgfault", "container"), m.container_pgfault as f64),
                (l("pgmajfault", "container"), m.container_pgmajfault as f64),
                (l("pgfault", "hierarchy"), m.pgfault as f64),
                (l("pgmajfault", "hierarchy"), m.pgmajfault as f64),
            ]
        },
    },
    Family {
        name: "container_fs_reads_bytes",
        help: "Cumulative count of bytes read",
        kind: MetricType::Counter,
        values: |s, c| disk(s, c, |io| io.read),
    },
    Family {
        name: "container_fs_writes_bytes",
        help: "Cumulative count of bytes written",
        kind: MetricType::Counter,
        values: |s, c| disk(s, c, |io| io.write),
    },
    Family {
        name: "container_network_receive_bytes",
        help: "Cumulative count of bytes received",
        kind: MetricType::Counter,
        values: |s, _| net(s, |i| i.rx_bytes),
    },
    Family {
        name: "container_network_receive_packets",
        help: "Cumulative count of packets received",
        kind: MetricType::Counter,
        values: |s, _| net(s, |i| i.rx_packets),
    },
    Family {
        name: "container_network_receive_packets_dropped",
        help: "Cumulative count of packets dropped while receiving",
        kind: MetricType::Counter,
        values: |s, _| net(s, |i| i.rx_dropped),
    },
    Family {
        name: "container_network_receive_errors",
        help: "Cumulative count of errors encountered while receiving",
        kind: MetricType::Counter,
        values: |s, _| net(s, |i| i.rx_errors),
    },
    Family {
        name: "container_network_transmit_bytes",
        help: "Cumulative count of bytes transmitted",
        kind: MetricType::Counter,
        values: |s, _| net(s, |i| i.tx_bytes),
    },
    Family {
        name: "container_network_transmit_packets",
        help: "Cumulative count of packets transmitted",
        kind: MetricType::Counter,
        values: |s, _| net(s, |i| i.tx_packets),
    },
    Family {
        name: "container_network_transmit_packets_dropped",
        help: "Cumulative count of packets dropped while transmitting",
        kind: MetricType::Counter,
        values: |s, _| net(s, |i| i.tx_dropped),
    },
    Family {
        name: "container_network_transmit_errors",
        help: "Cumulative count of errors encountered while transmitting",
        kind: MetricType::Counter,
        values: |s, _| net(s, |i| i.tx_errors),
    },
    Family {
        name: "container_processes",
        help: "Number of processes running inside the container.",
        kind: MetricType::Gauge,
        values: |s, _| one(s.stats.processes.map(|v| v as f64)),
    },
    Family {
        name: "container_threads",
        help: "Number of threads running inside the container",
        kind: MetricType::Gauge,
        values: |s, _| one(s.stats.threads.map(|v| v as f64)),
    },
    Family {
        name: "container_start_time_seconds",
        help: "Start time of the container since unix epoch in seconds.",
        kind: MetricType::Gauge,
        values: |s, _| one(s.entry.start_time.or(s.stats.created).map(f64::floor)),
    },
    Family {
        name: "container_spec_cpu_period",
        help: "CPU period of the container.",
        kind: MetricType::Gauge,
        values: |s, _| one(s.stats.cpu.map(|_| s.stats.spec.cpu_period as f64)),
    },
    Family {
        name: "container_spec_cpu_quota",
        help: "CPU quota of the container.",
        kind: MetricType::Gauge,
        values: |s, _| one(s.stats.spec.cpu_quota.map(|q| q as f64)),
    },
    Family {
        name: "container_spec_cpu_shares",
        help: "CPU share of the container.",
        kind: MetricType::Gauge,
        values: |s, _| one(s.stats.cpu.map(|_| s.stats.spec.cpu_shares as f64)),
    },
    Family {
        name: "container_spec_memory_limit_bytes",
        help: "Memory limit for the container.",
        kind: MetricType::Gauge,
        values: |s, _| {
            one(s
                .stats
                .memory
                .map(|_| s.stats.spec.memory_limit.unwrap_or(0) as f64))
        },
    },
];

/// The base labels of a container, sorted by name as Go's client writes them.
fn base_labels(e: &Entry) -> Extra {
    let l = &e.labels;
    vec![
        ("container", l.container.clone()),
        ("id", e.id.clone()),
        ("image", l.image.clone()),
        ("name", l.name.clone()),
        ("namespace", l.namespace.clone()),
        ("pod", l.pod.clone()),
    ]
}

impl Collector for CadvisorCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let devices = self
            .scraped
            .iter()
            .flat_map(|s| s.stats.disk_io.keys())
            .map(|&(ma, mi)| ((ma, mi), device_name(ma, mi)))
            .collect();
        let ctx = Ctx {
            now: self.now,
            devices,
        };
        for f in FAMILIES {
            let mut samples: Vec<(Extra, f64)> = self
                .scraped
                .iter()
                .flat_map(|s| {
                    let base = base_labels(&s.entry);
                    (f.values)(s, &ctx).into_iter().map(move |(extra, v)| {
                        let mut labels = base.clone();
                        labels.extend(extra);
                        labels.sort();
                        (labels, v)
                    })
                })
                .collect();
            if samples.is_empty() {
                continue;
            }
            samples.sort_by(|a, b| a.0.cmp(&b.0));
            let mut family = encoder.encode_descriptor(f.name, f.help, None, f.kind)?;
            for (labels, v) in &samples {
                let mut m = family.encode_family(labels)?;
                match f.kind {
                    MetricType::Counter => m.encode_counter::<NoLabelSet, _, u64>(v, None)?,
                    _ => m.encode_gauge(v)?,
                }
            }
        }
        let mut scrape_error = encoder.encode_descriptor(
            "container_scrape_error",
            "1 if there was an error while getting container metrics, 0 otherwise",
            None,
            MetricType::Gauge,
        )?;
        scrape_error.encode_gauge(&0.0)?;
        let m = &self.machine;
        let machine_labels = [
            ("boot_id", m.boot_id.as_str()),
            ("machine_id", m.machine_id.as_str()),
            ("system_uuid", m.system_uuid.as_str()),
        ];
        for (name, help, v) in [
            ("machine_cpu_cores", "Number of logical CPU cores.", m.cores),
            (
                "machine_cpu_physical_cores",
                "Number of physical CPU cores.",
                m.physical_cores,
            ),
            ("machine_cpu_sockets", "Number of CPU sockets.", m.sockets),
            (
                "machine_memory_bytes",
                "Amount of memory installed on the machine.",
                m.memory_bytes,
            ),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            family
                .encode_family(&machine_labels)?
                .encode_gauge(&(v as f64))?;
        }
        Ok(())
    }
}

/// The page of one scrape in the Prometheus text format.
pub fn render(collector: CadvisorCollector) -> String {
    let mut out = String::new();
    render_to(collector, &mut out);
    out
}

/// [`render`] into `out`; a writer that fails (its reader gone) ends it.
pub fn render_to(collector: CadvisorCollector, out: &mut impl std::fmt::Write) {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(collector));
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(out, &registry) {
        tracing::debug!(error = %e, "encoding /metrics/cadvisor ended early");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cadvisor::cgroup::{Cfs, CpuUsage, Memory, Spec};
    use crate::cadvisor::inventory::Labels;

    fn container() -> Scraped {
        Scraped {
            entry: Entry {
                id: "/kubepods/burstable/podu1/c1".into(),
                dir: "kubepods/burstable/podu1/c1".into(),
                kind: Kind::Container,
                labels: Labels {
                    name: "c1".into(),
                    image: "registry/busybox:1".into(),
                    namespace: "ns".into(),
                    pod: "web".into(),
                    container: "main".into(),
                },
                start_time: Some(1_700_000_000.5),
                runtime_id: Some("c1".into()),
                pod_uid: None,
            },
            stats: CgroupStats {
                cpu: Some(CpuUsage {
                    total: 2_500_000_000,
                    user: 2_000_000_000,
                    system: 500_000_000,
                }),
                cfs: Some(Cfs {
                    periods: 100,
                    throttled_periods: 60,
                    throttled_time: 1_500_000_000,
                }),
                memory: Some(Memory {
                    usage: 4096,
                    working_set: 2048,
                    failcnt: 2,
                    ..Default::default()
                }),
                processes: Some(1),
                threads: Some(1),
                spec: Spec {
                    cpu_period: 100_000,
                    cpu_quota: Some(30_000),
                    cpu_shares: 307,
                    memory_limit: None,
                },
                ..Default::default()
            },
            network: Vec::new(),
        }
    }

    #[test]
    fn container_series_have_upstreams_names_labels_and_types() {
        let mut sandbox = container();
        sandbox.entry.kind = Kind::Sandbox;
        sandbox.entry.id = "/kubepods/burstable/podu1/s1".into();
        sandbox.entry.labels.container = String::new();
        sandbox.stats.spec.cpu_quota = None;
        sandbox.network = vec![Interface {
            name: "eth0".into(),
            rx_bytes: 10,
            tx_packets: 3,
            ..Default::default()
        }];
        let page = render(CadvisorCollector {
            scraped: vec![container(), sandbox],
            machine: Machine {
                cores: 2,
                memory_bytes: 1 << 30,
                machine_id: "m".into(),
                ..Default::default()
            },
            now: 1_700_000_100.7,
        });
        let base = r#"container="main",id="/kubepods/burstable/podu1/c1",image="registry/busybox:1",name="c1",namespace="ns",pod="web""#;
        for line in [
            "# TYPE container_cpu_usage_seconds_total counter".to_string(),
            "# HELP container_cpu_usage_seconds_total Cumulative cpu time consumed in seconds."
                .to_string(),
            // Label names sorted, as Go's client writes them.
            r#"container_cpu_usage_seconds_total{container="main",cpu="total",id="/kubepods/burstable/podu1/c1",image="registry/busybox:1",name="c1",namespace="ns",pod="web"} 2.5"#.to_string(),
            format!("container_cpu_user_seconds_total{{{base}}} 2.0"),
            format!("container_cpu_cfs_periods_total{{{base}}} 100.0"),
            format!("container_cpu_cfs_throttled_periods_total{{{base}}} 60.0"),
            format!("container_cpu_cfs_throttled_seconds_total{{{base}}} 1.5"),
            "# TYPE container_memory_working_set_bytes gauge".to_string(),
            format!("container_memory_working_set_bytes{{{base}}} 2048.0"),
            "# TYPE container_memory_failcnt untyped".to_string(),
            format!("container_memory_failcnt{{{base}}} 2.0"),
            r#"container_memory_failures_total{container="main",failure_type="pgfault",id="/kubepods/burstable/podu1/c1",image="registry/busybox:1",name="c1",namespace="ns",pod="web",scope="container"} 0.0"#.to_string(),
            format!("container_spec_cpu_quota{{{base}}} 30000.0"),
            format!("container_spec_memory_limit_bytes{{{base}}} 0.0"),
            format!("container_start_time_seconds{{{base}}} 1700000000.0"),
            format!("container_last_seen{{{base}}} 1700000100.0"),
            r#"container_network_receive_bytes_total{container="",id="/kubepods/burstable/podu1/s1",image="registry/busybox:1",interface="eth0",name="c1",namespace="ns",pod="web"} 10.0"#.to_string(),
            "container_scrape_error 0.0".to_string(),
            r#"machine_cpu_cores{boot_id="",machine_id="m",system_uuid=""} 2.0"#.to_string(),
            r#"machine_memory_bytes{boot_id="",machine_id="m",system_uuid=""} 1073741824.0"#
                .to_string(),
        ] {
            assert!(page.lines().any(|l| l == line), "{line} in:\n{page}");
        }
        // Without a quota there are no CFS series (upstream's condition).
        assert_eq!(page.matches("container_cpu_cfs_periods_total{").count(), 1);
        assert!(!page.contains("container_memory_failcnt_total"));
    }

    #[test]
    fn cpuinfo_counts_logical_and_physical_cores_and_sockets() {
        let text = "processor\t: 0\nphysical id\t: 0\ncore id\t: 0\n\nprocessor\t: 1\nphysical id\t: 0\ncore id\t: 0\n\nprocessor\t: 2\nphysical id\t: 1\ncore id\t: 0\n";
        assert_eq!(cpuinfo_counts(text), (3, 2, 2));
        assert_eq!(cpuinfo_counts("processor : 0\n"), (1, 1, 1));
    }
}
