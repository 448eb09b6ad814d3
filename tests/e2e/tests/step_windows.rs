//! A selection of steps (`--step`) of a long capture read a window of steps at a time (#18): `overflow`,
//! `ranks`, `watch` and `check` (of one run, and of two) read the windows of the selected steps only, fewer than
//! the run's and none holding a step left out, and say what the analysis of the whole capture says of the
//! selection: JSON field for field, the text of ranks, watch and check byte for byte. A 4-rank job with an overflow on
//! one rank, and two healthy runs, one with its batches shuffled (the window tests' shared recordings);
//! selections of one step, of steps with a gap between, at the runs' ends, and with ranks.

mod common;

use accutrace_formats::capture::Manifest;
use analyzer::check::{check, check_by_windows, CheckReport, CheckRun};
use analyzer::filter::Filter;
use analyzer::overflow::{overflow, overflow_by_windows};
use analyzer::ranks::fold::ranks_by_windows;
use analyzer::ranks::{analyze, events::RunEvents, RanksReport};
use analyzer::report::{self, Format};
use analyzer::sources::capture::windows::StepWindows;
use analyzer::sources::capture::CaptureSource;
use analyzer::sources::Source;
use analyzer::watch::{configure, watch, watch_by_windows, WatchOptions, WatchReport};
use common::*;
use serde_json::Value;
use std::path::Path;

/// An overflow on rank 2 at step 3 of 7: origins, arrivals and a loss-scale drop for the selections to keep
/// or leave out.
const OVERFLOW: &str =
    r#", "faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 3, "rank": 2}}"#;

/// Selections of steps that the 6-step runs and the 7-step one hold.
fn selections() -> Vec<Filter> {
    let at =
        |steps: &[u64], ranks: &[u32]| Filter { steps: steps.into(), ranks: ranks.into(), ops: Vec::new() };
    vec![at(&[3], &[]), at(&[1, 3, 4], &[]), at(&[3], &[2]), at(&[0, 5], &[0, 1])]
}

/// The census of `run` in windows of `window_tensors` (1: a window a step) kept to `filter`'s steps:
/// checked to be fewer windows than the run's, of selected steps only.
fn selected(run: &Path, window_tensors: u64, filter: &Filter) -> StepWindows {
    let mut windows = StepWindows::census(run, window_tensors).unwrap().expect("read by windows");
    let all = windows.windows().len();
    assert!(windows.every_rank_at(&filter.steps), "every rank is at every step");
    assert!(windows.select_steps(&filter.steps));
    only_selected(&windows, filter);
    let read = windows.windows().len();
    assert!(read < all, "{:?}: {read} windows of {all}", filter.steps);
    if window_tensors == 1 {
        assert_eq!(read, filter.steps.len(), "a window a selected step");
    }
    windows
}

/// Every window of `windows` holds steps `filter` selects, and only those.
fn only_selected(windows: &StepWindows, filter: &Filter) {
    for w in windows.windows() {
        assert!(
            w.clone().all(|s| filter.steps.contains(&s)),
            "{w:?} holds a step {:?} leaves out",
            filter.steps
        );
    }
}

fn ranks_rendered(found: &RanksReport) -> (Value, String) {
    let table = report_text(|to| report::ranks::write(found, "ranks", Format::Table, to).unwrap());
    (serde_json::to_value(found).unwrap(), table)
}

fn watch_rendered(found: &WatchReport) -> (Value, String) {
    let table = report_text(|to| report::watch::write(found, Format::Table, to).unwrap());
    (serde_json::to_value(found).unwrap(), table)
}

/// watch's default conditions over `filter`'s selection, tensors read.
fn watch_options(filter: &Filter) -> WatchOptions {
    let conditions = configure(None, &[], &[], &[]).unwrap();
    WatchOptions { filter: filter.clone(), conditions, read_tensors: true, progress: false }
}

fn check_rendered(found: &CheckReport) -> (Value, String) {
    let table = report_text(|to| report::check::write(found, Format::Table, to).unwrap());
    (serde_json::to_value(found).unwrap(), table)
}

