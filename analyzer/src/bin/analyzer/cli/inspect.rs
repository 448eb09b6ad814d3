//! `analyzer inspect`'s arguments.

use super::shared::{FilterArgs, InputArgs, OutputArgs};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// A dump file, a dump tree, a capture, a .npy directory or an msprobe dump.
    pub path: PathBuf,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub report: OutputArgs,
    #[command(flatten)]
    pub input: InputArgs,
    /// The same as `--format json` (contract version 1's spelling).
    #[arg(long, hide = true, conflicts_with = "format")]
    pub json: bool,
    /// No progress bar on stderr.
    #[arg(long)]
    pub no_progress: bool,
}
