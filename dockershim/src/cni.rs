//! A CNI runner following the CNI spec (results 0.3.x/0.4.0/1.0.0, plus the
//! old 0.2.0 `ip4`/`ip6` form) and libcni's behaviour as cri-dockerd's
//! `network/cni/cni.go` uses it: the default network is the first valid
//! config in the conf dir (file names sorted; `.conf`, `.conflist`, `.json`;
//! a single `.conf` is wrapped into a list; invalid files are skipped with a
//! logged reason; every plugin binary must exist in the bin dirs). ADD runs
//! the chain in order with `name`/`cniVersion` injected, `prevResult`
//! chained, and `runtimeConfig` built only from capabilities the plugin
//! declares (`portMappings`, `bandwidth`, `ipRanges`, ...); the result is
//! cached like libcni at `<cache>/results/<network>-<containerid>-<ifname>`
//! so DEL (reverse order, cached result as `prevResult`) and CHECK work after
//! a restart. This module owns config loading, plugin execution (tokio, with a
//! timeout), the cache, result parsing and the network readiness status.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;

/// The interface name dockershim gives pods (`network.DefaultInterfaceName`).
pub const DEFAULT_INTERFACE_NAME: &str = "eth0";
/// Extensions of config files considered (libcni `ConfFiles` as called upstream).
pub const CONF_EXTENSIONS: [&str; 3] = ["conf", "conflist", "json"];
/// Upstream `network.CNITimeoutSec` (220 s) for a whole ADD/DEL.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(220);
/// Capability names of the CNI conventions.
pub const CAP_PORT_MAPPINGS: &str = "portMappings";
pub const CAP_BANDWIDTH: &str = "bandwidth";
pub const CAP_IP_RANGES: &str = "ipRanges";
/// Reason of the NetworkReady=false condition.
pub const NETWORK_NOT_READY_REASON: &str = "NetworkPluginNotReady";

/// Errors of the CNI runner.
#[derive(Debug, thiserror::Error)]
pub enum CniError {
    #[error("no networks found in {0}")]
    NoNetworks(PathBuf),
    #[error("no valid networks found in {0}")]
    NoValidNetworks(PathBuf),
    #[error("invalid network config {path}: {reason}")]
    InvalidConfig { path: PathBuf, reason: String },
    #[error("failed to find plugin {plugin:?} in path {path:?}")]
    PluginNotFound { plugin: String, path: Vec<PathBuf> },
    /// The plugin failed and printed a CNI error object.
    #[error("plugin type={plugin:?} failed ({command}): code {code}: {msg}{}", if details.is_empty() { String::new() } else { format!("; {details}") })]
    Plugin {
        plugin: String,
        command: &'static str,
        code: u32,
        msg: String,
        details: String,
    },
    /// The plugin failed without a parseable error object.
    #[error("plugin type={plugin:?} failed ({command}): {status}: {stderr}")]
    PluginExit {
        plugin: String,
        command: &'static str,
        status: String,
        stderr: String,
    },
    #[error("plugin type={plugin:?} ({command}) timed out after {timeout:?}")]
    Timeout {
        plugin: String,
        command: &'static str,
        timeout: Duration,
    },
    #[error("plugin type={plugin:?} returned an invalid result: {reason}")]
    InvalidResult { plugin: String, reason: String },
    #[error("CHECK needs a cached result for {0}")]
    NoCachedResult(String),
    #[error("cni I/O on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CniError + '_ {
    move |source| CniError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One plugin of a network list.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConf {
    /// The `type`: the binary name.
    pub plugin_type: String,
    /// The plugin's JSON object as written in the file.
    pub raw: Map<String, Value>,
}

impl PluginConf {
    /// Whether `capabilities.<cap>` is `true`.
    pub fn has_capability(&self, cap: &str) -> bool {
        self.raw
            .get("capabilities")
            .and_then(|c| c.get(cap))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

/// A network configuration list (libcni `NetworkConfigList`).
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkConfigList {
    pub name: String,
    pub cni_version: String,
    pub disable_check: bool,
    pub plugins: Vec<PluginConf>,
    /// The bytes of the list (the wrapped list for a `.conf`), cached by ADD.
    pub bytes: Vec<u8>,
    /// Where it was loaded from, if from a file.
    pub source: Option<PathBuf>,
}

impl NetworkConfigList {
    /// Parse a `.conflist` document.
    pub fn from_conflist_bytes(bytes: &[u8]) -> Result<Self, String> {
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|e| format!("error parsing configuration list: {e}"))?;
        let obj = v
            .as_object()
            .ok_or("error parsing configuration list: not an object")?;
        let name = obj
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or("error parsing configuration list: no name")?
            .to_string();
        let cni_version = obj
            .get("cniVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let disable_check = match obj.get("disableCheck") {
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) => s.eq_ignore_ascii_case("true"),
            _ => false,
        };
        let plugins = obj
            .get("plugins")
            .and_then(Value::as_array)
            .ok_or("error parsing configuration list: no 'plugins' key")?;
        let mut out = Vec::new();
        for (i, p) in plugins.iter().enumerate() {
            let raw = p
                .as_object()
                .ok_or(format!("plugin {i} is not an object"))?
                .clone();
            let plugin_type = raw
                .get("type")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
                .ok_or(format!("plugin {i} has no 'type'"))?
                .to_string();
            out.push(PluginConf { plugin_type, raw });
        }
        Ok(NetworkConfigList {
            name,
            cni_version,
            disable_check,
            plugins: out,
            bytes: bytes.to_vec(),
            source: None,
        })
    }

