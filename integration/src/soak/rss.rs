//! The kubelet's and dockershim's resident memory over a soak: VmRSS from
//! `/proc/<pid>/status` every N seconds, of whichever process runs at that moment (a killed
//! process's successor starts from scratch; the kill times are in the report), and its
//! start, maximum and end.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::kubelet_proc::rss_mib;
use crate::soak::node::Pids;

/// One sample: seconds since the start and MiB (`None` while the process is down).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    pub t_s: f64,
    pub kubelet_mib: Option<f64>,
    pub dockershim_mib: Option<f64>,
}

/// First, largest and last sample of one process, in MiB.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub start_mib: f64,
    pub max_mib: f64,
    pub end_mib: f64,
}

/// The summary of `values` (`None` when there is none).
pub fn summarize(values: impl IntoIterator<Item = Option<f64>>) -> Option<Summary> {
    let v: Vec<f64> = values.into_iter().flatten().collect();
    Some(Summary {
        start_mib: *v.first()?,
        max_mib: v.iter().copied().fold(f64::MIN, f64::max),
        end_mib: *v.last()?,
    })
}

/// Samples the processes of `pids` every `every` until `stop`; the samples.
pub async fn sample(
    pids: Arc<Mutex<Pids>>,
    every: Duration,
    start: Instant,
    stop: CancellationToken,
) -> Vec<Sample> {
    let mut out = Vec::new();
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return out,
            _ = tick.tick() => {}
        }
        let p = *pids.lock();
        out.push(Sample {
            t_s: start.elapsed().as_secs_f64(),
            kubelet_mib: p.kubelet.and_then(rss_mib),
            dockershim_mib: p.dockershim.and_then(rss_mib),
        });
    }
}

/// At most `rows` samples spread evenly over `samples`, the first and last included.
pub fn thin(samples: &[Sample], rows: usize) -> Vec<Sample> {
    if samples.len() <= rows || rows < 2 {
        return samples.to_vec();
    }
    (0..rows)
        .map(|i| samples[i * (samples.len() - 1) / (rows - 1)])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_skips_gaps() {
        let s = summarize([None, Some(10.0), Some(30.0), None, Some(20.0)]).expect("some");
        assert_eq!(
            s,
            Summary {
                start_mib: 10.0,
                max_mib: 30.0,
                end_mib: 20.0
            }
        );
        assert_eq!(summarize([None, None]), None);
    }

    #[test]
    fn thinning_keeps_the_ends() {
        let s: Vec<Sample> = (0..100)
            .map(|i| Sample {
                t_s: i as f64,
                kubelet_mib: None,
                dockershim_mib: None,
            })
            .collect();
        let t = thin(&s, 10);
        assert_eq!(t.len(), 10);
        assert_eq!(t[0].t_s, 0.0);
        assert_eq!(t[9].t_s, 99.0);
        assert_eq!(thin(&s[..5], 10).len(), 5);
    }

    #[tokio::test]
    async fn samples_this_process() {
        let pids = Arc::new(Mutex::new(Pids {
            kubelet: Some(std::process::id()),
            dockershim: None,
        }));
        let stop = CancellationToken::new();
        let task = tokio::spawn(sample(
            pids,
            Duration::from_millis(10),
            Instant::now(),
            stop.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.cancel();
        let s = task.await.expect("sampler");
        assert!(!s.is_empty());
        assert!(s.iter().all(|x| x.kubelet_mib.is_some_and(|m| m > 0.0)));
        assert!(s.iter().all(|x| x.dockershim_mib.is_none()));
    }
}
