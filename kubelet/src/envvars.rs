//! Container environment (upstream `kubelet_pods.go` `makeEnvironmentVariables`, the
//! downward API helpers in `pkg/api/v1/resource` and `third_party/forked/golang/expansion`).
//! This module owns `$(VAR)` expansion exactly like upstream's expansion package, the values a
//! standalone kubelet can provide (`value`, `fieldRef`, `resourceFieldRef`), and the errors
//! for sources that need the API server (`configMapKeyRef`, `secretKeyRef`, `envFrom`), which
//! upstream reports as "no kubeClient defined" when it has no API server client.
//!
//! It also owns the docker-link style service variables (upstream `envvars.FromServices` and
//! `getServiceEnvVarMap`): from the [`ServiceStore`] the API-server mode's service watch
//! (`config::apiserver::watch_services`) keeps, a container sees `{SVC}_SERVICE_HOST`,
//! `{SVC}_SERVICE_PORT[_{PORT}]`, `{SVC}_PORT` and `{SVC}_PORT_{port}_{PROTO}[_PROTO|_PORT|_ADDR]`
//! for every service with a cluster IP in its namespace (when `enableServiceLinks`, default
//! true) and for the master service `kubernetes` of namespace `default` always. Without an API
//! server there is no store and no service variables.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector, Service};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::resource::parse_quantity_scaled;

const OPERATOR: u8 = b'$';
const REFERENCE_OPENER: u8 = b'(';
const REFERENCE_CLOSER: u8 = b')';

/// Environment errors (the container waits with `CreateContainerConfigError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    /// A configMap or secret could not be had: none of that name, no such key, or no API
    /// server (standalone mode: "couldn't get configMap ns/x, no kubeClient defined").
    #[error("{0}")]
    Api(String),
    /// A `fieldRef` names an unsupported field.
    #[error("unsupported fieldPath: {0}")]
    FieldPath(String),
    /// A `resourceFieldRef` is invalid.
    #[error("{0}")]
    ResourceField(String),
    /// An `envFrom` entry has no source.
    #[error("envFrom entry without configMapRef or secretRef")]
    EmptyEnvFrom,
    /// A pod from the API server while the service watch has not listed once yet (upstream
    /// `serviceHasSynced`).
    #[error("services have not yet been read at least once, cannot construct envvars")]
    ServicesNotSynced,
}

/// The namespace of the master services (upstream `--master-service-namespace`, default
/// `default`).
pub const MASTER_SERVICE_NAMESPACE: &str = "default";
/// The master services, whose variables every pod gets (upstream `masterServices`).
pub const MASTER_SERVICES: &[&str] = &["kubernetes"];

/// The services of all namespaces as the API server's watch last told them (upstream's service
/// informer: `serviceLister` and `serviceHasSynced`).
pub type ServiceStore = crate::util::informer::Informer<Service>;

/// Upstream `IsServiceIPSet`: a cluster IP that is neither empty nor `None`.
pub fn is_service_ip_set(s: &Service) -> bool {
    s.spec
        .as_ref()
        .and_then(|sp| sp.cluster_ip.as_deref())
        .is_some_and(|ip| !ip.is_empty() && ip != "None")
}

/// Upstream `makeEnvVariableName`: `-` becomes `_`, upper case.
fn env_variable_name(s: &str) -> String {
    s.replace('-', "_").to_uppercase()
}

/// Upstream `net.JoinHostPort`: an IPv6 address in brackets.
fn join_host_port(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Upstream `envvars.FromServices`: for each service with a cluster IP, in the given order,
/// `{SVC}_SERVICE_HOST`, `{SVC}_SERVICE_PORT` (first port), `{SVC}_SERVICE_PORT_{NAME}` (named
/// ports), then the docker link variables (`makeLinkVariables`): `{SVC}_PORT` (first port) and
/// per port `{SVC}_PORT_{port}_{PROTO}` with `_PROTO`, `_PORT` and `_ADDR`.
pub fn from_services(services: &[Service]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for s in services {
        if !is_service_ip_set(s) {
            continue;
        }
        let Some(spec) = s.spec.as_ref() else {
            continue;
        };
        let ip = spec.cluster_ip.clone().unwrap_or_default();
        let prefix = env_variable_name(s.metadata.name.as_deref().unwrap_or_default());
        let ports = spec.ports.as_deref().unwrap_or_default();
        out.push((format!("{prefix}_SERVICE_HOST"), ip.clone()));
        // Validation requires a port of a service with a cluster IP; upstream would panic.
        let Some(first) = ports.first() else {
            continue;
        };
        let port_var = format!("{prefix}_SERVICE_PORT");
        out.push((port_var.clone(), first.port.to_string()));
        for p in ports {
            if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
                out.push((
                    format!("{port_var}_{}", env_variable_name(name)),
                    p.port.to_string(),
                ));
            }
        }
        for (i, p) in ports.iter().enumerate() {
            let protocol = p
                .protocol
                .as_deref()
                .filter(|p| !p.is_empty())
                .unwrap_or("TCP");
            let url = format!(
                "{}://{}",
                protocol.to_lowercase(),
                join_host_port(&ip, p.port)
            );
            if i == 0 {
                out.push((format!("{prefix}_PORT"), url.clone()));
            }
            let port_prefix = format!("{prefix}_PORT_{}_{}", p.port, protocol.to_uppercase());
            out.push((port_prefix.clone(), url));
            out.push((format!("{port_prefix}_PROTO"), protocol.to_lowercase()));
            out.push((format!("{port_prefix}_PORT"), p.port.to_string()));
            out.push((format!("{port_prefix}_ADDR"), ip.clone()));
        }
    }
    out
}

