//! The kubelet's Node object in API-server mode (upstream `kubelet_node_status.go` and
//! `nodelease`): it registers the Node (create, or adopt the existing one), builds the status
//! from the machine and the runtime — addresses, capacity and allocatable, the Ready /
//! MemoryPressure / DiskPressure / PIDPressure conditions with upstream reasons, nodeInfo,
//! images, daemonEndpoints — and writes it only when it changed or the report frequency has
//! passed, and it keeps the node's Lease in `kube-node-lease` renewed. It owns no task: the
//! caller runs [`NodeStatusSyncer::sync`] every `--node-status-update-frequency` and
//! [`LeaseRenewer::renew`] every quarter of the lease duration.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints,
    NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;

use crate::fsstats::mem_total;

/// The namespace of node leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// Errors talking to the API server.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("{what}: {source}")]
    Api {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
}

fn api(what: &'static str) -> impl FnOnce(kube::Error) -> NodeError {
    move |source| NodeError::Api { what, source }
}

/// Facts about the machine that go into the Node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Machine {
    pub cpus: u64,
    pub memory_bytes: u64,
    pub ephemeral_storage_bytes: u64,
    pub kernel_version: String,
    pub os_image: String,
    pub architecture: String,
    pub boot_id: String,
    pub machine_id: String,
    pub system_uuid: String,
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// `PRETTY_NAME` of an os-release text.
pub fn pretty_name(os_release: &str) -> String {
    os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".to_string())
}

impl Machine {
    /// Reads this machine's facts; `root_dir` is where ephemeral storage is measured.
    pub fn read(root_dir: &std::path::Path) -> Machine {
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get() as u64)
            .unwrap_or(1);
        let mut storage = 0;
        if let Ok(c) = std::ffi::CString::new(root_dir.as_os_str().as_encoded_bytes()) {
            // SAFETY: statvfs(3) on a NUL-terminated path into a zeroed struct we own.
            let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
            if unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0 {
                storage = st.f_blocks as u64 * st.f_frsize as u64;
            }
        }
        Machine {
            cpus,
            memory_bytes: mem_total(&read_trim("/proc/meminfo")),
            ephemeral_storage_bytes: storage,
            kernel_version: read_trim("/proc/sys/kernel/osrelease"),
            os_image: pretty_name(&read_trim("/etc/os-release")),
            architecture: match std::env::consts::ARCH {
                "x86_64" => "amd64".into(),
                "aarch64" => "arm64".into(),
                other => other.into(),
            },
            boot_id: read_trim("/proc/sys/kernel/random/boot_id"),
            machine_id: read_trim("/etc/machine-id"),
            system_uuid: read_trim("/sys/class/dmi/id/product_uuid"),
        }
    }
}

/// What the kubelet knows that goes into its Node.
#[derive(Debug, Clone, Default)]
pub struct NodeSpecInputs {
    pub node_name: String,
    pub node_ip: String,
    pub hostname: String,
    pub max_pods: u32,
    pub labels: BTreeMap<String, String>,
    pub kubelet_port: i32,
    /// `docker://20.10.24` or `containerd://1.6.20`.
    pub container_runtime_version: String,
    pub kubelet_version: String,
    /// What allocatable holds back per resource in base units (millicores, bytes): kube- and
    /// system-reserved plus the hard eviction thresholds.
    pub reserved: BTreeMap<String, i64>,
}

/// The machine's capacity per resource in base units: `cpu` in millicores, `memory` and
/// `ephemeral-storage` in bytes, `pods`.
pub fn capacity(m: &Machine, max_pods: u32) -> BTreeMap<String, i64> {
    let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    BTreeMap::from([
        ("cpu".to_string(), i(m.cpus).saturating_mul(1000)),
        ("memory".to_string(), i(m.memory_bytes)),
        (
            "ephemeral-storage".to_string(),
            i(m.ephemeral_storage_bytes),
        ),
        ("pods".to_string(), i64::from(max_pods)),
    ])
}

/// A base-unit amount as the Node shows it: whole cores or millicores, `Ki` for byte amounts
/// that divide by 1024.
fn quantity_of(resource: &str, v: i64) -> Quantity {
    Quantity(match resource {
        "cpu" if v % 1000 == 0 => (v / 1000).to_string(),
        "cpu" => format!("{v}m"),
        "memory" | "ephemeral-storage" if v % 1024 == 0 => format!("{}Ki", v / 1024),
        _ => v.to_string(),
    })
}