#[test]
fn a_selection_of_steps_reads_its_windows_only_and_answers_as_the_whole_capture() {
    let run = shared_job(OVERFLOW, 4, 7, &[]);
    let name = run.display().to_string();
    let whole = CaptureSource::open(&run).unwrap();
    let manifest = Manifest::read(&run).unwrap();
    let two_steps = 2 * (whole.index().tensors.len() as u64 / 7);
    for filter in selections() {
        let at = format!("{:?} of ranks {:?}", filter.steps, filter.ranks);
        let expected_overflow = serde_json::to_value(overflow(&whole, &filter, false)).unwrap();
        let expected_ranks = ranks_rendered(&analyze(&name, &RunEvents::from_source(&whole, &filter), None));
        let one = [CheckRun { source: &whole, manifest: Some(manifest.clone()) }];
        let expected_check = check_rendered(&check(&one, &filter));
        let watching = watch_options(&filter);
        let expected_watch = watch_rendered(&watch(&whole, &watching));
        for window_tensors in [1, two_steps] {
            let windows = selected(&run, window_tensors, &filter);
            let found = overflow_by_windows(&windows, &filter, false).unwrap();
            assert_eq!(serde_json::to_value(found).unwrap(), expected_overflow, "overflow {at}");
            let found =
                ranks_rendered(&ranks_by_windows(&name, &windows, &filter).unwrap().expect("windowed"));
            assert_eq!(found.0, expected_ranks.0, "ranks {at}");
            assert_eq!(found.1, expected_ranks.1, "ranks {at}, text");
            let found = check_by_windows(&[&windows], &[Some(&manifest)], &filter, false).unwrap();
            let found = check_rendered(&found);
            assert_eq!(found.0, expected_check.0, "check {at}");
            assert_eq!(found.1, expected_check.1, "check {at}, text");
            // watch's weight_initialization needs each rank's first step, which no selected window holds.
            let found = watch_rendered(&watch_by_windows(&windows, &watching).unwrap().expect("windowed"));
            assert_eq!(found.0, expected_watch.0, "watch {at}");
            assert_eq!(found.1, expected_watch.1, "watch {at}, text");
        }
    }
    // What the equalities cover: a selection with step 3 holds rank 2's overflow, one without it none.
    let origins = |steps: &[u64]| {
        let filter = Filter { steps: steps.into(), ..Filter::default() };
        overflow(&whole, &filter, false).origins.len()
    };
    assert!(origins(&[3]) > 0);
    assert_eq!(origins(&[0, 5]), 0);
    // watch labels the selection's optimizer updates, as every other role: a step's of every rank, not
    // the run's.
    let updates = |steps: &[u64]| {
        let filter = Filter { steps: steps.into(), ..Filter::default() };
        watch(&whole, &watch_options(&filter)).labels.updates
    };
    assert_eq!(updates(&[0, 1, 2, 4, 5, 6]), 6 * updates(&[1]), "step 3 skipped its update");
    assert_eq!(updates(&[]), updates(&[0, 1, 2, 4, 5, 6]));
}

#[test]
fn two_runs_checked_for_a_selection_read_its_windows_only_and_answer_as_the_whole_runs() {
    // Shuffled: run 2's batch at a step is run 1's of another step.
    let runs = [shared_job("", 4, 6, &[]), shared_job(r#", "faults": {"shuffle_data": true}"#, 4, 6, &[])];
    let whole = runs.each_ref().map(|run| CaptureSource::open(run).unwrap());
    let manifests = runs.each_ref().map(|run| Manifest::read(run).unwrap());
    let two_steps = 2 * (whole[0].index().tensors.len() as u64 / 6);
    for filter in selections() {
        let at = format!("{:?} of ranks {:?}", filter.steps, filter.ranks);
        let both = [0, 1].map(|r| CheckRun { source: &whole[r], manifest: Some(manifests[r].clone()) });
        let expected = check_rendered(&check(&both, &filter));
        for window_tensors in [1, two_steps] {
            let [mut a, mut b] = runs.each_ref().map(|run| selected(run, window_tensors, &filter));
            // Their selections' windows made one list, still of the selected steps only.
            assert!(StepWindows::align(&mut a, &mut b, window_tensors));
            only_selected(&a, &filter);
            let m = manifests.each_ref().map(Some);
            let found = check_rendered(&check_by_windows(&[&a, &b], &m, &filter, false).unwrap());
            assert_eq!(found.0, expected.0, "check of two runs {at}");
            assert_eq!(found.1, expected.1, "check of two runs {at}, text");
        }
    }
}

#[test]
fn a_selections_windows_keep_what_the_census_says_of_the_whole_capture() {
    // A ring that deleted the oldest steps: the scope of what is left is the whole capture's, said by the
    // census, whichever steps are read.
    let env = [("ACCUTRACE_SEGMENT_SIZE", "64K"), ("ACCUTRACE_POLICY", "ring:256K")];
    let run = shared_job("", 4, 8, &env);
    let name = run.display().to_string();
    let whole = CaptureSource::open(&run).unwrap();
    let last = *whole.index().steps().last().unwrap();
    let filter = Filter { steps: vec![last], ..Filter::default() };
    let expected_overflow = serde_json::to_value(overflow(&whole, &filter, false)).unwrap();
    assert!(!expected_overflow["scope"].as_array().unwrap().is_empty(), "{expected_overflow:#}");
    let expected_ranks = ranks_rendered(&analyze(&name, &RunEvents::from_source(&whole, &filter), None));
    let windows = selected(&run, 1, &filter);
    let found = overflow_by_windows(&windows, &filter, false).unwrap();
    assert_eq!(serde_json::to_value(found).unwrap(), expected_overflow);
    let found = ranks_rendered(&ranks_by_windows(&name, &windows, &filter).unwrap().expect("windowed"));
    assert_eq!(found, expected_ranks);
}
