//! Container and sandbox statistics (CPU, memory working set, network for sandboxes) read from
//! the containers' cgroup files (see `cgroups`), with Docker's one-shot stats as the fallback
//! when a cgroup cannot be found, and the writable-layer sizes of `cache::SizeCache` (refreshed
//! in the background, never computed on the request path). `usage_nano_cores` is the mean rate
//! since the previous sample of the same container (`cache::CpuUsageCache`), whoever asked, as
//! containerd computes it; a sandbox's figures are its pause container's and its containers'
//! added up, with its own rate. The RPCs: ContainerStats, ListContainerStats, PodSandboxStats,
//! ListPodSandboxStats, ListPodSandboxMetrics.

use std::collections::HashMap;

use bollard::models::ContainerStatsResponse;
use cri_proto::runtime::v1 as cri;
use futures::StreamExt;

use crate::cache::{CpuSample, CpuUsageCache};
use crate::cgroups;
use crate::docker::DockerApi;
use crate::errors::Result;
use crate::filter::matches_selector;
use crate::shim::Shim;
use crate::timestamp::now_ns;

/// How many Docker stats calls run at once for the List* RPCs.
const STATS_CONCURRENCY: usize = 32;

fn u64v(value: u64) -> Option<cri::UInt64Value> {
    Some(cri::UInt64Value { value })
}

/// CPU usage of a Docker stats sample.
fn cpu_usage(s: &ContainerStatsResponse, ts: i64) -> cri::CpuUsage {
    cri::CpuUsage {
        timestamp: ts,
        usage_core_nano_seconds: u64v(
            s.cpu_stats
                .as_ref()
                .and_then(|c| c.cpu_usage.as_ref())
                .and_then(|u| u.total_usage)
                .unwrap_or(0),
        ),
        usage_nano_cores: None,
        psi: None,
    }
}

/// `cpu` with its `usage_nano_cores`: the mean rate since `cache`'s previous sample of `id`
/// (none for the first sample).
fn with_nano_cores(cache: &CpuUsageCache, id: &str, mut cpu: cri::CpuUsage) -> cri::CpuUsage {
    if let Some(usage) = cpu.usage_core_nano_seconds.as_ref().map(|v| v.value) {
        let sample = CpuSample {
            timestamp: cpu.timestamp,
            usage_core_nano_seconds: usage,
        };
        cpu.usage_nano_cores = cache.usage_nano_cores(id, sample).and_then(u64v);
    }
    cpu
}

fn value(v: Option<&cri::UInt64Value>) -> Option<u64> {
    v.map(|v| v.value)
}

/// The sum of `field` over the sandbox's own (pause) figure and its containers': `None` when
/// none of them has it.
fn sum_of<T>(
    own: &T,
    containers: &[cri::ContainerStats],
    of: impl Fn(&cri::ContainerStats) -> Option<&T>,
    field: impl Fn(&T) -> Option<u64>,
) -> Option<u64> {
    std::iter::once(field(own))
        .chain(containers.iter().map(|c| of(c).and_then(&field)))
        .flatten()
        .reduce(|a, b| a.saturating_add(b))
}

/// A sandbox's cumulative CPU usage: its pause container's and its containers' together (the
/// rate is added by the caller, from the sandbox's own previous sample).
fn sandbox_cpu(own: &cri::CpuUsage, containers: &[cri::ContainerStats]) -> cri::CpuUsage {
    cri::CpuUsage {
        timestamp: own.timestamp,
        usage_core_nano_seconds: sum_of(
            own,
            containers,
            |c| c.cpu.as_ref(),
            |u| value(u.usage_core_nano_seconds.as_ref()),
        )
        .and_then(u64v),
        usage_nano_cores: None,
        psi: None,
    }
}

/// A sandbox's memory: its pause container's and its containers' figures added up.
fn sandbox_memory(own: &cri::MemoryUsage, containers: &[cri::ContainerStats]) -> cri::MemoryUsage {
    let sum = |field: fn(&cri::MemoryUsage) -> Option<&cri::UInt64Value>| {
        sum_of(own, containers, |c| c.memory.as_ref(), |m| value(field(m))).and_then(u64v)
    };
    cri::MemoryUsage {
        timestamp: own.timestamp,
        working_set_bytes: sum(|m| m.working_set_bytes.as_ref()),
        available_bytes: None,
        usage_bytes: sum(|m| m.usage_bytes.as_ref()),
        rss_bytes: sum(|m| m.rss_bytes.as_ref()),
        page_faults: sum(|m| m.page_faults.as_ref()),
        major_page_faults: sum(|m| m.major_page_faults.as_ref()),
        psi: None,
    }
}

