//! Streaming benchmark, dockershim side by side with containerd in one run: (1) exec session
//! set-up plus an `echo` round trip — the Exec RPC, the upgrade, the streams, the process, its
//! output and exit status — over SPDY and WebSocket, with where the time went (RPC / session
//! set-up / until the output / exit status and end); (2) port-forward throughput over
//! loopback: an HTTP GET of a large file from busybox httpd in a CNI pod through the forwarded
//! connection, in MB/s. Both runtimes run as their own processes (dockershim is this
//! workspace's binary, `--in-process` serves it inside the benchmark instead). Samples are
//! interleaved, in an order that alternates every round (so neither runtime always follows the
//! other), with a pause between samples so one runtime's clean-up of the previous session does
//! not land in the next one's time. Prints JSON and a table with the ratios to containerd
//! (`--json FILE` also writes the JSON). No timing assertions.
//!
//! `cargo run --release -p integration --bin streaming-bench -- [--iterations 40] [--mb 64]`

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use cri_proto::runtime::v1 as cri;
use integration::fixtures::{busybox_container, cleanup_sandboxes, ensure_image, sandbox_config};
use integration::runtimes::{RuntimeKind, ShimProcess, TestRuntime};
use integration::streaming::{self as client, StdioRequest, Transport};
use integration::testbed::Testbed;

#[derive(Debug, Parser)]
#[command(about = "Benchmark the streaming servers of dockershim and containerd")]
struct Args {
    /// Exec round trips per runtime and transport.
    #[arg(long, default_value_t = 40)]
    iterations: usize,
    /// Size of the file pulled through port-forward, in MiB.
    #[arg(long, default_value_t = 64)]
    mb: usize,
    /// Port-forward transfers per runtime and transport.
    #[arg(long, default_value_t = 3)]
    transfers: usize,
    /// Pause between two samples, in milliseconds.
    #[arg(long, default_value_t = 100)]
    pause_ms: u64,
    /// Serve dockershim inside this process instead of starting the binary.
    #[arg(long)]
    in_process: bool,
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
    /// The dockershim process behind `rt`, when it runs as its own process.
    _process: Option<ShimProcess>,
    sandbox: String,
    container: String,
    web_sandbox: String,
}

async fn setup(
    kind: RuntimeKind,
    tb: &Testbed,
    logs: &std::path::Path,
    mb: usize,
    in_process: bool,
) -> Result<Target> {
    let (mut rt, process) = match kind {
        RuntimeKind::Dockershim if !in_process => {
            let p = ShimProcess::start(tb, logs).await?;
            (TestRuntime::connect(kind, &p.endpoint).await?, Some(p))
        }
        _ => (TestRuntime::new(kind, tb).await?, None),
    };
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
        _process: process,
        sandbox: sb,
        container: c,
        web_sandbox: web_sb,
    })
}

/// Where one exec round trip's time went, in milliseconds: the Exec RPC, the session set-up
/// (upgrade and streams), the command until its output arrived, and the rest (exit status and
/// the end of the session).
#[derive(Debug, Clone, Copy, Default)]
struct Phases {
    rpc: f64,
    setup: f64,
    output: f64,
    end: f64,
}

impl Phases {
    fn total(&self) -> f64 {
        self.rpc + self.setup + self.output + self.end
    }

    /// The mean of each phase over `runs`: rpc, setup, output, end.
    fn means(runs: &[Phases]) -> [f64; 4] {
        let n = runs.len().max(1) as f64;
        let sum = |f: fn(&Phases) -> f64| runs.iter().map(f).sum::<f64>() / n;
        [
            sum(|p| p.rpc),
            sum(|p| p.setup),
            sum(|p| p.output),
            sum(|p| p.end),
        ]
    }
}

/// One Exec RPC + session + `echo` output + exit status.
async fn exec_round_trip(t: &mut Target, transport: Transport) -> Result<(Phases, String)> {
    let req = StdioRequest {
        stdout: true,
        stderr: true,
        ..Default::default()
    };
    let ms = |since: Instant| since.elapsed().as_secs_f64() * 1e3;
    let mut p = Phases::default();
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
    p.rpc = ms(start);
    let at = Instant::now();
    let mut s = client::connect(&url, transport, req, None).await?;
    let protocol = s.protocol.clone();
    p.setup = ms(at);
    let at = Instant::now();
    let mut out = s
        .read_stdout_until(b"bench\n", Duration::from_secs(60))
        .await?;
    p.output = ms(at);
    let at = Instant::now();
    let r = s.wait(Duration::from_secs(60)).await?;
    p.end = ms(at);
    out.extend_from_slice(&r.stdout);
    if out != b"bench\n" || r.exit_code != Some(0) {
        bail!(
            "unexpected exec result: {:?} {:?}",
            String::from_utf8_lossy(&out),
            r.exit_code
        );
    }
    Ok((p, protocol))
}

