//! The CRI benchmark (binary `cri-bench`): per-operation latency (min, p50, p95, p99, max) and
//! throughput of any CRI runtime, with N parallel workers, for the sandbox lifecycle, the
//! container lifecycle, ContainerStatus, ExecSync, ImageStatus, ListContainers with a
//! configurable number of extra containers alive, and "start a container from scratch"
//! (RunPodSandbox + CreateContainer + StartContainer). Several endpoints are measured in one
//! run, interleaved round by round, so the machine's noise falls on all of them alike; the
//! report gives each operation's p50 ratio to the first endpoint. It measures and reports; it
//! asserts nothing about time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use cri_proto::runtime::v1::image_service_client::ImageServiceClient;
use cri_proto::runtime::v1::runtime_service_client::RuntimeServiceClient;
use serde::Serialize;
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::fixtures::{
    busybox_container, cleanup_sandboxes, ensure_image, prepare_log_dir, sandbox_config,
};

/// The operations, in the order a round runs them.
pub const OPERATIONS: &[&str] = &[
    "RunPodSandbox",
    "PodSandboxStatus",
    "CreateContainer",
    "StartContainer",
    "start from scratch",
    "ContainerStatus",
    "ExecSync",
    "ImageStatus",
    "ListContainers",
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
    "PullImage",
    "RemoveImage (tag)",
    "RemoveImage (id)",
];

/// What to run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Parallel workers per phase.
    pub workers: usize,
    /// Rounds per endpoint.
    pub rounds: usize,
    /// Extra running containers kept alive on each endpoint while ListContainers is timed.
    pub containers: usize,
    pub image: String,
    /// Where sandbox log directories go.
    pub log_root: PathBuf,
    /// Per-call timeout.
    pub timeout: Duration,
    /// The image of the pull phase (absent from the runtime before each pull), if any.
    pub pull_image: Option<String>,
    /// Pull phases per round: each pulls the image and removes it by tag, then pulls it again
    /// and removes it by id. The pulls are sequential (one image, one worker).
    pub pulls: usize,
}

/// One endpoint under test.
pub struct Target {
    pub name: String,
    pub rt: RuntimeServiceClient<Channel>,
    pub img: ImageServiceClient<Channel>,
}

/// Latency figures of one operation on one endpoint (milliseconds) and its throughput.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OpStats {
    pub count: usize,
    pub errors: usize,
    pub min_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Operations per second over the phases' wall time (all workers together).
    pub ops_per_sec: f64,
    /// For every endpoint but the first: a 95 % interval of its p50 ratio to the first
    /// endpoint's, by a paired bootstrap over the rounds (see [`ratio_interval`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_ratio_ci95: Option<[f64; 2]>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub workers: usize,
    pub rounds: usize,
    pub containers: usize,
    pub endpoints: Vec<String>,
    /// operation -> endpoint -> stats.
    pub operations: BTreeMap<String, BTreeMap<String, OpStats>>,
    /// endpoint -> how often the image was still there after a successful RemoveImage by tag
    /// (the benchmark then removed it by id, untimed, so that every pull is a real one).
    pub remove_by_tag_left_image: BTreeMap<String, usize>,
    pub total_seconds: f64,
}

#[derive(Default)]
struct Samples {
    latencies: Vec<Duration>,
    errors: usize,
    wall: Duration,
    /// (round, end): the latencies of `round` end before index `end` (and begin at the end of
    /// the entry before).
    round_ends: Vec<(usize, usize)>,
}

