//! The files a CNI sandbox gives its containers. In CNI mode the pause container is created
//! with Docker's networking disabled (`NetworkDisabled`): runc gives it a network namespace of
//! its own, which CNI sets up, and Docker's network sandbox — an empty namespace made by a
//! re-executed dockerd, about half of the pause container's start — is never built. Docker then
//! writes no `resolv.conf` or `hosts` for the pod, so dockershim does, as containerd's CRI does
//! (`setupSandboxFiles`): `<root>/sandbox-files/<sandbox id>/{resolv.conf,hosts}`, bind-mounted
//! into every container of the pod unless the container mounts that path itself (the kubelet
//! mounts its own `/etc/hosts`). Sandboxes with Docker's networking (host network, no CNI, or
//! made by another shim) keep Docker's files.

use std::path::{Path, PathBuf};

use cri_proto::runtime::v1 as cri;

/// Under the root directory.
pub const SANDBOX_FILES_DIR: &str = "sandbox-files";

/// Docker's `hosts` of a container without a network of Docker's (`none`).
const HOSTS: &str = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
                     fe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\n\
                     ff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n";

/// Where the sandboxes' files live.
#[derive(Debug, Clone)]
pub struct SandboxFiles {
    dir: PathBuf,
}

impl SandboxFiles {
    /// The files under `root` (dockershim's root directory).
    pub fn new(root: &Path) -> Self {
        Self {
            dir: root.join(SANDBOX_FILES_DIR),
        }
    }

    fn of(&self, sandbox_id: &str) -> PathBuf {
        self.dir.join(sandbox_id)
    }

    /// Writes sandbox `sandbox_id`'s `resolv.conf` (`resolv`) and `hosts`.
    pub fn write(&self, sandbox_id: &str, resolv: &str) -> std::io::Result<()> {
        let dir = self.of(sandbox_id);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("resolv.conf"), resolv)?;
        std::fs::write(dir.join("hosts"), HOSTS)
    }

    /// Removes them; what is gone is fine.
    pub fn remove(&self, sandbox_id: &str) -> std::io::Result<()> {
        match std::fs::remove_dir_all(self.of(sandbox_id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Docker binds (`host:container`) of the sandbox's files for a container with `mounts`:
    /// those the container does not mount itself.
    pub fn binds(&self, sandbox_id: &str, mounts: &[cri::Mount]) -> Vec<String> {
        let dir = self.of(sandbox_id);
        ["resolv.conf", "hosts"]
            .into_iter()
            .map(|f| (dir.join(f), format!("/etc/{f}")))
            .filter(|(_, target)| {
                !mounts
                    .iter()
                    .any(|m| Path::new(&m.container_path) == Path::new(target))
            })
            .map(|(host, target)| format!("{}:{target}", host.display()))
            .collect()
    }
}

/// What Docker gives a container without a DNS configuration of its own: the host's
/// `resolv.conf` without nameservers on loopback (unreachable from the pod's namespace), and
/// Google's public servers when none is left (libnetwork's `resolvconf.FilterResolvDNS`).
pub fn resolv_conf_from_host(host: &str) -> String {
    let local = |line: &str| {
        let mut words = line.split_whitespace();
        words.next() == Some("nameserver")
            && words.next().is_some_and(|ip| {
                ip.parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
            })
    };
    let mut out: String = host
        .lines()
        .filter(|l| !local(l))
        .map(|l| format!("{l}\n"))
        .collect();
    if !out
        .lines()
        .any(|l| l.split_whitespace().next() == Some("nameserver"))
    {
        out.push_str("nameserver 8.8.8.8\nnameserver 8.8.4.4\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_written_bound_and_removed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let files = SandboxFiles::new(tmp.path());
        files.write("abc", "nameserver 10.0.0.10\n").expect("write");
        let dir = tmp.path().join("sandbox-files/abc");
        assert_eq!(
            std::fs::read_to_string(dir.join("resolv.conf")).expect("resolv"),
            "nameserver 10.0.0.10\n"
        );
        assert!(
            std::fs::read_to_string(dir.join("hosts"))
                .expect("hosts")
                .starts_with("127.0.0.1\tlocalhost\n")
        );
        assert_eq!(
            files.binds("abc", &[]),
            [
                format!("{}:/etc/resolv.conf", dir.join("resolv.conf").display()),
                format!("{}:/etc/hosts", dir.join("hosts").display()),
            ]
        );
        // The kubelet's own /etc/hosts wins.
        let kubelet_hosts = cri::Mount {
            container_path: "/etc/hosts".into(),
            host_path: "/var/lib/kubelet/pods/u/etc-hosts".into(),
            ..Default::default()
        };
        assert_eq!(
            files.binds("abc", &[kubelet_hosts]),
            [format!(
                "{}:/etc/resolv.conf",
                dir.join("resolv.conf").display()
            )]
        );
        files.remove("abc").expect("remove");
        assert!(!dir.exists());
        files.remove("abc").expect("removing what is gone is fine");
    }

    #[test]
    fn the_hosts_resolv_conf_loses_its_loopback_nameservers() {
        let host = "# generated\nnameserver 127.0.0.53\nnameserver 10.1.1.1\nsearch example.com\noptions edns0\n";
        assert_eq!(
            resolv_conf_from_host(host),
            "# generated\nnameserver 10.1.1.1\nsearch example.com\noptions edns0\n"
        );
        assert_eq!(
            resolv_conf_from_host("nameserver 127.0.0.53\nnameserver ::1\nsearch lan\n"),
            "search lan\nnameserver 8.8.8.8\nnameserver 8.8.4.4\n"
        );
    }
}
