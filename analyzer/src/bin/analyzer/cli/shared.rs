//! The options several commands share: which ops, steps and ranks; incomplete input; a report's form and
//! where it goes.

use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// Which ops, steps and ranks a command looks at.
#[derive(Args, Debug, Clone, Default)]
pub struct FilterArgs {
    /// Only this step, steps FIRST-LAST, or a comma-separated list of both; repeatable (--step 5-9,
    /// --step 1,5,9-12).
    #[arg(long = "step", value_name = "S", value_parser = numbers::<u64>)]
    pub steps: Vec<Vec<u64>>,
    /// Only this rank, ranks FIRST-LAST, or a comma-separated list of both; repeatable (--rank 0-7,
    /// --rank 0,3).
    #[arg(long = "rank", value_name = "R", value_parser = numbers::<u32>)]
    pub ranks: Vec<Vec<u32>>,
    /// Only ops whose name matches this pattern (repeatable, any may match): a glob with `*` or `?` matches
    /// the whole name, a plain word matches anywhere in it.
    #[arg(long = "op", value_name = "PATTERN")]
    pub ops: Vec<String>,
}

impl FilterArgs {
    /// The engines' filter.
    pub fn to_filter(&self) -> analyzer::filter::Filter {
        analyzer::filter::Filter {
            steps: self.steps.concat(),
            ranks: self.ranks.concat(),
            ops: self.ops.clone(),
        }
    }
}

/// The most numbers one `--step` or `--rank` value may name: a range past it is a typo, not a selection.
const MOST_IN_A_RANGE: u64 = 1 << 20;

/// One number (`12`), an inclusive range of them (`0-22`), or a comma-separated list of both (`0,3,8-11`,
/// as users write ranks), for `--step` and `--rank`.
fn numbers<N: TryFrom<u64>>(text: &str) -> Result<Vec<N>, String> {
    let mut all = Vec::new();
    for part in text.split(',') {
        let (first, last) = range(part)?;
        if last - first >= MOST_IN_A_RANGE - all.len() as u64 {
            return Err(format!("{text} names more than {MOST_IN_A_RANGE} numbers"));
        }
        for n in first..=last {
            all.push(N::try_from(n).map_err(|_| format!("{n} is too large"))?);
        }
    }
    Ok(all)
}

/// The first and last number of one item of a `--step` or `--rank` list.
fn range(text: &str) -> Result<(u64, u64), String> {
    let number = |t: &str| t.trim().parse::<u64>().ok();
    let (first, last) = match text.split_once('-') {
        None => (number(text), number(text)),
        Some((first, last)) => (number(first), number(last)),
    };
    let (Some(first), Some(last)) = (first, last) else {
        return Err(format!(
            "{text:?} is not a number (12), a range FIRST-LAST (0-22) or a list of them (0,3,8-11)"
        ));
    };
    if first > last {
        return Err(format!("the range {first}-{last} runs backwards: write {last}-{first}"));
    }
    Ok((first, last))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `--step` and `--rank` take one number, an inclusive range or a comma-separated list of both;
    /// anything else, a range that runs backwards, one past the cap or past the type says what to write
    /// instead.
    #[test]
    fn steps_and_ranks_are_numbers_ranges_or_lists() {
        assert_eq!(numbers::<u64>("12"), Ok(vec![12]));
        assert_eq!(numbers::<u64>("0-3"), Ok(vec![0, 1, 2, 3]));
        assert_eq!(numbers::<u32>("7-7"), Ok(vec![7]));
        assert_eq!(numbers::<u32>("0,3"), Ok(vec![0, 3]));
        assert_eq!(numbers::<u64>("9, 2-4,2"), Ok(vec![9, 2, 3, 4, 2]));
        for bad in ["", "-", "0-", "-3", "a", "0-22x", "1.5", "0 - 2 - 4", "0,", ",3", "0,,3", "0;3"] {
            let why = numbers::<u64>(bad).unwrap_err();
            assert!(
                why.contains("is not a number (12), a range FIRST-LAST (0-22) or a list"),
                "{bad:?}: {why}"
            );
        }
        assert_eq!(numbers::<u64>("1,5-2").unwrap_err(), "the range 5-2 runs backwards: write 2-5");
        assert!(numbers::<u64>("0-1048576").unwrap_err().contains("names more than 1048576 numbers"));
        assert!(numbers::<u64>("0-1048574,7,8").unwrap_err().contains("names more than 1048576 numbers"));
        assert_eq!(numbers::<u64>("0-1048575").map(|v| v.len()), Ok(1 << 20));
        assert_eq!(numbers::<u64>("0-1048574,7").map(|v| v.len()), Ok(1 << 20));
        assert_eq!(numbers::<u32>("1,4294967296").unwrap_err(), "4294967296 is too large");
    }
}
