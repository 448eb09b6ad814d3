//! The command line: a user-facing contract, documented in docs/CLI.md and tested in analyzer/tests/cli*.rs.
//! Only the binary sees these types: each command turns them into the plain options of its engine.

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// The version of the command-line contract (docs/CLI.md): bumped when something a script may rely on
/// changes.
pub const CLI_VERSION: u32 = 2;

/// Find where a model ported to Ascend NPUs leaves its benchmark.
///
/// Sources can be accutrace captures (from `analyzer record` or LD_PRELOAD=libcollector.so), CANN dump
/// trees, directories of .npy files, or msprobe dumps (dump.json); the kind is detected automatically.
///
/// Exit status: 0 when everything passes, 1 when the command found failures (mismatches, differences,
/// overflows), 2 on a usage or input error, or when the input kept the command from seeing everything
/// (missing segments or streams, dropped chunks, unreadable tensors: listed first in the report). A reader
/// that closes the output early (`| head`) changes nothing: the status still says what was found.
#[derive(Parser, Debug)]
#[command(name = "analyzer", version = version_line(), propagate_version = true, max_term_width = 110)]
pub struct Cli {
    /// When to colour the table reports: `auto` (standard output is a terminal and NO_COLOR is unset or
    /// empty), `always`, or `never`.
    #[arg(long = "color", global = true, value_enum, value_name = "WHEN", default_value_t = ColourArg::Auto)]
    pub colour: ColourArg,
    #[command(subcommand)]
    pub command: Command,
}

/// The clap command (completions, man page, tests).
pub fn command() -> clap::Command {
    Cli::command()
}

