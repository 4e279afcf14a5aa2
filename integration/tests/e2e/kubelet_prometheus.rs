//! End to end (issue 33): a real Prometheus server (Debian's `prometheus` package, which
//! `hack/testbed.sh` installs) scrapes the `kubelet` BINARY as kube-prometheus does, on both
//! runtimes, and kubernetes-mixin's kubelet alerts and recording rules are evaluated through
//! Prometheus's HTTP API.
//!
//! - The kubelet runs in API-server mode against the API fixture acting as the cluster: it joins
//!   with a bootstrap token, its client and serving certificates come from CSRs the fixture signs
//!   for [`CERT_LIFETIME`], its secure port authenticates bearer tokens with TokenReviews and
//!   authorizes them with SubjectAccessReviews (`--authentication-token-webhook
//!   --authorization-mode=Webhook`). The fixture knows Prometheus's service-account token and
//!   allows its user `get` on `nodes/metrics` (kube-prometheus's `prometheus-k8s` ClusterRole);
//!   another token is known but allowed nothing.
//! - Prometheus scrapes with kube-prometheus's kubelet ServiceMonitor rendered to a static scrape
//!   configuration ([`prometheus_config`]): https with the token, `insecure_skip_verify`,
//!   `honor_labels`, `honor_timestamps: false` for cAdvisor, its `metric_relabel_configs`, the
//!   target labels prometheus-operator gives a kubelet endpoint (`job="kubelet"`, `node`,
//!   `metrics_path`, ...), every [`SCRAPE_INTERVAL`]. Its rule file is kube-prometheus's
//!   rendering of the mixin's kubelet alerts and recording rules
//!   (`kubelet_support/kube-prometheus-rules.yaml`).
//! - Pods through the API: one burning CPU under a 300m limit, one with exec probes and a
//!   PersistentVolumeClaim Bound to a `local` PV whose path is an 8 MiB tmpfs the test mounts
//!   and fills above 97 % ([`FILL_BYTES`]).
//! - Every kubelet target is `up` with no scrape error; the denied token's target is down with a
//!   403; each expression the alerts and recording rules use returns series (for the test's pods
//!   where it is per pod, or per claim), several alerts fire or pend as they must on this node
//!   (the certificates expire within a day; the burner is throttled; the claim's volume is
//!   full: KubePersistentVolumeFillingUp, whose `kubelet_volume_stats_*` series have the
//!   figures statfs(2) of the tmpfs gives); every rule is healthy.
//! - Over [`WINDOW_SECS`], Prometheus's `rate()` of the burner's CPU usage and throttling, and
//!   the slope of the raw samples it stored, are within [`TOLERANCE`] of the container's cgroup
//!   files read by the test through the same interval.
//! - The kubelet stops: KubeletDown and KubeletInstanceUnreachable's expressions return series.
//!
//! kube-state-metrics is not in the test bed: the alerts and rules join the kubelet's series with
//! `kube_pod_info`, `kube_node_info`, `kube_node_status_capacity` and the claims'
//! `kube_persistentvolumeclaim_access_mode` / `_labels`, so the test serves those (and
//! `kube_pod_status_phase`, `kube_node_status_condition`) itself, with kube-state-metrics's
//! names and labels, computed at each scrape from the fixture's Pod and Node objects
//! and PersistentVolumeClaim objects ([`kube_state_metrics_page`]). The comparisons are ratios
//! of counters over one window, never
//! of how long something took.

