//! `ranks` of a long capture read a window of steps at a time (#18) says what the analysis of the whole
//! capture says, field for field in JSON and byte for byte in text: origins with their Lamport times and
//! event positions, the spread and its counts of anomalous events, findings by kind, rank and step, the
//! replica check's counts, the problems. Windows of one step each and of a few steps, over jobs whose ranks
//! disagree (an overflow on one rank, a non-deterministic all-reduce, a flipped weight bit on one replica of
//! four and of two), with many small segments and two writer threads, a ring that deleted its oldest steps,
//! a rank's stream lost, and selections of steps and ranks.

mod common;

use analyzer::filter::Filter;
use analyzer::ranks::fold::ranks_by_windows;
use analyzer::ranks::{analyze, events::RunEvents, RanksReport};
use analyzer::report::{self, Format};
use analyzer::sources::capture::windows::StepWindows;
use analyzer::sources::capture::CaptureSource;
use analyzer::sources::Source;
use common::*;
use serde_json::Value;
use std::path::Path;

/// The report as JSON and as text.
fn rendered(found: &RanksReport) -> (Value, String) {
    let table = report_text(|to| report::ranks::write(found, "ranks", Format::Table, to).unwrap());
    (serde_json::to_value(found).unwrap(), table)
}

/// The windowed report of `filter`'s selection with windows of at most `window_tensors` tensors, and how
/// many windows were read.
fn by_windows(run: &Path, window_tensors: u64, filter: &Filter) -> ((Value, String), usize) {
    let windows = StepWindows::census(run, window_tensors).unwrap().expect("read by windows");
    let by_windows =
        ranks_by_windows(&run.display().to_string(), &windows, filter).unwrap().expect("windowed");
    (rendered(&by_windows), windows.windows().len())
}

/// The whole capture's report of `filter`'s selection.
fn whole(run: &Path, filter: &Filter) -> (Value, String) {
    let whole = CaptureSource::open(run).unwrap();
    rendered(&analyze(&run.display().to_string(), &RunEvents::from_source(&whole, filter), None))
}

/// Windows of one step and of about three, each the same report as the whole's; returns that report.
fn same_by_windows(run: &Path, steps: usize, filter: &Filter) -> Value {
    let tensors_a_step = CaptureSource::open(run).unwrap().index().tensors.len() as u64 / steps as u64;
    let whole = whole(run, filter);
    let (one_step, n) = by_windows(run, 1, filter);
    assert_eq!(n, steps, "a window a step");
    assert_eq!(one_step.0, whole.0, "{}: windows of one step", run.display());
    assert_eq!(one_step.1, whole.1, "{}: windows of one step, text", run.display());
    let (three_steps, n) = by_windows(run, 3 * tensors_a_step, filter);
    assert!(n >= 2 && n < steps, "windows of a few steps: {n}");
    assert_eq!(three_steps.0, whole.0, "{}: windows of three steps", run.display());
    assert_eq!(three_steps.1, whole.1, "{}: windows of three steps, text", run.display());
    whole.0
}

fn everything() -> Filter {
    Filter::default()
}

/// The kinds of finding the report counts.
fn kinds(report: &Value) -> Vec<String> {
    report["findings"].as_object().unwrap().keys().cloned().collect()
}

#[test]
fn an_overflow_on_one_rank_and_its_spread_are_reported_the_same_by_windows() {
    let faults = r#", "faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 3, "rank": 2}}"#;
    let run = shared_job(faults, 4, 7, &[]);
    let report = same_by_windows(&run, 7, &everything());
    // What the equality covers: the origin on rank 2 at step 3, reached from there by the other ranks, with
    // anomalous events counted over the steps after it (ops a window left out of the replay among them).
    let origin = &report["origins"][0];
    assert_eq!((origin["rank"].as_u64(), origin["step"].as_u64()), (Some(2), Some(3)), "{report:#}");
    assert!(origin["lamport"].as_u64().unwrap() > 0 && origin["event"].as_u64().unwrap() > 0);
    let spread = report["spread"].as_array().unwrap();
    assert_eq!(spread.len(), 4, "{report:#}");
    assert!(spread.iter().all(|r| r["anomalous_events"].as_u64().unwrap() > 1), "{report:#}");
    assert!(kinds(&report).contains(&"overflow".to_string()), "{report:#}");
}

#[test]
fn device_statistics_are_reported_the_same_by_windows() {
    // `--mode device-stats`: CANN's statistics CSVs, each carrying its op's step, and no op records.
    let faults = r#", "faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 3, "rank": 2}}"#;
    let run = shared_job(faults, 4, 6, &[("ACCUTRACE_MODE", "device-stats")]);
    let report = same_by_windows(&run, 6, &everything());
    let origin = &report["origins"][0];
    assert_eq!((origin["rank"].as_u64(), origin["step"].as_u64()), (Some(2), Some(3)), "{report:#}");
}

