//! What the kubelet and dockershim both need, in one place: [`duration`], Go durations
//! (`time.ParseDuration` and `Duration.String()`, their flag and serde forms). The kubelet
//! library and dockershim each depend on this crate instead of carrying a copy.

pub mod duration;
