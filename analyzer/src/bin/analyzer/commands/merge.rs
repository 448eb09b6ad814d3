//! `analyzer merge DIR...`: the cross-rank answer of `analyzer ranks` from the summaries `analyzer scan`
//! wrote on each node.

use crate::cli::MergeArgs;
use analyzer::outcome::Outcome;
use analyzer::ranks::{analyze, summary};
use analyzer::report::{self, Colour, Destination};
use anyhow::Result;

pub fn run(args: MergeArgs, colour: Colour) -> Result<Outcome> {
    let events = summary::read(&args.summaries)?;
    let baseline = match &args.baseline {
        Some(path) => Some((path.display().to_string(), summary::read(std::slice::from_ref(path))?)),
        None => None,
    };
    let named: Vec<String> = args.summaries.iter().map(|p| p.display().to_string()).collect();
    let found = analyze(&named.join(" "), &events, baseline.as_ref().map(|(n, e)| (n.as_str(), e)));
    let to = Destination { output: args.report.output.as_deref(), colour };
    report::reader_may_leave(report::ranks::write(&found, "merge", args.report.format.into(), &to))?;
    Ok(found.outcome().or_input_errors(&found.input_problems, args.input.allow_incomplete))
}
