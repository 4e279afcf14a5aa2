//! Accepting any HTTP/2 `:authority` on the CRI sockets.
//!
//! Go gRPC clients (crictl, critest, the Go kubelet) dial a unix socket path and send that path
//! as the request's `:authority` (`/run/dockershim.sock`); grpcio sends it percent-encoded,
//! others send it empty. Go servers accept whatever arrives, but the `h2` crate under tonic
//! parses the authority as an RFC 3986 authority and resets the stream with `PROTOCOL_ERROR`
//! when it is not one, so every call of those clients fails.
//!
//! [`AuthorityFix`] sits between the socket and tonic's server. It forwards what the server
//! writes untouched and rewrites what the client sends: every header block (a `HEADERS` frame
//! and its `CONTINUATION`s) is decoded with the client's HPACK context, an authority `h2` would
//! refuse is replaced by `localhost`, and the block is encoded again with a context of our own
//! that `h2`'s decoder follows, so both HPACK tables stay in step with their peers. Every other
//! frame passes through as bytes (a `DATA` payload is read straight into the server's buffer).
//! Header blocks are re-emitted unpadded, in frames of at most 16 384 bytes (the smallest
//! maximum frame size a peer may advertise), with their `END_STREAM` flag and priority kept.
//!
//! A connection that does not start with the HTTP/2 preface, or whose header block cannot be
//! decoded, is passed through unchanged from that point on: `h2` then answers it as it would
//! without the adapter.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;
use tracing::debug;

/// What a refused authority is replaced by.
pub const REPLACEMENT_AUTHORITY: &[u8] = b"localhost";

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER_LEN: usize = 9;
const FRAME_HEADERS: u8 = 0x1;
const FRAME_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
/// Re-emitted header frames carry at most this much block each: every peer must accept it.
const MAX_EMITTED_FRAGMENT: usize = 16_384;
/// A header block larger than this is not rewritten (h2's own limit on a header list is 16 MiB).
const MAX_BLOCK: usize = 16 << 20;
const READ_CHUNK: usize = 16 * 1024;
/// httlib-hpack's encoder flags: pick the best representation in the table; add to the dynamic
/// table; never index (the decoder reports the same two bits as the client used them).
const ENCODE_BEST: u8 = 0x10;
const ENCODE_WITH_INDEXING: u8 = httlib_hpack::Decoder::WITH_INDEXING;
const ENCODE_NEVER_INDEXED: u8 = httlib_hpack::Decoder::NEVER_INDEXED;

/// Would `h2`'s server accept this `:authority` value as it is?
pub fn is_acceptable_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// Where the reader is in the client's byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Inside the connection preface; this many bytes of it are still to come.
    Preface(usize),
    /// At the start of a frame.
    FrameHead,
    /// Inside the payload of a frame that passes through; this many bytes are still to come.
    Passthrough(usize),
    /// Everything passes through unchanged (not HTTP/2, or the HPACK context was lost).
    Raw,
}

/// A header block being collected across `HEADERS` and `CONTINUATION` frames.
struct PendingBlock {
    stream_id: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
}

/// A client connection whose requests' `:authority` is made acceptable to `h2` (module docs).
pub struct AuthorityFix<T> {
    inner: T,
    /// Bytes read from the client and not yet looked at.
    input: BytesMut,
    /// Bytes ready for the server.
    output: BytesMut,
    state: State,
    pending: Option<PendingBlock>,
    decoder: httlib_hpack::Decoder<'static>,
    encoder: httlib_hpack::Encoder<'static>,
    rewrites: u64,
}

impl<T> AuthorityFix<T> {
    /// Wraps a freshly accepted connection.
    pub fn new(inner: T) -> Self {
        AuthorityFix {
            inner,
            input: BytesMut::new(),
            output: BytesMut::new(),
            state: State::Preface(PREFACE.len()),
            pending: None,
            decoder: httlib_hpack::Decoder::default(),
            // The encoder's dynamic table has the protocol's default size (4096), which is what
            // h2's decoder uses as long as the server advertises no other header table size
            // (tonic's server does not).
            encoder: httlib_hpack::Encoder::default(),
            rewrites: 0,
        }
    }

    /// How many authorities this connection has rewritten so far.
    pub fn rewrites(&self) -> u64 {
        self.rewrites
    }

