//! An expiring cache (upstream `k8s.io/apimachinery/pkg/util/cache.LRUExpireCache`, as the
//! token and SubjectAccessReview caches use it): each entry lives for the TTL it was added
//! with; the clock is tokio's, so tests can pause it. Bounded: when full, expired entries are
//! dropped first, then the entry closest to expiry.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// Upstream's size of both caches.
pub const DEFAULT_CAPACITY: usize = 8192;

/// A map whose entries expire.
#[derive(Debug)]
pub struct ExpiringCache<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
    capacity: usize,
}

impl<K: Eq + Hash + Clone, V: Clone> ExpiringCache<K, V> {
    pub fn new(capacity: usize) -> Self {
        ExpiringCache {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    /// The value under `key`, unless absent or expired.
    pub fn get(&self, key: &K) -> Option<V> {
        let mut entries = self.entries.lock();
        match entries.get(key) {
            Some((v, expires)) if Instant::now() < *expires => Some(v.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `value` under `key` for `ttl` (a zero TTL keeps nothing).
    pub fn insert(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock();
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, (_, expires)| now < *expires);
            if entries.len() >= self.capacity
                && let Some(k) = entries
                    .iter()
                    .min_by_key(|(_, (_, expires))| *expires)
                    .map(|(k, _)| k.clone())
            {
                entries.remove(&k);
            }
        }
        entries.insert(key, (value, now + ttl));
    }

    /// How many entries are held (expired ones not yet dropped included).
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn entries_expire_after_their_own_ttl() {
        let c = ExpiringCache::new(10);
        c.insert("short", 1, Duration::from_secs(30));
        c.insert("long", 2, Duration::from_secs(300));
        c.insert("none", 3, Duration::ZERO);
        assert_eq!(c.get(&"short"), Some(1));
        assert_eq!(c.get(&"long"), Some(2));
        assert_eq!(c.get(&"none"), None, "a zero TTL keeps nothing");
        tokio::time::advance(Duration::from_secs(29)).await;
        assert_eq!(c.get(&"short"), Some(1));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(c.get(&"short"), None, "expired at its TTL");
        assert_eq!(c.get(&"long"), Some(2));
        tokio::time::advance(Duration::from_secs(270)).await;
        assert_eq!(c.get(&"long"), None);
        assert!(c.is_empty(), "expired entries are dropped when read");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_cache_drops_the_expired_then_the_soonest_to_expire() {
        let c = ExpiringCache::new(2);
        c.insert("a", 1, Duration::from_secs(10));
        c.insert("b", 2, Duration::from_secs(100));
        c.insert("c", 3, Duration::from_secs(50));
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&"a"), None, "the entry closest to expiry made room");
        assert_eq!((c.get(&"b"), c.get(&"c")), (Some(2), Some(3)));
        tokio::time::advance(Duration::from_secs(60)).await;
        c.insert("d", 4, Duration::from_secs(10));
        assert_eq!(
            (c.get(&"b"), c.get(&"c"), c.get(&"d")),
            (Some(2), None, Some(4))
        );
    }
}
