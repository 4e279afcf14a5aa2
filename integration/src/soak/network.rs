//! The soak's own CNI network: a bridge made beforehand on a free 172.30.N.0/24 (the same
//! allocation as a private Docker's, [`crate::dockerd::make_bridge`]), a conflist naming it
//! with host-local IPAM whose `dataDir` is the soak's own, and a CNI cache directory of its
//! own, so that the leak checks count exactly this soak's pod IPs and cache files. The
//! bridge is deleted on drop.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// A private CNI network.
pub struct CniNetwork {
    /// The network's name (`soak-<bridge>`): the IPAM directory and cache files carry it.
    pub name: String,
    /// The Linux bridge the pods' veths are attached to.
    pub bridge: String,
    /// `--cni-conf-dir` / containerd's `conf_dir`.
    pub conf_dir: PathBuf,
    /// host-local's `dataDir`: one file per reserved IP under `<ipam_dir>/<name>/`.
    pub ipam_dir: PathBuf,
    /// Where the runtime caches CNI results (`results/<name>-<container id>-<if>`).
    pub cache_dir: PathBuf,
}

impl CniNetwork {
    /// Makes the bridge and writes the configuration under `dir` (which must exist).
    /// `cache_dir` is where the runtime keeps its CNI cache: its own for dockershim,
    /// `/var/lib/cni` (libcni's default, which containerd 1.6 cannot change) for containerd.
    pub fn create(dir: &Path, cache_dir: Option<PathBuf>) -> anyhow::Result<CniNetwork> {
        let (bridge, n) = crate::dockerd::make_bridge("soak")?;
        let name = format!("soak-{bridge}");
        let conf_dir = dir.join("net.d");
        let ipam_dir = dir.join("ipam");
        std::fs::create_dir_all(&conf_dir).context("net.d")?;
        std::fs::create_dir_all(&ipam_dir).context("ipam dir")?;
        let net = CniNetwork {
            conf_dir,
            ipam_dir,
            cache_dir: cache_dir.unwrap_or_else(|| dir.join("cni-cache")),
            name,
            bridge,
        };
        std::fs::write(
            net.conf_dir.join(format!("10-{}.conflist", net.name)),
            conflist(&net.name, &net.bridge, n, &net.ipam_dir),
        )
        .context("conflist")?;
        Ok(net)
    }

    /// The addresses host-local holds, as (IP, the container id it is reserved for).
    pub fn reserved_ips(&self) -> Vec<(String, String)> {
        let Ok(dir) = std::fs::read_dir(self.ipam_dir.join(&self.name)) else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|e| {
                let ip = e.file_name().to_string_lossy().into_owned();
                (!ip.starts_with("last_reserved_ip") && ip != "lock").then(|| {
                    let owner = std::fs::read_to_string(e.path()).unwrap_or_default();
                    (ip, owner.lines().next().unwrap_or("").to_string())
                })
            })
            .collect()
    }

    /// The CNI result cache files of this network.
    pub fn cache_files(&self) -> Vec<PathBuf> {
        let prefix = format!("{}-", self.name);
        let Ok(dir) = std::fs::read_dir(self.cache_dir.join("results")) else {
            return Vec::new();
        };
        dir.flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| e.path())
            .collect()
    }

    /// The interfaces still attached to the bridge (the host ends of pods' veths).
    pub fn attached_interfaces(&self) -> Vec<String> {
        let out = std::process::Command::new("ip")
            .args(["-o", "link", "show", "master", &self.bridge])
            .output();
        let Ok(out) = out else {
            return Vec::new();
        };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|n| n.split('@').next().unwrap_or(n).to_string())
            .collect()
    }
}

impl Drop for CniNetwork {
    fn drop(&mut self) {
        crate::dockerd::delete_bridge(&self.bridge);
        for f in self.cache_files() {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// The test bed's bridge conflist (`hack/testbed.sh`'s `bridge_conflist`) on the bridge
/// `bridge` with 172.30.`n`.0/24 and host-local's data in `ipam_dir`.
fn conflist(name: &str, bridge: &str, n: u8, ipam_dir: &Path) -> String {
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": format!("172.30.{n}.0/24") }]],
                    "routes": [{ "dst": "0.0.0.0/0" }],
                    "dataDir": ipam_dir.display().to_string(),
                }
            },
            { "type": "portmap", "capabilities": { "portMappings": true } }
        ]
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conflist_keeps_ipam_data_in_the_soaks_directory() {
        let text = conflist("soak-x", "soakabc", 7, Path::new("/tmp/s/ipam"));
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert_eq!(v["name"], "soak-x");
        assert_eq!(v["plugins"][0]["bridge"], "soakabc");
        assert_eq!(v["plugins"][0]["ipam"]["dataDir"], "/tmp/s/ipam");
        assert_eq!(
            v["plugins"][0]["ipam"]["ranges"][0][0]["subnet"],
            "172.30.7.0/24"
        );
    }

    #[test]
    fn reserved_ips_skip_host_locals_bookkeeping() {
        let d = tempfile::tempdir().expect("tmp");
        let net = CniNetwork {
            name: "soak-t".into(),
            bridge: "soak-none".into(),
            conf_dir: d.path().join("net.d"),
            ipam_dir: d.path().join("ipam"),
            cache_dir: d.path().join("cache"),
        };
        let n = d.path().join("ipam/soak-t");
        std::fs::create_dir_all(&n).expect("dir");
        std::fs::write(n.join("172.30.7.2"), "abc\r\neth0").expect("ip");
        std::fs::write(n.join("last_reserved_ip.0"), "172.30.7.2").expect("last");
        std::fs::write(n.join("lock"), "").expect("lock");
        assert_eq!(
            net.reserved_ips(),
            vec![("172.30.7.2".to_string(), "abc".to_string())]
        );
        std::fs::create_dir_all(d.path().join("cache/results")).expect("cache");
        std::fs::write(d.path().join("cache/results/soak-t-abc-eth0"), "{}").expect("c");
        std::fs::write(d.path().join("cache/results/other-abc-eth0"), "{}").expect("c");
        assert_eq!(net.cache_files().len(), 1);
    }
}