use crate::kubelet_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use integration::apiserver::{ApiServer, TlsOptions};
use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::PostParams;
use kubelet_support::cgroup::{CgroupFiles, CpuReading, container_pid};
use kubelet_support::*;
use parking_lot::Mutex;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BOOTSTRAP_TOKEN: &str = "promkl.0123456789abcdef";
/// Prometheus's service-account token (kube-prometheus: `prometheus-k8s` in `monitoring`).
const PROMETHEUS_TOKEN: &str = "prometheus-k8s-service-account-token";
const PROMETHEUS_USER: &str = "system:serviceaccount:monitoring:prometheus-k8s";
/// A token the fixture knows, whose user may nothing on the node.
const DENIED_TOKEN: &str = "default-service-account-token";
/// How often Prometheus scrapes and evaluates the rules (kube-prometheus: 30 s).
const SCRAPE_INTERVAL: &str = "2s";
/// The window of the CPU comparison.
const WINDOW_SECS: f64 = 30.0;
/// The largest relative difference allowed between Prometheus's figure and the cgroup's.
const TOLERANCE: f64 = 0.10;
/// The lifetime of the certificates the fixture signs: less than a day, so the certificate
/// expiry alerts fire; long enough that nothing rotates during the test.
const CERT_LIFETIME: Duration = Duration::from_secs(3600);
/// The size of the tmpfs behind the prober's claim.
const TMPFS_BYTES: u64 = 8 << 20;
/// What the test writes on it before the pod starts: all but 64 KiB, so that the available
/// share (under 1 %) is below KubePersistentVolumeFillingUp's critical 3 %.
const FILL_BYTES: u64 = TMPFS_BYTES - (64 << 10);
/// kube-prometheus's rendering of kubernetes-mixin's kubelet alerts and recording rules.
const RULES: &str = include_str!("kubelet_support/kube-prometheus-rules.yaml");

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// The `prometheus` binary on `PATH`.
fn prometheus_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("prometheus"))
        .find(|f| f.is_file())
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// kube-prometheus's kubelet ServiceMonitor (`monitoring/kubelet`, its three endpoints of
/// v0.13.0, the release for Kubernetes 1.26/1.27: `manifests/kubernetesControlPlane-
/// serviceMonitorKubelet.yaml`) as prometheus-operator renders it, with a static target for the
/// address the operator's `kube-system/kubelet` Endpoints would list, and the target labels it
/// gives such an endpoint (`job` from the `app.kubernetes.io/name` label, `namespace`,
/// `service`, `endpoint`, `node`). kube-prometheus's main branch adds a fourth endpoint,
/// `/metrics/slis`, for kubelets ≥ 1.27 (1.26 serves it only behind the alpha ComponentSLIs
/// gate; this kubelet does not serve it). Then `/metrics/resource` (metrics-server's endpoint,
/// not kube-prometheus's) with the same settings; the denied token's job; the kube-state-metrics
/// stand-in.
fn prometheus_config(
    kubelet: &str,
    node: &str,
    token_file: &Path,
    denied_token_file: &Path,
    ksm: &str,
    rules: &Path,
) -> String {
    // The ServiceMonitor's metricRelabelings, verbatim.
    const METRICS_DROPS: [&str; 8] = [
        "kubelet_(pod_worker_latency_microseconds|pod_start_latency_microseconds|cgroup_manager_latency_microseconds|pod_worker_start_latency_microseconds|pleg_relist_latency_microseconds|pleg_relist_interval_microseconds|runtime_operations|runtime_operations_latency_microseconds|runtime_operations_errors|eviction_stats_age_microseconds|device_plugin_registration_count|device_plugin_alloc_latency_microseconds|network_plugin_operations_latency_microseconds)",
        "scheduler_(e2e_scheduling_latency_microseconds|scheduling_algorithm_predicate_evaluation|scheduling_algorithm_priority_evaluation|scheduling_algorithm_preemption_evaluation|scheduling_algorithm_latency_microseconds|binding_latency_microseconds|scheduling_latency_seconds)",
        "apiserver_(request_count|request_latencies|request_latencies_summary|dropped_requests|storage_data_key_generation_latencies_microseconds|storage_transformation_failures_total|storage_transformation_latencies_microseconds|proxy_tunnel_sync_latency_secs|longrunning_gauge|registered_watchers|storage_db_total_size_in_bytes|flowcontrol_request_concurrency_limit|flowcontrol_request_concurrency_in_use|storage_objects)",
        "kubelet_docker_(operations|operations_latency_microseconds|operations_errors|operations_timeout)",
        "reflector_(items_per_list|items_per_watch|list_duration_seconds|lists_total|short_watches_total|watch_duration_seconds|watches_total)",
        "etcd_(helper_cache_hit_count|helper_cache_miss_count|helper_cache_entry_count|object_counts|request_cache_get_latencies_summary|request_cache_add_latencies_summary|request_latencies_summary)",
        "transformation_(transformation_latencies_microseconds|failures_total)",
        "(admission_quota_controller_adds|admission_quota_controller_depth|admission_quota_controller_longest_running_processor_microseconds|admission_quota_controller_queue_latency|admission_quota_controller_unfinished_work_seconds|admission_quota_controller_work_duration|APIServiceOpenAPIAggregationControllerQueue1_adds|APIServiceOpenAPIAggregationControllerQueue1_depth|APIServiceOpenAPIAggregationControllerQueue1_longest_running_processor_microseconds|APIServiceOpenAPIAggregationControllerQueue1_queue_latency|APIServiceOpenAPIAggregationControllerQueue1_retries|APIServiceOpenAPIAggregationControllerQueue1_unfinished_work_seconds|APIServiceOpenAPIAggregationControllerQueue1_work_duration|APIServiceRegistrationController_adds|APIServiceRegistrationController_depth|APIServiceRegistrationController_longest_running_processor_microseconds|APIServiceRegistrationController_queue_latency|APIServiceRegistrationController_retries|APIServiceRegistrationController_unfinished_work_seconds|APIServiceRegistrationController_work_duration|autoregister_adds|autoregister_depth|autoregister_longest_running_processor_microseconds|autoregister_queue_latency|autoregister_retries|autoregister_unfinished_work_seconds|autoregister_work_duration|AvailableConditionController_adds|AvailableConditionController_depth|AvailableConditionController_longest_running_processor_microseconds|AvailableConditionController_queue_latency|AvailableConditionController_retries|AvailableConditionController_unfinished_work_seconds|AvailableConditionController_work_duration|crd_autoregistration_controller_adds|crd_autoregistration_controller_depth|crd_autoregistration_controller_longest_running_processor_microseconds|crd_autoregistration_controller_queue_latency|crd_autoregistration_controller_retries|crd_autoregistration_controller_unfinished_work_seconds|crd_autoregistration_controller_work_duration|crdEstablishing_adds|crdEstablishing_depth|crdEstablishing_longest_running_processor_microseconds|crdEstablishing_queue_latency|crdEstablishing_retries|crdEstablishing_unfinished_work_seconds|crdEstablishing_work_duration|crd_finalizer_adds|crd_finalizer_depth|crd_finalizer_longest_running_processor_microseconds|crd_finalizer_queue_latency|crd_finalizer_retries|crd_finalizer_unfinished_work_seconds|crd_finalizer_work_duration|crd_naming_condition_controller_adds|crd_naming_condition_controller_depth|crd_naming_condition_controller_longest_running_processor_microseconds|crd_naming_condition_controller_queue_latency|crd_naming_condition_controller_retries|crd_naming_condition_controller_unfinished_work_seconds|crd_naming_condition_controller_work_duration|crd_openapi_controller_adds|crd_openapi_controller_depth|crd_openapi_controller_longest_running_processor_microseconds|crd_openapi_controller_queue_latency|crd_openapi_controller_retries|crd_openapi_controller_unfinished_work_seconds|crd_openapi_controller_work_duration|DiscoveryController_adds|DiscoveryController_depth|DiscoveryController_longest_running_processor_microseconds|DiscoveryController_queue_latency|DiscoveryController_retries|DiscoveryController_unfinished_work_seconds|DiscoveryController_work_duration|kubeproxy_sync_proxy_rules_latency_microseconds|non_structural_schema_condition_controller_adds|non_structural_schema_condition_controller_depth|non_structural_schema_condition_controller_longest_running_processor_microseconds|non_structural_schema_condition_controller_queue_latency|non_structural_schema_condition_controller_retries|non_structural_schema_condition_controller_unfinished_work_seconds|non_structural_schema_condition_controller_work_duration|rest_client_request_latency_seconds|storage_operation_errors_total|storage_operation_status_count)",
    ];
    let metrics_drops: String = METRICS_DROPS
        .iter()
        .map(|re| format!("  - source_labels: [__name__]\n    regex: '{re}'\n    action: drop\n"))
        .collect();
    let cadvisor_drops = "  - source_labels: [__name__]\n    regex: 'container_(network_tcp_usage_total|network_udp_usage_total|tasks_state|cpu_load_average_10s)'\n    action: drop\n  - source_labels: [__name__, pod, namespace]\n    regex: '(container_spec_.*|container_file_descriptors|container_sockets|container_threads_max|container_threads|container_start_time_seconds|container_last_seen);;'\n    action: drop\n  - source_labels: [__name__, container]\n    regex: '(container_blkio_device_usage_total);.+'\n    action: drop\n";
    let job = |name: &str,
               path: &str,
               token: &Path,
               job_label: &str,
               honor_timestamps: bool,
               drops: &str| {
        format!(
            r#"- job_name: {name}
  honor_labels: true
  honor_timestamps: {honor_timestamps}
  scheme: https
  metrics_path: {path}
  authorization:
    credentials_file: {token}
  tls_config:
    insecure_skip_verify: true
  static_configs:
  - targets: ['{kubelet}']
    labels:
      job: {job_label}
      namespace: kube-system
      service: kubelet
      endpoint: https-metrics
      node: '{node}'
  relabel_configs:
  - source_labels: [__metrics_path__]
    action: replace
    target_label: metrics_path
{metric_relabel}"#,
            token = token.display(),
            metric_relabel = if drops.is_empty() {
                String::new()
            } else {
                format!("  metric_relabel_configs:\n{drops}")
            }
        )
    };
    let mut out = format!(
        "global:\n  scrape_interval: {SCRAPE_INTERVAL}\n  scrape_timeout: {SCRAPE_INTERVAL}\n  evaluation_interval: {SCRAPE_INTERVAL}\nrule_files:\n- {}\nscrape_configs:\n",
        rules.display()
    );
    out += &job(
        "serviceMonitor/monitoring/kubelet/0",
        "/metrics",
        token_file,
        "kubelet",
        true,
        &metrics_drops,
    );
    out += &job(
        "serviceMonitor/monitoring/kubelet/1",
        "/metrics/cadvisor",
        token_file,
        "kubelet",
        false,
        cadvisor_drops,
    );
    out += &job(
        "serviceMonitor/monitoring/kubelet/2",
        "/metrics/probes",
        token_file,
        "kubelet",
        true,
        "",
    );
    out += &job(
        "kubelet-resource",
        "/metrics/resource",
        token_file,
        "kubelet",
        true,
        "",
    );
    out += &job(
        "kubelet-denied",
        "/metrics",
        denied_token_file,
        "kubelet-denied",
        true,
        "",
    );
    out += &format!(
        "- job_name: kube-state-metrics\n  honor_labels: true\n  static_configs:\n  - targets: ['{ksm}']\n    labels:\n      job: kube-state-metrics\n"
    );
    out
}

/// A Prometheus server of the test: its own storage, on a free loopback port; killed when
/// dropped.
struct Prometheus {
    port: u16,
    log: PathBuf,
    _child: tokio::process::Child,
}

impl Prometheus {
    /// Checks `config` with `promtool check config` (which checks the rule files too) and
    /// starts `bin` on it with storage under `dir`; waits until it is ready.
    async fn start(bin: &Path, dir: &Path, config: &str) -> Prometheus {
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config).expect("write prometheus.yml");
        let check = std::process::Command::new("promtool")
            .args(["check", "config"])
            .arg(&config_file)
            .output()
            .expect("promtool check config");
        assert!(
            check.status.success(),
            "promtool check config: {}{}\n{config}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
        let port = free_port();
        let log = dir.join("prometheus.log");
        let log_file = std::fs::File::create(&log).expect("prometheus log");
        let child = tokio::process::Command::new(bin)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg("--storage.tsdb.retention.time=1h")
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::from(log_file))
            .kill_on_drop(true)
            .spawn()
            .expect("spawn prometheus");
        let p = Prometheus {
            port,
            log,
            _child: child,
        };
        let end = tokio::time::Instant::now() + DEADLINE;
        while http_get_status(port, "/-/ready").await.map(|r| r.0) != Some(200) {
            assert!(
                tokio::time::Instant::now() < end,
                "Prometheus never got ready:\n{}",
                p.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        p
    }

    fn log_tail(&self) -> String {
        log_tail(&self.log, 30)
    }

    /// `GET path` on the HTTP API: its `data`.
    async fn api(&self, path: &str) -> Value {
        let (code, body) = http_get_status(self.port, path)
            .await
            .unwrap_or_else(|| panic!("GET {path}: no answer from Prometheus"));
        let v: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("GET {path}: {e}: {code} {body}"));
        assert_eq!(
            (code, &v["status"]),
            (200, &Value::from("success")),
            "GET {path}: {body}"
        );
        v["data"].clone()
    }

