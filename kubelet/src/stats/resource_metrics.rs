//! `/metrics/resource` (upstream `pkg/kubelet/metrics/collectors/resource_metrics.go`, 1.26):
//! the node's, pods' and containers' CPU and memory from the CPU-and-memory summary, in the
//! Prometheus text format as Go's client renders it — families sorted by name, samples by their
//! label values, `[ALPHA]` help texts, values as Go's `%g` (`FormatFloat(v, 'g', -1, 64)`), and
//! each usage sample stamped with the time of its figure in milliseconds.

use std::fmt::Write as _;

use super::types::{PodStats, Summary, Time};

/// A metric family: name, help, type.
struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
}

const CONTAINER_CPU: Family = Family {
    name: "container_cpu_usage_seconds_total",
    help: "Cumulative cpu time consumed by the container in core-seconds",
    kind: "counter",
};
const CONTAINER_MEMORY: Family = Family {
    name: "container_memory_working_set_bytes",
    help: "Current working set of the container in bytes",
    kind: "gauge",
};
const CONTAINER_START: Family = Family {
    name: "container_start_time_seconds",
    help: "Start time of the container since unix epoch in seconds",
    kind: "gauge",
};
const NODE_CPU: Family = Family {
    name: "node_cpu_usage_seconds_total",
    help: "Cumulative cpu time consumed by the node in core-seconds",
    kind: "counter",
};
const NODE_MEMORY: Family = Family {
    name: "node_memory_working_set_bytes",
    help: "Current working set of the node in bytes",
    kind: "gauge",
};
const POD_CPU: Family = Family {
    name: "pod_cpu_usage_seconds_total",
    help: "Cumulative cpu time consumed by the pod in core-seconds",
    kind: "counter",
};
const POD_MEMORY: Family = Family {
    name: "pod_memory_working_set_bytes",
    help: "Current working set of the pod in bytes",
    kind: "gauge",
};
const SCRAPE_ERROR: Family = Family {
    name: "scrape_error",
    help: "1 if there was an error while getting container metrics, 0 otherwise",
    kind: "gauge",
};

