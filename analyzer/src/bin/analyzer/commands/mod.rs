//! One module per subcommand: each turns its arguments into its engine's options, runs the engine, and
//! hands the result to the command's report.

use crate::cli::Command;
use analyzer::outcome::Outcome;
use analyzer::report::Colour;
use anyhow::Result;

mod check;
mod compare;
mod convert;
mod diff;
mod inspect;
mod merge;
mod overflow;
mod ranks;
mod record;
mod report;
mod runs;
mod scan;
mod shell;
mod watch;

/// Runs one parsed command.
pub fn run(command: Command, colour: Colour) -> Result<Outcome> {
    match command {
        Command::Inspect(args) => inspect::run(args),
        Command::Diff(args) => diff::run(args, colour),
        Command::Overflow(args) => overflow::run(args, colour),
        Command::Ranks(args) => ranks::run(args, colour),
        Command::Scan(args) => scan::run(args),
        Command::Merge(args) => merge::run(args, colour),
        Command::Compare(args) => compare::run(args, colour),
        Command::Report(args) => report::run(args),
        Command::Check(args) => check::run(args, colour),
        Command::Watch(args) => watch::run(args, colour),
        Command::Convert(args) => convert::run(args),
        Command::Record(args) => record::run(args),
        Command::Completions(args) => shell::completions(args.shell),
        Command::Manpage => shell::manpage(),
    }
}
