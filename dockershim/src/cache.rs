//! Caches that spare Docker the calls the kubelet repeats every second. [`ListCache`] keeps the
//! last full listing of our containers and sandboxes and serves ListContainers/ListPodSandbox
//! from memory while nothing changed since: every Docker container event about one of ours and
//! every mutation dockershim itself makes marks it stale (the mutation synchronously, before
//! the RPC returns, so a client always lists what it just did), and it is never trusted while
//! the event stream is down or after [`LIST_MAX_AGE`]. Callers that find it stale while another
//! caller's Docker listing is in flight, with no change since that listing was requested, wait
//! for that one instead of sending their own ([`ListCache::lookup`]): a burst of ListContainers /
//! ListPodSandbox after one event costs Docker one listing. Under the same rules it remembers which
//! of our containers an inspect found running, so that Exec / Attach / PortForward can check
//! "exists and is running" without asking Docker again. [`ImageRefCache`] keeps the repo
//! digests of image ids for ContainerStatus; an image event forgets only the image it is about. Both own only
//! their maps; the event pump in `events` feeds them. Their trust rules (the event stream followed,
//! tickets, a floor below which nothing is stored) are one `EventTrust`, which `image_cache`
//! shares. [`SizeCache`] keeps the writable-layer
//! sizes: Docker computes them only when asked, which is expensive, so a background task
//! refreshes them once a minute and the stats RPCs never compute sizes on the request path.
//! [`CpuUsageCache`] keeps each container's (and sandbox's) last CPU sample, from which the
//! stats RPCs compute `usage_nano_cores` as containerd does.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use bollard::models::ContainerSummary;

use crate::docker::DockerApi;

/// A cached listing older than this is refreshed even when no event said so (a safety net
/// against events Docker dropped).
pub const LIST_MAX_AGE: Duration = Duration::from_secs(10);

/// Docker container event actions that change what a listing shows.
pub fn changes_listing(action: &str) -> bool {
    matches!(
        action,
        "create" | "start" | "restart" | "die" | "destroy" | "rename" | "pause" | "unpause"
    )
}

/// The trust rules of a cache that Docker's events keep honest: nothing is trusted while the
/// event stream is not followed; tickets and changes share one sequence; and a result
/// requested at or before the last change of unknown extent (the floor) is never stored.
#[derive(Default)]
pub(crate) struct EventTrust {
    /// Is the event stream connected (otherwise changes could go unnoticed)?
    pub(crate) watching: bool,
    /// Bumped by every change and every ticket.
    seq: u64,
    /// Nothing requested at or before this ticket is stored.
    floor: u64,
}

