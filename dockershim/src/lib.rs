//! dockershim: a CRI `runtime.v1` server on the Docker Engine.
pub mod docker;
