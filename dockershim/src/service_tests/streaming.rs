//! Exec, Attach and PortForward (`streaming_rpc`) on the fake Engine, with a recording
//! streaming server behind the shim's `StreamingServer` trait: request checks, the container
//! resolved to its full running id, and the URL the server answers.

use std::sync::Arc;

use cri_proto::RuntimeService;
use cri_proto::runtime::v1 as cri;
use parking_lot::Mutex;
use tonic::{Code, Request};

use super::{Fixture, code_of};
use crate::errors::Result;
use crate::shim::StreamingServer;

/// Answers `fake://<kind>/<id>` and remembers what it was asked.
#[derive(Default)]
struct RecordingServer {
    asked: Mutex<Vec<String>>,
}

impl RecordingServer {
    fn url(&self, kind: &str, id: &str) -> String {
        self.asked.lock().push(format!("{kind} {id}"));
        format!("fake://{kind}/{id}")
    }
}

impl StreamingServer for RecordingServer {
    fn get_exec(&self, req: cri::ExecRequest) -> Result<cri::ExecResponse> {
        Ok(cri::ExecResponse {
            url: self.url("exec", &req.container_id),
        })
    }

    fn get_attach(&self, req: cri::AttachRequest) -> Result<cri::AttachResponse> {
        Ok(cri::AttachResponse {
            url: self.url("attach", &req.container_id),
        })
    }

    fn get_port_forward(&self, req: cri::PortForwardRequest) -> Result<cri::PortForwardResponse> {
        Ok(cri::PortForwardResponse {
            url: self.url("portforward", &req.pod_sandbox_id),
        })
    }
}

fn exec_req(id: &str, cmd: &[&str], stdout: bool, stderr: bool, tty: bool) -> cri::ExecRequest {
    cri::ExecRequest {
        container_id: id.to_string(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        stdout,
        stderr,
        tty,
        ..Default::default()
    }
}

#[tokio::test]
async fn without_a_streaming_server_streaming_rpcs_are_unimplemented() {
    let fx = Fixture::new().await;
    let (_, id) = fx.pod_with_container("p", "c").await;
    let r = fx
        .svc
        .exec(Request::new(exec_req(&id, &["sh"], true, false, false)))
        .await;
    assert_eq!(code_of(r), Code::Unimplemented);
}

#[tokio::test]
async fn exec_attach_and_port_forward_check_the_request_and_ask_the_server_for_a_url() {
    let fx = Fixture::new().await;
    let server = Arc::new(RecordingServer::default());
    let dyn_server: Arc<dyn StreamingServer> = server.clone();
    assert!(fx.shim.streaming.set(dyn_server).is_ok());
    let (sandbox, id) = fx.pod_with_container("p", "c").await;

    let url = fx
        .svc
        .exec(Request::new(exec_req(
            &id[..12],
            &["sh"],
            true,
            true,
            false,
        )))
        .await
        .expect("Exec")
        .into_inner()
        .url;
    assert_eq!(url, format!("fake://exec/{id}"), "the full id");
    let attach = fx
        .svc
        .attach(Request::new(cri::AttachRequest {
            container_id: id.clone(),
            stdin: true,
            tty: true,
            ..Default::default()
        }))
        .await
        .expect("Attach")
        .into_inner()
        .url;
    assert_eq!(attach, format!("fake://attach/{id}"));
    let pf = fx
        .svc
        .port_forward(Request::new(cri::PortForwardRequest {
            pod_sandbox_id: sandbox[..12].to_string(),
            port: vec![80, 8080],
        }))
        .await
        .expect("PortForward")
        .into_inner()
        .url;
    assert_eq!(pf, format!("fake://portforward/{sandbox}"));

    let exec = |req| fx.svc.exec(Request::new(req));
    assert_eq!(
        code_of(exec(exec_req(&id, &[], true, false, false)).await),
        Code::InvalidArgument,
        "no command"
    );
    assert_eq!(
        code_of(exec(exec_req(&id, &["sh"], true, true, true)).await),
        Code::InvalidArgument,
        "tty with stderr"
    );
    assert_eq!(
        code_of(exec(exec_req(&id, &["sh"], false, false, false)).await),
        Code::InvalidArgument,
        "no stream at all"
    );
    assert_eq!(
        code_of(exec(exec_req("0123456789ab", &["sh"], true, false, false)).await),
        Code::NotFound
    );
    let bad_port = fx
        .svc
        .port_forward(Request::new(cri::PortForwardRequest {
            pod_sandbox_id: sandbox.clone(),
            port: vec![0],
        }))
        .await;
    assert_eq!(code_of(bad_port), Code::InvalidArgument);

    fx.docker.exit(&id, 0, false);
    fx.engine_changed();
    let stopped = exec(exec_req(&id, &["sh"], true, false, false)).await;
    assert_eq!(code_of(stopped), Code::FailedPrecondition);
    assert_eq!(
        server.asked.lock().len(),
        3,
        "only the valid requests reached the server"
    );
}