/// Memory usage with the kubelet's working set (usage minus inactive file pages).
fn memory_usage(s: &ContainerStatsResponse, ts: i64) -> cri::MemoryUsage {
    let m = s.memory_stats.as_ref();
    let usage = m.and_then(|m| m.usage).unwrap_or(0);
    let stats = m.and_then(|m| m.stats.as_ref());
    let inactive = stats
        .and_then(|st| {
            st.get("inactive_file")
                .or_else(|| st.get("total_inactive_file"))
        })
        .copied()
        .unwrap_or(0);
    let rss = stats
        .and_then(|st| st.get("anon").or_else(|| st.get("rss")))
        .copied()
        .unwrap_or(0);
    let limit = m.and_then(|m| m.limit).unwrap_or(0);
    let working_set = usage.saturating_sub(inactive);
    cri::MemoryUsage {
        timestamp: ts,
        working_set_bytes: u64v(working_set),
        available_bytes: (limit > 0 && limit < u64::MAX / 2).then(|| cri::UInt64Value {
            value: limit.saturating_sub(working_set),
        }),
        usage_bytes: u64v(usage),
        rss_bytes: u64v(rss),
        page_faults: stats.and_then(|s| s.get("pgfault")).and_then(|v| u64v(*v)),
        major_page_faults: stats
            .and_then(|s| s.get("pgmajfault"))
            .and_then(|v| u64v(*v)),
        psi: None,
    }
}

/// Network usage of a sandbox's stats sample.
fn network_usage(s: &ContainerStatsResponse, ts: i64) -> Option<cri::NetworkUsage> {
    let nets = s.networks.as_ref()?;
    let interfaces: Vec<cri::NetworkInterfaceUsage> = nets
        .iter()
        .map(|(name, n)| cri::NetworkInterfaceUsage {
            name: name.clone(),
            rx_bytes: u64v(n.rx_bytes.unwrap_or(0)),
            rx_errors: u64v(n.rx_errors.unwrap_or(0)),
            tx_bytes: u64v(n.tx_bytes.unwrap_or(0)),
            tx_errors: u64v(n.tx_errors.unwrap_or(0)),
        })
        .collect();
    Some(network_of(interfaces, ts))
}

/// Network usage of a pod's interfaces, `eth0` (else the first by name) being the default.
fn network_of(mut interfaces: Vec<cri::NetworkInterfaceUsage>, ts: i64) -> cri::NetworkUsage {
    interfaces.sort_by(|a, b| a.name.cmp(&b.name));
    let default = interfaces
        .iter()
        .find(|i| i.name == "eth0")
        .or(interfaces.first())
        .cloned();
    cri::NetworkUsage {
        timestamp: ts,
        default_interface: default,
        interfaces,
    }
}

/// Network usage from a `/proc/<pid>/net/dev` table (every interface but `lo`): the pod's own
/// network namespace, for sandboxes whose network Docker does not manage (CNI mode runs the
/// pause container with `--network=none`, so Docker's stats carry no networks).
fn netdev_usage(table: &str, ts: i64) -> Option<cri::NetworkUsage> {
    let interfaces: Vec<cri::NetworkInterfaceUsage> = table
        .lines()
        .skip(2)
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let name = name.trim();
            let f: Vec<u64> = rest
                .split_whitespace()
                .map(|v| v.parse().unwrap_or(0))
                .collect();
            // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets errs
            (name != "lo" && f.len() >= 16).then(|| cri::NetworkInterfaceUsage {
                name: name.to_string(),
                rx_bytes: u64v(f[0]),
                rx_errors: u64v(f[2]),
                tx_bytes: u64v(f[8]),
                tx_errors: u64v(f[10]),
            })
        })
        .collect();
    if interfaces.is_empty() {
        return None;
    }
    Some(network_of(interfaces, ts))
}