/// Upstream `getServiceEnvVarMap`: the variables of the services a pod of namespace `ns`
/// sees: the master services of [`MASTER_SERVICE_NAMESPACE`] always, the services of `ns`
/// when `enable_service_links` (a service of `ns` wins over a master service of the same
/// name). Services without a cluster IP give nothing.
pub fn service_env_var_map(
    services: &[Service],
    ns: &str,
    enable_service_links: bool,
) -> BTreeMap<String, String> {
    let mut by_name: BTreeMap<String, &Service> = BTreeMap::new();
    for s in services.iter().filter(|s| is_service_ip_set(s)) {
        let name = s.metadata.name.clone().unwrap_or_default();
        let svc_ns = s.metadata.namespace.as_deref().unwrap_or_default();
        if svc_ns == MASTER_SERVICE_NAMESPACE && MASTER_SERVICES.contains(&name.as_str()) {
            by_name.entry(name).or_insert(s);
        } else if svc_ns == ns && enable_service_links {
            by_name.insert(name, s);
        }
    }
    let mapped: Vec<Service> = by_name.into_values().cloned().collect();
    from_services(&mapped).into_iter().collect()
}

/// Upstream `IsEnvVarName`: printable ASCII, not starting with a digit, no `=`.
fn is_env_var_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'=')
}

/// Upstream `syntaxWrap`: `$(name)`.
fn syntax_wrap(name: &str) -> String {
    format!("$({name})")
}

/// Upstream `tryReadVariableName`: (text to write, is a variable name, bytes consumed after
/// the operator).
fn try_read_variable_name(input: &[u8]) -> (Vec<u8>, bool, usize) {
    match input.first() {
        Some(&OPERATOR) => (vec![OPERATOR], false, 1),
        Some(&REFERENCE_OPENER) => {
            for i in 1..input.len() {
                if input[i] == REFERENCE_CLOSER {
                    return (input[1..i].to_vec(), true, i + 1);
                }
            }
            (vec![OPERATOR, REFERENCE_OPENER], false, 1)
        }
        Some(&c) => (vec![OPERATOR, c], false, 1),
        None => (vec![OPERATOR], false, 0),
    }
}

