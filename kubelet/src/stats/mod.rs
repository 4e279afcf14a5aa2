//! The node's and pods' resource usage (upstream `pkg/kubelet/stats` with its CRI stats
//! provider, and `server/stats`' summary provider): what `/stats/summary` serves and
//! `/metrics/resource` renders ([`resource_metrics`]). Pods and containers come from the
//! runtime's CRI stats as upstream's `criStatsProvider.listPodStats` builds them (one listing
//! each of sandboxes, containers and container stats; only running containers, and per pod its
//! ready sandbox), with the pod's CPU and memory read from its pod cgroup as cAdvisor reads it
//! ([`cgroup`]; the pause container and exited containers count), or the sum of its
//! containers' when that cgroup cannot be read (upstream's fallback). When the runtime gives no
//! `usage_nano_cores` the kubelet computes it from the previous `usage_core_nano_seconds` sample
//! ([`cpu`]). The node's figures are read from the host ([`node`]: the root cgroup's CPU,
//! `/proc/meminfo` as the eviction manager reads it, `/proc/net/dev`, statvfs).
//!
//! Upstream's rates come from cAdvisor's housekeeping (and the eviction manager's 10 s round);
//! this kubelet's eviction manager asks for stats only when it must rank pods, so a full
//! `/stats/summary` takes the samples itself (each rate is the mean since the previous such
//! request), while `/metrics/resource` and `/stats/summary?only_cpu_and_memory=true` read the
//! last rates without sampling, as upstream's `GetCPUAndMemoryStats` does. Where there is no
//! such rate yet (the first read after start), the rate is the housekeeping task's
//! ([`crate::cadvisor::sampler`]: the node's, each pod cgroup's and each container's cgroup
//! between its last two samples; the node's since the sample taken when the kubelet was made,
//! before the second round), so node and container `usageNanoCores` are there from the first
//! read.
//!
//! Managers layer: imports the runtime manager, [`crate::cri`]'s types and [`crate::fsstats`].

pub mod cgroup;
pub mod cpu;
pub mod node;
pub mod resource_metrics;
pub mod types;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use cri_proto::runtime::v1 as cri;
use k8s_openapi::api::core::v1::Pod;

use crate::cri::RuntimeService;
use crate::fsstats::{dir_usage, fs_stats};
use crate::kuberuntime::sandbox::build_pod_logs_directory;
use crate::kuberuntime::{KubeGenericRuntimeManager, RuntimeError};
use cgroup::CgroupSample;
use cpu::{CpuSample, CpuUsageCache};
use types::*;

/// What a stats request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything (`/stats/summary`); CPU rates are sampled anew.
    Full,
    /// CPU and memory only, with the last CPU rates (`/metrics/resource`,
    /// `/stats/summary?only_cpu_and_memory=true`; upstream `GetCPUAndMemoryStats`).
    CpuAndMemory,
}

/// A pod this kubelet runs, as the summary needs it: its UID and its pod cgroup's directory
/// below the hierarchies (none without pod cgroups).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownPod {
    pub uid: String,
    pub cgroup: Option<PathBuf>,
}

impl KnownPod {
    /// `pod` as the summary needs it; none without a UID.
    pub fn of(pod: &Pod, cm: &crate::cm::ContainerManager) -> Option<KnownPod> {
        Some(KnownPod {
            uid: pod.metadata.uid.clone()?,
            cgroup: cm
                .pod_cgroup_parent(pod)
                .map(|parent| cgroup::cgroup_dir(&parent)),
        })
    }
}

/// One listing of what the runtime has (upstream `listPodStats`' inputs).
#[derive(Debug, Clone, Default)]
pub struct RuntimeListing {
    pub sandboxes: Vec<cri::PodSandbox>,
    pub containers: Vec<cri::Container>,
    pub stats: Vec<cri::ContainerStats>,
    /// The sandboxes' network, by sandbox id ([`Scope::Full`] only).
    pub networks: HashMap<String, NetworkStats>,
}

