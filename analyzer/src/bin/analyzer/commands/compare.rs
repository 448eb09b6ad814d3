//! `analyzer compare TARGET BENCH`: op by op against a benchmark; the answer leads with the first op that
//! fails while its inputs pass (the culprit), then lists the failures in execution order.

use crate::cli::CompareArgs;
use analyzer::compare::{compare, CompareOptions};
use analyzer::matching::{read_mapping_file, MatchOptions};
use analyzer::outcome::Outcome;
use analyzer::report::{self, Colour, Destination};
use anyhow::Result;

pub fn run(args: CompareArgs, colour: Colour) -> Result<Outcome> {
    let (target, bench) =
        rayon::join(|| super::runs::open_run(&args.target), || super::runs::open_run(&args.bench));
    let (target, bench) = (target?, bench?);
    let filter = args.filter.to_filter();
    filter.check(target.index(), &args.target)?;
    filter.check(bench.index(), &args.bench)?;
    let mut matching = MatchOptions { fuzzy: args.fuzzy, ..Default::default() };
    if let Some(path) = &args.mapping {
        matching.mapping = read_mapping_file(path)?;
    }
    let format: report::compare::CompareFormat = args.format.into();
    let options = CompareOptions {
        filter,
        matching,
        // Unless asked, what the report's form shows: the table needs none of msaccucmp's figures.
        families: args.metrics.map(Into::into).or(format.families_shown()),
        cosine_min: args.cosine_min,
        max_abs_err: args.max_abs_err,
        progress: !args.no_progress,
    };
    // A refusal (another model, nothing matched) is a REFUSED input problem: the report leads with it.
    let comparison = compare(target.as_ref(), bench.as_ref(), &options);
    let to = Destination { output: args.output.as_deref(), colour };
    report::reader_may_leave(report::compare::write(&comparison, format, &to, args.all))?;
    Ok(comparison.outcome().or_input_errors(&comparison.problems, args.input.allow_incomplete))
}
