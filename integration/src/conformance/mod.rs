//! The CRI conformance suite: cases that judge any CRI runtime the way critest's validation
//! specs do, and the runner that selects (`--focus` / `--skip` regexes), runs them in parallel
//! with a per-case timeout, and reports a table, JUnit XML and JSON. A case fails with a reason,
//! or skips (never silently passes) when the host cannot do what it needs or the runtime answers
//! `Unimplemented` to one of the [`OPTIONAL_RPCS`]; `Unimplemented` from any other RPC is a
//! failure, so a runtime cannot pass by implementing nothing. A runtime that stops answering is
//! reported by the case during which it died; the cases after it are "not run", summarized in
//! one line. `cases` holds the cases, one module per area, and their registry
//! (`cases::all`); `report` the output formats. Both import this module's vocabulary
//! (`Ctx`, `Case`, `CaseError`, ...); this module imports neither.

pub mod cases;
pub mod report;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use cri_proto::runtime::v1::image_service_client::ImageServiceClient;
use cri_proto::runtime::v1::runtime_service_client::RuntimeServiceClient;
use futures::StreamExt;
use tonic::transport::Channel;

/// How a case ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
    /// Not run (or cut short) because the runtime had stopped answering during an earlier case,
    /// which is the one that fails.
    NotRun(String),
}

/// What a case returns on not passing.
#[derive(Debug)]
pub enum CaseError {
    Fail(String),
    Skip(String),
}

/// The RPCs a CRI v1 runtime may leave `Unimplemented` (Kubernetes 1.26), each with why: only
/// these make a case skip. Every other RPC is one the kubelet relies on (critest v1.26.1 tests
/// them all), so `Unimplemented` from it fails the case.
pub const OPTIONAL_RPCS: &[(&str, &str)] = &[
    (
        "GetContainerEvents",
        "used only by the alpha EventedPLEG feature gate (1.26); containerd 1.6 lacks it",
    ),
    (
        "PodSandboxStats",
        "used only by the alpha PodAndContainerStatsFromCRI feature gate",
    ),
    (
        "ListPodSandboxStats",
        "used only by the alpha PodAndContainerStatsFromCRI feature gate",
    ),
    (
        "CheckpointContainer",
        "alpha ContainerCheckpoint feature gate (1.25); containerd 1.6 lacks it",
    ),
    (
        "ListMetricDescriptors",
        "added after 1.26 (PodAndContainerStatsFromCRI metrics)",
    ),
    (
        "ListPodSandboxMetrics",
        "added after 1.26 (PodAndContainerStatsFromCRI metrics)",
    ),
];

impl From<tonic::Status> for CaseError {
    /// Any error status fails the case, `Unimplemented` included: calls to the
    /// [`OPTIONAL_RPCS`] go through [`optional`] instead.
    fn from(s: tonic::Status) -> Self {
        if s.code() == tonic::Code::Unimplemented {
            CaseError::Fail(format!(
                "runtime answers Unimplemented to an RPC every CRI runtime must serve: {}",
                s.message()
            ))
        } else {
            CaseError::Fail(format!(
                "unexpected gRPC error {:?}: {}",
                s.code(),
                s.message()
            ))
        }
    }
}

/// The error mapping for a call to the optional RPC `rpc` (one of [`OPTIONAL_RPCS`]):
/// `Unimplemented` skips the case, naming the RPC and why it is optional; anything else is as
/// [`CaseError::from`]. An `rpc` missing from the list is a bug in the suite and fails.
/// Use: `.await.map_err(optional("PodSandboxStats"))?`.
pub fn optional(rpc: &'static str) -> impl FnOnce(tonic::Status) -> CaseError {
    move |s| {
        let Some((_, why)) = OPTIONAL_RPCS.iter().find(|(name, _)| *name == rpc) else {
            return CaseError::Fail(format!(
                "suite bug: {rpc} is not in OPTIONAL_RPCS ({:?}: {})",
                s.code(),
                s.message()
            ));
        };
        if s.code() == tonic::Code::Unimplemented {
            CaseError::Skip(format!(
                "runtime answers Unimplemented to {rpc}, which is optional ({why}): {}",
                s.message()
            ))
        } else {
            CaseError::from(s)
        }
    }
}

/// Result of a case body.
pub type CaseResult = Result<(), CaseError>;

/// Fails the case with a formatted reason unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::conformance::CaseError::Fail(format!($($arg)+)));
        }
    };
}

/// Fails the case unless the two values are equal.
#[macro_export]
macro_rules! ensure_eq {
    ($left:expr, $right:expr, $what:expr) => {{
        let (l, r) = (&$left, &$right);
        if l != r {
            return Err($crate::conformance::CaseError::Fail(format!(
                "{}: got {:?}, want {:?}",
                $what, l, r
            )));
        }
    }};
}

/// Everything a case may use.
#[derive(Clone)]
pub struct Ctx {
    pub runtime: RuntimeServiceClient<Channel>,
    pub image: ImageServiceClient<Channel>,
    pub settings: Settings,
}

