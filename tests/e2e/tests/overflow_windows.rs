//! `overflow` of a long capture read a window of steps at a time (#18) says what the analysis of the whole
//! capture says, field for field: origins, arrivals through collectives, skipped steps and loss-scale
//! drops without origin, the loss scale, the ring's scope, the problems. Windows of one step each and of a
//! few steps, over 4-rank jobs with an overflow, with many small segments and two writer threads, and with
//! a ring that deleted its oldest steps.

mod common;

use analyzer::filter::Filter;
use analyzer::overflow::{overflow, overflow_by_windows};
use analyzer::sources::capture::windows::StepWindows;
use analyzer::sources::capture::CaptureSource;
use analyzer::sources::Source;
use common::*;
use std::path::Path;

/// The windowed report with windows of at most `window_tensors` tensors, as JSON, and how many windows
/// were read.
fn by_windows(run: &Path, window_tensors: u64) -> (serde_json::Value, usize) {
    let windows = StepWindows::census(run, window_tensors).unwrap().expect("read by windows");
    let by_windows = overflow_by_windows(&windows, &Default::default(), false).unwrap();
    (serde_json::to_value(&by_windows).unwrap(), windows.windows().len())
}

/// Windows of one step and of about three, each the same report as the whole's; returns that report.
fn same_by_windows(run: &Path, steps: usize) -> serde_json::Value {
    let whole = CaptureSource::open(run).unwrap();
    let tensors_a_step = whole.index().tensors.len() as u64 / steps as u64;
    let whole = serde_json::to_value(overflow(&whole, &Default::default(), false)).unwrap();
    let (one_step, n) = by_windows(run, 1);
    assert_eq!(n, steps, "a window a step");
    assert_eq!(one_step, whole, "{}: windows of one step", run.display());
    let (three_steps, n) = by_windows(run, 3 * tensors_a_step);
    assert!(n >= 2 && n < steps, "windows of a few steps: {n}");
    assert_eq!(three_steps, whole, "{}: windows of three steps", run.display());
    whole
}

#[test]
fn an_overflow_on_one_rank_is_reported_the_same_by_windows() {
    let faults = r#", "faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 3, "rank": 2}}"#;
    let run = shared_job(faults, 4, 7, &[]);
    let report = same_by_windows(&run, 7);
    // What the equality covers: an origin on rank 2, its arrival on the others, the loss scale's drop.
    assert_eq!(report["origins"][0]["rank"], 2, "{report:#}");
    assert_eq!(report["origins"][0]["step"], 3);
    assert!(!report["arrivals"].as_array().unwrap().is_empty(), "{report:#}");
    assert!(report["loss_scale"].as_array().unwrap().len() >= 4 * 7);
}

#[test]
fn device_statistics_are_reported_the_same_by_windows() {
    // `--mode device-stats`: CANN's statistics CSVs, each carrying its op's step, and no op records.
    let faults = r#", "faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 3, "rank": 2}}"#;
    let run = shared_job(faults, 4, 6, &[("ACCUTRACE_MODE", "device-stats")]);
    let report = same_by_windows(&run, 6);
    assert_eq!(report["origins"][0]["rank"], 2, "{report:#}");
    assert_eq!(report["origins"][0]["step"], 3);
}

#[test]
fn many_small_segments_and_two_writers_are_read_the_same_by_windows() {
    let env = [("ACCUTRACE_SEGMENT_SIZE", "64K"), ("ACCUTRACE_WRITERS", "2")];
    let run = shared_job("", 4, 6, &env);
    let segments = fewest_segments(&run);
    assert!(segments >= 6, "a stream's steps span several segments: {segments} files");
    let report = same_by_windows(&run, 6);
    assert!(report["origins"].as_array().unwrap().is_empty(), "{report:#}");
}

#[test]
fn a_ring_that_deleted_the_oldest_steps_is_scoped_the_same_by_windows() {
    let env = [("ACCUTRACE_SEGMENT_SIZE", "64K"), ("ACCUTRACE_POLICY", "ring:256K")];
    let run = shared_job("", 4, 8, &env);
    let whole = CaptureSource::open(&run).unwrap();
    let kept = whole.index().steps().len();
    let report = same_by_windows(&run, kept);
    assert!(!report["scope"].as_array().unwrap().is_empty(), "the ring deleted steps: {report:#}");
}