/// Upstream `expansion.Expand`: `$(VAR)` becomes `mapping(VAR)`, `$$` becomes `$`, any other
/// `$x` and an unterminated `$(` are kept as written.
pub fn expand_with(input: &str, mapping: impl Fn(&str) -> String) -> String {
    let b = input.as_bytes();
    let mut buf: Vec<u8> = Vec::with_capacity(b.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < b.len() {
        if b[cursor] == OPERATOR && cursor + 1 < b.len() {
            buf.extend_from_slice(&b[checkpoint..cursor]);
            let (read, is_var, advance) = try_read_variable_name(&b[cursor + 1..]);
            if is_var {
                buf.extend_from_slice(mapping(&String::from_utf8_lossy(&read)).as_bytes());
            } else {
                buf.extend_from_slice(&read);
            }
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    if checkpoint < b.len() {
        buf.extend_from_slice(&b[checkpoint..]);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// Upstream `MappingFuncFor` over one map: defined names map to their value, others stay
/// `$(NAME)`.
pub fn expand(input: &str, vars: &HashMap<String, String>) -> String {
    expand_with(input, |name| {
        vars.get(name).cloned().unwrap_or_else(|| syntax_wrap(name))
    })
}

/// Upstream `podFieldSelectorRuntimeValue` for the downward API.
pub fn pod_field_value(pod: &Pod, path: &str, pod_ips: &[String], host_ip: &str) -> Option<String> {
    let m = &pod.metadata;
    let spec = pod.spec.as_ref();
    let keyed = |prefix: &str, map: Option<&BTreeMap<String, String>>| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(map.and_then(|m| m.get(key)).cloned().unwrap_or_default())
    };
    match path {
        "metadata.name" => m.name.clone(),
        "metadata.namespace" => m.namespace.clone(),
        "metadata.uid" => m.uid.clone(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()),
        "status.hostIP" | "status.hostIPs" => Some(host_ip.to_string()),
        "status.podIP" => Some(pod_ips.first().cloned().unwrap_or_default()),
        "status.podIPs" => Some(pod_ips.join(",")),
        _ => keyed("metadata.labels['", m.labels.as_ref())
            .or_else(|| keyed("metadata.annotations['", m.annotations.as_ref())),
    }
}

/// `metadata.labels` / `metadata.annotations` as `key="value"` lines, sorted (upstream
/// `fieldpath.FormatMap`, for downwardAPI volume files).
pub fn format_map(m: Option<&BTreeMap<String, String>>) -> String {
    m.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}\n", serde_json::Value::String(v.clone())))
        .collect::<String>()
        .trim_end_matches('\n')
        .to_string()
}

/// The node's allocatable CPU (millicores) and memory (bytes), used for unset limits
/// (upstream `MergeContainerResourceLimits` with the node allocatable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeAllocatable {
    /// CPU in millicores.
    pub milli_cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage: i64,
}

impl NodeAllocatable {
    /// This machine's capacity, detected once (root filesystem `/`).
    pub fn node() -> Self {
        static NODE: std::sync::OnceLock<NodeAllocatable> = std::sync::OnceLock::new();
        *NODE.get_or_init(|| Self::detect(std::path::Path::new("/")))
    }

    /// This machine's capacity: online CPUs, `MemTotal`, and the root filesystem's size.
    pub fn detect(root_dir: &std::path::Path) -> Self {
        let cpus = std::thread::available_parallelism()
            .map(|n| i64::try_from(n.get()).unwrap_or(1))
            .unwrap_or(1);
        let memory = i64::try_from(crate::fsstats::mem_total(&crate::fsstats::read_meminfo()))
            .unwrap_or(i64::MAX);
        let ephemeral_storage = crate::fsstats::fs_capacity(root_dir)
            .map(|(cap, _)| i64::try_from(cap).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Self {
            milli_cpu: cpus * 1000,
            memory,
            ephemeral_storage,
        }
    }
}

fn quantity(m: Option<&BTreeMap<String, Quantity>>, k: &str, scale: f64) -> Option<i64> {
    m.and_then(|m| m.get(k))
        .and_then(|q| parse_quantity_scaled(&q.0, scale))
}

/// Upstream `ExtractContainerResourceValue` after `MergeContainerResourceLimits`: the value of
/// `limits.cpu|memory|ephemeral-storage` or `requests.*` in units of the divisor (rounded up).
/// Unset limits are the node's allocatable; unset requests fall back to the limit given in the
/// spec (the API server's defaulting), else 0.
pub fn container_resource_value(
    fs: &ResourceFieldSelector,
    c: &Container,
    node: &NodeAllocatable,
) -> Result<String, EnvError> {
    let res = c.resources.as_ref();
    let limits = res.and_then(|r| r.limits.as_ref());
    let requests = res.and_then(|r| r.requests.as_ref());
    let (kind, name) = fs.resource.split_once('.').ok_or_else(|| {
        EnvError::ResourceField(format!("unsupported container resource : {}", fs.resource))
    })?;
    let scale = if name == "cpu" { 1000.0 } else { 1.0 };
    let node_value = match name {
        "cpu" => node.milli_cpu,
        "memory" => node.memory,
        "ephemeral-storage" => node.ephemeral_storage,
        _ if name.starts_with("hugepages-") => 0,
        _ => {
            return Err(EnvError::ResourceField(format!(
                "unsupported container resource : {}",
                fs.resource
            )));
        }
    };
    let value = match kind {
        "limits" => quantity(limits, name, scale).unwrap_or(node_value),
        "requests" => quantity(requests, name, scale)
            .or_else(|| quantity(limits, name, scale))
            .unwrap_or(0),
        _ => {
            return Err(EnvError::ResourceField(format!(
                "unsupported container resource : {}",
                fs.resource
            )));
        }
    };
    let divisor = fs
        .divisor
        .as_ref()
        .filter(|d| !d.0.is_empty() && d.0 != "0")
        .map(|d| {
            parse_quantity_scaled(&d.0, scale)
                .filter(|v| *v > 0)
                .ok_or_else(|| EnvError::ResourceField(format!("invalid divisor {:?}", d.0)))
        })
        .transpose()?
        .unwrap_or(if name == "cpu" { 1000 } else { 1 });
    // ceil(value / divisor) for non-negative values.
    let v = (value + divisor - 1).div_euclid(divisor);
    Ok(v.to_string())
}

/// Upstream `makeEnvironmentVariables`: `envFrom` (configMap/secret need the API server:
/// without one an error, even when optional, like upstream without a client), then `env`
/// entries in order: `value` (with `$(VAR)` expansion against what is defined so far, then the
/// service variables), `fieldRef`, `resourceFieldRef`, `configMapKeyRef`/`secretKeyRef`; last
/// the service variables (sorted by name) that the container does not define itself.
/// `services` is the API-server mode's service store (`None` without an API server: no
/// service variables); a pod from the API server gets no environment before the store listed
/// once ([`EnvError::ServicesNotSynced`]), static pods do not wait.
#[allow(clippy::too_many_arguments)]
pub fn make_environment_variables(
    c: &Container,
    pod: &Pod,
    pod_ips: &[String],
    host_ip: &str,
    node: &NodeAllocatable,
    objects: &crate::apiobjects::ApiObjects,
    services: Option<&ServiceStore>,
) -> Result<Vec<(String, String)>, EnvError> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    if let Some(store) = services
        && !crate::types::is_static_pod(pod)
        && !store.has_synced()
    {
        return Err(EnvError::ServicesNotSynced);
    }
    // The API server defaults `enableServiceLinks` to true (upstream errors on nil).
    let enable_service_links = pod
        .spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true);
    let service_env = services
        .map(|s| service_env_var_map(&s.list(), &ns, enable_service_links))
        .unwrap_or_default();
    let mut vars: HashMap<String, String> = HashMap::new();
    let mut out: Vec<(String, String)> = Vec::new();
    for e in c.env_from.iter().flatten() {
        let data = if let Some(cm) = &e.config_map_ref {
            objects
                .config_map_data(&cm.name, cm.optional.unwrap_or(false))
                .map_err(EnvError::Api)?
        } else if let Some(s) = &e.secret_ref {
            objects
                .secret_data(&s.name, s.optional.unwrap_or(false))
                .map_err(EnvError::Api)?
        } else {
            return Err(EnvError::EmptyEnvFrom);
        };
        let prefix = e.prefix.clone().unwrap_or_default();
        for (k, v) in data.into_iter().flatten() {
            let name = format!("{prefix}{k}");
            // Upstream skips keys that are no valid variable names (and reports an event).
            if !is_env_var_name(&name) {
                continue;
            }
            let value = String::from_utf8_lossy(&v).into_owned();
            vars.insert(name.clone(), value.clone());
            out.retain(|(n, _)| n != &name);
            out.push((name, value));
        }
    }
    for e in c.env.iter().flatten() {
        let value = if let Some(vf) = &e.value_from {
            if let Some(f) = &vf.field_ref {
                pod_field_value(pod, &f.field_path, pod_ips, host_ip)
                    .ok_or_else(|| EnvError::FieldPath(f.field_path.clone()))?
            } else if let Some(r) = &vf.resource_field_ref {
                let target = r
                    .container_name
                    .as_deref()
                    .filter(|n| !n.is_empty() && *n != c.name);
                let container = match target {
                    None => c,
                    Some(name) => pod
                        .spec
                        .as_ref()
                        .and_then(|s| {
                            s.containers
                                .iter()
                                .chain(s.init_containers.iter().flatten())
                                .find(|x| x.name == name)
                        })
                        .ok_or_else(|| {
                            EnvError::ResourceField(format!(
                                "resourceFieldRef: container {name:?} not found"
                            ))
                        })?,
                };
                container_resource_value(r, container, node)?
            } else if let Some(k) = &vf.config_map_key_ref {
                let optional = k.optional.unwrap_or(false);
                let data = objects
                    .config_map_data(&k.name, optional)
                    .map_err(EnvError::Api)?;
                match data.as_ref().and_then(|d| d.get(&k.key)) {
                    Some(v) => String::from_utf8_lossy(v).into_owned(),
                    None if optional => continue,
                    None => {
                        return Err(EnvError::Api(format!(
                            "couldn't find key {} in ConfigMap {ns}/{}",
                            k.key, k.name
                        )));
                    }
                }
            } else if let Some(k) = &vf.secret_key_ref {
                let optional = k.optional.unwrap_or(false);
                let data = objects
                    .secret_data(&k.name, optional)
                    .map_err(EnvError::Api)?;
                match data.as_ref().and_then(|d| d.get(&k.key)) {
                    Some(v) => String::from_utf8_lossy(v).into_owned(),
                    None if optional => continue,
                    None => {
                        return Err(EnvError::Api(format!(
                            "couldn't find key {} in Secret {ns}/{}",
                            k.key, k.name
                        )));
                    }
                }
            } else {
                String::new()
            }
        } else {
            // Upstream `MappingFuncFor(tmpEnv, serviceEnv)`.
            expand_with(e.value.as_deref().unwrap_or_default(), |name| {
                vars.get(name)
                    .or_else(|| service_env.get(name))
                    .cloned()
                    .unwrap_or_else(|| syntax_wrap(name))
            })
        };
        vars.insert(e.name.clone(), value.clone());
        out.retain(|(k, _)| k != &e.name);
        out.push((e.name.clone(), value));
    }
    // The container's own variables win over the services'.
    out.extend(
        service_env
            .into_iter()
            .filter(|(k, _)| !vars.contains_key(k)),
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ConfigMapEnvSource, EnvFromSource, EnvVar, EnvVarSource, ResourceRequirements,
        SecretKeySelector,
    };

    #[test]
    fn expansion_matches_upstream_cases() {
        // The upstream expand_test.go table (a subset, same mapping).
        let vars: HashMap<String, String> = [
            ("VAR_A", "A"),
            ("VAR_B", "B"),
            ("VAR_C", "C"),
            ("VAR_REF", "$(VAR_A)"),
            ("VAR_EMPTY", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (input, want) in [
            ("$(VAR_A)", "A"),
            ("___$(VAR_B)___", "___B___"),
            ("$(VAR_A)-$(VAR_A)", "A-A"),
            ("f000-$$VAR_A", "f000-$VAR_A"),
            ("foo\\$(VAR_C)bar", "foo\\Cbar"),
            ("foo\\\\$(VAR_C)bar", "foo\\\\Cbar"),
            ("$(VAR_A)$(VAR_B)$(VAR_C)", "ABC"),
            ("$(VAR_REF)", "$(VAR_A)"),
            ("foo$(VAR_EMPTY)bar", "foobar"),
            ("$(VAR_DNE)", "$(VAR_DNE)"),
            ("$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"),
            ("$$$$$$(VAR_A)", "$$$(VAR_A)"),
            ("$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)"),
            ("$$$$$$$(VAR_A)", "$$$A"),
            ("--$($($($($--", "--$($($($($--"),
            ("$($($($($--foo$(", "$($($($($--foo$("),
            ("foo0--$($($($(", "foo0--$($($($("),
            ("$(foo$$var)", "$(foo$$var)"),
            ("$(VAR_A", "$(VAR_A"),
            ("$?_boo_$!", "$?_boo_$!"),
            ("$$(VAR_A)", "$(VAR_A)"),
            ("$$$(VAR_A)", "$A"),
            ("$", "$"),
            ("foo$", "foo$"),
            ("$()", "$()"),
            ("$(VAR_A)$", "A$"),
            ("héllo $(VAR_A) wörld", "héllo A wörld"),
        ] {
            assert_eq!(expand(input, &vars), want, "input {input:?}");
        }
    }

    fn resource_pod() -> (Pod, Container) {
        let c = Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                limits: Some(BTreeMap::from([
                    ("cpu".to_string(), Quantity("1500m".into())),
                    ("memory".to_string(), Quantity("64Mi".into())),
                ])),
                requests: Some(BTreeMap::from([(
                    "cpu".to_string(),
                    Quantity("250m".into()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("ns".into());
        (pod, c)
    }

    #[test]
    fn resource_field_ref_values() {
        let (_, c) = resource_pod();
        let node = NodeAllocatable {
            milli_cpu: 4000,
            memory: 8 << 30,
            ephemeral_storage: 100 << 30,
        };
        let v = |res: &str, div: Option<&str>| {
            container_resource_value(
                &ResourceFieldSelector {
                    resource: res.into(),
                    divisor: div.map(|d| Quantity(d.into())),
                    ..Default::default()
                },
                &c,
                &node,
            )
        };
        assert_eq!(v("limits.cpu", None).as_deref(), Ok("2"), "rounded up");
        assert_eq!(v("limits.cpu", Some("1m")).as_deref(), Ok("1500"));
        assert_eq!(v("requests.cpu", Some("1m")).as_deref(), Ok("250"));
        assert_eq!(v("limits.memory", None).as_deref(), Ok("67108864"));
        assert_eq!(v("limits.memory", Some("1Mi")).as_deref(), Ok("64"));
        assert_eq!(
            v("requests.memory", Some("1Mi")).as_deref(),
            Ok("64"),
            "request defaults to the limit"
        );
        assert_eq!(
            v("limits.ephemeral-storage", Some("1Gi")).as_deref(),
            Ok("100"),
            "unset limit: node allocatable"
        );
        let none = Container::default();
        assert_eq!(
            container_resource_value(
                &ResourceFieldSelector {
                    resource: "limits.cpu".into(),
                    ..Default::default()
                },
                &none,
                &node
            )
            .as_deref(),
            Ok("4")
        );
        assert!(v("limits.gpu", None).is_err());
        assert!(v("bogus", None).is_err());
    }

    #[test]
    fn env_sources_and_standalone_errors() {
        let (mut pod, mut c) = resource_pod();
        pod.metadata.name = Some("web".into());
        let node = NodeAllocatable {
            milli_cpu: 2000,
            memory: 1 << 30,
            ephemeral_storage: 0,
        };
        let standalone = crate::apiobjects::ApiObjects::standalone("ns");
        let var = |name: &str, value: Option<&str>, from: Option<EnvVarSource>| EnvVar {
            name: name.into(),
            value: value.map(str::to_string),
            value_from: from,
        };
        c.env = Some(vec![
            var(
                "POD",
                None,
                Some(EnvVarSource {
                    field_ref: Some(k8s_openapi::api::core::v1::ObjectFieldSelector {
                        field_path: "metadata.name".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            ),
            var(
                "MEM",
                None,
                Some(EnvVarSource {
                    resource_field_ref: Some(ResourceFieldSelector {
                        resource: "limits.memory".into(),
                        divisor: Some(Quantity("1Mi".into())),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            ),
            var("A", Some("$(POD)-$(MEM)-$(LATER)-$$(POD)"), None),
            var("LATER", Some("x"), None),
            var("POD", Some("override"), None),
        ]);
        let env =
            make_environment_variables(&c, &pod, &[], "", &node, &standalone, None).expect("env");
        assert_eq!(
            env,
            vec![
                ("MEM".to_string(), "64".to_string()),
                ("A".to_string(), "web-64-$(LATER)-$(POD)".to_string()),
                ("LATER".to_string(), "x".to_string()),
                ("POD".to_string(), "override".to_string()),
            ]
        );
        let mut with_from = c.clone();
        with_from.env_from = Some(vec![EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: "settings".into(),
                optional: Some(true),
            }),
            ..Default::default()
        }]);
        let err = make_environment_variables(&with_from, &pod, &[], "", &node, &standalone, None)
            .expect_err("configMap in standalone");
        assert_eq!(
            err.to_string(),
            "couldn't get configMap ns/settings, no kubeClient defined"
        );
        let mut with_secret = c.clone();
        with_secret.env = Some(vec![var(
            "S",
            None,
            Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: "creds".into(),
                    key: "k".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        )]);
        let err = make_environment_variables(&with_secret, &pod, &[], "", &node, &standalone, None)
            .expect_err("secret in standalone");
        assert_eq!(
            err.to_string(),
            "couldn't get secret ns/creds, no kubeClient defined"
        );

        // With the API server: envFrom (with a prefix, invalid names skipped), then keyed
        // values; a missing required key names it.
        let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "settings"}, "data": {"MODE": "fast", "1BAD": "x"}
        }))
        .unwrap();
        let secret: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "creds"}, "data": {"k": "c2VjcmV0"}
            }))
            .unwrap();
        let api = crate::apiobjects::ApiObjects::from_objects("ns", vec![cm], vec![secret]);
        let mut both = with_secret.clone();
        both.env_from = with_from.env_from.clone();
        if let Some(f) = both.env_from.as_mut() {
            f[0].prefix = Some("CFG_".into());
        }
        let env = make_environment_variables(&both, &pod, &[], "", &node, &api, None).expect("env");
        assert_eq!(
            env,
            vec![
                ("CFG_1BAD".to_string(), "x".to_string()),
                ("CFG_MODE".to_string(), "fast".to_string()),
                ("S".to_string(), "secret".to_string()),
            ]
        );
        let mut missing = with_secret.clone();
        if let Some(v) = missing.env.as_mut() {
            v[0].value_from
                .as_mut()
                .unwrap()
                .secret_key_ref
                .as_mut()
                .unwrap()
                .key = "nope".into();
        }
        let err = make_environment_variables(&missing, &pod, &[], "", &node, &api, None)
            .expect_err("missing key");
        assert_eq!(err.to_string(), "couldn't find key nope in Secret ns/creds");
        if let Some(v) = missing.env.as_mut() {
            v[0].value_from
                .as_mut()
                .unwrap()
                .secret_key_ref
                .as_mut()
                .unwrap()
                .optional = Some(true);
        }
        let env =
            make_environment_variables(&missing, &pod, &[], "", &node, &api, None).expect("env");
        assert!(
            env.is_empty(),
            "an optional missing key is skipped: {env:?}"
        );
    }

    fn service(ns: &str, name: &str, ip: &str, ports: serde_json::Value) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": ns, "name": name},
            "spec": {"clusterIP": ip, "ports": ports}
        }))
        .expect("service")
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Upstream `FromServices`: names, values and order (named ports, the docker link
    /// variables, IPv6 in brackets, protocol defaulting to TCP), no variables without a
    /// cluster IP.
    #[test]
    fn from_services_matches_upstream() {
        let services = vec![
            service(
                "ns",
                "foo-bar",
                "1.2.3.4",
                serde_json::json!([{"name": "http", "port": 8080, "protocol": "TCP"},
                                   {"name": "https", "port": 8081, "protocol": "UDP"}]),
            ),
            service(
                "ns",
                "super-ipv6",
                "2001:DB8::",
                serde_json::json!([
                {"name": "u-d-p", "port": 8084, "protocol": "UDP"},
                {"name": "t-c-p", "port": 8083, "protocol": "TCP"}]),
            ),
            service("ns", "headless", "None", serde_json::json!([{"port": 80}])),
            service("ns", "no-ip", "", serde_json::json!([{"port": 80}])),
            service(
                "ns",
                "abc-123",
                "5.6.7.8",
                serde_json::json!([{"port": 8083}]),
            ),
        ];
        assert_eq!(
            from_services(&services),
            pairs(&[
                ("FOO_BAR_SERVICE_HOST", "1.2.3.4"),
                ("FOO_BAR_SERVICE_PORT", "8080"),
                ("FOO_BAR_SERVICE_PORT_HTTP", "8080"),
                ("FOO_BAR_SERVICE_PORT_HTTPS", "8081"),
                ("FOO_BAR_PORT", "tcp://1.2.3.4:8080"),
                ("FOO_BAR_PORT_8080_TCP", "tcp://1.2.3.4:8080"),
                ("FOO_BAR_PORT_8080_TCP_PROTO", "tcp"),
                ("FOO_BAR_PORT_8080_TCP_PORT", "8080"),
                ("FOO_BAR_PORT_8080_TCP_ADDR", "1.2.3.4"),
                ("FOO_BAR_PORT_8081_UDP", "udp://1.2.3.4:8081"),
                ("FOO_BAR_PORT_8081_UDP_PROTO", "udp"),
                ("FOO_BAR_PORT_8081_UDP_PORT", "8081"),
                ("FOO_BAR_PORT_8081_UDP_ADDR", "1.2.3.4"),
                ("SUPER_IPV6_SERVICE_HOST", "2001:DB8::"),
                ("SUPER_IPV6_SERVICE_PORT", "8084"),
                ("SUPER_IPV6_SERVICE_PORT_U_D_P", "8084"),
                ("SUPER_IPV6_SERVICE_PORT_T_C_P", "8083"),
                ("SUPER_IPV6_PORT", "udp://[2001:DB8::]:8084"),
                ("SUPER_IPV6_PORT_8084_UDP", "udp://[2001:DB8::]:8084"),
                ("SUPER_IPV6_PORT_8084_UDP_PROTO", "udp"),
                ("SUPER_IPV6_PORT_8084_UDP_PORT", "8084"),
                ("SUPER_IPV6_PORT_8084_UDP_ADDR", "2001:DB8::"),
                ("SUPER_IPV6_PORT_8083_TCP", "tcp://[2001:DB8::]:8083"),
                ("SUPER_IPV6_PORT_8083_TCP_PROTO", "tcp"),
                ("SUPER_IPV6_PORT_8083_TCP_PORT", "8083"),
                ("SUPER_IPV6_PORT_8083_TCP_ADDR", "2001:DB8::"),
                ("ABC_123_SERVICE_HOST", "5.6.7.8"),
                ("ABC_123_SERVICE_PORT", "8083"),
                ("ABC_123_PORT", "tcp://5.6.7.8:8083"),
                ("ABC_123_PORT_8083_TCP", "tcp://5.6.7.8:8083"),
                ("ABC_123_PORT_8083_TCP_PROTO", "tcp"),
                ("ABC_123_PORT_8083_TCP_PORT", "8083"),
                ("ABC_123_PORT_8083_TCP_ADDR", "5.6.7.8"),
            ])
        );
    }

    fn cluster() -> Vec<Service> {
        let port = |p: i32| serde_json::json!([{"port": p, "protocol": "TCP"}]);
        vec![
            service("default", "kubernetes", "10.0.0.1", port(443)),
            service("default", "other", "10.0.0.2", port(80)),
            service("test", "kubernetes", "10.0.0.3", port(8443)),
            service("test", "web", "10.0.0.4", port(8080)),
            service("test", "headless", "None", port(9)),
            service("elsewhere", "db", "10.0.0.5", port(5432)),
        ]
    }

    /// Upstream `TestMakeEnvironmentVariables`'s service cases: the master service always,
    /// the pod's namespace's with `enableServiceLinks`, a same-named service of the pod's
    /// namespace over the master one, nothing from other namespaces or without a cluster IP.
    #[test]
    fn service_env_var_map_selects_as_upstream() {
        let hosts = |ns: &str, links: bool| {
            service_env_var_map(&cluster(), ns, links)
                .into_iter()
                .filter(|(k, _)| k.ends_with("_SERVICE_HOST"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            hosts("test", true),
            pairs(&[
                ("KUBERNETES_SERVICE_HOST", "10.0.0.3"),
                ("WEB_SERVICE_HOST", "10.0.0.4"),
            ])
        );
        assert_eq!(
            hosts("test", false),
            pairs(&[("KUBERNETES_SERVICE_HOST", "10.0.0.1")])
        );
        assert_eq!(
            hosts("default", true),
            pairs(&[
                ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
                ("OTHER_SERVICE_HOST", "10.0.0.2"),
            ])
        );
        assert_eq!(
            hosts("default", false),
            pairs(&[("KUBERNETES_SERVICE_HOST", "10.0.0.1")])
        );
        let all = service_env_var_map(&cluster(), "test", true);
        assert_eq!(all["KUBERNETES_PORT"], "tcp://10.0.0.3:8443");
        assert_eq!(all.len(), 2 * 7, "{all:?}");
    }

    #[test]
    fn environment_with_services() {
        use k8s_openapi::api::core::v1::EnvVar;
        let node = NodeAllocatable {
            milli_cpu: 1000,
            memory: 1 << 30,
            ephemeral_storage: 0,
        };
        let objects = crate::apiobjects::ApiObjects::from_objects("test", vec![], vec![]);
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("test".into());
        pod.metadata.annotations = Some(BTreeMap::from([(
            crate::types::CONFIG_SOURCE_ANNOTATION.to_string(),
            crate::types::API_SOURCE.to_string(),
        )]));
        let c = Container {
            name: "c".into(),
            env: Some(vec![
                EnvVar {
                    name: "URL".into(),
                    value: Some("http://$(WEB_SERVICE_HOST):$(WEB_SERVICE_PORT)".into()),
                    ..Default::default()
                },
                EnvVar {
                    name: "WEB_SERVICE_PORT".into(),
                    value: Some("mine".into()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let env = |pod: &Pod, store: Option<&ServiceStore>| {
            make_environment_variables(&c, pod, &[], "", &node, &objects, store)
        };

        // No API server: no service variables.
        assert_eq!(
            env(&pod, None).expect("env"),
            pairs(&[
                ("URL", "http://$(WEB_SERVICE_HOST):$(WEB_SERVICE_PORT)"),
                ("WEB_SERVICE_PORT", "mine"),
            ])
        );

        // An API pod waits for the first listing; a static pod does not.
        let store = ServiceStore::default();
        let err = env(&pod, Some(&store)).expect_err("not synced");
        assert_eq!(
            err.to_string(),
            "services have not yet been read at least once, cannot construct envvars"
        );
        let mut static_pod = pod.clone();
        if let Some(a) = static_pod.metadata.annotations.as_mut() {
            a.insert(
                crate::types::CONFIG_SOURCE_ANNOTATION.to_string(),
                crate::types::FILE_SOURCE.to_string(),
            );
        }
        assert_eq!(env(&static_pod, Some(&store)).expect("static").len(), 2);

        // Listed: the container's variables in order (expanded against the services; a
        // service variable it defines itself keeps its value), then the services' sorted.
        store.replace(cluster());
        let got = env(&pod, Some(&store)).expect("env");
        assert_eq!(
            got[..2],
            pairs(&[
                ("URL", "http://10.0.0.4:8080"),
                ("WEB_SERVICE_PORT", "mine"),
            ])[..]
        );
        let rest: BTreeMap<String, String> = got[2..].iter().cloned().collect();
        assert_eq!(rest.len(), 2 * 7 - 1, "{got:?}");
        assert_eq!(got.len() - 2, rest.len(), "no duplicates");
        assert!(got[2..].is_sorted());
        assert_eq!(rest["WEB_SERVICE_HOST"], "10.0.0.4");
        assert_eq!(rest["WEB_PORT_8080_TCP"], "tcp://10.0.0.4:8080");
        assert_eq!(rest["KUBERNETES_SERVICE_HOST"], "10.0.0.3");
        assert!(!rest.contains_key("WEB_SERVICE_PORT"));

        // enableServiceLinks: false leaves the master service only.
        let mut unlinked = pod.clone();
        unlinked.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            enable_service_links: Some(false),
            ..Default::default()
        });
        let got = env(&unlinked, Some(&store)).expect("env");
        let names: Vec<&str> = got[2..].iter().map(|(k, _)| k.as_str()).collect();
        assert!(
            names.iter().all(|k| k.starts_with("KUBERNETES_")),
            "{names:?}"
        );
        assert_eq!(names.len(), 7);

        // The watch's changes: a deleted service goes, a new one comes.
        store.delete(&service("test", "web", "", serde_json::json!([])));
        store.apply(service(
            "test",
            "cache",
            "10.0.0.9",
            serde_json::json!([{"port": 6379}]),
        ));
        let got: BTreeMap<String, String> =
            env(&pod, Some(&store)).expect("env").into_iter().collect();
        assert!(!got.contains_key("WEB_SERVICE_HOST"));
        assert_eq!(got["URL"], "http://$(WEB_SERVICE_HOST):$(WEB_SERVICE_PORT)");
        assert_eq!(got["CACHE_SERVICE_HOST"], "10.0.0.9");
    }
}
