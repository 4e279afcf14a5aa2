//! End to end: webhook authentication and authorization on the kubelet's secure port (issue 16),
//! the `kubelet` BINARY in API-server mode against the API fixture over HTTPS, on the embedded
//! dockershim (the checks are the HTTP layer's, the same on every runtime). The fixture answers
//! TokenReviews from a token→user map and SubjectAccessReviews from allow rules, and keeps every
//! review it gets. With `--authentication-token-webhook --authorization-mode=Webhook`:
//! - no credentials and an unknown token get 401 `Unauthorized`;
//! - a token whose user may nothing gets 403 with upstream's text on `/pods` (`nodes/proxy`),
//!   `/stats/summary` (`nodes/stats`), `/metrics` (`nodes/metrics`), `/containerLogs/...` and
//!   `POST /exec/...` (`create` on `nodes/proxy`);
//! - a token allowed `get` on `nodes/stats` and `nodes/metrics` reads those and nothing else;
//!   one allowed everything reads `/pods` and the static pod's logs;
//! - a client certificate is authorized by SAR as its CN with its O as group: exec runs for a
//!   certificate whose group is allowed and is refused (403) for one whose is not;
//! - a token in a WebSocket exec's `base64url.bearer.authorization.k8s.io.` subprotocol is
//!   authenticated too (exec runs for the admin's token, 403 for the reader's);
//! - the reviews carry upstream's attributes (resource `nodes`, the node's name, verb,
//!   subresource, the user's groups plus `system:authenticated`), and the caches hold: asking
//!   again makes no new TokenReview or SubjectAccessReview (an unknown token, an error answer,
//!   is reviewed again, as upstream's);
//! - restarted with `--authorization-mode=AlwaysAllow`, the token without rights gets through and
//!   no SubjectAccessReview is made, while an unknown token still gets 401.

use crate::kubelet_support;

use std::sync::Arc;
use std::time::Duration;

use integration::apiserver::ApiServer;
use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use integration::streaming::{self, StdioRequest, Transport};
use kubelet_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::kubelet_secure_port::{connector, relay};

type Identity = (CertificateDer<'static>, PrivateKeyDer<'static>);

/// A client CA (written to `ca_path`) and one certificate it signed for each (CN, O).
fn client_identities(ca_path: &std::path::Path, subjects: &[(&str, &str)]) -> Vec<Identity> {
    let ca_key = rcgen::KeyPair::generate().expect("ca key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "webhook-test-ca");
    let ca = ca_params.self_signed(&ca_key).expect("ca");
    std::fs::write(ca_path, ca.pem()).expect("write ca");
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    subjects
        .iter()
        .map(|(cn, o)| {
            let key = rcgen::KeyPair::generate().expect("client key");
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
            params.distinguished_name = rcgen::DistinguishedName::new();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, *cn);
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *o);
            params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
            let cert = params.signed_by(&key, &issuer).expect("client cert");
            (
                CertificateDer::from(cert.der().to_vec()),
                PrivateKeyDer::try_from(key.serialize_der()).expect("key der"),
            )
        })
        .collect()
}

/// One request to the kubelet's TLS port with an optional bearer token: (status, body).
async fn call(port: u16, method: &str, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let name = ServerName::try_from("localhost").ok()?;
    let mut s = connector(None).connect(name, tcp).await.ok()?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    // A TLS peer may close without close_notify: keep what was read.
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut buf)).await;
    parse_http_response(&buf)
}

async fn get(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    call(port, "GET", path, token)
        .await
        .unwrap_or_else(|| panic!("GET {path}: no answer"))
}

fn forbidden(user: &str, verb: &str, sub: &str) -> (u16, String) {
    (
        403,
        format!("Forbidden (user={user}, verb={verb}, resource=nodes, subresource={sub})"),
    )
}

