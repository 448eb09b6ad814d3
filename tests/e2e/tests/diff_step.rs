//! `diff --step` of two long captures reads only the selected steps' windows (#18), its HCCL calls paired as
//! the steps before would leave them (the census's facts of each step's calls), and says what the diff of
//! the whole captures, and of every window, says of the selection: JSON field for field and the text byte
//! for byte. A nondeterministic reduction whose calls pair at the selected steps, and a run whose calls
//! stopped pairing before them (the other run's ring deleted its first steps' calls).

mod common;

use analyzer::diff::{
    diff, diff_by_windows, diff_by_windows_from, select_steps, CallPairing, DiffOptions, DiffReport, Refusal,
};
use analyzer::filter::Filter;
use analyzer::report::{self, Format};
use analyzer::sources::capture::windows::StepWindows;
use analyzer::sources::capture::CaptureSource;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

/// The report as JSON and as text.
fn rendered(found: &DiffReport) -> (Value, String) {
    let table = report_text(|to| report::diff::write(found, Format::Table, to).unwrap());
    (serde_json::to_value(found).unwrap(), table)
}

/// Both runs' windows of one step each, made one list.
fn windows_of_steps(a: &Path, b: &Path) -> [StepWindows; 2] {
    let mut a = StepWindows::census_with_calls(a, 1).unwrap().expect("run 1 read by windows");
    let mut b = StepWindows::census_with_calls(b, 1).unwrap().expect("run 2 read by windows");
    assert!(StepWindows::align(&mut a, &mut b, 1));
    [a, b]
}

/// The diff of `a` and `b` under `filter` read whole, by every window and by the selected steps' windows
/// only (checked: a window a selected step, fewer than every window), all three the same report; returns
/// its JSON.
fn same_when_selected(a: &Path, b: &Path, filter: &Filter) -> Value {
    let options = DiffOptions { filter: filter.clone(), progress: false };
    let (a_whole, b_whole) = (CaptureSource::open(a).unwrap(), CaptureSource::open(b).unwrap());
    let whole = match diff(&a_whole, &b_whole, &options) {
        Ok(found) => found,
        Err(e) => DiffReport::refused(&a_whole, &b_whole, e.downcast::<Refusal>().unwrap()),
    };
    drop((a_whole, b_whole));
    let whole = rendered(&whole);
    let [every_a, every_b] = windows_of_steps(a, b);
    let every = every_a.windows().len();
    assert_eq!(rendered(&diff_by_windows([&every_a, &every_b], &options).unwrap()), whole, "every window");
    drop((every_a, every_b));
    let [mut sel_a, mut sel_b] = windows_of_steps(a, b);
    let calls = select_steps([&mut sel_a, &mut sel_b], &filter.steps, 1);
    let steps: BTreeSet<u64> = filter.steps.iter().copied().collect();
    let read: Vec<_> = sel_a.windows().to_vec();
    assert!(read.len() < every, "{:?}: {} windows of {every}", filter.steps, read.len());
    assert_eq!(read, steps.iter().map(|&s| s..=s).collect::<Vec<_>>(), "a window a selected step");
    assert_eq!(read, sel_b.windows(), "both runs read the same steps");
    let selected = rendered(&diff_by_windows_from([&sel_a, &sel_b], &options, calls).unwrap());
    assert_eq!(selected.1, whole.1, "{} vs {} {:?}: the text", a.display(), b.display(), filter.steps);
    assert_eq!(selected.0, whole.0, "{} vs {} {:?}: the JSON", a.display(), b.display(), filter.steps);
    whole.0
}

fn at(steps: &[u64], ranks: &[u32]) -> Filter {
    Filter { steps: steps.to_vec(), ranks: ranks.to_vec(), ops: Vec::new() }
}

/// The calls a step's selection pairs are those the whole read pairs: the reduction that went another way
/// at step 2, and the later calls it spread to, each found at its own step only.
#[test]
fn a_selection_finds_the_calls_that_differ_at_its_steps_as_the_whole_read() {
    let healthy = shared_job("", 4, 6, &[]);
    let faults = r#", "faults": {"nondeterministic_reduction": {"step": 2, "rank": 1}}"#;
    let nondet = shared_job(faults, 4, 6, &[]);
    let report = same_when_selected(&healthy, &nondet, &at(&[2], &[]));
    let firsts = report["first_differences"].as_array().unwrap();
    let reduced = firsts.iter().find(|f| f["rank"] == 1).expect("rank 1 differs at step 2");
    assert!(reduced["op"].as_str().unwrap().starts_with("HcclAllReduce #"), "{reduced:#}");
    assert_eq!(reduced["verdict"], "nondeterministic", "{reduced:#}");
    assert!(firsts.iter().all(|f| f["step"] == 2), "{firsts:#?}");
    // Later steps: calls that differ because what they reduce does, on every rank.
    for filter in [at(&[1, 3, 5], &[]), at(&[3, 4], &[1, 2])] {
        let report = same_when_selected(&healthy, &nondet, &filter);
        let firsts = report["first_differences"].as_array().unwrap();
        assert!(!firsts.is_empty() && firsts.iter().all(|f| f["step"] != 1), "{report:#}");
    }
}

/// The steps a ring deleted part no rank's calls before the selection (they are a gap, not a difference):
/// the selected steps' calls pair as they would paired afresh, and differ (run 1 reduced differently at
/// step 2). `diff_calls` has a selection after calls that parted.
#[test]
fn a_rings_lost_steps_part_no_calls_before_the_selection() {
    let faults = r#", "faults": {"nondeterministic_reduction": {"step": 2, "rank": 1}}"#;
    let nondet = shared_job(faults, 4, 12, &[]);
    let ring = shared_job("", 4, 12, &[("ACCUTRACE_SEGMENT_SIZE", "64K"), ("ACCUTRACE_POLICY", "ring:512K")]);
    let filter = at(&[9, 11], &[1]);
    let report = same_when_selected(&nondet, &ring, &filter);
    assert_eq!(report["verdict"], "different", "{report:#}");
    // The census's pairing is the fresh one.
    let [mut a, mut b] = windows_of_steps(&nondet, &ring);
    select_steps([&mut a, &mut b], &filter.steps, 1);
    let options = DiffOptions { filter, progress: false };
    let afresh = diff_by_windows_from([&a, &b], &options, CallPairing::default()).unwrap();
    let differing = report["differing_tensors"].as_u64().unwrap() as usize;
    assert_eq!(afresh.differing_tensors, differing, "{report:#}");
}