/// The Node to register: its name and the upstream well-known labels plus `--node-labels`.
pub fn initial_node(i: &NodeSpecInputs, m: &Machine) -> Node {
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), i.hostname.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), m.architecture.clone()),
        ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
        (
            "beta.kubernetes.io/arch".to_string(),
            m.architecture.clone(),
        ),
    ]);
    labels.extend(i.labels.clone());
    Node {
        metadata: ObjectMeta {
            name: Some(i.node_name.clone()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                "volumes.kubernetes.io/controller-managed-attach-detach".to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Health the conditions report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Health {
    /// Why the node is not ready (runtime down, PLEG unhealthy, ...); None when ready.
    pub not_ready: Option<String>,
    pub memory_pressure: bool,
    pub disk_pressure: bool,
    pub pid_pressure: bool,
}

fn condition(
    typ: &str,
    on: bool,
    reason_on: &str,
    msg_on: &str,
    reason_off: &str,
    msg_off: &str,
    now: &Time,
) -> NodeCondition {
    NodeCondition {
        type_: typ.to_string(),
        status: if on { "True" } else { "False" }.to_string(),
        reason: Some(if on { reason_on } else { reason_off }.to_string()),
        message: Some(if on { msg_on } else { msg_off }.to_string()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    }
}

/// The node status, keeping each condition's lastTransitionTime from `previous` when its
/// status did not change.
pub fn node_status(
    i: &NodeSpecInputs,
    m: &Machine,
    health: &Health,
    images: Vec<ContainerImage>,
    previous: Option<&NodeStatus>,
) -> NodeStatus {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let ready = health.not_ready.is_none();
    let not_ready_msg = health.not_ready.clone().unwrap_or_default();
    let mut conditions = vec![
        condition(
            "MemoryPressure",
            health.memory_pressure,
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            &now,
        ),
        condition(
            "DiskPressure",
            health.disk_pressure,
            "KubeletHasDiskPressure",
            "kubelet has disk pressure",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
            &now,
        ),
        condition(
            "PIDPressure",
            health.pid_pressure,
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
            &now,
        ),
        condition(
            "Ready",
            ready,
            "KubeletReady",
            "kubelet is posting ready status",
            "KubeletNotReady",
            &not_ready_msg,
            &now,
        ),
    ];
    if let Some(prev) = previous.and_then(|p| p.conditions.as_ref()) {
        for c in &mut conditions {
            if let Some(p) = prev.iter().find(|p| p.type_ == c.type_)
                && p.status == c.status
            {
                c.last_transition_time = p.last_transition_time.clone();
            }
        }
    }
    let q = |s: String| Quantity(s);
    let capacity = BTreeMap::from([
        ("cpu".to_string(), q(m.cpus.to_string())),
        (
            "memory".to_string(),
            q(format!("{}Ki", m.memory_bytes / 1024)),
        ),
        (
            "ephemeral-storage".to_string(),
            q(format!("{}Ki", m.ephemeral_storage_bytes / 1024)),
        ),
        ("pods".to_string(), q(i.max_pods.to_string())),
    ]);
    NodeStatus {
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: i.node_ip.clone(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: i.hostname.clone(),
            },
        ]),
        allocatable: Some(
            crate::resource::allocatable(&self::capacity(m, i.max_pods), &[&i.reserved])
                .into_iter()
                .map(|(k, v)| {
                    let q = quantity_of(&k, v);
                    (k, q)
                })
                .collect(),
        ),
        capacity: Some(capacity),
        conditions: Some(conditions),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: i.kubelet_port,
            }),
        }),
        images: Some(images),
        node_info: Some(NodeSystemInfo {
            architecture: m.architecture.clone(),
            boot_id: m.boot_id.clone(),
            container_runtime_version: i.container_runtime_version.clone(),
            kernel_version: m.kernel_version.clone(),
            kube_proxy_version: String::new(),
            kubelet_version: i.kubelet_version.clone(),
            machine_id: m.machine_id.clone(),
            operating_system: "linux".into(),
            os_image: m.os_image.clone(),
            system_uuid: m.system_uuid.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Upstream's default `nodeStatusMaxImages`.
pub const DEFAULT_NODE_STATUS_MAX_IMAGES: i32 = 50;

/// The top 50 images by size, as upstream reports them by default.
pub fn top_images(images: Vec<(Vec<String>, u64)>) -> Vec<ContainerImage> {
    top_images_max(images, DEFAULT_NODE_STATUS_MAX_IMAGES)
}

/// The `max` largest images (`nodeStatusMaxImages`: -1 is no cap, 0 none).
pub fn top_images_max(mut images: Vec<(Vec<String>, u64)>, max: i32) -> Vec<ContainerImage> {
    images.sort_by_key(|i| std::cmp::Reverse(i.1));
    let take = usize::try_from(max).unwrap_or(usize::MAX);
    images
        .into_iter()
        .take(take)
        .map(|(names, size)| ContainerImage {
            names: Some(names),
            size_bytes: Some(size as i64),
        })
        .collect()
}

/// A status with the heartbeat times blanked: two statuses that compare equal this way differ
/// only by the passing of time.
fn without_heartbeats(s: &NodeStatus) -> NodeStatus {
    let mut s = s.clone();
    if let Some(cs) = s.conditions.as_mut() {
        for c in cs {
            c.last_heartbeat_time = None;
        }
    }
    s
}

/// Registers the Node and writes its status when it changes.
pub struct NodeStatusSyncer {
    nodes: Api<Node>,
    name: String,
    /// Write at least this often even without a change (`--node-status-report-frequency`).
    report_frequency: Duration,
    last: Option<(Instant, NodeStatus)>,
    /// How many status writes were made (for tests and metrics).
    pub writes: u64,
}

impl NodeStatusSyncer {
    pub fn new(client: Client, name: &str, report_frequency: Duration) -> Self {
        Self {
            nodes: Api::all(client),
            name: name.to_string(),
            report_frequency,
            last: None,
            writes: 0,
        }
    }

    /// Creates the Node, or adopts the one that exists (keeping its uid). Returns it.
    pub async fn register(&mut self, node: &Node) -> Result<Node, NodeError> {
        match self.nodes.create(&PostParams::default(), node).await {
            Ok(n) => Ok(n),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let existing = self.nodes.get(&self.name).await.map_err(api("get node"))?;
                self.last = existing.status.clone().map(|s| (Instant::now(), s));
                Ok(existing)
            }
            Err(e) => Err(api("create node")(e)),
        }
    }

    /// Writes `status` when it differs from the last one written (heartbeats aside) or the
    /// report frequency has passed. Returns whether it wrote.
    pub async fn sync(&mut self, status: NodeStatus) -> Result<bool, NodeError> {
        if let Some((at, prev)) = &self.last
            && without_heartbeats(prev) == without_heartbeats(&status)
            && at.elapsed() < self.report_frequency
        {
            return Ok(false);
        }
        let patch = serde_json::json!({ "status": status });
        self.nodes
            .patch_status(
                &self.name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
            .map_err(api("patch node status"))?;
        self.writes += 1;
        self.last = Some((Instant::now(), status));
        Ok(true)
    }

    /// The status last written.
    pub fn last_status(&self) -> Option<&NodeStatus> {
        self.last.as_ref().map(|(_, s)| s)
    }
}

/// Keeps the node's Lease current.
pub struct LeaseRenewer {
    leases: Api<Lease>,
    name: String,
    duration_seconds: i32,
    owner: Option<OwnerReference>,
    /// How many renewals were written.
    pub renewals: u64,
    /// The lease as last written (upstream `latestLease`): renewals update it with one PUT,
    /// without reading it first; a conflict or a missing lease falls back to a GET.
    latest: Option<Lease>,
}

impl LeaseRenewer {
    /// `node` (once registered) becomes the lease's owner, as upstream.
    pub fn new(client: Client, name: &str, duration_seconds: i32, node: Option<&Node>) -> Self {
        let owner = node.and_then(|n| {
            Some(OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: n.metadata.name.clone()?,
                uid: n.metadata.uid.clone()?,
                ..Default::default()
            })
        });
        Self {
            leases: Api::namespaced(client, LEASE_NAMESPACE),
            name: name.to_string(),
            duration_seconds,
            owner,
            renewals: 0,
            latest: None,
        }
    }

    /// How often to renew: a quarter of the lease duration.
    pub fn interval(&self) -> Duration {
        Duration::from_secs((self.duration_seconds.max(4) / 4) as u64)
    }

    /// Creates or renews the lease (renewTime now, holder this node).
    pub async fn renew(&mut self) -> Result<Lease, NodeError> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let spec = LeaseSpec {
            holder_identity: Some(self.name.clone()),
            lease_duration_seconds: Some(self.duration_seconds),
            renew_time: Some(now),
            ..Default::default()
        };
        if let Some(mut l) = self.latest.take() {
            l.spec = Some(spec.clone());
            match self
                .leases
                .replace(&self.name, &PostParams::default(), &l)
                .await
            {
                Ok(l) => {
                    self.renewals += 1;
                    self.latest = Some(l.clone());
                    return Ok(l);
                }
                // Changed or gone behind our back: read it again below.
                Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
                Err(e) => return Err(api("renew lease")(e)),
            }
        }
        let lease = match self
            .leases
            .get_opt(&self.name)
            .await
            .map_err(api("get lease"))?
        {
            Some(mut l) => {
                l.spec = Some(spec);
                self.leases
                    .replace(&self.name, &PostParams::default(), &l)
                    .await
                    .map_err(api("renew lease"))?
            }
            None => {
                let l = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        namespace: Some(LEASE_NAMESPACE.into()),
                        owner_references: self.owner.clone().map(|o| vec![o]),
                        ..Default::default()
                    },
                    spec: Some(spec),
                };
                self.leases
                    .create(&PostParams::default(), &l)
                    .await
                    .map_err(api("create lease"))?
            }
        };
        self.renewals += 1;
        self.latest = Some(lease.clone());
        Ok(lease)
    }
}

