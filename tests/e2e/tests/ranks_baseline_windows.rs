//! `ranks RUN --baseline GOOD` of two long captures read a window of the same steps of each at a time (#18)
//! says what the analysis of both whole runs says, field for field in JSON and byte for byte in text: a
//! baseline that agrees, a rank whose weights or all-reduce diverge from it (tensors compared window by
//! window, calls at the end); windows of one step and of a few. A baseline of another configuration, or of
//! fewer ranks, is refused for the differences the whole runs' configuration check finds.

mod common;

use analyzer::comparable::{configuration_differences, ConfigurationDifference};
use analyzer::filter::Filter;
use analyzer::ranks::baseline_windows::{ranks_by_windows_against, Against};
use analyzer::ranks::{analyze, events::RunEvents, RanksReport};
use analyzer::report::{self, Format};
use analyzer::sources::capture::windows::StepWindows;
use analyzer::sources::capture::CaptureSource;
use analyzer::sources::Source;
use common::*;
use serde_json::Value;
use std::path::Path;

const STEPS: u64 = 6;

/// Another recording of the same job: a run seed of its own, which no fault here reads, so the same values.
const RERUN: &str = r#", "run_seed": 1"#;

/// The report as JSON and as text.
fn rendered(found: &RanksReport) -> (Value, String) {
    let table = report_text(|to| report::ranks::write(found, "ranks", Format::Table, to).unwrap());
    (serde_json::to_value(found).unwrap(), table)
}

fn name(path: &Path) -> String {
    path.display().to_string()
}

/// The report on `run` against `good` by aligned windows of at most `window_tensors` tensors, and how many
/// windows, or the differences the baseline is refused for; `None` when it is left to the whole read.
fn by_windows(
    run: &Path,
    good: &Path,
    window_tensors: u64,
) -> Option<Result<(RanksReport, usize), Vec<ConfigurationDifference>>> {
    // A window a step for the census, whatever the windows aligned for both.
    let mut a = StepWindows::census(run, 1).unwrap().expect("the run by windows");
    let mut b = StepWindows::census(good, 1).unwrap().expect("the baseline by windows");
    assert!(StepWindows::align(&mut a, &mut b, window_tensors), "aligned windows");
    let found = ranks_by_windows_against([&name(run), &name(good)], [&a, &b], &Filter::default()).unwrap();
    found.map(|found| match found {
        Against::Report(found) => Ok((*found, a.windows().len())),
        Against::NotOneConfiguration(differences) => Err(differences),
    })
}

/// Windows of one step and of about three (both runs' tensors count), each the same report as the whole
/// runs'; returns that report.
fn same_by_windows(run: &Path, good: &Path) -> Value {
    let whole_run = CaptureSource::open(run).unwrap();
    let tensors_a_step = whole_run.index().tensors.len() as u64 / STEPS;
    let everything = Filter::default();
    let events = RunEvents::from_source(&whole_run, &everything);
    drop(whole_run);
    let good_events = RunEvents::from_source(&CaptureSource::open(good).unwrap(), &everything);
    let whole = rendered(&analyze(&name(run), &events, Some((&name(good), &good_events))));
    for (window_tensors, what) in [(1, "one step"), (6 * tensors_a_step, "a few steps")] {
        let (found, n) = by_windows(run, good, window_tensors).expect("windowed").expect("not refused");
        if window_tensors == 1 {
            assert_eq!(n, STEPS as usize, "a window a step");
        } else {
            assert!(n >= 2 && n < STEPS as usize, "windows of a few steps: {n}");
        }
        let windowed = rendered(&found);
        assert_eq!(windowed.0, whole.0, "{}: windows of {what}", run.display());
        assert_eq!(windowed.1, whole.1, "{}: windows of {what}, text", run.display());
    }
    whole.0
}

#[test]
fn a_baseline_that_agrees_is_reported_the_same_by_windows() {
    let run = shared_job("", 4, STEPS, &[]);
    let good = shared_job(RERUN, 4, STEPS, &[]);
    let report = same_by_windows(&run, &good);
    assert_eq!(report["origins"], Value::Array(vec![]), "{report}");
    assert_eq!(report["baseline"], name(&good).as_str());
    assert_eq!(report["warnings"], Value::Array(vec![]), "every tensor and call met its counterpart");
}

#[test]
fn a_rank_that_diverges_from_the_baseline_is_reported_the_same_by_windows() {
    let good = shared_job(RERUN, 4, STEPS, &[]);
    // A weight's bit flipped on rank 1: its ops differ from the baseline's from there on (tensors, window
    // by window).
    let flip =
        r#", "faults": {"weight_bitflip": {"param": "model/layer_0/attn/qkv/weight", "step": 2, "rank": 1}}"#;
    let run = shared_job(flip, 4, STEPS, &[]);
    let report = same_by_windows(&run, &good);
    assert_eq!(report["origins"][0]["rank"], 1, "{report}");
    assert!(report["findings"]["differs from the baseline"].as_u64() > Some(0), "{report}");
    // An all-reduce whose sum differs on rank 1: the k-th call against the baseline's k-th, across windows.
    let nondet = r#", "faults": {"nondeterministic_reduction": {"step": 2, "rank": 1}}"#;
    let run = shared_job(nondet, 4, STEPS, &[]);
    let report = same_by_windows(&run, &good);
    let differing_call = report["origins"].as_array().unwrap().iter().any(|o| {
        o["collective"].is_array()
            && o["findings"].as_array().unwrap().iter().any(|f| f["kind"] == "baseline-difference")
    });
    assert!(differing_call, "{report}");
}

#[test]
fn a_baseline_of_another_configuration_or_of_fewer_ranks_is_refused_as_the_whole_runs_check_refuses_it() {
    let run = shared_job("", 4, STEPS, &[]);
    let whole_run = CaptureSource::open(&run).unwrap();
    let everything = Filter::default();
    let wider = shared_job(r#", "d_ff": 72"#, 4, STEPS, &[]);
    let two = shared_job("", 2, STEPS, &[]);
    for (good, what) in [(&wider, "another model"), (&two, "a baseline of fewer ranks")] {
        let whole = configuration_differences(
            whole_run.index(),
            CaptureSource::open(good).unwrap().index(),
            &everything,
        );
        assert!(!whole.is_empty(), "{what}: refused");
        let windowed = by_windows(&run, good, 1).expect("windowed").expect_err("refused");
        assert_eq!(windowed, whole, "{what}");
    }
}
