//! SPDY/3.1 frames and their wire format: the nine frame types (draft 3.1, section 2.6), the
//! name/value header block, and the per-direction zlib contexts that compress header blocks with
//! the SPDY dictionary (one [`Encoder`] and one [`Decoder`] per connection, used in frame order).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};

use super::dictionary::SPDY3_DICTIONARY;

/// The protocol version carried by control frames.
pub const VERSION: u16 = 3;
/// FLAG_FIN on data and control frames.
pub const FLAG_FIN: u8 = 0x01;
/// FLAG_UNIDIRECTIONAL on SYN_STREAM.
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;
/// Largest payload a frame may carry (24-bit length).
pub const MAX_FRAME_LEN: usize = (1 << 24) - 1;
/// Largest decompressed header block accepted.
pub const MAX_HEADER_BLOCK: usize = 1 << 20;

const TYPE_SYN_STREAM: u16 = 1;
const TYPE_SYN_REPLY: u16 = 2;
const TYPE_RST_STREAM: u16 = 3;
const TYPE_SETTINGS: u16 = 4;
const TYPE_PING: u16 = 6;
const TYPE_GOAWAY: u16 = 7;
const TYPE_HEADERS: u16 = 8;
const TYPE_WINDOW_UPDATE: u16 = 9;

/// RST_STREAM status codes used here.
pub const RST_PROTOCOL_ERROR: u32 = 1;
pub const RST_REFUSED_STREAM: u32 = 3;
pub const RST_CANCEL: u32 = 5;

/// Header name/value pairs (names lower-case; several values joined by NUL, as on the wire).
pub type Headers = Vec<(String, String)>;

/// The value of header `name` in `headers` (names compare case-insensitively).
pub fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// One SPDY/3.1 frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    SynStream {
        stream_id: u32,
        associated_to: u32,
        priority: u8,
        flags: u8,
        headers: Headers,
    },
    SynReply {
        stream_id: u32,
        flags: u8,
        headers: Headers,
    },
    RstStream {
        stream_id: u32,
        status: u32,
    },
    Settings {
        flags: u8,
        /// (flags, id, value)
        entries: Vec<(u8, u32, u32)>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good_stream_id: u32,
        status: u32,
    },
    Headers {
        stream_id: u32,
        flags: u8,
        headers: Headers,
    },
    WindowUpdate {
        stream_id: u32,
        delta: u32,
    },
    Data {
        stream_id: u32,
        flags: u8,
        data: Bytes,
    },
}

/// A malformed frame or a broken compression context: the connection cannot continue.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("spdy: unsupported version {0}")]
    Version(u16),
    #[error("spdy: invalid {0} frame")]
    Invalid(&'static str),
    #[error("spdy: frame of {0} bytes is too large")]
    TooLarge(usize),
    #[error("spdy: header block: {0}")]
    HeaderBlock(String),
    #[error("spdy: header compression: {0}")]
    Zlib(String),
}