/// A pod's running containers' CRI stats and listings, as the summary's filesystem part
/// reads them.
pub type RawContainers<'a> = Vec<(&'a cri::ContainerStats, &'a cri::Container)>;

/// A pod's network from its sandbox's CRI stats (upstream `cri_stats_provider`'s
/// `addNetworkStats`: the default interface flattened, every interface listed).
fn network_stats(n: &cri::NetworkUsage) -> NetworkStats {
    let iface = |i: &cri::NetworkInterfaceUsage| InterfaceStats {
        name: i.name.clone(),
        rx_bytes: value(i.rx_bytes.as_ref()),
        rx_errors: value(i.rx_errors.as_ref()),
        tx_bytes: value(i.tx_bytes.as_ref()),
        tx_errors: value(i.tx_errors.as_ref()),
    };
    NetworkStats {
        time: Time::from_unix_nanos(n.timestamp),
        default: n.default_interface.as_ref().map(iface).unwrap_or_default(),
        interfaces: n.interfaces.iter().map(iface).collect(),
    }
}

/// The networks in sandboxes' CRI stats, by sandbox id.
pub fn cri_networks(stats: &[cri::PodSandboxStats]) -> HashMap<String, NetworkStats> {
    stats
        .iter()
        .filter_map(|st| {
            let id = st.attributes.as_ref()?.id.clone();
            let net = st.linux.as_ref()?.network.as_ref()?;
            Some((id, network_stats(net)))
        })
        .collect()
}

/// A network namespace's figures at `time`: its interfaces, `eth0` (or else the first) the
/// default one.
fn namespace_network(time: Time, interfaces: Vec<InterfaceStats>) -> NetworkStats {
    let default = interfaces
        .iter()
        .find(|i| i.name == "eth0")
        .or(interfaces.first())
        .cloned()
        .unwrap_or_default();
    NetworkStats {
        time,
        default,
        interfaces,
    }
}

/// A sandbox's network as upstream's summary takes it on Linux (cAdvisor's figures of the
/// pause container: the `/proc/<pid>/net/dev` table of its process), found under the
/// cgroup mount `root` as the pod cgroup `pod_dir`'s child whose name holds the sandbox's id
/// (as [`crate::cadvisor`]'s inventory finds it); none when there is no such cgroup or
/// process.
fn cgroup_network(root: &Path, pod_dir: &Path, sandbox_id: &str) -> Option<NetworkStats> {
    let child = crate::cadvisor::cgroup::children(root, pod_dir)
        .into_iter()
        .find(|c| c.contains(sandbox_id))?;
    let pid = crate::cadvisor::cgroup::first_pid(root, &pod_dir.join(child))?;
    let interfaces = node::interfaces_of(Some(pid));
    (!interfaces.is_empty()).then(|| namespace_network(Time::now(), interfaces))
}

/// Where a rate is looked up in the housekeeping samples when there is no own one.
#[derive(Debug, Clone, Copy)]
enum Housekept<'a> {
    Node,
    Pod(&'a str),
    Container(&'a str),
}

/// The summary provider's state: the CPU samples rates are computed from, and the
/// housekeeping samples for rates before the first own one.
#[derive(Debug, Default)]
pub struct StatsProvider {
    cpu: CpuUsageCache,
    housekeeping: Option<std::sync::Arc<crate::cadvisor::CadvisorState>>,
}

fn value(v: Option<&cri::UInt64Value>) -> Option<u64> {
    v.map(|v| v.value)
}

fn now_ns() -> i64 {
    chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0)
}

/// statvfs figures of filesystems by mountpoint, each asked once per request.
#[derive(Default)]
struct FsInfos(HashMap<PathBuf, Option<crate::fsstats::FsStats>>);

impl FsInfos {
    fn get(&mut self, path: &Path) -> Option<crate::fsstats::FsStats> {
        *self
            .0
            .entry(path.to_path_buf())
            .or_insert_with(|| fs_stats(path))
    }
}

