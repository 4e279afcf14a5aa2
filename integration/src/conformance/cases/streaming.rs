//! `[streaming]` conformance cases: Exec, Attach and PortForward URLs driven by the client in
//! `crate::streaming`, each case over both SPDY and WebSocket — exec with and without a TTY and
//! stdin (an interactive sh that receives input and a resize), attach, port-forward to busybox
//! httpd in a pod and in a host-network pod, and the refusals (a reused token; a container that
//! is not running or does not exist).

use std::time::Duration;

use cri_proto::runtime::v1 as cri;

use super::common::{container, exec, in_sandbox};
use crate::conformance::{CaseError, CaseResult, Ctx};
use crate::streaming::{self as client, StdioRequest, Transport};
use crate::{ensure, ensure_eq};

const BOTH: [Transport; 2] = [Transport::Spdy, Transport::WebSocket];
const T: Duration = Duration::from_secs(30);

fn fail(t: Transport, what: &str) -> impl FnOnce(client::ClientError) -> CaseError {
    let what = format!("{} {what}", t.name());
    move |e| CaseError::Fail(format!("{what}: {e}"))
}

async fn exec_url(
    ctx: &mut Ctx,
    id: &str,
    cmd: &[&str],
    req: StdioRequest,
) -> Result<String, CaseError> {
    Ok(ctx
        .runtime
        .exec(cri::ExecRequest {
            container_id: id.to_string(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            tty: req.tty,
            stdin: req.stdin,
            stdout: req.stdout,
            stderr: req.stderr,
            ..Default::default()
        })
        .await?
        .into_inner()
        .url)
}

/// Exec without a TTY: separate stdout and stderr, exit codes, and stdin EOF reaching `cat`.
pub async fn exec_plain(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-sexec",
        |_| {},
        |mut ctx, id, cfg| async move {
            let c = container(&mut ctx, &id, &cfg, "c", "sleep 3600", |_| {}, true).await?;
            let out_err = StdioRequest {
                stdout: true,
                stderr: true,
                ..Default::default()
            };
            for t in BOTH {
                let url = exec_url(
                    &mut ctx,
                    &c,
                    &["sh", "-c", "echo out; echo err >&2; exit 3"],
                    out_err,
                )
                .await?;
                let s = client::connect(&url, t, out_err, None)
                    .await
                    .map_err(fail(t, "connect"))?;
                let r = s.wait(T).await.map_err(fail(t, "session"))?;
                ensure_eq!(r.stdout_str(), "out\n", format!("{} stdout", t.name()));
                ensure_eq!(
                    String::from_utf8_lossy(&r.stderr),
                    "err\n",
                    format!("{} stderr", t.name())
                );
                ensure_eq!(
                    r.exit_code,
                    Some(3),
                    format!("{} exit code ({})", t.name(), r.error)
                );

                let url = exec_url(&mut ctx, &c, &["echo", "hello"], out_err).await?;
                let s = client::connect(&url, t, out_err, None)
                    .await
                    .map_err(fail(t, "connect"))?;
                let r = s.wait(T).await.map_err(fail(t, "session"))?;
                ensure_eq!(r.stdout_str(), "hello\n", format!("{} echo", t.name()));
                ensure_eq!(r.exit_code, Some(0), format!("{} echo exit code", t.name()));

                // stdin: what is written arrives, and closing it ends `cat`.
                let io = StdioRequest {
                    stdin: true,
                    stdout: true,
                    ..Default::default()
                };
                let url = exec_url(&mut ctx, &c, &["cat"], io).await?;
                let mut s = client::connect(&url, t, io, None)
                    .await
                    .map_err(fail(t, "connect"))?;
                if t == Transport::WebSocket && s.protocol != "v5.channel.k8s.io" {
                    // Before v5 a WebSocket client cannot close stdin alone.
                    s.write_stdin("ping\n").await.map_err(fail(t, "stdin"))?;
                    s.read_stdout_until(b"ping\n", T)
                        .await
                        .map_err(fail(t, "cat echo"))?;
                    continue;
                }
                s.write_stdin("via stdin\n")
                    .await
                    .map_err(fail(t, "stdin"))?;
                s.close_stdin().await;
                let r = s.wait(T).await.map_err(fail(t, "cat session"))?;
                ensure_eq!(r.stdout_str(), "via stdin\n", format!("{} cat", t.name()));
                ensure_eq!(r.exit_code, Some(0), format!("{} cat exit code", t.name()));
            }
            Ok(())
        },
    )
    .await
}