/// The floor under dockershim: the same `echo` through the Docker Engine API alone (create the
/// exec, start it on a hijacked connection, read the output to its end, inspect the exit code)
/// on dockershim's container, with no CRI and no streaming server. Phases: create / start (the
/// upgrade) / output / the end and the exit code.
async fn docker_round_trip(docker: &bollard::Docker, container: &str) -> Result<Phases> {
    use bollard::container::LogOutput;
    use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
    use futures::StreamExt;
    let ms = |since: Instant| since.elapsed().as_secs_f64() * 1e3;
    let mut p = Phases::default();
    let start = Instant::now();
    let id = docker
        .create_exec(
            container,
            CreateExecOptions::<String> {
                cmd: Some(vec!["echo".into(), "bench".into()]),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await?
        .id;
    p.rpc = ms(start);
    let at = Instant::now();
    let started = docker
        .start_exec(&id, Some(StartExecOptions::default()))
        .await?;
    let StartExecResults::Attached { mut output, .. } = started else {
        bail!("docker started the exec detached");
    };
    p.setup = ms(at);
    let at = Instant::now();
    let mut out = Vec::new();
    while !out.ends_with(b"bench\n") {
        match output.next().await {
            Some(Ok(LogOutput::StdOut { message })) => out.extend_from_slice(&message),
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.into()),
            None => bail!(
                "docker exec output ended early: {:?}",
                String::from_utf8_lossy(&out)
            ),
        }
    }
    p.output = ms(at);
    let at = Instant::now();
    while output.next().await.is_some() {}
    let code = docker.inspect_exec(&id).await?.exit_code;
    p.end = ms(at);
    if code != Some(0) {
        bail!("docker exec exit code {code:?}");
    }
    Ok(p)
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

/// A 90% bootstrap interval of `p50(a) / p50(b)` (2000 resamples, a fixed seed so the same
/// samples give the same interval).
fn ratio_interval(a: &[f64], b: &[f64]) -> (f64, f64) {
    if a.is_empty() || b.is_empty() {
        return (0.0, 0.0);
    }
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = |n: usize| {
        // xorshift64*
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    };
    let mut median_of = |v: &[f64]| {
        let mut r: Vec<f64> = (0..v.len()).map(|_| v[next(v.len())]).collect();
        r.sort_by(|x, y| x.total_cmp(y));
        r[r.len() / 2]
    };
    let mut ratios: Vec<f64> = (0..2000)
        .map(|_| median_of(a) / median_of(b).max(f64::EPSILON))
        .collect();
    ratios.sort_by(|x, y| x.total_cmp(y));
    (ratios[100], ratios[1899])
}

/// The (runtime, transport) samples of one round: every pair once, the runtimes' order
/// reversed every other round and the transports' order every other pair of rounds, so no
/// sample always follows the same one.
fn sample_order(round: usize, runtimes: usize, transports: usize) -> Vec<(usize, usize)> {
    let mut rs: Vec<usize> = (0..runtimes).collect();
    let mut ts: Vec<usize> = (0..transports).collect();
    if round % 2 == 1 {
        rs.reverse();
    }
    if (round / 2) % 2 == 1 {
        ts.reverse();
    }
    rs.iter()
        .flat_map(|&r| ts.iter().map(move |&t| (r, t)))
        .collect()
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    // Interrupted, it stops what it started (integration::interrupt).
    integration::interrupt::until_interrupted(run())?.await
}

async fn run() -> Result<()> {
    let args = Args::parse();
    let tb = Testbed::get("streaming-bench").ok_or_else(|| anyhow!("no test bed"))?;
    let logs = tempfile::tempdir()?;
    let mut targets = Vec::new();
    for kind in [RuntimeKind::Containerd, RuntimeKind::Dockershim] {
        targets.push(setup(kind, &tb, logs.path(), args.mb, args.in_process).await?);
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
    let pause = Duration::from_millis(args.pause_ms);
    let docker =
        dockershim::BollardDocker::connect(&tb.docker_endpoint, Duration::from_secs(120)).await?;
    let docker = docker.client();
    let shim_container = targets
        .iter()
        .find(|t| t.kind == RuntimeKind::Dockershim)
        .map(|t| t.container.clone())
        .context("no dockershim target")?;
    docker_round_trip(docker, &shim_container).await?;
    let mut exec: Vec<Vec<Vec<Phases>>> = vec![vec![Vec::new(); 2]; targets.len()];
    let mut floor = Vec::new();
    for round in 0..args.iterations {
        for (i, j) in sample_order(round, targets.len(), transports.len()) {
            tokio::time::sleep(pause).await;
            exec[i][j].push(exec_round_trip(&mut targets[i], transports[j]).await?.0);
            // The Docker API floor once per round, at a different place each time.
            if i == round % targets.len() && j == (round / 2) % transports.len() {
                tokio::time::sleep(pause).await;
                floor.push(docker_round_trip(docker, &shim_container).await?);
            }
        }
    }
    let mut mbps: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); 2]; targets.len()];
    for round in 0..args.transfers {
        for (i, j) in sample_order(round, targets.len(), transports.len()) {
            tokio::time::sleep(pause).await;
            mbps[i][j].push(transfer(&mut targets[i], transports[j], args.mb).await?);
        }
    }
    // Per runtime and transport: the totals, each phase's mean, throughput, and the ratios to
    // the first runtime (containerd) on the same transport.
    let totals = |v: &[Phases]| v.iter().map(Phases::total).collect::<Vec<_>>();
    let mut rows = Vec::new();
    let mut json_rows = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        for (j, tr) in transports.iter().enumerate() {
            let (runs, base) = (totals(&exec[i][j]), totals(&exec[0][j]));
            let e = summarize(runs.clone());
            let m = summarize(mbps[i][j].clone());
            let base_m = summarize(mbps[0][j].clone());
            let exec_ratio = e.p50 / summarize(base.clone()).p50.max(f64::EPSILON);
            let (ci_lo, ci_hi) = ratio_interval(&runs, &base);
            let mbps_ratio = m.mean / base_m.mean.max(f64::EPSILON);
            let phases = Phases::means(&exec[i][j]);
            rows.push(format!(
                "| {:<10} | {:<9} | {:>6.2} | {:>6.2} | {:>6.2} | {:>5.2} ({:.2}–{:.2}) | {:>5.2} / {:>5.2} / {:>5.2} / {:>5.2} | {:>7.1} | {:>5.2} |",
                t.kind.name(),
                tr.name(),
                e.mean,
                e.p50,
                e.p95,
                exec_ratio,
                ci_lo,
                ci_hi,
                phases[0],
                phases[1],
                phases[2],
                phases[3],
                m.mean,
                mbps_ratio,
            ));
            json_rows.push(serde_json::json!({
                "runtime": t.kind.name(),
                "transport": tr.name(),
                "exec_echo_ms": e,
                "exec_echo_p50_ratio_to_first": exec_ratio,
                "exec_echo_p50_ratio_90pct_interval": [ci_lo, ci_hi],
                "exec_phase_mean_ms": {
                    "rpc": phases[0],
                    "setup": phases[1],
                    "output": phases[2],
                    "end": phases[3],
                },
                "port_forward_mb_per_s": m,
                "port_forward_mean_ratio_to_first": mbps_ratio,
            }));
        }
    }
    // The Docker API floor, against containerd's faster transport.
    let f = summarize(totals(&floor));
    let (best_p50, best) = exec[0]
        .iter()
        .map(|v| (summarize(totals(v)).p50, totals(v)))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap_or_default();
    let floor_ratio = f.p50 / best_p50.max(f64::EPSILON);
    let (flo, fhi) = ratio_interval(&totals(&floor), &best);
    let floor_phases = Phases::means(&floor);
    rows.push(format!(
        "| docker API | (none)    | {:>6.2} | {:>6.2} | {:>6.2} | {:>5.2} ({:.2}–{:.2}) | {:>5.2} / {:>5.2} / {:>5.2} / {:>5.2} |       - |     - |",
        f.mean, f.p50, f.p95, floor_ratio, flo, fhi,
        floor_phases[0], floor_phases[1], floor_phases[2], floor_phases[3],
    ));
    json_rows.push(serde_json::json!({
        "runtime": "docker-engine-api",
        "transport": "none",
        "note": "the same echo through the Docker Engine API alone on dockershim's container: the floor dockershim builds on; phases are create / start / output / end",
        "exec_echo_ms": f,
        "exec_echo_p50_ratio_to_containerd_best": floor_ratio,
        "exec_echo_p50_ratio_90pct_interval": [flo, fhi],
        "exec_phase_mean_ms": {
            "rpc": floor_phases[0],
            "setup": floor_phases[1],
            "output": floor_phases[2],
            "end": floor_phases[3],
        },
    }));
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
        "| runtime    | transport | exec+echo mean ms | p50 ms | p95 ms | p50 ratio to containerd (90% interval) | phase means ms: rpc / setup / output / end | port-forward MB/s | ratio |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
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
