//! The file pod source (upstream `pkg/kubelet/config/file.go` + `file_linux.go`). This module
//! owns reading `--pod-manifest-path` (a directory of manifests, one Pod per file, dotfiles and
//! subdirectories skipped; or a single file; a file over [`MAX_MANIFEST_BYTES`] is refused
//! unread), turning each manifest into a static pod via
//! [`super::common`], and re-listing every `file_check_frequency` and shortly after inotify
//! events (debounced). Each time the set of pods changes it sends a full `SET` snapshot; a
//! missing path counts as an empty snapshot so the source is still marked seen. A malformed
//! manifest never hides the others: it is logged and published as [`ManifestError`]s on a
//! `watch` channel for the kubelet to expose. A file that held a valid pod and now fails to load
//! keeps that pod until it has been failing for a whole check period: a file rewritten in place
//! is empty or half written for a moment, and that must not delete its pod (upstream likewise
//! never drops a pod on a watch event for a file that fails to parse, only on its periodic
//! listing). A file that stays broken loses its pod within two periods.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use notify::{RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::common::{
    DecodeError, MAX_MANIFEST_BYTES, Manifest, decode_failure, decode_manifest, prepare_static_pod,
    validation_failures,
};
use super::{FILE_SOURCE, ManifestError, PodOperation, SourceSender};

/// How long to wait after an inotify event for more events before re-listing.
pub const EVENT_DEBOUNCE: Duration = Duration::from_millis(20);

/// One listing: the valid pods by file (so in file-name order) and the errors of the bad files.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    /// Pods from valid manifests, by file.
    pub pods: BTreeMap<String, Pod>,
    /// Problems with the other manifests.
    pub errors: Vec<ManifestError>,
}

/// Why a manifest file was not read.
enum ReadFailure {
    /// Over [`MAX_MANIFEST_BYTES`]: its size, or how much was read before the cap.
    TooLarge(u64),
    /// The I/O error.
    Io(std::io::Error),
}

/// Reads `path` unless it is over [`MAX_MANIFEST_BYTES`]: its size is checked before reading,
/// and the read stops one byte past the cap (a file growing meanwhile, or one whose size says
/// nothing, as in /proc, is cut there).
fn read_capped(path: &Path) -> Result<Vec<u8>, ReadFailure> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(ReadFailure::Io)?;
    let size = file.metadata().map_err(ReadFailure::Io)?.len();
    if size > MAX_MANIFEST_BYTES as u64 {
        return Err(ReadFailure::TooLarge(size));
    }
    let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(MAX_MANIFEST_BYTES as u64 + 1)
        .read_to_end(&mut data)
        .map_err(ReadFailure::Io)?;
    if data.len() > MAX_MANIFEST_BYTES {
        return Err(ReadFailure::TooLarge(data.len() as u64));
    }
    Ok(data)
}

fn read_manifest(path: &Path, node_name: &str, out: &mut Listing) {
    let location = path.display().to_string();
    let data = match read_capped(path) {
        Ok(d) => d,
        Err(ReadFailure::TooLarge(size)) => {
            out.errors.push(decode_failure(
                FILE_SOURCE,
                &location,
                &DecodeError::TooLarge { size },
            ));
            return;
        }
        Err(ReadFailure::Io(e)) => {
            out.errors.push(ManifestError {
                source_name: FILE_SOURCE.into(),
                location,
                field: None,
                reason: format!("cannot read file: {e}"),
            });
            return;
        }
    };
    match decode_manifest(&data, false) {
        Ok(Manifest::Pod(pod)) => {
            match prepare_static_pod(*pod, FILE_SOURCE, &location, true, node_name) {
                Ok(pod) => {
                    out.pods.insert(location, pod);
                }
                Err(errs) => out
                    .errors
                    .extend(validation_failures(FILE_SOURCE, &location, errs)),
            }
        }
        Ok(Manifest::PodList(_)) => out.errors.push(ManifestError {
            source_name: FILE_SOURCE.into(),
            location,
            field: Some("kind".into()),
            reason: "a manifest file must hold a single Pod".into(),
        }),
        Err(e) => out.errors.push(decode_failure(FILE_SOURCE, &location, &e)),
    }
}

