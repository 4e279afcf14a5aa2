//! The CRI conformance suite: cases that judge any CRI runtime the way critest's validation
//! specs do, and the runner that selects (`--focus` / `--skip` regexes), runs them in parallel
//! with a per-case timeout, and reports a table, JUnit XML and JSON. A case fails with a reason,
//! or skips (never silently passes) when the runtime answers `Unimplemented` for an optional
//! feature or the host cannot do what it needs. `cases` holds the cases (`streaming` the
//! exec / attach / port-forward ones); `report` the output formats.

pub mod cases;
pub mod report;
pub mod streaming;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use cri_proto::runtime::v1::image_service_client::ImageServiceClient;
use cri_proto::runtime::v1::runtime_service_client::RuntimeServiceClient;
use futures::StreamExt;
use tonic::transport::Channel;

/// Why a case did not pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
}

/// What a case returns on not passing.
#[derive(Debug)]
pub enum CaseError {
    Fail(String),
    Skip(String),
}

impl From<tonic::Status> for CaseError {
    fn from(s: tonic::Status) -> Self {
        if s.code() == tonic::Code::Unimplemented {
            CaseError::Skip(format!("runtime answers Unimplemented: {}", s.message()))
        } else {
            CaseError::Fail(format!(
                "unexpected gRPC error {:?}: {}",
                s.code(),
                s.message()
            ))
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

/// Runs `cases` with at most `parallel` at once, each bounded by `timeout`.
pub async fn run(
    ctx: Ctx,
    cases: Vec<Case>,
    parallel: usize,
    timeout: Duration,
) -> Vec<CaseReport> {
    let mut reports: Vec<CaseReport> = futures::stream::iter(cases.into_iter().map(|case| {
        let ctx = ctx.clone();
        async move {
            let start = Instant::now();
            let handle = tokio::spawn((case.run)(ctx));
            let outcome = match tokio::time::timeout(timeout, handle).await {
                Err(_) => Outcome::Fail(format!("timed out after {timeout:?}")),
                Ok(Err(join)) => Outcome::Fail(format!("case panicked: {join}")),
                Ok(Ok(Ok(()))) => Outcome::Pass,
                Ok(Ok(Err(CaseError::Fail(r)))) => Outcome::Fail(r),
                Ok(Ok(Err(CaseError::Skip(r)))) => Outcome::Skip(r),
            };
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
