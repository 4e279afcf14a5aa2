//! The CRI streaming server: Exec, Attach and PortForward validate their request (the container
//! or sandbox exists and runs; at least one of stdin/stdout/stderr; tty excludes stderr), store
//! it under a single-use token that expires after a minute (`tokens`) and answer an absolute URL
//! on the streaming server (`server`), which serves the session over SPDY/3.1 (`spdy`) or
//! WebSocket (`wschannel`) with the remotecommand and portforward subprotocols
//! (`remotecommand`, `portforward`), on the Docker side through exec/attach and a dial inside
//! the sandbox's network namespace (`runtime`). `stdio` is the protocol-neutral session face.
//! Limits (`config`): idle timeout, a cap on concurrent sessions and on pending tokens, loopback
//! unless `--streaming-bind-addr` says otherwise.
//!
//! This is the top layer: it asks the Docker side only through [`StreamingRuntime`], and the
//! CRI side (`crate::streaming_rpc`, below it) reaches it only through the shim's
//! `StreamingServer` trait, which [`Handle`] implements. This file only declares the modules.

pub mod config;
pub mod portforward;
pub mod remotecommand;
pub mod runtime;
pub mod server;
pub mod spdy;
pub mod stdio;
pub mod tokens;
pub mod wschannel;

pub use config::{Limits, StreamingConfig, protocols};
pub use runtime::StreamingRuntime;
pub use server::{Handle, start};
