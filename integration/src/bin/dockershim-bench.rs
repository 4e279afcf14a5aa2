//! dockershim performance benchmark: the CRI calls through a spawned `dockershim` process
//! versus the equivalent Docker calls made directly with bollard, interleaved in one run (the
//! machine is noisy: compare ratios, not absolute times). Also ListContainers and
//! ListContainerStats with many running containers, and the RSS of the dockershim process.
//! Prints a markdown table; `--json FILE` writes every number. No timing assertions.
//!
//! `cargo run --release -p integration --bin dockershim-bench -- [--iterations N]
//! [--containers 300] [--json FILE]`

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, ListContainersOptions, RemoveContainerOptions,
    StatsOptions, StopContainerOptions,
};
use clap::Parser;
use cri_proto::runtime::v1 as cri;
use cri_proto::runtime::v1::runtime_service_client::RuntimeServiceClient;
use dockershim::{labels, naming};
use futures::StreamExt;
use integration::fixtures;
use integration::runtimes::ShimProcess;
use integration::testbed::Testbed;
use tonic::transport::Channel;

/// Label put on everything this run creates (through the shim or directly), for the sweep.
const RUN_LABEL: &str = "cri-bench.run";
/// The most any single call may take before the benchmark gives up on it.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// The shim's ListContainerStats concurrency (dockershim/src/stats.rs STATS_CONCURRENCY).
const SHIM_STATS_CONCURRENCY: usize = 32;
const OPS: [&str; 8] = [
    "RunPodSandbox",
    "CreateContainer",
    "StartContainer",
    "ContainerStatus",
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
];

#[derive(Debug, Parser)]
#[command(about = "Benchmark dockershim against direct Docker calls")]
struct Args {
    /// Lifecycle iterations (each runs the shim side and the direct side once).
    #[arg(long, default_value_t = 20)]
    iterations: usize,
    /// Running containers for the ListContainers / ListContainerStats phase (0 skips it).
    #[arg(long, default_value_t = 300)]
    containers: usize,
    /// Sandboxes the containers are spread over.
    #[arg(long, default_value_t = 10)]
    sandboxes: usize,
    /// Concurrency when creating the containers.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// ListContainers calls measured (each side).
    #[arg(long, default_value_t = 30)]
    list_calls: usize,
    /// ListContainerStats calls measured (each side).
    #[arg(long, default_value_t = 10)]
    stats_calls: usize,
    /// The dockershim binary (default: next to this binary, else target/release/dockershim).
    #[arg(long)]
    dockershim: Option<PathBuf>,
    /// Write all numbers as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// p50/p95/min/max of a sample, in milliseconds.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Summary {
    n: usize,
    p50_ms: f64,
    p95_ms: f64,
    min_ms: f64,
    max_ms: f64,
}

fn summarize(samples: &[Duration]) -> Summary {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    // Nearest-rank percentile.
    let pct = |p: f64| -> f64 {
        if ms.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * ms.len() as f64).ceil().max(1.0) as usize;
        ms[rank.min(ms.len()) - 1]
    };
    Summary {
        n: ms.len(),
        p50_ms: pct(50.0),
        p95_ms: pct(95.0),
        min_ms: ms.first().copied().unwrap_or(f64::NAN),
        max_ms: ms.last().copied().unwrap_or(f64::NAN),
    }
}

async fn bounded<T, E: std::fmt::Display>(
    what: &str,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(anyhow!("{what}: {e}")),
        Err(_) => Err(anyhow!("{what}: timed out after {CALL_TIMEOUT:?}")),
    }
}

/// VmRSS of `pid` in KiB.
fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no VmRSS for pid {pid}"))
}

fn find_shim_binary(arg: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(p) = arg {
        return Ok(p);
    }
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        candidates.push(dir.join("dockershim"));
    }
    candidates.push(PathBuf::from("target/release/dockershim"));
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow!("no dockershim binary: run `cargo build --workspace --release`"))
}

struct Ctx {
    rt: RuntimeServiceClient<Channel>,
    docker: Docker,
    tb: Testbed,
    run_id: String,
    log_root: PathBuf,
    pause_image: String,
}

