//! `analyzer diff`'s arguments.

use super::shared::{FilterArgs, InputArgs, OutputArgs};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// One run (a capture, a dump tree, a .npy directory or an msprobe dump).
    pub run1: PathBuf,
    /// The other run, made with the same configuration and seed.
    pub run2: PathBuf,
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