/// A float as Go's `strconv.FormatFloat(v, 'g', -1, 64)` (what client_golang writes): the
/// shortest representation, with an exponent of at least two digits when the decimal exponent
/// is below -4 or 6 and more (Go decides on precision 6 for the shortest form).
pub fn go_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let sci = format!("{v:e}");
    let (mantissa, e) = sci.split_once('e').unwrap_or((&sci, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    if (-4..6).contains(&e) {
        return format!("{v}");
    }
    let sign = if e < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", e.abs())
}

/// A label value escaped for the text format.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One sample: its labels (name, value; sorted by name), value and time stamp.
struct Sample {
    labels: Vec<(&'static str, String)>,
    value: f64,
    time: Option<Time>,
}

fn render_family(out: &mut String, f: &Family, mut samples: Vec<Sample>) {
    if samples.is_empty() {
        return;
    }
    samples.sort_by(|a, b| a.labels.cmp(&b.labels));
    let _ = writeln!(out, "# HELP {} [ALPHA] {}", f.name, f.help);
    let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
    for s in samples {
        out.push_str(f.name);
        if !s.labels.is_empty() {
            let labels: Vec<String> = s
                .labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = write!(out, "{{{}}}", labels.join(","));
        }
        let _ = write!(out, " {}", go_float(s.value));
        if let Some(ns) = s.time.and_then(|t| t.unix_nanos()) {
            let _ = write!(out, " {}", ns.div_euclid(1_000_000));
        }
        out.push('\n');
    }
}

fn pod_labels(p: &PodStats) -> Vec<(&'static str, String)> {
    vec![
        ("namespace", p.pod_ref.namespace.clone()),
        ("pod", p.pod_ref.name.clone()),
    ]
}

fn container_labels(p: &PodStats, container: &str) -> Vec<(&'static str, String)> {
    let mut l = vec![("container", container.to_string())];
    l.extend(pod_labels(p));
    l
}

const NS_PER_SECOND: f64 = 1e9;

/// The page: the summary's figures, or only `scrape_error 1` when the summary failed.
pub fn render(summary: Option<&Summary>) -> String {
    let mut out = String::new();
    let Some(s) = summary else {
        render_family(
            &mut out,
            &SCRAPE_ERROR,
            vec![Sample {
                labels: vec![],
                value: 1.0,
                time: None,
            }],
        );
        return out;
    };
    let (mut c_cpu, mut c_mem, mut c_start, mut p_cpu, mut p_mem) =
        (vec![], vec![], vec![], vec![], vec![]);
    for p in &s.pods {
        for c in &p.containers {
            if let Some(start) = c
                .start_time
                .unix_nanos()
                .filter(|ns| *ns >= NS_PER_SECOND as i64)
            {
                c_start.push(Sample {
                    labels: container_labels(p, &c.name),
                    value: start as f64 / NS_PER_SECOND,
                    time: None,
                });
            }
            if let Some(cpu) = &c.cpu
                && let Some(ns) = cpu.usage_core_nano_seconds
            {
                c_cpu.push(Sample {
                    labels: container_labels(p, &c.name),
                    value: ns as f64 / NS_PER_SECOND,
                    time: Some(cpu.time),
                });
            }
            if let Some(m) = &c.memory
                && let Some(ws) = m.working_set_bytes
            {
                c_mem.push(Sample {
                    labels: container_labels(p, &c.name),
                    value: ws as f64,
                    time: Some(m.time),
                });
            }
        }
        if let Some(cpu) = &p.cpu
            && let Some(ns) = cpu.usage_core_nano_seconds
        {
            p_cpu.push(Sample {
                labels: pod_labels(p),
                value: ns as f64 / NS_PER_SECOND,
                time: Some(cpu.time),
            });
        }
        if let Some(m) = &p.memory
            && let Some(ws) = m.working_set_bytes
        {
            p_mem.push(Sample {
                labels: pod_labels(p),
                value: ws as f64,
                time: Some(m.time),
            });
        }
    }
    let node_cpu = s
        .node
        .cpu
        .as_ref()
        .and_then(|c| {
            Some(Sample {
                labels: vec![],
                value: c.usage_core_nano_seconds? as f64 / NS_PER_SECOND,
                time: Some(c.time),
            })
        })
        .into_iter()
        .collect();
    let node_mem = s
        .node
        .memory
        .as_ref()
        .and_then(|m| {
            Some(Sample {
                labels: vec![],
                value: m.working_set_bytes? as f64,
                time: Some(m.time),
            })
        })
        .into_iter()
        .collect();
    render_family(&mut out, &CONTAINER_CPU, c_cpu);
    render_family(&mut out, &CONTAINER_MEMORY, c_mem);
    render_family(&mut out, &CONTAINER_START, c_start);
    render_family(&mut out, &NODE_CPU, node_cpu);
    render_family(&mut out, &NODE_MEMORY, node_mem);
    render_family(&mut out, &POD_CPU, p_cpu);
    render_family(&mut out, &POD_MEMORY, p_mem);
    render_family(
        &mut out,
        &SCRAPE_ERROR,
        vec![Sample {
            labels: vec![],
            value: 0.0,
            time: None,
        }],
    );
    out
}

#[cfg(test)]
mod tests {
    use super::super::types::*;
    use super::*;

    #[test]
    fn floats_are_formatted_as_go_does() {
        assert_eq!(go_float(0.0), "0");
        assert_eq!(go_float(10.0), "10");
        assert_eq!(go_float(6.470924496), "6.470924496");
        assert_eq!(go_float(123456.5), "123456.5");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(14680064.0), "1.4680064e+07");
        assert_eq!(go_float(1.6243962483020916e9), "1.6243962483020916e+09");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(2.5e22), "2.5e+22");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001234), "1.234e-05");
        assert_eq!(go_float(-2.5), "-2.5");
    }

    fn at(secs: i64) -> Time {
        Time::from_unix_nanos(secs * 1_000_000_000 + 250_000_000)
    }

    #[test]
    fn the_page_has_upstreams_names_labels_order_and_stamps() {
        let container = |name: &str, cpu_ns: u64, ws: u64| ContainerStats {
            name: name.into(),
            start_time: Time::from_unix_nanos(1_600_000_000_500_000_000),
            cpu: Some(CpuStats {
                time: at(1_700_000_000),
                usage_core_nano_seconds: Some(cpu_ns),
                usage_nano_cores: Some(1),
            }),
            memory: Some(MemoryStats {
                time: at(1_700_000_001),
                working_set_bytes: Some(ws),
                ..Default::default()
            }),
            ..Default::default()
        };
        let pod = |name: &str, containers: Vec<ContainerStats>| PodStats {
            pod_ref: PodReference {
                name: name.into(),
                namespace: "kube-system".into(),
                uid: format!("uid-{name}"),
            },
            cpu: Some(CpuStats {
                time: at(1_700_000_002),
                usage_core_nano_seconds: Some(6_502_151_658),
                usage_nano_cores: None,
            }),
            memory: Some(MemoryStats {
                time: at(1_700_000_003),
                working_set_bytes: Some(14_680_064),
                ..Default::default()
            }),
            containers,
            ..Default::default()
        };
        let summary = Summary {
            node: NodeStats {
                node_name: "n".into(),
                cpu: Some(CpuStats {
                    time: at(1_700_000_004),
                    usage_core_nano_seconds: Some(357_354_910_000),
                    usage_nano_cores: None,
                }),
                memory: Some(MemoryStats {
                    time: at(1_700_000_005),
                    working_set_bytes: Some(1_616_195_584),
                    ..Default::default()
                }),
                ..Default::default()
            },
            pods: vec![
                pod("web", vec![container("web", 1_500_000_000, 4096)]),
                pod(
                    "coredns",
                    vec![
                        container("coredns", 6_470_924_496, 14_680_064),
                        // No CPU figure: no CPU sample (upstream skips nil usage).
                        ContainerStats {
                            name: "sidecar".into(),
                            ..Default::default()
                        },
                    ],
                ),
            ],
        };
        let want = r#"# HELP container_cpu_usage_seconds_total [ALPHA] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="coredns",namespace="kube-system",pod="coredns"} 6.470924496 1700000000250
container_cpu_usage_seconds_total{container="web",namespace="kube-system",pod="web"} 1.5 1700000000250
# HELP container_memory_working_set_bytes [ALPHA] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="coredns",namespace="kube-system",pod="coredns"} 1.4680064e+07 1700000001250
container_memory_working_set_bytes{container="web",namespace="kube-system",pod="web"} 4096 1700000001250
# HELP container_start_time_seconds [ALPHA] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="coredns",namespace="kube-system",pod="coredns"} 1.6000000005e+09
container_start_time_seconds{container="web",namespace="kube-system",pod="web"} 1.6000000005e+09
# HELP node_cpu_usage_seconds_total [ALPHA] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 357.35491 1700000004250
# HELP node_memory_working_set_bytes [ALPHA] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1.616195584e+09 1700000005250
# HELP pod_cpu_usage_seconds_total [ALPHA] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="kube-system",pod="coredns"} 6.502151658 1700000002250
pod_cpu_usage_seconds_total{namespace="kube-system",pod="web"} 6.502151658 1700000002250
# HELP pod_memory_working_set_bytes [ALPHA] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace="kube-system",pod="coredns"} 1.4680064e+07 1700000003250
pod_memory_working_set_bytes{namespace="kube-system",pod="web"} 1.4680064e+07 1700000003250
# HELP scrape_error [ALPHA] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE scrape_error gauge
scrape_error 0
"#;
        assert_eq!(render(Some(&summary)), want);
        assert_eq!(
            render(None),
            "# HELP scrape_error [ALPHA] 1 if there was an error while getting container metrics, 0 otherwise\n# TYPE scrape_error gauge\nscrape_error 1\n"
        );
    }
}
