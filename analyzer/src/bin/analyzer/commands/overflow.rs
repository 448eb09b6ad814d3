//! `analyzer overflow RUN`: the first op (per step and rank) that produced inf/NaN from finite inputs.

use crate::cli::OverflowArgs;
use analyzer::outcome::Outcome;
use analyzer::overflow::overflow;
use analyzer::report::{self, Colour, Destination};
use anyhow::Result;

pub fn run(args: OverflowArgs, colour: Colour) -> Result<Outcome> {
    let source = super::runs::open_run(&args.run)?;
    let filter = args.filter.to_filter();
    filter.check(source.index(), &args.run)?;
    let found = overflow(source.as_ref(), &filter, !args.no_progress);
    let to = Destination { output: args.report.output.as_deref(), colour };
    report::reader_may_leave(report::overflow::write(&found, args.report.format.into(), &to))?;
    Ok(found.outcome().or_input_errors(&found.input_problems, args.input.allow_incomplete))
}