/// An `FsStats` with `used` bytes and inodes on the filesystem `fs`.
fn fs_usage(
    time: Time,
    fs: Option<crate::fsstats::FsStats>,
    used_bytes: Option<u64>,
    inodes_used: Option<u64>,
) -> FsStats {
    FsStats {
        time,
        available_bytes: fs.map(|f| f.available),
        capacity_bytes: fs.map(|f| f.capacity),
        used_bytes,
        inodes_free: fs.map(|f| f.inodes_free),
        inodes: fs.map(|f| f.inodes),
        inodes_used,
    }
}

/// Upstream `removeTerminatedPods`: per pod (namespace and name), its ready sandboxes, or its
/// newest when none is ready.
pub fn live_sandboxes<'a>(
    sandboxes: impl IntoIterator<Item = &'a cri::PodSandbox>,
) -> Vec<&'a cri::PodSandbox> {
    let mut sandboxes: Vec<&cri::PodSandbox> = sandboxes.into_iter().collect();
    sandboxes.sort_by_key(|s| s.created_at);
    let mut by_pod: HashMap<(&str, &str), Vec<&cri::PodSandbox>> = HashMap::new();
    for s in sandboxes {
        let (namespace, name) = s
            .metadata
            .as_ref()
            .map_or(("", ""), |m| (m.namespace.as_str(), m.name.as_str()));
        by_pod.entry((namespace, name)).or_default().push(s);
    }
    by_pod
        .into_values()
        .flat_map(|mut list| {
            let ready: Vec<&cri::PodSandbox> = list
                .iter()
                .filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
                .copied()
                .collect();
            if ready.is_empty() {
                list.split_off(list.len() - 1)
            } else {
                ready
            }
        })
        .collect()
}

/// The sum of `field` over `items`; `None` when none has it.
fn sum<T>(items: &[T], field: impl Fn(&T) -> Option<u64>) -> Option<u64> {
    items
        .iter()
        .filter_map(field)
        .reduce(|a, b| a.saturating_add(b))
}

/// The key a pod's own (cgroup) CPU samples are kept under.
fn pod_key(uid: &str) -> String {
    format!("pod{uid}")
}

impl StatsProvider {
    /// A provider that falls back on `housekeeping`'s rates.
    pub fn with_housekeeping(housekeeping: std::sync::Arc<crate::cadvisor::CadvisorState>) -> Self {
        Self {
            cpu: CpuUsageCache::default(),
            housekeeping: Some(housekeeping),
        }
    }

    /// The rate of `id` at `sample`: computed against the previous sample for [`Scope::Full`]
    /// (which `sample` replaces), the last one computed for [`Scope::CpuAndMemory`]; without
    /// one, housekeeping's rate of the same cgroup (`hk`).
    fn rate(&self, id: &str, sample: CpuSample, scope: Scope, hk: Housekept<'_>) -> Option<u64> {
        let own = match scope {
            Scope::Full => self.cpu.update(id, sample),
            Scope::CpuAndMemory => self.cpu.cached(id),
        };
        own.or_else(|| {
            let h = self.housekeeping.as_ref()?;
            match hk {
                // Before housekeeping's second round: since its first sample.
                Housekept::Node => h.usage_nano_cores("/").or_else(|| {
                    let last = h.last("/")?;
                    let prev = CpuSample {
                        timestamp: last.wall_ns,
                        usage_core_nano_seconds: last.stats.cpu?.total,
                    };
                    cpu::nano_cores_between(prev, sample)
                }),
                Housekept::Pod(uid) => h.pod_usage_nano_cores(uid),
                Housekept::Container(id) => h.container_usage_nano_cores(id),
            }
        })
    }

    /// A container's `usageNanoCores`: the runtime's when it gives one, else from the
    /// previous sample.
    fn usage_nano_cores(&self, id: &str, cpu: &cri::CpuUsage, scope: Scope) -> Option<u64> {
        if let Some(v) = value(cpu.usage_nano_cores.as_ref()) {
            return Some(v);
        }
        let sample = CpuSample {
            timestamp: cpu.timestamp,
            usage_core_nano_seconds: value(cpu.usage_core_nano_seconds.as_ref())?,
        };
        self.rate(id, sample, scope, Housekept::Container(id))
    }

