//! The real-runtime test bed (`hack/testbed.sh up`): its endpoints and images, read from the
//! environment file it writes (`/run/cri-testbed/env`) or the process environment, and the
//! rule for tests that need it: skip with a loud message only when not root; when
//! `CRI_TESTBED_REQUIRED=1` (the test command sets it) a missing test bed is a failure.

use std::collections::HashMap;
use std::path::PathBuf;

/// The file `hack/testbed.sh up` writes.
pub const ENV_FILE: &str = "/run/cri-testbed/env";

/// What the test bed offers.
#[derive(Debug, Clone)]
pub struct Testbed {
    pub docker_endpoint: String,
    pub containerd_endpoint: String,
    pub registry: String,
    pub auth_registry: String,
    pub auth_user: String,
    pub auth_password: String,
    pub busybox_image: String,
    pub pause_image: String,
    pub dockershim_cni_conf_dir: PathBuf,
    pub dockershim_cni_cache_dir: PathBuf,
    pub cni_bin_dir: PathBuf,
    pub can_lower_oom_score_adj: bool,
    pub can_run_privileged: bool,
}

fn read_env_file() -> HashMap<String, String> {
    let Ok(text) = std::fs::read_to_string(ENV_FILE) else {
        return HashMap::new();
    };
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            (
                k.to_string(),
                v.trim_matches('"').trim_matches('\'').to_string(),
            )
        })
        .collect()
}

impl Testbed {
    /// The flags that put a dockershim (ours, or the kubelet's embedded one) on the test bed's
    /// Docker and CNI network.
    pub fn dockershim_args(&self) -> Vec<std::ffi::OsString> {
        self.dockershim_args_on(
            &self.docker_endpoint,
            &self.dockershim_cni_conf_dir,
            &self.dockershim_cni_cache_dir,
        )
    }

    /// The flags that put a dockershim on the Docker at `docker_endpoint` and the CNI network
    /// configured in `cni_conf_dir`, with the test bed's CNI plugins.
    pub fn dockershim_args_on(
        &self,
        docker_endpoint: &str,
        cni_conf_dir: &std::path::Path,
        cni_cache_dir: &std::path::Path,
    ) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec![
            "--docker-endpoint".into(),
            docker_endpoint.into(),
            "--network-plugin=cni".into(),
        ];
        for (flag, dir) in [
            ("--cni-bin-dir", self.cni_bin_dir.as_path()),
            ("--cni-conf-dir", cni_conf_dir),
            ("--cni-cache-dir", cni_cache_dir),
        ] {
            args.push(flag.into());
            args.push(dir.as_os_str().to_os_string());
        }
        args
    }

    /// The test bed, or `None` (with a loud message) when this process cannot use it. Panics
    /// when the test bed is required (`CRI_TESTBED_REQUIRED=1`) but absent.
    pub fn get(test: &str) -> Option<Testbed> {
        let required = std::env::var("CRI_TESTBED_REQUIRED").as_deref() == Ok("1");
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root {
            assert!(
                !required,
                "{test}: the test bed is required but this is not root"
            );
            eprintln!("SKIPPED {test}: needs the real-runtime test bed, which needs root");
            return None;
        }
        let file = read_env_file();
        if file.is_empty() && !required {
            eprintln!(
                "SKIPPED {test}: no test bed ({ENV_FILE} missing): run `sudo hack/testbed.sh up`"
            );
            return None;
        }
        assert!(
            !file.is_empty(),
            "{test}: the test bed is required but {ENV_FILE} is missing: run hack/testbed.sh up"
        );
        let get = |k: &str, d: &str| {
            std::env::var(k)
                .ok()
                .or_else(|| file.get(k).cloned())
                .unwrap_or_else(|| d.to_string())
        };
        Some(Testbed {
            docker_endpoint: get("DOCKER_HOST", "unix:///var/run/docker.sock"),
            containerd_endpoint: get(
                "CRI_TESTBED_CONTAINERD_ENDPOINT",
                "unix:///run/cri-testbed/containerd/containerd.sock",
            ),
            registry: get("CRI_TESTBED_REGISTRY", "127.0.0.1:5000"),
            auth_registry: get("CRI_TESTBED_AUTH_REGISTRY", "127.0.0.1:5001"),
            auth_user: get("CRI_TESTBED_AUTH_USER", "testuser"),
            auth_password: get("CRI_TESTBED_AUTH_PASSWORD", "testpassword"),
            busybox_image: get("CRI_TESTBED_BUSYBOX_IMAGE", "127.0.0.1:5000/busybox:latest"),
            pause_image: get("CRI_TESTBED_PAUSE_IMAGE", "registry.k8s.io/pause:3.9"),
            dockershim_cni_conf_dir: get(
                "CRI_TESTBED_DOCKERSHIM_CNI_CONF_DIR",
                "/etc/cri-testbed/dockershim/net.d",
            )
            .into(),
            dockershim_cni_cache_dir: get(
                "CRI_TESTBED_DOCKERSHIM_CNI_CACHE_DIR",
                "/var/lib/cri-testbed/dockershim/cni-cache",
            )
            .into(),
            cni_bin_dir: get("CRI_TESTBED_CNI_BIN_DIR", "/usr/lib/cni").into(),
            can_lower_oom_score_adj: get("CRI_TESTBED_CAN_LOWER_OOM_SCORE_ADJ", "false") == "true",
            can_run_privileged: get("CRI_TESTBED_CAN_RUN_PRIVILEGED", "false") == "true",
        })
    }
}

/// Skips the calling test (returns from it) when the test bed is not usable.
#[macro_export]
macro_rules! require_testbed {
    ($name:expr) => {
        match $crate::testbed::Testbed::get($name) {
            Some(tb) => tb,
            None => return,
        }
    };
}
