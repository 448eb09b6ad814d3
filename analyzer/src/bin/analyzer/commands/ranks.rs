//! `analyzer ranks RUN`: the first anomaly across ranks and how it spread.

use crate::cli::RanksArgs;
use analyzer::comparable::{configuration_differences, not_one_configuration_at, ConfigurationDifference};
use analyzer::filter::rank_ranges;
use analyzer::filter::Filter;
use analyzer::outcome::Outcome;
use analyzer::progress::Stages;
use analyzer::ranks::baseline_windows::{ranks_by_windows_against, Against};
use analyzer::ranks::fold::{ranks_by_windows, WINDOW_TENSORS};
use analyzer::ranks::{analyze, events::RunEvents, refuse_baseline, RanksReport};
use analyzer::report::{self, Colour, Destination};
use analyzer::sources;
use analyzer::sources::capture::windows::StepWindows;
use analyzer::sources::{detect, Detected};
use anyhow::Result;
use std::path::Path;

pub fn run(args: RanksArgs, colour: Colour) -> Result<Outcome> {
    let filter = args.filter.to_filter();
    let mut stages = Stages::new("ranks", if args.baseline.is_some() { 3 } else { 2 }, args.no_progress);
    stages.start("reading the run");
    let name = args.run.display().to_string();
    if let Some(found) = by_windows(&args, &filter, &name, &mut stages)? {
        return write(&args, colour, &found);
    }
    let source = super::runs::open_run(&args.run)?;
    filter.check(source.index(), &args.run)?;
    let events = RunEvents::from_source(source.as_ref(), &filter);
    // diff's configuration check first: a baseline of another configuration is refused, not analysed.
    let mut refusal = None;
    let baseline = match &args.baseline {
        Some(path) => {
            stages.start("reading the baseline");
            let good = sources::open(path)?;
            filter.check(good.index(), path)?;
            let differences = configuration_differences(source.index(), good.index(), &filter);
            if differences.is_empty() {
                // Only the two runs' events are analysed: the run's index goes before the baseline's events
                // are made, so both indexes and both runs' events are not held at once (#18). Freeing it
                // is a few large blocks since names, shapes and an op's tensors stopped being a block each.
                drop(std::mem::ManuallyDrop::into_inner(source));
                Some((path.display().to_string(), RunEvents::from_source(good.as_ref(), &filter)))
            } else {
                let reason = not_a_baseline(source.root(), good.root(), &differences);
                refusal = Some((path.display().to_string(), good.index().ranks(), reason));
                None
            }
        }
        None => None,
    };
    stages.start("analysing across ranks");
    let mut found = analyze(&name, &events, baseline.as_ref().map(|(n, e)| (n.as_str(), e)));
    if let Some((name, good_ranks, reason)) = refusal {
        refuse(&mut found, name, &good_ranks, reason);
    }
    write(&args, colour, &found)
}

/// Refuses the baseline `name`, of ops on `good_ranks`, of the run `found` is the report of alone: `reason`,
/// with the examined ranks it has no op of.
fn refuse(found: &mut RanksReport, name: String, good_ranks: &[u32], reason: String) {
    let lacking: Vec<u32> =
        found.examined_ranks.iter().copied().filter(|r| !good_ranks.contains(r)).collect();
    let reason = if lacking.is_empty() {
        reason
    } else {
        reason.replacen(
            ":\n",
            &format!(":\n  ranks: the baseline has no op of {}\n", rank_ranges(&lacking)),
            1,
        )
    };
    found.baseline = Some(name);
    refuse_baseline(found, reason);
}

fn write(args: &RanksArgs, colour: Colour, found: &RanksReport) -> Result<Outcome> {
    let to = Destination { output: args.report.output.as_deref(), colour };
    report::reader_may_leave(report::ranks::write(found, "ranks", args.report.format.into(), &to))?;
    Ok(found.outcome().or_input_errors(&found.input_problems, args.input.allow_incomplete))
}

/// A capture longer than one window, analysed without `--op` (whose check needs every op's name), is read a
/// window of steps at a time (#18: what `ranks` holds stays near a window's index whatever the run's
/// length); with `--baseline`, a window of the same steps of each run. `None`: read whole.
fn by_windows(
    args: &RanksArgs,
    filter: &Filter,
    name: &str,
    stages: &mut Stages,
) -> Result<Option<RanksReport>> {
    let Detected::Capture(root) = detect(&args.run)? else { return Ok(None) };
    if !filter.ops.is_empty() {
        return Ok(None);
    }
    let Some(mut windows) = StepWindows::census(&root, WINDOW_TENSORS)? else { return Ok(None) };
    let Some(path) = &args.baseline else {
        // The answer is the selected steps' (events, calls and replicas at them), over every rank the run has.
        if windows.every_rank_at(&filter.steps) {
            windows.select_steps(&filter.steps);
        }
        filter.check_places(&windows.places(), &args.run)?;
        stages.start("analysing across ranks, a window of steps at a time");
        return ranks_by_windows(name, &windows, filter);
    };
    // A baseline that is not a long capture, or cannot be read, is read whole: the whole read says why.
    let Ok(Detected::Capture(good_root)) = detect(path) else { return Ok(None) };
    let Ok(Some(mut good)) = StepWindows::census(&good_root, WINDOW_TENSORS) else { return Ok(None) };
    if !StepWindows::align(&mut windows, &mut good, WINDOW_TENSORS) {
        return Ok(None);
    }
    // The census walked every record of the baseline: its reading, as the whole read's stage counts it.
    stages.start("reading the baseline");
    filter.check_places(&windows.places(), &args.run)?;
    filter.check_places(&good.places(), path)?;
    stages.start("analysing across ranks, a window of steps of both runs at a time");
    let good_name = path.display().to_string();
    match ranks_by_windows_against([name, &good_name], [&windows, &good], filter)? {
        None => Ok(None),
        Some(Against::Report(found)) => Ok(Some(*found)),
        Some(Against::NotOneConfiguration(differences)) => {
            // The run alone, read again a window at a time: a refused baseline takes no part in its report.
            let Some(mut found) = ranks_by_windows(name, &windows, filter)? else { return Ok(None) };
            let mut good_ranks: Vec<u32> = good.places().into_iter().map(|(rank, _)| rank).collect();
            good_ranks.dedup();
            let reason = not_a_baseline(windows.root(), good.root(), &differences);
            refuse(&mut found, good_name, &good_ranks, reason);
            Ok(Some(found))
        }
    }
}

/// diff's refusal of runs that are not one configuration, worded for a baseline.
fn not_a_baseline(run: &Path, good: &Path, differences: &[ConfigurationDifference]) -> String {
    let text = not_one_configuration_at(run, good, differences);
    let details: Vec<&str> = text.lines().skip(1).filter(|l| l.starts_with("  ")).collect();
    format!(
        "the baseline {} is not a run of the same configuration as {}, so every difference from it would \
         read as an anomaly:\n{}\ngive a good run of this job (same model, settings and ranks) as the baseline",
        good.display(),
        run.display(),
        details.join("\n")
    )
}