    /// `/api/v1/query` of `expr` at `time` (now when `None`): the result's elements.
    async fn query_at(&self, expr: &str, time: Option<f64>) -> Vec<Value> {
        let at = time.map(|t| format!("&time={t:.3}")).unwrap_or_default();
        let data = self
            .api(&format!("/api/v1/query?query={}{at}", urlencode(expr)))
            .await;
        data["result"].as_array().cloned().unwrap_or_default()
    }

    async fn query(&self, expr: &str) -> Vec<Value> {
        self.query_at(expr, None).await
    }
}

/// A label of a result element ("" when absent).
fn label<'a>(series: &'a Value, name: &str) -> &'a str {
    series["metric"][name].as_str().unwrap_or_default()
}

/// The value of an instant vector's element (NaN and the infinities as Prometheus writes them).
fn value(series: &Value) -> f64 {
    match series["value"][1].as_str() {
        Some("+Inf") => f64::INFINITY,
        Some("-Inf") => f64::NEG_INFINITY,
        Some(v) => v.parse().unwrap_or(f64::NAN),
        None => f64::NAN,
    }
}

/// The element whose labels include `labels`.
fn find<'a>(result: &'a [Value], labels: &[(&str, &str)]) -> Option<&'a Value> {
    result
        .iter()
        .find(|s| labels.iter().all(|(k, v)| label(s, k) == *v))
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The kube-state-metrics series the mixin's expressions join with, with its names and labels,
/// from the API's Pods, Nodes and PersistentVolumeClaims (`None` when the API cannot be read:
/// the scrape fails).
async fn kube_state_metrics_page(client: &kube::Client) -> Option<String> {
    let pods = Api::<Pod>::all(client.clone())
        .list(&Default::default())
        .await
        .ok()?
        .items;
    let nodes = Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await
        .ok()?
        .items;
    let claims = Api::<PersistentVolumeClaim>::all(client.clone())
        .list(&Default::default())
        .await
        .ok()?
        .items;
    let mut out = String::new();
    out += "# HELP kube_persistentvolumeclaim_access_mode The access mode(s) specified by the persistent volume claim.\n# TYPE kube_persistentvolumeclaim_access_mode gauge\n";
    for c in &claims {
        let (ns, name) = (
            escape(c.metadata.namespace.as_deref().unwrap_or_default()),
            escape(c.metadata.name.as_deref().unwrap_or_default()),
        );
        let modes = c.spec.as_ref().and_then(|s| s.access_modes.as_ref());
        for m in modes.into_iter().flatten() {
            out += &format!(
                "kube_persistentvolumeclaim_access_mode{{namespace=\"{ns}\",persistentvolumeclaim=\"{name}\",access_mode=\"{}\"}} 1\n",
                escape(m)
            );
        }
    }
    out += "# HELP kube_persistentvolumeclaim_labels [STABLE] Kubernetes labels converted to Prometheus labels.\n# TYPE kube_persistentvolumeclaim_labels gauge\n";
    for c in &claims {
        out += &format!(
            "kube_persistentvolumeclaim_labels{{namespace=\"{}\",persistentvolumeclaim=\"{}\"}} 1\n",
            escape(c.metadata.namespace.as_deref().unwrap_or_default()),
            escape(c.metadata.name.as_deref().unwrap_or_default()),
        );
    }
    out += "# HELP kube_pod_info [STABLE] Information about pod.\n# TYPE kube_pod_info gauge\n";
    for p in &pods {
        let (ns, name, uid) = (
            p.metadata.namespace.as_deref().unwrap_or_default(),
            p.metadata.name.as_deref().unwrap_or_default(),
            p.metadata.uid.as_deref().unwrap_or_default(),
        );
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or_default();
        let st = p.status.as_ref();
        let host_ip = st.and_then(|s| s.host_ip.as_deref()).unwrap_or_default();
        let pod_ip = st.and_then(|s| s.pod_ip.as_deref()).unwrap_or_default();
        out += &format!(
            "kube_pod_info{{namespace=\"{}\",pod=\"{}\",uid=\"{}\",host_ip=\"{}\",pod_ip=\"{}\",node=\"{}\",created_by_kind=\"<none>\",created_by_name=\"<none>\",priority_class=\"\",host_network=\"false\"}} 1\n",
            escape(ns),
            escape(name),
            escape(uid),
            escape(host_ip),
            escape(pod_ip),
            escape(node)
        );
    }
    out += "# HELP kube_pod_status_phase [STABLE] The pods current phase.\n# TYPE kube_pod_status_phase gauge\n";
    for p in &pods {
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or_default();
        for each in ["Pending", "Succeeded", "Failed", "Unknown", "Running"] {
            out += &format!(
                "kube_pod_status_phase{{namespace=\"{}\",pod=\"{}\",uid=\"{}\",phase=\"{each}\"}} {}\n",
                escape(p.metadata.namespace.as_deref().unwrap_or_default()),
                escape(p.metadata.name.as_deref().unwrap_or_default()),
                escape(p.metadata.uid.as_deref().unwrap_or_default()),
                u8::from(phase == each)
            );
        }
    }
    out += "# HELP kube_node_info [STABLE] Information about a cluster node.\n# TYPE kube_node_info gauge\n";
    for n in &nodes {
        let name = escape(n.metadata.name.as_deref().unwrap_or_default());
        let info = n.status.as_ref().and_then(|s| s.node_info.as_ref());
        let field = |f: fn(&k8s_openapi::api::core::v1::NodeSystemInfo) -> &str| {
            escape(info.map(f).unwrap_or_default())
        };
        out += &format!(
            "kube_node_info{{node=\"{name}\",kernel_version=\"{}\",os_image=\"{}\",container_runtime_version=\"{}\",kubelet_version=\"{}\",kubeproxy_version=\"{}\",provider_id=\"\",pod_cidr=\"\",system_uuid=\"{}\",internal_ip=\"\"}} 1\n",
            field(|i| &i.kernel_version),
            field(|i| &i.os_image),
            field(|i| &i.container_runtime_version),
            field(|i| &i.kubelet_version),
            field(|i| &i.kube_proxy_version),
            field(|i| &i.system_uuid),
        );
    }
    // Pods only: the one capacity the expressions read, an integer quantity.
    out += "# HELP kube_node_status_capacity The capacity for different resources of a node.\n# TYPE kube_node_status_capacity gauge\n";
    for n in &nodes {
        let name = escape(n.metadata.name.as_deref().unwrap_or_default());
        let pods = n
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("pods"))
            .and_then(|q| q.0.parse::<u64>().ok());
        if let Some(pods) = pods {
            out += &format!(
                "kube_node_status_capacity{{node=\"{name}\",resource=\"pods\",unit=\"integer\"}} {pods}\n"
            );
        }
    }
    out += "# HELP kube_node_status_condition [STABLE] The condition of a cluster node.\n# TYPE kube_node_status_condition gauge\n";
    for n in &nodes {
        let name = escape(n.metadata.name.as_deref().unwrap_or_default());
        let conditions = n.status.as_ref().and_then(|s| s.conditions.as_ref());
        for c in conditions.into_iter().flatten() {
            for status in ["true", "false", "unknown"] {
                out += &format!(
                    "kube_node_status_condition{{node=\"{name}\",condition=\"{}\",status=\"{status}\"}} {}\n",
                    escape(&c.type_),
                    u8::from(c.status.eq_ignore_ascii_case(status))
                );
            }
        }
    }
    Some(out)
}

