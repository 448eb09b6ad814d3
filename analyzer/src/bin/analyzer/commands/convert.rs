//! `analyzer convert SOURCE -o DIR`: every selected tensor as a `.npy` file in host layout.

use crate::cli::ConvertArgs;
use analyzer::convert::{convert, input_problems};
use analyzer::outcome::Outcome;
use analyzer::report;
use anyhow::Result;

pub fn run(args: ConvertArgs) -> Result<Outcome> {
    let source = super::runs::open_run(&args.source)?;
    let filter = args.filter.to_filter();
    filter.check(source.index(), &args.source)?;
    let results = convert(source.as_ref(), &filter, &args.output, !args.no_progress)?;
    // Every tensor that could not be converted is an input problem: listed first, and exit status 2.
    let problems = input_problems(source.as_ref(), &results);
    report::reader_may_leave(report::convert::write(&args.output, &results, args.format.into(), &problems))?;
    Ok(Outcome::Pass.or_input_errors(&problems, args.input.allow_incomplete))
}