impl EventTrust {
    /// The next number of the sequence: a ticket to take before asking Docker, or a change.
    pub(crate) fn next(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Something changed and what is unknown: nothing requested before now is stored.
    pub(crate) fn distrust_all(&mut self) {
        self.floor = self.next();
    }

    /// The event stream is (re)connected or lost: what was cached may be stale either way.
    pub(crate) fn set_watching(&mut self, watching: bool) {
        self.distrust_all();
        self.watching = watching;
    }

    /// May a result requested after `ticket` be stored (or served)?
    pub(crate) fn admits(&self, ticket: u64) -> bool {
        self.watching && self.after_floor(ticket)
    }

    /// Was `ticket` taken after the last change of unknown extent?
    pub(crate) fn after_floor(&self, ticket: u64) -> bool {
        ticket > self.floor
    }
}

#[derive(Default)]
struct ListState {
    /// A listing is fresh if its ticket was taken after the last change.
    trust: EventTrust,
    /// The sequence number taken just before the cached listing was requested, when it was
    /// taken, and the listing.
    listing: Option<(u64, Instant, SharedListing)>,
    /// Containers found running, by the id the client gave: the ticket taken before the
    /// inspect, when, and the full id.
    running: HashMap<String, (u64, Instant, String)>,
    /// The Docker listing in flight, if any: its ticket and where its result will appear.
    in_flight: Option<(u64, watch::Receiver<Option<SharedListing>>)>,
}

/// A listing, shared by every caller that is handed it (never copied: with 220 containers a
/// copy per ListContainers/ListPodSandbox was most of dockershim's allocations).
pub type SharedListing = Arc<Vec<ContainerSummary>>;

/// What [`ListCache::lookup`] tells a caller to do.
pub enum Lookup {
    /// The cached listing, still fresh.
    Cached(SharedListing),
    /// Wait for the listing in flight (requested after every change known so far). If its
    /// leader fails or is cancelled, the receiver reports the sender gone: list yourself.
    Join(watch::Receiver<Option<SharedListing>>),
    /// List from Docker yourself and hand the result to [`ListCache::finish`].
    Lead(ListingLeader),
}

/// The caller that requests the listing others wait for.
pub struct ListingLeader {
    ticket: u64,
    tx: watch::Sender<Option<SharedListing>>,
}

impl ListingLeader {
    /// The ticket taken before the request (see [`ListCache::ticket`]).
    pub fn ticket(&self) -> u64 {
        self.ticket
    }
}

impl ListState {
    fn fresh(&self, ticket: u64, at: Instant) -> bool {
        self.trust.admits(ticket) && at.elapsed() < LIST_MAX_AGE
    }
}

/// How many running containers [`ListCache`] remembers at most (it forgets them all beyond).
const RUNNING_MAX: usize = 4096;

/// The last full listing of dockershim's containers, valid until something changes.
#[derive(Default)]
pub struct ListCache {
    state: Mutex<ListState>,
}

impl ListCache {
    /// Something changed (an event, or a mutation we made): the listing is stale.
    pub fn invalidate(&self) {
        self.state.lock().trust.distrust_all();
    }

    /// The event stream is (re)connected or lost. Connecting also invalidates: events may have
    /// been missed while it was down.
    pub fn set_watching(&self, watching: bool) {
        self.state.lock().trust.set_watching(watching);
    }

    /// The cached listing, if it can be trusted.
    pub fn get(&self) -> Option<SharedListing> {
        let s = self.state.lock();
        let (taken, at, list) = s.listing.as_ref()?;
        s.fresh(*taken, *at).then(|| Arc::clone(list))
    }

    /// The full id of container `id` if an inspect found it running and nothing changed since.
    pub fn running(&self, id: &str) -> Option<String> {
        let s = self.state.lock();
        let (taken, at, full) = s.running.get(id)?;
        s.fresh(*taken, *at).then(|| full.clone())
    }

    /// Remembers that an inspect requested after `ticket` found `id` (full id `full_id`)
    /// running.
    pub fn store_running(&self, ticket: u64, id: &str, full_id: &str) {
        let mut s = self.state.lock();
        // Forget what a change already made stale, and everything if it grew too big.
        let ListState { trust, running, .. } = &mut *s;
        running.retain(|_, (t, _, _)| trust.after_floor(*t));
        if s.running.len() >= RUNNING_MAX {
            s.running.clear();
        }
        s.running.insert(
            id.to_string(),
            (ticket, Instant::now(), full_id.to_string()),
        );
    }

    /// The cached listing if it is fresh; otherwise the listing in flight if no change came
    /// after it was requested; otherwise the caller becomes the one that lists.
    pub fn lookup(&self) -> Lookup {
        let mut s = self.state.lock();
        if let Some(found) = Self::found(&s) {
            return found;
        }
        let ticket = s.trust.next();
        let (tx, rx) = watch::channel(None);
        s.in_flight = Some((ticket, rx));
        Lookup::Lead(ListingLeader { ticket, tx })
    }

    /// [`Lookup::Cached`] or [`Lookup::Join`], if [`ListCache::lookup`] would answer one.
    fn found(s: &ListState) -> Option<Lookup> {
        if let Some((taken, at, list)) = s.listing.as_ref()
            && s.fresh(*taken, *at)
        {
            return Some(Lookup::Cached(Arc::clone(list)));
        }
        if let Some((ticket, rx)) = s.in_flight.as_ref()
            && s.trust.admits(*ticket)
            && rx.has_changed().is_ok()
        {
            return Some(Lookup::Join(rx.clone()));
        }
        None
    }

