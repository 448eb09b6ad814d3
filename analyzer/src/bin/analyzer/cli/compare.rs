//! `analyzer compare`'s arguments, its report's forms and the metric families it computes.

use super::shared::{FilterArgs, InputArgs};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// The run under suspicion (NPU).
    pub target: PathBuf,
    /// The benchmark run (GPU/CPU, or an NPU run with fusion off).
    pub bench: PathBuf,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub input: InputArgs,
    /// Format of the report.
    #[arg(long, value_enum, default_value_t = CompareFormat::Table)]
    pub format: CompareFormat,
    /// Write the report here instead of standard output (the headline still goes to the terminal).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Map ops whose names differ (or eager kernels whose counters shifted): a file of
    /// `target_name,bench_name` lines, heard before the names (a bench op a line names is that target op's
    /// alone, never taken by the target op of its name: map every kernel whose counter shifted).
    #[arg(long, value_name = "FILE")]
    pub mapping: Option<PathBuf>,
    /// Match msprobe API names ignoring the call index (msprobe's fuzzy match).
    #[arg(long)]
    pub fuzzy: bool,
    /// Metric families to compute. Default: what the report shows. The table and msprobe-csv show msprobe's
    /// metrics alone, so only those are computed; csv and json get msprobe's alone when either side is an
    /// msprobe dump (what `msprobe compare` reports), both families otherwise. msaccucmp's KL divergence
    /// costs about as much as all of msprobe's metrics together.
    #[arg(long, value_enum, value_name = "FAMILIES")]
    pub metrics: Option<MetricFamilies>,
    /// Fail a tensor whose cosine similarity is below this (in addition to the vendor rules).
    #[arg(long, value_name = "X")]
    pub cosine_min: Option<f64>,
    /// Fail a tensor whose max absolute error exceeds this (in addition to the vendor rules).
    #[arg(long, value_name = "X")]
    pub max_abs_err: Option<f64>,
    /// List every compared tensor in the table, not only failures.
    #[arg(long)]
    pub all: bool,
    /// No progress bar on stderr.
    #[arg(long)]
    pub no_progress: bool,
}

/// The form of compare's report.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CompareFormat {
    /// A summary for people that leads with the culprit, coloured on a terminal (see --color).
    #[default]
    Table,
    /// CSV: msprobe's columns under msprobe's names, then msaccucmp's, then accutrace's (step, rank, match,
    /// status, reason).
    Csv,
    /// JSON for machines, with a `schema_version`.
    Json,
    /// msprobe's own compare_result CSV, column for column and value for value (`torch.float32`,
    /// Requires_grad, Data_name, rows for non-tensor arguments, `None`), for msprobe's downstream tools.
    MsprobeCsv,
}

impl From<CompareFormat> for analyzer::report::compare::CompareFormat {
    fn from(format: CompareFormat) -> Self {
        use analyzer::report::compare::CompareFormat as F;
        match format {
            CompareFormat::Table => F::Table,
            CompareFormat::Csv => F::Csv,
            CompareFormat::Json => F::Json,
            CompareFormat::MsprobeCsv => F::MsprobeCsv,
        }
    }
}

/// Which metric families compare computes.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricFamilies {
    /// msprobe's: cosine, Euclidean distance, max absolute/relative error, the two error ratios; these
    /// decide "Accuracy Reached or Not" and the culprit.
    Msprobe,
    /// msprobe's and msaccucmp's (mean absolute, RMS, relative Euclidean, mean and accumulated relative
    /// error, KL divergence, overflow).
    All,
}

impl From<MetricFamilies> for analyzer::metrics::Families {
    fn from(families: MetricFamilies) -> Self {
        match families {
            MetricFamilies::Msprobe => analyzer::metrics::Families::Msprobe,
            MetricFamilies::All => analyzer::metrics::Families::All,
        }
    }
}