    /// The wrapped connection.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// Looks at the buffered input and moves what it can into `output`.
    fn process(&mut self) {
        loop {
            match self.state {
                State::Raw => {
                    let all = self.input.split();
                    self.output.unsplit(all);
                    return;
                }
                State::Preface(left) => {
                    let n = left.min(self.input.len());
                    if n == 0 {
                        return;
                    }
                    let at = PREFACE.len() - left;
                    if self.input[..n] != PREFACE[at..at + n] {
                        debug!("client did not send the HTTP/2 preface; passing it through");
                        self.state = State::Raw;
                        continue;
                    }
                    self.output.extend_from_slice(&self.input.split_to(n));
                    self.state = if left == n {
                        State::FrameHead
                    } else {
                        State::Preface(left - n)
                    };
                }
                State::Passthrough(left) => {
                    let n = left.min(self.input.len());
                    if n == 0 && left > 0 {
                        return;
                    }
                    self.output.extend_from_slice(&self.input.split_to(n));
                    self.state = if left == n {
                        State::FrameHead
                    } else {
                        State::Passthrough(left - n)
                    };
                }
                State::FrameHead => {
                    if self.input.len() < FRAME_HEADER_LEN {
                        return;
                    }
                    let len = usize::from(self.input[0]) << 16
                        | usize::from(self.input[1]) << 8
                        | usize::from(self.input[2]);
                    let kind = self.input[3];
                    if kind != FRAME_HEADERS && kind != FRAME_CONTINUATION {
                        self.output
                            .extend_from_slice(&self.input.split_to(FRAME_HEADER_LEN));
                        self.state = State::Passthrough(len);
                        continue;
                    }
                    let buffered = self.pending.as_ref().map_or(0, |p| p.fragment.len());
                    if len + buffered > MAX_BLOCK {
                        self.give_up("header block too large to rewrite");
                        continue;
                    }
                    if self.input.len() < FRAME_HEADER_LEN + len {
                        self.input
                            .reserve(FRAME_HEADER_LEN + len - self.input.len());
                        return;
                    }
                    let frame = self.input.split_to(FRAME_HEADER_LEN + len);
                    self.header_frame(&frame);
                }
            }
        }
    }

    /// Stops rewriting: what is pending and everything after it passes through as it came.
    fn give_up(&mut self, why: &str) {
        debug!(
            reason = why,
            "passing the rest of the connection through unchanged"
        );
        if let Some(p) = self.pending.take() {
            // Hand h2 the block as the client encoded it, so it reports the error it would.
            let flags = u8::from(p.end_stream) * FLAG_END_STREAM;
            emit_header_frames(
                &mut self.output,
                p.stream_id,
                flags,
                p.priority,
                &p.fragment,
            );
        }
        self.state = State::Raw;
    }

    /// Takes one complete `HEADERS` or `CONTINUATION` frame (header and payload).
    fn header_frame(&mut self, frame: &[u8]) {
        let kind = frame[3];
        let flags = frame[4];
        let stream_id = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        let mut payload = &frame[FRAME_HEADER_LEN..];
        if kind == FRAME_HEADERS {
            if self.pending.is_some() {
                // A new block before the last one ended: a protocol error h2 must see.
                self.give_up("HEADERS inside an unfinished header block");
                self.output.extend_from_slice(frame);
                return;
            }
            if flags & FLAG_PADDED != 0 {
                let Some((&pad, rest)) = payload.split_first() else {
                    self.give_up("malformed padding");
                    self.output.extend_from_slice(frame);
                    return;
                };
                let Some(unpadded) = rest.len().checked_sub(usize::from(pad)) else {
                    self.give_up("malformed padding");
                    self.output.extend_from_slice(frame);
                    return;
                };
                payload = &rest[..unpadded];
            }
            let mut priority = None;
            if flags & FLAG_PRIORITY != 0 {
                if payload.len() < 5 {
                    self.give_up("malformed priority");
                    self.output.extend_from_slice(frame);
                    return;
                }
                let mut p = [0u8; 5];
                p.copy_from_slice(&payload[..5]);
                priority = Some(p);
                payload = &payload[5..];
            }
            self.pending = Some(PendingBlock {
                stream_id,
                end_stream: flags & FLAG_END_STREAM != 0,
                priority,
                fragment: payload.to_vec(),
            });
        } else {
            match self.pending.as_mut() {
                Some(p) if p.stream_id == stream_id => p.fragment.extend_from_slice(payload),
                _ => {
                    self.give_up("CONTINUATION outside a header block");
                    self.output.extend_from_slice(frame);
                    return;
                }
            }
        }
        if flags & FLAG_END_HEADERS != 0 {
            self.finish_block();
        }
    }