/// `analyzer --version`: the release, the commit it was built from, and the versions of the capture format
/// it reads and of this command-line contract: `0.1.0 (commit 1a2b3c4, capture format 2, CLI 2)`.
pub fn version_line() -> &'static str {
    static LINE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    LINE.get_or_init(|| {
        format!(
            "{} (commit {}, capture format {}, CLI {CLI_VERSION})",
            env!("CARGO_PKG_VERSION"),
            env!("ACCUTRACE_COMMIT"),
            accutrace_formats::capture::FORMAT_VERSION,
        )
    })
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// List each op of a dump file, dump tree or capture with its tensors and statistics.
    ///
    /// Examples:
    ///   analyzer inspect runs/npu --op 'model/layer_0/*'
    ///   analyzer inspect runs/npu --step 2 --format json -o ops.json
    #[command(verbatim_doc_comment)]
    Inspect(InspectArgs),
    /// Compare a target run (NPU) with a benchmark (GPU/CPU): the first op that fails while its inputs pass.
    ///
    /// Compares op by op; the report leads with the first op that fails while its inputs pass (the culprit).
    ///
    /// A kernel-level target (an eager capture: MatMulV2_3, BiasAdd_3) against an API-level benchmark
    /// (msprobe's dump of the PyTorch run: Functional.linear.0.forward) is aligned by execution order,
    /// shapes and statistics; the report then names the first diverging API and its kernels.
    ///
    /// Values are compared, so both sides need tensor data: record with `--mode tensor`. Pairs from a
    /// statistics-mode capture (the default mode) are NOT MEASURED, never a pass (exit 2), unless both
    /// sides store the same content hash (identical bit for bit).
    ///
    /// Examples:
    ///   analyzer compare runs/npu bench/ --step 0
    ///   analyzer compare runs/npu bench/ --step 0 --format csv -o result.csv
    ///   analyzer compare npu_dump/ gpu_dump/ --format msprobe-csv -o compare_result.csv
    ///   analyzer compare runs/eager msprobe_dump/
    #[command(verbatim_doc_comment)]
    Compare(CompareArgs),
    /// Diff two runs of one configuration bit for bit: per step and rank, the first op whose output differs.
    ///
    /// Examples:
    ///   analyzer diff runs/a runs/b
    ///   analyzer diff runs/a runs/b --format csv -o diff.csv
    #[command(verbatim_doc_comment)]
    Diff(DiffArgs),
    /// Name the first op (per step and rank) that produced inf/NaN, or saturated values, from finite inputs.
    ///
    /// Examples:
    ///   analyzer overflow runs/npu
    ///   analyzer overflow runs/npu --rank 3 --format json
    #[command(verbatim_doc_comment)]
    Overflow(OverflowArgs),
    /// Write one self-contained HTML page: the commands' verdicts, then the plots and tables behind them.
    ///
    /// The page leads with the verdicts of compare, diff, overflow, check, watch and (several ranks) ranks,
    /// and shows the evidence: error along execution order, loss and loss scale, gradient norms, layer x
    /// step and rank x step heatmaps, sortable and filterable tables. The file is self-contained: it opens
    /// offline, with nothing beside it.
    ///
    /// Examples:
    ///   analyzer report runs/npu bench/ -o report.html
    ///   analyzer report runs/npu -o npu.html
    ///   analyzer report runs/a runs/b --step 1 -o ab.html
    #[command(verbatim_doc_comment)]
    Report(ReportArgs),
    /// Name the first anomaly across the ranks of a job and how it spread through the collectives.
    ///
    /// Reads a capture of every rank (the collector records each rank's HCCL calls). Happens-before is
    /// program order within a rank, every collective matched by (communicator, sequence number), and send
    /// before receive; the first anomaly is one nothing anomalous happened before. Anomalies: inf/NaN or
    /// saturated values, members of a collective getting results that must be equal and are not, a tensor
    /// that data-parallel replicas hold bit for bit differing on a minority (weights after a bit flip, a
    /// nondeterministic reduction), and with --baseline a tensor that differs from the same rank's in a good
    /// run (one rank reading different data).
    ///
    /// Examples:
    ///   analyzer ranks runs/npu
    ///   analyzer ranks runs/npu --step 1 --format csv
    ///   analyzer ranks runs/npu --baseline runs/good --format json
    #[command(verbatim_doc_comment)]
    Ranks(RanksArgs),
    /// Summarize this node's ranks for `analyzer merge`: one small Parquet file per rank, no tensor data.
    ///
    /// Each file holds the rank's ops and HCCL calls in program order with the statistics and hashes the
    /// cross-rank analysis needs.
    ///
    /// Run it once per node, under the job's own scheduler, on that node's capture; gather the output
    /// directories on one host and merge them there. Same answer as `analyzer ranks` on all ranks at once.
    /// The files also answer SQL (DuckDB, Spark): schema and the first-anomaly query in
    /// docs/RANK_SUMMARIES.md.
    ///
    /// Examples:
    ///   analyzer scan runs/npu -o summaries/
    ///   analyzer scan runs/npu --step 1 -o step1/ --format json
    #[command(verbatim_doc_comment)]
    Scan(ScanArgs),
    /// The answer of `analyzer ranks` from the summaries that `analyzer scan` wrote on each node.
    ///
    /// The same answer (first anomaly across ranks, its spread) as `analyzer ranks` on all ranks at once.
    ///
    /// Examples:
    ///   analyzer merge summaries/
    ///   analyzer merge summaries/ --format json
    #[command(verbatim_doc_comment)]
    Merge(MergeArgs),
    /// The pre-tuning checklist: determinism, data, initial weights, precision, loss scale, configuration.
    ///
    /// Each item says pass, fail or can't tell with the reason and where to look. With a second run,
    /// every item compares the two (same data in the same order, same initial weights, same dtypes, same
    /// hyperparameters and versions).
    ///
    /// Examples:
    ///   analyzer check runs/npu
    ///   analyzer check runs/a runs/b --format json -o checklist.json
    #[command(verbatim_doc_comment)]
    Check(CheckArgs),
    /// Watch a run's training health at every step (MindInsight's watch conditions and thresholds).
    ///
    /// The conditions: NaN/inf or exploding loss, overflow, all-zero tensors, weights badly initialised,
    /// not updated or changing too much, vanishing gradients, saturated tanh and sigmoid, dead ReLU
    /// (MindInsight's recommended thresholds by default).
    ///
    /// Each hit names the step, op, tensor and value. What statistics cannot decide is reported as "can't
    /// tell" with what would decide it (a histogram: record --histogram; the tensors: --mode tensor).
    ///
    /// Examples:
    ///   analyzer watch runs/npu
    ///   analyzer watch runs/npu --set weight_too_large.abs_mean_gt=10 --disable dead_relu
    ///   analyzer watch runs/npu --config watch.json --format json -o health.json
    ///   analyzer watch --list-conditions
    #[command(verbatim_doc_comment)]
    Watch(WatchArgs),
    /// Export tensors of any source to .npy files in host layout.
    ///
    /// Examples:
    ///   analyzer convert runs/npu -o npy/ --step 3 --op '*MatMul*'
    ///   analyzer convert runs/npu -o npy/ --format csv
    #[command(verbatim_doc_comment)]
    Convert(ConvertArgs),
    /// Run a command with the collector preloaded and capture its dumps (like `perf record`).
    ///
    /// Examples:
    ///   analyzer record -o runs/npu -- python train.py
    ///   analyzer record -o runs/npu --mode tensor --steps '0|5' -- python train.py --epochs 1
    #[command(verbatim_doc_comment)]
    Record(RecordArgs),
    /// Print a shell completion script for analyzer.
    ///
    /// Examples:
    ///   analyzer completions bash > ~/.local/share/bash-completion/completions/analyzer
    ///   analyzer completions zsh > ~/.zfunc/_analyzer
    ///   analyzer completions fish > ~/.config/fish/completions/analyzer.fish
    #[command(verbatim_doc_comment)]
    Completions(CompletionsArgs),
    /// Print analyzer's man page (roff) on standard output.
    ///
    /// Examples:
    ///   analyzer manpage > analyzer.1
    ///   analyzer manpage | man -l -
    #[command(verbatim_doc_comment)]
    Manpage,
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

