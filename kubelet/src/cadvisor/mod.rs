//! The kubelet's own cAdvisor (upstream embeds google/cadvisor: `pkg/kubelet/cadvisor` and the
//! `/metrics/cadvisor` collector registered in `pkg/kubelet/server`): which containers exist
//! ([`inventory`]: the node, the kubepods slices, this kubelet's pods and their runtime
//! containers and sandboxes), what their cgroups say ([`cgroup`], v1 and v2; [`network`] for
//! the sandboxes' namespaces and the host), a housekeeping task that samples them on its own
//! ([`sampler`], 10 s like cAdvisor, first rates a second after start) so that
//! `/stats/summary` and `/metrics/resource` have CPU rates from their first read, and the
//! Prometheus collector of `/metrics/cadvisor` ([`collector`]).
//!
//! Managers layer: reads the host (cgroupfs, procfs); what to read comes from an
//! [`InventorySource`] (the running kubelet's is `host::KubeletInventory`).

pub mod cgroup;
pub mod collector;
pub mod inventory;
pub mod network;
pub mod sampler;

use std::sync::Arc;

pub use sampler::{CadvisorState, Housekeeping, InventorySource};

/// Where the cgroup filesystem is mounted.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Bytes of the page handed on at a time by [`metrics_page`].
pub const PAGE_CHUNK: usize = 64 * 1024;

/// `/metrics/cadvisor`'s page: every inventoried container read now, and the machine, in
/// chunks of about [`PAGE_CHUNK`] bytes as they are rendered. With 110 pods the page is about
/// 2.4 MB: rendered whole, its growing buffer alone raised the kubelet's RSS by some 4 MiB for
/// every scrape; streamed, at most two chunks wait in the channel.
pub fn metrics_page(state: Arc<CadvisorState>) -> tokio::sync::mpsc::Receiver<bytes::Bytes> {
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    tokio::task::spawn_blocking(move || {
        let scraped = collector::scrape(state.root(), &state.inventory());
        let now = chrono::Utc::now().timestamp_millis() as f64 / 1000.0;
        let mut out = ChunkWriter::new(PAGE_CHUNK, |chunk: String| {
            tx.blocking_send(bytes::Bytes::from(chunk)).is_ok()
        });
        collector::render_to(
            collector::CadvisorCollector {
                scraped,
                machine: collector::Machine::read(),
                now,
            },
            &mut out,
        );
        out.finish();
    });
    rx
}

/// A `fmt::Write` that hands its text on in chunks of at least `size` bytes (the last one
/// shorter) to `send`, which says whether the reader is still there; once it is not, the
/// rest is written nowhere and writing fails, which ends the rendering.
pub struct ChunkWriter<F: FnMut(String) -> bool> {
    buf: String,
    size: usize,
    send: F,
    closed: bool,
}

impl<F: FnMut(String) -> bool> ChunkWriter<F> {
    pub fn new(size: usize, send: F) -> Self {
        ChunkWriter {
            buf: String::with_capacity(size + size / 4),
            size,
            send,
            closed: false,
        }
    }

    /// Hands on what is left.
    pub fn finish(mut self) {
        if !self.buf.is_empty() && !self.closed {
            let rest = std::mem::take(&mut self.buf);
            (self.send)(rest);
        }
    }
}

impl<F: FnMut(String) -> bool> std::fmt::Write for ChunkWriter<F> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.closed {
            return Err(std::fmt::Error);
        }
        self.buf.push_str(s);
        if self.buf.len() >= self.size {
            let full = std::mem::replace(
                &mut self.buf,
                String::with_capacity(self.size + self.size / 4),
            );
            if !(self.send)(full) {
                self.closed = true;
                return Err(std::fmt::Error);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write;

    use super::ChunkWriter;

    #[test]
    fn chunks_carry_the_whole_text_in_order() {
        let mut got = Vec::new();
        let mut w = ChunkWriter::new(10, |c: String| {
            got.push(c);
            true
        });
        for i in 0..25 {
            writeln!(w, "line {i}").unwrap();
        }
        w.finish();
        let whole: String = (0..25).map(|i| format!("line {i}\n")).collect();
        assert_eq!(got.concat(), whole);
        assert!(got.len() > 5, "{got:?}");
        assert!(
            got[..got.len() - 1].iter().all(|c| c.len() >= 10),
            "{got:?}"
        );
    }

    #[test]
    fn a_gone_reader_stops_the_writing() {
        let mut sent = 0;
        let mut w = ChunkWriter::new(4, |_c: String| {
            sent += 1;
            false
        });
        assert!(w.write_str("12345").is_err());
        assert!(w.write_str("more").is_err());
        w.finish();
        assert_eq!(sent, 1);
    }
}
