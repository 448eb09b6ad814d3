//! `check RUN` of a long capture read a window of steps at a time (#18) says what the checklist of the whole
//! capture says, JSON field for field and text byte for byte: the data signatures of every step and rank,
//! each weight's first update, the dtype census, the loss scale by step, the settings and the problems.
//! Windows of one step and of a few steps, over 4-rank jobs: one that reads a shard twice and overflows,
//! one whose ring deleted its oldest steps, and selections of steps and ranks; and `check RUN RUN2` of two
//! such captures read a window of the same steps of each at a time: shuffled batches, a nondeterministic
//! reduction, a run given twice.

mod common;

use accutrace_formats::capture::Manifest;
use analyzer::check::{check, check_by_windows, CheckReport, CheckRun};
use analyzer::filter::Filter;
use analyzer::report::{self, Format};
use analyzer::sources::capture::windows::StepWindows;
use analyzer::sources::capture::CaptureSource;
use analyzer::sources::Source;
use common::*;
use serde_json::Value;
use std::path::Path;

/// The report as JSON and as the text table, byte for byte.
fn written(found: &CheckReport) -> (Value, Vec<u8>) {
    let table = report_text(|to| report::check::write(found, Format::Table, to).unwrap());
    (serde_json::to_value(found).unwrap(), table.into_bytes())
}

/// Windows of one step and of about three, each the same report as the whole's under `filter`; returns
/// that report as JSON.
fn same_by_windows(run: &Path, steps: usize, filter: &Filter) -> Value {
    let manifest = Manifest::read(run).unwrap();
    let whole = CaptureSource::open(run).unwrap();
    let tensors_a_step = whole.index().tensors.len() as u64 / steps as u64;
    let runs = [CheckRun { source: &whole, manifest: Some(manifest.clone()) }];
    let (json, table) = written(&check(&runs, filter));
    drop(runs);
    drop(whole);
    for (window_tensors, what) in [(1, "one step"), (3 * tensors_a_step, "three steps")] {
        let windows = StepWindows::census(run, window_tensors).unwrap().expect("read by windows");
        let n = windows.windows().len();
        if window_tensors == 1 {
            assert_eq!(n, steps, "a window a step");
        } else {
            assert!(n >= 2 && n < steps, "windows of a few steps: {n}");
        }
        let found = check_by_windows(&[&windows], &[Some(&manifest)], filter, false).unwrap();
        let (by_json, by_table) = written(&found);
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

/// The item named `name` of a report.
fn item<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["items"].as_array().unwrap().iter().find(|i| i["name"] == name).expect(name)
}

#[test]
fn a_shard_read_twice_and_an_overflow_are_checked_the_same_by_windows() {
    // The flipped bit makes rank 3's weight differ from step 2 on: a fold that took a later update for the
    // first would find its ranks starting apart.
    let faults = r#", "faults": {"wrong_data": {"step": 4, "rank": 2},
        "overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 2, "rank": 1},
        "weight_bitflip": {"param": "model/layer_1/mlp/fc2/weight", "step": 2, "rank": 3, "bit": 12}}"#;
    let run = shared_job(faults, 4, 7, &[]);
    let report = same_by_windows(&run, 7, &Filter::default());
    // What the equality covers: a step late in the run, the weights' first updates, every step's scale.
    let data = item(&report, "data");
    assert_eq!(data["status"], "fail", "{data:#}");
    assert!(data["reason"].as_str().unwrap().contains("read the same batch at step 4"), "{data:#}");
    let weights = item(&report, "initial_weights");
    assert!(
        weights["reason"].as_str().unwrap().starts_with("every rank starts from the same weights"),
        "{weights:#}"
    );
    let scales = item(&report, "loss_scale");
    let by_step: Vec<&str> = scales["details"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d.as_str().filter(|d| d.contains("loss scale by step")))
        .collect();
    assert_eq!(by_step.len(), 4, "{scales:#}");
    assert!(by_step.iter().all(|d| d.contains(" 0:") && d.contains(" 6:")), "{by_step:#?}");
    let census = item(&report, "mixed_precision");
    assert!(!census["details"].as_array().unwrap().is_empty(), "{census:#}");
}

#[test]
fn a_ring_that_deleted_the_oldest_steps_is_checked_the_same_by_windows() {
    let env = [("ACCUTRACE_SEGMENT_SIZE", "64K"), ("ACCUTRACE_POLICY", "ring:256K")];
    let run = shared_job("", 4, 8, &env);
    let kept = CaptureSource::open(&run).unwrap().index().steps();
    assert!(kept[0] > 0, "the ring deleted the first steps: {kept:?}");
    let report = same_by_windows(&run, kept.len(), &Filter::default());
    let weights = item(&report, "initial_weights");
    assert!(weights["reason"].as_str().unwrap().contains("capture starts at step"), "{weights:#}");
}