    /// Upstream `addPodCPUMemoryStats`: the pod cgroup's CPU and memory when it can be read
    /// (`(timestamp, sample)`), else the containers' figures added up.
    fn add_pod_cpu_and_memory(
        &self,
        p: &mut PodStats,
        cgroup: Option<(i64, CgroupSample)>,
        scope: Scope,
    ) {
        let Some((timestamp, s)) = cgroup else {
            sum_pod_cpu_and_memory(p);
            return;
        };
        let time = Time::from_unix_nanos(timestamp);
        let sample = CpuSample {
            timestamp,
            usage_core_nano_seconds: s.cpu,
        };
        p.cpu = Some(CpuStats {
            time,
            usage_nano_cores: self.rate(
                &pod_key(&p.pod_ref.uid),
                sample,
                scope,
                Housekept::Pod(&p.pod_ref.uid),
            ),
            usage_core_nano_seconds: Some(s.cpu),
        });
        p.memory = Some(MemoryStats {
            time,
            available_bytes: s.memory_limit.map(|l| l.saturating_sub(s.working_set)),
            usage_bytes: Some(s.memory_usage),
            working_set_bytes: Some(s.working_set),
            rss_bytes: s.rss,
            page_faults: s.page_faults,
            major_page_faults: s.major_page_faults,
        });
    }

    /// Upstream `makeContainerStats` (with the CRI's memory figures, as its
    /// `PodAndContainerStatsFromCRI` path takes them).
    fn container_stats(
        &self,
        stats: &cri::ContainerStats,
        container: &cri::Container,
        scope: Scope,
    ) -> ContainerStats {
        let id = &container.id;
        let cpu = match &stats.cpu {
            Some(c) => CpuStats {
                time: Time::from_unix_nanos(c.timestamp),
                usage_nano_cores: self.usage_nano_cores(id, c, scope),
                usage_core_nano_seconds: value(c.usage_core_nano_seconds.as_ref()),
            },
            None => CpuStats {
                time: Time::now(),
                usage_nano_cores: Some(0),
                usage_core_nano_seconds: Some(0),
            },
        };
        let memory = match &stats.memory {
            Some(m) => MemoryStats {
                time: Time::from_unix_nanos(m.timestamp),
                available_bytes: value(m.available_bytes.as_ref()),
                usage_bytes: value(m.usage_bytes.as_ref()),
                working_set_bytes: value(m.working_set_bytes.as_ref()),
                rss_bytes: value(m.rss_bytes.as_ref()),
                page_faults: value(m.page_faults.as_ref()),
                major_page_faults: value(m.major_page_faults.as_ref()),
            },
            None => MemoryStats {
                time: Time::now(),
                working_set_bytes: Some(0),
                ..Default::default()
            },
        };
        ContainerStats {
            name: stats
                .attributes
                .as_ref()
                .and_then(|a| a.metadata.as_ref())
                .or(container.metadata.as_ref())
                .map(|m| m.name.clone())
                .unwrap_or_default(),
            start_time: Time::from_unix_nanos(container.created_at),
            cpu: Some(cpu),
            memory: Some(memory),
            rootfs: None,
            logs: None,
        }
    }