/// The `p`-th percentile of sorted samples, in milliseconds.
pub fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[idx.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

impl Samples {
    fn stats(&self) -> OpStats {
        let mut s = self.latencies.clone();
        s.sort();
        let wall = self.wall.as_secs_f64();
        OpStats {
            count: s.len(),
            errors: self.errors,
            min_ms: percentile(&s, 0.0),
            p50_ms: percentile(&s, 50.0),
            p95_ms: percentile(&s, 95.0),
            p99_ms: percentile(&s, 99.0),
            max_ms: percentile(&s, 100.0),
            ops_per_sec: if wall > 0.0 {
                s.len() as f64 / wall
            } else {
                0.0
            },
            p50_ratio_ci95: None,
        }
    }

    /// Marks the end of `round`'s samples.
    fn end_round(&mut self, round: usize) {
        self.round_ends.push((round, self.latencies.len()));
    }

    /// The latencies of each round, by round.
    fn by_round(&self) -> BTreeMap<usize, &[Duration]> {
        let mut out = BTreeMap::new();
        let mut begin = 0;
        for &(round, end) in &self.round_ends {
            if end > begin {
                out.insert(round, &self.latencies[begin..end]);
            }
            begin = end;
        }
        out
    }
}

/// Resamples in [`paired_ratio_interval`].
const BOOTSTRAP_RESAMPLES: usize = 2000;

/// A 95 % interval of `other`'s p50 over `base`'s, by a paired bootstrap over rounds: each
/// resample draws rounds with replacement and takes both endpoints' samples of those rounds, so
/// the machine's drift from round to round (which the interleaving puts on both alike) stays
/// paired. `None` with fewer than 5 rounds that both have samples of. A ratio whose interval
/// holds 1.0 is within what this run can tell apart.
fn ratio_interval(base: &Samples, other: &Samples, seed: u64) -> Option<[f64; 2]> {
    let (a, b) = (base.by_round(), other.by_round());
    let rounds: Vec<(&[Duration], &[Duration])> = a
        .iter()
        .filter_map(|(r, x)| b.get(r).map(|y| (*x, *y)))
        .collect();
    paired_ratio_interval(&rounds, seed)
}

/// The paired bootstrap of [`ratio_interval`] over `rounds`, each a round's (base, other)
/// samples: a 95 % interval of the p50 of `other` over the p50 of `base`. `None` with fewer
/// than 5 rounds. kubelet-bench gives it one sample a side per repetition.
pub fn paired_ratio_interval(rounds: &[(&[Duration], &[Duration])], seed: u64) -> Option<[f64; 2]> {
    use rand::{RngExt, SeedableRng};
    if rounds.len() < 5 {
        return None;
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut ratios = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for _ in 0..BOOTSTRAP_RESAMPLES {
        xs.clear();
        ys.clear();
        for _ in 0..rounds.len() {
            let (x, y) = rounds[rng.random_range(0..rounds.len())];
            xs.extend_from_slice(x);
            ys.extend_from_slice(y);
        }
        xs.sort();
        ys.sort();
        let base_p50 = percentile(&xs, 50.0);
        if base_p50 > 0.0 {
            ratios.push(percentile(&ys, 50.0) / base_p50);
        }
    }
    if ratios.is_empty() {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    let at =
        |q: f64| ratios[((q * (ratios.len() - 1) as f64).round() as usize).min(ratios.len() - 1)];
    Some([at(0.025), at(0.975)])
}

/// Runs `f` for every worker at once; records each latency and the phase's wall time.
async fn phase<T, F, Fut>(samples: &mut Samples, inputs: Vec<T>, f: F) -> Vec<Option<T>>
where
    T: Clone,
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let start = Instant::now();
    let results = futures::future::join_all(inputs.into_iter().map(|i| {
        let fut = f(i);
        async move {
            let t = Instant::now();
            let r = fut.await;
            (t.elapsed(), r)
        }
    }))
    .await;
    samples.wall += start.elapsed();
    results
        .into_iter()
        .map(|(d, r)| match r {
            Ok(v) => {
                samples.latencies.push(d);
                Some(v)
            }
            Err(e) => {
                tracing::warn!(error = %e, "benchmark call failed");
                samples.errors += 1;
                None
            }
        })
        .collect()
}

/// One worker's objects during a round.
#[derive(Clone, Default)]
struct Unit {
    sandbox: String,
    config: Option<cri::PodSandboxConfig>,
    container: String,
    started_at: Option<Instant>,
}

async fn with_timeout<T>(
    d: Duration,
    f: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, tonic::Status> {
    match tokio::time::timeout(d, f).await {
        Ok(r) => r.map(|r| r.into_inner()),
        Err(_) => Err(tonic::Status::deadline_exceeded("benchmark call timed out")),
    }
}

/// One round on one endpoint: every phase with `workers` units in parallel.
async fn round(
    t: &Target,
    s: &Settings,
    samples: &mut BTreeMap<&'static str, Samples>,
    leftovers: &mut Vec<String>,
) {
    let to = s.timeout;
    let units: Vec<Unit> = (0..s.workers)
        .map(|_| Unit {
            config: Some(sandbox_config("bench", &s.log_root)),
            ..Default::default()
        })
        .collect();
    let rt = t.rt.clone();
    let sm = samples.entry("RunPodSandbox").or_default();
    let units = phase(sm, units, |mut u| {
        let mut rt = rt.clone();
        async move {
            u.started_at = Some(Instant::now());
            let r = with_timeout(
                to,
                rt.run_pod_sandbox(cri::RunPodSandboxRequest {
                    config: u.config.clone(),
                    runtime_handler: String::new(),
                }),
            )
            .await?;
            u.sandbox = r.pod_sandbox_id;
            Ok(u)
        }
    })
    .await;
    let units: Vec<Unit> = units.into_iter().flatten().collect();
    leftovers.extend(units.iter().map(|u| u.sandbox.clone()));

    let sm = samples.entry("PodSandboxStatus").or_default();
    phase(sm, units.clone(), |u| {
        let mut rt = rt.clone();
        async move {
            with_timeout(
                to,
                rt.pod_sandbox_status(cri::PodSandboxStatusRequest {
                    pod_sandbox_id: u.sandbox.clone(),
                    verbose: false,
                }),
            )
            .await?;
            Ok(u)
        }
    })
    .await;

    let image = s.image.clone();
    let sm = samples.entry("CreateContainer").or_default();
    let units: Vec<Unit> = phase(sm, units, |mut u| {
        let mut rt = rt.clone();
        let image = image.clone();
        async move {
            let config = busybox_container("app", &image, "sleep 3600");
            if let Some(sandbox) = &u.config {
                prepare_log_dir(sandbox, &config);
            }
            let r = with_timeout(
                to,
                rt.create_container(cri::CreateContainerRequest {
                    pod_sandbox_id: u.sandbox.clone(),
                    config: Some(config),
                    sandbox_config: u.config.clone(),
                }),
            )
            .await?;
            u.container = r.container_id;
            Ok(u)
        }
    })
    .await
    .into_iter()
    .flatten()
    .collect();

    let sm = samples.entry("StartContainer").or_default();
    let started = phase(sm, units.clone(), |u| {
        let mut rt = rt.clone();
        async move {
            with_timeout(
                to,
                rt.start_container(cri::StartContainerRequest {
                    container_id: u.container.clone(),
                }),
            )
            .await?;
            Ok(u)
        }
    })
    .await;
    // From scratch: from the RunPodSandbox call to StartContainer's answer, per worker.
    let scratch = samples.entry("start from scratch").or_default();
    let done = Instant::now();
    for u in started.iter().flatten() {
        if let Some(t0) = u.started_at {
            scratch.latencies.push(done.duration_since(t0));
        }
    }
    scratch.wall += units
        .iter()
        .filter_map(|u| u.started_at)
        .min()
        .map(|t0| done.duration_since(t0))
        .unwrap_or_default();

    let sm = samples.entry("ContainerStatus").or_default();
    phase(sm, units.clone(), |u| {
        let mut rt = rt.clone();
        async move {
            with_timeout(
                to,
                rt.container_status(cri::ContainerStatusRequest {
                    container_id: u.container.clone(),
                    verbose: false,
                }),
            )
            .await?;
            Ok(u)
        }
    })
    .await;

    let sm = samples.entry("ExecSync").or_default();
    phase(sm, units.clone(), |u| {
        let mut rt = rt.clone();
        async move {
            let r = with_timeout(
                to,
                rt.exec_sync(cri::ExecSyncRequest {
                    container_id: u.container.clone(),
                    cmd: vec!["echo".into(), "hello".into()],
                    timeout: 10,
                }),
            )
            .await?;
            if r.exit_code != 0 {
                return Err(tonic::Status::internal(format!(
                    "exit code {}",
                    r.exit_code
                )));
            }
            Ok(u)
        }
    })
    .await;

    let img = t.img.clone();
    let sm = samples.entry("ImageStatus").or_default();
    phase(sm, units.clone(), |u| {
        let mut img = img.clone();
        let image = image.clone();
        async move {
            let r = with_timeout(
                to,
                img.image_status(cri::ImageStatusRequest {
                    image: Some(cri::ImageSpec {
                        image,
                        ..Default::default()
                    }),
                    verbose: false,
                }),
            )
            .await?;
            if r.image.is_none() {
                return Err(tonic::Status::not_found("image missing"));
            }
            Ok(u)
        }
    })
    .await;

    let sm = samples.entry("ListContainers").or_default();
    phase(sm, units.clone(), |u| {
        let mut rt = rt.clone();
        async move {
            with_timeout(
                to,
                rt.list_containers(cri::ListContainersRequest { filter: None }),
            )
            .await?;
            Ok(u)
        }
    })
    .await;

    let sm = samples.entry("StopContainer").or_default();
    phase(sm, units.clone(), |u| {
        let mut rt = rt.clone();
        async move {
            with_timeout(
                to,
                rt.stop_container(cri::StopContainerRequest {
                    container_id: u.container.clone(),
                    timeout: 0,
                }),
            )
            .await?;
            Ok(u)
        }
    })
    .await;
    let sm = samples.entry("RemoveContainer").or_default();
    phase(sm, units.clone(), |u| {
        let mut rt = rt.clone();
        async move {
            with_timeout(
                to,
                rt.remove_container(cri::RemoveContainerRequest {
                    container_id: u.container.clone(),
                }),
            )
            .await?;
            Ok(u)
        }
    })
    .await;
    let sm = samples.entry("StopPodSandbox").or_default();
    phase(sm, units.clone(), |u| {
        let mut rt = rt.clone();
        async move {
            with_timeout(
                to,
                rt.stop_pod_sandbox(cri::StopPodSandboxRequest {
                    pod_sandbox_id: u.sandbox.clone(),
                }),
            )
            .await?;
            Ok(u)
        }
    })
    .await;
    let sm = samples.entry("RemovePodSandbox").or_default();
    let removed = phase(sm, units.clone(), |u| {
        let mut rt = rt.clone();
        async move {
            with_timeout(
                to,
                rt.remove_pod_sandbox(cri::RemovePodSandboxRequest {
                    pod_sandbox_id: u.sandbox.clone(),
                }),
            )
            .await?;
            Ok(u)
        }
    })
    .await;
    let gone: std::collections::HashSet<String> =
        removed.into_iter().flatten().map(|u| u.sandbox).collect();
    leftovers.retain(|id| !gone.contains(id));
}

async fn image_status_of(
    img: &mut ImageServiceClient<Channel>,
    image: &str,
    to: Duration,
) -> Result<Option<cri::Image>, tonic::Status> {
    Ok(with_timeout(
        to,
        img.image_status(cri::ImageStatusRequest {
            image: Some(image_spec(image)),
            verbose: false,
        }),
    )
    .await?
    .image)
}

fn image_spec(image: &str) -> cri::ImageSpec {
    cri::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    }
}

/// Times one PullImage of `image` (absent before the call).
async fn timed_pull(
    img: &ImageServiceClient<Channel>,
    image: &str,
    to: Duration,
    samples: &mut BTreeMap<&'static str, Samples>,
) -> bool {
    let sm = samples.entry("PullImage").or_default();
    let r = phase(sm, vec![()], |()| {
        let mut c = img.clone();
        async move {
            with_timeout(
                to,
                c.pull_image(cri::PullImageRequest {
                    image: Some(image_spec(image)),
                    ..Default::default()
                }),
            )
            .await?;
            Ok(())
        }
    })
    .await;
    r.into_iter().flatten().next().is_some()
}

/// Times one RemoveImage of `reference` under the operation name `op`.
async fn timed_remove(
    img: &ImageServiceClient<Channel>,
    reference: &str,
    op: &'static str,
    to: Duration,
    samples: &mut BTreeMap<&'static str, Samples>,
) {
    let sm = samples.entry(op).or_default();
    phase(sm, vec![()], |()| {
        let mut c = img.clone();
        async move {
            with_timeout(
                to,
                c.remove_image(cri::RemoveImageRequest {
                    image: Some(image_spec(reference)),
                }),
            )
            .await?;
            Ok(())
        }
    })
    .await;
}

/// The pull phase of a round on one endpoint: pull, remove by tag; pull, remove by id. After
/// each removal the image must be gone, so that the next pull downloads it again on every
/// endpoint alike: a RemoveImage by tag that answered OK but left the image (cri-dockerd 0.3.7
/// removes nothing when given a tag) is counted and the image is removed by id, untimed.
async fn image_round(
    t: &Target,
    s: &Settings,
    samples: &mut BTreeMap<&'static str, Samples>,
    left: &mut usize,
) {
    let Some(image) = s.pull_image.as_deref() else {
        return;
    };
    let to = s.timeout;
    let mut img = t.img.clone();
    for _ in 0..s.pulls {
        if !timed_pull(&img, image, to, samples).await {
            continue;
        }
        timed_remove(&img, image, "RemoveImage (tag)", to, samples).await;
        if let Ok(Some(still)) = image_status_of(&mut img, image, to).await {
            *left += 1;
            let _ = with_timeout(
                to,
                img.remove_image(cri::RemoveImageRequest {
                    image: Some(image_spec(&still.id)),
                }),
            )
            .await;
        }
        if !timed_pull(&img, image, to, samples).await {
            continue;
        }
        match image_status_of(&mut img, image, to).await {
            Ok(Some(pulled)) => {
                timed_remove(&img, &pulled.id, "RemoveImage (id)", to, samples).await;
            }
            Ok(None) => tracing::warn!(endpoint = %t.name, "the pulled image is absent"),
            Err(e) => tracing::warn!(endpoint = %t.name, error = %e, "ImageStatus after a pull"),
        }
    }
}

/// Makes sure `image` is absent on `t` before the pull phases (by its id, which every runtime
/// removes with all its tags).
async fn remove_pull_image(t: &mut Target, s: &Settings) {
    let Some(image) = s.pull_image.as_deref() else {
        return;
    };
    if let Ok(Some(present)) = image_status_of(&mut t.img, image, s.timeout).await {
        let _ = with_timeout(
            s.timeout,
            t.img.remove_image(cri::RemoveImageRequest {
                image: Some(image_spec(&present.id)),
            }),
        )
        .await;
    }
}

/// Starts `n` long-running containers in one sandbox on `t` (the population ListContainers
/// sees). Returns the sandbox id.
async fn populate(t: &mut Target, s: &Settings, n: usize) -> Result<String, tonic::Status> {
    let config = sandbox_config("bench-population", &s.log_root);
    let sid = with_timeout(
        s.timeout,
        t.rt.run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        }),
    )
    .await?
    .pod_sandbox_id;
    for i in 0..n {
        let container = busybox_container(&format!("c{i}"), &s.image, "sleep 3600");
        prepare_log_dir(&config, &container);
        let id = with_timeout(
            s.timeout,
            t.rt.create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sid.clone(),
                config: Some(container),
                sandbox_config: Some(config.clone()),
            }),
        )
        .await?
        .container_id;
        with_timeout(
            s.timeout,
            t.rt.start_container(cri::StartContainerRequest { container_id: id }),
        )
        .await?;
    }
    Ok(sid)
}

