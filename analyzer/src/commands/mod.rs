//! One module per subcommand. Each returns an [`Outcome`] that main turns into the exit status.

use crate::cli::Command;
use anyhow::Result;

pub mod compare;
pub mod convert;
pub mod diff;
pub mod inspect;
pub mod overflow;
pub mod record;

/// What a command found, mapped to the exit status by main (0, 1; errors are 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing wrong found.
    Pass,
    /// The command found what it looks for: mismatches, differences, overflows.
    Findings,
}

impl Outcome {
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Pass => 0,
            Outcome::Findings => 1,
        }
    }
}

/// Runs one parsed command.
pub fn run(command: Command) -> Result<Outcome> {
    match command {
        Command::Inspect(args) => inspect::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Overflow(args) => overflow::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Record(args) => record::run(args),
    }
}