    /// Upstream `listPodStats`: one `PodStats` per live sandbox of a pod in `pods` (UIDs) that
    /// has a running container with stats; pod CPU and memory from `pod_cgroup` (the pod
    /// cgroup's sample and when it was taken, by UID) or else its containers' added up.
    /// Filesystem figures are left to the caller.
    pub fn pod_stats<'a>(
        &self,
        listing: &'a RuntimeListing,
        pods: &HashSet<String>,
        pod_cgroup: &dyn Fn(&str) -> Option<(i64, CgroupSample)>,
        scope: Scope,
    ) -> Vec<(PodStats, RawContainers<'a>)> {
        let sandboxes: HashMap<&str, &cri::PodSandbox> = live_sandboxes(
            listing
                .sandboxes
                .iter()
                .filter(|s| s.metadata.as_ref().is_some_and(|m| pods.contains(&m.uid))),
        )
        .into_iter()
        .map(|s| (s.id.as_str(), s))
        .collect();
        let containers: HashMap<&str, &cri::Container> = listing
            .containers
            .iter()
            .filter(|c| c.state == cri::ContainerState::ContainerRunning as i32)
            .map(|c| (c.id.as_str(), c))
            .collect();
        let mut by_sandbox: HashMap<&str, (PodStats, RawContainers<'a>)> = HashMap::new();
        for s in &listing.stats {
            let Some(id) = s.attributes.as_ref().map(|a| a.id.as_str()) else {
                continue;
            };
            let Some(container) = containers.get(id) else {
                continue;
            };
            let Some(sandbox) = sandboxes.get(container.pod_sandbox_id.as_str()) else {
                continue;
            };
            let entry = by_sandbox.entry(sandbox.id.as_str()).or_insert_with(|| {
                let m = sandbox.metadata.clone().unwrap_or_default();
                let pod = PodStats {
                    pod_ref: PodReference {
                        name: m.name,
                        namespace: m.namespace,
                        uid: m.uid,
                    },
                    start_time: Time::from_unix_nanos(sandbox.created_at),
                    ..Default::default()
                };
                (pod, Vec::new())
            });
            entry
                .0
                .containers
                .push(self.container_stats(s, container, scope));
            entry.1.push((s, *container));
        }
        if scope == Scope::Full {
            let mut alive: HashSet<String> = containers.keys().map(|k| k.to_string()).collect();
            alive.extend(pods.iter().map(|uid| pod_key(uid)));
            self.cpu.retain(|id| id == cpu::NODE || alive.contains(id));
        }
        let mut out: Vec<_> = by_sandbox
            .into_iter()
            .map(|(id, (mut p, raw))| {
                if scope == Scope::Full {
                    p.network = listing.networks.get(id).cloned();
                }
                let cgroup = pod_cgroup(&p.pod_ref.uid);
                self.add_pod_cpu_and_memory(&mut p, cgroup, scope);
                (p, raw)
            })
            .collect();
        out.sort_by(|a, b| {
            (&a.0.pod_ref.namespace, &a.0.pod_ref.name)
                .cmp(&(&b.0.pod_ref.namespace, &b.0.pod_ref.name))
        });
        out
    }

    /// The node's CPU: the root cgroup's usage now, rated against the previous sample
    /// ([`Scope::Full`]) or with the last rate.
    fn node_cpu(&self, scope: Scope) -> Option<CpuStats> {
        let usage = node::cpu_usage()?;
        let timestamp = now_ns();
        let sample = CpuSample {
            timestamp,
            usage_core_nano_seconds: usage,
        };
        let usage_nano_cores = self.rate(cpu::NODE, sample, scope, Housekept::Node);
        Some(CpuStats {
            time: Time::from_unix_nanos(timestamp),
            usage_nano_cores,
            usage_core_nano_seconds: Some(usage),
        })
    }

    /// The node's figures (upstream summary provider's `NodeStats`, without system containers).
    fn node_stats(&self, node_name: &str, root_dir: &Path, scope: Scope) -> NodeStats {
        let now = Time::now();
        let meminfo = crate::fsstats::read_meminfo();
        let field = |name| crate::fsstats::meminfo_field(&meminfo, name);
        let (page_faults, major_page_faults) = node::page_faults();
        let memory = field("MemTotal")
            .zip(field("MemAvailable"))
            .map(|(capacity, available)| MemoryStats {
                time: now,
                available_bytes: Some(available),
                usage_bytes: Some(capacity.saturating_sub(available)),
                working_set_bytes: Some(capacity.saturating_sub(available)),
                rss_bytes: None,
                page_faults,
                major_page_faults,
            });
        let mut stats = NodeStats {
            node_name: node_name.to_string(),
            start_time: node::boot_time()
                .map(Time::from_unix_nanos)
                .unwrap_or_default(),
            cpu: self.node_cpu(scope),
            memory,
            ..Default::default()
        };
        if scope == Scope::Full {
            stats.network = Some(namespace_network(now, node::interfaces()));
            stats.fs = fs_stats(root_dir).map(|f| FsStats {
                used_bytes: Some(f.capacity.saturating_sub(f.available)),
                inodes_used: Some(f.inodes.saturating_sub(f.inodes_free)),
                ..fs_usage(now, Some(f), None, None)
            });
            let (maxpid, curproc) = node::task_limits();
            stats.rlimit = Some(RlimitStats {
                time: now,
                maxpid,
                curproc,
            });
        }
        stats
    }

    /// The summary (upstream `summaryProviderImpl.Get`, or `GetCPUAndMemoryStats` for
    /// [`Scope::CpuAndMemory`]) of `pods` ([`KnownPod::of`]; the test bed shares one runtime between kubelets:
    /// the summary covers only the pods this kubelet was given).
    pub async fn summary(
        &self,
        runtime: &KubeGenericRuntimeManager,
        node_name: &str,
        root_dir: &Path,
        pods: &[KnownPod],
        scope: Scope,
    ) -> Result<Summary, RuntimeError> {
        let rt = runtime.runtime_service();
        let (sandboxes, containers, stats) = tokio::try_join!(
            rt.list_pod_sandbox(None),
            rt.list_containers(None),
            rt.list_container_stats(None),
        )?;
        let uids: HashSet<String> = pods.iter().map(|p| p.uid.clone()).collect();
        let cgroups: HashMap<String, PathBuf> = pods
            .iter()
            .filter_map(|p| Some((p.uid.clone(), p.cgroup.clone()?)))
            .collect();
        let networks = if scope == Scope::Full {
            let root = Path::new(node::CGROUP_ROOT);
            sandbox_networks(rt.as_ref(), root, &sandboxes, &uids, &cgroups).await
        } else {
            HashMap::new()
        };
        let listing = RuntimeListing {
            sandboxes,
            containers,
            stats,
            networks,
        };
        let read_cgroup = |uid: &str| {
            let s = cgroup::read(Path::new(node::CGROUP_ROOT), cgroups.get(uid)?)?;
            Some((now_ns(), s))
        };
        let pod_stats = self.pod_stats(&listing, &uids, &read_cgroup, scope);
        let mut node = self.node_stats(node_name, root_dir, scope);
        if scope == Scope::CpuAndMemory {
            return Ok(Summary {
                node,
                pods: pod_stats.into_iter().map(|(p, _)| p).collect(),
            });
        }
        let mut fs = FsInfos::default();
        let root_fs = fs.get(root_dir);
        if let Ok(Some(image)) = runtime.image_fs().await {
            let time = Time::from_unix_nanos(image.timestamp);
            let mount = image.fs_id.as_ref().map(|f| PathBuf::from(&f.mountpoint));
            let info = mount.and_then(|m| fs.get(&m));
            node.runtime = Some(RuntimeStats {
                image_fs: Some(fs_usage(
                    time,
                    info,
                    value(image.used_bytes.as_ref()),
                    value(image.inodes_used.as_ref()),
                )),
            });
        }
        let pods = pod_stats
            .into_iter()
            .map(|(mut p, raw)| {
                add_pod_storage(&mut p, &raw, root_dir, root_fs, &mut fs);
                p
            })
            .collect();
        Ok(Summary { node, pods })
    }
}