/// (TokenReviews, SubjectAccessReviews) the fixture got so far.
fn review_counts(server: &ApiServer) -> (usize, usize) {
    (server.token_reviews().len(), server.access_reviews().len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_webhook_auth_dockershim() {
    let kind = RuntimeKind::Dockershim;
    let tb = require_testbed!(&format!("kubelet_webhook_auth[{}]", kind.name()));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = Arc::new(ApiServer::start_tls().await.expect("fixture"));
    server.add_token("tok-reader", "reader", &["readers"]);
    server.add_token("tok-metrics", "metrics-server", &["monitoring"]);
    server.add_token("tok-admin", "admin", &[]);
    server.allow("monitoring", "get", "stats");
    server.allow("monitoring", "get", "metrics");
    server.allow("admin", "*", "*");
    server.allow("kubelet-api-admins", "*", "*");

    let mut k = Kubelet::new(kind, "klwh");
    let kubeconfig = k.dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig_token()).expect("kubeconfig");
    let ca = k.dir.path().join("client-ca.pem");
    let mut ids = client_identities(
        &ca,
        &[
            ("kube-apiserver-kubelet-client", "kubelet-api-admins"),
            ("someone", "nobodies"),
        ],
    );
    let nobody_cert = ids.pop().expect("identity");
    let admin_cert = ids.pop().expect("identity");
    let uid = format!("{}-web", k.node);
    k.write_manifest(
        "web.yaml",
        &pod_manifest(
            "web",
            &uid,
            &tb.busybox_image,
            "echo hello-from-web; exec sleep 3600",
            "",
        ),
    );
    let secure_port = free_port();
    let base = |mode: &str| -> Vec<String> {
        [
            "--kubeconfig",
            &kubeconfig.display().to_string(),
            "--port",
            &secure_port.to_string(),
            "--client-ca-file",
            &ca.display().to_string(),
            "--authentication-token-webhook",
            "--authorization-mode",
            mode,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    k.spawn(&tb, &base("Webhook"));
    let pod_name = k.pod_name("web");
    let node = k.node.clone();
    let outcome = tokio::spawn({
        let (port, log, uid, server) = (k.port, k.log.clone(), uid.clone(), server.clone());
        async move {
            wait_for("the web pod running", &log, || async {
                running_ids(&pod(port, &uid).await?)
            })
            .await;
            let p = secure_port;
            let logs = format!("/containerLogs/default/{pod_name}/main");
            let exec = format!("/exec/default/{pod_name}/main?command=true&output=1");

            // Nobody and an unknown token: 401.
            assert_eq!(get(p, "/pods", None).await, (401, "Unauthorized".into()));
            assert_eq!(
                get(p, "/pods", Some("tok-unknown")).await,
                (401, "Unauthorized".into())
            );

            // A token without rights: 403, by subresource.
            let reader = Some("tok-reader");
            assert_eq!(
                get(p, "/pods", reader).await,
                forbidden("reader", "get", "proxy")
            );
            assert_eq!(
                get(p, "/stats/summary", reader).await,
                forbidden("reader", "get", "stats")
            );
            assert_eq!(
                get(p, "/metrics", reader).await,
                forbidden("reader", "get", "metrics")
            );
            assert_eq!(
                get(p, &logs, reader).await,
                forbidden("reader", "get", "proxy")
            );
            assert_eq!(
                call(p, "POST", &exec, reader).await.expect("exec"),
                forbidden("reader", "create", "proxy")
            );
            // The reviews carried upstream's attributes and the token's user.
            let sars = server.access_reviews();
            let stats = sars
                .iter()
                .find(|s| s["resourceAttributes"]["subresource"] == "stats")
                .expect("a stats review");
            assert_eq!(stats["user"], "reader");
            assert_eq!(
                stats["groups"],
                serde_json::json!(["readers", "system:authenticated"])
            );
            assert_eq!(
                stats["resourceAttributes"],
                serde_json::json!({"verb": "get", "version": "v1", "resource": "nodes",
                                   "subresource": "stats", "name": node})
            );

            // stats and metrics only.
            let metrics = Some("tok-metrics");
            let (code, body) = get(p, "/stats/summary", metrics).await;
            assert_eq!(code, 200, "{body}");
            let summary: serde_json::Value = serde_json::from_str(&body).expect("summary json");
            assert_eq!(summary["node"]["nodeName"], node.as_str());
            let (code, body) = get(p, "/metrics/resource", metrics).await;
            assert_eq!(code, 200, "{body}");
            assert!(body.contains("node_cpu_usage_seconds_total"), "{body}");
            assert_eq!(
                get(p, "/pods", metrics).await,
                forbidden("metrics-server", "get", "proxy")
            );

            // Everything.
            let admin = Some("tok-admin");
            let (code, body) = get(p, "/pods", admin).await;
            assert_eq!(code, 200, "{body}");
            assert!(body.contains(&uid), "{body}");
            let (code, body) = get(p, &logs, admin).await;
            assert_eq!((code, body.as_str()), (200, "hello-from-web\n"));

            // The caches: the same questions again make no new review. The unknown token
            // (answered with an error) is reviewed again.
            let before = review_counts(&server);
            for _ in 0..3 {
                assert_eq!(get(p, "/pods", reader).await.0, 403);
                assert_eq!(get(p, "/stats/summary", metrics).await.0, 200);
                assert_eq!(get(p, "/pods", admin).await.0, 200);
            }
            assert_eq!(review_counts(&server), before, "answered from the caches");
            assert_eq!(get(p, "/pods", Some("tok-unknown")).await.0, 401);
            assert_eq!(
                review_counts(&server),
                (before.0 + 1, before.1),
                "an error answer is not kept"
            );

            // Client certificates: authorized by SAR as CN with O as group.
            let req = StdioRequest {
                stdout: true,
                stderr: true,
                ..Default::default()
            };
            let exec_url = |relay: u16| {
                format!(
                    "http://127.0.0.1:{relay}/exec/default/{pod_name}/main?command=sh&command=-c&command=echo%20via%20cert&output=1&error=1"
                )
            };
            let with_admin = relay(p, connector(Some(admin_cert))).await;
            let session = streaming::connect(&exec_url(with_admin), Transport::Spdy, req, None)
                .await
                .unwrap_or_else(|e| panic!("exec with the admin certificate: {e}"));
            let result = session.wait(Duration::from_secs(30)).await.expect("exec");
            assert_eq!(result.stdout_str(), "via cert\n");
            let sar = server
                .access_reviews()
                .into_iter()
                .rev()
                .find(|s| s["user"] == "kube-apiserver-kubelet-client")
                .expect("a review of the certificate's user");
            assert_eq!(
                sar["groups"],
                serde_json::json!(["kubelet-api-admins", "system:authenticated"])
            );
            assert_eq!(sar["resourceAttributes"]["verb"], "create");
            assert_eq!(sar["resourceAttributes"]["subresource"], "proxy");
            // A token in the WebSocket subprotocol (upstream's ProtocolAuthenticator): exec
            // runs for the admin's, is refused for the reader's.
            let no_cert = relay(p, connector(None)).await;
            let ws_protocols = |token: &str| {
                use base64::Engine as _;
                format!(
                    "base64url.bearer.authorization.k8s.io.{}",
                    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token)
                )
            };
            let admin_ws = ws_protocols("tok-admin");
            let protocols = ["v4.channel.k8s.io", admin_ws.as_str()];
            let session = streaming::connect(
                &exec_url(no_cert),
                Transport::WebSocket,
                req,
                Some(&protocols[..]),
            )
            .await
            .unwrap_or_else(|e| panic!("exec with a WebSocket token: {e}"));
            let result = session.wait(Duration::from_secs(30)).await.expect("exec");
            assert_eq!(result.stdout_str(), "via cert\n");
            let reader_ws = ws_protocols("tok-reader");
            let protocols = ["v4.channel.k8s.io", reader_ws.as_str()];
            let refused = streaming::connect(
                &exec_url(no_cert),
                Transport::WebSocket,
                req,
                Some(&protocols[..]),
            )
            .await;
            assert!(
                matches!(refused, Err(streaming::ClientError::Refused { status: 403, .. })),
                "exec with the reader's WebSocket token: {:?}",
                refused.err()
            );
            let with_nobody = relay(p, connector(Some(nobody_cert))).await;
            let refused =
                streaming::connect(&exec_url(with_nobody), Transport::Spdy, req, None).await;
            assert!(
                matches!(refused, Err(streaming::ClientError::Refused { status: 403, .. })),
                "exec with a certificate whose group may not: {:?}",
                refused.err()
            );
        }
    })
    .await;
    if let Err(e) = outcome {
        k.shutdown(&tb, std::slice::from_ref(&uid)).await;
        std::panic::resume_unwind(e.into_panic());
    }

    // AlwaysAllow: authentication still applies, authorization asks nobody.
    if let Some(mut c) = k.child.take() {
        stop_kubelet(&mut c).await;
    }
    k.spawn(&tb, &base("AlwaysAllow"));
    let outcome = tokio::spawn({
        let (log, uid, server) = (k.log.clone(), uid.clone(), server.clone());
        async move {
            let sars_before = server.access_reviews().len();
            let (code, body) = wait_for("the secure port after the restart", &log, || async {
                call(secure_port, "GET", "/pods", Some("tok-reader"))
                    .await
                    .filter(|(c, b)| *c != 200 || b.contains(&uid))
            })
            .await;
            assert_eq!(code, 200, "{body}");
            assert!(body.contains(&uid), "{body}");
            assert_eq!(
                get(secure_port, "/stats/summary", Some("tok-reader"))
                    .await
                    .0,
                200
            );
            assert_eq!(
                server.access_reviews().len(),
                sars_before,
                "AlwaysAllow makes no SubjectAccessReview"
            );
            assert_eq!(
                get(secure_port, "/pods", Some("tok-unknown")).await,
                (401, "Unauthorized".into())
            );
            assert_eq!(
                get(secure_port, "/pods", None).await,
                (401, "Unauthorized".into())
            );
        }
    })
    .await;
    k.shutdown(&tb, std::slice::from_ref(&uid)).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// `kubectl --kubeconfig <admin> args...` of the judge: its stdout, or a panic with stderr.
async fn kubectl(judge: &std::path::Path, args: &[&str]) -> String {
    kubelet_support::kubectl(judge, args)
        .await
        .unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"))
        .trim()
        .to_string()
}

/// A kubeconfig for the judge's API server as `system:node:<node>` (group `system:nodes`), its
/// client certificate signed with the judge's CA, as the TLS bootstrap would have it.
fn node_kubeconfig(run: &std::path::Path, node: &str) -> String {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let ca_pem = std::fs::read_to_string(run.join("pki/ca.crt")).expect("judge ca.crt");
    let ca_key = rcgen::KeyPair::from_pem(
        &std::fs::read_to_string(run.join("pki/ca.key")).expect("judge ca.key"),
    )
    .expect("ca key");
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_pem, ca_key).expect("issuer");
    let key = rcgen::KeyPair::generate().expect("node key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &issuer).expect("node cert");
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: judge\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority-data: {}\ncontexts:\n- name: judge\n  context:\n    cluster: judge\n    user: node\ncurrent-context: judge\nusers:\n- name: node\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(&ca_pem),
        b64(&cert.pem()),
        b64(&key.serialize_pem())
    )
}

/// A serving certificate for 127.0.0.1 signed by the judge's CA (the API server verifies the
/// kubelet's with `--kubelet-certificate-authority`): (cert path, key path) under `dir`.
fn serving_cert(run: &std::path::Path, dir: &std::path::Path, node: &str) -> (String, String) {
    let ca_pem = std::fs::read_to_string(run.join("pki/ca.crt")).expect("judge ca.crt");
    let ca_key = rcgen::KeyPair::from_pem(
        &std::fs::read_to_string(run.join("pki/ca.key")).expect("judge ca.key"),
    )
    .expect("ca key");
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_pem, ca_key).expect("issuer");
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(vec![node.to_string(), "127.0.0.1".to_string()])
        .expect("params");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer).expect("serving cert");
    let (c, k) = (dir.join("serving.crt"), dir.join("serving.key"));
    std::fs::write(&c, cert.pem()).expect("write cert");
    std::fs::write(&k, key.serialize_pem()).expect("write key");
    (c.display().to_string(), k.display().to_string())
}

