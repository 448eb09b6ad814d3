//! `watch` of a long capture read a window of steps at a time (#18) says what the watch of the whole capture
//! says, JSON field for field and text byte for byte: the hits in their order, the "can't tell" groups and
//! their first places, the loss and gradient norms by step, the trends of the gradient findings, the first
//! loss a rise is measured from, the initial weights, skipped steps and loss-scale drops without origin, the
//! ring's scope, the problems. Windows of one step each and of a few steps, over 4-rank jobs whose faults
//! fire the conditions, with many small segments and two writer threads, and with a ring that deleted its
//! oldest steps.

mod common;

use analyzer::report::{self, Format};
use analyzer::sources::capture::windows::StepWindows;
use analyzer::sources::capture::CaptureSource;
use analyzer::sources::Source;
use analyzer::watch::{configure, watch, watch_by_windows, WatchOptions, WatchReport};
use common::*;
use serde_json::Value;
use std::path::Path;

/// The default conditions, and those off by default given thresholds the jobs cross (`--set`).
fn options(set: &[&str]) -> WatchOptions {
    let set: Vec<String> = set.iter().map(|s| s.to_string()).collect();
    let conditions = configure(None, &[], &[], &set).unwrap();
    WatchOptions { filter: Default::default(), conditions, read_tensors: true, progress: false }
}

/// The report as JSON and as the text table, byte for byte.
fn written(report: &WatchReport) -> (Value, Vec<u8>) {
    let table = report_text(|to| report::watch::write(report, Format::Table, to).unwrap());
    (serde_json::to_value(report).unwrap(), table.into_bytes())
}

/// Windows of one step and of about three, each the same report as the whole's; returns that report.
fn same_by_windows(run: &Path, steps: usize, options: &WatchOptions) -> Value {
    let whole = CaptureSource::open(run).unwrap();
    let tensors_a_step = whole.index().tensors.len() as u64 / steps as u64;
    let (json, table) = written(&watch(&whole, options));
    drop(whole);
    for (window_tensors, what) in [(1, "one step"), (3 * tensors_a_step, "three steps")] {
        let windows = StepWindows::census(run, window_tensors).unwrap().expect("read by windows");
        let n = windows.windows().len();
        if window_tensors == 1 {
            assert_eq!(n, steps, "a window a step");
        } else {
            assert!(n >= 2 && n < steps, "windows of a few steps: {n}");
        }
        let report = watch_by_windows(&windows, options).unwrap().expect("judged window by window");
        let (by_json, by_table) = written(&report);
        assert_eq!(by_json, json, "{}: windows of {what}", run.display());
        assert!(
            by_table == table,
            "{}: windows of {what}: the text differs:\n{}\n---- whole ----\n{}",
            run.display(),
            String::from_utf8_lossy(&by_table),
            String::from_utf8_lossy(&table)
        );
    }
    json
}

/// The conditions with a hit.
fn hit(report: &Value) -> Vec<&str> {
    let mut names: Vec<&str> =
        report["findings"].as_array().unwrap().iter().map(|f| f["condition"].as_str().unwrap()).collect();
    names.sort_unstable();
    names.dedup();
    names
}

#[test]
fn an_overflow_and_a_frozen_layer_are_watched_the_same_by_windows() {
    let faults = r#", "faults": {"frozen": "model/layer_1/",
        "overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 3, "rank": 2}}"#;
    let run = shared_job(faults, 4, 8, &[]);
    let set = [
        "gradient_too_large.max_gt=0.01",
        "weight_too_large.abs_mean_gt=0.05",
        "activation_range.range_start=-1",
        "activation_range.range_end=1",
        "activation_range.range_percentage_lt=60",
        // Every loss above nine tenths of a rank's first: measured from the first window's.
        "loss_too_large.rise_gt=0.9",
    ];
    let report = same_by_windows(&run, 8, &options(&set));
    // What the equality covers: hits on tensors, updates and steps, trends over every step, "can't tell".
    let hits = hit(&report);
    for condition in [
        "tensor_overflow",
        "loss_overflow",
        "loss_too_large",
        "weight_not_changed",
        "gradient_too_large",
        "activation_range",
    ] {
        assert!(hits.contains(&condition), "{condition}: {hits:?}");
    }
    let trend = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["detail"].as_str())
        .find(|d| d.starts_with("gradient L2 by step: 0:"))
        .expect("a gradient finding's trend");
    assert!(trend.contains(" ... 5:"), "six points of eight steps: {trend}");
    assert!(!report["cant_tell"].as_array().unwrap().is_empty(), "{report:#}");
    assert_eq!(report["loss"].as_array().unwrap().len(), 4 * 8);
    assert!(report["gradient_norm"].as_array().unwrap().len() >= 4 * 7);
    // The overflow's step updated nothing, on every rank: explained by the hits, no origin elsewhere.
    assert!(report["without_origin"].as_array().unwrap().is_empty(), "{report:#}");
}

