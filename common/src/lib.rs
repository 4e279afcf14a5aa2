//! What the kubelet and dockershim both need, in one place, so that neither depends on the
//! other for it: [`duration`], Go durations (`time.ParseDuration` and `Duration.String()`,
//! their flag and serde forms); [`cni`], the CNI flag group; [`crilog`], the CRI container log line (Go's RFC3339Nano
//! timestamps, writing a line, parsing one back); [`labels`], the pod and container label keys
//! the kubelet sets; [`memory`], giving the allocator's free pages back to the kernel (a
//! scavenger both binaries run); [`pull_progress`], the progress of image pulls an embedded
//! runtime hands to the kubelet. Each module imports nothing of the others.

pub mod cni;
pub mod crilog;
pub mod duration;
pub mod labels;
pub mod memory;
pub mod pull_progress;
