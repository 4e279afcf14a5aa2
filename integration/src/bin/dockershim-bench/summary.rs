//! The numbers: a sample's summary (nearest-rank p50 / p95, min and max, in ms), the lifecycle
//! result of one operation on both sides, the scale phase's results, and how the tables print
//! milliseconds and MiB.

use std::time::Duration;

/// p50/p95/min/max of a sample, in milliseconds.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(crate) struct Summary {
    pub(crate) n: usize,
    pub(crate) p50_ms: f64,
    pub(crate) p95_ms: f64,
    pub(crate) min_ms: f64,
    pub(crate) max_ms: f64,
}

pub(crate) fn summarize(samples: &[Duration]) -> Summary {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    // Nearest-rank percentile.
    let pct = |p: f64| -> f64 {
        if ms.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * ms.len() as f64).ceil().max(1.0) as usize;
        ms[rank.min(ms.len()) - 1]
    };
    Summary {
        n: ms.len(),
        p50_ms: pct(50.0),
        p95_ms: pct(95.0),
        min_ms: ms.first().copied().unwrap_or(f64::NAN),
        max_ms: ms.last().copied().unwrap_or(f64::NAN),
    }
}

#[derive(Debug, serde::Serialize)]
pub(crate) struct OpResult {
    pub(crate) op: &'static str,
    pub(crate) dockershim: Summary,
    pub(crate) direct: Summary,
    pub(crate) ratio_p50: f64,
}

#[derive(Debug, Default, serde::Serialize)]
pub(crate) struct ScaleResult {
    pub(crate) containers: usize,
    pub(crate) sandboxes: usize,
    pub(crate) setup_seconds: f64,
    pub(crate) list_containers_returned: usize,
    pub(crate) list_containers: Option<Summary>,
    pub(crate) docker_list: Option<Summary>,
    pub(crate) docker_list_with_sizes: Option<Summary>,
    pub(crate) list_container_stats_returned: usize,
    pub(crate) list_container_stats: Option<Summary>,
    pub(crate) direct_stats: Option<Summary>,
}

pub(crate) fn fmt_ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

pub(crate) fn mib(kib: Option<u64>) -> String {
    kib.map(|k| format!("{:.1} MiB", k as f64 / 1024.0))
        .unwrap_or_else(|| "n/a".to_string())
}
