//! `analyzer overflow RUN`: the first op (per step and rank) that produced inf/NaN from finite inputs.

use crate::cli::OverflowArgs;
use analyzer::filter::Filter;
use analyzer::outcome::Outcome;
use analyzer::overflow::{overflow, overflow_by_windows};
use analyzer::report::{self, Colour, Destination};
use analyzer::sources::capture::windows::{StepWindows, WINDOW_TENSORS};
use analyzer::sources::{detect, Detected};
use anyhow::Result;
use std::path::Path;

pub fn run(args: OverflowArgs, colour: Colour) -> Result<Outcome> {
    let filter = args.filter.to_filter();
    let found = match by_windows(&args.run, &filter)? {
        Some(windows) => {
            filter.check_places(&windows.places(), &args.run)?;
            overflow_by_windows(&windows, &filter, !args.no_progress)?
        }
        None => {
            let source = super::runs::open_run(&args.run)?;
            filter.check(source.index(), &args.run)?;
            overflow(source.as_ref(), &filter, !args.no_progress)
        }
    };
    let to = Destination { output: args.report.output.as_deref(), colour };
    report::reader_may_leave(report::overflow::write(&found, args.report.format.into(), &to))?;
    Ok(found.outcome().or_input_errors(&found.input_problems, args.input.allow_incomplete))
}

/// A capture longer than one window, analysed without `--op` (whose check needs every op's name), is read a
/// window of steps at a time (#18: what `overflow` holds stays within a window's index whatever the run's
/// length); with `--step`, the windows of the selected steps only: each origin, arrival, skipped update and
/// loss scale is of a selected step, and a drop is told between selected steps.
fn by_windows(run: &Path, filter: &Filter) -> Result<Option<StepWindows>> {
    let mut windows = match detect(run)? {
        Detected::Capture(root) if filter.ops.is_empty() => StepWindows::census(&root, WINDOW_TENSORS)?,
        _ => None,
    };
    if let Some(windows) = &mut windows {
        windows.select_steps(&filter.steps);
    }
    Ok(windows)
}