/// The node's IP as every part of the kubelet sees it (upstream: the Node's `InternalIP`,
/// which the pods' `hostIP`, the downward API's `status.hostIP`, host-network probes and the
/// serving certificate's SANs follow): the first address of `--node-ip` when given, else
/// detected, and detected again at every node status update (upstream's `NodeAddress`
/// setter), so that a changed address reaches everything that watches it.
#[derive(Debug, Clone)]
pub struct NodeIp {
    flag: Option<String>,
    current: std::sync::Arc<tokio::sync::watch::Sender<String>>,
}

/// `--node-ip` (upstream 1.26 `ParseNodeIPArgument`): a comma-separated single IP or
/// dual-stack pair, whose first address is the node's; an unparsable entry is ignored with a
/// log line, as upstream. `None` when no address is given.
pub fn parse_node_ip_flag(flag: Option<&str>) -> Result<Option<String>, NodeIpError> {
    let mut ips: Vec<std::net::IpAddr> = Vec::new();
    for part in flag.unwrap_or("").split(',').map(str::trim) {
        if part.is_empty() {
            continue;
        }
        match part.parse() {
            Ok(ip) => ips.push(ip),
            Err(_) => tracing::info!(ip = part, "Could not parse node IP. Ignoring"),
        }
    }
    if ips.len() > 2 || (ips.len() == 2 && ips[0].is_ipv6() == ips[1].is_ipv6()) {
        return Err(NodeIpError {
            value: flag.unwrap_or_default().to_string(),
        });
    }
    Ok(ips.first().map(|ip| ip.to_string()))
}