    /// The cached listing if it is fresh, or the listing in flight if no change came after it
    /// was requested; `None` where [`ListCache::lookup`] would make the caller the leader.
    pub fn cached_or_in_flight(&self) -> Option<Lookup> {
        Self::found(&self.state.lock())
    }

    /// The leader's listing: stored like [`ListCache::store`] and handed to those waiting.
    pub fn finish(&self, leader: ListingLeader, list: Vec<ContainerSummary>) -> SharedListing {
        let list = Arc::new(list);
        self.store(leader.ticket, &list);
        {
            let mut s = self.state.lock();
            if s.in_flight
                .as_ref()
                .is_some_and(|(t, _)| *t == leader.ticket)
            {
                s.in_flight = None;
            }
        }
        // Once the slot is cleared only callers that joined hold a receiver.
        if leader.tx.receiver_count() > 0 {
            leader.tx.send_replace(Some(Arc::clone(&list)));
        }
        list
    }

    /// A ticket to take before requesting a fresh listing from Docker.
    pub fn ticket(&self) -> u64 {
        self.state.lock().trust.next()
    }

    /// Stores a listing requested after `ticket` was taken, unless a newer one is stored.
    pub fn store(&self, ticket: u64, list: &SharedListing) {
        let mut s = self.state.lock();
        if s.listing.as_ref().is_none_or(|(t, _, _)| *t < ticket) {
            s.listing = Some((ticket, Instant::now(), Arc::clone(list)));
        }
    }
}

/// How many image ids [`ImageRefCache`] remembers changes of before it summarises them all as
/// one (everything older than that point is no longer trusted).
const IMAGE_CHANGES_MAX: usize = 4096;

#[derive(Default)]
struct ImageRefState {
    trust: EventTrust,
    /// Image id -> the sequence number of its last change.
    changed: HashMap<String, u64>,
    /// Image id -> its repo digests.
    digests: HashMap<String, Vec<String>>,
    /// Image events naming a reference (a pull, a push) whose image id is still being looked
    /// up: until they are resolved, any image may have changed, so nothing is trusted.
    unresolved: usize,
}

/// Repo digests by image id, for ContainerStatus's `image_ref`. An image's repo digests change
/// only through that image's own events, so a change forgets only that image: an event naming
/// an image id forgets that id; an event naming a reference (Docker's `pull` and `push` events)
/// suspends the whole cache until the reference is resolved to the id it now names
/// ([`ImageRefCache::begin_resolve`]); anything else forgets everything. An inspect's result is
/// stored only if no change of that image was noted after its ticket was taken, so a result
/// overtaken by an event is never kept.
#[derive(Default)]
pub struct ImageRefCache {
    state: Mutex<ImageRefState>,
}

impl ImageRefCache {
    /// The repo digests of `image_id`, if known, the event stream is connected and no
    /// reference is being resolved.
    pub fn get(&self, image_id: &str) -> Option<Vec<String>> {
        let s = self.state.lock();
        if !s.trust.watching || s.unresolved > 0 {
            return None;
        }
        s.digests.get(image_id).cloned()
    }

    /// A ticket to take before inspecting an image whose digests [`ImageRefCache::put`] will
    /// store.
    pub fn ticket(&self) -> u64 {
        self.state.lock().trust.next()
    }

    /// Remembers the repo digests of `image_id` found by an inspect requested after `ticket`,
    /// unless the image changed since.
    pub fn put(&self, ticket: u64, image_id: &str, digests: Vec<String>) {
        let mut s = self.state.lock();
        let changed = s.changed.get(image_id).copied().unwrap_or(0);
        if s.trust.admits(ticket) && ticket > changed {
            s.digests.insert(image_id.to_string(), digests);
        }
    }

    /// Image `image_id` changed (tagged, untagged, pulled, removed): forget it.
    pub fn invalidate(&self, image_id: &str) {
        let mut s = self.state.lock();
        let seq = s.trust.next();
        s.digests.remove(image_id);
        if s.changed.len() >= IMAGE_CHANGES_MAX {
            s.changed.clear();
            s.trust.distrust_all();
        }
        s.changed.insert(image_id.to_string(), seq);
    }

