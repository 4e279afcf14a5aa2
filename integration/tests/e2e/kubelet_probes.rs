//! End to end: every probe kind of the `kubelet` BINARY on both runtimes (containerd's CRI and
//! the embedded dockershim on Docker), checked through `/pods`:
//! - an httpGet readiness probe against busybox `httpd` on the pod IP toggles Ready both ways
//!   as the served file disappears and comes back;
//! - a tcpSocket liveness probe restarts the container once its listener is killed, the restart
//!   visible in `restartCount` and `lastState`;
//! - a startup probe holds back a liveness probe that would otherwise fail at once: the
//!   container starts without a restart;
//! - a grpc readiness probe of a host-network pod against a `grpc.health.v1` server run by the
//!   test follows SERVING / NOT_SERVING both ways.

use crate::kubelet_support;

use integration::require_testbed;
use integration::runtimes::RuntimeKind;
use kubelet_support::*;

/// Runs `script` with `sh -c` in the pod's container (it must succeed).
async fn exec(endpoint: &str, uid: &str, script: &str) {
    let (code, _, err) = exec_in_pod(endpoint, uid, &["sh", "-c", script])
        .await
        .expect("ExecSync");
    assert_eq!(code, 0, "{script}: {err}");
}

fn ready(p: &serde_json::Value) -> Option<bool> {
    let c = p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?;
    let pod_ready = c["status"] == "True";
    let container_ready = p["status"]["containerStatuses"][0]["ready"].as_bool()?;
    (pod_ready == container_ready).then_some(pod_ready)
}

async fn wait_ready(port: u16, log: &std::path::Path, uid: &str, want: bool, what: &str) {
    wait_for(what, log, || async {
        let p = pod(port, uid).await?;
        (ready(&p)? == want).then_some(())
    })
    .await;
}

async fn kubelet_probes(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_probes[{}]", kind.name()));
    // The gRPC health server the host-network pod's probe reaches on the node's address.
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("probe-test", tonic_health::ServingStatus::NotServing)
        .await;
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0")
        .await
        .expect("bind");
    let grpc_port = listener.local_addr().expect("addr").port();
    let grpc_server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(health)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );

    let mut k = Kubelet::new(kind, "klprobe");
    let uid = |n: &str| format!("{}-{n}", k.node);
    let (web, slow, grpc) = (uid("web"), uid("slow"), uid("grpc"));
    let uids = [web.clone(), slow.clone(), grpc.clone()];
    let image = &tb.busybox_image;
    k.write_manifest(
        "web.yaml",
        &(pod_manifest(
            "web",
            &web,
            image,
            "mkdir -p /www; echo ok > /www/ready; httpd -p 8080 -h /www; \
             httpd -f -p 8081 -h /www & echo $! > /tmp/tcp.pid; exec sleep 3600",
            "",
        ) + "    readinessProbe:
      httpGet:
        path: /ready
        port: 8080
        httpHeaders:
        - name: X-Probe
          value: readiness
      periodSeconds: 1
      failureThreshold: 1
    livenessProbe:
      tcpSocket:
        port: 8081
      periodSeconds: 1
      failureThreshold: 2
"),
    );
    k.write_manifest(
        "slow.yaml",
        &(pod_manifest(
            "slow",
            &slow,
            image,
            "sleep 5; touch /tmp/started; exec sleep 3600",
            "",
        ) + "    startupProbe:
      exec:
        command: [cat, /tmp/started]
      periodSeconds: 1
      failureThreshold: 30
    livenessProbe:
      exec:
        command: [cat, /tmp/started]
      periodSeconds: 1
      failureThreshold: 1
"),
    );
    k.write_manifest(
        "grpc.yaml",
        &(pod_manifest(
            "grpc",
            &grpc,
            image,
            "exec sleep 3600",
            "  hostNetwork: true\n",
        ) + &format!(
            "    readinessProbe:
      grpc:
        port: {grpc_port}
        service: probe-test
      periodSeconds: 1
      failureThreshold: 1
"
        )),
    );
    k.spawn(&tb, &[]);
    let endpoint = k.endpoint(&tb);
    let outcome = tokio::spawn({
        let (port, log, endpoint) = (k.port, k.log.clone(), endpoint.clone());
        let (web, slow, grpc) = (web.clone(), slow.clone(), grpc.clone());
        let reporter = reporter.clone();
        async move {
            // httpGet readiness, both ways.
            wait_ready(port, &log, &web, true, "web Ready (httpGet)").await;
            exec(&endpoint, &web, "rm /www/ready").await;
            wait_ready(port, &log, &web, false, "web not Ready once /ready is gone").await;
            exec(&endpoint, &web, "echo ok > /www/ready").await;
            wait_ready(port, &log, &web, true, "web Ready again").await;

            // tcpSocket liveness: killing the listener restarts the container.
            exec(&endpoint, &web, "kill $(cat /tmp/tcp.pid)").await;
            let p = wait_for("the tcpSocket liveness restart", &log, || async {
                let p = pod(port, &web).await?;
                let c = &p["status"]["containerStatuses"][0];
                (c["restartCount"].as_i64()? >= 1 && c["lastState"]["terminated"].is_object())
                    .then_some(p)
            })
            .await;
            let reason = p["status"]["containerStatuses"][0]["lastState"]["terminated"]["reason"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            assert!(!reason.is_empty(), "lastState has a reason: {p}");

            // The startup probe holds back liveness: started, never restarted.
            let p = wait_for("slow started", &log, || async {
                let p = pod(port, &slow).await?;
                (p["status"]["containerStatuses"][0]["started"] == true).then_some(p)
            })
            .await;
            assert_eq!(
                p["status"]["containerStatuses"][0]["restartCount"], 0,
                "liveness must wait for the startup probe: {p}"
            );

            // grpc readiness of a host-network pod, both ways.
            wait_ready(port, &log, &grpc, false, "grpc not Ready (NOT_SERVING)").await;
            reporter
                .set_service_status("probe-test", tonic_health::ServingStatus::Serving)
                .await;
            wait_ready(port, &log, &grpc, true, "grpc Ready (SERVING)").await;
            reporter
                .set_service_status("probe-test", tonic_health::ServingStatus::NotServing)
                .await;
            wait_ready(port, &log, &grpc, false, "grpc not Ready again").await;
            let p = pod(port, &slow).await.expect("slow pod");
            assert_eq!(
                p["status"]["containerStatuses"][0]["restartCount"], 0,
                "slow stays unrestarted: {p}"
            );
        }
    })
    .await;
    k.shutdown(&tb, &uids).await;
    grpc_server.abort();
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_probes_containerd() {
    kubelet_probes(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_probes_dockershim() {
    kubelet_probes(RuntimeKind::Dockershim).await;
}
