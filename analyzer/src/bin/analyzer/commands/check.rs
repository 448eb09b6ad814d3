//! `analyzer check RUN [RUN2]`: the pre-tuning checklist.

use crate::cli::CheckArgs;
use accutrace_formats::capture::Manifest;
use analyzer::check::{self, CheckReport, CheckRun};
use analyzer::filter::Filter;
use analyzer::outcome::Outcome;
use analyzer::progress::Stages;
use analyzer::report::{self, Colour, Destination};
use analyzer::sources::capture::windows::{StepWindows, WINDOW_TENSORS};
use analyzer::sources::{self, Detected};
use anyhow::{Context, Result};
use std::path::Path;

pub fn run(args: CheckArgs, colour: Colour) -> Result<Outcome> {
    let mut paths = vec![args.run.as_path()];
    paths.extend(args.run2.as_deref());
    let filter = args.filter.to_filter();
    if let Some(windows) = by_windows(&paths, &filter)? {
        let manifests: Vec<Option<Manifest>> = paths.iter().map(|p| manifest(p)).collect::<Result<_>>()?;
        // Two runs without a manifest are told apart by every op's launch (`sources::same_run`): read whole.
        if paths.len() == 1 || manifests.iter().all(Option::is_some) {
            for (w, p) in windows.iter().zip(&paths) {
                filter.check_places(&w.places(), p)?;
            }
            let windows: Vec<&StepWindows> = windows.iter().collect();
            let manifests: Vec<Option<&Manifest>> = manifests.iter().map(Option::as_ref).collect();
            let found = check::check_by_windows(&windows, &manifests, &filter, !args.no_progress)?;
            return write(&found, &args, colour);
        }
    }
    let mut stages = Stages::new("check", 2, args.no_progress);
    stages.start(if paths.len() > 1 { "reading the runs" } else { "reading the run" });
    let sources: Vec<super::runs::OpenRun> =
        paths.iter().map(|p| super::runs::open_run(p)).collect::<Result<_>>()?;
    for (s, p) in sources.iter().zip(&paths) {
        filter.check(s.index(), p)?;
    }
    let manifests: Vec<Option<Manifest>> = paths.iter().map(|p| manifest(p)).collect::<Result<_>>()?;
    let runs: Vec<CheckRun<'_>> = sources
        .iter()
        .zip(manifests)
        .map(|(s, manifest)| CheckRun { source: s.as_ref(), manifest })
        .collect();
    stages.start("running the checklist");
    let found = check::check(&runs, &filter);
    write(&found, &args, colour)
}

fn write(found: &CheckReport, args: &CheckArgs, colour: Colour) -> Result<Outcome> {
    let to = Destination { output: args.report.output.as_deref(), colour };
    report::reader_may_leave(report::check::write(found, args.report.format.into(), &to))?;
    Ok(found.outcome().or_input_errors(&found.input_problems, args.input.allow_incomplete))
}

/// Captures longer than one window, checked without `--op` (whose check needs every op's name), are read a
/// window of steps at a time, two runs a window of the same steps of each (#18: what `check` holds stays
/// within a window's index per run whatever the runs' length).
fn by_windows(paths: &[&Path], filter: &Filter) -> Result<Option<Vec<StepWindows>>> {
    if !filter.ops.is_empty() {
        return Ok(None);
    }
    let mut found = Vec::new();
    for p in paths {
        let Detected::Capture(root) = sources::detect(p)? else { return Ok(None) };
        let Some(windows) = StepWindows::census(&root, WINDOW_TENSORS)? else { return Ok(None) };
        found.push(windows);
    }
    // The items judge the selected ops alone, but the run's ranks: `--step` reads the selected steps'
    // windows where they hold every rank.
    if found.iter().all(|w| w.every_rank_at(&filter.steps)) {
        for windows in &mut found {
            windows.select_steps(&filter.steps);
        }
    }
    if let [a, b] = &mut found[..] {
        if !StepWindows::align(a, b, WINDOW_TENSORS) {
            return Ok(None);
        }
    }
    Ok(Some(found))
}

/// A capture's manifest (other sources have none); a capture whose manifest cannot be read is an error.
pub(crate) fn manifest(path: &Path) -> Result<Option<Manifest>> {
    match sources::detect(path)? {
        Detected::Capture(root) if root.join("manifest.json").is_file() => Manifest::read(&root)
            .map(Some)
            .with_context(|| format!("cannot read the manifest of {}", root.display())),
        _ => Ok(None),
    }
}
