//! TLS bootstrap and certificate rotation (`--bootstrap-kubeconfig`, `--rotate-certificates`,
//! `--rotate-server-certificates`). Against the API fixture acting as the controller-manager
//! (it approves and signs every CSR with a 60 s lifetime): a node joins with only a bootstrap
//! token, its `node-csr-<digest>` request is made by `system:bootstrap:<id>`, the kubeconfig
//! and pem files are upstream's, the node registers and runs a pod, its client certificate is
//! renewed (a `csr-` request authenticated by the current certificate) and the kubelet's
//! requests then present the new certificate; the serving certificate of the secure port
//! comes from a `kubernetes.io/kubelet-serving` CSR. Against the real Kubernetes 1.26 control
//! plane of `KUBE_APISERVER_JUDGE` (skipped, saying so, when unset): the same join with its
//! `run/bootstrap.kubeconfig`, the real controller-manager approving and signing, the real
//! scheduler placing a pod created with kubectl, and the serving CSR approved with kubectl.

use crate::kubelet_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration::apiserver::{ApiServer, TlsOptions};
use integration::fixtures::unique_name;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::PostParams;
use kubelet_support::{
    cleanup_all, client_from, delete_pod_and_wait, free_port, judge_admin, judge_or_skip, kubectl,
    kubelet_command, node_ready, stop_kubelet, wait_for,
};
use parking_lot::Mutex;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};

const BOOTSTRAP_TOKEN: &str = "abcdef.0123456789abcdef";

/// CN, organizations, serial (hex), NotBefore and NotAfter (unix seconds) of a PEM or DER
/// certificate.
struct CertInfo {
    cn: String,
    orgs: Vec<String>,
    serial: String,
    not_before: i64,
    not_after: i64,
}

fn cert_info_der(der: &[u8]) -> CertInfo {
    let (_, c) = x509_parser::parse_x509_certificate(der).expect("certificate");
    CertInfo {
        cn: c
            .subject()
            .iter_common_name()
            .filter_map(|a| a.as_str().ok())
            .next()
            .unwrap_or_default()
            .to_string(),
        orgs: c
            .subject()
            .iter_organization()
            .filter_map(|a| a.as_str().ok().map(str::to_string))
            .collect(),
        serial: c.raw_serial_as_string().replace(':', ""),
        not_before: c.validity().not_before.timestamp(),
        not_after: c.validity().not_after.timestamp(),
    }
}

fn cert_info_pem(pem: &str) -> CertInfo {
    let der = CertificateDer::from_pem_slice(pem.as_bytes()).expect("PEM certificate");
    cert_info_der(der.as_ref())
}

/// The serving certificate the kubelet presents on `port` to a client that trusts only `ca`
/// and checks the name `node`; None while the handshake fails.
async fn serving_cert(port: u16, ca_pem: &str, node: &str) -> Option<CertificateDer<'static>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.ok()?).ok()?;
    }
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let name = ServerName::try_from(node.to_string()).ok()?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .ok()?;
    tls.get_ref().1.peer_certificates()?.first().cloned()
}

fn issued_pem(csr: &CertificateSigningRequest) -> Option<String> {
    let c = csr.status.as_ref()?.certificate.as_ref()?;
    (!c.0.is_empty()).then(|| String::from_utf8_lossy(&c.0).into_owned())
}

