//! `analyzer ranks`'s arguments.

use super::shared::{FilterArgs, InputArgs, OutputArgs};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct RanksArgs {
    /// The job's run: a capture holding every rank's stream (one ACCUTRACE_DIR the ranks share).
    pub run: PathBuf,
    /// A run of the same job known to be good: tensors that differ from the same rank's in it are
    /// anomalies too (what a rank reading other data leaves).
    #[arg(long, value_name = "RUN")]
    pub baseline: Option<PathBuf>,
    /// Selects the ops examined (every rank's HCCL calls are kept: they carry happens-before).
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