/// `--node-ip` that upstream 1.26 refuses (`ParseNodeIPArgument`).
#[derive(Debug, thiserror::Error)]
#[error("{value:?}: must contain either a single IP or a dual-stack pair of IPs")]
pub struct NodeIpError {
    value: String,
}

impl NodeIp {
    /// `flag`, already parsed by [`parse_node_ip_flag`], or else the detected address.
    pub fn new(flag: Option<String>) -> NodeIp {
        let initial = flag.clone().unwrap_or_else(node_ip);
        NodeIp {
            flag,
            current: std::sync::Arc::new(tokio::sync::watch::Sender::new(initial)),
        }
    }

    /// A fixed address (tests).
    pub fn fixed(ip: &str) -> NodeIp {
        NodeIp {
            flag: Some(ip.to_string()),
            current: std::sync::Arc::new(tokio::sync::watch::Sender::new(ip.to_string())),
        }
    }

    /// The current address.
    pub fn get(&self) -> String {
        self.current.borrow().clone()
    }

    /// Detects the address again when no `--node-ip` was given; returns the current one.
    pub fn refresh(&self) -> String {
        if self.flag.is_none() {
            self.set(node_ip());
        }
        self.get()
    }

    /// Records `ip` as the current address; watchers see a change only when it differs.
    pub fn set(&self, ip: String) {
        self.current.send_if_modified(|cur| {
            let changed = *cur != ip;
            if changed {
                tracing::info!(old = %cur, new = %ip, "the node's IP changed");
                *cur = ip;
            }
            changed
        });
    }

    /// Watches the address.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<String> {
        self.current.subscribe()
    }
}

