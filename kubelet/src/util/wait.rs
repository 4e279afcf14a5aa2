//! Upstream `k8s.io/apimachinery/pkg/util/wait`'s jittered periodic loop: `Jitter` and
//! `JitterUntil` with `sliding` true, which the Go kubelet uses for its node status updates and
//! its node lease renewals (jitter factor 0.04), so that a fleet of nodes does not drift into
//! writing at the same instant.

use std::time::Duration;

/// Upstream `wait.Jitter`: `duration` plus a uniformly random share of up to `max_factor` of it
/// (a factor of zero or less means 1.0, as upstream).
pub fn jitter(duration: Duration, max_factor: f64) -> Duration {
    let factor = if max_factor <= 0.0 { 1.0 } else { max_factor };
    duration + duration.mul_f64(rand::random::<f64>() * factor)
}

/// Upstream `wait.JitterUntil(f, period, jitter_factor, sliding=true, stop)` as a ticker: the
/// first [`tick`](JitterUntil::tick) returns at once, each later one `jitter(period,
/// jitter_factor)` after it is called. Called again once a run has *finished*, it makes a slow run
/// push the next one back rather than pile runs up, as upstream's sliding loop. (A loop per
/// ticker: inside one `select!` over several tickers, the losers' waits would start over.)
#[derive(Debug)]
pub struct JitterUntil {
    period: Duration,
    jitter_factor: f64,
    started: bool,
}

impl JitterUntil {
    pub fn new(period: Duration, jitter_factor: f64) -> Self {
        JitterUntil {
            period,
            jitter_factor,
            started: false,
        }
    }

    /// Waits for the next run.
    pub async fn tick(&mut self) {
        if !self.started {
            self.started = true;
            return;
        }
        let wait = if self.jitter_factor > 0.0 {
            jitter(self.period, self.jitter_factor)
        } else {
            self.period
        };
        tokio::time::sleep(wait).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[test]
    fn jitter_stays_within_its_factor() {
        let d = Duration::from_secs(10);
        for _ in 0..1000 {
            let j = jitter(d, 0.04);
            assert!(j >= d && j <= Duration::from_millis(10_400), "{j:?}");
        }
        // Upstream: a factor of zero or less is 1.0.
        for _ in 0..100 {
            let j = jitter(d, 0.0);
            assert!(j >= d && j <= Duration::from_secs(20), "{j:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn runs_at_once_then_a_jittered_period_after_each_run_finished() {
        let t0 = Instant::now();
        let mut ticker = JitterUntil::new(Duration::from_secs(10), 0.04);
        let mut starts = Vec::new();
        loop {
            ticker.tick().await;
            if t0.elapsed() > Duration::from_secs(61) {
                break;
            }
            starts.push(t0.elapsed());
            // Each run takes 2 s: sliding means the next starts 10–10.4 s after this one
            // ends, not 10 s after it began.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        assert_eq!(starts[0], Duration::ZERO, "runs at once");
        // 0, then every 12–12.4 s: 5 or 6 runs in 61 s (6 only if every jitter is small).
        assert!((5..=6).contains(&starts.len()), "{starts:?}");
        for w in starts.windows(2) {
            let gap = w[1] - w[0];
            assert!(
                gap >= Duration::from_secs(12) && gap <= Duration::from_millis(12_400),
                "gap {gap:?} in {starts:?}"
            );
        }
    }
}
