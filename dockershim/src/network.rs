//! Pod networking in CNI mode (upstream `network/cni`): [`CniNetwork`] picks the default network
//! (the first valid config in `--cni-conf-dir`, re-read on every use so a config that appears
//! later makes the node ready), sets a pod's loopback and default network up in the sandbox's
//! network namespace (ADD of both at once, with the portmap capability), tears both down (DEL of
//! both at once, also after the namespace is gone, from the cached results), and reads pod IPs
//! back from the result cache.

use cri_proto::runtime::v1 as cri;

use crate::checkpoint::PortMapping as CheckpointPortMapping;
use crate::cni::{
    CniError, CniPortMapping, CniRunner, NetworkConfigList, PodNetworkArgs, load_default_network,
};
use crate::config::CniSettings;

/// What a pod's network setup needs to know.
#[derive(Debug, Clone, Default)]
pub struct PodNetwork {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub sandbox_id: String,
    /// `/proc/<pid>/ns/net` of the pause container; empty when it is gone.
    pub netns: String,
    pub port_mappings: Vec<CniPortMapping>,
}

/// A CRI port mapping in CNI's capability format.
pub fn port_mapping(pm: &cri::PortMapping) -> CniPortMapping {
    CniPortMapping {
        host_port: pm.host_port,
        container_port: pm.container_port,
        protocol: match cri::Protocol::try_from(pm.protocol) {
            Ok(cri::Protocol::Udp) => "udp",
            Ok(cri::Protocol::Sctp) => "sctp",
            _ => "tcp",
        }
        .to_string(),
        host_ip: pm.host_ip.clone(),
    }
}

/// A checkpointed port mapping in CNI's capability format.
pub fn checkpoint_port_mapping(pm: &CheckpointPortMapping) -> CniPortMapping {
    CniPortMapping {
        host_port: pm.host_port.unwrap_or(0),
        container_port: pm.container_port.unwrap_or(0),
        protocol: pm
            .protocol
            .clone()
            .unwrap_or_else(|| "tcp".to_string())
            .to_lowercase(),
        host_ip: pm.host_ip.clone(),
    }
}

/// The CNI network of a dockershim in CNI mode.
pub struct CniNetwork {
    settings: CniSettings,
    runner: CniRunner,
}

impl CniNetwork {
    pub fn new(settings: CniSettings) -> Self {
        let runner = CniRunner::new(settings.bin_dirs.clone(), settings.cache_dir.clone());
        Self { settings, runner }
    }

    fn default_network(&self) -> Result<NetworkConfigList, CniError> {
        load_default_network(&self.settings.conf_dir, &self.settings.bin_dirs)
    }

    /// The default network's name, if one is configured.
    pub fn current_name(&self) -> Option<String> {
        self.default_network().ok().map(|n| n.name)
    }

    /// Ready, or why not (upstream: "cni config uninitialized").
    pub fn status(&self) -> Result<(), String> {
        self.default_network()
            .map(|_| ())
            .map_err(|e| format!("cni config uninitialized: {e}"))
    }

    fn args(&self, pod: &PodNetwork) -> PodNetworkArgs {
        PodNetworkArgs {
            pod_namespace: pod.namespace.clone(),
            pod_name: pod.name.clone(),
            sandbox_id: pod.sandbox_id.clone(),
            pod_uid: (!pod.uid.is_empty()).then(|| pod.uid.clone()),
            netns: (!pod.netns.is_empty()).then(|| pod.netns.clone()),
            ..Default::default()
        }
        .with_port_mappings(&pod.port_mappings)
    }

    /// The pod's default network with its arguments, and the loopback network with the same
    /// arguments for `lo`: what setup and teardown run side by side.
    fn networks(
        &self,
        pod: &PodNetwork,
    ) -> Result<[(NetworkConfigList, PodNetworkArgs); 2], CniError> {
        let args = self.args(pod);
        let lo_args = PodNetworkArgs {
            ifname: "lo".to_string(),
            ..args.clone()
        };
        Ok([
            (self.default_network()?, args),
            (NetworkConfigList::loopback(), lo_args),
        ])
    }

