//! Streaming benchmark, dockershim side by side with containerd in one run (interleaved, so
//! machine noise hits both alike): (1) exec session set-up plus an `echo` round trip — the
//! Exec RPC, the upgrade, the streams, the process, its output and exit status — over SPDY and
//! WebSocket; (2) port-forward throughput over loopback: an HTTP GET of a large file from
//! busybox httpd in a CNI pod through the forwarded connection, in MB/s. dockershim runs
//! in-process (sharing this process's CPU with the client); containerd is its own process.
//! Prints a table and JSON (`--json FILE` also writes it). No timing assertions.
//!
//! `cargo run --release -p integration --bin streaming-bench -- [--iterations 30] [--mb 64]`

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use cri_proto::runtime::v1 as cri;
use integration::fixtures::{busybox_container, cleanup_sandboxes, ensure_image, sandbox_config};
use integration::runtimes::{RuntimeKind, TestRuntime};
use integration::streaming::{self as client, StdioRequest, Transport};
use integration::testbed::Testbed;

#[derive(Debug, Parser)]
#[command(about = "Benchmark the streaming servers of dockershim and containerd")]
struct Args {
    /// Exec round trips per runtime and transport.
    #[arg(long, default_value_t = 30)]
    iterations: usize,
    /// Size of the file pulled through port-forward, in MiB.
    #[arg(long, default_value_t = 64)]
    mb: usize,
    /// Port-forward transfers per runtime and transport.
    #[arg(long, default_value_t = 3)]
    transfers: usize,
    /// Write the JSON here too.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Summary {
    n: usize,
    mean: f64,
    p50: f64,
    p95: f64,
    min: f64,
    max: f64,
}

