//! `analyzer scan`'s arguments.

use super::shared::{FilterArgs, Format, InputArgs};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ScanArgs {
    /// This node's part of the job: a capture holding the streams of the ranks that ran here.
    pub run: PathBuf,
    /// Directory to write the summaries into (created if missing): `rank{R:06}.parquet` per rank.
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: PathBuf,
    /// Selects the ops summarized (every rank's HCCL calls at the selected steps are kept).
    #[command(flatten)]
    pub filter: FilterArgs,
    /// The form of the list of summaries written, on standard output.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    pub input: InputArgs,
    /// No progress on stderr (by default, on a terminal: each stage as it starts, and a bar while
    /// statistics are decoded).
    #[arg(long)]
    pub no_progress: bool,
}