impl Ctx {
    fn sandbox_config(&self) -> cri::PodSandboxConfig {
        let mut c = fixtures::sandbox_config("bench", &self.log_root);
        c.labels.insert(RUN_LABEL.to_string(), self.run_id.clone());
        c
    }

    fn container_config(&self, name: &str) -> cri::ContainerConfig {
        let mut c = fixtures::busybox_container(name, &self.tb.busybox_image, "");
        c.command = vec!["sleep".to_string(), "3600".to_string()];
        c.labels.insert(RUN_LABEL.to_string(), self.run_id.clone());
        c
    }

    /// The pause container body dockershim builds for `config` on Docker's default bridge
    /// (dockershim/src/sandbox.rs `sandbox_create_body`, for a config with no security
    /// context, ports or cgroup parent), with `--sandbox-oom-score-adj 0`.
    fn direct_sandbox_body(&self, config: &cri::PodSandboxConfig) -> ContainerCreateBody {
        let mut l = labels::make_labels(&config.labels, &config.annotations);
        l.insert(
            labels::CONTAINER_TYPE_LABEL_KEY.to_string(),
            labels::CONTAINER_TYPE_LABEL_SANDBOX.to_string(),
        );
        ContainerCreateBody {
            image: Some(self.pause_image.clone()),
            hostname: Some(config.hostname.clone()),
            labels: Some(l),
            host_config: Some(HostConfig {
                ipc_mode: Some("shareable".to_string()),
                oom_score_adj: Some(0),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The container body dockershim builds (container.rs `container_create_body`).
    fn direct_container_body(
        &self,
        sandbox_id: &str,
        sandbox: &cri::PodSandboxConfig,
        config: &cri::ContainerConfig,
    ) -> ContainerCreateBody {
        let mut l = labels::make_labels(&config.labels, &config.annotations);
        l.insert(
            labels::CONTAINER_TYPE_LABEL_KEY.to_string(),
            labels::CONTAINER_TYPE_LABEL_CONTAINER.to_string(),
        );
        l.insert(
            labels::SANDBOX_ID_LABEL_KEY.to_string(),
            sandbox_id.to_string(),
        );
        l.insert(
            labels::CONTAINER_LOG_PATH_LABEL_KEY.to_string(),
            Path::new(&sandbox.log_directory)
                .join(&config.log_path)
                .to_string_lossy()
                .into_owned(),
        );
        let sref = format!("container:{sandbox_id}");
        ContainerCreateBody {
            image: config.image.as_ref().map(|i| i.image.clone()),
            entrypoint: Some(config.command.clone()),
            env: Some(Vec::new()),
            labels: Some(l),
            tty: Some(false),
            open_stdin: Some(false),
            stdin_once: Some(false),
            attach_stdin: Some(false),
            host_config: Some(HostConfig {
                network_mode: Some(sref.clone()),
                ipc_mode: Some(sref),
                binds: Some(Vec::new()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    async fn d_create(&self, name: &str, body: ContainerCreateBody) -> Result<String> {
        let opts = CreateContainerOptions {
            name: Some(name.to_string()),
            platform: String::new(),
        };
        Ok(bounded(
            "docker create",
            self.docker.create_container(Some(opts), body),
        )
        .await?
        .id)
    }
    async fn d_inspect(&self, id: &str) -> Result<bollard::models::ContainerInspectResponse> {
        bounded(
            "docker inspect",
            self.docker
                .inspect_container(id, None::<InspectContainerOptions>),
        )
        .await
    }
    async fn d_start(&self, id: &str) -> Result<()> {
        bounded("docker start", self.docker.start_container(id, None)).await
    }
    async fn d_stop(&self, id: &str, t: i32) -> Result<()> {
        let opts = StopContainerOptions {
            signal: None,
            t: Some(t),
        };
        bounded("docker stop", self.docker.stop_container(id, Some(opts))).await
    }
    async fn d_remove(&self, id: &str) -> Result<()> {
        let opts = RemoveContainerOptions {
            v: true,
            force: true,
            link: false,
        };
        bounded("docker rm", self.docker.remove_container(id, Some(opts))).await
    }
    async fn d_list(
        &self,
        label: String,
        size: bool,
    ) -> Result<Vec<bollard::models::ContainerSummary>> {
        let opts = ListContainersOptions {
            all: true,
            size,
            filters: Some(HashMap::from([("label".to_string(), vec![label])])),
            ..Default::default()
        };
        bounded("docker ps", self.docker.list_containers(Some(opts))).await
    }
    async fn d_stats(&self, id: &str) -> Result<()> {
        let opts = StatsOptions {
            stream: false,
            one_shot: true,
        };
        let mut s = self.docker.stats(id, Some(opts));
        match tokio::time::timeout(CALL_TIMEOUT, s.next()).await {
            Ok(Some(r)) => r.map(|_| ()).map_err(|e| anyhow!("docker stats: {e}")),
            Ok(None) => bail!("docker stats {id}: empty"),
            Err(_) => bail!("docker stats {id}: timed out"),
        }
    }
}

type Timings = HashMap<&'static str, Vec<Duration>>;

fn record(t: &mut Timings, op: &'static str, start: Instant) {
    t.entry(op).or_default().push(start.elapsed());
}

/// One pod lifecycle through dockershim. Created ids go into `created` for cleanup.
async fn shim_lifecycle(ctx: &Ctx, t: &mut Timings, created: &mut Vec<String>) -> Result<()> {
    let mut rt = ctx.rt.clone();
    let sb = ctx.sandbox_config();
    let s = Instant::now();
    let sid = bounded(
        "RunPodSandbox",
        rt.run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(sb.clone()),
            runtime_handler: String::new(),
        }),
    )
    .await?
    .into_inner()
    .pod_sandbox_id;
    record(t, "RunPodSandbox", s);
    created.push(sid.clone());

    let cfg = ctx.container_config("bench");
    let s = Instant::now();
    let cid = bounded(
        "CreateContainer",
        rt.create_container(cri::CreateContainerRequest {
            pod_sandbox_id: sid.clone(),
            config: Some(cfg),
            sandbox_config: Some(sb),
        }),
    )
    .await?
    .into_inner()
    .container_id;
    record(t, "CreateContainer", s);
    created.push(cid.clone());

    let s = Instant::now();
    bounded(
        "StartContainer",
        rt.start_container(cri::StartContainerRequest {
            container_id: cid.clone(),
        }),
    )
    .await?;
    record(t, "StartContainer", s);

    let s = Instant::now();
    let st = bounded(
        "ContainerStatus",
        rt.container_status(cri::ContainerStatusRequest {
            container_id: cid.clone(),
            verbose: false,
        }),
    )
    .await?
    .into_inner();
    record(t, "ContainerStatus", s);
    if st.status.map(|s| s.state) != Some(cri::ContainerState::ContainerRunning as i32) {
        bail!("container {cid} is not running after StartContainer");
    }

    let s = Instant::now();
    bounded(
        "StopContainer",
        rt.stop_container(cri::StopContainerRequest {
            container_id: cid.clone(),
            timeout: 0,
        }),
    )
    .await?;
    record(t, "StopContainer", s);

    let s = Instant::now();
    bounded(
        "RemoveContainer",
        rt.remove_container(cri::RemoveContainerRequest {
            container_id: cid.clone(),
        }),
    )
    .await?;
    record(t, "RemoveContainer", s);

    let s = Instant::now();
    bounded(
        "StopPodSandbox",
        rt.stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: sid.clone(),
        }),
    )
    .await?;
    record(t, "StopPodSandbox", s);

    let s = Instant::now();
    bounded(
        "RemovePodSandbox",
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest {
            pod_sandbox_id: sid.clone(),
        }),
    )
    .await?;
    record(t, "RemovePodSandbox", s);
    Ok(())
}

/// The same lifecycle with the Docker calls dockershim must make at minimum, made directly.
async fn direct_lifecycle(ctx: &Ctx, t: &mut Timings, created: &mut Vec<String>) -> Result<()> {
    let sb = ctx.sandbox_config();
    let meta = sb.metadata.clone().unwrap_or_default();
    let pod = naming::SandboxNameParts {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        attempt: 0,
    };

    // RunPodSandbox = create + start + inspect.
    let s = Instant::now();
    let sid = ctx
        .d_create(
            &naming::make_sandbox_name(&pod),
            ctx.direct_sandbox_body(&sb),
        )
        .await?;
    created.push(sid.clone());
    ctx.d_start(&sid).await?;
    ctx.d_inspect(&sid).await?;
    record(t, "RunPodSandbox", s);

    // CreateContainer = inspect sandbox + create.
    let cfg = ctx.container_config("bench");
    let s = Instant::now();
    let sandbox = ctx.d_inspect(&sid).await?;
    let full_sid = sandbox.id.unwrap_or(sid.clone());
    let name = naming::make_container_name(&naming::ContainerNameParts {
        name: "bench".to_string(),
        attempt: 0,
        pod,
    });
    let cid = ctx
        .d_create(&name, ctx.direct_container_body(&full_sid, &sb, &cfg))
        .await?;
    record(t, "CreateContainer", s);
    created.push(cid.clone());

    // StartContainer = inspect + start.
    let s = Instant::now();
    ctx.d_inspect(&cid).await?;
    ctx.d_start(&cid).await?;
    record(t, "StartContainer", s);

    // ContainerStatus = inspect + image inspect.
    let s = Instant::now();
    let c = ctx.d_inspect(&cid).await?;
    let image = c.image.unwrap_or_default();
    bounded("docker image inspect", ctx.docker.inspect_image(&image)).await?;
    record(t, "ContainerStatus", s);

    // StopContainer = stop.
    let s = Instant::now();
    ctx.d_stop(&cid, 0).await?;
    record(t, "StopContainer", s);

    // RemoveContainer = inspect + remove.
    let s = Instant::now();
    ctx.d_inspect(&cid).await?;
    ctx.d_remove(&cid).await?;
    record(t, "RemoveContainer", s);

    let pod_label = format!("{}={full_sid}", labels::SANDBOX_ID_LABEL_KEY);
    // StopPodSandbox = inspect + list + stop (the shim stops sandboxes with a 10 s grace;
    // pause exits on SIGTERM at once).
    let s = Instant::now();
    ctx.d_inspect(&sid).await?;
    for c in ctx.d_list(pod_label.clone(), false).await? {
        if let Some(id) = c.id {
            ctx.d_stop(&id, 10).await?;
        }
    }
    ctx.d_stop(&full_sid, 10).await?;
    record(t, "StopPodSandbox", s);

    // RemovePodSandbox = inspect + list + remove.
    let s = Instant::now();
    ctx.d_inspect(&sid).await?;
    for c in ctx.d_list(pod_label, false).await? {
        if let Some(id) = c.id {
            ctx.d_remove(&id).await?;
        }
    }
    ctx.d_remove(&full_sid).await?;
    record(t, "RemovePodSandbox", s);
    Ok(())
}

/// Stops (timeout 0) and removes, with bollard, everything labelled with this run's id.
async fn sweep(ctx: &Ctx) -> usize {
    let Ok(list) = ctx
        .d_list(format!("{RUN_LABEL}={}", ctx.run_id), false)
        .await
    else {
        return 0;
    };
    let ids: Vec<String> = list.into_iter().filter_map(|c| c.id).collect();
    let n = ids.len();
    futures::stream::iter(ids)
        .map(|id| async move {
            let _ = ctx.d_stop(&id, 0).await;
            let _ = ctx.d_remove(&id).await;
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    n
}

#[derive(Debug, serde::Serialize)]
struct OpResult {
    op: &'static str,
    dockershim: Summary,
    direct: Summary,
    ratio_p50: f64,
}

#[derive(Debug, Default, serde::Serialize)]
struct ScaleResult {
    containers: usize,
    sandboxes: usize,
    setup_seconds: f64,
    list_containers_returned: usize,
    list_containers: Option<Summary>,
    docker_list: Option<Summary>,
    docker_list_with_sizes: Option<Summary>,
    list_container_stats_returned: usize,
    list_container_stats: Option<Summary>,
    direct_stats: Option<Summary>,
}

async fn scale_phase(
    ctx: &Ctx,
    args: &Args,
    shim_pid: u32,
    out: &mut ScaleResult,
    rss_loaded: &mut Option<u64>,
) -> Result<()> {
    let setup = Instant::now();
    let mut sandboxes = Vec::new();
    for _ in 0..args.sandboxes.max(1) {
        let sb = ctx.sandbox_config();
        let sid = bounded(
            "RunPodSandbox",
            ctx.rt.clone().run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(sb.clone()),
                runtime_handler: String::new(),
            }),
        )
        .await?
        .into_inner()
        .pod_sandbox_id;
        sandboxes.push((sid, sb));
    }
    let jobs: Vec<(usize, String, cri::PodSandboxConfig)> = (0..args.containers)
        .map(|i| {
            let (sid, sb) = &sandboxes[i % sandboxes.len()];
            (i, sid.clone(), sb.clone())
        })
        .collect();
    let results: Vec<Result<()>> = futures::stream::iter(jobs)
        .map(|(i, sid, sb)| async move {
            let mut rt = ctx.rt.clone();
            let cid = bounded(
                "CreateContainer",
                rt.create_container(cri::CreateContainerRequest {
                    pod_sandbox_id: sid,
                    config: Some(ctx.container_config(&format!("c{i}"))),
                    sandbox_config: Some(sb),
                }),
            )
            .await?
            .into_inner()
            .container_id;
            bounded(
                "StartContainer",
                rt.start_container(cri::StartContainerRequest { container_id: cid }),
            )
            .await?;
            Ok(())
        })
        .buffer_unordered(args.concurrency.max(1))
        .collect()
        .await;
    let failed: Vec<_> = results.into_iter().filter_map(|r| r.err()).collect();
    if let Some(e) = failed.first() {
        bail!(
            "{} of {} containers failed: {e}",
            failed.len(),
            args.containers
        );
    }
    out.setup_seconds = setup.elapsed().as_secs_f64();
    eprintln!(
        "{} containers in {} sandboxes created and started in {:.1} s",
        args.containers,
        sandboxes.len(),
        out.setup_seconds
    );

    // ListContainers vs docker ps, interleaved.
    let type_label = format!(
        "{}={}",
        labels::CONTAINER_TYPE_LABEL_KEY,
        labels::CONTAINER_TYPE_LABEL_CONTAINER
    );
    let (mut shim, mut direct) = (Vec::new(), Vec::new());
    for i in 0..args.list_calls {
        for side in if i % 2 == 0 { [0, 1] } else { [1, 0] } {
            let s = Instant::now();
            if side == 0 {
                let n = bounded(
                    "ListContainers",
                    ctx.rt
                        .clone()
                        .list_containers(cri::ListContainersRequest { filter: None }),
                )
                .await?
                .into_inner()
                .containers
                .len();
                shim.push(s.elapsed());
                out.list_containers_returned = n;
            } else {
                ctx.d_list(type_label.clone(), false).await?;
                direct.push(s.elapsed());
            }
        }
    }
    out.list_containers = Some(summarize(&shim));
    out.docker_list = Some(summarize(&direct));

    // What a size=true list would cost (dockershim never does this on the request path).
    let mut sized = Vec::new();
    for _ in 0..3 {
        let s = Instant::now();
        ctx.d_list(type_label.clone(), true).await?;
        sized.push(s.elapsed());
    }
    out.docker_list_with_sizes = Some(summarize(&sized));

    // ListContainerStats vs list + N one-shot stats with the shim's concurrency, interleaved.
    let (mut shim, mut direct) = (Vec::new(), Vec::new());
    for i in 0..args.stats_calls {
        for side in if i % 2 == 0 { [0, 1] } else { [1, 0] } {
            let s = Instant::now();
            if side == 0 {
                let n = bounded(
                    "ListContainerStats",
                    ctx.rt
                        .clone()
                        .list_container_stats(cri::ListContainerStatsRequest { filter: None }),
                )
                .await?
                .into_inner()
                .stats
                .len();
                shim.push(s.elapsed());
                out.list_container_stats_returned = n;
            } else {
                let ids: Vec<String> = ctx
                    .d_list(type_label.clone(), false)
                    .await?
                    .into_iter()
                    .filter(|c| {
                        c.state.as_ref().map(|s| s.to_string()).as_deref() == Some("running")
                    })
                    .filter_map(|c| c.id)
                    .collect();
                // Like the shim, a container that stopped between list and stats is skipped
                // (other users of this Docker may be starting and stopping containers).
                futures::stream::iter(ids)
                    .map(|id| async move { ctx.d_stats(&id).await })
                    .buffer_unordered(SHIM_STATS_CONCURRENCY)
                    .collect::<Vec<Result<()>>>()
                    .await;
                direct.push(s.elapsed());
            }
        }
    }
    out.list_container_stats = Some(summarize(&shim));
    out.direct_stats = Some(summarize(&direct));
    *rss_loaded = rss_kib(shim_pid).ok();
    Ok(())
}

fn fmt_ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

fn mib(kib: Option<u64>) -> String {
    kib.map(|k| format!("{:.1} MiB", k as f64 / 1024.0))
        .unwrap_or_else(|| "n/a".to_string())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let tb = Testbed::get("dockershim-bench")
        .ok_or_else(|| anyhow!("the test bed is needed (root, hack/testbed.sh up)"))?;
    let shim_bin = find_shim_binary(args.dockershim.clone())?;
    let tmp = tempfile::Builder::new()
        .prefix("dockershim-bench")
        .tempdir()?;
    let mut shim = ShimProcess::spawn(
        &shim_bin,
        tmp.path(),
        [
            "--docker-endpoint".into(),
            tb.docker_endpoint.clone().into(),
            "--pod-infra-container-image".into(),
            tb.pause_image.clone().into(),
            "--sandbox-oom-score-adj".into(),
            "0".into(),
            // Docker's default bridge, as the raw Docker calls it is compared with.
            "--network-plugin=no-op".into(),
        ],
    )
    .await?;
    let endpoint = shim.endpoint.clone();
    let pid = shim.pid();
    let channel = cri_proto::connect(&endpoint, Duration::from_secs(10)).await?;
    let rt = cri_proto::runtime_client(channel);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_idle = rss_kib(pid).ok();

    let docker_path = tb
        .docker_endpoint
        .strip_prefix("unix://")
        .unwrap_or(&tb.docker_endpoint)
        .to_string();
    let docker = Docker::connect_with_unix(&docker_path, 120, bollard::API_DEFAULT_VERSION)?
        .negotiate_version()
        .await?;
    let version = docker.version().await?;
    let ctx = Ctx {
        rt,
        docker,
        pause_image: tb.pause_image.clone(),
        tb,
        run_id: fixtures::unique_name("run"),
        log_root: tmp.path().join("logs"),
    };

    let started = Instant::now();
    let mut shim_t = Timings::new();
    let mut direct_t = Timings::new();
    let mut scale = ScaleResult {
        containers: args.containers,
        sandboxes: args.sandboxes,
        ..Default::default()
    };
    let mut rss_loaded = None;
    let outcome: Result<()> = async {
        // One warm-up lifecycle each, not recorded.
        let mut created = Vec::new();
        shim_lifecycle(&ctx, &mut Timings::new(), &mut created).await?;
        direct_lifecycle(&ctx, &mut Timings::new(), &mut created).await?;
        for i in 0..args.iterations {
            let mut created = Vec::new();
            if i % 2 == 0 {
                shim_lifecycle(&ctx, &mut shim_t, &mut created).await?;
                direct_lifecycle(&ctx, &mut direct_t, &mut created).await?;
            } else {
                direct_lifecycle(&ctx, &mut direct_t, &mut created).await?;
                shim_lifecycle(&ctx, &mut shim_t, &mut created).await?;
            }
        }
        eprintln!(
            "lifecycle: {} iterations in {:.1} s",
            args.iterations,
            started.elapsed().as_secs_f64()
        );
        if args.containers > 0 {
            scale_phase(&ctx, &args, pid, &mut scale, &mut rss_loaded).await?;
        }
        Ok(())
    }
    .await;
    let cleanup = Instant::now();
    let swept = sweep(&ctx).await;
    let leftover = ctx
        .d_list(format!("{RUN_LABEL}={}", ctx.run_id), false)
        .await
        .map(|l| l.len())
        .unwrap_or(usize::MAX);
    eprintln!(
        "cleanup: removed {swept} containers in {:.1} s; {leftover} left",
        cleanup.elapsed().as_secs_f64()
    );
    shim.terminate();
    outcome?;

    let ops: Vec<OpResult> = OPS
        .iter()
        .map(|op| {
            let d = summarize(shim_t.get(op).map(Vec::as_slice).unwrap_or(&[]));
            let b = summarize(direct_t.get(op).map(Vec::as_slice).unwrap_or(&[]));
            OpResult {
                op,
                dockershim: d,
                direct: b,
                ratio_p50: d.p50_ms / b.p50_ms,
            }
        })
        .collect();

    println!(
        "## dockershim benchmark ({} iterations, {} containers; Docker {} API {})\n",
        args.iterations,
        args.containers,
        version.version.unwrap_or_default(),
        version.api_version.unwrap_or_default()
    );
    println!("### Lifecycle: CRI via dockershim vs direct Docker calls (ms)\n");
    println!(
        "| operation | shim p50 | shim p95 | shim min | shim max | direct p50 | direct p95 | direct min | direct max | ratio p50 | target <= 1.1 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in &ops {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {} |",
            r.op,
            fmt_ms(r.dockershim.p50_ms),
            fmt_ms(r.dockershim.p95_ms),
            fmt_ms(r.dockershim.min_ms),
            fmt_ms(r.dockershim.max_ms),
            fmt_ms(r.direct.p50_ms),
            fmt_ms(r.direct.p95_ms),
            fmt_ms(r.direct.min_ms),
            fmt_ms(r.direct.max_ms),
            r.ratio_p50,
            if r.ratio_p50 <= 1.1 { "met" } else { "NOT met" }
        );
    }
    if args.containers > 0 {
        let row = |name: &str, s: Option<Summary>, target: &str| {
            if let Some(s) = s {
                println!(
                    "| {name} | {} | {} | {} | {} | {target} |",
                    s.n,
                    fmt_ms(s.p50_ms),
                    fmt_ms(s.p95_ms),
                    fmt_ms(s.max_ms)
                );
            }
        };
        println!(
            "\n### {} running containers in {} sandboxes (created and started in {:.1} s)\n",
            scale.containers, scale.sandboxes, scale.setup_seconds
        );
        println!("| call | calls | p50 ms | p95 ms | max ms | target |");
        println!("|---|---:|---:|---:|---:|---|");
        let lc = scale.list_containers.map(|s| s.p50_ms).unwrap_or(f64::NAN);
        let ls = scale
            .list_container_stats
            .map(|s| s.p50_ms)
            .unwrap_or(f64::NAN);
        row(
            &format!(
                "CRI ListContainers ({} returned)",
                scale.list_containers_returned
            ),
            scale.list_containers,
            if lc < 20.0 {
                "< 20 ms: met"
            } else {
                "< 20 ms: NOT met"
            },
        );
        row("docker ps (all, label filter)", scale.docker_list, "");
        row(
            "docker ps size=true (reference only)",
            scale.docker_list_with_sizes,
            "",
        );
        row(
            &format!(
                "CRI ListContainerStats ({} returned)",
                scale.list_container_stats_returned
            ),
            scale.list_container_stats,
            if ls < 200.0 {
                "< 200 ms: met"
            } else {
                "< 200 ms: NOT met"
            },
        );
        row(
            &format!("docker ps + one-shot stats x N (concurrency {SHIM_STATS_CONCURRENCY})"),
            scale.direct_stats,
            "",
        );
    }
    println!("\n### dockershim RSS (VmRSS)\n");
    println!("| when | RSS | target |");
    println!("|---|---:|---|");
    let met = |k: Option<u64>, limit: u64| match k {
        Some(k) if k < limit * 1024 => "met",
        Some(_) => "NOT met",
        None => "n/a",
    };
    println!(
        "| idle (after start) | {} | < 20 MiB: {} |",
        mib(rss_idle),
        met(rss_idle, 20)
    );
    println!(
        "| with {} containers (after list/stats) | {} | < 40 MiB: {} |",
        args.containers,
        mib(rss_loaded),
        met(rss_loaded, 40)
    );
    println!(
        "\nTotal {:.1} s; cleanup removed {swept} containers, {leftover} left.",
        started.elapsed().as_secs_f64()
    );

    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "iterations": args.iterations,
            "lifecycle": ops,
            "scale": scale,
            "rss_idle_kib": rss_idle,
            "rss_loaded_kib": rss_loaded,
            "total_seconds": started.elapsed().as_secs_f64(),
            "leftover_containers": leftover,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
