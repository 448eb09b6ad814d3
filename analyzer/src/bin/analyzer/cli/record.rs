//! `analyzer record`'s arguments: what the collector keeps, which ops and tensors the runtime dumps.

use super::shared::Format;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Run directory to write the capture into: new or empty (one that holds files, or a file, is
    /// refused before the command runs).
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
    /// zstd level for tensor data, -7..22 (1 is fast; higher is smaller; negative levels are faster
    /// still).
    #[arg(long, default_value_t = 1, value_name = "N", allow_negative_numbers = true)]
    pub zstd_level: i32,
    /// Capture the device's overflow (op-debug) records instead of data: CANN makes overflow detection
    /// exclusive with the data dump, so only the ops that overflowed are dumped, with their status bits.
    #[arg(long)]
    pub overflow: bool,
    /// Also keep a small histogram of each tensor's values (counts per power of two and sign; about 140
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
    use super::super::root::{Cli, Command};
    use super::*;
    use clap::Parser;

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
