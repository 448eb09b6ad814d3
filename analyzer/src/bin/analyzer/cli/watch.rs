//! `analyzer watch`'s arguments.

use super::shared::{FilterArgs, InputArgs, OutputArgs};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// The run to watch (a capture, a dump tree, a .npy directory or an msprobe dump).
    #[arg(required_unless_present = "list_conditions")]
    pub run: Option<PathBuf>,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub report: OutputArgs,
    #[command(flatten)]
    pub input: InputArgs,
    /// No progress on stderr (by default, on a terminal: each stage as it starts, and bars while
    /// tensors are read and watched).
    #[arg(long)]
    pub no_progress: bool,
    /// A JSON file of conditions, such as `{"weight_too_large": {"abs_mean_gt": 10}, "dead_relu":
    /// {"enabled": false}}`: a threshold enables its condition.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Set a condition's parameter (and enable the condition), after the config file: NAME.PARAM=VALUE
    /// (repeatable).
    #[arg(long = "set", value_name = "NAME.PARAM=VALUE")]
    pub set: Vec<String>,
    /// Turn a condition on (repeatable).
    #[arg(long = "enable", value_name = "NAME")]
    pub enable: Vec<String>,
    /// Turn a condition off (repeatable).
    #[arg(long = "disable", value_name = "NAME")]
    pub disable: Vec<String>,
    /// Decide from statistics, histograms and hashes only: never read tensor values, even where the capture
    /// kept them (what they would decide is reported as "can't tell").
    #[arg(long)]
    pub no_tensors: bool,
    /// Print the conditions, their parameters and whether they are on (after --config, --set, --enable and
    /// --disable), then exit.
    #[arg(long)]
    pub list_conditions: bool,
}
