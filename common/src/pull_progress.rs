//! Progress of image pulls, handed from a runtime to the kubelet in the same process (the
//! kubelet's embedded dockershim). CRI's `PullImage` answers only when the pull is over, so a
//! kubelet on a remote runtime sees nothing of a running pull (that runtime logs it itself);
//! in one process, the runtime publishes what its pull stream says on a [`PullProgressBoard`]
//! and the kubelet's image puller reports it in its log and its `Pulling` events.
//!
//! The kubelet [`watch`](PullProgressBoard::watch)es an image before it asks for the pull; the
//! runtime takes a [`publisher`](PullProgressBoard::publisher) when the pull starts, which is
//! `None` when nobody watches, so a pull nobody waits for costs nothing. Images are keyed by
//! the reference exactly as the CRI request carries it.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

/// How often a running pull is reported (upstream dockershim's
/// `defaultImagePullingProgressReportInterval`), by the runtime's log and the kubelet alike.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(10);

/// What a pull has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PullReport {
    /// Layers pulled completely (or already present).
    pub layers_done: usize,
    /// Layers the pull stream has named so far.
    pub layers: usize,
    /// Bytes downloaded.
    pub downloaded: u64,
    /// Bytes to download, as far as the stream has told.
    pub total: u64,
}

impl fmt::Display for PullReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} layers, {} of {} downloaded",
            self.layers_done,
            self.layers,
            human_bytes(self.downloaded),
            human_bytes(self.total)
        )
    }
}

/// Bytes as Docker's CLI shows them (decimal units).
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 4] = ["B", "kB", "MB", "GB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1000.0 && unit < UNITS.len() - 1 {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

type Watched = HashMap<String, Arc<watch::Sender<Option<PullReport>>>>;

/// Where the runtime posts the progress of the pulls the kubelet is waiting for. Cloning it
/// gives another handle on the same board.
#[derive(Debug, Clone, Default)]
pub struct PullProgressBoard {
    watched: Arc<Mutex<Watched>>,
}

impl PullProgressBoard {
    fn lock(&self) -> std::sync::MutexGuard<'_, Watched> {
        // The map holds no invariant a panic could break half-way.
        self.watched.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The kubelet, before it asks for a pull of `image`: the progress of pulls of it from now
    /// on, until the returned watch is dropped.
    pub fn watch(&self, image: &str) -> PullWatch {
        let mut watched = self.lock();
        let rx = match watched.get(image) {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = watch::channel(None);
                watched.insert(image.to_string(), Arc::new(tx));
                rx
            }
        };
        PullWatch {
            board: self.clone(),
            image: image.to_string(),
            rx,
        }
    }

    /// The runtime, when a pull of `image` starts: where to post its progress, or `None` when
    /// nobody watches that image.
    pub fn publisher(&self, image: &str) -> Option<PullPublisher> {
        self.lock().get(image).cloned().map(PullPublisher)
    }
}

/// The runtime's end of a watched pull.
#[derive(Debug, Clone)]
pub struct PullPublisher(Arc<watch::Sender<Option<PullReport>>>);

impl PullPublisher {
    /// Posts the pull's progress so far (the watchers see the latest only).
    pub fn publish(&self, report: PullReport) {
        self.0.send_if_modified(|last| {
            let changed = *last != Some(report);
            *last = Some(report);
            changed
        });
    }
}

/// The kubelet's end: the latest progress of the image it waits for.
#[derive(Debug)]
pub struct PullWatch {
    board: PullProgressBoard,
    image: String,
    rx: watch::Receiver<Option<PullReport>>,
}

impl PullWatch {
    /// What the runtime posted last, if anything.
    pub fn latest(&self) -> Option<PullReport> {
        *self.rx.borrow()
    }
}

impl Drop for PullWatch {
    fn drop(&mut self) {
        let mut watched = self.board.lock();
        // Ours is the last receiver: nobody waits for this image any more.
        if watched
            .get(&self.image)
            .is_some_and(|tx| tx.receiver_count() <= 1)
        {
            watched.remove(&self.image);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(done: usize, downloaded: u64) -> PullReport {
        PullReport {
            layers_done: done,
            layers: 2,
            downloaded,
            total: 3_000_000,
        }
    }

    #[test]
    fn a_pull_nobody_watches_has_no_publisher() {
        let board = PullProgressBoard::default();
        assert!(board.publisher("busybox").is_none());
        let w = board.watch("busybox");
        assert!(board.publisher("busybox:1.36").is_none(), "keyed as sent");
        assert!(board.publisher("busybox").is_some());
        drop(w);
        assert!(
            board.publisher("busybox").is_none(),
            "forgotten with its watch"
        );
    }

    #[test]
    fn watchers_see_the_latest_report_until_the_last_one_goes() {
        let board = PullProgressBoard::default();
        let a = board.watch("img");
        let b = board.watch("img");
        assert_eq!(a.latest(), None);
        let p = board.publisher("img").expect("watched");
        p.publish(report(0, 1_200_000));
        p.publish(report(1, 3_000_000));
        assert_eq!(a.latest(), Some(report(1, 3_000_000)));
        assert_eq!(b.latest(), Some(report(1, 3_000_000)));
        drop(a);
        assert!(board.publisher("img").is_some(), "b still watches");
        drop(b);
        assert!(board.publisher("img").is_none());
        // A publisher taken before the last watch went posts into nothing, harmlessly.
        p.publish(report(2, 3_000_000));
    }

    #[test]
    fn reports_read_like_dockers_sizes() {
        assert_eq!(
            report(1, 1_200_000).to_string(),
            "1/2 layers, 1.2 MB of 3.0 MB downloaded"
        );
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(1_000), "1.0 kB");
        assert_eq!(human_bytes(1_500), "1.5 kB");
        assert_eq!(human_bytes(40_100_000), "40.1 MB");
        assert_eq!(human_bytes(2_500_000_000), "2.5 GB");
    }
}