/// Encodes frames; owns the sending direction's header compression context.
pub struct Encoder {
    zlib: Compress,
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Encoder {
    pub fn new() -> Self {
        let mut zlib = Compress::new(Compression::default(), true);
        // Cannot fail on a fresh stream; spdystream does the same.
        let _ = zlib.set_dictionary(SPDY3_DICTIONARY);
        Self { zlib }
    }

    /// Appends `frame` to `out`.
    pub fn encode(&mut self, frame: &Frame, out: &mut BytesMut) -> Result<(), FrameError> {
        match frame {
            Frame::Data {
                stream_id,
                flags,
                data,
            } => {
                if data.len() > MAX_FRAME_LEN {
                    return Err(FrameError::TooLarge(data.len()));
                }
                out.reserve(8 + data.len());
                out.put_u32(stream_id & 0x7fff_ffff);
                out.put_u32((u32::from(*flags) << 24) | data.len() as u32);
                out.put_slice(data);
                Ok(())
            }
            Frame::SynStream {
                stream_id,
                associated_to,
                priority,
                flags,
                headers,
            } => {
                let block = self.compress(headers)?;
                let mut body = BytesMut::with_capacity(10 + block.len());
                body.put_u32(stream_id & 0x7fff_ffff);
                body.put_u32(associated_to & 0x7fff_ffff);
                body.put_u8((priority & 0x07) << 5);
                body.put_u8(0); // slot
                body.put_slice(&block);
                control(out, TYPE_SYN_STREAM, *flags, &body)
            }
            Frame::SynReply {
                stream_id,
                flags,
                headers,
            } => self.stream_headers(out, TYPE_SYN_REPLY, *stream_id, *flags, headers),
            Frame::Headers {
                stream_id,
                flags,
                headers,
            } => self.stream_headers(out, TYPE_HEADERS, *stream_id, *flags, headers),
            Frame::RstStream { stream_id, status } => {
                let mut body = BytesMut::with_capacity(8);
                body.put_u32(stream_id & 0x7fff_ffff);
                body.put_u32(*status);
                control(out, TYPE_RST_STREAM, 0, &body)
            }
            Frame::Settings { flags, entries } => {
                let mut body = BytesMut::with_capacity(4 + 8 * entries.len());
                body.put_u32(entries.len() as u32);
                for (f, id, value) in entries {
                    body.put_u32((u32::from(*f) << 24) | (id & 0x00ff_ffff));
                    body.put_u32(*value);
                }
                control(out, TYPE_SETTINGS, *flags, &body)
            }
            Frame::Ping { id } => control(out, TYPE_PING, 0, &id.to_be_bytes()),
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => {
                let mut body = BytesMut::with_capacity(8);
                body.put_u32(last_good_stream_id & 0x7fff_ffff);
                body.put_u32(*status);
                control(out, TYPE_GOAWAY, 0, &body)
            }
            Frame::WindowUpdate { stream_id, delta } => {
                let mut body = BytesMut::with_capacity(8);
                body.put_u32(stream_id & 0x7fff_ffff);
                body.put_u32(delta & 0x7fff_ffff);
                control(out, TYPE_WINDOW_UPDATE, 0, &body)
            }
        }
    }

    fn stream_headers(
        &mut self,
        out: &mut BytesMut,
        kind: u16,
        stream_id: u32,
        flags: u8,
        headers: &Headers,
    ) -> Result<(), FrameError> {
        let block = self.compress(headers)?;
        let mut body = BytesMut::with_capacity(4 + block.len());
        body.put_u32(stream_id & 0x7fff_ffff);
        body.put_slice(&block);
        control(out, kind, flags, &body)
    }

    /// Serializes and compresses a header block (sync flush: the block ends on a byte
    /// boundary, and the context carries on into the next block).
    fn compress(&mut self, headers: &Headers) -> Result<Vec<u8>, FrameError> {
        let mut raw = Vec::with_capacity(64);
        raw.put_u32(headers.len() as u32);
        for (k, v) in headers {
            let k = k.to_ascii_lowercase();
            raw.put_u32(k.len() as u32);
            raw.put_slice(k.as_bytes());
            raw.put_u32(v.len() as u32);
            raw.put_slice(v.as_bytes());
        }
        let mut out = Vec::with_capacity(raw.len() + 64);
        let mut consumed = 0usize;
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(256);
            }
            let before = self.zlib.total_in();
            self.zlib
                .compress_vec(&raw[consumed..], &mut out, FlushCompress::Sync)
                .map_err(|e| FrameError::Zlib(e.to_string()))?;
            consumed += (self.zlib.total_in() - before) as usize;
            if consumed >= raw.len() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

fn control(out: &mut BytesMut, kind: u16, flags: u8, body: &[u8]) -> Result<(), FrameError> {
    if body.len() > MAX_FRAME_LEN {
        return Err(FrameError::TooLarge(body.len()));
    }
    out.reserve(8 + body.len());
    out.put_u16(0x8000 | VERSION);
    out.put_u16(kind);
    out.put_u32((u32::from(flags) << 24) | body.len() as u32);
    out.put_slice(body);
    Ok(())
}

/// Decodes frames; owns the receiving direction's header decompression context.
pub struct Decoder {
    zlib: Decompress,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    pub fn new() -> Self {
        Self {
            zlib: Decompress::new(true),
        }
    }

    /// Takes one whole frame off the front of `buf`, or `None` when `buf` does not hold one
    /// yet. Unknown control frame types are skipped.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        loop {
            if buf.len() < 8 {
                return Ok(None);
            }
            let len = (u32::from_be_bytes([0, buf[5], buf[6], buf[7]])) as usize;
            if buf.len() < 8 + len {
                buf.reserve(8 + len - buf.len());
                return Ok(None);
            }
            let first = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
            let flags = buf[4];
            let mut frame = buf.split_to(8 + len);
            frame.advance(8);
            if first & 0x8000_0000 == 0 {
                return Ok(Some(Frame::Data {
                    stream_id: first & 0x7fff_ffff,
                    flags,
                    data: frame.freeze(),
                }));
            }
            let version = ((first >> 16) & 0x7fff) as u16;
            if version != VERSION {
                return Err(FrameError::Version(version));
            }
            let kind = (first & 0xffff) as u16;
            if let Some(f) = self.control(kind, flags, frame)? {
                return Ok(Some(f));
            }
        }
    }

