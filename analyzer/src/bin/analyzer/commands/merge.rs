//! `analyzer merge DIR...`: the cross-rank answer of `analyzer ranks` from the summaries `analyzer scan`
//! wrote on each node.

use crate::cli::MergeArgs;
use analyzer::outcome::Outcome;
use analyzer::progress::Stages;
use analyzer::ranks::{analyze, summary};
use analyzer::report::{self, Colour, Destination};
use anyhow::Result;

pub fn run(args: MergeArgs, colour: Colour) -> Result<Outcome> {
    let mut stages = Stages::new("merge", if args.baseline.is_some() { 3 } else { 2 }, args.no_progress);
    stages.start("reading the summaries");
    let events = summary::read_showing(&args.summaries, !args.no_progress)?;
    let baseline = match &args.baseline {
        Some(path) => {
            stages.start("reading the baseline's summaries");
            let good = summary::read_showing(std::slice::from_ref(path), !args.no_progress)?;
            Some((path.display().to_string(), good))
        }
        None => None,
    };
    stages.start("analysing across ranks");
    let named: Vec<String> = args.summaries.iter().map(|p| p.display().to_string()).collect();
    let found = analyze(&named.join(" "), &events, baseline.as_ref().map(|(n, e)| (n.as_str(), e)));
    let to = Destination { output: args.report.output.as_deref(), colour };
    report::reader_may_leave(report::ranks::write(&found, "merge", args.report.format.into(), &to))?;
    Ok(found.outcome().or_input_errors(&found.input_problems, args.input.allow_incomplete))
}
