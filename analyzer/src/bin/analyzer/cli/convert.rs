//! `analyzer convert`'s arguments.

use super::shared::{FilterArgs, Format, InputArgs};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// What to export: a capture, a dump tree or file, a .npy directory or an msprobe dump.
    pub source: PathBuf,
    /// Directory to write the .npy files into (created if missing).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: PathBuf,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// The form of the summary on standard output (`csv`/`json`: one entry per tensor).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    pub input: InputArgs,
    /// No progress bar on stderr.
    #[arg(long)]
    pub no_progress: bool,
}
