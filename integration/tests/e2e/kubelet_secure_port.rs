//! End to end: the `kubelet` BINARY's authenticated HTTPS server on `--port`, on both runtimes
//! (containerd's CRI and the embedded dockershim on Docker). The kubelet makes its own
//! self-signed serving certificate in `<root-dir>/pki` and trusts client certificates of a CA
//! the test makes (`--client-ca-file`). With a client certificate: `/stats/summary` reports
//! the static pod and its container's memory; an exec (SPDY and WebSocket) runs a command
//! through the kubelet's proxy to the runtime's streaming server with its output and exit
//! code; a port-forward reaches the pod's web server. Without one, every request — plain GETs
//! and exec alike — is refused with 401.

use crate::kubelet_support;

use std::sync::Arc;
use std::time::Duration;

use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use integration::streaming::{self, StdioRequest, Transport};
use kubelet_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// A client CA (written to `ca_path`) and a client certificate and key it signed.
pub(crate) fn client_identity(
    ca_path: &std::path::Path,
) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    let ca_key = rcgen::KeyPair::generate().expect("ca key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "test-client-ca");
    let ca = ca_params.self_signed(&ca_key).expect("ca");
    std::fs::write(ca_path, ca.pem()).expect("write ca");
    let key = rcgen::KeyPair::generate().expect("client key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kube-apiserver-kubelet-client");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let cert = params.signed_by(&key, &issuer).expect("client cert");
    (
        CertificateDer::from(cert.der().to_vec()),
        PrivateKeyDer::try_from(key.serialize_der()).expect("key der"),
    )
}

/// A TLS connector that accepts the kubelet's self-signed certificate (as
/// `--insecure-skip-tls-verify`), presenting `identity` when given.
pub(crate) fn connector(
    identity: Option<(CertificateDer<'static>, PrivateKeyDer<'static>)>,
) -> tokio_rustls::TlsConnector {
    let config = kubelet::probe::transport::insecure_client_config(
        identity.map(|(cert, key)| (vec![cert], key)),
    )
    .expect("client config");
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// A plain-TCP relay on loopback into the kubelet's TLS port, so the streaming clients (which
/// speak plain HTTP) can go through it.
pub(crate) async fn relay(kubelet_port: u16, tls: tokio_rustls::TlsConnector) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let tls = tls.clone();
            tokio::spawn(async move {
                let Ok(tcp) = tokio::net::TcpStream::connect(("127.0.0.1", kubelet_port)).await
                else {
                    return;
                };
                let name = ServerName::try_from("localhost").expect("name");
                let Ok(mut server) = tls.connect(name, tcp).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    port
}

/// `GET path` through a relay: (status, body), de-chunked.
pub(crate) async fn get(relay: u16, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", relay))
        .await
        .ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut buf))
        .await
        .ok()?
        .ok()?;
    crate::kubelet_support::parse_http_response(&buf)
}

async fn kubelet_secure_port(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_secure_port[{}]", kind.name()));
    let mut k = Kubelet::new(kind, "klsec");
    let uid = format!("{}-web", k.node);
    let ca = k.dir.path().join("client-ca.pem");
    let identity = client_identity(&ca);
    k.write_manifest(
        "web.yaml",
        &pod_manifest(
            "web",
            &uid,
            &tb.busybox_image,
            "mkdir -p /www; echo hello-pf > /www/index.html; exec httpd -f -p 8080 -h /www",
            "",
        ),
    );
    let secure_port = free_port();
    k.spawn(
        &tb,
        &[
            "--port".into(),
            secure_port.to_string(),
            "--client-ca-file".into(),
            ca.display().to_string(),
        ],
    );
    let pod_name = k.pod_name("web");
    let outcome = tokio::spawn({
        let (port, log, uid, root) = (k.port, k.log.clone(), uid.clone(), k.root.clone());
        async move {
            wait_for("the web pod running", &log, || async {
                running_ids(&pod(port, &uid).await?)
            })
            .await;
            assert!(root.join("pki/kubelet.crt").exists(), "self-signed serving cert");
            let with_cert = relay(secure_port, connector(Some(identity))).await;
            let anonymous = relay(secure_port, connector(None)).await;

            // Authenticated: /stats/summary lists the pod with its container's memory.
            let summary = wait_for("/stats/summary with the pod", &log, || async {
                let (code, body) = get(with_cert, "/stats/summary").await?;
                let v: serde_json::Value = serde_json::from_str(&body).ok()?;
                let pods = v["pods"].as_array()?;
                let p = pods.iter().find(|p| p["podRef"]["uid"] == uid.as_str())?;
                (code == 200 && p["containers"][0]["memory"]["workingSetBytes"].is_u64())
                    .then_some(v)
            })
            .await;
            assert!(summary["node"]["nodeName"].is_string(), "{summary}");
            let (code, body) = get(with_cert, "/pods").await.expect("/pods");
            assert_eq!(code, 200);
            assert!(body.contains(&uid));
            // The runtime's view (the PLEG's last relist) lists the running pod.
            wait_for("/runningpods with the pod", &log, || async {
                let (code, body) = get(with_cert, "/runningpods/").await?;
                (code == 200 && body.contains(&uid)).then_some(())
            })
            .await;

            // Anonymous: refused.
            let (code, _) = get(anonymous, "/stats/summary").await.expect("anonymous");
            assert_eq!(code, 401);
            let (code, _) = get(anonymous, "/pods").await.expect("anonymous pods");
            assert_eq!(code, 401);

            // exec through the kubelet, both transports.
            let exec_url = |relay: u16| {
                format!(
                    "http://127.0.0.1:{relay}/exec/default/{pod_name}/main?command=sh&command=-c&command=echo%20hi%20from%20exec%3B%20exit%203&output=1&error=1"
                )
            };
            let req = StdioRequest {
                stdout: true,
                stderr: true,
                ..Default::default()
            };
            for transport in [Transport::Spdy, Transport::WebSocket] {
                let session = streaming::connect(&exec_url(with_cert), transport, req, None)
                    .await
                    .unwrap_or_else(|e| {
                        panic!(
                            "{} exec: {e}; kubelet log tail:\n{}",
                            transport.name(),
                            log_tail(&log, 40)
                        )
                    });
                let result = session.wait(Duration::from_secs(30)).await.expect("exec result");
                assert_eq!(result.stdout_str(), "hi from exec\n", "{}", transport.name());
                assert_eq!(result.exit_code, Some(3), "{}: {result:?}", transport.name());
            }
            let refused = streaming::connect(&exec_url(anonymous), Transport::Spdy, req, None).await;
            assert!(
                matches!(refused, Err(streaming::ClientError::Refused { status: 401, .. })),
                "exec without a client certificate is refused"
            );

            // port-forward to the pod's web server.
            let pf = streaming::spdy_client::PortForwarder::connect(&format!(
                "http://127.0.0.1:{with_cert}/portForward/default/{pod_name}"
            ))
            .await
            .expect("port-forward");
            let mut conn = pf.open(8080).await.expect("open 8080");
            conn.write(&b"GET /index.html HTTP/1.0\r\n\r\n"[..])
                .await
                .expect("write");
            let got = conn.read_to_end(Duration::from_secs(20)).await.expect("read");
            let got = String::from_utf8_lossy(&got);
            assert!(got.contains("hello-pf"), "{got}");
            pf.close().await;
        }
    })
    .await;
    k.shutdown(&tb, std::slice::from_ref(&uid)).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_secure_port_containerd() {
    kubelet_secure_port(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_secure_port_dockershim() {
    kubelet_secure_port(RuntimeKind::Dockershim).await;
}