/// One request over TLS presenting `identity`: (status, body).
async fn call_with_cert(port: u16, path: &str, identity: Identity) -> Option<(u16, String)> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let name = ServerName::try_from("localhost").ok()?;
    let mut s = connector(Some(identity)).connect(name, tcp).await.ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut buf)).await;
    parse_http_response(&buf)
}

/// Against a real Kubernetes 1.26 control plane (the judge at `$KUBE_APISERVER_JUDGE`, see
/// /opt/judges/k8s/README.md; skipped, loudly, without it): the kubelet authenticates with a
/// `system:node:<node>` certificate of the cluster's CA; a service-account token without RBAC
/// gets 403 from 10250, one whose ClusterRole grants `get` on `nodes/proxy` gets `/pods` but
/// not `/stats/summary` (`nodes/stats`); the API server's own kubelet client certificate
/// (`O=system:masters`) gets `/stats/summary`; and through the API server (which reaches the
/// kubelet with that certificate), `kubectl logs` and `kubectl exec` of a pod bound to the node
/// work. The judge's API server must be started with
/// `JUDGE_K8S_EXTRA_APISERVER_ARGS=--kubelet-preferred-address-types=InternalIP` (the test's
/// node names do not resolve); the kubelet serves a certificate of the cluster's CA for
/// 127.0.0.1, its `--node-ip`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_webhook_auth_real_apiserver() {
    let Some(judge) = judge_or_skip("kubelet_webhook_auth_real_apiserver") else {
        return;
    };
    let tb = require_testbed!("kubelet_webhook_auth_real_apiserver");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let run = judge.join("run");
    let mut k = Kubelet::new(RuntimeKind::Dockershim, "klwhj");
    let kubeconfig = k.dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, node_kubeconfig(&run, &k.node)).expect("kubeconfig");
    let sa = |n: &str| format!("wh-{n}-{}", k.node);
    let (none_sa, proxy_sa) = (sa("none"), sa("proxy"));
    let role = format!("wh-nodes-proxy-{}", k.node);
    for s in [&none_sa, &proxy_sa] {
        kubectl(&judge, &["create", "serviceaccount", s, "-n", "default"]).await;
    }
    kubectl(
        &judge,
        &[
            "create",
            "clusterrole",
            &role,
            "--verb=get",
            "--resource=nodes/proxy",
        ],
    )
    .await;
    kubectl(
        &judge,
        &[
            "create",
            "clusterrolebinding",
            &role,
            &format!("--clusterrole={role}"),
            &format!("--serviceaccount=default:{proxy_sa}"),
        ],
    )
    .await;
    let none_token = kubectl(&judge, &["create", "token", &none_sa, "-n", "default"]).await;
    let proxy_token = kubectl(&judge, &["create", "token", &proxy_sa, "-n", "default"]).await;
    let apiserver_client: Identity = {
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        (
            CertificateDer::from_pem_file(run.join("pki/apiserver-kubelet-client.crt"))
                .expect("client cert"),
            PrivateKeyDer::from_pem_file(run.join("pki/apiserver-kubelet-client.key"))
                .expect("client key"),
        )
    };
    let secure_port = free_port();
    let (tls_cert, tls_key) = serving_cert(&run, k.dir.path(), &k.node);
    let pod_name = format!("wh-logs-{}", k.node);
    k.spawn(
        &tb,
        &[
            "--node-ip".into(),
            "127.0.0.1".into(),
            "--tls-cert-file".into(),
            tls_cert,
            "--tls-private-key-file".into(),
            tls_key,
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--port".into(),
            secure_port.to_string(),
            "--client-ca-file".into(),
            run.join("pki/ca.crt").display().to_string(),
            "--authentication-token-webhook".into(),
            "--authorization-mode=Webhook".into(),
        ],
    );
    let pod_uid: Arc<parking_lot::Mutex<Option<String>>> = Arc::default();
    let outcome = tokio::spawn({
        let log = k.log.clone();
        let p = secure_port;
        let (judge, node, image, pod_uid) = (
            judge.clone(),
            k.node.clone(),
            tb.busybox_image.clone(),
            pod_uid.clone(),
        );
        async move {
            let none = wait_for("the secure port", &log, || async {
                call(p, "GET", "/pods", Some(&none_token)).await
            })
            .await;
            eprintln!("judge: token without RBAC, GET /pods: {none:?}");
            assert_eq!(
                none,
                forbidden(
                    &format!("system:serviceaccount:default:{none_sa}"),
                    "get",
                    "proxy"
                )
            );
            let (code, body) = get(p, "/pods", Some(&proxy_token)).await;
            eprintln!("judge: token with nodes/proxy get, GET /pods: {code}");
            assert_eq!(code, 200, "{body}");
            let v: serde_json::Value = serde_json::from_str(&body).expect("pod list");
            assert_eq!(v["kind"], "PodList");
            let stats = get(p, "/stats/summary", Some(&proxy_token)).await;
            eprintln!(
                "judge: token with nodes/proxy get, GET /stats/summary: {} {}",
                stats.0, stats.1
            );
            assert_eq!(
                stats,
                forbidden(
                    &format!("system:serviceaccount:default:{proxy_sa}"),
                    "get",
                    "stats"
                )
            );
            let (code, body) = call_with_cert(p, "/stats/summary", apiserver_client)
                .await
                .expect("answer");
            eprintln!(
                "judge: kube-apiserver-kubelet-client certificate, GET /stats/summary: {code}"
            );
            assert_eq!(code, 200, "{body}");
            assert_eq!(
                get(p, "/pods", Some("not-a-token")).await,
                (401, "Unauthorized".into())
            );

            // Through the API server: kubectl logs and exec of a pod bound to this node.
            let pod = serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name, "namespace": "default"},
                "spec": {"nodeName": node, "automountServiceAccountToken": false,
                         "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "main", "image": image,
                                         "imagePullPolicy": "IfNotPresent",
                                         "command": ["sh", "-c", "echo hello-judge; exec sleep 3600"]}]}
            });
            let manifest = std::env::temp_dir().join(format!("{pod_name}.json"));
            std::fs::write(&manifest, pod.to_string()).expect("pod manifest");
            kubectl(
                &judge,
                &["create", "-f", &manifest.display().to_string()],
            )
            .await;
            let _ = std::fs::remove_file(&manifest);
            let uid = kubectl(
                &judge,
                &["get", "pod", &pod_name, "-o", "jsonpath={.metadata.uid}"],
            )
            .await;
            *pod_uid.lock() = Some(uid);
            let logs = wait_for("kubectl logs through the API server", &log, || async {
                kubelet_support::kubectl(&judge, &["logs", &pod_name])
                    .await
                    .ok()
                    .filter(|l| l.contains("hello-judge"))
            })
            .await;
            eprintln!("judge: kubectl logs {pod_name}: {logs:?}");
            assert_eq!(logs, "hello-judge\n");
            let out = kubectl(
                &judge,
                &["exec", &pod_name, "--", "sh", "-c", "echo via-apiserver"],
            )
            .await;
            eprintln!("judge: kubectl exec {pod_name}: {out:?}");
            assert_eq!(out, "via-apiserver");
        }
    })
    .await;
    let uids: Vec<String> = pod_uid.lock().clone().into_iter().collect();
    k.shutdown(&tb, &uids).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}