/// How a command treats input that is incomplete.
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct InputArgs {
    /// Accept a source that says it is incomplete (lost segments or streams, dropped chunks, an unsealed
    /// stream, an unreadable dump file): the warning still leads the report, but the exit status is the
    /// answer's (0 or 1) instead of 2. Tensors that cannot be read still make it 2.
    #[arg(long)]
    pub allow_incomplete: bool,
}

/// The form of a report.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    /// A summary for people, coloured on a terminal (see --color).
    #[default]
    Table,
    /// CSV with a header row.
    Csv,
    /// JSON for machines, with a `schema_version`.
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

/// When to colour.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ColourArg {
    /// On a terminal, unless NO_COLOR is set to something.
    #[default]
    Auto,
    /// Always, NO_COLOR or not.
    Always,
    /// Never.
    Never,
}

impl From<ColourArg> for analyzer::report::Colour {
    fn from(colour: ColourArg) -> Self {
        match colour {
            ColourArg::Auto => analyzer::report::Colour::Auto,
            ColourArg::Always => analyzer::report::Colour::Always,
            ColourArg::Never => analyzer::report::Colour::Never,
        }
    }
}

/// `--format` and `-o`: a report's form and where it goes.
#[derive(Args, Debug, Clone, Default)]
pub struct OutputArgs {
    /// The report's form.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Write the report to this file instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `analyzer completions SHELL`.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

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
    /// The report's form.
    #[arg(long, value_enum, default_value_t = CompareFormat::Table)]
    pub format: CompareFormat,
    /// Write the report here instead of standard output (the headline still goes to the terminal).
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

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// The run under suspicion (a capture, a dump tree, a .npy directory or an msprobe dump).
    pub target: PathBuf,
    /// A benchmark to compare with (GPU/CPU run, an unfused run, or a second run of the same
    /// configuration, which is also diffed bit for bit). Without it: overflow and the run's own series.
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

#[derive(Args, Debug)]
pub struct RanksArgs {
    /// The job's run: a capture holding every rank's stream (one ACCUTRACE_DIR shared by the ranks).
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
    /// No progress on stderr (by default, on a terminal: each stage as it starts, and a bar while statistics are decoded).
    #[arg(long)]
    pub no_progress: bool,
}

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// Directories of rank summaries written by `analyzer scan` (one per node), or summary files.
    #[arg(required = true)]
    pub summaries: Vec<PathBuf>,
    /// Summaries of a run of the same job known to be good (as `ranks --baseline`).
    #[arg(long, value_name = "DIR")]
    pub baseline: Option<PathBuf>,
    #[command(flatten)]
    pub report: OutputArgs,
    #[command(flatten)]
    pub input: InputArgs,
    /// No progress on stderr (by default, on a terminal: each stage as it starts, and a bar while the summaries are read).
    #[arg(long)]
    pub no_progress: bool,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The run to check (a capture records the environment the checklist reads; other sources give what
    /// their tensors say).
    pub run: PathBuf,
    /// A second run to compare with: another NPU run, or the benchmark's capture.
    pub run2: Option<PathBuf>,
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
    /// No progress on stderr (by default, on a terminal: each stage as it starts, and bars while tensors are read and watched).
    #[arg(long)]
    pub no_progress: bool,
    /// A JSON file of conditions: `{"weight_too_large": {"abs_mean_gt": 10}, "dead_relu": {"enabled":
    /// false}}` (a threshold enables its condition).
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
    #[arg(long, default_value = "keep", value_name = "POLICY")]
    pub policy: String,
    /// Steps to dump, CANN syntax (`0|5|10-20`).
    #[arg(long, value_name = "STEPS")]
    pub steps: Option<String>,
    /// zstd level for tensor data (1 is fast; higher is smaller).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub zstd_level: i32,
    /// Capture the device's overflow (op-debug) records instead of data: CANN makes overflow detection
    /// exclusive with the data dump, so only the ops that overflowed are dumped, with their status bits.
    #[arg(long)]
    pub overflow: bool,
    /// Also keep a small histogram of each tensor's values (counts per power of two and sign; about 150
    /// bytes more per tensor): lets `analyzer watch` decide saturation and range conditions exactly.
    #[arg(long)]
    pub histogram: bool,
    /// Only these ops (CANN `dump_list` layer names; repeatable).
    #[arg(long = "op", value_name = "NAME")]
    pub ops: Vec<String>,
    /// Which tensors of each op the runtime dumps.
    #[arg(long, value_enum, default_value_t = RecordIo::All)]
    pub io: RecordIo,
    /// CANN's `dump_level`: op-level files, kernel-level files (one per FFTS+ sub-task), or both (CANN's
    /// default).
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub dump_level: Option<RecordDumpLevel>,
    /// Eager mode without the Python hook: a regular expression on op types; a run of matching ops ends a
    /// step (e.g. '^(ApplyAdamD|AmpUpdateScale)$').
    #[arg(long, value_name = "REGEX")]
    pub step_marker: Option<String>,
    /// Do not put accutrace's Python start-up hook on PYTHONPATH (it calls accutrace_step_end() after every
    /// optimizer step, so eager-mode steps are exact).
    #[arg(long)]
    pub no_python_hook: bool,
    /// The collector library (default: libcollector.so next to this binary).
    #[arg(long, value_name = "PATH")]
    pub collector: Option<PathBuf>,
    /// The form of the summary on standard output (`csv`: one row per stream).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// No progress line on stderr while the capture is read at the end.
    #[arg(long)]
    pub no_progress: bool,
    /// The training command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
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

/// What record keeps per tensor.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordMode {
    /// Statistics and a content hash per tensor (under 128 bytes each); enough for diff and overflow.
    Stats,
    /// Statistics, hash and the full tensor, byte-shuffled and zstd-compressed; needed for compare.
    Tensor,
    /// The device computes statistics itself (CANN `dump_data: stats`); cheapest, no hashes.
    DeviceStats,
}

/// Which tensors of each op record asks the runtime to dump.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordDumpLevel {
    /// Op-level files only.
    Op,
    /// Kernel-level files only (one per sub-task of an op that runs as an FFTS+ task).
    Kernel,
    /// Both (CANN's default).
    All,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordIo {
    /// Each op's inputs.
    Input,
    /// Each op's outputs.
    Output,
    /// Both.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subcommand, depth first, with its path (`analyzer compare`).
    fn commands(cmd: &clap::Command, path: String, out: &mut Vec<(String, clap::Command)>) {
        out.push((path.clone(), cmd.clone()));
        for sub in cmd.get_subcommands() {
            commands(sub, format!("{path} {}", sub.get_name()), out);
        }
    }

    fn all() -> Vec<(String, clap::Command)> {
        let mut cmd = command();
        cmd.build();
        let mut out = Vec::new();
        commands(&cmd, "analyzer".into(), &mut out);
        out
    }

    #[test]
    fn the_definition_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn every_argument_and_command_says_what_it_is() {
        let mut missing = Vec::new();
        for (path, cmd) in all() {
            if cmd.get_about().is_none() && path != "analyzer help" && !path.starts_with("analyzer help ") {
                missing.push(format!("{path}: no description"));
            }
            for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
                if arg.get_help().is_none() {
                    missing.push(format!("{path}: {} has no help", arg.get_id()));
                }
                // Every value of an enumerated option is explained too.
                for value in arg.get_possible_values().iter().filter(|v| !v.is_hide_set()) {
                    if value.get_help().is_none() && arg.get_id() != "shell" {
                        missing.push(format!(
                            "{path}: {} value {} has no help",
                            arg.get_id(),
                            value.get_name()
                        ));
                    }
                }
            }
        }
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }

