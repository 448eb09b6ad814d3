//! `analyzer diff RUN1 RUN2`: is the run reproducible? Per step and rank, the first op whose output differs.

use crate::cli::DiffArgs;
use analyzer::diff::{
    diff, diff_by_windows_from, select_steps, CallPairing, DiffOptions, DiffReport, Refusal,
};
use analyzer::filter::Filter;
use analyzer::outcome::Outcome;
use analyzer::problems::InputProblems;
use analyzer::report::{self, Colour, Destination};
use analyzer::sources::capture::windows::{StepWindows, WINDOW_TENSORS};
use analyzer::sources::{detect, Detected};
use anyhow::Result;
use std::path::Path;

pub fn run(args: DiffArgs, colour: Colour) -> Result<Outcome> {
    let filter = args.filter.to_filter();
    let found = match by_windows([&args.run1, &args.run2], &filter)? {
        Some(([w1, w2], calls)) => {
            filter.check_places(&w1.places(), &args.run1)?;
            filter.check_places(&w2.places(), &args.run2)?;
            let options = DiffOptions { filter, progress: !args.no_progress };
            diff_by_windows_from([&w1, &w2], &options, calls)?
        }
        None => whole(&args, filter)?,
    };
    let to = Destination { output: args.report.output.as_deref(), colour };
    report::reader_may_leave(report::diff::write(&found, args.report.format.into(), &to))?;
    Ok(found.outcome().or_input_errors(&found.input_problems, args.input.allow_incomplete))
}

/// Both runs indexed whole and diffed.
fn whole(args: &DiffArgs, filter: Filter) -> Result<DiffReport> {
    // Indexing one run does not depend on the other: both at once, as compare does.
    let (run1, run2) =
        rayon::join(|| super::runs::open_run(&args.run1), || super::runs::open_run(&args.run2));
    let (run1, run2) = (run1?, run2?);
    filter.check(run1.index(), &args.run1)?;
    filter.check(run2.index(), &args.run2)?;
    let options = DiffOptions { filter, progress: !args.no_progress };
    // A refusal (not one configuration, nothing in common) is a report led by a REFUSED input problem.
    match diff(run1.as_ref(), run2.as_ref(), &options) {
        Ok(found) => Ok(found),
        Err(e) => match e.downcast::<Refusal>() {
            Ok(refusal) => Ok(DiffReport::refused(run1.as_ref(), run2.as_ref(), refusal)),
            Err(e) => {
                // Nothing to report on: what the sources miss (often the reason) goes out with the error.
                let _ = InputProblems::of_sources(&[run1.as_ref(), run2.as_ref()])
                    .lead(&mut std::io::stderr().lock());
                Err(e)
            }
        },
    }
}

/// Two captures, each longer than one window, analysed without `--op` (whose check needs every op's
/// name), are read a window of the same steps of each at a time (#18: what `diff` holds stays within a
/// window's two indexes whatever the runs' length); under `--step`, the selected steps' windows where
/// the census tells how the HCCL calls before them pair, with that pairing. Device statistics too: their
/// pairs are compared by the statistics and counted, not listed, so the report does not depend on how the
/// runs are read.
fn by_windows(runs: [&Path; 2], filter: &Filter) -> Result<Option<([StepWindows; 2], CallPairing)>> {
    let census = |run: &Path| -> Result<Option<StepWindows>> {
        match detect(run)? {
            Detected::Capture(root) if filter.ops.is_empty() => {
                StepWindows::census_with_calls(&root, WINDOW_TENSORS)
            }
            _ => Ok(None),
        }
    };
    let (a, b) = rayon::join(|| census(runs[0]), || census(runs[1]));
    let (Some(mut a), Some(mut b)) = (a?, b?) else { return Ok(None) };
    if !StepWindows::align(&mut a, &mut b, WINDOW_TENSORS) {
        return Ok(None);
    }
    let calls = select_steps([&mut a, &mut b], &filter.steps, WINDOW_TENSORS);
    Ok(Some(([a, b], calls)))
}
