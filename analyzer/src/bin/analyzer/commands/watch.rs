//! `analyzer watch RUN`: the training-health conditions over every step.

use crate::cli::WatchArgs;
use analyzer::filter::Filter;
use analyzer::outcome::Outcome;
use analyzer::progress::Stages;
use analyzer::report::{self, Colour, Destination};
use analyzer::sources::capture::windows::{StepWindows, WINDOW_TENSORS};
use analyzer::sources::{detect, Detected};
use analyzer::watch::{self, Condition, WatchOptions};
use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

pub fn run(args: WatchArgs, colour: Colour) -> Result<Outcome> {
    let config = match &args.config {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            Some((path.display().to_string(), text))
        }
        None => None,
    };
    let conditions = watch::configure(
        config.as_ref().map(|(p, t)| (p.as_str(), t.as_str())),
        &args.enable,
        &args.disable,
        &args.set,
    )?;
    let Some(run) = args.run.as_ref().filter(|_| !args.list_conditions) else {
        report::reader_may_leave(list(&conditions))?;
        return Ok(Outcome::Pass);
    };
    let mut stages = Stages::new("watch", 2, args.no_progress);
    stages.start("reading the run");
    let filter = args.filter.to_filter();
    let windows = by_windows(run, &filter)?;
    let options =
        WatchOptions { filter, conditions, read_tensors: !args.no_tensors, progress: !args.no_progress };
    let by_windows = match windows {
        Some(windows) => {
            options.filter.check_places(&windows.places(), run)?;
            stages.start("watching the conditions");
            watch::watch_by_windows(&windows, &options)?
        }
        None => None,
    };
    let found = match by_windows {
        Some(found) => found,
        None => {
            let source = super::runs::open_run(run)?;
            options.filter.check(source.index(), run)?;
            stages.start("watching the conditions");
            watch::watch(source.as_ref(), &options)
        }
    };
    let to = Destination { output: args.report.output.as_deref(), colour };
    report::reader_may_leave(report::watch::write(&found, args.report.format.into(), &to))?;
    Ok(found.outcome().or_input_errors(&found.input_problems, args.input.allow_incomplete))
}

/// A capture longer than one window, watched without `--op` (whose check needs every op's name), is read a
/// window of steps at a time (#18: what `watch` holds stays within a window's index whatever the run's
/// length); with `--step`, the windows of the selected steps only where they hold every rank (each
/// condition is judged at a selected step; each rank's first step comes from the census).
fn by_windows(run: &Path, filter: &Filter) -> Result<Option<StepWindows>> {
    let mut windows = match detect(run)? {
        Detected::Capture(root) if filter.ops.is_empty() => StepWindows::census(&root, WINDOW_TENSORS)?,
        _ => None,
    };
    if let Some(windows) = windows.as_mut().filter(|w| w.every_rank_at(&filter.steps)) {
        windows.select_steps(&filter.steps);
    }
    Ok(windows)
}

/// `--list-conditions`: one line per condition with its parameters.
fn list(conditions: &[Condition]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    for c in conditions {
        let params: Vec<String> = c.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let state = if c.enabled { "on " } else { "off" };
        writeln!(out, "{state} {:<24} {}", c.name, params.join(" "))?;
        writeln!(out, "      {}", c.summary)?;
    }
    out.flush()?;
    Ok(())
}