    /// Splits an example line as a shell would (single quotes; a redirection or pipe ends the command).
    fn words(line: &str) -> Vec<String> {
        let (mut out, mut word, mut quoted, mut any) = (Vec::new(), String::new(), false, false);
        for c in line.chars() {
            match c {
                '\'' => {
                    quoted = !quoted;
                    any = true;
                }
                '>' | '|' if !quoted => break,
                c if c.is_whitespace() && !quoted => {
                    if any {
                        out.push(std::mem::take(&mut word));
                        any = false;
                    }
                }
                c => {
                    word.push(c);
                    any = true;
                }
            }
        }
        if any {
            out.push(word);
        }
        out
    }

    #[test]
    fn every_command_has_examples_and_they_parse() {
        let mut tried = 0;
        for (path, cmd) in all().into_iter().filter(|(p, _)| p.matches(' ').count() == 1) {
            if path == "analyzer help" {
                continue;
            }
            let long = cmd.get_long_about().map(|s| s.to_string()).unwrap_or_default();
            let examples: Vec<&str> =
                long.lines().map(str::trim).filter(|l| l.starts_with("analyzer ")).collect();
            assert!(!examples.is_empty(), "{path} --help shows no example");
            for example in examples {
                let argv = words(example);
                assert_eq!(format!("analyzer {}", argv[1]), path, "{example} is not an example of {path}");
                if let Err(e) = command().try_get_matches_from(&argv) {
                    panic!("{path}: the example `{example}` does not parse: {e}");
                }
                tried += 1;
            }
        }
        assert!(tried >= 16, "only {tried} examples");
    }

