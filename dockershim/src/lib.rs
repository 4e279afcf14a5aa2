//! Building blocks of the Rust dockershim that do not depend on the CRI
//! protobuf types: Docker container naming, label/annotation mapping, sandbox
//! checkpoints, the CRI log format writer, the CNI runner and the embedded
//! pause image.

pub mod checkpoint;
pub mod cni;
pub mod crilog;
pub mod labels;
pub mod naming;
pub mod pause_image;
