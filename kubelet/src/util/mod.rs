//! Utilities named after upstream `pkg/util`.

pub mod hash;
pub mod informer;
pub mod wait;