    /// Some image changed and which one is unknown: forget everything.
    pub fn clear(&self) {
        let mut s = self.state.lock();
        s.trust.distrust_all();
        s.changed.clear();
        s.digests.clear();
    }

    /// An event names a reference, not an image id: nothing is trusted until the
    /// [`Resolving`] guard is told which image the reference names (or dropped, which forgets
    /// everything).
    pub fn begin_resolve(self: &Arc<Self>) -> Resolving {
        self.state.lock().unresolved += 1;
        Resolving {
            cache: self.clone(),
            done: false,
        }
    }

    /// The event stream is (re)connected or lost; either way what was cached may be stale.
    pub fn set_watching(&self, watching: bool) {
        let mut s = self.state.lock();
        s.trust.set_watching(watching);
        s.changed.clear();
        s.digests.clear();
    }
}

/// A reference from an image event being resolved to an image id (see
/// [`ImageRefCache::begin_resolve`]).
pub struct Resolving {
    cache: Arc<ImageRefCache>,
    done: bool,
}

impl Resolving {
    /// The reference names `image_id` now: forget that image, and trust the rest again.
    pub fn resolved(mut self, image_id: &str) {
        self.cache.invalidate(image_id);
        self.done = true;
    }

    /// The reference names no image any more: it was removed since, and the removal's own
    /// event names the image that lost it. Trust the rest again.
    pub fn gone(mut self) {
        self.done = true;
    }
}

impl Drop for Resolving {
    fn drop(&mut self) {
        if !self.done {
            self.cache.clear();
        }
        let mut s = self.cache.state.lock();
        s.unresolved = s.unresolved.saturating_sub(1);
    }
}

/// What never changes about one of dockershim's containers, learnt when dockershim created it
/// or first inspected it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fact {
    /// A pod sandbox; `own_files`: its containers get dockershim's `resolv.conf` and `hosts`.
    Sandbox { own_files: bool },
    /// An application container, with its CRI log path (label), if any.
    Container { log_path: Option<String> },
}

/// How many containers [`FactCache`] remembers at most (it forgets them all beyond).
const FACTS_MAX: usize = 8192;

/// [`Fact`]s by whole container id (an id prefix finds nothing), so that CreateContainer and
/// StartContainer need not inspect the sandbox or container first (cri-dockerd does not
/// either): an id is never reused and these facts never change, so an entry is only forgotten
/// when its container is removed (by dockershim, or Docker's `destroy` event). A container that no longer exists is
/// reported by Docker's own call instead.
#[derive(Default)]
pub struct FactCache {
    facts: Mutex<HashMap<String, Fact>>,
}

impl FactCache {
    /// What is known of the container with this whole id.
    pub fn get(&self, full_id: &str) -> Option<Fact> {
        self.facts.lock().get(full_id).cloned()
    }

    /// Remembers `fact` of the container with this whole id.
    pub fn learn(&self, full_id: &str, fact: Fact) {
        let mut f = self.facts.lock();
        if f.len() >= FACTS_MAX {
            f.clear();
        }
        f.insert(full_id.to_string(), fact);
    }

    /// The container is gone.
    pub fn forget(&self, full_id: &str) {
        self.facts.lock().remove(full_id);
    }

    /// Docker's events were not followed for a while: removals may have gone unnoticed.
    pub fn clear(&self) {
        self.facts.lock().clear();
    }
}

/// How often the writable-layer sizes are recomputed.
pub const SIZE_REFRESH: Duration = Duration::from_secs(60);

/// Writable-layer sizes by container id, refreshed in the background.
#[derive(Default, Clone)]
pub struct SizeCache {
    sizes: Arc<RwLock<HashMap<String, u64>>>,
}

impl SizeCache {
    /// The last known size of `id`'s writable layer (0 until first computed).
    pub fn get(&self, id: &str) -> u64 {
        self.sizes.read().get(id).copied().unwrap_or(0)
    }

