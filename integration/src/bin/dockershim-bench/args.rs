//! The benchmark's command line.

use std::path::PathBuf;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(about = "Benchmark dockershim against direct Docker calls")]
pub(crate) struct Args {
    /// Lifecycle iterations (each runs the shim side and the direct side once).
    #[arg(long, default_value_t = 20)]
    pub(crate) iterations: usize,
    /// Running containers for the ListContainers / ListContainerStats phase (0 skips it).
    #[arg(long, default_value_t = 300)]
    pub(crate) containers: usize,
    /// Sandboxes the containers are spread over.
    #[arg(long, default_value_t = 10)]
    pub(crate) sandboxes: usize,
    /// Concurrency when creating the containers.
    #[arg(long, default_value_t = 8)]
    pub(crate) concurrency: usize,
    /// ListContainers calls measured (each side).
    #[arg(long, default_value_t = 30)]
    pub(crate) list_calls: usize,
    /// ListContainerStats calls measured (each side).
    #[arg(long, default_value_t = 10)]
    pub(crate) stats_calls: usize,
    /// The dockershim binary (default: next to this binary, else target/release/dockershim).
    #[arg(long)]
    pub(crate) dockershim: Option<PathBuf>,
    /// Write all numbers as JSON here.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
}