/// List `path` once (upstream `listConfig`). `Ok(None)` when the path does not exist.
pub fn list_path(path: &Path, node_name: &str) -> std::io::Result<Option<Listing>> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut out = Listing::default();
    if meta.is_file() {
        read_manifest(path, node_name, &mut out);
        return Ok(Some(out));
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        let hidden = p
            .file_name()
            .and_then(|n| n.to_str())
            .is_none_or(|n| n.starts_with('.'));
        if hidden {
            continue;
        }
        match std::fs::metadata(&p) {
            Ok(m) if m.is_file() => read_manifest(&p, node_name, &mut out),
            Ok(m) if m.is_dir() => {
                tracing::debug!(path = %p.display(), "not recursing into manifest subdirectory")
            }
            Ok(_) => {
                tracing::debug!(path = %p.display(), "manifest path is not a regular file, ignoring")
            }
            Err(e) => tracing::warn!(path = %p.display(), error = %e, "cannot stat manifest"),
        }
    }
    Ok(Some(out))
}

/// The file source (upstream `sourceFile`).
#[derive(Debug)]
pub struct FileSource {
    path: PathBuf,
    node_name: String,
    period: Duration,
    updates: SourceSender,
    errors: watch::Sender<Vec<ManifestError>>,
    /// Whether a SET has been sent; later ones go only when `last_good` changes (it is what
    /// was sent: the pods in file order).
    sent: bool,
    /// The pod each file held at the last relist, to bridge a file caught mid-write.
    last_good: BTreeMap<String, Pod>,
    /// Since when each file that holds a kept pod has been failing to load.
    failing_since: HashMap<String, Instant>,
}

impl FileSource {
    /// A file source for `path`; returns it and the receiver of its current manifest errors.
    pub fn new(
        path: impl Into<PathBuf>,
        node_name: impl Into<String>,
        period: Duration,
        updates: SourceSender,
    ) -> (Self, watch::Receiver<Vec<ManifestError>>) {
        let (errors, rx) = watch::channel(Vec::new());
        (
            Self {
                path: path.into(),
                node_name: node_name.into(),
                period,
                updates,
                errors,
                sent: false,
                last_good: BTreeMap::new(),
                failing_since: HashMap::new(),
            },
            rx,
        )
    }

    /// List once and send a SET if the pods changed (always on the first call).
    /// Returns false when the merge loop is gone.
    pub async fn relist(&mut self) -> bool {
        let mut listing = match list_path(&self.path, &self.node_name) {
            Ok(Some(l)) => l,
            Ok(None) => {
                tracing::debug!(path = %self.path.display(), "manifest path does not exist");
                Listing::default()
            }
            Err(e) => {
                tracing::error!(path = %self.path.display(), error = %e, "unable to read manifest path");
                if self.sent {
                    return true;
                }
                Listing::default()
            }
        };
        for e in &listing.errors {
            tracing::warn!(file = %e.location, field = e.field.as_deref().unwrap_or(""), reason = %e.reason, "invalid static pod manifest");
        }
        self.keep_last_good(&mut listing, Instant::now());
        // No second copy of the pods is kept to compare with: what was sent is `last_good`.
        let unchanged = self.sent && listing.pods == self.last_good;
        self.last_good = listing.pods;
        self.errors.send_if_modified(|cur| {
            if *cur == listing.errors {
                false
            } else {
                cur.clone_from(&listing.errors);
                true
            }
        });
        if unchanged {
            return true;
        }
        self.sent = true;
        let pods: Vec<Pod> = self.last_good.values().cloned().collect();
        self.updates.send(PodOperation::Set, pods).await.is_ok()
    }

    /// Puts back the last valid pod of every file that failed this time but has been failing
    /// for less than a check period.
    fn keep_last_good(&mut self, listing: &mut Listing, now: Instant) {
        let mut failing = HashMap::new();
        for e in &listing.errors {
            let Some(pod) = self.last_good.get(&e.location) else {
                continue;
            };
            let since = self.failing_since.get(&e.location).copied().unwrap_or(now);
            if now.duration_since(since) >= self.period {
                tracing::warn!(file = %e.location, "manifest has failed to load for a whole check period, removing its pod");
                continue;
            }
            tracing::info!(file = %e.location, "keeping the last valid pod of a manifest that fails to load (being written?)");
            failing.insert(e.location.clone(), since);
            listing.pods.insert(e.location.clone(), pod.clone());
        }
        self.failing_since = failing;
    }