    /// Parse a single-plugin `.conf` and wrap it into a list (libcni `ConfListFromConf`).
    pub fn from_conf_bytes(bytes: &[u8]) -> Result<Self, String> {
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|e| format!("error parsing configuration: {e}"))?;
        let obj = v
            .as_object()
            .ok_or("error parsing configuration: not an object")?;
        if obj
            .get("type")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err("no 'type'; perhaps this is a .conflist?".into());
        }
        let list = json!({
            "name": obj.get("name").cloned().unwrap_or(Value::String(String::new())),
            "cniVersion": obj.get("cniVersion").cloned().unwrap_or(Value::String(String::new())),
            "plugins": [v],
        });
        let bytes = serde_json::to_vec(&list).map_err(|e| e.to_string())?;
        Self::from_conflist_bytes(&bytes)
    }

    /// cri-dockerd's loopback network, run before the default network.
    pub fn loopback() -> Self {
        let bytes =
            br#"{"cniVersion":"0.2.0","name":"cni-loopback","plugins":[{"type":"loopback"}]}"#;
        // A constant, known-good document.
        Self::from_conflist_bytes(bytes).unwrap_or_else(|_| NetworkConfigList {
            name: "cni-loopback".into(),
            cni_version: "0.2.0".into(),
            disable_check: false,
            plugins: Vec::new(),
            bytes: bytes.to_vec(),
            source: None,
        })
    }
}