/// The symlink target and parsed certificate of `<cert_dir>/<prefix>-current.pem`.
fn current_pem(cert_dir: &Path, prefix: &str) -> Option<(PathBuf, CertInfo)> {
    let link = cert_dir.join(format!("{prefix}-current.pem"));
    let target = std::fs::read_link(&link).ok()?;
    let text = std::fs::read_to_string(&link).ok()?;
    Some((target, cert_info_pem(&text)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_tls_bootstrap_and_rotation_against_the_fixture() {
    let kind = RuntimeKind::Containerd;
    let tb = require_testbed!("kubelet_tls_bootstrap[fixture]");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = ApiServer::start_tls_with(TlsOptions {
        bootstrap_token: Some(BOOTSTRAP_TOKEN.into()),
        csr_lifetime: Some(Duration::from_secs(60)),
    })
    .await
    .expect("fixture");
    let dir = tempfile::Builder::new()
        .prefix("kubelet-tlsboot-")
        .tempdir()
        .expect("tempdir");
    let bootstrap = dir.path().join("bootstrap-kubelet.conf");
    std::fs::write(&bootstrap, server.bootstrap_kubeconfig()).expect("bootstrap kubeconfig");
    let kubeconfig = dir.path().join("kubelet.conf");
    let cert_dir = dir.path().join("pki");
    let root = dir.path().join("root");
    let log = dir.path().join("kubelet.log");
    let node = unique_name("tlsboot");
    let secure_port = free_port();
    let mut cmd = kubelet_command(kind, &tb, &root, None, free_port(), &node, &log);
    cmd.arg("--bootstrap-kubeconfig")
        .arg(&bootstrap)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--cert-dir")
        .arg(&cert_dir)
        .arg("--rotate-certificates")
        .arg("--rotate-server-certificates")
        .arg("--port")
        .arg(secure_port.to_string())
        .arg("--node-status-update-frequency")
        .arg("1s")
        .arg("--node-lease-duration-seconds")
        .arg("4");
    let mut child = cmd.spawn().expect("spawn kubelet");
    let admin = client_from(&server.kubeconfig()).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let created_uid: Arc<Mutex<Option<String>>> = Arc::default();
    let server = Arc::new(server);

    let outcome = tokio::spawn({
        let (log, node, image, created_uid, server) = (
            log.clone(),
            node.clone(),
            tb.busybox_image.clone(),
            created_uid.clone(),
            server.clone(),
        );
        let (kubeconfig, cert_dir) = (kubeconfig.clone(), cert_dir.clone());
        async move {
            let user = format!("system:node:{node}");
            // The node registers and turns Ready with the bootstrapped certificate.
            wait_for("the node to be Ready", &log, || async {
                let n = nodes.get_opt(&node).await.ok()??;
                node_ready(&n).then_some(())
            })
            .await;
            // The kubeconfig is upstream's: its cluster, the current pem as certificate and key.
            let text = std::fs::read_to_string(&kubeconfig).expect("kubeconfig written");
            let pem = cert_dir.join("kubelet-client-current.pem");
            for want in [
                format!("client-certificate: \"{}\"", pem.display()),
                format!("client-key: \"{}\"", pem.display()),
                format!("server: \"{}\"", server.url()),
                "current-context: default-context".to_string(),
                "certificate-authority-data: ".to_string(),
            ] {
                assert!(text.contains(&want), "{want} in:\n{text}");
            }
            assert!(!cert_dir.join("kubelet-client.key.tmp").exists());
            let (target1, first) = current_pem(&cert_dir, "kubelet-client").expect("client pem");
            let file = target1
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            // kubelet-client-YYYY-MM-DD-HH-MM-SS.pem
            assert_eq!(
                file.len(),
                "kubelet-client-2006-01-02-15-04-05.pem".len(),
                "{file}"
            );
            assert!(file.starts_with("kubelet-client-20") && file.ends_with(".pem"));
            assert_eq!(
                (first.cn.as_str(), first.orgs.clone()),
                (user.as_str(), vec!["system:nodes".to_string()])
            );
            assert_eq!(first.not_after - first.not_before, 60);
            // The bootstrap CSR: named from its key, asked for by the bootstrap token.
            let list = csrs.list(&Default::default()).await.expect("csrs").items;
            let boot = list
                .iter()
                .find(|c| {
                    c.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("node-csr-"))
                })
                .expect("a node-csr- request");
            assert_eq!(
                boot.spec.username.as_deref(),
                Some("system:bootstrap:abcdef")
            );
            assert_eq!(
                boot.spec.signer_name,
                "kubernetes.io/kube-apiserver-client-kubelet"
            );
            assert_eq!(
                boot.spec.usages.clone().unwrap_or_default(),
                vec!["digital signature", "key encipherment", "client auth"]
            );
            assert_eq!(
                issued_pem(boot).map(|p| cert_info_pem(&p).serial),
                Some(first.serial.clone())
            );
            // The kubelet's requests present that certificate.
            wait_for(
                "a request with the bootstrapped certificate",
                &log,
                || async {
                    server
                        .requests()
                        .iter()
                        .any(|r| {
                            r.user == user && r.client_serial.as_deref() == Some(&first.serial)
                        })
                        .then_some(())
                },
            )
            .await;

            // The serving certificate: a kubelet-serving CSR by the node, served on --port.
            let serving = wait_for(
                "the serving certificate on the secure port",
                &log,
                || async { serving_cert(secure_port, &server.tls()?.ca_pem, &node).await },
            )
            .await;
            let serving = cert_info_der(serving.as_ref());
            assert_eq!(serving.cn, user);
            let list = csrs.list(&Default::default()).await.expect("csrs").items;
            let serving_csr = list
                .iter()
                .find(|c| {
                    c.spec.signer_name == "kubernetes.io/kubelet-serving"
                        && issued_pem(c).is_some_and(|p| cert_info_pem(&p).serial == serving.serial)
                })
                .expect("the serving CSR");
            assert_eq!(serving_csr.spec.username.as_deref(), Some(user.as_str()));
            assert!(
                serving_csr
                    .metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("csr-")),
                "{:?}",
                serving_csr.metadata.name
            );
            assert_eq!(
                serving_csr.spec.usages.clone().unwrap_or_default(),
                vec!["digital signature", "key encipherment", "server auth"]
            );
            assert!(current_pem(&cert_dir, "kubelet-server").is_some());

            // A pod bound to the node runs.
            let name = unique_name("tlspod");
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "app", "image": image,
                                         "imagePullPolicy": "IfNotPresent",
                                         "command": ["sleep", "3600"]}]}
            }))
            .expect("pod");
            let created = pods
                .create(&PostParams::default(), &pod)
                .await
                .expect("create pod");
            *created_uid.lock() = created.metadata.uid.clone();
            wait_for("the pod Running in the API", &log, || async {
                let p = pods.get_opt(&name).await.ok()??;
                (p.status?.phase.as_deref() == Some("Running")).then_some(())
            })
            .await;

            // Rotation: at 70–90 % of the 60 s lifetime a new client certificate, asked for
            // with the current one (a csr- request by the node), replaces the symlink.
            let (target2, second) =
                wait_for("the client certificate to be renewed", &log, || async {
                    let (t, c) = current_pem(&cert_dir, "kubelet-client")?;
                    (c.serial != first.serial).then_some((t, c))
                })
                .await;
            assert_ne!(target2, target1, "a new timestamped file");
            assert!(
                target1.exists(),
                "the previous file is kept, as upstream's store does"
            );
            assert_eq!(second.cn, user);
            let list = csrs.list(&Default::default()).await.expect("csrs").items;
            let renewal = list
                .iter()
                .find(|c| issued_pem(c).is_some_and(|p| cert_info_pem(&p).serial == second.serial))
                .expect("the renewal CSR");
            assert_eq!(renewal.spec.username.as_deref(), Some(user.as_str()));
            assert_eq!(
                renewal.spec.signer_name,
                "kubernetes.io/kube-apiserver-client-kubelet"
            );
            assert!(
                renewal
                    .metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("csr-"))
            );
            // The kubelet's new connections present the new certificate, and once they do the
            // old connections are gone: later requests present only the new one.
            let count = |serial: &str| {
                server
                    .requests()
                    .iter()
                    .filter(|r| r.client_serial.as_deref() == Some(serial))
                    .count()
            };
            wait_for("requests with the renewed certificate", &log, || async {
                (count(&second.serial) >= 3).then_some(())
            })
            .await;
            let mark = server.requests().len();
            wait_for("more requests", &log, || async {
                (server.requests().len() >= mark + 5).then_some(())
            })
            .await;
            let later: Vec<_> = server.requests()[mark..]
                .iter()
                .filter(|r| r.user == user)
                .map(|r| r.client_serial.clone())
                .collect();
            assert!(!later.is_empty());
            assert!(
                later.iter().all(|s| s.as_deref() != Some(&first.serial)),
                "no request presents the replaced certificate: {later:?}"
            );
            // The node stays Ready through the rotation.
            let n = nodes.get(&node).await.expect("node");
            assert!(node_ready(&n));
            delete_pod_and_wait(&pods, &name, &log).await;
        }
    })
    .await;
    stop_kubelet(&mut child).await;
    let uid = created_uid.lock().clone();
    cleanup_all(kind, &tb, &uid.into_iter().collect::<Vec<_>>()).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// Against the real control plane (`KUBE_APISERVER_JUDGE`, started by its up.sh with
