//! How `diff` pairs two runs' HCCL calls, one rule however the runs are read: whole, a window of one step
//! at a time, windows of a few steps, and under `--step` the selected steps' windows only (#18). Calls are
//! compared at the steps both runs hold (a ring's deleted steps are a gap the unmatched tensors report);
//! there, the first call either run made without its counterpart is reported as a tensor only that run
//! holds, and parts its rank. Each case is read every way and must give the same JSON and text.

mod common;

use accutrace_formats::capture::{CollectiveInfo, CollectiveOp};
use analyzer::diff::{
    diff, diff_by_windows, diff_by_windows_from, select_steps, CallPairing, DiffOptions, DiffReport, Refusal,
};
use analyzer::filter::Filter;
use analyzer::report::{self, Format};
use analyzer::sources::capture::windows::StepWindows;
use analyzer::sources::capture::CaptureSource;
use analyzer::sources::Source;
use common::*;
use serde_json::Value;
use std::path::Path;

/// The report as JSON and as text.
fn rendered(found: &DiffReport) -> (Value, String) {
    let table = report_text(|to| report::diff::write(found, Format::Table, to).unwrap());
    (serde_json::to_value(found).unwrap(), table)
}

/// Both runs' windows of at most `tensors` tensors, made one list.
fn windows(a: &Path, b: &Path, tensors: u64) -> [StepWindows; 2] {
    let mut a = StepWindows::census_with_calls(a, tensors).unwrap().expect("run 1 read by windows");
    let mut b = StepWindows::census_with_calls(b, tensors).unwrap().expect("run 2 read by windows");
    assert!(StepWindows::align(&mut a, &mut b, tensors), "two windows at least");
    [a, b]
}

/// The diff of `a` and `b` under `filter` read whole and by windows of one step (each step's bounds a
/// window's: a window of several steps pairs as the whole read), or with `--step` by the selected steps'
/// windows: the same JSON and text every way. Returns the JSON.
fn same_every_way(a: &Path, b: &Path, filter: &Filter) -> Value {
    let options = DiffOptions { filter: filter.clone(), progress: false };
    let (a_whole, b_whole) = (CaptureSource::open(a).unwrap(), CaptureSource::open(b).unwrap());
    let whole = match diff(&a_whole, &b_whole, &options) {
        Ok(found) => found,
        Err(e) => DiffReport::refused(&a_whole, &b_whole, e.downcast::<Refusal>().unwrap()),
    };
    drop((a_whole, b_whole));
    let whole = rendered(&whole);
    let what = format!("{} vs {} {:?} {:?}", a.display(), b.display(), filter.steps, filter.ranks);
    if filter.steps.is_empty() {
        let [wa, wb] = windows(a, b, 1);
        let by_windows = rendered(&diff_by_windows([&wa, &wb], &options).unwrap());
        assert_eq!(by_windows.0, whole.0, "{what}: windows of a step, the JSON");
        assert_eq!(by_windows.1, whole.1, "{what}: windows of a step, the text");
    } else {
        let [mut wa, mut wb] = windows(a, b, 1);
        let every = wa.windows().len();
        let calls = select_steps([&mut wa, &mut wb], &filter.steps, 1);
        assert!(wa.windows().len() < every, "{what}: the selection's windows only");
        let selected = rendered(&diff_by_windows_from([&wa, &wb], &options, calls).unwrap());
        assert_eq!(selected.0, whole.0, "{what}: the selected windows, the JSON");
        assert_eq!(selected.1, whole.1, "{what}: the selected windows, the text");
    }
    whole.0
}

fn at(steps: &[u64], ranks: &[u32]) -> Filter {
    Filter { steps: steps.to_vec(), ranks: ranks.to_vec(), ops: Vec::new() }
}

/// The unmatched entries that are HCCL calls.
fn unpaired_calls(report: &Value) -> Vec<&Value> {
    let unmatched = report["unmatched"].as_array().unwrap();
    unmatched.iter().filter(|u| u["tensor"].as_str().unwrap().contains("HCCL call")).collect()
}

/// A copy of the capture at `from` in `to` with one more call on `rank`: an HcclBroadcast right after its
/// last call of `step`, of that call's sequence number and communicator (so that later calls still pair).
fn with_an_extra_call(from: &Path, to: &Path, rank: u32, step: u64) {
    let source = CaptureSource::open(from).unwrap();
    let index = source.index();
    let steps = index.collective_steps();
    let calls = index.collectives.iter().zip(&steps).filter(|(c, s)| c.rank == rank && **s == Some(step));
    let last = calls.map(|(c, _)| c.info.clone()).next_back().expect("a call at the step");
    drop(source);
    with_calls_edited(from, to, |r, call| {
        if r == rank && call == last {
            let extra =
                CollectiveInfo { op: CollectiveOp::Broadcast, start_us: call.start_us + 1, ..call.clone() };
            vec![call, extra]
        } else {
            vec![call]
        }
    });
    let edited = CaptureSource::open(to).unwrap();
    let steps = edited.index().collective_steps();
    let extra =
        edited.index().collectives.iter().zip(&steps).filter(|(c, _)| c.info.op == CollectiveOp::Broadcast);
    assert!(extra.clone().any(|(c, s)| c.rank == rank && *s == Some(step)), "the extra call at its step");
}