/// Runs the benchmark on every target, interleaved by round, and cleans up after itself.
pub async fn run(targets: &mut [Target], s: &Settings) -> Report {
    let start = Instant::now();
    let mut samples: Vec<BTreeMap<&'static str, Samples>> =
        targets.iter().map(|_| BTreeMap::new()).collect();
    let mut leftovers: Vec<Vec<String>> = targets.iter().map(|_| Vec::new()).collect();
    let mut left_images: Vec<usize> = targets.iter().map(|_| 0).collect();
    for t in targets.iter_mut() {
        if let Err(e) = ensure_image(&mut t.img, &s.image).await {
            tracing::warn!(endpoint = %t.name, error = %e, "pulling the benchmark image failed");
        }
        remove_pull_image(t, s).await;
    }
    let mut populations = Vec::new();
    for (i, t) in targets.iter_mut().enumerate() {
        match populate(t, s, s.containers).await {
            Ok(sid) => populations.push((i, sid)),
            Err(e) => {
                tracing::warn!(endpoint = %t.name, error = %e, "starting the ListContainers population failed")
            }
        }
    }
    for r in 0..s.rounds {
        // Alternate which endpoint goes first.
        let n = targets.len();
        for k in 0..n {
            let i = (r + k) % n;
            round(&targets[i], s, &mut samples[i], &mut leftovers[i]).await;
            image_round(&targets[i], s, &mut samples[i], &mut left_images[i]).await;
            for sm in samples[i].values_mut() {
                sm.end_round(r);
            }
        }
    }
    for (i, sid) in populations {
        leftovers[i].push(sid);
    }
    for (t, ids) in targets.iter_mut().zip(&leftovers) {
        cleanup_sandboxes(&mut t.rt, ids).await;
    }
    let mut operations: BTreeMap<String, BTreeMap<String, OpStats>> = BTreeMap::new();
    for (k, op) in OPERATIONS.iter().enumerate() {
        let base = samples.first().and_then(|sm| sm.get(op));
        for (j, (t, sm)) in targets.iter().zip(&samples).enumerate() {
            let mut st = sm.get(op).map(Samples::stats).unwrap_or(OpStats {
                count: 0,
                errors: 0,
                min_ms: 0.0,
                p50_ms: 0.0,
                p95_ms: 0.0,
                p99_ms: 0.0,
                max_ms: 0.0,
                ops_per_sec: 0.0,
                p50_ratio_ci95: None,
            });
            if j > 0
                && let (Some(base), Some(own)) = (base, sm.get(op))
            {
                st.p50_ratio_ci95 = ratio_interval(base, own, (k * 64 + j) as u64);
            }
            operations
                .entry(op.to_string())
                .or_default()
                .insert(t.name.clone(), st);
        }
    }
    Report {
        workers: s.workers,
        rounds: s.rounds,
        containers: s.containers,
        endpoints: targets.iter().map(|t| t.name.clone()).collect(),
        operations,
        remove_by_tag_left_image: targets
            .iter()
            .zip(&left_images)
            .map(|(t, n)| (t.name.clone(), *n))
            .collect(),
        total_seconds: start.elapsed().as_secs_f64(),
    }
}

