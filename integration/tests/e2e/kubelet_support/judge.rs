//! A test kubelet joined to the real Kubernetes 1.26 control plane of `KUBE_APISERVER_JUDGE`
//! (see kubelet_tls_bootstrap.rs): TLS bootstrap with its `run/bootstrap.kubeconfig`, the
//! serving certificate's CSR approved with the judge's kubectl, the secure port on 127.0.0.1
//! (the Node's InternalIP; start the judge with
//! `JUDGE_K8S_EXTRA_APISERVER_ARGS=--kubelet-preferred-address-types=InternalIP`), so that
//! `kubectl logs`, `exec`, `attach` and `port-forward` reach it through the API server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use integration::runtimes::RuntimeKind;
use integration::testbed::Testbed;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client, Config};
use tokio::process::Child;

use super::{Kubelet, free_port, node_ready, wait_for};

/// The judge's directory from `KUBE_APISERVER_JUDGE`, or None after printing a loud
/// `SKIPPED <test>` line.
pub fn judge_or_skip(test: &str) -> Option<PathBuf> {
    let judge = std::env::var_os("KUBE_APISERVER_JUDGE").map(PathBuf::from);
    if judge.is_none() {
        eprintln!(
            "SKIPPED {test}: KUBE_APISERVER_JUDGE is not set (a Kubernetes 1.26 control plane, e.g. /opt/judges/k8s after its up.sh)"
        );
    }
    judge
}

/// `kubectl --kubeconfig <judge>/run/admin.kubeconfig args…`: stdout, or the failure.
pub async fn kubectl(judge: &Path, args: &[&str]) -> Result<String, String> {
    let out = tokio::process::Command::new(judge.join("bin/kubectl"))
        .arg("--kubeconfig")
        .arg(judge.join("run/admin.kubeconfig"))
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        ))
    }
}

/// `kubectl args…` as a child process with piped stdin and stdout (port-forward, attach);
/// killed when dropped.
pub fn kubectl_child(judge: &Path, args: &[&str]) -> Child {
    tokio::process::Command::new(judge.join("bin/kubectl"))
        .arg("--kubeconfig")
        .arg(judge.join("run/admin.kubeconfig"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn kubectl")
}

/// A kube client from kubeconfig text.
pub async fn client_from(text: &str) -> Client {
    let kc = kube::config::Kubeconfig::from_yaml(text).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("client config");
    Client::try_from(config).expect("client")
}

/// A kube client with the judge's admin kubeconfig.
pub async fn admin_client(judge: &Path) -> Client {
    let text =
        std::fs::read_to_string(judge.join("run/admin.kubeconfig")).expect("admin kubeconfig");
    client_from(&text).await
}

/// The flags that join a kubelet to the judge as `kubeadm join` would: its bootstrap token
/// (`run/bootstrap.kubeconfig`), `kubeconfig` written by the TLS bootstrap, certificates in
/// `cert_dir` with both rotations, the judge's CA for clients, and the secure port on
/// 127.0.0.1, which is the Node's InternalIP (and the serving certificate's IP SAN).
pub fn join_flags(
    judge: &Path,
    kubeconfig: &Path,
    cert_dir: &Path,
    secure_port: u16,
) -> Vec<String> {
    let run = judge.join("run");
    let path = |p: &Path| p.display().to_string();
    vec![
        "--bootstrap-kubeconfig".into(),
        path(&run.join("bootstrap.kubeconfig")),
        "--kubeconfig".into(),
        path(kubeconfig),
        "--cert-dir".into(),
        path(cert_dir),
        "--rotate-certificates".into(),
        "--rotate-server-certificates".into(),
        "--client-ca-file".into(),
        path(&run.join("pki/ca.crt")),
        "--node-ip".into(),
        "127.0.0.1".into(),
        "--port".into(),
        secure_port.to_string(),
    ]
}

/// One kubelet joined to the judge: the test kubelet (directories, read-only port, node name,
/// process) with its certificate directory and secure port.
pub struct JudgeNode {
    pub kubelet: Kubelet,
    pub judge: PathBuf,
    pub cert_dir: PathBuf,
    pub secure_port: u16,
}

impl JudgeNode {
    /// Starts a kubelet on `kind` that joins the judge with its bootstrap token (static pods
    /// from its manifest directory, checked every 2 s, plus `extra` flags), and returns once the
    /// Node is Ready and its serving CSR is approved and served. Panics (with the kubelet's log
    /// tail) on a timeout; call [`Self::shutdown`] whatever happens after this returns.
    pub async fn join(
        kind: RuntimeKind,
        tb: &Testbed,
        judge: &Path,
        prefix: &str,
        extra: &[&str],
    ) -> Self {
        let mut kubelet = Kubelet::new(kind, prefix);
        let cert_dir = kubelet.dir.path().join("pki");
        let secure_port = free_port();
        let mut flags = join_flags(
            judge,
            &kubelet.dir.path().join("kubelet.conf"),
            &cert_dir,
            secure_port,
        );
        flags.extend(extra.iter().map(|s| s.to_string()));
        kubelet.spawn(tb, &flags);
        let mut me = Self {
            kubelet,
            judge: judge.to_path_buf(),
            cert_dir,
            secure_port,
        };
        let joined = tokio::spawn({
            let (judge, node, log, cert_dir) = (
                me.judge.clone(),
                me.kubelet.node.clone(),
                me.kubelet.log.clone(),
                me.cert_dir.clone(),
            );
            async move {
                let admin = admin_client(&judge).await;
                let nodes: Api<Node> = Api::all(admin.clone());
                let csrs: Api<CertificateSigningRequest> = Api::all(admin);
                let user = format!("system:node:{node}");
                wait_for("the node to be Ready", &log, || async {
                    let n = nodes.get_opt(&node).await.ok()??;
                    node_ready(&n).then_some(())
                })
                .await;
                let csr = wait_for("the kubelet-serving CSR", &log, || async {
                    let list = csrs.list(&Default::default()).await.ok()?.items;
                    list.into_iter().find(|c| {
                        c.spec.signer_name == "kubernetes.io/kubelet-serving"
                            && c.spec.username.as_deref() == Some(user.as_str())
                    })
                })
                .await;
                let name = csr.metadata.name.clone().unwrap_or_default();
                kubectl(&judge, &["certificate", "approve", &name])
                    .await
                    .expect("kubectl certificate approve");
                wait_for("the serving certificate written", &log, || async {
                    cert_dir
                        .join("kubelet-server-current.pem")
                        .exists()
                        .then_some(())
                })
                .await;
            }
        })
        .await;
        if let Err(e) = joined {
            me.shutdown(tb, &[]).await;
            std::panic::resume_unwind(e.into_panic());
        }
        me
    }

    /// Stops the kubelet and cleans its runtime up ([`Kubelet::shutdown`]), then deletes the
    /// Node object.
    pub async fn shutdown(&mut self, tb: &Testbed, uids: &[String]) {
        self.kubelet.shutdown(tb, uids).await;
        let _ = kubectl(
            &self.judge,
            &["delete", "node", &self.kubelet.node, "--wait=false"],
        )
        .await;
    }
}

/// Reads `child`'s stdout until `want` shows up (or the stream ends, or `limit` passes):
/// everything read so far.
pub async fn read_until(
    out: &mut (impl tokio::io::AsyncRead + Unpin),
    want: &str,
    limit: Duration,
) -> String {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(limit, async {
        let mut chunk = [0u8; 4096];
        loop {
            match out.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            if String::from_utf8_lossy(&buf).contains(want) {
                break;
            }
        }
    })
    .await;
    String::from_utf8_lossy(&buf).into_owned()
}