    /// Refreshes every `SIZE_REFRESH` until cancelled.
    pub fn spawn_refresher<D: DockerApi>(&self, docker: Arc<D>, stop: CancellationToken) {
        let sizes = self.sizes.clone();
        tokio::spawn(async move {
            loop {
                match docker.container_sizes().await {
                    Ok(m) => {
                        *sizes.write() = m;
                    }
                    Err(e) => debug!(error = %e, "refreshing container sizes"),
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(SIZE_REFRESH) => {}
                }
            }
        });
    }
}

/// One CPU sample: when it was taken (nanoseconds since the epoch) and the cumulative usage
/// (core-nanoseconds) then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSample {
    pub timestamp: i64,
    pub usage_core_nano_seconds: u64,
}

/// The mean usage in nanocores (core-nanoseconds per second) from `prev` to `cur`: `None` when
/// the interval is not positive or the counter went backwards (a new cgroup under the same id).
pub fn nano_cores_between(prev: CpuSample, cur: CpuSample) -> Option<u64> {
    let interval = cur.timestamp.checked_sub(prev.timestamp)?;
    let used = cur
        .usage_core_nano_seconds
        .checked_sub(prev.usage_core_nano_seconds)?;
    if interval <= 0 {
        return None;
    }
    u64::try_from(u128::from(used) * 1_000_000_000 / interval as u128).ok()
}

/// The last CPU sample of each container (or sandbox), by id: the rate is always computed
/// from the previous sample, whoever asked for it (containerd's `getUsageNanoCores`, which
/// keeps the previous sample in its container store).
#[derive(Default)]
pub struct CpuUsageCache {
    last: Mutex<HashMap<String, CpuSample>>,
}

impl CpuUsageCache {
    /// The usage in nanocores of `id` since its previous sample, which `cur` replaces. `None`
    /// for the first sample of `id` (nothing to compare with) and after its counter went
    /// backwards; a sample not newer than the stored one (two requests racing) changes nothing.
    pub fn usage_nano_cores(&self, id: &str, cur: CpuSample) -> Option<u64> {
        let mut last = self.last.lock();
        match last.get(id).copied() {
            Some(prev) if cur.timestamp <= prev.timestamp => None,
            prev => {
                last.insert(id.to_string(), cur);
                nano_cores_between(prev?, cur)
            }
        }
    }