/// Suite settings (from the command line).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Image with the busybox applets the cases run.
    pub busybox_image: String,
    /// Registry prefix for pull cases (`127.0.0.1:5000`).
    pub registry: String,
    /// An htpasswd-protected registry and its credentials, for the pull-with-credentials case.
    pub auth_registry: Option<(String, String, String)>,
    /// Where cases put sandbox log directories.
    pub log_root: std::path::PathBuf,
}

type CaseFn = fn(Ctx) -> Pin<Box<dyn Future<Output = CaseResult> + Send>>;

/// One conformance case.
#[derive(Clone)]
pub struct Case {
    /// `[area] what it checks`, matched by --focus / --skip.
    pub name: &'static str,
    pub run: CaseFn,
}

/// A finished case.
#[derive(Debug, Clone)]
pub struct CaseReport {
    pub name: String,
    pub outcome: Outcome,
    pub duration: Duration,
}

/// Picks the cases whose names match `focus` (if any) and not `skip` (if any).
pub fn select(
    cases: Vec<Case>,
    focus: Option<&regex::Regex>,
    skip: Option<&regex::Regex>,
) -> Vec<Case> {
    cases
        .into_iter()
        .filter(|c| focus.is_none_or(|f| f.is_match(c.name)))
        .filter(|c| skip.is_none_or(|s| !s.is_match(c.name)))
        .collect()
}

/// Whether the runtime still answers: a Version call that ends in anything but a transport
/// failure (an error status is an answer). Three tries, each given 5 s, a second apart, so that
/// a runtime that is only slow on a busy host is not taken for dead.
pub async fn runtime_answers(ctx: &Ctx) -> Result<(), String> {
    let mut last = String::new();
    for attempt in 0..3 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let mut rt = ctx.runtime.clone();
        let call = rt.version(cri_proto::runtime::v1::VersionRequest {
            version: "v1".into(),
        });
        match tokio::time::timeout(Duration::from_secs(5), call).await {
            Err(_) => last = "Version did not answer within 5 s".into(),
            Ok(Err(s)) if is_transport_failure(&s) => {
                last = format!("{:?}: {}", s.code(), s.message())
            }
            Ok(_) => return Ok(()),
        }
    }
    Err(last)
}

/// A status that says the runtime could not be reached, rather than an answer from it.
fn is_transport_failure(s: &tonic::Status) -> bool {
    match s.code() {
        tonic::Code::Unavailable => true,
        tonic::Code::Unknown | tonic::Code::Internal | tonic::Code::Cancelled => {
            let m = s.message().to_ascii_lowercase();
            [
                "transport error",
                "connection",
                "broken pipe",
                "h2 protocol error",
            ]
            .iter()
            .any(|w| m.contains(w))
        }
        _ => false,
    }
}

/// Runs `cases` with at most `parallel` at once, each bounded by `timeout`.
///
/// When a case fails (or times out) and the runtime then no longer answers (see
/// [`runtime_answers`]), that case keeps its failure, with a note, and is the only one blamed:
/// the cases failing alongside it and every case not yet started are [`Outcome::NotRun`].
pub async fn run(
    ctx: Ctx,
    cases: Vec<Case>,
    parallel: usize,
    timeout: Duration,
) -> Vec<CaseReport> {
    use parking_lot::Mutex;
    use std::sync::Arc;
    // The case during which the runtime stopped answering.
    let died_in: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let not_run = |killer: &str| {
        Outcome::NotRun(format!(
            "runtime unavailable: it stopped answering during {killer:?}"
        ))
    };
    let mut reports: Vec<CaseReport> = futures::stream::iter(cases.into_iter().map(|case| {
        let ctx = ctx.clone();
        let died_in = died_in.clone();
        async move {
            let start = Instant::now();
            let killer = died_in.lock().clone();
            if let Some(killer) = killer {
                return CaseReport {
                    name: case.name.to_string(),
                    outcome: not_run(&killer),
                    duration: Duration::ZERO,
                };
            }
            let handle = tokio::spawn((case.run)(ctx.clone()));
            let mut outcome = match tokio::time::timeout(timeout, handle).await {
                Err(_) => Outcome::Fail(format!("timed out after {timeout:?}")),
                Ok(Err(join)) => Outcome::Fail(format!("case panicked: {join}")),
                Ok(Ok(Ok(()))) => Outcome::Pass,
                Ok(Ok(Err(CaseError::Fail(r)))) => Outcome::Fail(r),
                Ok(Ok(Err(CaseError::Skip(r)))) => Outcome::Skip(r),
            };
            if let Outcome::Fail(why) = &outcome
                && let Err(probe) = runtime_answers(&ctx).await
            {
                let mut died = died_in.lock();
                match died.as_deref() {
                    Some(killer) => outcome = not_run(killer),
                    None => {
                        *died = Some(case.name.to_string());
                        outcome = Outcome::Fail(format!(
                            "{why} — the runtime stopped answering during this case ({probe}); \
                             the cases after it were not run"
                        ));
                    }
                }
            }
            CaseReport {
                name: case.name.to_string(),
                outcome,
                duration: start.elapsed(),
            }
        }
    }))
    .buffer_unordered(parallel.max(1))
    .collect()
    .await;
    reports.sort_by(|a, b| a.name.cmp(&b.name));
    reports
}