    /// Decodes the collected block, rewrites a refused authority and emits the block again.
    fn finish_block(&mut self) {
        let Some(block) = self.pending.take() else {
            return;
        };
        let mut fields: Vec<(Vec<u8>, Vec<u8>, u8)> = Vec::new();
        let mut encoded_in = block.fragment.clone();
        if let Err(e) = self.decoder.decode(&mut encoded_in, &mut fields) {
            self.pending = Some(block);
            self.give_up(&format!("undecodable header block: {e:?}"));
            return;
        }
        let mut encoded = Vec::with_capacity(block.fragment.len() + 16);
        for (name, mut value, flags) in fields {
            if name.as_slice() == b":authority" && !is_acceptable_authority(&value) {
                if self.rewrites == 0 {
                    debug!(
                        authority = %String::from_utf8_lossy(&value),
                        "client sent an authority h2 refuses; serving it as localhost"
                    );
                }
                self.rewrites += 1;
                value = REPLACEMENT_AUTHORITY.to_vec();
            }
            // The best representation our table has, indexed (or never indexed) as the client
            // chose; strings go without Huffman coding, the cheapest for h2 to read.
            let how = ENCODE_BEST | (flags & (ENCODE_WITH_INDEXING | ENCODE_NEVER_INDEXED));
            if let Err(e) = self.encoder.encode((name, value, how), &mut encoded) {
                // Our encoder refusing a field it has just decoded cannot happen; should it,
                // h2 must see a broken connection rather than a wrong header.
                self.give_up(&format!("header block could not be encoded: {e:?}"));
                return;
            }
        }
        let flags = u8::from(block.end_stream) * FLAG_END_STREAM;
        emit_header_frames(
            &mut self.output,
            block.stream_id,
            flags,
            block.priority,
            &encoded,
        );
    }
}

/// Writes a header block as one `HEADERS` frame and as many `CONTINUATION` frames as it needs.
fn emit_header_frames(
    out: &mut BytesMut,
    stream_id: u32,
    flags: u8,
    priority: Option<[u8; 5]>,
    block: &[u8],
) {
    let prio_len = if priority.is_some() { 5 } else { 0 };
    let first_len = block.len().min(MAX_EMITTED_FRAGMENT - prio_len);
    let (first, mut rest) = block.split_at(first_len);
    let mut head_flags = flags;
    if priority.is_some() {
        head_flags |= FLAG_PRIORITY;
    }
    if rest.is_empty() {
        head_flags |= FLAG_END_HEADERS;
    }
    put_frame_header(
        out,
        first.len() + prio_len,
        FRAME_HEADERS,
        head_flags,
        stream_id,
    );
    if let Some(p) = priority {
        out.put_slice(&p);
    }
    out.put_slice(first);
    while !rest.is_empty() {
        let n = rest.len().min(MAX_EMITTED_FRAGMENT);
        let (chunk, tail) = rest.split_at(n);
        let f = if tail.is_empty() { FLAG_END_HEADERS } else { 0 };
        put_frame_header(out, n, FRAME_CONTINUATION, f, stream_id);
        out.put_slice(chunk);
        rest = tail;
    }
}

fn put_frame_header(out: &mut BytesMut, len: usize, kind: u8, flags: u8, stream_id: u32) {
    out.reserve(FRAME_HEADER_LEN + len);
    // `len` is at most MAX_EMITTED_FRAGMENT, or a length the client itself sent in 24 bits.
    let l = u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes();
    out.put_slice(&l[1..]);
    out.put_u8(kind);
    out.put_u8(flags);
    out.put_u32(stream_id & 0x7fff_ffff);
}

