//! Image inspects by reference, for ImageStatus and the pod infra image check of every
//! RunPodSandbox: the kubelet asks the status of a container's image before each container
//! start (`EnsureImageExists`), and without this every ask is a Docker call.
//!
//! What a reference names changes only through image events (`pull`, `tag`, `untag`, `delete`,
//! `load`, `import`), so the cache is trusted only while Docker's event stream is followed, and
//! every image event forgets all of it (image events are rare next to status asks). dockershim's
//! own pulls, removals and loads forget it synchronously, before their RPC returns. An inspect's
//! result is stored only when nothing was forgotten since its ticket was taken, so a result that
//! an event overtook is never kept. Absent images are never cached: a pull by anybody makes
//! them present without the cache having held a stale "absent".

use std::collections::HashMap;
use std::sync::Arc;

use bollard::models::ImageInspect;
use parking_lot::Mutex;

use crate::cache::EventTrust;

/// How many references the cache holds at most (it forgets them all beyond).
const IMAGES_MAX: usize = 1024;

#[derive(Default)]
struct State {
    trust: EventTrust,
    images: HashMap<String, Arc<ImageInspect>>,
}

/// Image inspects by the reference they were asked with (see the module doc).
#[derive(Default)]
pub struct ImageCache {
    state: Mutex<State>,
}

impl ImageCache {
    /// The inspect of `reference`, if cached and the event stream is followed.
    pub fn get(&self, reference: &str) -> Option<Arc<ImageInspect>> {
        let s = self.state.lock();
        if !s.trust.watching {
            return None;
        }
        s.images.get(reference).cloned()
    }

    /// A ticket to take before inspecting an image that [`ImageCache::put`] will store.
    pub fn ticket(&self) -> u64 {
        self.state.lock().trust.next()
    }

    /// Stores the inspect of `reference` requested after `ticket`, unless an image changed
    /// since.
    pub fn put(&self, ticket: u64, reference: &str, image: Arc<ImageInspect>) {
        let mut s = self.state.lock();
        if !s.trust.admits(ticket) {
            return;
        }
        if s.images.len() >= IMAGES_MAX {
            s.images.clear();
        }
        s.images.insert(reference.to_string(), image);
    }

    /// Some image changed: forget everything, and every inspect still in flight.
    pub fn clear(&self) {
        let mut s = self.state.lock();
        s.trust.distrust_all();
        s.images.clear();
    }

    /// The event stream is (re)connected or lost; either way what was cached may be stale.
    pub fn set_watching(&self, watching: bool) {
        let mut s = self.state.lock();
        s.trust.set_watching(watching);
        s.images.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(id: &str) -> Arc<ImageInspect> {
        Arc::new(ImageInspect {
            id: Some(id.to_string()),
            ..Default::default()
        })
    }

    fn id(c: &ImageCache, reference: &str) -> Option<String> {
        c.get(reference).and_then(|i| i.id.clone())
    }

    #[test]
    fn nothing_is_kept_while_the_event_stream_is_not_followed() {
        let c = ImageCache::default();
        let t = c.ticket();
        c.put(t, "busybox", image("sha256:a"));
        assert_eq!(id(&c, "busybox"), None);
        c.set_watching(true);
        let t = c.ticket();
        c.put(t, "busybox", image("sha256:a"));
        assert_eq!(id(&c, "busybox").as_deref(), Some("sha256:a"));
        // The stream is lost: what was cached is no longer served, nor when it comes back.
        c.set_watching(false);
        assert_eq!(id(&c, "busybox"), None);
        c.set_watching(true);
        assert_eq!(id(&c, "busybox"), None);
    }

    #[test]
    fn a_change_forgets_everything_and_the_inspects_it_overtook() {
        let c = ImageCache::default();
        c.set_watching(true);
        let t = c.ticket();
        c.put(t, "busybox", image("sha256:a"));
        c.put(c.ticket(), "pause", image("sha256:p"));
        let before = c.ticket();
        c.clear();
        assert_eq!(id(&c, "busybox"), None);
        assert_eq!(id(&c, "pause"), None);
        // An inspect asked before the change may show the image as it was: not kept.
        c.put(before, "busybox", image("sha256:a"));
        assert_eq!(id(&c, "busybox"), None);
        let after = c.ticket();
        c.put(after, "busybox", image("sha256:b"));
        assert_eq!(id(&c, "busybox").as_deref(), Some("sha256:b"));
    }

    #[test]
    fn the_cache_is_bounded() {
        let c = ImageCache::default();
        c.set_watching(true);
        for i in 0..IMAGES_MAX + 1 {
            c.put(c.ticket(), &format!("r{i}"), image("sha256:a"));
        }
        assert!(c.state.lock().images.len() <= IMAGES_MAX);
        assert!(c.get(&format!("r{IMAGES_MAX}")).is_some());
    }
}