    /// ADD of the loopback and the default network, side by side: they configure different
    /// interfaces of the namespace, and containerd's go-cni attaches its networks (loopback
    /// among them) concurrently too. The pod's IPs come from the default network's result.
    pub async fn setup(&self, pod: &PodNetwork) -> Result<Vec<String>, CniError> {
        let [(net, args), (loopback, lo_args)] = self.networks(pod)?;
        let (lo, res) = tokio::join!(
            self.runner.add(&loopback, &lo_args),
            self.runner.add(&net, &args)
        );
        lo?;
        Ok(res?
            .ips("eth0")
            .into_iter()
            .map(|ip| ip.to_string())
            .collect())
    }

    /// DEL of the loopback and the default network, side by side (tolerates a missing
    /// namespace). As upstream's `TearDownPod`, the loopback's DEL failing is logged, not
    /// fatal; the default network's is the answer. Both DELs remove their network's cached
    /// result, so no `cni-loopback-<sandbox>-lo` file is left behind per pod.
    pub async fn teardown(&self, pod: &PodNetwork) -> Result<(), CniError> {
        let [(net, args), (loopback, lo_args)] = self.networks(pod)?;
        let (lo, res) = tokio::join!(
            self.runner.del(&loopback, &lo_args),
            self.runner.del(&net, &args)
        );
        if let Err(e) = lo {
            tracing::warn!(sandbox = %pod.sandbox_id, error = %e, "CNI failed to delete the loopback network");
        }
        res
    }