/// Serves [`kube_state_metrics_page`] over HTTP on a free loopback port.
async fn serve_kube_state_metrics(client: kube::Client) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let client = client.clone();
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 65536 {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = match kube_state_metrics_page(&client).await {
                    Some(body) => format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    ),
                    None => "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string(),
                };
                let _ = s.write_all(answer.as_bytes()).await;
            });
        }
    });
    port
}

/// The cgroup's counters interpolated at `t` (unix seconds) between the readings around it.
fn cgroup_at(readings: &[(f64, CpuReading)], t: f64) -> CpuReading {
    let i = readings
        .iter()
        .position(|(rt, _)| *rt >= t)
        .unwrap_or_else(|| {
            panic!(
                "no cgroup reading after {t}: {} readings, the last at {:?}",
                readings.len(),
                readings.last().map(|r| r.0)
            )
        });
    assert!(i > 0, "no cgroup reading before {t}");
    let ((ta, a), (tb, b)) = (readings[i - 1], readings[i]);
    let f = if tb > ta { (t - ta) / (tb - ta) } else { 0.0 };
    let lerp = |x: f64, y: f64| x + (y - x) * f;
    CpuReading {
        usage: lerp(a.usage, b.usage),
        periods: lerp(a.periods, b.periods),
        throttled: lerp(a.throttled, b.throttled),
    }
}

/// The (time, value) samples of a range query's only element.
fn samples(result: &[Value]) -> Vec<(f64, f64)> {
    assert_eq!(result.len(), 1, "one series: {result:?}");
    result[0]["values"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter_map(|p| Some((p[0].as_f64()?, p[1].as_str().and_then(|v| v.parse().ok())?)))
                .collect()
        })
        .unwrap_or_default()
}

/// NotAfter (unix seconds) of the PEM certificate at `path`.
fn not_after(path: &Path) -> f64 {
    let pem = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).expect("PEM");
    let cert = pem.parse_x509().expect("certificate");
    cert.validity().not_after.timestamp() as f64
}

fn pod_json(name: &str, node: &str, image: &str, container: Value) -> Pod {
    let mut c = serde_json::json!({"name": "main", "image": image,
                                   "imagePullPolicy": "IfNotPresent"});
    if let (Some(c), Some(extra)) = (c.as_object_mut(), container.as_object()) {
        c.extend(extra.clone());
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1, "containers": [c]}
    }))
    .expect("pod")
}

