//! `analyzer inspect PATH`: each op with its inputs and outputs and their statistics.

use crate::cli::{Format, InspectArgs};
use analyzer::inspect::inspect;
use analyzer::outcome::Outcome;
use analyzer::report;
use anyhow::Result;

pub fn run(args: InspectArgs) -> Result<Outcome> {
    let source = super::runs::open_run(&args.path)?;
    let filter = args.filter.to_filter();
    filter.check(source.index(), &args.path)?;
    let found = inspect(source.as_ref(), &filter, !args.no_progress);
    let format = if args.json { Format::Json } else { args.report.format };
    let written =
        report::inspect::write(source.as_ref(), &found, format.into(), args.report.output.as_deref());
    report::reader_may_leave(written)?;
    Ok(found.outcome().or_input_errors(&found.input_problems, args.input.allow_incomplete))
}
