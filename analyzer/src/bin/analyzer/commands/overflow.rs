//! `analyzer overflow RUN`: the first op (per step and rank) that produced inf/NaN from finite inputs.

use crate::cli::OverflowArgs;
use analyzer::outcome::Outcome;
use analyzer::overflow::overflow;
use analyzer::{report, sources};
use anyhow::Result;

pub fn run(args: OverflowArgs) -> Result<Outcome> {
    let source = sources::open(&args.run)?;
    let found = overflow(source.as_ref(), &args.filter.to_filter());
    report::overflow::write(&found, args.format.into(), args.output.as_deref())?;
    Ok(found.outcome())
}