/// A selection of steps and ranks (no `--op`, whose check needs every op's name): the same checklist as the
/// whole capture's of that selection.
#[test]
fn a_selection_of_steps_and_ranks_is_checked_the_same_by_windows() {
    let faults = r#", "faults": {"wrong_data": {"step": 3, "rank": 1}}"#;
    let run = shared_job(faults, 4, 6, &[]);
    let filter =
        |steps: &[u64], ranks: &[u32]| Filter { steps: steps.to_vec(), ranks: ranks.to_vec(), ops: vec![] };
    for f in [filter(&[3], &[]), filter(&[], &[0]), filter(&[2, 3, 4], &[1, 2])] {
        let report = same_by_windows(&run, 6, &f);
        let data = item(&report, "data");
        let twice = f.steps.contains(&3) && f.ranks.iter().all(|r| [1, 2].contains(r));
        assert_eq!(data["status"] == "fail", twice, "{f:?}: {data:#}");
    }
}

/// The checklist of two runs read whole and by aligned windows of one step and of about two, each the
/// same; returns that report as JSON.
fn same_pair_by_windows(a: &Path, b: &Path, steps: usize) -> Value {
    let manifests = [Manifest::read(a).unwrap(), Manifest::read(b).unwrap()];
    let (whole_a, whole_b) = (CaptureSource::open(a).unwrap(), CaptureSource::open(b).unwrap());
    let tensors_a_step = whole_a.index().tensors.len() as u64 / steps as u64;
    let runs = [
        CheckRun { source: &whole_a, manifest: Some(manifests[0].clone()) },
        CheckRun { source: &whole_b, manifest: Some(manifests[1].clone()) },
    ];
    let (json, table) = written(&check(&runs, &Filter::default()));
    drop(runs);
    drop((whole_a, whole_b));
    for (window_tensors, what) in [(1, "one step"), (4 * tensors_a_step, "two steps")] {
        let mut windows_a = StepWindows::census(a, window_tensors).unwrap().expect("run 1 read by windows");
        let mut windows_b = StepWindows::census(b, window_tensors).unwrap().expect("run 2 read by windows");
        assert!(StepWindows::align(&mut windows_a, &mut windows_b, window_tensors), "two windows at least");
        let n = windows_a.windows().len();
        if window_tensors == 1 {
            assert_eq!(n, steps, "a window a step");
        } else {
            assert!(n >= 2 && n < steps, "windows of a few steps: {n}");
        }
        let manifests = [Some(&manifests[0]), Some(&manifests[1])];
        let found =
            check_by_windows(&[&windows_a, &windows_b], &manifests, &Filter::default(), false).unwrap();
        let (by_json, by_table) = written(&found);
        assert_eq!(by_json, json, "{} vs {}: windows of {what}", a.display(), b.display());
        assert!(
            by_table == table,
            "{} vs {}: windows of {what}: the text differs:\n{}\n---- whole ----\n{}",
            a.display(),
            b.display(),
            String::from_utf8_lossy(&by_table),
            String::from_utf8_lossy(&table)
        );
    }
    json
}

#[test]
fn two_runs_are_checked_the_same_by_windows() {
    let healthy = shared_job("", 4, 6, &[]);
    // Shuffled: run 2's batch at a step is run 1's of another step, often in another window.
    let shuffled = shared_job(r#", "faults": {"shuffle_data": true}"#, 4, 6, &[]);
    let report = same_pair_by_windows(&healthy, &shuffled, 6);
    let data = item(&report, "data");
    assert!(data["reason"].as_str().unwrap().contains("shuffle"), "{data:#}");
    assert!(
        data["details"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d.as_str().unwrap().contains("run 1's batch of step")),
        "{data:#}"
    );
    // A reduction that differs at the first step: determinism's walk finds it in the first window.
    let faults = r#", "faults": {"nondeterministic_reduction": {"step": 0, "rank": 3}}"#;
    let nondet = shared_job(faults, 4, 6, &[]);
    let report = same_pair_by_windows(&healthy, &nondet, 6);
    let determinism = item(&report, "determinism");
    assert_eq!(determinism["status"], "fail", "{determinism:#}");
    // A run given twice: said first, and no evidence.
    let report = same_pair_by_windows(&healthy, &healthy, 6);
    assert!(report["warnings"][0].as_str().unwrap().starts_with("RUN2 is RUN"), "{report:#}");
}