impl<D: DockerApi> Shim<D> {
    /// The network usage of a sandbox: Docker's when Docker manages its network, otherwise read
    /// from the pause process's network namespace.
    async fn sandbox_network_usage(
        &self,
        id: &str,
        s: &ContainerStatsResponse,
        ts: i64,
    ) -> Option<cri::NetworkUsage> {
        if let Some(n) = network_usage(s, ts).filter(|n| !n.interfaces.is_empty()) {
            return Some(n);
        }
        let pid = self
            .docker
            .inspect_container(id)
            .await
            .ok()?
            .state?
            .pid
            .filter(|p| *p > 0)?;
        let table = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).ok()?;
        netdev_usage(&table, ts)
    }

    /// A CPU and memory sample of a running container: from its cgroup files when they can be
    /// found (the container's init pid locates them once), otherwise from Docker's stats.
    async fn sample(&self, id: &str) -> Result<ContainerStatsResponse> {
        if let Some(paths) = self.cgroups.get(id) {
            match cgroups::read_sample(&paths) {
                Ok(s) => return Ok(s),
                Err(_) => self.cgroups.forget(id),
            }
        }
        if let Ok(c) = self.docker.inspect_container(id).await {
            let id = c.id.as_deref().unwrap_or(id);
            let running = c.state.as_ref().and_then(|s| s.running).unwrap_or(false);
            let pid = c.state.as_ref().and_then(|s| s.pid).filter(|p| *p > 0);
            if let (true, Some(pid)) = (running, pid)
                && let Some(paths) = self.cgroups.resolve(id, pid)
                && let Ok(s) = cgroups::read_sample(&paths)
            {
                return Ok(s);
            }
        }
        Ok(self.docker.stats(id).await?)
    }

    async fn stats_of(&self, c: cri::Container) -> Result<cri::ContainerStats> {
        let s = self.sample(&c.id).await?;
        let ts = now_ns();
        let size = self.sizes.get(&c.id);
        let mountpoint = self.docker_root.clone();
        Ok(cri::ContainerStats {
            attributes: Some(cri::ContainerAttributes {
                id: c.id.clone(),
                metadata: c.metadata,
                labels: c.labels,
                annotations: c.annotations,
            }),
            cpu: Some(with_nano_cores(
                &self.container_cpu,
                &c.id,
                cpu_usage(&s, ts),
            )),
            memory: Some(memory_usage(&s, ts)),
            writable_layer: Some(cri::FilesystemUsage {
                timestamp: ts,
                fs_id: Some(cri::FilesystemIdentifier { mountpoint }),
                used_bytes: u64v(size),
                inodes_used: None,
            }),
            swap: None,
            io: None,
        })
    }

    /// ContainerStats.
    pub async fn container_stats(&self, id: &str) -> Result<cri::ContainerStats> {
        let c = self.inspect_app_container(id).await?;
        let full = c.id.clone().unwrap_or_else(|| id.to_string());
        let listed = self
            .list_containers(Some(cri::ContainerFilter {
                id: full,
                ..Default::default()
            }))
            .await?;
        let c = listed.into_iter().next().ok_or_else(|| {
            crate::errors::ShimError::NotFound(format!("could not find container {id:?}"))
        })?;
        self.stats_of(c).await
    }

    /// ListContainerStats: running containers only (stopped ones have no live stats).
    pub async fn list_container_stats(
        &self,
        filter: Option<cri::ContainerStatsFilter>,
    ) -> Result<Vec<cri::ContainerStats>> {
        let f = filter.unwrap_or_default();
        let f_is_everything =
            f.id.is_empty() && f.pod_sandbox_id.is_empty() && f.label_selector.is_empty();
        let containers = self
            .list_containers(Some(cri::ContainerFilter {
                id: f.id,
                pod_sandbox_id: f.pod_sandbox_id,
                label_selector: f.label_selector,
                state: Some(cri::ContainerStateValue {
                    state: cri::ContainerState::ContainerRunning as i32,
                }),
            }))
            .await?;
        if f_is_everything {
            let alive: std::collections::HashSet<&str> =
                containers.iter().map(|c| c.id.as_str()).collect();
            self.cgroups.retain(|id| alive.contains(id));
            self.container_cpu.retain(|id| alive.contains(id));
        }
        let results: Vec<_> =
            futures::stream::iter(containers.into_iter().map(|c| self.stats_of(c)))
                .buffer_unordered(STATS_CONCURRENCY)
                .collect()
                .await;
        // A container that stopped between list and stats is skipped.
        Ok(results.into_iter().filter_map(|r| r.ok()).collect())
    }

    async fn sandbox_stats_of(&self, sandbox: cri::PodSandbox) -> Result<cri::PodSandboxStats> {
        let s = self.sample(&sandbox.id).await?;
        let ts = now_ns();
        let containers = self
            .list_container_stats(Some(cri::ContainerStatsFilter {
                pod_sandbox_id: sandbox.id.clone(),
                ..Default::default()
            }))
            .await?;
        let network = self.sandbox_network_usage(&sandbox.id, &s, ts).await;
        let cpu = sandbox_cpu(&cpu_usage(&s, ts), &containers);
        let memory = sandbox_memory(&memory_usage(&s, ts), &containers);
        Ok(cri::PodSandboxStats {
            attributes: Some(cri::PodSandboxAttributes {
                id: sandbox.id.clone(),
                metadata: sandbox.metadata,
                labels: sandbox.labels,
                annotations: sandbox.annotations,
            }),
            linux: Some(cri::LinuxPodSandboxStats {
                cpu: Some(with_nano_cores(&self.sandbox_cpu, &sandbox.id, cpu)),
                memory: Some(memory),
                network,
                process: Some(cri::ProcessUsage {
                    timestamp: ts,
                    process_count: s.pids_stats.as_ref().and_then(|p| p.current).and_then(u64v),
                }),
                containers,
                io: None,
            }),
            windows: None,
        })
    }

    /// PodSandboxStats.
    pub async fn pod_sandbox_stats(&self, id: &str) -> Result<cri::PodSandboxStats> {
        let c = self.inspect_sandbox(id).await?;
        let full = c.id.clone().unwrap_or_else(|| id.to_string());
        let sandbox = self
            .list_pod_sandbox(Some(cri::PodSandboxFilter {
                id: full,
                ..Default::default()
            }))
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| {
                crate::errors::ShimError::NotFound(format!("could not find pod sandbox {id:?}"))
            })?;
        self.sandbox_stats_of(sandbox).await
    }

    /// ListPodSandboxStats: ready sandboxes matching the filter.
    pub async fn list_pod_sandbox_stats(
        &self,
        filter: Option<cri::PodSandboxStatsFilter>,
    ) -> Result<Vec<cri::PodSandboxStats>> {
        let f = filter.unwrap_or_default();
        let everything = f.id.is_empty() && f.label_selector.is_empty();
        let sandboxes = self
            .list_pod_sandbox(Some(cri::PodSandboxFilter {
                id: f.id,
                state: Some(cri::PodSandboxStateValue {
                    state: cri::PodSandboxState::SandboxReady as i32,
                }),
                label_selector: HashMap::new(),
            }))
            .await?
            .into_iter()
            .filter(|s| matches_selector(&s.labels, &f.label_selector))
            .collect::<Vec<_>>();
        if everything {
            let ready: std::collections::HashSet<&str> =
                sandboxes.iter().map(|s| s.id.as_str()).collect();
            self.sandbox_cpu.retain(|id| ready.contains(id));
        }
        let results: Vec<_> =
            futures::stream::iter(sandboxes.into_iter().map(|s| self.sandbox_stats_of(s)))
                .buffer_unordered(8)
                .collect()
                .await;
        Ok(results.into_iter().filter_map(|r| r.ok()).collect())
    }

    /// ListPodSandboxMetrics: the cAdvisor-style metrics the kubelet can scrape, per sandbox.
    pub async fn list_pod_sandbox_metrics(&self) -> Result<Vec<cri::PodSandboxMetrics>> {
        let stats = self.list_pod_sandbox_stats(None).await?;
        let ts = now_ns();
        let metric = |name: &str, t: cri::MetricType, v: u64| cri::Metric {
            name: name.to_string(),
            timestamp: ts,
            metric_type: t as i32,
            label_values: Vec::new(),
            value: u64v(v),
        };
        Ok(stats
            .into_iter()
            .map(|s| {
                let id = s
                    .attributes
                    .as_ref()
                    .map(|a| a.id.clone())
                    .unwrap_or_default();
                let linux = s.linux.unwrap_or_default();
                let container_metrics = linux
                    .containers
                    .iter()
                    .map(|c| cri::ContainerMetrics {
                        container_id: c
                            .attributes
                            .as_ref()
                            .map(|a| a.id.clone())
                            .unwrap_or_default(),
                        metrics: vec![
                            metric(
                                "container_cpu_usage_seconds_total",
                                cri::MetricType::Counter,
                                c.cpu
                                    .as_ref()
                                    .and_then(|u| u.usage_core_nano_seconds.as_ref())
                                    .map(|v| v.value)
                                    .unwrap_or(0),
                            ),
                            metric(
                                "container_memory_working_set_bytes",
                                cri::MetricType::Gauge,
                                c.memory
                                    .as_ref()
                                    .and_then(|m| m.working_set_bytes.as_ref())
                                    .map(|v| v.value)
                                    .unwrap_or(0),
                            ),
                        ],
                    })
                    .collect();
                let mut metrics = Vec::new();
                if let Some(n) = linux
                    .network
                    .as_ref()
                    .and_then(|n| n.default_interface.as_ref())
                {
                    metrics.push(metric(
                        "container_network_receive_bytes_total",
                        cri::MetricType::Counter,
                        n.rx_bytes.as_ref().map(|v| v.value).unwrap_or(0),
                    ));
                    metrics.push(metric(
                        "container_network_transmit_bytes_total",
                        cri::MetricType::Counter,
                        n.tx_bytes.as_ref().map(|v| v.value).unwrap_or(0),
                    ));
                }
                cri::PodSandboxMetrics {
                    pod_sandbox_id: id,
                    metrics,
                    container_metrics,
                }
            })
            .collect())
    }
}