    fn control(
        &mut self,
        kind: u16,
        flags: u8,
        mut body: BytesMut,
    ) -> Result<Option<Frame>, FrameError> {
        let need = |body: &BytesMut, n: usize, what: &'static str| {
            if body.len() < n {
                Err(FrameError::Invalid(what))
            } else {
                Ok(())
            }
        };
        Ok(Some(match kind {
            TYPE_SYN_STREAM => {
                need(&body, 10, "SYN_STREAM")?;
                let stream_id = body.get_u32() & 0x7fff_ffff;
                let associated_to = body.get_u32() & 0x7fff_ffff;
                let priority = body.get_u8() >> 5;
                let _slot = body.get_u8();
                let headers = self.decompress(&body)?;
                Frame::SynStream {
                    stream_id,
                    associated_to,
                    priority,
                    flags,
                    headers,
                }
            }
            TYPE_SYN_REPLY | TYPE_HEADERS => {
                need(&body, 4, "SYN_REPLY")?;
                let stream_id = body.get_u32() & 0x7fff_ffff;
                let headers = self.decompress(&body)?;
                if kind == TYPE_SYN_REPLY {
                    Frame::SynReply {
                        stream_id,
                        flags,
                        headers,
                    }
                } else {
                    Frame::Headers {
                        stream_id,
                        flags,
                        headers,
                    }
                }
            }
            TYPE_RST_STREAM => {
                need(&body, 8, "RST_STREAM")?;
                Frame::RstStream {
                    stream_id: body.get_u32() & 0x7fff_ffff,
                    status: body.get_u32(),
                }
            }
            TYPE_SETTINGS => {
                need(&body, 4, "SETTINGS")?;
                let n = body.get_u32() as usize;
                need(&body, n.saturating_mul(8), "SETTINGS")?;
                let entries = (0..n)
                    .map(|_| {
                        let idf = body.get_u32();
                        ((idf >> 24) as u8, idf & 0x00ff_ffff, body.get_u32())
                    })
                    .collect();
                Frame::Settings { flags, entries }
            }
            TYPE_PING => {
                need(&body, 4, "PING")?;
                Frame::Ping { id: body.get_u32() }
            }
            TYPE_GOAWAY => {
                need(&body, 4, "GOAWAY")?;
                let last_good_stream_id = body.get_u32() & 0x7fff_ffff;
                // SPDY/2 peers omit the status.
                let status = if body.len() >= 4 { body.get_u32() } else { 0 };
                Frame::GoAway {
                    last_good_stream_id,
                    status,
                }
            }
            TYPE_WINDOW_UPDATE => {
                need(&body, 8, "WINDOW_UPDATE")?;
                Frame::WindowUpdate {
                    stream_id: body.get_u32() & 0x7fff_ffff,
                    delta: body.get_u32() & 0x7fff_ffff,
                }
            }
            _ => return Ok(None),
        }))
    }

    fn decompress(&mut self, input: &[u8]) -> Result<Headers, FrameError> {
        let mut out: Vec<u8> = Vec::with_capacity(input.len() * 4 + 256);
        let mut consumed = 0usize;
        loop {
            if out.capacity() - out.len() < 256 {
                if out.len() >= MAX_HEADER_BLOCK {
                    return Err(FrameError::HeaderBlock("too large".into()));
                }
                out.reserve(out.capacity().max(256));
            }
            let (in_before, out_before) = (self.zlib.total_in(), out.len());
            match self
                .zlib
                .decompress_vec(&input[consumed..], &mut out, FlushDecompress::Sync)
            {
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.zlib
                        .set_dictionary(SPDY3_DICTIONARY)
                        .map_err(|e| FrameError::Zlib(e.to_string()))?;
                }
                Err(e) => return Err(FrameError::Zlib(e.to_string())),
            }
            consumed += (self.zlib.total_in() - in_before) as usize;
            if consumed >= input.len() && out.len() < out.capacity() {
                break;
            }
            if self.zlib.total_in() == in_before
                && out.len() == out_before
                && consumed >= input.len()
            {
                break;
            }
        }
        parse_block(&out)
    }
}