/// The report as a markdown table: per operation and endpoint, the latency figures,
/// throughput and the p50 ratio to the first endpoint.
pub fn markdown(r: &Report) -> String {
    let mut out = format!(
        "## CRI benchmark ({} workers, {} rounds, ListContainers with {} extra containers; {:.1} s)\n\n",
        r.workers, r.rounds, r.containers, r.total_seconds
    );
    out.push_str("| operation | endpoint | n | err | min ms | p50 ms | p95 ms | p99 ms | max ms | ops/s | p50 ratio (95 % interval) |\n");
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let first = r.endpoints.first().cloned().unwrap_or_default();
    for op in OPERATIONS {
        let Some(per) = r.operations.get(*op) else {
            continue;
        };
        let base = per.get(&first).map(|s| s.p50_ms).unwrap_or(0.0);
        for ep in &r.endpoints {
            let Some(s) = per.get(ep) else { continue };
            let ratio = match (base > 0.0, s.p50_ratio_ci95) {
                (false, _) => "-".into(),
                (true, Some([lo, hi])) => format!("{:.2} ({lo:.2}–{hi:.2})", s.p50_ms / base),
                (true, None) => format!("{:.2}", s.p50_ms / base),
            };
            out.push_str(&format!(
                "| {op} | {ep} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {ratio} |\n",
                s.count, s.errors, s.min_ms, s.p50_ms, s.p95_ms, s.p99_ms, s.max_ms, s.ops_per_sec
            ));
        }
    }
    if r.endpoints.len() > 1 {
        out.push_str("\nThe interval of a p50 ratio is a paired bootstrap over the rounds: a ratio whose interval holds 1.00 is within what this run can tell apart.\n");
    }
    for (ep, n) in &r.remove_by_tag_left_image {
        if *n > 0 {
            out.push_str(&format!(
                "\n{ep}: RemoveImage by tag answered OK but left the image {n} time(s) (removed by id afterwards, untimed)\n"
            ));
        }
    }
    out
}