#[test]
fn a_capture_whose_records_tie_steps_together_is_read_whole() {
    // The runtime's overflow detection: overflow records, tied to the op dumped after them.
    let faults = r#", "faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 1}}"#;
    let run = shared_job(faults, 4, 3, &[("ACCUTRACE_OVERFLOW", "1")]);
    assert!(StepWindows::census(&run, 1).unwrap().is_none());
}

#[test]
fn a_node_that_saw_no_origin_is_told_the_same_by_windows() {
    // The other node's rank 2 overflowed; without HCCL records this node sees only its skipped step and the
    // loss scale's drop.
    let faults = r#", "faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 2, "rank": 2}}"#;
    let job = shared_job(faults, 4, 6, &[("ACCUTRACE_COLLECTIVES", "off")]);
    let dir = scratch();
    let node = node0(&job, &dir.path().join("node0"));
    let report = same_by_windows(&node, 6);
    let without = report["without_origin"].as_array().unwrap();
    assert!(report["origins"].as_array().unwrap().is_empty(), "{report:#}");
    let evidence: Vec<&str> = without.iter().map(|w| w["evidence"].as_str().unwrap()).collect();
    assert!(evidence.contains(&"step 2 was skipped (no optimizer op ran)"), "{evidence:#?}");
    assert!(evidence.iter().any(|e| e.contains("loss scale dropped")), "{evidence:#?}");
}

#[test]
fn a_weight_gone_inf_is_named_by_the_op_that_read_it_the_same_by_windows() {
    let faults = r#", "faults": {"weight_bitflip":
        {"param": "model/layer_1/mlp/fc2/weight", "step": 2, "rank": 2, "bit": 30}}"#;
    let job = shared_job(faults, 4, 6, &[]);
    let report = same_by_windows(&job, 6);
    let without = report["without_origin"].as_array().unwrap();
    let read = without.iter().find(|w| w["rank"] == 2 && w["step"] == 2).expect("rank 2's step 2");
    assert!(read["evidence"].as_str().unwrap().contains("which no op of step 2 produced"), "{report:#}");
}

/// A selection of steps and ranks (no `--op`, whose check needs every op's name) read by windows: the same
/// report as the whole capture's of that selection, and the same refusal, in the same words, of a step or
/// rank the run lacks.
#[test]
fn a_selection_of_steps_and_ranks_is_read_the_same_by_windows() {
    let faults = r#", "faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 3, "rank": 2}}"#;
    let run = shared_job(faults, 4, 7, &[]);
    let whole = CaptureSource::open(&run).unwrap();
    let windows = StepWindows::census(&run, 1).unwrap().expect("read by windows");
    let filter =
        |steps: &[u64], ranks: &[u32]| Filter { steps: steps.to_vec(), ranks: ranks.to_vec(), ops: vec![] };
    for f in [filter(&[3], &[]), filter(&[], &[0]), filter(&[2, 3, 4], &[1, 2]), filter(&[5], &[2])] {
        f.check(whole.index(), &run).unwrap();
        f.check_places(&windows.places(), &run).unwrap();
        let a = serde_json::to_value(overflow(&whole, &f, false)).unwrap();
        let b = serde_json::to_value(overflow_by_windows(&windows, &f, false).unwrap()).unwrap();
        assert_eq!(a, b, "{f:?}");
        if f.steps.contains(&3) && (f.ranks.is_empty() || f.ranks.contains(&2)) {
            assert_eq!(a["origins"][0]["rank"], 2, "{f:?}: {a:#}");
        }
    }
    for f in [filter(&[9], &[]), filter(&[], &[7]), filter(&[1, 12], &[0, 5])] {
        let a = f.check(whole.index(), &run).unwrap_err().to_string();
        let b = f.check_places(&windows.places(), &run).unwrap_err().to_string();
        assert_eq!(a, b, "{f:?}");
        assert!(a.contains("not in"), "{a}");
    }
}