/// The node's primary IP (the source address of the default route), or loopback.
pub fn node_ip() -> String {
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("8.8.8.8:53")?;
            s.local_addr()
        })
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "127.0.0.1".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> NodeSpecInputs {
        NodeSpecInputs {
            node_name: "n1".into(),
            node_ip: "10.0.0.5".into(),
            hostname: "n1".into(),
            max_pods: 110,
            kubelet_port: 10250,
            container_runtime_version: "docker://20.10.24".into(),
            kubelet_version: "v1.34.0".into(),
            ..Default::default()
        }
    }

    #[test]
    fn machine_texts_parse() {
        assert_eq!(
            mem_total("MemTotal:       2048 kB\nMemFree: 1 kB\n"),
            2048 * 1024
        );
        assert_eq!(
            pretty_name("NAME=x\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"),
            "Debian GNU/Linux 12 (bookworm)"
        );
    }

    #[test]
    fn status_has_capacity_conditions_and_info() {
        let m = Machine {
            cpus: 2,
            memory_bytes: 4 << 30,
            ephemeral_storage_bytes: 10 << 30,
            architecture: "amd64".into(),
            ..Default::default()
        };
        let s = node_status(&inputs(), &m, &Health::default(), Vec::new(), None);
        let cap = s.capacity.as_ref().expect("capacity");
        assert_eq!(cap["pods"].0, "110");
        assert_eq!(cap["memory"].0, "4194304Ki");
        let ready = s
            .conditions
            .as_ref()
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .expect("Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("True", Some("KubeletReady"))
        );
        assert_eq!(
            s.node_info
                .as_ref()
                .map(|i| i.container_runtime_version.as_str()),
            Some("docker://20.10.24")
        );
    }

    #[test]
    fn transitions_keep_their_time_until_the_status_flips() {
        let m = Machine::default();
        let first = node_status(&inputs(), &m, &Health::default(), Vec::new(), None);
        let mut older = first.clone();
        for c in older.conditions.as_mut().expect("conditions") {
            c.last_transition_time = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        }
        let same = node_status(&inputs(), &m, &Health::default(), Vec::new(), Some(&older));
        let t = |s: &NodeStatus, typ: &str| {
            s.conditions
                .as_ref()
                .and_then(|c| c.iter().find(|c| c.type_ == typ))
                .and_then(|c| c.last_transition_time.clone())
        };
        assert_eq!(t(&same, "Ready"), t(&older, "Ready"));
        let sick = Health {
            not_ready: Some("container runtime is down".into()),
            ..Default::default()
        };
        let flipped = node_status(&inputs(), &m, &sick, Vec::new(), Some(&older));
        assert_ne!(t(&flipped, "Ready"), t(&older, "Ready"));
        assert!(without_heartbeats(&same) == without_heartbeats(&older));
    }

    #[test]
    fn top_images_are_the_largest_fifty() {
        let imgs: Vec<_> = (0..60u64).map(|i| (vec![format!("i{i}")], i)).collect();
        assert_eq!(top_images_max(imgs.clone(), 0).len(), 0);
        assert_eq!(top_images_max(imgs.clone(), -1).len(), imgs.len());
        assert_eq!(top_images_max(imgs.clone(), 3).len(), 3);
        let top = top_images(imgs);
        assert_eq!(top.len(), 50);
        assert_eq!(top[0].size_bytes, Some(59));
    }

    #[test]
    fn allocatable_is_capacity_less_what_is_reserved() {
        let m = Machine {
            cpus: 4,
            memory_bytes: 8 << 30,
            ephemeral_storage_bytes: 100 << 30,
            ..Default::default()
        };
        let mut i = inputs();
        i.reserved = BTreeMap::from([
            ("cpu".to_string(), 1100),
            ("memory".to_string(), (1 << 30) + (100 << 20)),
            ("ephemeral-storage".to_string(), 10 << 30),
        ]);
        let s = node_status(&i, &m, &Health::default(), Vec::new(), None);
        let a = s.allocatable.expect("allocatable");
        let c = s.capacity.expect("capacity");
        assert_eq!(c["cpu"].0, "4");
        assert_eq!(a["cpu"].0, "2900m");
        assert_eq!(c["memory"].0, "8388608Ki");
        assert_eq!(a["memory"].0, format!("{}Ki", 8388608 - 1048576 - 102400));
        assert_eq!(
            a["ephemeral-storage"].0,
            format!("{}Ki", (90u64 << 30) / 1024)
        );
        assert_eq!(a["pods"], c["pods"]);
    }
}