fn parse_block(mut raw: &[u8]) -> Result<Headers, FrameError> {
    let bad = |m: &str| FrameError::HeaderBlock(m.to_string());
    if raw.len() < 4 {
        return Err(bad("truncated"));
    }
    let n = raw.get_u32() as usize;
    let mut headers = Vec::with_capacity(n.min(64));
    let take = |raw: &mut &[u8]| -> Result<String, FrameError> {
        if raw.len() < 4 {
            return Err(bad("truncated"));
        }
        let len = raw.get_u32() as usize;
        if raw.len() < len {
            return Err(bad("truncated"));
        }
        let s = String::from_utf8_lossy(&raw[..len]).into_owned();
        raw.advance(len);
        Ok(s)
    };
    for _ in 0..n {
        let k = take(&mut raw)?;
        let v = take(&mut raw)?;
        headers.push((k, v));
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(frames: &[Frame]) -> Vec<Frame> {
        let (mut enc, mut dec) = (Encoder::new(), Decoder::new());
        let mut wire = BytesMut::new();
        for f in frames {
            enc.encode(f, &mut wire).expect("encode");
        }
        let mut got = Vec::new();
        while let Some(f) = dec.decode(&mut wire).expect("decode") {
            got.push(f);
        }
        assert!(wire.is_empty());
        got
    }

    #[test]
    fn dictionary_is_the_spdy3_one() {
        assert_eq!(SPDY3_DICTIONARY.len(), 1423);
        assert!(SPDY3_DICTIONARY.ends_with(b"enq=0."));
        let mut c = Compress::new(Compression::default(), true);
        assert_eq!(
            c.set_dictionary(SPDY3_DICTIONARY).expect("dict"),
            0xe3c6_a7c2
        );
    }

    #[test]
    fn every_frame_type_round_trips_with_a_shared_context() {
        let h = |v: &str| vec![("streamtype".to_string(), v.to_string())];
        let frames = vec![
            Frame::SynStream {
                stream_id: 1,
                associated_to: 0,
                priority: 0,
                flags: 0,
                headers: h("error"),
            },
            Frame::SynStream {
                stream_id: 3,
                associated_to: 0,
                priority: 7,
                flags: FLAG_FIN,
                headers: h("stdout"),
            },
            Frame::SynReply {
                stream_id: 1,
                flags: 0,
                headers: vec![],
            },
            Frame::Headers {
                stream_id: 3,
                flags: 0,
                headers: h("x"),
            },
            Frame::Data {
                stream_id: 3,
                flags: FLAG_FIN,
                data: Bytes::from_static(b"hello"),
            },
            Frame::RstStream {
                stream_id: 5,
                status: RST_CANCEL,
            },
            Frame::Settings {
                flags: 0,
                entries: vec![(0, 7, 65536)],
            },
            Frame::Ping { id: 2 },
            Frame::GoAway {
                last_good_stream_id: 3,
                status: 0,
            },
            Frame::WindowUpdate {
                stream_id: 1,
                delta: 1024,
            },
        ];
        assert_eq!(roundtrip(&frames), frames);
    }

    #[test]
    fn data_frame_layout_is_the_specs() {
        let mut wire = BytesMut::new();
        Encoder::new()
            .encode(
                &Frame::Data {
                    stream_id: 5,
                    flags: FLAG_FIN,
                    data: Bytes::from_static(b"ab"),
                },
                &mut wire,
            )
            .expect("encode");
        assert_eq!(&wire[..], &[0, 0, 0, 5, 1, 0, 0, 2, b'a', b'b']);
    }

    #[test]
    fn control_frame_header_and_ping_layout() {
        let mut wire = BytesMut::new();
        Encoder::new()
            .encode(&Frame::Ping { id: 9 }, &mut wire)
            .expect("encode");
        assert_eq!(&wire[..], &[0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 9]);
    }

    #[test]
    fn partial_frames_wait_for_more_bytes() {
        let mut enc = Encoder::new();
        let mut wire = BytesMut::new();
        enc.encode(
            &Frame::Data {
                stream_id: 1,
                flags: 0,
                data: Bytes::from_static(b"0123456789"),
            },
            &mut wire,
        )
        .expect("encode");
        let mut dec = Decoder::new();
        let mut part = wire.split_to(9);
        assert!(dec.decode(&mut part).expect("partial").is_none());
        part.unsplit(wire);
        assert!(dec.decode(&mut part).expect("whole").is_some());
    }

    #[test]
    fn header_names_are_lowercased_and_values_kept() {
        let frames = vec![Frame::SynReply {
            stream_id: 1,
            flags: 0,
            headers: vec![(
                "X-Stream-Protocol-Version".into(),
                "v4.channel.k8s.io".into(),
            )],
        }];
        let got = roundtrip(&frames);
        let Frame::SynReply { headers, .. } = &got[0] else {
            panic!("not a SYN_REPLY: {got:?}");
        };
        assert_eq!(headers[0].0, "x-stream-protocol-version");
        assert_eq!(
            header(headers, "X-Stream-Protocol-Version"),
            Some("v4.channel.k8s.io")
        );
    }

    #[test]
    fn a_bad_version_is_an_error() {
        let mut wire = BytesMut::from(&[0x80u8, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1][..]);
        assert!(matches!(
            Decoder::new().decode(&mut wire),
            Err(FrameError::Version(2))
        ));
    }
}
