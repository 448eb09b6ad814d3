//! `analyzer inspect PATH`: each op with its inputs and outputs and their statistics.

use crate::cli::InspectArgs;
use analyzer::inspect::inspect;
use analyzer::outcome::Outcome;
use analyzer::report::{self, Format};
use analyzer::sources;
use anyhow::Result;

pub fn run(args: InspectArgs) -> Result<Outcome> {
    let source = sources::open(&args.path)?;
    let rows = inspect(source.as_ref(), &args.filter.to_filter());
    let format = if args.json { Format::Json } else { Format::Table };
    report::inspect::write(source.as_ref(), &rows, format)?;
    Ok(Outcome::Pass)
}
