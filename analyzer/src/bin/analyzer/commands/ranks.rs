//! `analyzer ranks RUN`: the first anomaly across ranks and how it spread.

use crate::cli::RanksArgs;
use analyzer::outcome::Outcome;
use analyzer::ranks::{analyze, events::RunEvents};
use analyzer::report::{self, Colour, Destination};
use analyzer::sources;
use anyhow::Result;

pub fn run(args: RanksArgs, colour: Colour) -> Result<Outcome> {
    let filter = args.filter.to_filter();
    let source = sources::open(&args.run)?;
    filter.check(source.index(), &args.run)?;
    let events = RunEvents::from_source(source.as_ref(), &filter);
    let baseline = match &args.baseline {
        Some(path) => {
            let good = sources::open(path)?;
            filter.check(good.index(), path)?;
            Some((path.display().to_string(), RunEvents::from_source(good.as_ref(), &filter)))
        }
        None => None,
    };
    let found =
        analyze(&args.run.display().to_string(), &events, baseline.as_ref().map(|(n, e)| (n.as_str(), e)));
    let to = Destination { output: args.report.output.as_deref(), colour };
    report::reader_may_leave(report::ranks::write(&found, "ranks", args.report.format.into(), &to))?;
    Ok(found.outcome().or_input_errors(&found.input_problems, args.input.allow_incomplete))
}
