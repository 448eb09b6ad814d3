//! `analyzer convert SOURCE -o DIR`: every selected tensor as a `.npy` file in host layout.

use crate::cli::ConvertArgs;
use analyzer::convert::convert;
use analyzer::outcome::Outcome;
use analyzer::{report, sources};
use anyhow::Result;

pub fn run(args: ConvertArgs) -> Result<Outcome> {
    let source = sources::open(&args.source)?;
    let filter = args.filter.to_filter();
    filter.check(source.index(), &args.source)?;
    let results = convert(source.as_ref(), &filter, &args.output)?;
    report::reader_may_leave(report::convert::write(&args.output, &results, args.format.into()))?;
    // Every tensor that could not be converted was listed; that is an input error, not an all-clear.
    report::convert::failures(&results)?;
    Ok(Outcome::Pass)
}