    fn start_watch(&self, tx: mpsc::Sender<bool>) -> Option<notify::RecommendedWatcher> {
        // Watch the directory itself, or a single file's parent (editors replace files).
        let target = if self.path.is_dir() {
            self.path.clone()
        } else {
            self.path.parent().map(Path::to_path_buf)?
        };
        let mut w = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            use notify::event::{AccessKind, AccessMode, EventKind};
            let Ok(ev) = res else { return };
            // Our own reads raise access (open/close) events: reacting to them would relist
            // forever. A file closed after writing is complete: relist at once. Anything else
            // (created, still being written, removed, renamed) waits for the burst to settle.
            let immediate = match ev.kind {
                EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
                EventKind::Access(_) => return,
                _ => false,
            };
            // Full channel = a relist is already pending; dropping is fine.
            let _ = tx.try_send(immediate);
        })
        .map_err(|e| tracing::warn!(error = %e, "cannot create inotify watcher"))
        .ok()?;
        match w.watch(&target, RecursiveMode::NonRecursive) {
            Ok(()) => Some(w),
            Err(e) => {
                tracing::debug!(path = %target.display(), error = %e, "cannot watch manifest path, polling only");
                None
            }
        }
    }

    /// Run until `cancel` fires or the merge loop is gone.
    pub async fn run(mut self, cancel: CancellationToken) {
        let (ev_tx, mut ev_rx) = mpsc::channel::<bool>(16);
        let mut watcher = self.start_watch(ev_tx.clone());
        if !self.relist().await {
            return;
        }
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + self.period, self.period);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {
                    if watcher.is_none() {
                        watcher = self.start_watch(ev_tx.clone());
                    }
                }
                Some(immediate) = ev_rx.recv() => {
                    if !immediate {
                        // Debounce: let a burst of events settle (a close-after-write within
                        // it ends the wait early).
                        let settle = tokio::time::sleep(EVENT_DEBOUNCE);
                        tokio::pin!(settle);
                        loop {
                            tokio::select! {
                                _ = &mut settle => break,
                                e = ev_rx.recv() => match e {
                                    Some(true) | None => break,
                                    Some(false) => {}
                                },
                            }
                        }
                    }
                    while ev_rx.try_recv().is_ok() {}
                }
            }
            if !self.relist().await {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PodUpdate;

    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: NAME\nspec:\n  containers:\n  - name: c\n    image: IMAGE\n";

    fn manifest(name: &str, image: &str) -> String {
        POD.replace("NAME", name).replace("IMAGE", image)
    }

    fn names(u: &PodUpdate) -> Vec<String> {
        u.pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn lists_dir_skipping_dotfiles_and_reporting_bad_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        std::fs::write(d.join("a.yaml"), manifest("a", "nginx")).expect("write");
        std::fs::write(d.join(".hidden.yaml"), manifest("h", "nginx")).expect("write");
        std::fs::write(d.join("bad.yaml"), manifest("b", "''")).expect("write");
        std::fs::write(d.join("junk.json"), "{not json").expect("write");
        std::fs::create_dir(d.join("sub")).expect("mkdir");
        let json = serde_json::json!({"metadata":{"name":"j"},"spec":{"containers":[{"name":"c","image":"busybox"}]}});
        std::fs::write(d.join("j.json"), json.to_string()).expect("write");
        let l = list_path(d, "node1").expect("io").expect("exists");
        let pod_names: Vec<_> = l
            .pods
            .values()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        assert_eq!(pod_names, vec!["a-node1", "j-node1"]);
        assert_eq!(l.errors.len(), 2);
        let bad = d.join("bad.yaml").display().to_string();
        assert_eq!(
            l.errors[0].to_string(),
            format!("file: {bad}: spec.containers[0].image: Required value")
        );
        assert!(l.errors[1].location.ends_with("junk.json"));
        assert!(l.errors[1].field.is_none());
        assert!(list_path(&d.join("missing"), "n").expect("io").is_none());
    }

    #[test]
    fn files_over_the_cap_are_refused_unread() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        std::fs::write(d.join("a.yaml"), manifest("a", "nginx")).expect("write");
        // 5 MiB of annotation: refused by its size, before reading or parsing.
        let big = format!(
            "{}  annotations:\n    big: \"{}\"\n",
            manifest("big", "nginx").replace("spec:\n", ""),
            "x".repeat(5 << 20)
        );
        std::fs::write(d.join("big.yaml"), &big).expect("write");
        let l = list_path(d, "node1").expect("io").expect("exists");
        assert_eq!(l.pods.len(), 1);
        let big_path = d.join("big.yaml").display().to_string();
        let e = l
            .errors
            .iter()
            .find(|e| e.location == big_path)
            .expect("big.yaml reported");
        assert_eq!(
            e.to_string(),
            format!(
                "file: {big_path}: manifest is {} bytes, over the limit of {MAX_MANIFEST_BYTES} bytes (not parsed)",
                big.len()
            )
        );
        // read_capped itself: at the cap is read, one byte more is not.
        let f = d.join("exact");
        std::fs::write(&f, vec![b'x'; MAX_MANIFEST_BYTES]).expect("write");
        assert!(matches!(read_capped(&f), Ok(v) if v.len() == MAX_MANIFEST_BYTES));
        std::fs::write(&f, vec![b'x'; MAX_MANIFEST_BYTES + 1]).expect("write");
        assert!(
            matches!(read_capped(&f), Err(ReadFailure::TooLarge(n)) if n == MAX_MANIFEST_BYTES as u64 + 1)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_relist_without_changes_sends_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().to_path_buf();
        std::fs::write(d.join("a.yaml"), manifest("a", "nginx")).expect("write");
        let (tx, mut rx) = mpsc::channel(16);
        let (mut src, _errors) = FileSource::new(
            &d,
            "node1",
            Duration::from_secs(20),
            SourceSender::new("file", tx),
        );
        assert!(src.relist().await);
        assert_eq!(names(&rx.try_recv().expect("first SET")), vec!["a-node1"]);
        assert!(src.relist().await);
        assert!(rx.try_recv().is_err(), "nothing changed, nothing sent");
        std::fs::write(d.join("b.yaml"), manifest("b", "redis")).expect("write");
        assert!(src.relist().await);
        assert_eq!(
            names(&rx.try_recv().expect("SET after a change")),
            vec!["a-node1", "b-node1"]
        );
        assert!(src.relist().await);
        assert!(rx.try_recv().is_err(), "nothing changed since");
    }

    #[tokio::test(start_paused = true)]
    async fn snapshots_on_add_modify_delete() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().to_path_buf();
        let (tx, mut rx) = mpsc::channel(16);
        let (src, errors) = FileSource::new(
            &d,
            "node1",
            Duration::from_secs(20),
            SourceSender::new("file", tx),
        );
        let cancel = CancellationToken::new();
        let task = tokio::spawn(src.run(cancel.clone()));

        // Initial empty snapshot marks the source as seen.
        let u = rx.recv().await.expect("initial");
        assert_eq!((u.op, u.pods.len()), (PodOperation::Set, 0));

        std::fs::write(d.join("a.yaml"), manifest("a", "nginx")).expect("write");
        let u = rx.recv().await.expect("add");
        assert_eq!(names(&u), vec!["a-node1"]);
        let uid = u.pods[0].metadata.uid.clone();

        std::fs::write(d.join("a.yaml"), manifest("a", "nginx:2")).expect("write");
        let u = rx.recv().await.expect("modify");
        assert_eq!(names(&u), vec!["a-node1"]);
        assert_ne!(
            u.pods[0].metadata.uid, uid,
            "content change changes the UID"
        );

        // A malformed file beside the good one: no new snapshot, the error is published.
        std::fs::write(d.join("b.yaml"), manifest("b", "''")).expect("write");
        let mut errors = errors;
        errors.changed().await.expect("errors");
        assert_eq!(errors.borrow().len(), 1);
        std::fs::write(d.join("c.yaml"), manifest("c", "redis")).expect("write");
        let u = rx.recv().await.expect("add c");
        assert_eq!(names(&u), vec!["a-node1", "c-node1"]);

        std::fs::remove_file(d.join("a.yaml")).expect("rm");
        let u = rx.recv().await.expect("delete");
        assert_eq!(names(&u), vec!["c-node1"]);

        cancel.cancel();
        task.await.expect("join");
    }

    #[tokio::test(start_paused = true)]
    async fn a_file_caught_mid_write_keeps_its_pod_for_a_check_period() {
        let period = Duration::from_secs(20);
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().to_path_buf();
        let (tx, mut rx) = mpsc::channel(16);
        let (mut src, errors) = FileSource::new(&d, "node1", period, SourceSender::new("file", tx));
        assert!(src.relist().await);
        assert!(rx.recv().await.expect("initial").pods.is_empty());
        std::fs::write(d.join("a.yaml"), manifest("a", "nginx")).expect("write");
        std::fs::write(d.join("b.yaml"), manifest("b", "nginx")).expect("write");
        assert!(src.relist().await);
        let first = rx.recv().await.expect("a and b");
        assert_eq!(names(&first), vec!["a-node1", "b-node1"]);

        // a.yaml truncated for a rewrite, b.yaml half written: both pods stay as they were (no
        // snapshot) and both files are reported.
        std::fs::write(d.join("a.yaml"), "").expect("truncate");
        std::fs::write(
            d.join("b.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata:\n  na",
        )
        .expect("half");
        assert!(src.relist().await);
        assert!(
            rx.try_recv().is_err(),
            "no pod may go while its file is being written"
        );
        let reported: Vec<String> = errors.borrow().iter().map(|e| e.location.clone()).collect();
        assert_eq!(reported.len(), 2, "{reported:?}");

        // The rewrite of a.yaml completes: the new version replaces the old.
        tokio::time::advance(period / 2).await;
        std::fs::write(d.join("a.yaml"), manifest("a", "nginx:2")).expect("write");
        assert!(src.relist().await);
        let u = rx.recv().await.expect("a rewritten");
        assert_eq!(names(&u), vec!["a-node1", "b-node1"]);
        assert_ne!(u.pods[0].metadata.uid, first.pods[0].metadata.uid);
        assert_eq!(u.pods[1], first.pods[1], "b still its last valid version");

        // b.yaml stays broken: held until it has failed for a whole period, then dropped.
        // Meanwhile a malformed new file is never admitted and a deleted file's pod goes.
        std::fs::write(d.join("c.yaml"), "{not yaml").expect("write");
        std::fs::remove_file(d.join("a.yaml")).expect("rm");
        assert!(src.relist().await);
        assert_eq!(names(&rx.recv().await.expect("a deleted")), vec!["b-node1"]);
        tokio::time::advance(period / 2 - Duration::from_millis(1)).await;
        assert!(src.relist().await);
        assert!(rx.try_recv().is_err(), "b held just short of a period");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(src.relist().await);
        assert!(rx.recv().await.expect("b dropped").pods.is_empty());

        // Fixed again, it is back; broken again later, the period starts afresh.
        std::fs::write(d.join("b.yaml"), manifest("b", "nginx")).expect("write");
        assert!(src.relist().await);
        assert_eq!(names(&rx.recv().await.expect("b back")), vec!["b-node1"]);
        tokio::time::advance(period * 3).await;
        std::fs::write(d.join("b.yaml"), "").expect("truncate");
        assert!(src.relist().await);
        assert!(rx.try_recv().is_err(), "a new failure is held again");
    }

    #[tokio::test(start_paused = true)]
    async fn single_file_and_missing_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("pod.yaml");
        let (tx, mut rx) = mpsc::channel(16);
        let (src, _errors) = FileSource::new(
            &f,
            "node1",
            Duration::from_secs(20),
            SourceSender::new("file", tx),
        );
        let cancel = CancellationToken::new();
        let task = tokio::spawn(src.run(cancel.clone()));
        let u = rx.recv().await.expect("initial");
        assert!(u.pods.is_empty());
        std::fs::write(&f, manifest("p", "nginx")).expect("write");
        let u = rx.recv().await.expect("created");
        assert_eq!(names(&u), vec!["p-node1"]);
        cancel.cancel();
        task.await.expect("join");
    }
}
