//! SPDY/3.1, as Kubernetes streaming uses it (moby/spdystream underneath client-go and the
//! kubelet): `frame` holds the wire format and the zlib header compression with the SPDY/3
//! dictionary, `session` the stream multiplexer over one connection, `dictionary` the
//! dictionary itself. Used by the streaming server and by the test client in `integration`.

pub mod dictionary;
pub mod frame;
pub mod session;

pub use frame::{Frame, FrameError, Headers, header};
pub use session::{Incoming, Role, Session, SessionError, Stream, StreamWriter};