/// Find a plugin binary in the bin dirs (libcni `FindInPath`).
pub fn find_plugin(plugin: &str, bin_dirs: &[PathBuf]) -> Result<PathBuf, CniError> {
    if !plugin.contains('/') {
        for d in bin_dirs {
            let p = d.join(plugin);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    Err(CniError::PluginNotFound {
        plugin: plugin.to_string(),
        path: bin_dirs.to_vec(),
    })
}

/// The sorted config files of `conf_dir` with a CNI extension.
pub fn conf_files(conf_dir: &Path) -> Result<Vec<PathBuf>, CniError> {
    let rd = match std::fs::read_dir(conf_dir) {
        Ok(rd) => rd,
        // libcni: a missing dir is "no files", not an error.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(conf_dir)(e)),
    };
    let mut files = Vec::new();
    for ent in rd {
        let ent = ent.map_err(io_err(conf_dir))?;
        if ent.file_type().map(|t| t.is_dir()).unwrap_or(true) {
            continue;
        }
        let p = ent.path();
        if p.extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| CONF_EXTENSIONS.contains(&e))
        {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}

/// Kubelet/cri-dockerd `getDefaultCNINetwork`: the first valid network.
pub fn load_default_network(
    conf_dir: &Path,
    bin_dirs: &[PathBuf],
) -> Result<NetworkConfigList, CniError> {
    let files = conf_files(conf_dir)?;
    if files.is_empty() {
        return Err(CniError::NoNetworks(conf_dir.to_path_buf()));
    }
    for f in files {
        let bytes = match std::fs::read(&f) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("Error reading CNI config file {}: {e}", f.display());
                continue;
            }
        };
        let parsed = if f.extension().is_some_and(|e| e == "conflist") {
            NetworkConfigList::from_conflist_bytes(&bytes)
        } else {
            NetworkConfigList::from_conf_bytes(&bytes)
        };
        let mut list = match parsed {
            Ok(l) => l,
            Err(reason) => {
                tracing::warn!("Error loading CNI config file {}: {reason}", f.display());
                continue;
            }
        };
        if list.plugins.is_empty() {
            tracing::info!("CNI config list {} has no networks, skipping", f.display());
            continue;
        }
        if let Some(missing) = list
            .plugins
            .iter()
            .find_map(|p| find_plugin(&p.plugin_type, bin_dirs).err())
        {
            tracing::warn!(
                "Error validating CNI config list {}: {missing}",
                f.display()
            );
            continue;
        }
        list.source = Some(f);
        return Ok(list);
    }
    Err(CniError::NoValidNetworks(conf_dir.to_path_buf()))
}

/// Readiness of the pod network, for the CRI `Status` NetworkReady condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkStatus {
    Ready,
    NotReady { reason: String, message: String },
}

impl NetworkStatus {
    /// Upstream: `cni config uninitialized` while no default network is loaded.
    pub fn from_network(net: Option<&NetworkConfigList>) -> Self {
        match net {
            Some(_) => NetworkStatus::Ready,
            None => NetworkStatus::not_ready("cni config uninitialized"),
        }
    }

    /// NotReady with upstream's reason and message prefix.
    pub fn not_ready(err: impl std::fmt::Display) -> Self {
        NetworkStatus::NotReady {
            reason: NETWORK_NOT_READY_REASON.into(),
            message: format!("docker: network plugin is not ready: {err}"),
        }
    }

    pub fn is_ready(&self) -> bool {
        matches!(self, NetworkStatus::Ready)
    }
}

/// One port mapping in the `portMappings` capability format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CniPortMapping {
    pub host_port: i32,
    pub container_port: i32,
    pub protocol: String,
    #[serde(rename = "hostIP")]
    pub host_ip: String,
}

/// The pod-specific inputs of a CNI call (libcni `RuntimeConf`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodNetworkArgs {
    pub pod_namespace: String,
    pub pod_name: String,
    /// Sandbox (infra container) id: CNI_CONTAINERID and K8S_POD_INFRA_CONTAINER_ID.
    pub sandbox_id: String,
    /// Pod UID; added as K8S_POD_UID when set.
    pub pod_uid: Option<String>,
    /// Network namespace path; `None` (e.g. DEL after the sandbox died) gives an empty CNI_NETNS.
    pub netns: Option<String>,
    /// Defaults to `eth0` when empty.
    pub ifname: String,
    /// Capability arguments by capability name (only those a plugin declares are passed).
    pub capability_args: BTreeMap<String, Value>,
}

impl PodNetworkArgs {
    /// Set the `portMappings` capability argument (mappings with host port <= 0 dropped, like upstream).
    pub fn with_port_mappings(mut self, pms: &[CniPortMapping]) -> Self {
        let v: Vec<&CniPortMapping> = pms.iter().filter(|p| p.host_port > 0).collect();
        self.capability_args.insert(
            CAP_PORT_MAPPINGS.into(),
            serde_json::to_value(v).unwrap_or(Value::Array(vec![])),
        );
        self
    }

    fn ifname(&self) -> &str {
        if self.ifname.is_empty() {
            DEFAULT_INTERFACE_NAME
        } else {
            &self.ifname
        }
    }