/// A log root for the sandboxes of a run.
pub fn log_root(base: &Path) -> PathBuf {
    base.join("logs")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_nearest_ranks() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&d, 0.0), 1.0);
        assert_eq!(percentile(&d, 50.0), 51.0);
        assert_eq!(percentile(&d, 99.0), 99.0);
        assert_eq!(percentile(&d, 100.0), 100.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn throughput_is_count_over_wall_time() {
        let s = Samples {
            latencies: vec![Duration::from_millis(10); 4],
            errors: 1,
            wall: Duration::from_millis(20),
            round_ends: Vec::new(),
        };
        let st = s.stats();
        assert_eq!((st.count, st.errors), (4, 1));
        assert!((st.ops_per_sec - 200.0).abs() < 1e-6);
    }

    /// Samples of `rounds` rounds, `per_round` each: `ms(round, i)` milliseconds.
    fn rounds_of(rounds: usize, per_round: usize, ms: impl Fn(usize, usize) -> u64) -> Samples {
        let mut s = Samples::default();
        for r in 0..rounds {
            for i in 0..per_round {
                s.latencies.push(Duration::from_millis(ms(r, i)));
            }
            s.end_round(r);
        }
        s
    }

    #[test]
    fn samples_are_split_by_round() {
        let mut s = Samples::default();
        s.latencies.push(Duration::from_millis(1));
        s.end_round(0);
        s.end_round(1); // nothing in round 1
        s.latencies
            .extend([Duration::from_millis(2), Duration::from_millis(3)]);
        s.end_round(2);
        let by = s.by_round();
        assert_eq!(by.keys().copied().collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(
            by[&2],
            &[Duration::from_millis(2), Duration::from_millis(3)]
        );
    }

    #[test]
    fn the_ratio_interval_holds_one_only_when_the_endpoints_do_not_differ() {
        // Rounds drift from 10 to 24 ms, alike on both endpoints (interleaved); within a
        // round the samples spread by 0-3 ms.
        let base = rounds_of(15, 4, |r, i| 10 + r as u64 + i as u64);
        let same = rounds_of(15, 4, |r, i| 10 + r as u64 + (3 - i) as u64);
        let slower = rounds_of(15, 4, |r, i| (10 + r as u64 + i as u64) * 13 / 10);
        let [lo, hi] = ratio_interval(&base, &same, 1).expect("interval");
        assert!(lo <= 1.0 && 1.0 <= hi, "same: {lo}..{hi}");
        let [lo, hi] = ratio_interval(&base, &slower, 1).expect("interval");
        assert!(
            lo > 1.0 && lo <= 1.3 && 1.3 <= hi + 0.05,
            "slower: {lo}..{hi}"
        );
        // The same seed gives the same interval.
        assert_eq!(
            ratio_interval(&base, &slower, 7),
            ratio_interval(&base, &slower, 7)
        );
    }

    #[test]
    fn too_few_common_rounds_give_no_interval() {
        let base = rounds_of(4, 4, |_, _| 10);
        let other = rounds_of(4, 4, |_, _| 11);
        assert_eq!(ratio_interval(&base, &other, 1), None);
        assert_eq!(ratio_interval(&base, &Samples::default(), 1), None);
    }

    #[test]
    fn markdown_has_ratios_to_the_first_endpoint() {
        let mk = |p50: f64| OpStats {
            count: 1,
            errors: 0,
            min_ms: p50,
            p50_ms: p50,
            p95_ms: p50,
            p99_ms: p50,
            max_ms: p50,
            ops_per_sec: 1.0,
            p50_ratio_ci95: None,
        };
        let r = Report {
            workers: 1,
            rounds: 1,
            containers: 0,
            endpoints: vec!["a".into(), "b".into()],
            operations: BTreeMap::from([(
                "ExecSync".to_string(),
                BTreeMap::from([
                    ("a".to_string(), mk(10.0)),
                    (
                        "b".to_string(),
                        OpStats {
                            p50_ratio_ci95: Some([1.2, 1.8]),
                            ..mk(15.0)
                        },
                    ),
                ]),
            )]),
            remove_by_tag_left_image: BTreeMap::from([("a".to_string(), 0), ("b".to_string(), 2)]),
            total_seconds: 1.0,
        };
        let md = markdown(&r);
        assert!(md.contains("| ExecSync | b | 1 | 0 |"), "{md}");
        assert!(md.contains("| 1.50 (1.20–1.80) |"), "{md}");
        assert!(
            md.contains("b: RemoveImage by tag answered OK but left the image 2 time(s)"),
            "{md}"
        );
        assert!(!md.contains("a: RemoveImage"), "{md}");
    }
}
