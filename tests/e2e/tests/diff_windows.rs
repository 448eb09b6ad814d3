//! `diff` of two long captures read a window of the same steps of each at a time (#18) says what the diff
//! of the whole captures says, field for field: the first difference of each step and rank (HCCL calls
//! included), the census, the counts, the tensors only one run holds, the problems, and the refusal of runs
//! that are not one configuration. Windows of one step and of a few steps, over 4-rank jobs.

mod common;

use analyzer::diff::{diff, diff_by_windows, DiffOptions, DiffReport, Refusal};
use analyzer::filter::Filter;
use analyzer::sources::capture::windows::StepWindows;
use analyzer::sources::capture::CaptureSource;
use analyzer::sources::Source;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

/// The windowed diff with windows of at most `window_tensors` tensors (both runs' count), as JSON, and how
/// many windows were read.
fn by_windows(a: &Path, b: &Path, options: &DiffOptions, window_tensors: u64) -> (Value, usize) {
    let mut windows_a =
        StepWindows::census_with_calls(a, window_tensors).unwrap().expect("run 1 read by windows");
    let mut windows_b =
        StepWindows::census_with_calls(b, window_tensors).unwrap().expect("run 2 read by windows");
    assert!(StepWindows::align(&mut windows_a, &mut windows_b, window_tensors), "two windows at least");
    let by_windows = diff_by_windows([&windows_a, &windows_b], options).unwrap();
    (serde_json::to_value(by_windows).unwrap(), windows_a.windows().len())
}

/// Windows of one step and of two (both runs' tensors count against a window's budget), each the same
/// report as the whole's; returns that report. Each run has five steps at least (seven when one run's
/// steps are much larger), or its census finds it fits one window of the second budget.
fn same_by_windows(a: &Path, b: &Path, filter: &Filter) -> Value {
    let (a_whole, b_whole) = (CaptureSource::open(a).unwrap(), CaptureSource::open(b).unwrap());
    let (a_index, b_index) = (a_whole.index(), b_whole.index());
    let per_step = |i: &analyzer::index::Index| i.tensors.len() as u64 / i.steps().len() as u64;
    let tensors_a_step = per_step(a_index).max(per_step(b_index));
    let steps = a_index.steps().into_iter().chain(b_index.steps()).collect::<BTreeSet<u64>>().len();
    // The diff of the whole captures; a refusal as its report.
    let options = DiffOptions { filter: filter.clone(), progress: false };
    let whole = match diff(&a_whole, &b_whole, &options) {
        Ok(found) => found,
        Err(e) => DiffReport::refused(&a_whole, &b_whole, e.downcast::<Refusal>().unwrap()),
    };
    let whole = serde_json::to_value(whole).unwrap();
    drop((a_whole, b_whole));
    let (one_step, n) = by_windows(a, b, &options, 1);
    assert_eq!(n, steps, "a window a step");
    assert_eq!(one_step, whole, "{} vs {}: windows of one step", a.display(), b.display());
    let (two_steps, n) = by_windows(a, b, &options, 9 * tensors_a_step / 2);
    assert!(n >= 2 && n < steps, "windows of two steps: {n}");
    assert_eq!(two_steps, whole, "{} vs {}: windows of two steps", a.display(), b.display());
    whole
}

#[test]
fn a_nondeterministic_reduction_and_what_it_spread_to_are_found_the_same_by_windows() {
    let healthy = shared_job("", 4, 6, &[]);
    let faults = r#", "faults": {"nondeterministic_reduction": {"step": 2, "rank": 1}}"#;
    let nondet = shared_job(faults, 4, 6, &[]);
    let report = same_by_windows(&healthy, &nondet, &Filter::default());
    // What the equality covers: the call that reduced differently, what it spread to in later steps.
    assert_eq!(report["verdict"], "different", "{report:#}");
    let firsts = report["first_differences"].as_array().unwrap();
    let first = firsts.iter().find(|f| f["step"] == 2 && f["rank"] == 1).expect("step 2 rank 1 differs");
    assert!(first["op"].as_str().unwrap().starts_with("HcclAllReduce #"), "{first:#}");
    assert_eq!(first["verdict"], "nondeterministic", "{first:#}");
    assert!(firsts.iter().any(|f| f["step"].as_u64() > Some(2)), "the difference spreads: {firsts:#?}");
    assert!(report["census"].as_array().unwrap().len() > 4, "{report:#}");
}

