//! `analyzer` itself: the global `--color`, the subcommands with their help and examples, the version line.

use super::check::CheckArgs;
use super::compare::CompareArgs;
use super::convert::ConvertArgs;
use super::diff::DiffArgs;
use super::inspect::InspectArgs;
use super::merge::MergeArgs;
use super::overflow::OverflowArgs;
use super::ranks::RanksArgs;
use super::record::RecordArgs;
use super::report::ReportArgs;
use super::scan::ScanArgs;
use super::shell::CompletionsArgs;
use super::watch::WatchArgs;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

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
/// that closes the output early (`| head`) changes nothing: the status says what was found.
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
    /// Compare a target run (NPU) with a benchmark (GPU/CPU): the first op failing while its inputs pass.
    ///
    /// Compares op by op; the report leads with the first op that fails while its inputs pass
    /// (the culprit).
    ///
    /// A kernel-level target (an eager capture: MatMulV2_3, BiasAdd_3) against an API-level benchmark
    /// (msprobe's dump of the PyTorch run: Functional.linear.0.forward) is aligned by execution order,
    /// shapes and statistics; the report then names the first diverging API and its kernels. An eager
    /// capture against a graph-mode benchmark (model/embedding/GatherV2) is refused (exit 2): no name ties
    /// the two; record both the same way, or pass --mapping. So are two eager captures whose kernel
    /// types part (one run fused ops the other did not): past that, a name (type and counter) is another
    /// kernel on each side; record both with the same fusion setting, or pass --mapping.
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
    /// Diff two runs of one configuration bit for bit: the first op to differ in each step and rank.
    ///
    /// Examples:
    ///   analyzer diff runs/a runs/b
    ///   analyzer diff runs/a runs/b --format csv -o diff.csv
    #[command(verbatim_doc_comment)]
    Diff(DiffArgs),
    /// Name the first op (per step and rank) that produced inf/NaN or saturated values from finite inputs.
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
    /// offline, with nothing beside it. While input problems lead the page, no verdict is an all-clear:
    /// check's items that passed read "pass on what was read".
    ///
    /// Examples:
    ///   analyzer report runs/npu bench/ -o report.html
    ///   analyzer report runs/npu -o npu.html
    ///   analyzer report runs/a runs/b --step 1 -o ab.html
    #[command(verbatim_doc_comment)]
    Report(ReportArgs),
    /// Name the first anomaly across a job's ranks and how it spread through collectives.
    ///
    /// Reads a capture of every rank (the collector records each rank's HCCL calls). Happens-before is
    /// program order within a rank, every collective matched by (communicator, sequence number), and send
    /// before receive; the first anomaly is one nothing anomalous happened before. Anomalies: inf/NaN or
    /// saturated values, members of a collective getting results that must be equal and are not, a tensor
    /// that data-parallel replicas hold bit for bit differing on a minority (weights after a bit flip, a
    /// nondeterministic reduction), and with --baseline a tensor that differs from the same rank's in a
    /// good run (one rank reading different data).
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
    /// The files also answer SQL (DuckDB, Spark): schema and the first-anomaly query
    /// in docs/RANK_SUMMARIES.md.
    ///
    /// Examples:
    ///   analyzer scan runs/npu -o summaries/
    ///   analyzer scan runs/npu --step 1 -o step1/ --format json
    #[command(verbatim_doc_comment)]
    Scan(ScanArgs),
    /// The answer of `analyzer ranks` from the summaries `analyzer scan` wrote on each node.
    ///
    /// The same answer (first anomaly across ranks, its spread) as `analyzer ranks` on all ranks at once.
    ///
    /// Give the summaries of one run: ranks of another run (rank 0 scanned from one attempt of the job,
    /// rank 1 from the next) lead as input problems naming each run's ranks and communicators (exit 2).
    ///
    /// Examples:
    ///   analyzer merge summaries/
    ///   analyzer merge summaries/ --format json
    #[command(verbatim_doc_comment)]
    Merge(MergeArgs),
    /// Pre-tuning checks: determinism, data, weights, precision, loss scale, configuration.
    ///
    /// Each item says pass, fail or can't tell with the reason and where to look. With a second run,
    /// every item compares the two (same data in the same order, same initial weights, same dtypes, same
    /// hyperparameters and versions). While input problems lead (missing or unreadable data), an item
    /// that passed on what was read says can't tell (JSON: passed_on_what_was_read).
    ///
    /// Examples:
    ///   analyzer check runs/npu
    ///   analyzer check runs/a runs/b --format json -o checklist.json
    #[command(verbatim_doc_comment)]
    Check(CheckArgs),
    /// Watch a run's training health at each step (MindInsight's conditions and thresholds).
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
    /// Run a command with the collector preloaded and capture its dumps, like `perf record`.
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
}