fn summarize(mut v: Vec<f64>) -> Summary {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len().max(1);
    let at = |q: f64| {
        v.get(((n as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    Summary {
        n: v.len(),
        mean: v.iter().sum::<f64>() / n as f64,
        p50: at(0.5),
        p95: at(0.95),
        min: v.first().copied().unwrap_or(0.0),
        max: v.last().copied().unwrap_or(0.0),
    }
}

struct Target {
    kind: RuntimeKind,
    rt: TestRuntime,
    sandbox: String,
    container: String,
    web_sandbox: String,
}

async fn setup(
    kind: RuntimeKind,
    tb: &Testbed,
    logs: &std::path::Path,
    mb: usize,
) -> Result<Target> {
    let mut rt = TestRuntime::new(kind, tb).await?;
    ensure_image(&mut rt.image, &tb.busybox_image).await?;
    let mut pods = Vec::new();
    for (prefix, script) in [
        ("sbench-exec", "sleep 3600".to_string()),
        (
            "sbench-web",
            format!(
                "mkdir -p /www && dd if=/dev/zero of=/www/big bs=1048576 count={mb} 2>/dev/null && echo ok > /www/ok && exec httpd -f -p 8080 -h /www"
            ),
        ),
    ] {
        let cfg = sandbox_config(prefix, logs);
        let sb = rt
            .runtime
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(cfg.clone()),
                runtime_handler: String::new(),
            })
            .await?
            .into_inner()
            .pod_sandbox_id;
        let c = rt
            .runtime
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sb.clone(),
                config: Some(busybox_container("c", &tb.busybox_image, &script)),
                sandbox_config: Some(cfg),
            })
            .await?
            .into_inner()
            .container_id;
        rt.runtime
            .start_container(cri::StartContainerRequest {
                container_id: c.clone(),
            })
            .await?;
        pods.push((sb, c));
    }
    let (web_sb, web_c) = pods.pop().context("web pod")?;
    let (sb, c) = pods.pop().context("exec pod")?;
    // Wait for httpd.
    let mut ready = false;
    for _ in 0..300 {
        let r = rt
            .runtime
            .exec_sync(cri::ExecSyncRequest {
                container_id: web_c.clone(),
                cmd: vec![
                    "wget".into(),
                    "-q".into(),
                    "-O".into(),
                    "-".into(),
                    "http://127.0.0.1:8080/ok".into(),
                ],
                timeout: 10,
            })
            .await?
            .into_inner();
        if r.exit_code == 0 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !ready {
        bail!("{}: httpd never answered", kind.name());
    }
    Ok(Target {
        kind,
        rt,
        sandbox: sb,
        container: c,
        web_sandbox: web_sb,
    })
}

/// One Exec RPC + session + `echo` output + exit status, in milliseconds.
async fn exec_round_trip(t: &mut Target, transport: Transport) -> Result<(f64, String)> {
    let req = StdioRequest {
        stdout: true,
        stderr: true,
        ..Default::default()
    };
    let start = Instant::now();
    let url =
        t.rt.runtime
            .exec(cri::ExecRequest {
                container_id: t.container.clone(),
                cmd: vec!["echo".into(), "bench".into()],
                stdout: true,
                stderr: true,
                ..Default::default()
            })
            .await?
            .into_inner()
            .url;
    let s = client::connect(&url, transport, req, None).await?;
    let protocol = s.protocol.clone();
    let r = s.wait(Duration::from_secs(60)).await?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    if r.stdout != b"bench\n" || r.exit_code != Some(0) {
        bail!(
            "unexpected exec result: {:?} {:?}",
            r.stdout_str(),
            r.exit_code
        );
    }
    Ok((ms, protocol))
}

/// One GET of /big through port-forward, in MB/s.
async fn transfer(t: &mut Target, transport: Transport, mb: usize) -> Result<f64> {
    let url =
        t.rt.runtime
            .port_forward(cri::PortForwardRequest {
                pod_sandbox_id: t.web_sandbox.clone(),
                port: vec![8080],
            })
            .await?
            .into_inner()
            .url;
    let start = Instant::now();
    let resp = client::http_get(&url, transport, 8080, "/big", Duration::from_secs(300)).await?;
    let secs = start.elapsed().as_secs_f64();
    let want = mb * 1024 * 1024;
    if resp.len() < want {
        bail!("short transfer: {} of {want} bytes", resp.len());
    }
    Ok(resp.len() as f64 / 1e6 / secs)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    let tb = Testbed::get("streaming-bench").ok_or_else(|| anyhow!("no test bed"))?;
    let logs = tempfile::tempdir()?;
    let mut targets = Vec::new();
    for kind in [RuntimeKind::Containerd, RuntimeKind::Dockershim] {
        targets.push(setup(kind, &tb, logs.path(), args.mb).await?);
    }
    let transports = [Transport::Spdy, Transport::WebSocket];
    // Warm-up: one of each.
    let mut protocols = serde_json::Map::new();
    for t in &mut targets {
        for tr in transports {
            let (_, p) = exec_round_trip(t, tr).await?;
            protocols.insert(format!("{}/{}", t.kind.name(), tr.name()), p.into());
        }
    }
    let mut exec_ms: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); 2]; targets.len()];
    for _ in 0..args.iterations {
        for (i, t) in targets.iter_mut().enumerate() {
            for (j, tr) in transports.iter().enumerate() {
                exec_ms[i][j].push(exec_round_trip(t, *tr).await?.0);
            }
        }
    }
    let mut mbps: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); 2]; targets.len()];
    for _ in 0..args.transfers {
        for (i, t) in targets.iter_mut().enumerate() {
            for (j, tr) in transports.iter().enumerate() {
                mbps[i][j].push(transfer(t, *tr, args.mb).await?);
            }
        }
    }
    let mut rows = Vec::new();
    let mut json_rows = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        for (j, tr) in transports.iter().enumerate() {
            let e = summarize(exec_ms[i][j].clone());
            let m = summarize(mbps[i][j].clone());
            rows.push(format!(
                "| {:<10} | {:<9} | {:>8.2} | {:>8.2} | {:>8.2} | {:>9.1} | {:>9.1} |",
                t.kind.name(),
                tr.name(),
                e.mean,
                e.p50,
                e.p95,
                m.mean,
                m.max
            ));
            json_rows.push(serde_json::json!({
                "runtime": t.kind.name(),
                "transport": tr.name(),
                "exec_echo_ms": e,
                "port_forward_mb_per_s": m,
            }));
        }
    }
    let json = serde_json::json!({
        "iterations": args.iterations,
        "transfer_mib": args.mb,
        "transfers": args.transfers,
        "negotiated_protocols": protocols,
        "results": json_rows,
    });
    println!("{}", serde_json::to_string_pretty(&json)?);
    println!();
    println!(
        "| runtime    | transport | exec+echo mean ms | p50 ms | p95 ms | port-forward mean MB/s | max MB/s |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
    if let Some(path) = args.json {
        std::fs::write(path, serde_json::to_string_pretty(&json)?)?;
    }
    for t in &mut targets {
        let ids = [t.sandbox.clone(), t.web_sandbox.clone()];
        cleanup_sandboxes(&mut t.rt.runtime, &ids).await;
    }
    Ok(())
}
