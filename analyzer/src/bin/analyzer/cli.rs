//! The command line: a user-facing contract, documented in docs/CLI.md and tested in analyzer/tests/cli*.rs.
//! Only the binary sees these types: each command turns them into the plain options of its engine.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Find where a model ported to Ascend NPUs leaves its benchmark.
///
/// Sources can be accutrace captures (from `analyzer record` or LD_PRELOAD=libcollector.so), CANN dump
/// trees, directories of .npy files, or msprobe dumps (dump.json); the kind is detected automatically.
///
/// Exit status: 0 when everything passes, 1 when the command found failures (mismatches, differences,
/// overflows), 2 on a usage or input error.
#[derive(Parser, Debug)]
#[command(name = "analyzer", version, propagate_version = true, max_term_width = 110)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// List each op of a dump file, dump tree or capture with its tensors and statistics.
    ///
    /// Example: analyzer inspect runs/npu --op 'layer_0/*'
    Inspect(InspectArgs),
    /// Compare a target run (NPU) with a benchmark run (GPU/CPU), op by op, and name the first op that
    /// fails while its inputs pass.
    ///
    /// Example: analyzer compare runs/npu bench/ --step 0 --format csv -o result.csv
    Compare(CompareArgs),
    /// Compare two runs of the same configuration bit for bit and name, per step and rank, the first op
    /// whose output differs.
    ///
    /// Example: analyzer diff runs/a runs/b
    Diff(DiffArgs),
    /// Name the first op (per step and rank) that produced inf/NaN, or saturated values, from finite inputs.
    ///
    /// Example: analyzer overflow runs/npu
    Overflow(OverflowArgs),
    /// Export tensors of any source to .npy files in host layout.
    ///
    /// Example: analyzer convert runs/npu -o npy/ --step 3 --op '*MatMul*'
    Convert(ConvertArgs),
    /// Run a command with the collector preloaded and capture its dumps (like `perf record`).
    ///
    /// Example: analyzer record -o runs/npu -- python train.py
    Record(RecordArgs),
}

/// Which ops, steps and ranks a command looks at.
#[derive(Args, Debug, Clone, Default)]
pub struct FilterArgs {
    /// Only this step (repeatable: --step 0 --step 5).
    #[arg(long = "step", value_name = "S")]
    pub steps: Vec<u64>,
    /// Only this rank (repeatable).
    #[arg(long = "rank", value_name = "R")]
    pub ranks: Vec<u32>,
    /// Only ops whose name matches this glob (`*` and `?`; repeatable, any may match).
    #[arg(long = "op", value_name = "PATTERN")]
    pub ops: Vec<String>,
}

impl FilterArgs {
    /// The engines' filter.
    pub fn to_filter(&self) -> analyzer::filter::Filter {
        analyzer::filter::Filter {
            steps: self.steps.clone(),
            ranks: self.ranks.clone(),
            ops: self.ops.clone(),
        }
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    /// A human summary (colour on a terminal).
    #[default]
    Table,
    /// CSV; columns keep msprobe's names where they exist.
    Csv,
    /// JSON, for machines.
    Json,
}

impl From<Format> for analyzer::report::Format {
    fn from(format: Format) -> Self {
        match format {
            Format::Table => analyzer::report::Format::Table,
            Format::Csv => analyzer::report::Format::Csv,
            Format::Json => analyzer::report::Format::Json,
        }
    }
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// A dump file, a dump tree, a capture, a .npy directory or an msprobe dump.
    pub path: PathBuf,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// The run under suspicion (NPU).
    pub target: PathBuf,
    /// The benchmark run (GPU/CPU, or an NPU run with fusion off).
    pub bench: PathBuf,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Write the report here instead of standard output (the summary still goes to the terminal).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// A mapping file of `target_name,bench_name` lines for ops whose names differ.
    #[arg(long, value_name = "FILE")]
    pub mapping: Option<PathBuf>,
    /// Match msprobe API names ignoring the call index (msprobe's fuzzy match).
    #[arg(long)]
    pub fuzzy: bool,
    /// Metric families to compute. Default: msprobe's alone when either side is an msprobe dump (what
    /// `msprobe compare` reports), both families otherwise. msaccucmp's KL divergence costs about as much as
    /// all of msprobe's metrics together.
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

#[derive(Args, Debug)]
pub struct DiffArgs {
    pub run1: PathBuf,
    pub run2: PathBuf,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[arg(long)]
    pub no_progress: bool,
}

#[derive(Args, Debug)]
pub struct OverflowArgs {
    pub run: PathBuf,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ConvertArgs {
    pub source: PathBuf,
    /// Directory to write the .npy files into (created if missing).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: PathBuf,
    #[command(flatten)]
    pub filter: FilterArgs,
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Run directory to write the capture into.
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: PathBuf,
    /// What to keep per tensor: statistics and hash only, or the full (compressed) tensor too.
    #[arg(long, value_enum, default_value_t = RecordMode::Stats)]
    pub mode: RecordMode,
    /// Retention: `keep` (everything), `ring:SIZE` (newest SIZE bytes, e.g. ring:4G), or
    /// `trigger:SIZE:K` (ring until the first overflow/NaN, then keep K more steps).
    #[arg(long, default_value = "keep")]
    pub policy: String,
    /// Steps to dump, CANN syntax (`0|5|10-20`).
    #[arg(long, value_name = "STEPS")]
    pub steps: Option<String>,
    /// zstd level for tensor data (1 is fast; higher is smaller).
    #[arg(long, default_value_t = 1)]
    pub zstd_level: i32,
    /// Capture the device's overflow (op-debug) records instead of data: CANN makes overflow detection
    /// exclusive with the data dump, so only the ops that overflowed are dumped, with their status bits.
    #[arg(long)]
    pub overflow: bool,
    /// Only these ops (CANN `dump_list` layer names; repeatable).
    #[arg(long = "op", value_name = "NAME")]
    pub ops: Vec<String>,
    /// Which tensors of each op the runtime dumps.
    #[arg(long, value_enum, default_value_t = RecordIo::All)]
    pub io: RecordIo,
    /// The collector library (default: libcollector.so next to this binary).
    #[arg(long, value_name = "PATH")]
    pub collector: Option<PathBuf>,
    /// The training command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

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

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordMode {
    /// Statistics and a content hash per tensor (under 128 bytes each); enough for diff and overflow.
    Stats,
    /// Statistics, hash and the full tensor, byte-shuffled and zstd-compressed; needed for compare.
    Tensor,
    /// The device computes statistics itself (CANN `dump_data: stats`); cheapest, no hashes.
    DeviceStats,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordIo {
    Input,
    Output,
    All,
}

impl RecordIo {
    /// CANN's `dump_mode` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordIo::Input => "input",
            RecordIo::Output => "output",
            RecordIo::All => "all",
        }
    }
}
