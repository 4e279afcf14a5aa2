//! The CNI flag group both binaries take (upstream dockershim's `NetworkPluginSettings`, as
//! cri-dockerd and the dockershim-era kubelet spell it): `--cni-bin-dir`, `--cni-conf-dir`,
//! `--cni-cache-dir` with their upstream defaults. `dockershim` reads them for its own CNI;
//! the kubelet passes them to the dockershim it embeds.

/// Where CNI plugins, network configs and cached results live.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct CniDirFlags {
    /// Comma-separated directories to search for CNI plugin binaries.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DIRS",
        default_value = "/opt/cni/bin"
    )]
    pub cni_bin_dir: String,
    /// Directory holding CNI network configurations.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DIR",
        default_value = "/etc/cni/net.d"
    )]
    pub cni_conf_dir: String,
    /// Directory where CNI caches results.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DIR",
        default_value = "/var/lib/cni/cache"
    )]
    pub cni_cache_dir: String,
}

impl CniDirFlags {
    /// The plugin directories of `--cni-bin-dir`, trimmed, empty entries dropped.
    pub fn bin_dirs(&self) -> Vec<std::path::PathBuf> {
        self.cni_bin_dir
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(std::path::PathBuf::from)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        cni: CniDirFlags,
    }

    #[test]
    fn defaults_and_bin_dirs() {
        let c = Cmd::parse_from(["x"]).cni;
        assert_eq!(c.cni_conf_dir, "/etc/cni/net.d");
        assert_eq!(c.cni_cache_dir, "/var/lib/cni/cache");
        let c = Cmd::parse_from(["x", "--cni-bin-dir", " /a, ,/b "]).cni;
        assert_eq!(
            c.bin_dirs(),
            vec![
                std::path::PathBuf::from("/a"),
                std::path::PathBuf::from("/b")
            ]
        );
    }
}