/// Exec with a TTY: an interactive sh gets input, sees a resize, and exits with its code.
pub async fn exec_tty(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-stty",
        |_| {},
        |mut ctx, id, cfg| async move {
            let c = container(&mut ctx, &id, &cfg, "c", "sleep 3600", |_| {}, true).await?;
            let io = StdioRequest {
                stdin: true,
                stdout: true,
                tty: true,
                ..Default::default()
            };
            for t in BOTH {
                let url = exec_url(&mut ctx, &c, &["sh"], io).await?;
                let mut s = client::connect(&url, t, io, None)
                    .await
                    .map_err(fail(t, "connect"))?;
                s.resize(100, 40).await.map_err(fail(t, "resize"))?;
                // The resize reaches the TTY asynchronously: ask until the shell sees it.
                let mut seen = String::new();
                for i in 0..50 {
                    s.write_stdin(format!("stty size; echo M$((40+{i}))\n"))
                        .await
                        .map_err(fail(t, "stdin"))?;
                    let out = s
                        .read_stdout_until(format!("M{}", 40 + i).as_bytes(), T)
                        .await
                        .map_err(fail(t, "tty output"))?;
                    seen = String::from_utf8_lossy(&out).into_owned();
                    if seen.contains("40 100") {
                        break;
                    }
                }
                ensure!(
                    seen.contains("40 100"),
                    "{}: the shell never saw the 100x40 resize: {seen:?}",
                    t.name()
                );
                s.write_stdin("exit 5\n").await.map_err(fail(t, "stdin"))?;
                let r = s.wait(T).await.map_err(fail(t, "session"))?;
                ensure_eq!(r.exit_code, Some(5), format!("{} tty exit code", t.name()));
            }
            Ok(())
        },
    )
    .await
}

/// Attach to a container whose main process reads stdin.
pub async fn attach(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-sattach",
        |_| {},
        |mut ctx, id, cfg| async move {
            let c = container(
                &mut ctx,
                &id,
                &cfg,
                "c",
                "while read l; do echo \"got:$l\"; done",
                |c| c.stdin = true,
                true,
            )
            .await?;
            let io = StdioRequest {
                stdin: true,
                stdout: true,
                stderr: true,
                tty: false,
            };
            for t in BOTH {
                let url = ctx
                    .runtime
                    .attach(cri::AttachRequest {
                        container_id: c.clone(),
                        stdin: true,
                        tty: false,
                        stdout: true,
                        stderr: true,
                        ..Default::default()
                    })
                    .await?
                    .into_inner()
                    .url;
                let mut s = client::connect(&url, t, io, None)
                    .await
                    .map_err(fail(t, "connect"))?;
                let word = format!("hello-{}", t.name());
                s.write_stdin(format!("{word}\n"))
                    .await
                    .map_err(fail(t, "stdin"))?;
                s.read_stdout_until(format!("got:{word}").as_bytes(), T)
                    .await
                    .map_err(fail(t, "attach output"))?;
            }
            // A TTY container: attach with a terminal and resize it.
            let tty = container(
                &mut ctx,
                &id,
                &cfg,
                "tty",
                "exec sh",
                |c| {
                    c.stdin = true;
                    c.tty = true;
                },
                true,
            )
            .await?;
            let io = StdioRequest {
                stdin: true,
                stdout: true,
                stderr: false,
                tty: true,
            };
            for (n, t) in BOTH.into_iter().enumerate() {
                let url = ctx
                    .runtime
                    .attach(cri::AttachRequest {
                        container_id: tty.clone(),
                        stdin: true,
                        tty: true,
                        stdout: true,
                        stderr: false,
                        ..Default::default()
                    })
                    .await?
                    .into_inner()
                    .url;
                let mut s = client::connect(&url, t, io, None)
                    .await
                    .map_err(fail(t, "connect tty"))?;
                let (w, h) = (90 + n as u16, 30 + n as u16);
                s.resize(w, h).await.map_err(fail(t, "resize"))?;
                let want = format!("{h} {w}");
                let mut seen = String::new();
                for i in 0..50 {
                    s.write_stdin(format!("stty size; echo A$((70+{i}))\n"))
                        .await
                        .map_err(fail(t, "stdin"))?;
                    let out = s
                        .read_stdout_until(format!("A{}", 70 + i).as_bytes(), T)
                        .await
                        .map_err(fail(t, "attach tty output"))?;
                    seen = String::from_utf8_lossy(&out).into_owned();
                    if seen.contains(&want) {
                        break;
                    }
                }
                ensure!(
                    seen.contains(&want),
                    "{}: the attached terminal never saw the {w}x{h} resize: {seen:?}",
                    t.name()
                );
            }
            Ok(())
        },
    )
    .await
}

const PAGE: &str = "hello from the pod";