async fn kubelet_prometheus(kind: RuntimeKind) {
    let name = format!("kubelet_prometheus[{}]", kind.name());
    let tb = require_testbed!(&name);
    let Some(bin) = prometheus_binary() else {
        assert!(
            std::env::var("CRI_TESTBED_REQUIRED").as_deref() != Ok("1"),
            "{name}: no prometheus binary on PATH (hack/testbed.sh up installs Debian's prometheus)"
        );
        eprintln!(
            "SKIPPED {name}: no prometheus binary on PATH (hack/testbed.sh up installs Debian's prometheus)"
        );
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = Arc::new(
        ApiServer::start_tls_with(TlsOptions {
            bootstrap_token: Some(BOOTSTRAP_TOKEN.into()),
            csr_lifetime: Some(CERT_LIFETIME),
        })
        .await
        .expect("fixture"),
    );
    server.add_token(
        PROMETHEUS_TOKEN,
        PROMETHEUS_USER,
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:monitoring",
        ],
    );
    server.allow(PROMETHEUS_USER, "get", "metrics");
    server.add_token(
        DENIED_TOKEN,
        "system:serviceaccount:default:default",
        &["system:serviceaccounts"],
    );

    let mut k = Kubelet::new(kind, "klprom");
    let d = k.dir.path().to_path_buf();
    std::fs::write(d.join("bootstrap.conf"), server.bootstrap_kubeconfig()).expect("bootstrap");
    let cert_dir = d.join("pki");
    let secure_port = free_port();
    let flags: Vec<String> = [
        "--bootstrap-kubeconfig",
        &d.join("bootstrap.conf").display().to_string(),
        "--kubeconfig",
        &d.join("kubelet.conf").display().to_string(),
        "--cert-dir",
        &cert_dir.display().to_string(),
        "--rotate-certificates",
        "--rotate-server-certificates",
        "--port",
        &secure_port.to_string(),
        "--authentication-token-webhook",
        "--authorization-mode",
        "Webhook",
        // Pod workers resync every 5 s (upstream's default: 1 min), so that their syncs
        // (`kubelet_pod_worker_duration_seconds`) fall within the test's short window as they
        // do within the alert's 5m window in a cluster.
        "--sync-frequency",
        "5s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    k.spawn(&tb, &flags);
    let admin = client_from(&server.kubeconfig()).await;
    let ksm = serve_kube_state_metrics(admin.clone()).await;
    let prom_dir = d.join("prometheus");
    std::fs::create_dir_all(&prom_dir).expect("prometheus dir");
    let (token_file, denied_file, rules_file) = (
        prom_dir.join("token"),
        prom_dir.join("denied-token"),
        prom_dir.join("kube-prometheus-rules.yaml"),
    );
    std::fs::write(&token_file, PROMETHEUS_TOKEN).expect("token");
    std::fs::write(&denied_file, DENIED_TOKEN).expect("token");
    std::fs::write(&rules_file, RULES).expect("rules");
    let config = prometheus_config(
        &format!("127.0.0.1:{secure_port}"),
        &k.node,
        &token_file,
        &denied_file,
        &format!("127.0.0.1:{ksm}"),
        &rules_file,
    );
    let prom = Arc::new(Prometheus::start(&bin, &prom_dir, &config).await);
    let uids: Arc<Mutex<Vec<String>>> = Arc::default();
    let endpoint = k.endpoint(&tb);
    let (burn, probe) = (unique_name("prom-burn"), unique_name("prom-probe"));
    let claim = unique_name("prom-claim");
    let tmpfs = pv::Tmpfs::mount(TMPFS_BYTES);

    let child = k.child.take();
    let outcome = tokio::spawn({
        let (log, node, image, uids, server, prom) = (
            k.log.clone(),
            k.node.clone(),
            tb.busybox_image.clone(),
            uids.clone(),
            server.clone(),
            prom.clone(),
        );
        let (burn, probe, claim) = (burn.clone(), probe.clone(), claim.clone());
        let tmpfs_path = tmpfs.path().to_path_buf();
        async move {
            let mut child = child;
            let nodes: Api<Node> = Api::all(admin.clone());
            let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
            wait_for("the node to be Ready", &log, || async {
                node_ready(&nodes.get_opt(&node).await.ok()??).then_some(())
            })
            .await;
            // Every target, before the pods start (their starts are observed between scrapes): the
            // kubelet's up without error, the denied token's down with 403.
            let targets = wait_for("every kubelet target up", &log, || async {
                let data = prom.api("/api/v1/targets?state=active").await;
                let active = data["activeTargets"].as_array()?.clone();
                let kubelet: Vec<&Value> = active
                    .iter()
                    .filter(|t| t["labels"]["job"] == "kubelet")
                    .collect();
                (kubelet.len() == 4
                    && kubelet
                        .iter()
                        .all(|t| t["health"] == "up" && t["lastError"] == ""))
                .then_some(active)
            })
            .await;
            for path in [
                "/metrics",
                "/metrics/cadvisor",
                "/metrics/probes",
                "/metrics/resource",
            ] {
                let t = targets
                    .iter()
                    .find(|t| t["labels"]["job"] == "kubelet" && t["labels"]["metrics_path"] == path)
                    .unwrap_or_else(|| panic!("a target for {path}: {targets:?}"));
                assert_eq!(t["labels"]["node"], node.as_str(), "{t}");
                assert_eq!(t["scrapeUrl"], format!("https://127.0.0.1:{secure_port}{path}"));
            }
            let denied = wait_for("the denied token's scrape", &log, || async {
                let data = prom.api("/api/v1/targets?state=active").await;
                data["activeTargets"]
                    .as_array()?
                    .iter()
                    .find(|t| t["labels"]["job"] == "kubelet-denied" && t["health"] == "down")
                    .cloned()
            })
            .await;
            assert!(
                denied["lastError"]
                    .as_str()
                    .is_some_and(|e| e.contains("403")),
                "the denied token's target: {denied}"
            );
            let sars = server.access_reviews();
            let asked = |user: &str| {
                sars.iter().any(|s| {
                    s["user"] == user
                        && s["resourceAttributes"]
                            == serde_json::json!({"verb": "get", "version": "v1",
                                "resource": "nodes", "subresource": "metrics", "name": node})
                })
            };
            assert!(asked(PROMETHEUS_USER), "a SubjectAccessReview for Prometheus: {sars:?}");
            assert!(
                asked("system:serviceaccount:default:default"),
                "a SubjectAccessReview for the denied token: {sars:?}"
            );
            assert!(
                server
                    .token_reviews()
                    .iter()
                    .any(|r| r["token"] == PROMETHEUS_TOKEN),
                "a TokenReview of Prometheus's token"
            );
            let up = prom.query(r#"up{job="kubelet"}"#).await;
            assert_eq!(up.len(), 4, "{up:?}");
            assert!(up.iter().all(|s| value(s) == 1.0), "{up:?}");

            let burner = pod_json(
                &burn,
                &node,
                &image,
                serde_json::json!({"command": ["sh", "-c", "while :; do :; done"],
                                   "resources": {"limits": {"cpu": "300m"}}}),
            );
            let mut prober = pod_json(
                &probe,
                &node,
                &image,
                serde_json::json!({"command": ["sleep", "3600"],
                    "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
                    "livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 2},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}),
            );
            // The prober's claim: Bound to a local PV on the test's tmpfs, filled above 97 %.
            std::fs::write(tmpfs_path.join("fill"), vec![0u8; FILL_BYTES as usize])
                .expect("fill the tmpfs");
            pv::create_claim(
                &admin,
                "default",
                &claim,
                &format!("{claim}-pv"),
                Some(pv::local_source(&tmpfs_path, &node)),
            )
            .await;
            if let Some(spec) = prober.spec.as_mut() {
                spec.volumes = Some(vec![serde_json::from_value(serde_json::json!(
                    {"name": "data", "persistentVolumeClaim": {"claimName": claim}}
                ))
                .expect("volume")]);
            }
            for p in [&burner, &prober] {
                let created = pods
                    .create(&PostParams::default(), p)
                    .await
                    .expect("create pod");
                uids.lock().extend(created.metadata.uid);
            }
            let burner_id = wait_for("the pods running", &log, || async {
                let mut id = None;
                for name in [&burn, &probe] {
                    let st = pods.get_opt(name).await.ok()??.status?;
                    let c = st.container_statuses?.into_iter().next()?;
                    c.state?.running?;
                    if name == &burn {
                        id = Some(c.container_id?.split_once("://")?.1.to_string());
                    }
                }
                id
            })
            .await;
            // A pid whose process still exists (its /proc/<pid>/cgroup is read next).
            let pid = wait_for("the burner's pid", &log, || async {
                let pid = container_pid(&endpoint, &burner_id).await?;
                Path::new(&format!("/proc/{pid}/cgroup"))
                    .exists()
                    .then_some(pid)
            })
            .await;
            let cg = CgroupFiles::of_pid(pid);
            eprintln!("[{}] burner cgroup {}", kind.name(), cg.id);
            // The test's own readings of the burner's cgroup, every 200 ms, at the middle of
            // the read.
            let readings: Arc<Mutex<Vec<(f64, CpuReading)>>> = Arc::default();
            let sampled_from = now_secs();
            let sampler = tokio::spawn({
                let readings = readings.clone();
                async move {
                    loop {
                        let t0 = now_secs();
                        // A failed read (the container gone or restarted) is left out; the
                        // comparison then says which instants have no reading.
                        let Some(r) = cg.try_read() else {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            continue;
                        };
                        let t = (t0 + now_secs()) / 2.0;
                        readings.lock().push((t, r));
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            });

            // The burner's CPU series in Prometheus: the window starts at its first sample.
            let usage = format!(
                r#"container_cpu_usage_seconds_total{{job="kubelet", metrics_path="/metrics/cadvisor", namespace="default", pod="{burn}", container="main"}}"#
            );
            let first = wait_for("the burner's CPU in Prometheus", &log, || async {
                let r = prom.query(&format!("timestamp({usage})")).await;
                r.first().map(value)
            })
            .await;
            // A window wholly after both the first sample and the first cgroup reading.
            let window_end = first.max(sampled_from) + WINDOW_SECS + 4.0;

            // Meanwhile: the expressions (a few scrapes in, so that rates have two samples).
            tokio::time::sleep(Duration::from_secs(6)).await;
            check_expressions(kind, &prom, &node, &burn, &probe, &cert_dir, (&claim, &tmpfs_path))
                .await;

            // The CPU comparison, evaluated at `at` over WINDOW_SECS.
            while now_secs() < window_end {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            // At the burner's last scrape, so that Prometheus's samples reach the window's end
            // (`rate()` then extrapolates over the gap before the first sample only, less than
            // one interval, instead of over a gap at each end: on a loaded machine the burner's
            // CPU is uneven and the cgroup counts those gaps too); and not past the last cgroup
            // reading (the sampler may lag on a loaded machine).
            let last_scrape = prom
                .query(&format!("timestamp({usage})"))
                .await
                .first()
                .map(value)
                .filter(|t| t.is_finite())
                .unwrap_or_else(|| panic!("the burner's last scrape"));
            let last_reading = readings.lock().last().map(|r| r.0).unwrap_or_default();
            let at = last_scrape.min(last_reading);
            let w = WINDOW_SECS as u64;
            let throttled = usage.replace(
                "container_cpu_usage_seconds_total",
                "container_cpu_cfs_throttled_periods_total",
            );
            let periods = usage.replace(
                "container_cpu_usage_seconds_total",
                "container_cpu_cfs_periods_total",
            );
            let one = |r: Vec<Value>, what: &str| -> f64 {
                assert_eq!(r.len(), 1, "{what}: {r:?}");
                value(&r[0])
            };
            let prom_cpu = one(
                prom.query_at(&format!("rate({usage}[{w}s])"), Some(at)).await,
                "cpu rate",
            );
            let prom_throttled = one(
                prom.query_at(&format!("rate({throttled}[{w}s])"), Some(at))
                    .await,
                "throttled rate",
            );
            let prom_ratio = one(
                prom.query_at(
                    &format!("rate({throttled}[{w}s]) / rate({periods}[{w}s])"),
                    Some(at),
                )
                .await,
                "throttled ratio",
            );
            let raw_cpu = samples(&prom.query_at(&format!("{usage}[{w}s]"), Some(at)).await);
            let raw_thr = samples(&prom.query_at(&format!("{throttled}[{w}s]"), Some(at)).await);
            let raw_per = samples(&prom.query_at(&format!("{periods}[{w}s]"), Some(at)).await);
            sampler.abort();
            // The cgroup read throughout is the burner's one container: not restarted since.
            let now = pods
                .get(&burn)
                .await
                .ok()
                .and_then(|p| p.status?.container_statuses?.into_iter().next());
            assert!(
                now.as_ref().is_some_and(|c| c.restart_count == 0
                    && c.container_id
                        .as_deref()
                        .and_then(|i| i.split_once("://"))
                        .is_some_and(|(_, id)| id == burner_id)),
                "the burner's container {burner_id} ran throughout: {now:?}"
            );
            let readings = readings.lock().clone();
            let (c0, c1) = (
                cgroup_at(&readings, at - WINDOW_SECS),
                cgroup_at(&readings, at),
            );
            let cg_cpu = (c1.usage - c0.usage) / WINDOW_SECS;
            let cg_throttled = (c1.throttled - c0.throttled) / WINDOW_SECS;
            let cg_ratio = (c1.throttled - c0.throttled) / (c1.periods - c0.periods);
            // The raw samples' slope against the cgroup's between the same two instants.
            let slope = |s: &[(f64, f64)], get: fn(&CpuReading) -> f64| {
                let (Some(&(t0, v0)), Some(&(t1, v1))) = (s.first(), s.last()) else {
                    panic!("no samples");
                };
                let (a, b) = (cgroup_at(&readings, t0), cgroup_at(&readings, t1));
                ((v1 - v0) / (t1 - t0), (get(&b) - get(&a)) / (t1 - t0), t1 - t0, s.len())
            };
            let raw = [
                ("container_cpu_usage_seconds_total", slope(&raw_cpu, |r| r.usage)),
                (
                    "container_cpu_cfs_throttled_periods_total",
                    slope(&raw_thr, |r| r.throttled),
                ),
                ("container_cpu_cfs_periods_total", slope(&raw_per, |r| r.periods)),
            ];
            eprintln!(
                "[{}] cgroup over [{:.0}, {at:.0}]: {cg_cpu:.4} cores, {cg_throttled:.3} throttled periods/s, throttled/periods {cg_ratio:.4}",
                kind.name(),
                at - WINDOW_SECS
            );
            assert!(cg_cpu > 0.1, "the busy loop runs: {cg_cpu} cores");
            assert!(cg_cpu < 0.35, "the 300m limit holds the loop: {cg_cpu} cores");
            let mut lines = vec![
                ("rate(container_cpu_usage_seconds_total)".to_string(), prom_cpu, cg_cpu),
                (
                    "rate(container_cpu_cfs_throttled_periods_total)".to_string(),
                    prom_throttled,
                    cg_throttled,
                ),
                (
                    "rate(throttled) / rate(periods)".to_string(),
                    prom_ratio,
                    cg_ratio,
                ),
            ];
            for (name, (served, measured, secs, n)) in raw {
                lines.push((
                    format!("{name} samples' slope ({n} samples over {secs:.2} s)"),
                    served,
                    measured,
                ));
            }
            let mut failures = Vec::new();
            for (what, served, measured) in lines {
                let ratio = served / measured;
                let line =
                    format!("{what}: Prometheus {served:.4}, cgroup {measured:.4}, ratio {ratio:.4}");
                eprintln!("[{}] {line}", kind.name());
                if !ratio.is_finite() || (ratio - 1.0).abs() > TOLERANCE {
                    failures.push(line);
                }
            }
            assert!(
                failures.is_empty(),
                "[{}] off by more than {:.0} %:\n{}",
                kind.name(),
                TOLERANCE * 100.0,
                failures.join("\n")
            );

            // The kubelet stops: KubeletDown's and KubeletInstanceUnreachable's expressions.
            if let Some(c) = child.as_mut() {
                stop_kubelet(c).await;
            }
            // kubernetes-mixin alerts/kubelet.libsonnet KubeletInstanceUnreachable, as
            // kube-prometheus renders it.
            let unreachable = r#"up{job="kubelet", metrics_path="/metrics"} == 0"#;
            let down = wait_for("the kubelet's target down", &log, || async {
                let r = prom.query(unreachable).await;
                (!r.is_empty()).then_some(r)
            })
            .await;
            assert_eq!(label(&down[0], "node"), node, "{down:?}");
            // KubeletDown (alerts/kubelet.libsonnet), as kube-prometheus renders it.
            let kubelet_down = r#"count by (cluster) (kube_node_info{job="kube-state-metrics"})
unless on (cluster)
count by (cluster) (up{job="kubelet", metrics_path="/metrics"} == 1)"#;
            let r = prom.query(kubelet_down).await;
            assert_eq!(r.len(), 1, "KubeletDown with the kubelet stopped: {r:?}");
            eprintln!("[{}] stopped: KubeletDown and KubeletInstanceUnreachable return series", kind.name());
        }
    })
    .await;
    let uids = uids.lock().clone();
    if outcome.is_err() {
        eprintln!("Prometheus log tail:\n{}", prom.log_tail());
    }
    k.shutdown(&tb, &uids).await;
    drop(tmpfs);
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// Each expression of the mixin's kubelet alerts and recording rules, as kube-prometheus
/// renders them (`kubelet_support/kube-prometheus-rules.yaml`, from kube-prometheus@4d719f1
/// `manifests/kubernetesControlPlane-prometheusRule.yaml`; the mixin's source file is named at
/// each), evaluated through `/api/v1/query`; then the rules as Prometheus runs them.
async fn check_expressions(
    kind: RuntimeKind,
    prom: &Prometheus,
    node: &str,
    burn: &str,
    probe: &str,
    cert_dir: &Path,
    (claim, claim_path): (&str, &Path),
) {
    let rt = kind.name();
    let on_node = [("node", node)];
    // Per-pod: a series for each test pod's container, with the node from kube_pod_info.
    let per_pod = |r: &[Value], what: &str| {
        for pod in [burn, probe] {
            let s = find(
                r,
                &[
                    ("namespace", "default"),
                    ("pod", pod),
                    ("container", "main"),
                    ("node", node),
                ],
            )
            .unwrap_or_else(|| panic!("{what}: no series for {pod}/main on {node}: {r:?}"));
            assert!(value(s).is_finite(), "{what}: {s}");
        }
    };

    // KubeletTooManyPods (alerts/kubelet.libsonnet), without `> 0.95`.
    let too_many = r#"(
  max by (cluster, instance) (
    kubelet_running_pods{job="kubelet", metrics_path="/metrics"} > 1
  )
  * on (cluster, instance) group_left(node)
  max by (cluster, instance, node) (
    kubelet_node_name{job="kubelet", metrics_path="/metrics"}
  )
)
/ on (cluster, node) group_left()
max by (cluster, node) (
  kube_node_status_capacity{job="kube-state-metrics", resource="pods"} != 1
)"#;
    // The ratio and its two terms at one instant.
    let t = now_secs();
    let r = prom.query_at(too_many, Some(t)).await;
    let s = find(&r, &on_node).unwrap_or_else(|| panic!("KubeletTooManyPods: {r:?}"));
    let running = prom
        .query_at(
            r#"kubelet_running_pods{job="kubelet", metrics_path="/metrics"}"#,
            Some(t),
        )
        .await;
    let capacity = prom
        .query_at(
            &format!(
                r#"kube_node_status_capacity{{job="kube-state-metrics", resource="pods", node="{node}"}}"#
            ),
            Some(t),
        )
        .await;
    let (running, capacity) = (
        running.first().map(value).unwrap_or_default(),
        capacity.first().map(value).unwrap_or_default(),
    );
    assert!(running >= 2.0, "kubelet_running_pods {running}");
    assert!(capacity > 0.0, "the node's pod capacity {capacity}");
    assert!(
        (value(s) - running / capacity).abs() < 1e-9,
        "KubeletTooManyPods ratio {} vs {running}/{capacity}",
        value(s)
    );
    eprintln!(
        "[{rt}] KubeletTooManyPods: {} running pods / capacity {capacity} = {:.4}",
        running,
        value(s)
    );
    assert!(
        prom.query(&format!("{too_many} > 0.95")).await.is_empty(),
        "KubeletTooManyPods does not fire"
    );

    // KubeletPlegDurationHigh reads the recording rule (rules/kubelet.libsonnet); its expression:
    let pleg = r#"histogram_quantile(
  0.99,
  sum(rate(kubelet_pleg_relist_duration_seconds_bucket{job="kubelet", metrics_path="/metrics"}[5m])) by (cluster, instance, le)
  * on(cluster, instance) group_left (node)
  max by (cluster, instance, node) (kubelet_node_name{job="kubelet", metrics_path="/metrics"})
)"#;
    let r = prom.query(pleg).await;
    let s = find(&r, &on_node).unwrap_or_else(|| panic!("PLEG quantile: {r:?}"));
    assert!(value(s).is_finite() && value(s) > 0.0, "PLEG p99 {s}");
    eprintln!("[{rt}] PLEG relist p99 {:.4} s", value(s));

    // KubeletPodStartUpLatencyHigh (alerts/kubelet.libsonnet), without `> 60`.
    let start = r#"histogram_quantile(0.99,
  sum by (cluster, instance, le) (
    topk by (cluster, instance, le, operation_type) (1,
      rate(kubelet_pod_worker_duration_seconds_bucket{job="kubelet", metrics_path="/metrics"}[5m])
    )
  )
)
* on(cluster, instance) group_left(node)
topk by (cluster, instance, node) (1,
  kubelet_node_name{job="kubelet", metrics_path="/metrics"}
)"#;
    let r = prom.query(start).await;
    let s = find(&r, &on_node).unwrap_or_else(|| panic!("pod worker p99: {r:?}"));
    assert!(
        value(s).is_finite() && value(s) >= 0.0,
        "pod worker p99 {s}; the buckets' rates: {:?}",
        prom.query(r#"rate(kubelet_pod_worker_duration_seconds_count[5m])"#)
            .await
    );
    eprintln!("[{rt}] pod worker duration p99 {:.4} s", value(s));

    // The certificate alerts (alerts/kubelet.libsonnet): the TTLs are the certificates' (the
    // fixture signs them for an hour), and the critical `< 86400` fires.
    for (metric, pem) in [
        (
            "kubelet_certificate_manager_client_ttl_seconds",
            "kubelet-client-current.pem",
        ),
        (
            "kubelet_certificate_manager_server_ttl_seconds",
            "kubelet-server-current.pem",
        ),
    ] {
        let r = prom.query_at(metric, None).await;
        let s = find(&r, &on_node).unwrap_or_else(|| panic!("{metric}: {r:?}"));
        let at = s["value"][0].as_f64().unwrap_or_default();
        let want = not_after(&cert_dir.join(pem)) - at;
        // Served when scraped (≤ one interval before `at`), in whole seconds as upstream's
        // math.Trunc (also metrics::tests::certificate_ttls_are_whole_seconds_as_upstreams).
        assert!(
            value(s) >= want - 1.0 && value(s) <= want + 5.0,
            "{metric} {} vs the certificate's {want}",
            value(s)
        );
        assert_eq!(value(s).fract(), 0.0, "{metric} in whole seconds: {s}");
        for threshold in ["604800", "86400"] {
            let r = prom.query(&format!("{metric} < {threshold}")).await;
            assert!(
                find(&r, &on_node).is_some(),
                "{metric} < {threshold} fires: {r:?}"
            );
        }
        eprintln!("[{rt}] {metric} {} (certificate: {want:.0})", value(s));
    }
    for metric in [
        "kubelet_certificate_manager_client_expiration_renew_errors",
        "kubelet_server_expiration_renew_errors",
    ] {
        let r = prom.query(&format!("increase({metric}[5m])")).await;
        let s = find(&r, &on_node).unwrap_or_else(|| panic!("{metric}: {r:?}"));
        assert_eq!(value(s), 0.0, "{metric}: {s}");
        assert!(
            prom.query(&format!("increase({metric}[5m]) > 0"))
                .await
                .is_empty()
        );
    }

    // KubeletDown's two sides (alerts/kubelet.libsonnet) while the kubelet runs.
    let r = prom
        .query(r#"up{job="kubelet", metrics_path="/metrics"} == 1"#)
        .await;
    assert!(find(&r, &on_node).is_some(), "up: {r:?}");
    let r = prom
        .query(r#"count by (cluster) (kube_node_info{job="kube-state-metrics"})"#)
        .await;
    assert_eq!(r.len(), 1, "kube_node_info: {r:?}");
    assert!(
        prom.query(
            r#"count by (cluster) (kube_node_info{job="kube-state-metrics"})
unless on (cluster)
count by (cluster) (up{job="kubelet", metrics_path="/metrics"} == 1)"#
        )
        .await
        .is_empty(),
        "KubeletDown does not fire while the kubelet is up"
    );

    // CPUThrottlingHigh (alerts/resource_alerts.libsonnet), whole: the burner is throttled in
    // nearly every period.
    let throttling = r#"sum without (id, metrics_path, name, image, endpoint, job, node) (
  topk by (cluster, namespace, pod, container, instance) (1,
    increase(
      container_cpu_cfs_throttled_periods_total{container!="", job="kubelet", metrics_path="/metrics/cadvisor", }
    [5m])
  )
)
/ on (cluster, namespace, pod, container, instance) group_left
sum without (id, metrics_path, name, image, endpoint, job, node) (
  topk by (cluster, namespace, pod, container, instance) (1,
    increase(
      container_cpu_cfs_periods_total{job="kubelet", metrics_path="/metrics/cadvisor", }
    [5m])
  )
)"#;
    let r = prom.query(&format!("{throttling}\n> ( 25 / 100 )")).await;
    let s = find(
        &r,
        &[
            ("pod", burn),
            ("container", "main"),
            ("namespace", "default"),
        ],
    )
    .unwrap_or_else(|| panic!("CPUThrottlingHigh for the burner: {r:?}"));
    assert!(
        find(&r, &[("pod", probe)]).is_none(),
        "the prober has no CPU limit: {r:?}"
    );
    eprintln!("[{rt}] CPUThrottlingHigh: burner throttled {:.3}", value(s));

    // KubePersistentVolumeFillingUp (alerts/storage_alerts.libsonnet): the prober's claim, on a
    // local PV, has the six kubelet_volume_stats_* series with statfs(2)'s figures of the
    // tmpfs (nothing writes to it any more), and the critical expression returns it.
    let want = pv::statfs(claim_path);
    let on_claim = [("namespace", "default"), ("persistentvolumeclaim", claim)];
    for (metric, want) in pv::VOLUME_STATS.iter().zip(want) {
        let r = prom
            .query(&format!(
                r#"{metric}{{job="kubelet", metrics_path="/metrics"}}"#
            ))
            .await;
        assert_eq!(r.len(), 1, "{metric}: the claim's series only: {r:?}");
        let s = find(&r, &on_claim).unwrap_or_else(|| panic!("{metric}: {r:?}"));
        assert_eq!(label(s, "node"), node, "{s}");
        assert_eq!(value(s), want as f64, "{metric} vs statfs {want}");
        eprintln!("[{rt}] {metric}{{persistentvolumeclaim={claim:?}}} {want}");
    }
    assert!(
        want[1] * 100 < want[0] * 3 && want[2] > 0,
        "the tmpfs is filled above 97 %: {want:?}"
    );
    let filling = r#"(
  kubelet_volume_stats_available_bytes{job="kubelet", metrics_path="/metrics"}
    /
  kubelet_volume_stats_capacity_bytes{job="kubelet", metrics_path="/metrics"}
) < 0.03
and
kubelet_volume_stats_used_bytes{job="kubelet", metrics_path="/metrics"} > 0
unless on(cluster, namespace, persistentvolumeclaim)
kube_persistentvolumeclaim_access_mode{ access_mode="ReadOnlyMany"} == 1
unless on(cluster, namespace, persistentvolumeclaim)
kube_persistentvolumeclaim_labels{label_excluded_from_alerts="true"} == 1"#;
    let r = prom.query(filling).await;
    let s = find(&r, &on_claim).unwrap_or_else(|| panic!("KubePersistentVolumeFillingUp: {r:?}"));
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(
        (value(s) - want[1] as f64 / want[0] as f64).abs() < 1e-12,
        "available / capacity {s} vs statfs {want:?}"
    );
    eprintln!(
        "[{rt}] KubePersistentVolumeFillingUp: {claim} available/capacity {:.4}",
        value(s)
    );
    let r = prom
        .query(&format!(
            r#"kube_persistentvolumeclaim_access_mode{{job="kube-state-metrics", persistentvolumeclaim="{claim}"}}"#
        ))
        .await;
    assert_eq!(
        r.first().map(|s| label(s, "access_mode")),
        Some("ReadWriteOnce"),
        "{r:?}"
    );

    // The recording rules (rules/apps.libsonnet), their expressions evaluated here.
    let pod_info = r#"topk by (cluster, namespace, pod) (
  1, max by(cluster, namespace, pod, node) (kube_pod_info{node!=""})
)"#;
    let irate = format!(
        r#"sum by (cluster, namespace, pod, container) (
  irate(container_cpu_usage_seconds_total{{job="kubelet", metrics_path="/metrics/cadvisor", image!=""}}[5m])
) * on (cluster, namespace, pod) group_left(node) {pod_info}"#
    );
    let r = prom.query(&irate).await;
    per_pod(&r, "sum_irate");
    let b = find(&r, &[("pod", burn), ("container", "main")])
        .map(value)
        .unwrap_or_default();
    assert!(b > 0.1 && b < 0.35, "the burner's irate {b}");
    let rate5m = irate.replace("irate(", "rate(");
    let r = prom.query(&rate5m).await;
    per_pod(&r, "sum_rate5m");
    for metric in [
        "container_memory_working_set_bytes",
        "container_memory_rss",
        "container_memory_cache",
        "container_memory_swap",
    ] {
        let expr = format!(
            r#"{metric}{{job="kubelet", metrics_path="/metrics/cadvisor", image!=""}}
* on (cluster, namespace, pod) group_left(node) topk by(cluster, namespace, pod) (1,
  max by(cluster, namespace, pod, node) (kube_pod_info{{node!=""}})
)"#
        );
        let r = prom.query(&expr).await;
        per_pod(&r, metric);
        if metric == "container_memory_working_set_bytes" {
            let s = find(&r, &[("pod", burn), ("container", "main")])
                .map(value)
                .unwrap_or_default();
            assert!(s > 0.0, "the burner's working set {s}");
        }
    }
    // The probes and the resource metrics, per pod.
    let r = prom
        .query(&format!(
            r#"prober_probe_total{{job="kubelet", metrics_path="/metrics/probes", namespace="default", pod="{probe}", container="main", result="successful"}}"#
        ))
        .await;
    for probe_type in ["Readiness", "Liveness"] {
        let s = find(&r, &[("probe_type", probe_type)])
            .unwrap_or_else(|| panic!("prober_probe_total {probe_type}: {r:?}"));
        assert!(value(s) > 0.0, "{s}");
    }
    let r = prom
        .query(&format!(
            r#"container_cpu_usage_seconds_total{{job="kubelet", metrics_path="/metrics/resource", namespace="default", pod="{burn}", container="main"}}"#
        ))
        .await;
    assert_eq!(r.len(), 1, "/metrics/resource: {r:?}");
    // The ServiceMonitor's cAdvisor relabelling dropped the pod-less container_spec_* series.
    let r = prom
        .query(r#"container_spec_cpu_shares{job="kubelet", metrics_path="/metrics/cadvisor"}"#)
        .await;
    assert!(
        !r.is_empty() && r.iter().all(|s| !label(s, "pod").is_empty()),
        "{r:?}"
    );

    // The rules as Prometheus runs them: each evaluated, healthy; the recorded series have the
    // test pods; the alerts that must, fire or pend.
    let groups = wait_for_rules(prom).await;
    let mut n = 0;
    for g in &groups {
        for rule in g["rules"].as_array().into_iter().flatten() {
            n += 1;
            assert_eq!(rule["health"], "ok", "{rule}");
            assert!(
                rule["lastError"].as_str().unwrap_or_default().is_empty(),
                "{rule}"
            );
        }
    }
    assert_eq!(n, 28, "every rule of the file is loaded");
    for record in [
        "node_namespace_pod_container:container_cpu_usage_seconds_total:sum_irate",
        "node_namespace_pod_container:container_cpu_usage_seconds_total:sum_rate5m",
        "node_namespace_pod_container:container_memory_working_set_bytes",
        "node_namespace_pod_container:container_memory_rss",
        "node_namespace_pod_container:container_memory_cache",
        "node_namespace_pod_container:container_memory_swap",
    ] {
        let r = prom.query(record).await;
        per_pod(&r, record);
    }
    let r = prom
        .query(r#"node_quantile:kubelet_pleg_relist_duration_seconds:histogram_quantile"#)
        .await;
    for q in ["0.99", "0.9", "0.5"] {
        assert!(
            find(&r, &[("node", node), ("quantile", q)]).is_some(),
            "PLEG quantile {q}: {r:?}"
        );
    }
    let expected = [
        (
            "KubeletClientCertificateExpiration",
            "firing",
            vec![("node", node), ("severity", "critical")],
        ),
        (
            "KubeletClientCertificateExpiration",
            "firing",
            vec![("node", node), ("severity", "warning")],
        ),
        (
            "KubeletServerCertificateExpiration",
            "firing",
            vec![("node", node), ("severity", "critical")],
        ),
        (
            "CPUThrottlingHigh",
            "pending",
            vec![("pod", burn), ("container", "main")],
        ),
    ];
    let has = |alerts: &[Value], (name, state, labels): &(&str, &str, Vec<(&str, &str)>)| {
        alerts.iter().any(|a| {
            a["labels"]["alertname"] == *name
                && a["state"] == *state
                && labels.iter().all(|(k, v)| a["labels"][*k] == *v)
        })
    };
    // KubePersistentVolumeFillingUp (critical, `for: 1m`): pending from its first evaluation
    // with the claim filled, firing a minute later (the test may be past that by now).
    let filling_up = |alerts: &[Value]| {
        alerts.iter().any(|a| {
            a["labels"]["alertname"] == "KubePersistentVolumeFillingUp"
                && (a["state"] == "pending" || a["state"] == "firing")
                && a["labels"]["severity"] == "critical"
                && a["labels"]["namespace"] == "default"
                && a["labels"]["persistentvolumeclaim"] == claim
        })
    };
    // The alerts the rules' next evaluations raise.
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    let alerts = loop {
        let data = prom.api("/api/v1/alerts").await;
        let alerts = data["alerts"].as_array().cloned().unwrap_or_default();
        if expected.iter().all(|e| has(&alerts, e)) && filling_up(&alerts) {
            break alerts;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "alerts {expected:?}, got: {alerts:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for quiet in [
        "KubeletDown",
        "KubeletInstanceUnreachable",
        "KubeletTooManyPods",
        "KubeletPlegDurationHigh",
        "KubeletPodStartUpLatencyHigh",
        "KubeletClientCertificateRenewalErrors",
        "KubeletServerCertificateRenewalErrors",
    ] {
        assert!(
            !alerts.iter().any(|a| a["labels"]["alertname"] == quiet),
            "{quiet} is quiet: {alerts:?}"
        );
    }
    // The warning one needs available space falling over 6 h: the tmpfs's is constant.
    assert!(
        !alerts.iter().any(
            |a| a["labels"]["alertname"] == "KubePersistentVolumeFillingUp"
                && a["labels"]["severity"] == "warning"
        ),
        "{alerts:?}"
    );
    eprintln!(
        "[{rt}] {n} rules healthy; {} alerts active: {:?}",
        alerts.len(),
        alerts
            .iter()
            .map(|a| format!("{}:{}", a["labels"]["alertname"], a["state"]))
            .collect::<Vec<_>>()
    );
}

/// `/api/v1/rules` once every rule has been evaluated at least once (and the recording rules'
/// rates have two samples of their inputs).
async fn wait_for_rules(prom: &Prometheus) -> Vec<Value> {
    let end = tokio::time::Instant::now() + DEADLINE;
    loop {
        let data = prom.api("/api/v1/rules").await;
        let groups = data["groups"].as_array().cloned().unwrap_or_default();
        let evaluated = !groups.is_empty()
            && groups.iter().all(|g| {
                g["rules"].as_array().into_iter().flatten().all(|r| {
                    r["lastEvaluation"]
                        .as_str()
                        .is_some_and(|t| !t.starts_with("0001-"))
                })
            });
        if evaluated {
            return groups;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "rules never evaluated: {groups:?}\n{}",
            prom.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_prometheus_containerd() {
    kubelet_prometheus(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_prometheus_dockershim() {
    kubelet_prometheus(RuntimeKind::Dockershim).await;
}
