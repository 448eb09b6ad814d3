//! `analyzer ranks RUN`: the first anomaly across ranks and how it spread.

use crate::cli::RanksArgs;
use analyzer::outcome::Outcome;
use analyzer::ranks::{analyze, events::RunEvents};
use analyzer::report::{self, Colour, Destination};
use analyzer::sources;
use anyhow::{bail, Result};

pub fn run(args: RanksArgs, colour: Colour) -> Result<Outcome> {
    let source = sources::open(&args.run)?;
    let events = RunEvents::from_source(source.as_ref());
    let baseline = match &args.baseline {
        Some(path) => {
            Some((path.display().to_string(), RunEvents::from_source(sources::open(path)?.as_ref())))
        }
        None => None,
    };
    let found =
        analyze(&args.run.display().to_string(), &events, baseline.as_ref().map(|(n, e)| (n.as_str(), e)));
    let to = Destination { output: args.report.output.as_deref(), colour };
    report::reader_may_leave(report::ranks::write(&found, "ranks", args.report.format.into(), &to))?;
    finish(&found)
}

/// The outcome, or (after the report was written) an input error when happens-before is partial.
pub fn finish(found: &analyzer::ranks::RanksReport) -> Result<Outcome> {
    if !found.incomplete.is_empty() {
        bail!(
            "{} collective(s) or receive(s) could not be matched across ranks (listed first in the report): \
             the answer is partial",
            found.incomplete.len()
        );
    }
    Ok(found.outcome())
}
