//! `analyzer check`'s arguments.

use super::shared::{FilterArgs, InputArgs, OutputArgs};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The run to check (a capture records the environment the checklist reads; other sources give what
    /// their tensors say).
    pub run: PathBuf,
    /// A second run to compare with: another NPU run, or the benchmark's capture.
    pub run2: Option<PathBuf>,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub report: OutputArgs,
    #[command(flatten)]
    pub input: InputArgs,
    /// No progress on stderr (by default, on a terminal: each stage as it starts).
    #[arg(long)]
    pub no_progress: bool,
}
