//! `analyzer overflow`'s arguments.

use super::shared::{FilterArgs, InputArgs, OutputArgs};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct OverflowArgs {
    /// The run to look into (a capture, a dump tree with or without op-debug files, a .npy directory or an
    /// msprobe dump).
    pub run: PathBuf,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub report: OutputArgs,
    #[command(flatten)]
    pub input: InputArgs,
    /// No progress bar on stderr.
    #[arg(long)]
    pub no_progress: bool,
}
