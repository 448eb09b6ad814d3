//! `analyzer merge`'s arguments.

use super::shared::{InputArgs, OutputArgs};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// Directories of rank summaries written by `analyzer scan` (one per node), or summary files.
    #[arg(required = true)]
    pub summaries: Vec<PathBuf>,
    /// Summaries of a run of the same job known to be good (as `ranks --baseline`).
    #[arg(long, value_name = "DIR")]
    pub baseline: Option<PathBuf>,
    #[command(flatten)]
    pub report: OutputArgs,
    #[command(flatten)]
    pub input: InputArgs,
    /// No progress on stderr (by default, on a terminal: each stage as it starts, and a bar while the
    /// summaries are read).
    #[arg(long)]
    pub no_progress: bool,
}