    /// The `CNI_ARGS` pairs, in upstream's order.
    pub fn cni_args(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("IgnoreUnknown".to_string(), "1".to_string()),
            ("K8S_POD_NAMESPACE".to_string(), self.pod_namespace.clone()),
            ("K8S_POD_NAME".to_string(), self.pod_name.clone()),
            (
                "K8S_POD_INFRA_CONTAINER_ID".to_string(),
                self.sandbox_id.clone(),
            ),
        ];
        if let Some(uid) = &self.pod_uid {
            v.push(("K8S_POD_UID".to_string(), uid.clone()));
        }
        v
    }
}

/// A plugin chain result.
#[derive(Debug, Clone, PartialEq)]
pub struct CniResult {
    pub cni_version: String,
    pub raw: Value,
}

impl CniResult {
    /// IPs of the pod interface: addresses whose `interface` points at the
    /// interface named `ifname` inside a sandbox (all addresses when the
    /// result does not say), IPv4 first, order otherwise kept.
    pub fn ips(&self, ifname: &str) -> Vec<IpAddr> {
        let parse = |s: &str| s.split('/').next().and_then(|a| a.parse::<IpAddr>().ok());
        let mut out: Vec<IpAddr> = Vec::new();
        if let Some(ips) = self.raw.get("ips").and_then(Value::as_array) {
            let ifaces = self.raw.get("interfaces").and_then(Value::as_array);
            let pod_iface = |idx: Option<u64>| -> Option<bool> {
                let i = ifaces?.get(usize::try_from(idx?).ok()?)?;
                Some(
                    i.get("name").and_then(Value::as_str) == Some(ifname)
                        && i.get("sandbox")
                            .and_then(Value::as_str)
                            .is_some_and(|s| !s.is_empty()),
                )
            };
            let all: Vec<(Option<bool>, IpAddr)> = ips
                .iter()
                .filter_map(|ip| {
                    let addr = parse(ip.get("address")?.as_str()?)?;
                    Some((pod_iface(ip.get("interface").and_then(Value::as_u64)), addr))
                })
                .collect();
            let any_known = all.iter().any(|(k, _)| *k == Some(true));
            out = all
                .into_iter()
                .filter(|(k, _)| !any_known || *k == Some(true))
                .map(|(_, a)| a)
                .collect();
        } else {
            for key in ["ip4", "ip6"] {
                if let Some(a) = self
                    .raw
                    .get(key)
                    .and_then(|v| v.get("ip"))
                    .and_then(Value::as_str)
                    .and_then(parse)
                {
                    out.push(a);
                }
            }
        }
        out.sort_by_key(|a| a.is_ipv6());
        out
    }
}

/// libcni's cache entry (`cniCacheV1`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CachedInfo {
    kind: String,
    #[serde(rename = "containerId")]
    container_id: String,
    /// base64 of the network list bytes, like Go's `[]byte` JSON encoding.
    config: String,
    #[serde(rename = "ifName")]
    if_name: String,
    #[serde(rename = "networkName")]
    network_name: String,
    #[serde(rename = "cniArgs", default, skip_serializing_if = "Vec::is_empty")]
    cni_args: Vec<[String; 2]>,
    #[serde(
        rename = "capabilityArgs",
        default,
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    capability_args: BTreeMap<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<Value>,
}

fn base64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Compare dotted CNI versions (missing or empty counts as 0.1.0... i.e. old).
fn version_at_least(v: &str, min: (u64, u64)) -> bool {
    let mut it = v.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    let major = it.next().unwrap_or(0);
    let minor = it.next().unwrap_or(0);
    (major, minor) >= min
}

/// Runs plugin chains.
#[derive(Debug, Clone)]
pub struct CniRunner {
    pub bin_dirs: Vec<PathBuf>,
    pub cache_dir: PathBuf,
    /// Timeout of each plugin invocation.
    pub timeout: Duration,
}

#[derive(Clone, Copy)]
enum Cmd {
    Add,
    Del,
    Check,
}

impl Cmd {
    fn as_str(self) -> &'static str {
        match self {
            Cmd::Add => "ADD",
            Cmd::Del => "DEL",
            Cmd::Check => "CHECK",
        }
    }
}