#[test]
fn device_statistics_are_watched_the_same_by_windows() {
    // `--mode device-stats`: CANN's statistics CSVs (no sum of |x|, no L2 norm, no zero count).
    let faults = r#", "faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 3, "rank": 2}}"#;
    let run = shared_job(faults, 4, 6, &[("ACCUTRACE_MODE", "device-stats")]);
    let report = same_by_windows(&run, 6, &options(&[]));
    assert!(hit(&report).contains(&"tensor_overflow"), "{report:#}");
    assert!(!report["cant_tell"].as_array().unwrap().is_empty(), "{report:#}");
}

#[test]
fn exploding_weights_read_as_tensors_are_watched_the_same_by_windows() {
    // The tensors kept: what statistics leave undecided is read, window by window.
    let faults = r#", "faults": {"lr_scale": 1000, "init_scale": 10}"#;
    let run = shared_job(faults, 4, 6, &[("ACCUTRACE_MODE", "tensor")]);
    let set =
        ["weight_change_too_small.abs_mean_update_ratio_lt=0.5", "activation_too_small.abs_mean_lt=0.3"];
    let report = same_by_windows(&run, 6, &options(&set));
    let hits = hit(&report);
    for condition in ["weight_initialization", "weight_change_too_large"] {
        assert!(hits.contains(&condition), "{condition}: {hits:?}");
    }
    let evidence: Vec<&str> =
        report["findings"].as_array().unwrap().iter().filter_map(|f| f["evidence"].as_str()).collect();
    assert!(evidence.contains(&"tensor"), "{evidence:?}");
}

#[test]
fn many_small_segments_two_writers_and_dead_relus_are_watched_the_same_by_windows() {
    let env = [("ACCUTRACE_SEGMENT_SIZE", "64K"), ("ACCUTRACE_WRITERS", "2"), ("ACCUTRACE_HISTOGRAM", "1")];
    let relu = r#", "activation": "relu", "faults": {"saturate_activation": true}"#;
    let run = shared_job(relu, 4, 6, &env);
    let segments = fewest_segments(&run);
    assert!(segments >= 6, "a stream's steps span several segments: {segments} files");
    let report = same_by_windows(&run, 6, &options(&["activation_too_large.max_gt=0.5"]));
    let hits = hit(&report);
    assert!(hits.contains(&"dead_relu") && hits.contains(&"activation_too_large"), "{hits:?}");
}

#[test]
fn a_ring_that_deleted_the_oldest_steps_is_watched_the_same_by_windows() {
    let env = [("ACCUTRACE_SEGMENT_SIZE", "64K"), ("ACCUTRACE_POLICY", "ring:256K")];
    let run = shared_job(r#", "faults": {"lr_scale": 0}"#, 4, 8, &env);
    let kept = CaptureSource::open(&run).unwrap().index().steps().len();
    let report = same_by_windows(&run, kept, &options(&[]));
    assert!(!report["scope"].as_array().unwrap().is_empty(), "the ring deleted steps: {report:#}");
    // The first weights kept are no initial ones: can't tell, once a parameter, from the first window.
    let init =
        report["cant_tell"].as_array().unwrap().iter().find(|g| g["condition"] == "weight_initialization");
    assert!(
        init.is_some_and(|g| g["reason"].as_str().unwrap().contains("the capture starts at step")),
        "{report:#}"
    );
    assert!(hit(&report).contains(&"weight_not_changed"), "{report:#}");
}

/// A selection of steps and ranks read by windows: the same report as the whole capture's of that selection.
#[test]
fn a_selection_of_steps_and_ranks_is_watched_the_same_by_windows() {
    let faults = r#", "faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 3, "rank": 2}}"#;
    let run = shared_job(faults, 4, 7, &[]);
    let whole = CaptureSource::open(&run).unwrap();
    let windows = StepWindows::census(&run, 1).unwrap().expect("read by windows");
    for (steps, ranks) in
        [(vec![3], vec![]), (vec![], vec![0]), (vec![2, 3, 4], vec![1, 2]), (vec![5], vec![2])]
    {
        let mut options = options(&[]);
        options.filter = analyzer::filter::Filter { steps, ranks, ops: vec![] };
        let a = serde_json::to_value(watch(&whole, &options)).unwrap();
        let b = serde_json::to_value(watch_by_windows(&windows, &options).unwrap().unwrap()).unwrap();
        assert_eq!(a, b, "{:?}", options.filter);
    }
}
