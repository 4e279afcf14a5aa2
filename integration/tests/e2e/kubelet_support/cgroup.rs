//! A container's CPU cgroup files as the tests read them to check the kubelet's served figures:
//! found through the container's pid (CRI ContainerStatus, verbose), v1 or v2.

use std::path::{Path, PathBuf};

use cri_proto::runtime::v1 as cri;
use integration::runtimes::clients;

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The container's cgroup files: cumulative CPU and the CFS counters.
#[derive(Debug, Clone)]
pub struct CgroupFiles {
    /// v1: `cpuacct.usage`; v2: `cpu.stat` (`usage_usec`).
    usage: PathBuf,
    /// `cpu.stat` with `nr_periods` and `nr_throttled`.
    cpu_stat: PathBuf,
    v2: bool,
    /// The cgroup's path below the hierarchies (cAdvisor's `id`).
    pub id: String,
}

/// One reading of a container's CPU counters.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuReading {
    /// Cumulative CPU time, seconds.
    pub usage: f64,
    /// CFS enforcement periods (`nr_periods`).
    pub periods: f64,
    /// Throttled periods (`nr_throttled`).
    pub throttled: f64,
}

fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

impl CgroupFiles {
    /// The cgroup of process `pid`, from `/proc/<pid>/cgroup`.
    pub fn of_pid(pid: i64) -> CgroupFiles {
        let table = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("proc cgroup");
        let root = Path::new(CGROUP_ROOT);
        let (mut cpuacct, mut cpu, mut unified) = (None, None, None);
        for line in table.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(_), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let dir = root.join(controllers).join(path.trim_start_matches('/'));
            if controllers.is_empty() {
                unified = Some((root.join(path.trim_start_matches('/')), path.to_string()));
            } else if controllers.split(',').any(|c| c == "cpuacct") {
                cpuacct = Some((dir.clone(), path.to_string()));
            }
            if controllers.split(',').any(|c| c == "cpu") {
                cpu = Some(dir);
            }
        }
        match (cpuacct, cpu, unified) {
            (Some((cpuacct, id)), Some(cpu), _) => CgroupFiles {
                usage: cpuacct.join("cpuacct.usage"),
                cpu_stat: cpu.join("cpu.stat"),
                v2: false,
                id,
            },
            (None, None, Some((dir, id))) => CgroupFiles {
                usage: dir.join("cpu.stat"),
                cpu_stat: dir.join("cpu.stat"),
                v2: true,
                id,
            },
            other => panic!("no cgroup in {table:?}: {other:?}"),
        }
    }

    /// The counters now.
    pub fn read(&self) -> CpuReading {
        self.try_read()
            .unwrap_or_else(|| panic!("cannot read the cgroup files of {self:?}"))
    }

    /// The counters now, `None` when the files cannot be read (the container is gone).
    pub fn try_read(&self) -> Option<CpuReading> {
        let usage = if self.v2 {
            keyed(&std::fs::read_to_string(&self.usage).ok()?, "usage_usec")? as f64 / 1e6
        } else {
            std::fs::read_to_string(&self.usage)
                .ok()?
                .trim()
                .parse::<u64>()
                .ok()? as f64
                / 1e9
        };
        let stat = std::fs::read_to_string(&self.cpu_stat).ok()?;
        Some(CpuReading {
            usage,
            periods: keyed(&stat, "nr_periods")? as f64,
            throttled: keyed(&stat, "nr_throttled")? as f64,
        })
    }
}

/// The pid of container `id` on the runtime at `endpoint` (CRI ContainerStatus, verbose).
pub async fn container_pid(endpoint: &str, id: &str) -> Option<i64> {
    let (mut rt, _) = clients(endpoint).await.ok()?;
    let st = rt
        .container_status(cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: true,
        })
        .await
        .ok()?
        .into_inner();
    let info: serde_json::Value = serde_json::from_str(st.info.get("info")?).ok()?;
    info["pid"].as_i64().filter(|p| *p > 0)
}