/// The descriptors of the metrics [`Shim::list_pod_sandbox_metrics`] reports.
pub fn metric_descriptors() -> Vec<cri::MetricDescriptor> {
    [
        (
            "container_cpu_usage_seconds_total",
            "Cumulative cpu time consumed in nanoseconds",
        ),
        (
            "container_memory_working_set_bytes",
            "Current working set in bytes",
        ),
        (
            "container_network_receive_bytes_total",
            "Cumulative count of bytes received",
        ),
        (
            "container_network_transmit_bytes_total",
            "Cumulative count of bytes transmitted",
        ),
    ]
    .into_iter()
    .map(|(name, help)| cri::MetricDescriptor {
        name: name.to_string(),
        help: help.to_string(),
        label_keys: Vec::new(),
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{ContainerMemoryStats, ContainerStatsResponse};

    #[test]
    fn netdev_tables_give_interfaces_without_lo() {
        let table = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0
  eth0:    2048      20    3    0    0     0          0         0     1024      10    4    0    0     0       0          0
";
        let n = netdev_usage(table, 7).expect("usage");
        assert_eq!(n.interfaces.len(), 1);
        let eth0 = n.default_interface.expect("default");
        assert_eq!(eth0.name, "eth0");
        assert_eq!(eth0.rx_bytes.map(|v| v.value), Some(2048));
        assert_eq!(eth0.rx_errors.map(|v| v.value), Some(3));
        assert_eq!(eth0.tx_bytes.map(|v| v.value), Some(1024));
        assert_eq!(eth0.tx_errors.map(|v| v.value), Some(4));
        assert!(netdev_usage(&table.lines().take(3).collect::<Vec<_>>().join("\n"), 7).is_none());
    }

    #[test]
    fn working_set_subtracts_inactive_file() {
        let s = ContainerStatsResponse {
            memory_stats: Some(ContainerMemoryStats {
                usage: Some(1000),
                stats: Some(HashMap::from([("inactive_file".to_string(), 300u64)])),
                limit: Some(4000),
                ..Default::default()
            }),
            ..Default::default()
        };
        let m = memory_usage(&s, 1);
        assert_eq!(m.working_set_bytes.unwrap().value, 700);
        assert_eq!(m.usage_bytes.unwrap().value, 1000);
        assert_eq!(m.available_bytes.unwrap().value, 3300);
    }
}
