//! `analyzer compare TARGET BENCH`: op by op against a benchmark; the answer leads with the first op that
//! fails while its inputs pass (the culprit), then lists the failures in execution order.

use crate::cli::CompareArgs;
use analyzer::compare::{compare, CompareOptions};
use analyzer::filter::Filter;
use analyzer::matching::{read_mapping_file, MatchOptions};
use analyzer::outcome::Outcome;
use analyzer::report::compare::windows::compare_steps_by_windows;
use analyzer::report::compare::CompareFormat;
use analyzer::report::{self, Colour, Destination};
use analyzer::sources::capture::windows::{StepWindows, WINDOW_TENSORS};
use analyzer::sources::{detect, Detected};
use anyhow::Result;
use std::path::Path;

pub fn run(args: CompareArgs, colour: Colour) -> Result<Outcome> {
    let filter = args.filter.to_filter();
    let mut matching = MatchOptions { fuzzy: args.fuzzy, ..Default::default() };
    if let Some(path) = &args.mapping {
        matching.mapping = read_mapping_file(path)?;
    }
    let format: CompareFormat = args.format.into();
    let options = CompareOptions {
        filter,
        matching,
        // Unless asked, what the report's form shows: the table needs none of msaccucmp's figures.
        families: args.metrics.map(Into::into).or(format.families_shown()),
        cosine_min: args.cosine_min,
        max_abs_err: args.max_abs_err,
        progress: !args.no_progress,
    };
    let to = Destination { output: args.output.as_deref(), colour };
    // Two long captures: a window of the same steps of each at a time (#18), but for msprobe's table and
    // the table of every pair (`--all`), which read the whole captures.
    let windowed = match format {
        CompareFormat::Csv | CompareFormat::Json => !args.fuzzy,
        CompareFormat::Table => !args.fuzzy && !args.all,
        CompareFormat::MsprobeCsv => false,
    };
    if let Some([mut t, mut b]) = by_windows([&args.target, &args.bench], &options.filter, windowed)? {
        options.filter.check_places(&t.places(), &args.target)?;
        options.filter.check_places(&b.places(), &args.bench)?;
        if let Some(done) = compare_steps_by_windows([&mut t, &mut b], &options, format, &to)? {
            return Ok(done.outcome.or_input_errors(&done.problems, args.input.allow_incomplete));
        }
    }
    let (target, bench) =
        rayon::join(|| super::runs::open_run(&args.target), || super::runs::open_run(&args.bench));
    let (target, bench) = (target?, bench?);
    options.filter.check(target.index(), &args.target)?;
    options.filter.check(bench.index(), &args.bench)?;
    // A refusal (another model, nothing matched) is a REFUSED input problem: the report leads with it.
    let comparison = compare(target.as_ref(), bench.as_ref(), &options);
    report::reader_may_leave(report::compare::write(&comparison, format, &to, args.all))?;
    Ok(comparison.outcome().or_input_errors(&comparison.problems, args.input.allow_incomplete))
}

/// Two captures, each longer than one window, compared without `--op` (whose check needs every op's
/// name), are read a window of the same steps of each at a time where `windowed` (#18: what `compare`
/// holds stays within a window's two indexes and what spans windows, whatever the runs' length); with
/// `--step`, the windows of the selected steps alone (each pair, op and verdict is of its step; the census
/// still counts every step, for the selection's check and the shortfalls), every step's where those cannot
/// say what the whole runs' report does (`compare_steps_by_windows`).
fn by_windows(runs: [&Path; 2], filter: &Filter, windowed: bool) -> Result<Option<[StepWindows; 2]>> {
    if !windowed || !filter.ops.is_empty() {
        return Ok(None);
    }
    // With a selection of steps, the benchmark's census notes what the report asks of its every tensor, so
    // that the other steps need not be read for it (every window read, the windows tell it themselves).
    let census = |run: &Path, bench: bool| -> Result<Option<StepWindows>> {
        match (detect(run)?, bench) {
            (Detected::Capture(root), false) => StepWindows::census(&root, WINDOW_TENSORS),
            (Detected::Capture(root), true) => StepWindows::census_of_bench(&root, WINDOW_TENSORS),
            _ => Ok(None),
        }
    };
    let (a, b) = rayon::join(|| census(runs[0], false), || census(runs[1], !filter.steps.is_empty()));
    let (Some(mut a), Some(mut b)) = (a?, b?) else { return Ok(None) };
    // Aligned, the windows keep to the selection where both runs could (`StepWindows::align`).
    a.select_steps(&filter.steps);
    b.select_steps(&filter.steps);
    Ok(StepWindows::align(&mut a, &mut b, WINDOW_TENSORS).then_some([a, b]))
}