    /// Keeps only the ids `alive` says still exist.
    pub fn retain(&self, alive: impl Fn(&str) -> bool) {
        self.last.lock().retain(|id, _| alive(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(timestamp: i64, usage_core_nano_seconds: u64) -> CpuSample {
        CpuSample {
            timestamp,
            usage_core_nano_seconds,
        }
    }

    #[test]
    fn nano_cores_are_the_usage_rate_between_two_samples() {
        const S: i64 = 1_000_000_000;
        // Half a core over 4 s: 2 core-seconds used.
        assert_eq!(
            nano_cores_between(cpu(10 * S, 7 * S as u64), cpu(14 * S, 9 * S as u64)),
            Some(500_000_000)
        );
        // 1.5 cores over 250 ms.
        assert_eq!(
            nano_cores_between(cpu(S, 0), cpu(S + S / 4, 375_000_000)),
            Some(1_500_000_000)
        );
        assert_eq!(
            nano_cores_between(cpu(S, 5), cpu(S, 9)),
            None,
            "no interval"
        );
        assert_eq!(
            nano_cores_between(cpu(2 * S, 5), cpu(S, 9)),
            None,
            "backwards"
        );
        assert_eq!(
            nano_cores_between(cpu(S, 9), cpu(2 * S, 5)),
            None,
            "counter reset"
        );
        // Large counters (months of usage on many cores) do not overflow.
        let big = 40_000_000 * S as u64;
        assert_eq!(
            nano_cores_between(cpu(0, big), cpu(10 * S, big + 20 * S as u64)),
            Some(2_000_000_000)
        );
    }

    #[test]
    fn each_sample_rates_against_the_previous_one_of_its_id() {
        const S: i64 = 1_000_000_000;
        let c = CpuUsageCache::default();
        assert_eq!(c.usage_nano_cores("a", cpu(S, 0)), None, "first sample");
        assert_eq!(c.usage_nano_cores("b", cpu(S, 0)), None, "ids are apart");
        assert_eq!(
            c.usage_nano_cores("a", cpu(3 * S, S as u64)),
            Some(500_000_000)
        );
        // The window moves: the next rate is against the sample just taken.
        assert_eq!(
            c.usage_nano_cores("a", cpu(4 * S, 2 * S as u64)),
            Some(S as u64)
        );
        // A late sample (a racing request) neither yields a rate nor moves the window back.
        assert_eq!(c.usage_nano_cores("a", cpu(3 * S, S as u64)), None);
        assert_eq!(
            c.usage_nano_cores("a", cpu(6 * S, 3 * S as u64)),
            Some(500_000_000)
        );
        // A counter that went backwards starts over from the new sample.
        assert_eq!(c.usage_nano_cores("a", cpu(7 * S, 10)), None);
        assert_eq!(
            c.usage_nano_cores("a", cpu(8 * S, 10 + S as u64 / 10)),
            Some(100_000_000)
        );
        c.retain(|id| id == "b");
        assert_eq!(c.usage_nano_cores("a", cpu(9 * S, 0)), None, "forgotten");
        assert_eq!(
            c.usage_nano_cores("b", cpu(2 * S, S as u64)),
            Some(S as u64)
        );
    }

    fn summary(id: &str) -> ContainerSummary {
        ContainerSummary {
            id: Some(id.to_string()),
            ..Default::default()
        }
    }

    #[test]
    fn listing_is_served_until_something_changes() {
        let c = ListCache::default();
        assert!(c.get().is_none(), "nothing stored");
        let t = c.ticket();
        c.store(t, &Arc::new(vec![summary("a")]));
        assert!(c.get().is_none(), "not trusted without the event stream");
        c.set_watching(true);
        assert!(c.get().is_none(), "connecting invalidates older listings");
        let t = c.ticket();
        let stored = Arc::new(vec![summary("a")]);
        c.store(t, &stored);
        assert_eq!(c.get().map(|l| l.len()), Some(1));
        // Every caller shares the stored listing; none gets a copy.
        assert!(c.get().is_some_and(|l| Arc::ptr_eq(&l, &stored)));
        assert!(matches!(c.lookup(), Lookup::Cached(l) if Arc::ptr_eq(&l, &stored)));
        c.invalidate();
        assert!(c.get().is_none(), "a change makes it stale");
    }

    #[test]
    fn a_listing_requested_before_a_change_is_stale() {
        let c = ListCache::default();
        c.set_watching(true);
        let t = c.ticket();
        c.invalidate(); // a container changed while the listing was in flight
        c.store(t, &Arc::new(vec![summary("a")]));
        assert!(c.get().is_none());
    }

    #[test]
    fn an_older_listing_never_replaces_a_newer_one() {
        let c = ListCache::default();
        c.set_watching(true);
        let older = c.ticket();
        let newer = c.ticket();
        c.store(newer, &Arc::new(vec![summary("new")]));
        c.store(older, &Arc::new(vec![summary("old")]));
        let got = c.get().expect("fresh");
        assert_eq!(got[0].id.as_deref(), Some("new"));
    }

    fn lead(c: &ListCache) -> ListingLeader {
        match c.lookup() {
            Lookup::Lead(l) => l,
            Lookup::Join(_) => panic!("joined, expected to lead"),
            Lookup::Cached(_) => panic!("cached, expected to lead"),
        }
    }

    #[tokio::test]
    async fn callers_during_a_listing_wait_for_it() {
        let c = ListCache::default();
        c.set_watching(true);
        let leader = lead(&c);
        let Lookup::Join(mut rx) = c.lookup() else {
            panic!("a second caller with no change since should join")
        };
        let Lookup::Join(mut rx2) = c.lookup() else {
            panic!("and a third")
        };
        let got = c.finish(leader, vec![summary("a")]);
        assert_eq!(got.len(), 1, "the leader gets its listing");
        for rx in [&mut rx, &mut rx2] {
            let shared = rx.wait_for(Option::is_some).await.expect("published");
            assert_eq!(shared.as_ref().map(|l| l.len()), Some(1));
        }
        assert!(
            matches!(c.lookup(), Lookup::Cached(l) if l.len() == 1),
            "and it is cached"
        );
    }

    #[test]
    fn a_change_during_a_listing_makes_the_next_caller_list_again() {
        let c = ListCache::default();
        c.set_watching(true);
        let first = lead(&c);
        c.invalidate(); // a container changed after the first listing was requested
        let second = lead(&c);
        assert!(second.ticket() > first.ticket());
        assert!(
            matches!(c.lookup(), Lookup::Join(_)),
            "later callers wait for the newer listing"
        );
        c.finish(second, vec![summary("new")]);
        c.finish(first, vec![summary("old")]);
        let Lookup::Cached(l) = c.lookup() else {
            panic!("the newer listing is fresh")
        };
        assert_eq!(l[0].id.as_deref(), Some("new"));
    }

    #[tokio::test]
    async fn a_failed_leader_releases_those_waiting() {
        let c = ListCache::default();
        c.set_watching(true);
        let leader = lead(&c);
        let Lookup::Join(mut rx) = c.lookup() else {
            panic!("should join")
        };
        drop(leader); // the Docker listing failed, or the request was cancelled
        assert!(
            rx.wait_for(Option::is_some).await.is_err(),
            "told to list itself"
        );
        assert!(
            matches!(c.lookup(), Lookup::Lead(_)),
            "nobody joins a listing whose leader is gone"
        );
    }

    #[test]
    fn without_the_event_stream_nobody_joins() {
        let c = ListCache::default();
        let _leader = lead(&c);
        assert!(
            matches!(c.lookup(), Lookup::Lead(_)),
            "a change could have come unseen since the listing was requested"
        );
    }

    #[test]
    fn losing_the_event_stream_distrusts_the_listing() {
        let c = ListCache::default();
        c.set_watching(true);
        let t = c.ticket();
        c.store(t, &Arc::new(vec![summary("a")]));
        assert!(c.get().is_some());
        c.set_watching(false);
        assert!(c.get().is_none());
    }

    #[test]
    fn running_containers_are_remembered_until_something_changes() {
        let c = ListCache::default();
        let t = c.ticket();
        c.store_running(t, "abc", "abcdef");
        assert_eq!(
            c.running("abc"),
            None,
            "not trusted without the event stream"
        );
        c.set_watching(true);
        let t = c.ticket();
        c.store_running(t, "abc", "abcdef");
        assert_eq!(c.running("abc").as_deref(), Some("abcdef"));
        assert_eq!(c.running("other"), None);
        c.invalidate();
        assert_eq!(c.running("abc"), None, "a change makes it stale");
        let t = c.ticket();
        c.invalidate(); // the container died while the inspect was in flight
        c.store_running(t, "abc", "abcdef");
        assert_eq!(c.running("abc"), None);
        let t = c.ticket();
        c.store_running(t, "abc", "abcdef");
        c.set_watching(false);
        assert_eq!(
            c.running("abc"),
            None,
            "losing the event stream distrusts it"
        );
    }

    #[test]
    fn stale_running_entries_are_dropped() {
        let c = ListCache::default();
        c.set_watching(true);
        for i in 0..10 {
            let t = c.ticket();
            c.store_running(t, &format!("c{i}"), "x");
        }
        c.invalidate();
        let t = c.ticket();
        c.store_running(t, "new", "y");
        let n = c.state.lock().running.len();
        assert_eq!(n, 1, "entries older than the last change are forgotten");
    }

    #[tokio::test(start_paused = true)]
    async fn running_entries_expire() {
        let c = ListCache::default();
        c.set_watching(true);
        let t = c.ticket();
        c.store_running(t, "abc", "abcdef");
        tokio::time::advance(LIST_MAX_AGE + Duration::from_millis(1)).await;
        assert_eq!(c.running("abc"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn listings_expire() {
        let c = ListCache::default();
        c.set_watching(true);
        let t = c.ticket();
        c.store(t, &Arc::new(vec![summary("a")]));
        assert!(c.get().is_some());
        tokio::time::advance(LIST_MAX_AGE - Duration::from_millis(1)).await;
        assert!(c.get().is_some());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(c.get().is_none(), "too old");
    }

    fn digests(d: &str) -> Vec<String> {
        vec![format!("r@sha256:{d}")]
    }

    #[test]
    fn image_refs_cleared_by_image_changes() {
        let c = ImageRefCache::default();
        c.put(c.ticket(), "sha256:1", digests("x"));
        assert!(c.get("sha256:1").is_none(), "nothing cached without events");
        c.set_watching(true);
        c.put(c.ticket(), "sha256:1", digests("x"));
        assert_eq!(c.get("sha256:1"), Some(digests("x")));
        c.clear();
        assert!(c.get("sha256:1").is_none());
        c.put(c.ticket(), "sha256:1", digests("x"));
        c.set_watching(false);
        assert!(c.get("sha256:1").is_none(), "the stream went");
    }

    #[test]
    fn an_image_change_forgets_that_image_only() {
        let c = ImageRefCache::default();
        c.set_watching(true);
        c.put(c.ticket(), "sha256:1", digests("x"));
        c.put(c.ticket(), "sha256:2", digests("y"));
        c.invalidate("sha256:2");
        assert_eq!(
            c.get("sha256:1"),
            Some(digests("x")),
            "another image's change"
        );
        assert!(c.get("sha256:2").is_none());
    }

    #[test]
    fn an_inspect_overtaken_by_a_change_of_its_image_is_not_kept() {
        let c = ImageRefCache::default();
        c.set_watching(true);
        let before = c.ticket();
        c.invalidate("sha256:1");
        c.put(before, "sha256:1", digests("old"));
        assert!(c.get("sha256:1").is_none(), "requested before the change");
        let other = c.ticket();
        c.invalidate("sha256:2");
        c.put(other, "sha256:1", digests("x"));
        assert_eq!(
            c.get("sha256:1"),
            Some(digests("x")),
            "a change of another image does not spoil it"
        );
        let before_clear = c.ticket();
        c.clear();
        c.put(before_clear, "sha256:3", digests("z"));
        assert!(c.get("sha256:3").is_none(), "requested before a clear");
    }

    #[test]
    fn too_many_changes_are_summarised_as_one() {
        let c = ImageRefCache::default();
        c.set_watching(true);
        let old = c.ticket();
        for i in 0..=IMAGE_CHANGES_MAX {
            c.invalidate(&format!("sha256:{i}"));
        }
        c.put(old, "sha256:fresh", digests("x"));
        assert!(
            c.get("sha256:fresh").is_none(),
            "the forgotten changes still count"
        );
        c.put(c.ticket(), "sha256:fresh", digests("x"));
        assert!(c.get("sha256:fresh").is_some());
    }

    #[test]
    fn a_reference_being_resolved_suspends_the_cache() {
        let c = Arc::new(ImageRefCache::default());
        c.set_watching(true);
        c.put(c.ticket(), "sha256:1", digests("x"));
        c.put(c.ticket(), "sha256:2", digests("y"));
        let r = c.begin_resolve();
        assert!(c.get("sha256:1").is_none(), "any image may have changed");
        r.resolved("sha256:2");
        assert_eq!(c.get("sha256:1"), Some(digests("x")), "not the pulled one");
        assert!(c.get("sha256:2").is_none(), "the pulled one");

        c.begin_resolve().gone();
        assert_eq!(
            c.get("sha256:1"),
            Some(digests("x")),
            "removed since: its removal's event tells which image changed"
        );
        let failed = c.begin_resolve();
        drop(failed);
        assert!(
            c.get("sha256:1").is_none(),
            "unresolved: everything forgotten"
        );
        c.put(c.ticket(), "sha256:1", digests("x"));
        assert!(c.get("sha256:1").is_some(), "and trusted again");
    }

    #[test]
    fn only_state_changes_invalidate_listings() {
        assert!(changes_listing("die"));
        assert!(changes_listing("create"));
        assert!(!changes_listing("exec_start: sh -c true"));
        assert!(!changes_listing("exec_die"));
        assert!(!changes_listing("top"));
    }
}