/// Serves PAGE with busybox httpd on `port` and waits until it answers.
async fn web_server(
    ctx: &mut Ctx,
    id: &str,
    cfg: &cri::PodSandboxConfig,
    port: u16,
) -> Result<(), CaseError> {
    let script = format!(
        "mkdir -p /www && echo '{PAGE}' > /www/index.html && exec httpd -f -p {port} -h /www"
    );
    let c = container(ctx, id, cfg, "web", &script, |_| {}, true).await?;
    for _ in 0..100 {
        let r = exec(
            ctx,
            &c,
            &format!("wget -q -O - http://127.0.0.1:{port}/index.html"),
        )
        .await?;
        if String::from_utf8_lossy(&r.stdout).contains(PAGE) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(CaseError::Fail(format!(
        "httpd on port {port} never answered"
    )))
}

async fn forward_both(ctx: &mut Ctx, sandbox: &str, port: u16) -> CaseResult {
    for t in BOTH {
        let url = ctx
            .runtime
            .port_forward(cri::PortForwardRequest {
                pod_sandbox_id: sandbox.to_string(),
                port: vec![i32::from(port)],
            })
            .await?
            .into_inner()
            .url;
        let resp = client::http_get(&url, t, port, "/index.html", T)
            .await
            .map_err(fail(t, "port-forward"))?;
        let text = String::from_utf8_lossy(&resp);
        ensure!(
            text.starts_with("HTTP/1.") && text.contains(PAGE),
            "{}: unexpected response through port-forward: {text:?}",
            t.name()
        );
    }
    Ok(())
}

pub async fn port_forward_pod(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-spf",
        |_| {},
        |mut ctx, id, cfg| async move {
            web_server(&mut ctx, &id, &cfg, 8080).await?;
            forward_both(&mut ctx, &id, 8080).await
        },
    )
    .await
}

pub async fn port_forward_host_network(ctx: Ctx) -> CaseResult {
    let host = |c: &mut cri::PodSandboxConfig| {
        c.hostname = String::new();
        c.linux = Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: cri::NamespaceMode::Node as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    };
    // A free port on the host for the pod's server.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| CaseError::Skip(format!("cannot find a free port: {e}")))?;
    in_sandbox(&ctx, "cf-spfhost", host, |mut ctx, id, cfg| async move {
        web_server(&mut ctx, &id, &cfg, port).await?;
        forward_both(&mut ctx, &id, port).await
    })
    .await
}

pub async fn refusals(ctx: Ctx) -> CaseResult {
    in_sandbox(
        &ctx,
        "cf-sref",
        |_| {},
        |mut ctx, id, cfg| async move {
            let c = container(&mut ctx, &id, &cfg, "c", "sleep 3600", |_| {}, true).await?;
            let out = StdioRequest {
                stdout: true,
                ..Default::default()
            };
            for t in BOTH {
                let url = exec_url(&mut ctx, &c, &["true"], out).await?;
                let s = client::connect(&url, t, out, None)
                    .await
                    .map_err(fail(t, "first use"))?;
                s.wait(T).await.map_err(fail(t, "first session"))?;
                match client::connect(&url, t, out, None).await {
                    Err(client::ClientError::Refused { status: 404, .. }) => {}
                    Err(e) => {
                        return Err(CaseError::Fail(format!(
                            "{}: reused token refused, but not with 404: {e}",
                            t.name()
                        )));
                    }
                    Ok(_) => {
                        return Err(CaseError::Fail(format!(
                            "{}: a reused token was accepted",
                            t.name()
                        )));
                    }
                }
            }
            // Neither stdout, stderr nor stdin.
            let none = ctx
                .runtime
                .exec(cri::ExecRequest {
                    container_id: c.clone(),
                    cmd: vec!["true".into()],
                    ..Default::default()
                })
                .await;
            ensure!(none.is_err(), "Exec without any stream was accepted");
            // A created, never started container.
            let idle = container(&mut ctx, &id, &cfg, "idle", "sleep 3600", |_| {}, false).await?;
            let st = ctx
                .runtime
                .exec(cri::ExecRequest {
                    container_id: idle,
                    cmd: vec!["true".into()],
                    stdout: true,
                    ..Default::default()
                })
                .await;
            match st {
                Err(s) if s.code() != tonic::Code::Ok => {}
                _ => {
                    return Err(CaseError::Fail(
                        "Exec in a created container was accepted".into(),
                    ));
                }
            }
            let missing = ctx
                .runtime
                .exec(cri::ExecRequest {
                    container_id: "0123456789abcdef-no-such-container".into(),
                    cmd: vec!["true".into()],
                    stdout: true,
                    ..Default::default()
                })
                .await;
            match missing {
                Err(s) if s.code() == tonic::Code::NotFound => Ok(()),
                other => Err(CaseError::Fail(format!(
                    "Exec in a missing container: want NotFound, got {:?}",
                    other
                        .map(|_| ())
                        .map_err(|s| (s.code(), s.message().to_string()))
                ))),
            }
        },
    )
    .await
}
