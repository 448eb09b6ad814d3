//! `analyzer diff RUN1 RUN2`: is the run reproducible? Per step and rank, the first op whose output differs.

use crate::cli::DiffArgs;
use analyzer::diff::{diff, DiffOptions, DiffReport, Refusal};
use analyzer::outcome::Outcome;
use analyzer::problems::InputProblems;
use analyzer::report::{self, Colour, Destination};
use anyhow::Result;

pub fn run(args: DiffArgs, colour: Colour) -> Result<Outcome> {
    // Indexing one run does not depend on the other: both at once, as compare does.
    let (run1, run2) =
        rayon::join(|| super::runs::open_run(&args.run1), || super::runs::open_run(&args.run2));
    let (run1, run2) = (run1?, run2?);
    let filter = args.filter.to_filter();
    filter.check(run1.index(), &args.run1)?;
    filter.check(run2.index(), &args.run2)?;
    let options = DiffOptions { filter, progress: !args.no_progress };
    // A refusal (not one configuration, nothing in common) is a report led by a REFUSED input problem.
    let found = match diff(run1.as_ref(), run2.as_ref(), &options) {
        Ok(found) => found,
        Err(e) => match e.downcast::<Refusal>() {
            Ok(refusal) => DiffReport::refused(run1.as_ref(), run2.as_ref(), refusal),
            Err(e) => {
                // Nothing to report on: what the sources miss (often the reason) goes out with the error.
                let _ = InputProblems::of_sources(&[run1.as_ref(), run2.as_ref()])
                    .lead(&mut std::io::stderr().lock());
                return Err(e);
            }
        },
    };
    let to = Destination { output: args.report.output.as_deref(), colour };
    report::reader_may_leave(report::diff::write(&found, args.report.format.into(), &to))?;
    Ok(found.outcome().or_input_errors(&found.input_problems, args.input.allow_incomplete))
}