/// The network of this node's ready sandboxes (those of `uids`), by sandbox id: read from
/// each one's process as upstream's summary reads it through cAdvisor ([`cgroup_network`]:
/// the runtime is not asked, and containerd answers ListPodSandboxStats slowly, with every
/// container's figures, for a hundred pods), or else, for those whose cgroup or process is
/// not found (no pod cgroups), from the runtime's ListPodSandboxStats: every sandbox's at
/// once, or one by one when that fails ([`own_sandbox_stats`]); a runtime without it
/// (Unimplemented) gives none.
async fn sandbox_networks(
    rt: &dyn RuntimeService,
    root: &Path,
    sandboxes: &[cri::PodSandbox],
    uids: &HashSet<String>,
    pod_dirs: &HashMap<String, PathBuf>,
) -> HashMap<String, NetworkStats> {
    let mut networks = HashMap::new();
    let mut missing = HashSet::new();
    for s in sandboxes {
        let Some(uid) = s
            .metadata
            .as_ref()
            .map(|m| &m.uid)
            .filter(|u| uids.contains(*u))
        else {
            continue;
        };
        if s.state != cri::PodSandboxState::SandboxReady as i32 {
            continue;
        }
        match pod_dirs
            .get(uid)
            .and_then(|d| cgroup_network(root, d, &s.id))
        {
            Some(n) => {
                networks.insert(s.id.clone(), n);
            }
            None => {
                missing.insert(uid.clone());
            }
        }
    }
    if missing.is_empty() {
        return networks;
    }
    let from_runtime = match rt.list_pod_sandbox_stats(None).await {
        Err(e) if e.code() == Some(tonic::Code::Unimplemented) => Vec::new(),
        Err(e) => {
            tracing::debug!(error = %e, "listing every sandbox's stats failed; asking this node's sandboxes one by one");
            own_sandbox_stats(rt, sandboxes, &missing).await
        }
        Ok(v) => v,
    };
    for (id, n) in cri_networks(&from_runtime) {
        networks.entry(id).or_insert(n);
    }
    networks
}

