//! `analyzer scan RUN -o DIR`: one summary per rank of this node's part of a job, for `analyzer merge`.

use crate::cli::ScanArgs;
use analyzer::outcome::Outcome;
use analyzer::problems::InputProblems;
use analyzer::progress::Stages;
use analyzer::ranks::summary;
use analyzer::report;
use anyhow::Result;

pub fn run(args: ScanArgs) -> Result<Outcome> {
    let mut stages = Stages::new("scan", 3, args.no_progress);
    stages.start("reading the run");
    let source = super::runs::open_run(&args.run)?;
    let filter = args.filter.to_filter();
    filter.check(source.index(), &args.run)?;
    stages.start("reading the statistics");
    let summary::Scanned { events, series } = summary::scan(source.as_ref(), &filter, !args.no_progress);
    stages.start("writing the summaries");
    let written = summary::write(&events, &series, &args.run.display().to_string(), &args.output)?;
    // The summaries carry the problems too, so that merge leads with them; here they make the exit 2.
    let mut problems = InputProblems::default();
    for p in &events.problems {
        problems.push(p.clone());
    }
    report::reader_may_leave(report::scan::write(&args.output, &written, args.format.into(), &problems))?;
    Ok(Outcome::Pass.or_input_errors(&problems, args.input.allow_incomplete))
}
