//! Versions: the Kubernetes release whose kubelet this one implements (its `--version`, the
//! Node's `status.nodeInfo.kubeletVersion`) and this project's own version.

/// The Kubernetes version this kubelet implements (flags, config file, behaviour of 1.26).
pub const KUBERNETES_VERSION: &str = "v1.26.1";

/// This project's version.
pub const OWN_VERSION: &str = env!("CARGO_PKG_VERSION");

/// What `kubelet --version` prints: `Kubernetes v1.26.1` as upstream on the first line (scripts
/// take its second word), this implementation's own version on the next.
pub fn version_text() -> String {
    format!("Kubernetes {KUBERNETES_VERSION}\nkubelet-rs v{OWN_VERSION}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_line_is_upstreams() {
        let t = version_text();
        let first = t.lines().next().expect("line");
        assert_eq!(first, "Kubernetes v1.26.1");
        assert_eq!(first.split_whitespace().nth(1), Some(KUBERNETES_VERSION));
        assert!(
            t.lines()
                .nth(1)
                .is_some_and(|l| l.starts_with("kubelet-rs v"))
        );
    }
}