/// The stats of this node's ready sandboxes (those of `uids`), asked one by one; a sandbox
/// that stopped meanwhile is left out. The fallback when listing every sandbox's stats fails:
/// containerd 1.6 fails the whole list when one sandbox stops between its listing and its
/// figures, and on a runtime shared by several kubelets (or with a pod being torn down) that
/// must not fail the summary.
async fn own_sandbox_stats(
    rt: &dyn RuntimeService,
    sandboxes: &[cri::PodSandbox],
    uids: &HashSet<String>,
) -> Vec<cri::PodSandboxStats> {
    let asks = sandboxes
        .iter()
        .filter(|s| {
            s.state == cri::PodSandboxState::SandboxReady as i32
                && s.metadata.as_ref().is_some_and(|m| uids.contains(&m.uid))
        })
        .map(|s| {
            rt.list_pod_sandbox_stats(Some(cri::PodSandboxStatsFilter {
                id: s.id.clone(),
                ..Default::default()
            }))
        });
    futures::future::join_all(asks)
        .await
        .into_iter()
        .filter_map(Result::ok)
        .flatten()
        .collect()
}

/// Upstream `addPodCPUMemoryStats` without a pod cgroup: the containers' figures added up, at
/// the time of the last one.
fn sum_pod_cpu_and_memory(p: &mut PodStats) {
    let cpus: Vec<&CpuStats> = p.containers.iter().filter_map(|c| c.cpu.as_ref()).collect();
    if let Some(last) = cpus.last() {
        p.cpu = Some(CpuStats {
            time: last.time,
            usage_nano_cores: sum(&cpus, |c| c.usage_nano_cores),
            usage_core_nano_seconds: sum(&cpus, |c| c.usage_core_nano_seconds),
        });
    }
    let mems: Vec<&MemoryStats> = p
        .containers
        .iter()
        .filter_map(|c| c.memory.as_ref())
        .collect();
    if let Some(last) = mems.last() {
        p.memory = Some(MemoryStats {
            time: last.time,
            available_bytes: sum(&mems, |m| m.available_bytes),
            usage_bytes: sum(&mems, |m| m.usage_bytes),
            working_set_bytes: sum(&mems, |m| m.working_set_bytes),
            rss_bytes: sum(&mems, |m| m.rss_bytes),
            page_faults: sum(&mems, |m| m.page_faults),
            major_page_faults: sum(&mems, |m| m.major_page_faults),
        });
    }
}

