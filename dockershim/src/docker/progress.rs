//! Progress of an image pull (upstream `libdocker`'s `progressReporter`): what the pull stream
//! said last about each layer, summed up for the log line written every
//! [`REPORT_INTERVAL`] while a pull runs (`Pulling image "…": 2/5 layers, 12.4 MB/40.1 MB
//! downloaded, …`) and once at its end.

use std::collections::BTreeMap;

use bollard::models::CreateImageInfo;
use node_common::pull_progress::PullReport;
pub use node_common::pull_progress::REPORT_INTERVAL;

#[derive(Debug, Default, Clone)]
struct Layer {
    downloaded: u64,
    total: u64,
    done: bool,
}

/// The state of one pull, fed with every message of the pull stream.
#[derive(Debug, Default)]
pub struct PullProgress {
    layers: BTreeMap<String, Layer>,
    last: String,
}

impl PullProgress {
    /// Takes one message of the stream into account.
    pub fn update(&mut self, info: &CreateImageInfo) {
        let status = info.status.as_deref().unwrap_or_default();
        let Some(id) = info.id.as_deref().filter(|id| !id.is_empty()) else {
            if !status.is_empty() {
                self.last = status.to_string();
            }
            return;
        };
        self.last = format!("{id}: {status}");
        // A tag line ("latest: Pulling from library/busybox") carries the tag as its id.
        if status.starts_with("Pulling from") {
            return;
        }
        let layer = self.layers.entry(id.to_string()).or_default();
        let detail = info.progress_detail.as_ref();
        let current = detail.and_then(|d| d.current).unwrap_or(0).max(0) as u64;
        let total = detail.and_then(|d| d.total).unwrap_or(0).max(0) as u64;
        match status {
            "Downloading" => {
                layer.downloaded = current;
                if total > 0 {
                    layer.total = total;
                }
            }
            "Download complete" | "Verifying Checksum" => layer.downloaded = layer.total,
            "Pull complete" | "Already exists" => {
                layer.done = true;
                layer.downloaded = layer.total;
            }
            _ => {}
        }
    }

    /// What the pull has done so far: layers done and seen, bytes downloaded and to download
    /// as far as known.
    pub fn report(&self) -> PullReport {
        PullReport {
            layers_done: self.layers.values().filter(|l| l.done).count(),
            layers: self.layers.len(),
            downloaded: self.layers.values().map(|l| l.downloaded).sum(),
            total: self.layers.values().map(|l| l.total).sum(),
        }
    }

    /// One line for the log.
    pub fn summary(&self) -> String {
        format!("{}; last: {:?}", self.report(), self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::ProgressDetail;

    fn msg(id: &str, status: &str, current: Option<i64>, total: Option<i64>) -> CreateImageInfo {
        CreateImageInfo {
            id: (!id.is_empty()).then(|| id.to_string()),
            status: Some(status.to_string()),
            progress_detail: Some(ProgressDetail { current, total }),
            ..Default::default()
        }
    }

    fn totals(p: &PullProgress) -> (usize, usize, u64, u64) {
        let r = p.report();
        (r.layers_done, r.layers, r.downloaded, r.total)
    }

    #[test]
    fn layers_and_bytes_follow_the_stream() {
        let mut p = PullProgress::default();
        p.update(&msg("1.36", "Pulling from library/busybox", None, None));
        p.update(&msg("aaa", "Pulling fs layer", None, None));
        p.update(&msg("bbb", "Already exists", None, None));
        p.update(&msg("aaa", "Downloading", Some(1_200_000), Some(3_000_000)));
        assert_eq!(totals(&p), (1, 2, 1_200_000, 3_000_000));
        assert_eq!(
            p.summary(),
            "1/2 layers, 1.2 MB of 3.0 MB downloaded; last: \"aaa: Downloading\""
        );
        p.update(&msg("aaa", "Download complete", None, None));
        p.update(&msg("aaa", "Extracting", Some(10), Some(3_000_000)));
        assert_eq!(totals(&p), (1, 2, 3_000_000, 3_000_000));
        p.update(&msg("aaa", "Pull complete", None, None));
        p.update(&msg("", "Digest: sha256:abc", None, None));
        assert_eq!(totals(&p), (2, 2, 3_000_000, 3_000_000));
        assert!(
            p.summary().ends_with("last: \"Digest: sha256:abc\""),
            "{}",
            p.summary()
        );
    }
}