#[test]
fn runs_of_another_seed_in_many_small_segments_differ_the_same_by_windows() {
    let env = [("ACCUTRACE_SEGMENT_SIZE", "64K"), ("ACCUTRACE_WRITERS", "2")];
    let a = shared_job("", 4, 6, &env);
    let b = shared_job(r#", "seed": 8"#, 4, 6, &env);
    let report = same_by_windows(&a, &b, &Filter::default());
    assert_eq!(report["verdict"], "different");
    let (compared, differing) = (report["compared_tensors"].as_u64(), report["differing_tensors"].as_u64());
    assert!(differing.unwrap() * 2 > compared.unwrap(), "most tensors differ: {report:#}");
    // Every rank of every step has its first difference; the census has a row per op and rank.
    assert_eq!(report["first_differences"].as_array().unwrap().len(), 4 * 6);
    // A selection of steps and ranks, read by windows, is the whole's selection too.
    let selection = Filter { steps: vec![1, 2, 4], ranks: vec![0, 3], ops: vec![] };
    let selected = same_by_windows(&a, &b, &selection);
    let places = selected["first_differences"].as_array().unwrap();
    assert_eq!(places.len(), 3 * 2, "{selected:#}");
}

#[test]
fn a_run_with_fewer_steps_leaves_the_same_tensors_unmatched_by_windows() {
    let long = shared_job("", 4, 6, &[]);
    let short = shared_job("", 4, 5, &[]);
    let report = same_by_windows(&long, &short, &Filter::default());
    assert_eq!(report["verdict"], "unmatched", "{report:#}");
    let unmatched = report["unmatched"].as_array().unwrap();
    assert!(unmatched.iter().all(|u| u["run"] == "run1" && u["step"].as_u64() >= Some(5)));
    // In the run's order: rank by rank, each rank's steps in order.
    let ranks: Vec<u64> = unmatched.iter().map(|u| u["rank"].as_u64().unwrap()).collect();
    assert!(ranks.windows(2).all(|w| w[0] <= w[1]) && ranks.first() != ranks.last(), "{ranks:?}");
    // A selection's unmatched tensors are the selection's only: steps both runs hold are identical, and a
    // step of the longer run alone lists that step's tensors of the selected ranks, no other step's.
    let steps =
        |steps: &[u64], ranks: &[u32]| Filter { steps: steps.to_vec(), ranks: ranks.to_vec(), ops: vec![] };
    let both_hold = same_by_windows(&long, &short, &steps(&[1, 2], &[]));
    assert_eq!(both_hold["verdict"], "identical", "{both_hold:#}");
    let one_holds = same_by_windows(&long, &short, &steps(&[1, 5], &[2]));
    let unmatched = one_holds["unmatched"].as_array().unwrap();
    assert!(!unmatched.is_empty(), "{one_holds:#}");
    assert!(unmatched.iter().all(|u| u["step"] == 5 && u["rank"] == 2), "{one_holds:#}");
}

#[test]
fn runs_of_another_configuration_are_refused_the_same_by_windows() {
    let a = shared_job("", 4, 6, &[]);
    let wider = shared_job(r#", "d_ff": 72"#, 4, 6, &[]);
    let deeper = shared_job(r#", "n_layers": 4"#, 4, 6, &[]);
    for other in [&wider, &deeper] {
        let report = same_by_windows(&a, other, &Filter::default());
        assert_eq!(report["verdict"], "refused", "{report:#}");
        let problems = report["input_problems"].as_array().unwrap();
        let refused = problems.last().unwrap()["message"].as_str().unwrap_or_default().to_string();
        assert!(refused.contains("not the same configuration"), "{report:#}");
    }
}

#[test]
fn a_ring_that_deleted_the_oldest_steps_is_diffed_the_same_by_windows() {
    let env = [("ACCUTRACE_SEGMENT_SIZE", "64K"), ("ACCUTRACE_POLICY", "ring:512K")];
    let ring = shared_job("", 4, 12, &env);
    let full = shared_job("", 4, 12, &[]);
    let kept = CaptureSource::open(&ring).unwrap().index().steps().len();
    assert!((5..12).contains(&kept), "the ring deleted steps and kept five at least: {kept} kept");
    let report = same_by_windows(&ring, &full, &Filter::default());
    let unmatched = report["unmatched"].as_array().unwrap();
    assert!(unmatched.iter().any(|u| u["run"] == "run2"), "the steps the ring deleted: {report:#}");
}

/// `--mode device-stats` (CANN's statistics CSVs: no content hash, no values): statistics that differ are
/// a difference, the first of each step and rank found from them; statistics that agree are one summary,
/// never "identical"; by windows as whole.
#[test]
fn device_statistics_find_the_first_difference_and_never_call_agreement_identical_the_same_by_windows() {
    let overflow = r#""overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 3, "rank": 2}"#;
    let device = ("ACCUTRACE_MODE", "device-stats");
    let run = shared_job(&format!(r#", "faults": {{{overflow}}}"#), 4, 6, &[device]);
    // The same job recorded again (two writer threads): the device computes the same statistics.
    let again =
        shared_job(&format!(r#", "faults": {{{overflow}}}"#), 4, 6, &[device, ("ACCUTRACE_WRITERS", "2")]);
    let agree = same_by_windows(&run, &again, &Filter::default());
    assert_eq!(agree["verdict"], "incomplete", "{agree:#}");
    assert_eq!((agree["differing_tensors"].as_u64(), agree["compared_tensors"].as_u64()), (Some(0), Some(0)));
    assert!(agree["agreeing_by_statistics"].as_u64() > Some(10_000), "{agree:#}");
    // One problem says it, not one a pair.
    let problems = agree["input_problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{agree:#}");
    assert_eq!(problems[0]["kind"], "incomplete");
    assert!(problems[0]["message"].as_str().unwrap().contains("does not show them identical"), "{agree:#}");
    let (code, out, _) = analyzer(&["diff", path_str(&run), path_str(&again)]);
    assert_eq!(code, 2, "{out}");
    assert!(out.starts_with("INCOMPLETE INPUT: ") && out.lines().count() < 10, "{out}");
    assert!(!out.contains("identical on every") && !out.contains("bit-identical"), "{out}");
    // Accepted as compare's pairs not measured are: the answer's status, still led by the summary.
    let (code, out, _) = analyzer(&["diff", "--allow-incomplete", path_str(&run), path_str(&again)]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("INCOMPLETE INPUT: "), "{out}");

    // Rank 1's gradient reduction of step 2 in another order: what it reached differs from there on.
    let reduction = r#""nondeterministic_reduction": {"step": 2, "rank": 1}"#;
    let reduced = shared_job(&format!(r#", "faults": {{{overflow}, {reduction}}}"#), 4, 6, &[device]);
    let differ = same_by_windows(&run, &reduced, &Filter::default());
    assert_eq!(differ["verdict"], "different", "{differ:#}");
    assert!(differ["input_problems"].as_array().unwrap().is_empty(), "{differ:#}");
    let firsts = differ["first_differences"].as_array().unwrap();
    assert_eq!((firsts[0]["step"].as_u64(), firsts[0]["rank"].as_u64()), (Some(2), Some(1)), "{differ:#}");
    // Rank 1's next step: its first op whose statistics differ, found from them.
    let next = firsts.iter().find(|f| f["step"] == 3 && f["rank"] == 1).expect("step 3 rank 1 differs");
    assert_eq!(next["output"]["by_device_statistics"], true, "{next:#}");
    assert_eq!(next["verdict"], "propagating", "{next:#}");
    assert!(differ["differing_by_statistics"].as_u64() > Some(0), "{differ:#}");
    // The statistics that agree beside the difference: one warning.
    let warnings = differ["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{differ:#}");
    assert!(warnings[0].as_str().unwrap().contains("may differ unseen"), "{differ:#}");
    let (code, out, _) = analyzer(&["diff", path_str(&run), path_str(&reduced)]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("found from the device's statistics, not values"), "{out}");
}