impl CniRunner {
    pub fn new(bin_dirs: Vec<PathBuf>, cache_dir: impl Into<PathBuf>) -> Self {
        CniRunner {
            bin_dirs,
            cache_dir: cache_dir.into(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// `<cache>/results/<network>-<containerid>-<ifname>`.
    pub fn cache_path(&self, net: &NetworkConfigList, args: &PodNetworkArgs) -> PathBuf {
        self.cache_dir.join("results").join(format!(
            "{}-{}-{}",
            net.name,
            args.sandbox_id,
            args.ifname()
        ))
    }

    /// The stdin document for one plugin (libcni `buildOneConfig` + `injectRuntimeConfig`).
    pub fn plugin_stdin(
        net: &NetworkConfigList,
        plugin: &PluginConf,
        prev: Option<&Value>,
        args: &PodNetworkArgs,
    ) -> Value {
        let mut conf = plugin.raw.clone();
        conf.insert("name".into(), Value::String(net.name.clone()));
        conf.insert("cniVersion".into(), Value::String(net.cni_version.clone()));
        if let Some(p) = prev {
            conf.insert("prevResult".into(), p.clone());
        }
        let rc: Map<String, Value> = args
            .capability_args
            .iter()
            .filter(|(cap, _)| plugin.has_capability(cap))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !rc.is_empty() {
            conf.insert("runtimeConfig".into(), Value::Object(rc));
        }
        Value::Object(conf)
    }

    #[tracing::instrument(level = "trace", name = "cni", skip_all, fields(plugin = %plugin.plugin_type, command = cmd.as_str(), ifname = args.ifname()))]
    async fn exec(
        &self,
        cmd: Cmd,
        net: &NetworkConfigList,
        plugin: &PluginConf,
        prev: Option<&Value>,
        args: &PodNetworkArgs,
    ) -> Result<Vec<u8>, CniError> {
        let bin = find_plugin(&plugin.plugin_type, &self.bin_dirs)?;
        let stdin =
            serde_json::to_vec(&Self::plugin_stdin(net, plugin, prev, args)).unwrap_or_default();
        let cni_args = args
            .cni_args()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(";");
        let cni_path = std::env::join_paths(&self.bin_dirs)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut command = tokio::process::Command::new(&bin);
        command
            .env("CNI_COMMAND", cmd.as_str())
            .env("CNI_CONTAINERID", &args.sandbox_id)
            .env("CNI_NETNS", args.netns.as_deref().unwrap_or(""))
            .env("CNI_IFNAME", args.ifname())
            .env("CNI_ARGS", cni_args)
            .env("CNI_PATH", cni_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // ETXTBSY: the binary was just written and a concurrent fork still
        // holds it open for writing; it clears within milliseconds.
        let mut tries = 0;
        let mut child = loop {
            match command.spawn() {
                Ok(c) => break c,
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 20 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => return Err(io_err(&bin)(e)),
            }
        };
        let mut pipe = child.stdin.take();
        let run = async {
            if let Some(p) = pipe.as_mut() {
                // A plugin may exit without reading stdin; that is its business.
                let _ = p.write_all(&stdin).await;
            }
            drop(pipe);
            child.wait_with_output().await
        };
        let out = match tokio::time::timeout(self.timeout, run).await {
            Ok(r) => r.map_err(io_err(&bin))?,
            Err(_) => {
                return Err(CniError::Timeout {
                    plugin: plugin.plugin_type.clone(),
                    command: cmd.as_str(),
                    timeout: self.timeout,
                });
            }
        };
        if out.status.success() {
            return Ok(out.stdout);
        }
        #[derive(Deserialize)]
        struct ErrObj {
            code: u32,
            #[serde(default)]
            msg: String,
            #[serde(default)]
            details: String,
        }
        match serde_json::from_slice::<ErrObj>(&out.stdout) {
            Ok(e) => Err(CniError::Plugin {
                plugin: plugin.plugin_type.clone(),
                command: cmd.as_str(),
                code: e.code,
                msg: e.msg,
                details: e.details,
            }),
            Err(_) => Err(CniError::PluginExit {
                plugin: plugin.plugin_type.clone(),
                command: cmd.as_str(),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            }),
        }
    }

    /// ADD the pod to the network; caches and returns the final result.
    pub async fn add(
        &self,
        net: &NetworkConfigList,
        args: &PodNetworkArgs,
    ) -> Result<CniResult, CniError> {
        let mut prev: Option<Value> = None;
        for plugin in &net.plugins {
            let stdout = self
                .exec(Cmd::Add, net, plugin, prev.as_ref(), args)
                .await?;
            let v: Value =
                serde_json::from_slice(&stdout).map_err(|e| CniError::InvalidResult {
                    plugin: plugin.plugin_type.clone(),
                    reason: e.to_string(),
                })?;
            if !v.is_object() {
                return Err(CniError::InvalidResult {
                    plugin: plugin.plugin_type.clone(),
                    reason: "not a JSON object".into(),
                });
            }
            prev = Some(v);
        }
        let raw = prev.unwrap_or_else(|| json!({ "cniVersion": net.cni_version }));
        self.write_cache(net, args, &raw)?;
        Ok(CniResult {
            cni_version: raw
                .get("cniVersion")
                .and_then(Value::as_str)
                .unwrap_or(&net.cni_version)
                .to_string(),
            raw,
        })
    }

    /// The cached ADD result, if any.
    pub fn cached_result(&self, net: &NetworkConfigList, args: &PodNetworkArgs) -> Option<Value> {
        let bytes = std::fs::read(self.cache_path(net, args)).ok()?;
        let info: CachedInfo = serde_json::from_slice(&bytes).ok()?;
        info.result
    }

    fn write_cache(
        &self,
        net: &NetworkConfigList,
        args: &PodNetworkArgs,
        result: &Value,
    ) -> Result<(), CniError> {
        let path = self.cache_path(net, args);
        let dir = path.parent().unwrap_or(&self.cache_dir).to_path_buf();
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let info = CachedInfo {
            kind: "cniCacheV1".into(),
            container_id: args.sandbox_id.clone(),
            config: base64(&net.bytes),
            if_name: args.ifname().to_string(),
            network_name: net.name.clone(),
            cni_args: args.cni_args().into_iter().map(|(k, v)| [k, v]).collect(),
            capability_args: args.capability_args.clone(),
            result: Some(result.clone()),
        };
        let data = serde_json::to_vec(&info).unwrap_or_default();
        let tmp = dir.join(format!(
            ".{}.tmp",
            path.file_name().and_then(|n| n.to_str()).unwrap_or("cache")
        ));
        std::fs::write(&tmp, &data)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(io_err(&path))
    }

    /// DEL the pod from the network: plugins in reverse order, each given the
    /// cached ADD result as `prevResult` (CNI >= 0.4.0); the cache is removed
    /// once every plugin succeeded.
    pub async fn del(
        &self,
        net: &NetworkConfigList,
        args: &PodNetworkArgs,
    ) -> Result<(), CniError> {
        let cached = if version_at_least(&net.cni_version, (0, 4)) {
            self.cached_result(net, args)
        } else {
            None
        };
        for plugin in net.plugins.iter().rev() {
            self.exec(Cmd::Del, net, plugin, cached.as_ref(), args)
                .await?;
        }
        let path = self.cache_path(net, args);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    /// CHECK (CNI >= 0.4.0, skipped when `disableCheck`): needs the cached result.
    pub async fn check(
        &self,
        net: &NetworkConfigList,
        args: &PodNetworkArgs,
    ) -> Result<(), CniError> {
        if net.disable_check || !version_at_least(&net.cni_version, (0, 4)) {
            return Ok(());
        }
        let cached = self.cached_result(net, args).ok_or_else(|| {
            CniError::NoCachedResult(self.cache_path(net, args).display().to_string())
        })?;
        for plugin in &net.plugins {
            self.exec(Cmd::Check, net, plugin, Some(&cached), args)
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