    #[test]
    fn the_version_names_the_commit_and_both_contracts() {
        let line = version_line();
        assert!(line.starts_with(env!("CARGO_PKG_VERSION")), "{line}");
        assert!(line.contains("(commit "), "{line}");
        let format = accutrace_formats::capture::FORMAT_VERSION;
        assert!(line.contains(&format!("capture format {format}")), "{line}");
        assert!(line.ends_with(&format!("CLI {CLI_VERSION})")), "{line}");
    }

    #[test]
    fn docs_cli_md_is_the_contract_this_binary_keeps() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/CLI.md")).unwrap();
        let title = doc.lines().next().unwrap_or_default();
        assert!(title.contains(&format!("(contract version {CLI_VERSION})")), "docs/CLI.md says: {title}");
        assert!(
            doc.contains(&format!("- {CLI_VERSION}: ")),
            "docs/CLI.md lists no change for version {CLI_VERSION}"
        );
        // Every command is documented there.
        for (path, _) in
            all().into_iter().filter(|(p, _)| p.matches(' ').count() == 1 && p != "analyzer help")
        {
            assert!(doc.contains(&format!("`{path}")), "docs/CLI.md does not document {path}");
        }
    }

    #[test]
    fn record_reads_everything_after_the_separator_as_the_command() {
        let cli = Cli::try_parse_from([
            "analyzer", "record", "-o", "r", "--", "python", "train.py", "--format", "x",
        ])
        .unwrap();
        let Command::Record(args) = cli.command else { panic!("not record") };
        assert_eq!(args.command, ["python", "train.py", "--format", "x"]);
        assert_eq!(args.format, Format::Table);
    }
}