/// The containers' writable layers and logs (upstream `makeContainerStats`' filesystem part)
/// and the pod's ephemeral storage (upstream `calcEphemeralStorage`: writable layers, logs and
/// local volumes on the kubelet's filesystem).
fn add_pod_storage(
    p: &mut PodStats,
    raw: &[(&cri::ContainerStats, &cri::Container)],
    root_dir: &Path,
    root_fs: Option<crate::fsstats::FsStats>,
    fs: &mut FsInfos,
) {
    let now = Time::now();
    let logs_dir = build_pod_logs_directory(&p.pod_ref.namespace, &p.pod_ref.name, &p.pod_ref.uid);
    for (c, (stats, _)) in p.containers.iter_mut().zip(raw) {
        if let Some(w) = &stats.writable_layer {
            let mount = w.fs_id.as_ref().map(|f| PathBuf::from(&f.mountpoint));
            let info = mount.and_then(|m| fs.get(&m));
            c.rootfs = Some(fs_usage(
                Time::from_unix_nanos(w.timestamp),
                info,
                value(w.used_bytes.as_ref()),
                value(w.inodes_used.as_ref()),
            ));
        }
        let (bytes, inodes) = dir_usage(&logs_dir.join(&c.name));
        c.logs = Some(fs_usage(now, root_fs, Some(bytes), Some(inodes)));
    }
    // Local volumes only (upstream `isPodManagedVolume`): a local PV's bind mount is not the
    // pod's ephemeral storage.
    let volumes = root_dir.join("pods").join(&p.pod_ref.uid).join("volumes");
    let (all_bytes, all_inodes) = dir_usage(&volumes);
    let (pv_bytes, pv_inodes) = dir_usage(&volumes.join(crate::volumemanager::LOCAL_VOLUME_PLUGIN));
    let (vol_bytes, vol_inodes) = (
        all_bytes.saturating_sub(pv_bytes),
        all_inodes.saturating_sub(pv_inodes),
    );
    let used = |f: fn(&FsStats) -> Option<u64>| -> u64 {
        p.containers
            .iter()
            .flat_map(|c| [c.rootfs.as_ref(), c.logs.as_ref()])
            .flatten()
            .filter_map(f)
            .sum()
    };
    let bytes = used(|f| f.used_bytes) + vol_bytes;
    let inodes = used(|f| f.inodes_used) + vol_inodes;
    p.ephemeral_storage = Some(fs_usage(now, root_fs, Some(bytes), Some(inodes)));
}

/// Upstream `volumeStatCalculator` for the pods' PersistentVolumeClaim volumes: each pod's
/// `volume[]` lists its claim volumes whose plugin has a metrics provider (the local plugin's
/// `MetricsStatFS`: statfs of the path; hostPath's `MetricsNil` gives none), with their
/// `pvcRef`. `claims` is by pod UID ([`crate::metrics::VolumeMetrics::claims`]).
pub fn add_claim_volumes(
    pods: &mut [PodStats],
    claims: &HashMap<String, Vec<crate::metrics::ClaimVolume>>,
) {
    for p in pods {
        let Some(list) = claims.get(&p.pod_ref.uid) else {
            continue;
        };
        for v in list.iter().filter(|v| v.stat_fs) {
            let Some(s) = crate::fsstats::volume_fs_stats(&v.path) else {
                continue;
            };
            p.volume.push(VolumeStats {
                fs: FsStats {
                    time: Time::now(),
                    available_bytes: Some(s.available),
                    capacity_bytes: Some(s.capacity),
                    used_bytes: Some(s.used),
                    inodes_free: Some(s.inodes_free),
                    inodes: Some(s.inodes),
                    inodes_used: Some(s.inodes_used),
                },
                name: v.volume.clone(),
                pvc_ref: Some(PvcReference {
                    name: v.claim.clone(),
                    namespace: v.namespace.clone(),
                }),
            });
        }
    }
}

#[cfg(test)]
mod tests;
