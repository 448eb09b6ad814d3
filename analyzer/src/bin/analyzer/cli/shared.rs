//! The options several commands share: which ops, steps and ranks; incomplete input; a report's form and
//! where it goes.

use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// Which ops, steps and ranks a command looks at.
#[derive(Args, Debug, Clone, Default)]
pub struct FilterArgs {
    /// Only this step (repeatable: --step 0 --step 5).
    #[arg(long = "step", value_name = "S")]
    pub steps: Vec<u64>,
    /// Only this rank (repeatable).
    #[arg(long = "rank", value_name = "R")]
    pub ranks: Vec<u32>,
    /// Only ops whose name matches this pattern (repeatable, any may match): a glob with `*` or `?` matches
    /// the whole name, a plain word matches anywhere in it.
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

/// `--format` and `-o`: a report's form and where it goes.
#[derive(Args, Debug, Clone, Default)]
pub struct OutputArgs {
    /// Report format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Write the report to this file instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}
