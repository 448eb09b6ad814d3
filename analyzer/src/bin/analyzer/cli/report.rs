//! `analyzer report`'s arguments.

use super::shared::{FilterArgs, InputArgs};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// The run under suspicion (a capture, a dump tree, a .npy directory or an msprobe dump).
    pub target: PathBuf,
    /// A benchmark to compare with (GPU/CPU run, an unfused run, or a second run of the same
    /// configuration, which is also diffed bit for bit). Without it: overflow and the series of the
    /// run alone.
    pub bench: Option<PathBuf>,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// The HTML file to write.
    #[arg(short = 'o', long = "output", value_name = "FILE", default_value = "report.html")]
    pub output: PathBuf,
    /// A mapping file of `target_name,bench_name` lines for ops whose names differ (as compare).
    #[arg(long, value_name = "FILE")]
    pub mapping: Option<PathBuf>,
    /// Match msprobe API names ignoring the call index (as compare).
    #[arg(long)]
    pub fuzzy: bool,
    #[command(flatten)]
    pub input: InputArgs,
    /// No progress on stderr.
    #[arg(long)]
    pub no_progress: bool,
}