    /// Pod IPs from the cached ADD result (IPv4 first).
    pub fn pod_ips(&self, sandbox_id: &str) -> Vec<String> {
        let Ok(net) = self.default_network() else {
            return Vec::new();
        };
        let args = PodNetworkArgs {
            sandbox_id: sandbox_id.to_string(),
            ..Default::default()
        };
        match self.runner.cached_result(&net, &args) {
            Some(raw) => crate::cni::CniResult {
                cni_version: net.cni_version.clone(),
                raw,
            }
            .ips("eth0")
            .into_iter()
            .map(|ip| ip.to_string())
            .collect(),
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    use super::*;

    /// The answer of every test plugin to ADD.
    const ADD_RESULT: &str = r#"{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/ns"}],"ips":[{"address":"10.1.2.3/24","interface":0}]}"#;

    /// A network of a temporary directory: plugins `loopback` and `plug` (the default network
    /// `testnet`), each a shell script whose body `plugin(name, rec)` gives (`rec` is a directory
    /// for the scripts' records); the cache under `cache`.
    struct Fixture {
        _tmp: tempfile::TempDir,
        net: CniNetwork,
        rec: PathBuf,
        cache: PathBuf,
    }

    impl Fixture {
        fn new(plugin: impl Fn(&str, &Path) -> String) -> Self {
            let tmp = tempfile::tempdir().expect("tempdir");
            let (bin, rec, conf, cache) = (
                tmp.path().join("bin"),
                tmp.path().join("rec"),
                tmp.path().join("conf"),
                tmp.path().join("cache"),
            );
            for d in [&bin, &rec, &conf] {
                std::fs::create_dir_all(d).expect("mkdir");
            }
            for name in ["loopback", "plug"] {
                let script = format!(
                    "#!/bin/sh\ncat > /dev/null\n{}printf '%s' '{ADD_RESULT}'\n",
                    plugin(name, &rec)
                );
                let path = bin.join(name);
                std::fs::write(&path, script).expect("write plugin");
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                    .expect("chmod");
            }
            std::fs::write(
                conf.join("10-test.conflist"),
                r#"{"cniVersion":"1.0.0","name":"testnet","plugins":[{"type":"plug"}]}"#,
            )
            .expect("conf");
            let net = CniNetwork::new(CniSettings {
                bin_dirs: vec![bin],
                conf_dir: conf,
                cache_dir: cache.clone(),
            });
            Self {
                _tmp: tmp,
                net,
                rec,
                cache,
            }
        }

        fn record(&self, name: &str) -> String {
            std::fs::read_to_string(self.rec.join(name)).unwrap_or_default()
        }

        /// The cached results' file names, sorted.
        fn cached(&self) -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(self.cache.join("results"))
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            names
        }
    }

    fn pod(sandbox_id: &str) -> PodNetwork {
        PodNetwork {
            name: "web".into(),
            namespace: "default".into(),
            uid: "uid-1".into(),
            sandbox_id: sandbox_id.into(),
            netns: "/proc/1/ns/net".into(),
            port_mappings: Vec::new(),
        }
    }

    #[tokio::test]
    async fn loopback_and_the_default_network_are_added_side_by_side() {
        // Each plugin notes when it starts and ends (0.3 s later).
        let fx = Fixture::new(|name, rec| {
            let order = rec.join("order");
            let order = order.display();
            format!(
                "echo \"start {name}\" >> \"{order}\"\nsleep 0.3\necho \"end {name}\" >> \"{order}\"\n"
            )
        });
        let ips = fx.net.setup(&pod("abc")).await.expect("setup");
        assert_eq!(ips, ["10.1.2.3"]);
        let order = fx.record("order");
        let lines: Vec<&str> = order.lines().collect();
        assert_eq!(lines.len(), 4, "{order}");
        assert!(
            lines[..2].iter().all(|l| l.starts_with("start "))
                && lines[2..].iter().all(|l| l.starts_with("end ")),
            "both started before either ended: {order}"
        );
    }

    #[tokio::test]
    async fn teardown_deletes_the_loopback_too_and_leaves_no_cached_result() {
        // Each plugin notes each command it runs (`<name> <CNI_COMMAND>`) and fails a DEL
        // when `<rec>/fail-del-<name>` exists.
        let fx = Fixture::new(|name, rec| {
            let rec = rec.display();
            format!(
                "echo \"{name} $CNI_COMMAND\" >> \"{rec}/calls\"\n\
                 if [ \"$CNI_COMMAND\" = DEL ] && [ -e \"{rec}/fail-del-{name}\" ]; then\n\
                 printf '%s' '{{\"code\":11,\"msg\":\"refused\"}}'; exit 1\nfi\n"
            )
        });

        fx.net.setup(&pod("abc")).await.expect("setup");
        assert_eq!(fx.cached(), ["cni-loopback-abc-lo", "testnet-abc-eth0"]);
        fx.net.teardown(&pod("abc")).await.expect("teardown");
        let c = fx.record("calls");
        assert!(
            c.contains("loopback DEL") && c.contains("plug DEL"),
            "both networks are deleted: {c}"
        );
        assert!(fx.cached().is_empty(), "left behind: {:?}", fx.cached());

        // A loopback that refuses its DEL is logged, not fatal (upstream's TearDownPod); the
        // default network is still deleted.
        fx.net.setup(&pod("def")).await.expect("setup");
        std::fs::write(fx.rec.join("fail-del-loopback"), "").expect("marker");
        fx.net
            .teardown(&pod("def"))
            .await
            .expect("a failed loopback DEL is not fatal");
        assert_eq!(fx.cached(), ["cni-loopback-def-lo"]);
        // The default network's DEL failing is the answer.
        std::fs::remove_file(fx.rec.join("fail-del-loopback")).expect("marker");
        fx.net.setup(&pod("ghi")).await.expect("setup");
        std::fs::write(fx.rec.join("fail-del-plug"), "").expect("marker");
        assert!(fx.net.teardown(&pod("ghi")).await.is_err());
    }
}