/// `JUDGE_K8S_EXTRA_APISERVER_ARGS=--kubelet-preferred-address-types=InternalIP`, as the test
/// node's name does not resolve): TLS bootstrap with its bootstrap token, approval and signing
/// by the real controller-manager, Node Ready, a pod scheduled by the real scheduler running,
/// the serving CSR approved with kubectl and served, and `kubectl logs` through the API server
/// to the secure port, which verifies the CSR-issued serving certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_tls_bootstrap_against_the_judge_control_plane() {
    let Some(judge) = judge_or_skip("kubelet_tls_bootstrap_against_the_judge_control_plane") else {
        return;
    };
    let kind = RuntimeKind::Containerd;
    let tb = require_testbed!("kubelet_tls_bootstrap[judge]");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let run = judge.join("run");
    let admin = judge_admin(&judge).await;
    let ca_pem = std::fs::read_to_string(run.join("pki/ca.crt")).expect("ca");
    let dir = tempfile::Builder::new()
        .prefix("kubelet-judge-")
        .tempdir()
        .expect("tempdir");
    let kubeconfig = dir.path().join("kubelet.conf");
    let cert_dir = dir.path().join("pki");
    let root = dir.path().join("root");
    let log = dir.path().join("kubelet.log");
    let node = unique_name("judge");
    let secure_port = free_port();
    let mut cmd = kubelet_command(kind, &tb, &root, None, free_port(), &node, &log);
    cmd.args(kubelet_support::judge::join_flags(
        &judge,
        &kubeconfig,
        &cert_dir,
        secure_port,
    ));
    let started = Instant::now();
    let mut child = cmd.spawn().expect("spawn kubelet");
    let nodes: Api<Node> = Api::all(admin.clone());
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let pod_name = unique_name("judgepod");
    let pod_uid: Arc<Mutex<Option<String>>> = Arc::default();
    let outcome = tokio::spawn({
        let (log, node, image, judge, pod_name, pod_uid) = (
            log.clone(),
            node.clone(),
            tb.busybox_image.clone(),
            judge.clone(),
            pod_name.clone(),
            pod_uid.clone(),
        );
        let (cert_dir, admin) = (cert_dir.clone(), admin.clone());
        async move {
            let user = format!("system:node:{node}");
            // The bootstrap CSR, approved and issued by the controller-manager.
            let boot = wait_for("the node-csr- request issued", &log, || async {
                let list = csrs.list(&Default::default()).await.ok()?.items;
                list.into_iter().find(|c| {
                    issued_pem(c).is_some_and(|p| cert_info_pem(&p).cn == user)
                        && c.metadata.name.as_deref().is_some_and(|n| n.starts_with("node-csr-"))
                })
            })
            .await;
            let issued_after = started.elapsed();
            let client = cert_info_pem(&issued_pem(&boot).expect("issued"));
            wait_for("the node to be Ready", &log, || async {
                let n = nodes.get_opt(&node).await.ok()??;
                node_ready(&n).then_some(())
            })
            .await;
            let ready_after = started.elapsed();
            let (_, on_disk) = current_pem(&cert_dir, "kubelet-client").expect("client pem");
            assert_eq!(on_disk.serial, client.serial);
            assert_eq!(on_disk.orgs, vec!["system:nodes".to_string()]);
            // The serving CSR waits for an approver: approve it as an admin would.
            let serving_csr = wait_for("the kubelet-serving CSR", &log, || async {
                let list = csrs.list(&Default::default()).await.ok()?.items;
                list.into_iter().find(|c| {
                    c.spec.signer_name == "kubernetes.io/kubelet-serving"
                        && c.spec.username.as_deref() == Some(user.as_str())
                })
            })
            .await;
            let serving_name = serving_csr.metadata.name.clone().expect("name");
            kubectl(&judge, &["certificate", "approve", &serving_name])
                .await
                .expect("kubectl certificate approve");
            let serving = wait_for("the serving certificate on the secure port", &log, || async {
                serving_cert(secure_port, &ca_pem, &node).await
            })
            .await;
            let serving = cert_info_der(serving.as_ref());
            assert_eq!(serving.cn, user);
            // A pod for the scheduler to place (this node is the only one).
            let manifest = serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name, "namespace": "default"},
                "spec": {"terminationGracePeriodSeconds": 1,
                         "nodeSelector": {"kubernetes.io/hostname": node},
                         "containers": [{"name": "app", "image": image,
                                         "imagePullPolicy": "IfNotPresent",
                                         "command": ["sh", "-c", "echo hello-judge; sleep 3600"]}]}
            });
            let file = std::env::temp_dir().join(format!("{pod_name}.json"));
            std::fs::write(&file, manifest.to_string()).expect("manifest");
            kubectl(&judge, &["create", "-f", &file.display().to_string()])
                .await
                .expect("kubectl create");
            let _ = std::fs::remove_file(&file);
            wait_for("the pod Running", &log, || async {
                let p = pods.get_opt(&pod_name).await.ok()??;
                *pod_uid.lock() = p.metadata.uid.clone();
                let on_node = p.spec.as_ref()?.node_name.as_deref() == Some(node.as_str());
                (on_node && p.status?.phase.as_deref() == Some("Running")).then_some(())
            })
            .await;
            let pod_running_after = started.elapsed();
            // kubectl logs: API server -> the kubelet's secure port with its CSR-issued cert.
            let logs = wait_for("kubectl logs", &log, || async {
                kubectl(&judge, &["logs", &pod_name]).await.ok()
            })
            .await;
            assert_eq!(logs.trim(), "hello-judge");
            // With a short signing duration (the judge's KCM started with
            // `--cluster-signing-duration=2m`: NotBefore is backdated 5 min, so the lifetime
            // is 7 min and the deadline 0–78 s after issue) the client certificate is renewed
            // through a csr- request the controller-manager approves (selfnodeclient).
            let lifetime = client.not_after - client.not_before;
            let rotation = if lifetime <= 600 {
                let renewed = wait_for("the client certificate renewed", &log, || async {
                    let (_, c) = current_pem(&cert_dir, "kubelet-client")?;
                    (c.serial != client.serial).then_some(c)
                })
                .await;
                let list = csrs.list(&Default::default()).await.expect("csrs").items;
                let renewal = list
                    .iter()
                    .find(|c| issued_pem(c).is_some_and(|p| cert_info_pem(&p).serial == renewed.serial))
                    .expect("the renewal CSR");
                assert_eq!(renewal.spec.username.as_deref(), Some(user.as_str()));
                let name = renewal.metadata.name.clone().unwrap_or_default();
                assert!(name.starts_with("csr-"), "{name}");
                let rotated_at = std::time::SystemTime::now();
                // The node keeps reporting after the swap (its new connections authenticate
                // with the new certificate; the old one is still valid, so the real API
                // server cannot tell which is used — the fixture test checks that).
                let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
                    Api::namespaced(admin.clone(), "kube-node-lease");
                wait_for("a lease renewal after the rotation", &log, || async {
                    let l = leases.get_opt(&node).await.ok()??;
                    let renewed = l.spec?.renew_time?.0;
                    (std::time::SystemTime::from(renewed) > rotated_at).then_some(())
                })
                .await;
                format!(
                    "client certificate renewed through {name} (issued lifetime {}s, renewed serial {})",
                    renewed.not_after - renewed.not_before,
                    renewed.serial
                )
            } else {
                format!(
                    "rotation not exercised (lifetime {lifetime}s; start the judge's KCM with --cluster-signing-duration=2m)"
                )
            };
            println!(
                "JUDGE FIGURES: node {node}: client CSR {} issued after {:.1}s (lifetime {}s), Node Ready after {:.1}s; serving CSR {serving_name} (lifetime {}s, approved with kubectl); pod {pod_name} scheduled and Running after {:.1}s; kubectl logs ok; {rotation}",
                boot.metadata.name.clone().unwrap_or_default(),
                issued_after.as_secs_f64(),
                client.not_after - client.not_before,
                ready_after.as_secs_f64(),
                serving.not_after - serving.not_before,
                pod_running_after.as_secs_f64(),
            );
            delete_pod_and_wait(&pods, &pod_name, &log).await;
        }
    })
    .await;
    stop_kubelet(&mut child).await;
    let uid = pod_uid.lock().clone();
    cleanup_all(kind, &tb, &uid.into_iter().collect::<Vec<_>>()).await;
    let _ = kubectl(&judge, &["delete", "node", &node, "--wait=false"]).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}