/// A ring that deleted the first steps, against a run of 8 steps whose reduction went another way at its
/// last, step 7, a step both hold: the calls of those steps are compared (the reduction is found, on the
/// rank whose ring cut into its first step's calls), the ring's lost calls are no difference, and the
/// steps one run lacks are the other's unmatched tensors; the same with the ring as run 1 or as run 2.
#[test]
fn a_rings_calls_are_compared_on_the_steps_both_runs_hold() {
    let faults = r#", "faults": {"nondeterministic_reduction": {"step": 7, "rank": 1}}"#;
    let nondet = shared_job(faults, 4, 8, &[]);
    let ring = shared_job("", 4, 12, &[("ACCUTRACE_SEGMENT_SIZE", "64K"), ("ACCUTRACE_POLICY", "ring:512K")]);
    let first = CaptureSource::open(&ring).unwrap().index().steps()[0];
    assert!((3..7).contains(&first), "the ring kept step {first} on, not step 7's reduction only");
    // Each order under one selection too: the ring's first step (cut on rank 1) and step 7 there; step 7's.
    let selections = [at(&[first, 7], &[1]), at(&[7], &[])];
    for ((a, b, full), filter) in
        [(&ring, &nondet, "run2"), (&nondet, &ring, "run1")].into_iter().zip(selections)
    {
        let report = same_every_way(a, b, &Filter::default());
        assert_eq!(report["verdict"], "different", "{report:#}");
        assert!(unpaired_calls(&report).is_empty(), "the ring's lost calls are no difference: {report:#}");
        let unmatched = report["unmatched"].as_array().unwrap();
        assert!(unmatched.iter().any(|u| u["run"] == full && u["step"] == 0), "the gap: {report:#}");
        let firsts = report["first_differences"].as_array().unwrap();
        let reduced =
            firsts.iter().find(|f| f["step"] == 7 && f["rank"] == 1).expect("step 7 rank 1 differs");
        assert!(reduced["op"].as_str().unwrap().starts_with("HcclAllReduce #"), "{reduced:#}");
        assert_eq!(reduced["verdict"], "nondeterministic", "{reduced:#}");
        assert!(firsts.iter().all(|f| f["step"].as_u64() >= Some(7)), "{report:#}");
        let selected = same_every_way(a, b, &filter);
        assert_eq!(selected["verdict"], "different", "{selected:#}");
    }
}

/// A call run 2 made and run 1 did not (on rank 2, at step 1) is reported where it was made, and its rank's
/// later calls are not paired; so with the runs swapped. Under `--step` after it, the census carries the
/// parting and the call is listed: against a run whose reduction went another way at step 2, the selected
/// steps' calls on rank 2, paired afresh, would differ.
#[test]
fn a_call_without_its_counterpart_is_reported_and_parts_its_rank() {
    let healthy = shared_job("", 4, 6, &[]);
    let dir = scratch();
    let extra = dir.path().join("extra");
    with_an_extra_call(&healthy, &extra, 2, 1);
    for (a, b, run, reported) in [(&healthy, &extra, "run2", true), (&extra, &healthy, "run1", false)] {
        let report = same_every_way(a, b, &Filter::default());
        assert_eq!(report["verdict"], "unmatched", "{report:#}");
        let calls = unpaired_calls(&report);
        assert_eq!(calls.len(), 1, "{report:#}");
        assert_eq!(
            (&calls[0]["run"], &calls[0]["step"], &calls[0]["rank"]),
            (&run.into(), &1.into(), &2.into())
        );
        assert!(calls[0]["tensor"].as_str().unwrap().starts_with("HcclBroadcast #"), "{report:#}");
        // A selection after the call lists it (the selected steps' calls on rank 2 go unpaired); one before
        // it finds nothing.
        let selected = same_every_way(a, b, &if reported { at(&[4, 5], &[2]) } else { at(&[0], &[]) });
        assert_eq!(unpaired_calls(&selected).len(), usize::from(reported), "{selected:#}");
        assert_eq!(selected["verdict"], if reported { "unmatched" } else { "identical" }, "{selected:#}");
    }
    let faults = r#", "faults": {"nondeterministic_reduction": {"step": 2, "rank": 1}}"#;
    let nondet = shared_job(faults, 4, 6, &[]);
    let filter = at(&[3, 4], &[2]);
    let report = same_every_way(&nondet, &extra, &filter);
    let [mut a, mut b] = windows(&nondet, &extra, 1);
    select_steps([&mut a, &mut b], &filter.steps, 1);
    let options = DiffOptions { filter, progress: false };
    let afresh = diff_by_windows_from([&a, &b], &options, CallPairing::default()).unwrap();
    let differing = report["differing_tensors"].as_u64().unwrap() as usize;
    assert!(afresh.differing_tensors > differing, "{} differ: {report:#}", afresh.differing_tensors);
    assert_eq!(unpaired_calls(&report).len(), 1, "{report:#}");
}
