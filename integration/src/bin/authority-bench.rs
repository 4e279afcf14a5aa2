//! What the `:authority` adapter in front of the CRI socket (`cri_proto::authority`) costs.
//! (1) End to end: a tonic client calls `Version` on two in-process servers of the same trivial
//! service, one served by `cri_proto::serve_with_listener` (every connection through the
//! adapter), one by tonic alone; rounds alternate which goes first. (2) The adapter alone:
//! how long it takes to pass a kubelet-sized unary request (HEADERS with an indexing HPACK
//! encoder, as Go clients use, plus DATA) whose authority is the socket path, read from memory.
//! Prints JSON and a table; no timing assertions.
//!
//! `cargo run --release -p integration --bin authority-bench -- [--rounds 20] [--calls 200]`

use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Parser;
use cri_proto::RuntimeService;
use cri_proto::authority::AuthorityFix;
use cri_proto::runtime::v1::{VersionRequest, VersionResponse};
use integration::benchmark::percentile;
use serde::Serialize;
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

#[derive(Debug, Parser)]
#[command(about = "Measure the cost of the :authority adapter per CRI call")]
struct Args {
    /// Rounds; each makes `calls` calls to each server.
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// Sequential calls per server per round.
    #[arg(long, default_value_t = 200)]
    calls: usize,
    /// Requests passed through the adapter alone.
    #[arg(long, default_value_t = 100_000)]
    requests: usize,
    /// Also write the JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

struct VersionOnly;

#[tonic::async_trait]
impl RuntimeService for VersionOnly {
    async fn version(
        &self,
        _req: Request<VersionRequest>,
    ) -> Result<Response<VersionResponse>, Status> {
        Ok(Response::new(VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "bench".into(),
            runtime_version: "0".into(),
            runtime_api_version: "v1".into(),
        }))
    }
}

#[derive(Debug, Serialize)]
struct Latency {
    p50_us: f64,
    p95_us: f64,
    p99_us: f64,
}

#[derive(Debug, Serialize)]
struct ReportJson {
    rounds: usize,
    calls_per_round: usize,
    with_adapter: Latency,
    tonic_alone: Latency,
    p50_ratio: f64,
    adapter_alone_requests: usize,
    adapter_alone_us_per_request: f64,
}

fn latency(mut v: Vec<Duration>) -> Latency {
    v.sort();
    Latency {
        p50_us: percentile(&v, 50.0) * 1000.0,
        p95_us: percentile(&v, 95.0) * 1000.0,
        p99_us: percentile(&v, 99.0) * 1000.0,
    }
}

async fn serve(
    dir: &std::path::Path,
    name: &str,
    adapter: bool,
    token: &CancellationToken,
) -> Result<String> {
    let path = dir.join(name);
    let listener = cri_proto::bind_unix(&path).await?;
    let router = Server::builder().add_service(cri_proto::runtime_server(VersionOnly));
    let t = token.clone();
    if adapter {
        tokio::spawn(cri_proto::serve_with_listener(router, listener, t));
    } else {
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        tokio::spawn(router.serve_with_incoming_shutdown(incoming, t.cancelled_owned()));
    }
    Ok(format!("unix://{}", path.display()))
}

/// The bytes of `n` unary requests on one connection, authority = a socket path.
fn request_stream(n: usize) -> Vec<u8> {
    // Huffman-coded and indexed, as Go's and grpcio's encoders send them.
    let mut enc = httlib_hpack::Encoder::default();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    let frame = |out: &mut Vec<u8>, kind: u8, flags: u8, sid: u32, payload: &[u8]| {
        let len = (payload.len() as u32).to_be_bytes();
        out.extend([len[1], len[2], len[3], kind, flags]);
        out.extend(sid.to_be_bytes());
        out.extend(payload);
    };
    frame(&mut out, 0x4, 0, 0, &[]);
    for i in 0..n {
        let sid = (1 + 2 * i) as u32;
        let fields: [(&[u8], &[u8]); 8] = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", b"/runtime.v1.RuntimeService/ContainerStatus"),
            (b":authority", b"/var/run/cri-dockerd.sock"),
            (b"content-type", b"application/grpc"),
            (b"user-agent", b"grpc-go/1.49.0"),
            (b"te", b"trailers"),
            (b"grpc-timeout", b"1999826u"),
        ];
        let mut block = Vec::new();
        for (n, v) in fields {
            enc.encode((n.to_vec(), v.to_vec(), 0x1 | 0x2 | 0x4 | 0x10), &mut block)
                .expect("encode");
        }
        frame(&mut out, 0x1, 0x4, sid, &block);
        frame(&mut out, 0x0, 0x1, sid, &[0, 0, 0, 0, 68, 10, 64, b'a'][..]);
    }
    out
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let dir = tempfile::Builder::new()
        .prefix("authority-bench-")
        .tempdir()?;
    let token = CancellationToken::new();
    let with = serve(dir.path(), "adapter.sock", true, &token).await?;
    let without = serve(dir.path(), "plain.sock", false, &token).await?;
    let mut clients = Vec::new();
    for ep in [&with, &without] {
        let ch = cri_proto::connect(ep, Duration::from_secs(5)).await?;
        clients.push(cri_proto::runtime_client(ch));
    }
    // Warm-up.
    for c in &mut clients {
        for _ in 0..50 {
            c.version(VersionRequest::default()).await?;
        }
    }
    let mut samples = [Vec::new(), Vec::new()];
    for round in 0..args.rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            for _ in 0..args.calls {
                let t = Instant::now();
                clients[i].version(VersionRequest::default()).await?;
                samples[i].push(t.elapsed());
            }
        }
    }
    token.cancel();
    let [a, b] = samples;
    let (with_adapter, tonic_alone) = (latency(a), latency(b));

    let bytes = request_stream(args.requests);
    let t = Instant::now();
    let mut fix = AuthorityFix::new(&bytes[..]);
    let mut sink = Vec::with_capacity(bytes.len() * 2);
    fix.read_to_end(&mut sink).await?;
    let per_request = t.elapsed().as_secs_f64() * 1e6 / args.requests as f64;
    anyhow::ensure!(
        fix.rewrites() == args.requests as u64,
        "every request rewritten"
    );

    let report = ReportJson {
        rounds: args.rounds,
        calls_per_round: args.calls,
        p50_ratio: with_adapter.p50_us / tonic_alone.p50_us,
        with_adapter,
        tonic_alone,
        adapter_alone_requests: args.requests,
        adapter_alone_us_per_request: per_request,
    };
    let json = serde_json::to_string_pretty(&report)?;
    println!("{json}");
    if let Some(p) = &args.json {
        std::fs::write(p, &json)?;
    }
    println!();
    println!("| Version call | p50 µs | p95 µs | p99 µs |");
    println!("|---|---:|---:|---:|");
    for (name, l) in [
        ("through the adapter", &report.with_adapter),
        ("tonic alone", &report.tonic_alone),
    ] {
        println!(
            "| {name} | {:.1} | {:.1} | {:.1} |",
            l.p50_us, l.p95_us, l.p99_us
        );
    }
    println!("p50 ratio (adapter / tonic alone): {:.3}", report.p50_ratio);
    println!(
        "adapter alone: {:.2} µs per request (HEADERS rewritten + DATA), {} requests",
        report.adapter_alone_us_per_request, report.adapter_alone_requests
    );
    Ok(())
}