#[test]
fn a_non_deterministic_all_reduce_is_reported_the_same_by_windows() {
    let faults = r#", "faults": {"nondeterministic_reduction": {"step": 2, "rank": 1}}"#;
    let run = shared_job(faults, 4, 6, &[]);
    let report = same_by_windows(&run, 6, &everything());
    assert!(kinds(&report).contains(&"collective disagreement".to_string()), "{report:#}");
    assert_eq!(report["origins"][0]["step"], 2, "{report:#}");
}

#[test]
fn a_flipped_weight_bit_on_one_replica_is_reported_the_same_by_windows() {
    let faults = r#", "faults": {"weight_bitflip":
        {"param": "model/layer_0/attn/qkv/weight", "step": 2, "rank": 1}}"#;
    let run = shared_job(faults, 4, 6, &[]);
    let report = same_by_windows(&run, 6, &everything());
    assert!(kinds(&report).contains(&"replica divergence".to_string()), "{report:#}");
    assert_eq!(report["origins"][0]["rank"], 1, "{report:#}");
    // The flipped weight stays flipped: rank 1 is anomalous in the windows after the origin's too, which the
    // replay left out and the spread counts.
    assert!(report["anomalous_per_step"]["1"].as_object().unwrap().len() > 1, "{report:#}");
    // Two replicas: a tensor held alike at the step before and no longer, carried from window to window.
    let run = shared_job(faults, 2, 6, &[]);
    let report = same_by_windows(&run, 6, &everything());
    assert!(kinds(&report).contains(&"replica divergence".to_string()), "{report:#}");
}

#[test]
fn many_small_segments_and_two_writers_are_read_the_same_by_windows() {
    let env = [("ACCUTRACE_SEGMENT_SIZE", "64K"), ("ACCUTRACE_WRITERS", "2")];
    let run = shared_job("", 4, 6, &env);
    let segments = fewest_segments(&run);
    assert!(segments >= 6, "a stream's steps span several segments: {segments} files");
    let report = same_by_windows(&run, 6, &everything());
    assert!(report["origins"].as_array().unwrap().is_empty(), "{report:#}");
    assert_eq!(report["replicated_per_step"].as_object().unwrap().len(), 6, "{report:#}");
}

#[test]
fn a_ring_that_deleted_the_oldest_steps_is_read_the_same_by_windows() {
    let env = [("ACCUTRACE_SEGMENT_SIZE", "64K"), ("ACCUTRACE_POLICY", "ring:256K")];
    let faults = r#", "faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 6, "rank": 3}}"#;
    let run = shared_job(faults, 4, 8, &env);
    let kept = CaptureSource::open(&run).unwrap().index().steps().len();
    assert!(kept < 8, "the ring deleted steps: {kept} kept");
    let report = same_by_windows(&run, kept, &everything());
    assert!(report["steps"][0].as_u64().unwrap() > 0, "{report:#}");
}

/// A rank's stream lost: every collective misses a member (let go incomplete, named as problems), and the
/// job lacks a rank.
#[test]
fn a_lost_rank_is_reported_the_same_by_windows() {
    let faults = r#", "faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 2, "rank": 1}}"#;
    let dir = scratch();
    let run = dir.path().join("lost");
    copy_dir(&shared_job(faults, 4, 6, &[]), &run);
    let lost = std::fs::read_dir(&run)
        .unwrap()
        .flatten()
        .map(|d| d.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().contains("-rank3-"))
        .expect("rank 3's stream");
    std::fs::remove_dir_all(lost).unwrap();
    let report = same_by_windows(&run, 6, &everything());
    let problems = report["input_problems"].to_string();
    assert!(problems.contains("3 of 4 members recorded it"), "{report:#}");
    assert_eq!(report["origins"][0]["rank"], 1, "{report:#}");
}

/// A selection of steps and ranks (no `--op`, whose check needs every op's name) read by windows: the same
/// report as the whole capture's of that selection.
#[test]
fn a_selection_of_steps_and_ranks_is_read_the_same_by_windows() {
    let faults = r#", "faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 3, "rank": 2}}"#;
    let run = shared_job(faults, 4, 7, &[]);
    let filter =
        |steps: &[u64], ranks: &[u32]| Filter { steps: steps.to_vec(), ranks: ranks.to_vec(), ops: vec![] };
    for f in [filter(&[3], &[]), filter(&[], &[0, 2]), filter(&[2, 3, 4], &[1, 2]), filter(&[5], &[2])] {
        let (whole, (windowed, _)) = (whole(&run, &f), by_windows(&run, 1, &f));
        assert_eq!(windowed.0, whole.0, "{f:?}");
        assert_eq!(windowed.1, whole.1, "{f:?}");
        if f.steps.contains(&3) && f.ranks.contains(&2) {
            assert_eq!(whole.0["origins"][0]["rank"], 2, "{f:?}: {:#}", whole.0);
        }
    }
}
