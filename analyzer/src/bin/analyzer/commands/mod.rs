//! One module per subcommand: each turns its arguments into its engine's options, runs the engine, and
//! hands the result to the command's report.

use crate::cli::Command;
use analyzer::outcome::Outcome;
use anyhow::Result;

mod compare;
mod convert;
mod diff;
mod inspect;
mod overflow;
mod record;

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