impl<T: AsyncRead + Unpin> AsyncRead for AuthorityFix<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if !this.output.is_empty() {
                let n = this.output.len().min(buf.remaining());
                buf.put_slice(&this.output[..n]);
                this.output.advance(n);
                return Poll::Ready(Ok(()));
            }
            // A payload that passes through is read straight into the caller's buffer.
            let direct = match this.state {
                State::Passthrough(left) if this.input.is_empty() => Some(left),
                State::Raw if this.input.is_empty() => Some(usize::MAX),
                _ => None,
            };
            if let Some(left) = direct.filter(|l| *l > 0) {
                let limit = left.min(buf.remaining());
                let mut sub = buf.take(limit);
                ready!(Pin::new(&mut this.inner).poll_read(cx, &mut sub))?;
                let n = sub.filled().len();
                // SAFETY: `sub` filled (so initialised) exactly `n` bytes of `buf`'s unfilled part.
                unsafe { buf.assume_init(n) };
                buf.advance(n);
                if let State::Passthrough(l) = this.state {
                    this.state = if l == n {
                        State::FrameHead
                    } else {
                        State::Passthrough(l - n)
                    };
                }
                return Poll::Ready(Ok(()));
            }
            this.process();
            if !this.output.is_empty() {
                continue;
            }
            this.input.reserve(READ_CHUNK);
            let n = ready!(tokio_util::io::poll_read_buf(
                Pin::new(&mut this.inner),
                cx,
                &mut this.input
            ))?;
            if n == 0 {
                // End of stream: whatever is left (a cut frame) goes as it is, then EOF.
                let rest = this.input.split();
                this.output.unsplit(rest);
                if this.output.is_empty() {
                    return Poll::Ready(Ok(()));
                }
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<T: Connected> Connected for AuthorityFix<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut b = BytesMut::new();
        put_frame_header(&mut b, payload.len(), kind, flags, stream);
        b.put_slice(payload);
        b.to_vec()
    }

    fn request_fields(authority: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        vec![
            (b":method".to_vec(), b"POST".to_vec()),
            (b":scheme".to_vec(), b"http".to_vec()),
            (
                b":path".to_vec(),
                b"/runtime.v1.RuntimeService/Version".to_vec(),
            ),
            (b":authority".to_vec(), authority.to_vec()),
            (b"content-type".to_vec(), b"application/grpc".to_vec()),
        ]
    }

    /// Runs `client_bytes` through the adapter and splits what comes out into frames.
    async fn rewrite(client_bytes: Vec<u8>, chunk: usize) -> Vec<(u8, u8, u32, Vec<u8>)> {
        let (mut client, server) = tokio::io::duplex(chunk);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for c in client_bytes.chunks(chunk) {
                client.write_all(c).await.unwrap();
            }
            client.shutdown().await.unwrap();
        });
        let mut fix = AuthorityFix::new(server);
        let mut out = Vec::new();
        fix.read_to_end(&mut out).await.unwrap();
        writer.await.unwrap();
        assert_eq!(&out[..PREFACE.len()], PREFACE);
        let mut rest = &out[PREFACE.len()..];
        let mut frames = Vec::new();
        while !rest.is_empty() {
            let len =
                (usize::from(rest[0]) << 16) | (usize::from(rest[1]) << 8) | usize::from(rest[2]);
            let sid = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]);
            frames.push((rest[3], rest[4], sid, rest[9..9 + len].to_vec()));
            rest = &rest[9 + len..];
        }
        frames
    }

    fn authority_of(decoder: &mut loona_hpack::Decoder<'_>, block: &[u8]) -> Vec<u8> {
        decoder
            .decode(block)
            .unwrap()
            .into_iter()
            .find(|(n, _)| n == b":authority")
            .map(|(_, v)| v)
            .unwrap()
    }

    #[test]
    fn authorities_h2_refuses() {
        for bad in [
            &b"/run/dockershim.sock"[..],
            b"%2Frun%2Fx.sock",
            b"",
            b"a b",
        ] {
            assert!(!is_acceptable_authority(bad), "{bad:?}");
        }
        for good in [
            &b"localhost"[..],
            b"127.0.0.1:5000",
            b"[::1]:80",
            b"example.com",
        ] {
            assert!(is_acceptable_authority(good), "{good:?}");
        }
    }

    #[tokio::test]
    async fn rewrites_only_refused_authorities_and_keeps_the_tables_in_step() {
        // One client encoder for three requests on one connection: the second and third lean
        // on its dynamic table, so a decoder out of step would fail or misread them.
        let mut enc = loona_hpack::Encoder::new();
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(0x4, 0, 0, &[])); // SETTINGS passes through
        for (i, auth) in [&b"/run/x.sock"[..], b"localhost", b"/run/x.sock"]
            .iter()
            .enumerate()
        {
            let f = request_fields(auth);
            let block = enc.encode(f.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
            let sid = 1 + 2 * i as u32;
            bytes.extend(frame(FRAME_HEADERS, FLAG_END_HEADERS, sid, &block));
            bytes.extend(frame(0x0, FLAG_END_STREAM, sid, b"\0\0\0\0\0"));
        }
        let frames = rewrite(bytes, 7).await;
        let mut dec = loona_hpack::Decoder::new();
        let auths: Vec<Vec<u8>> = frames
            .iter()
            .filter(|f| f.0 == FRAME_HEADERS)
            .map(|f| authority_of(&mut dec, &f.3))
            .collect();
        assert_eq!(auths, vec![b"localhost".to_vec(); 3]);
        let kinds: Vec<u8> = frames.iter().map(|f| f.0).collect();
        assert_eq!(kinds, vec![0x4, 1, 0, 1, 0, 1, 0]);
        assert!(
            frames
                .iter()
                .filter(|f| f.0 == 0)
                .all(|f| f.3 == b"\0\0\0\0\0")
        );
    }

    #[tokio::test]
    async fn continuation_padding_and_priority() {
        let mut enc = loona_hpack::Encoder::new();
        let mut fields = request_fields(b"");
        // A large header forces the re-emitted block over one frame.
        fields.push((b"x-big".to_vec(), vec![b'v'; 40_000]));
        let block = enc.encode(fields.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        let (a, b) = block.split_at(100);
        let mut first = vec![3u8]; // pad length
        first.extend([0x80, 0, 0, 0, 15]); // exclusive dependency on 0, weight 16
        first.extend(a);
        first.extend([0, 0, 0]);
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(
            FRAME_HEADERS,
            FLAG_PADDED | FLAG_PRIORITY | FLAG_END_STREAM,
            5,
            &first,
        ));
        bytes.extend(frame(FRAME_CONTINUATION, FLAG_END_HEADERS, 5, b));
        let frames = rewrite(bytes, 1000).await;
        assert_eq!(frames[0].0, FRAME_HEADERS);
        assert_eq!(frames[0].1, FLAG_PRIORITY | FLAG_END_STREAM);
        assert_eq!(&frames[0].3[..5], &[0x80, 0, 0, 0, 15]);
        assert!(
            frames[1..]
                .iter()
                .all(|f| f.0 == FRAME_CONTINUATION && f.2 == 5)
        );
        assert_eq!(frames.last().unwrap().1, FLAG_END_HEADERS);
        assert!(frames.iter().all(|f| f.3.len() <= MAX_EMITTED_FRAGMENT));
        let mut joined = frames[0].3[5..].to_vec();
        for f in &frames[1..] {
            joined.extend(&f.3);
        }
        let decoded = loona_hpack::Decoder::new().decode(&joined).unwrap();
        assert_eq!(decoded[3], (b":authority".to_vec(), b"localhost".to_vec()));
        assert_eq!(decoded[5].1.len(), 40_000);
    }

    #[tokio::test]
    async fn not_http2_passes_through() {
        let bytes = b"GET / HTTP/1.1\r\nHost: /x\r\n\r\n".to_vec();
        let (mut client, server) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut client, &bytes)
            .await
            .unwrap();
        drop(client);
        let mut out = Vec::new();
        AuthorityFix::new(server)
            .read_to_end(&mut out)
            .await
            .unwrap();
        assert_eq!(out, bytes);
    }

    #[tokio::test]
    async fn an_undecodable_block_reaches_h2_unchanged() {
        let mut bytes = PREFACE.to_vec();
        let garbage = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        bytes.extend(frame(FRAME_HEADERS, FLAG_END_HEADERS, 1, &garbage));
        bytes.extend(frame(0x0, 0, 1, b"abc"));
        let frames = rewrite(bytes, 5).await;
        assert_eq!(
            frames[0],
            (FRAME_HEADERS, FLAG_END_HEADERS, 1, garbage.to_vec())
        );
        assert_eq!(frames[1], (0, 0, 1, b"abc".to_vec()));
    }
}
