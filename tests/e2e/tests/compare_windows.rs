//! `compare` of two long captures read a window of the same steps of each at a time (#18) writes the
//! report the compare of the whole captures writes, byte for byte, the table, CSV and JSON: every row in the
//! whole runs' order (rank by rank), the failing ops and the culprit, the unmatched tensors, the problems
//! and the warnings, and the same exit status. Windows of one step and of two, over 4-rank jobs; runs of
//! another model are left to the whole compare, which refuses them.

mod common;

use analyzer::compare::{compare, CompareOptions};
use analyzer::filter::Filter;
use analyzer::metrics::Families;
use analyzer::outcome::Outcome;
use analyzer::report::compare::windows::compare_by_windows;
use analyzer::report::compare::{write, CompareFormat};
use analyzer::report::{Colour, Destination};
use analyzer::sources::capture::windows::StepWindows;
use analyzer::sources::capture::CaptureSource;
use analyzer::sources::Source;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Steps of the jobs recorded with their tensors' values (a window of two steps needs five at least: a run
/// that fits one window is read whole).
const STEPS: u64 = 3;

/// A 4-rank job (`common::shared_job`) of `steps` steps with `more` (JSON members, or empty) added to the
/// model, its tensors' values recorded where `values` (else statistics, as by default).
fn job(more: &str, steps: u64, values: bool) -> PathBuf {
    let env: &[(&str, &str)] = if values { &[("ACCUTRACE_MODE", "tensor")] } else { &[] };
    shared_job(more, 4, steps, env)
}

/// Every metric family, whatever the form: one whole comparison gives every form's report.
fn options(filter: &Filter) -> CompareOptions {
    let families = Some(Families::All);
    CompareOptions { filter: filter.clone(), families, progress: false, ..CompareOptions::default() }
}

/// The reports of the whole captures in `formats` (written to a file, as `-o` does) and the outcome.
fn whole(
    a: &Path,
    b: &Path,
    filter: &Filter,
    formats: &[CompareFormat],
    out: &Path,
) -> (Vec<String>, Outcome) {
    let (a, b) = (CaptureSource::open(a).unwrap(), CaptureSource::open(b).unwrap());
    let c = compare(&a, &b, &options(filter));
    let to = Destination { output: Some(out), colour: Colour::Never };
    let reports = formats
        .iter()
        .map(|&format| {
            write(&c, format, &to, false).unwrap();
            std::fs::read_to_string(out).unwrap()
        })
        .collect();
    (reports, c.outcome().or_input_errors(&c.problems, false))
}

/// The report of the captures by windows of at most `window_tensors` tensors, its outcome and how many
/// windows were read; `None` where the windows left the runs to the whole compare.
fn by_windows(
    a: &Path,
    b: &Path,
    filter: &Filter,
    format: CompareFormat,
    window_tensors: u64,
    out: &Path,
) -> Option<(String, Outcome, usize)> {
    let mut wa = StepWindows::census(a, window_tensors).unwrap().expect("the target read by windows");
    let mut wb = StepWindows::census(b, window_tensors).unwrap().expect("the benchmark read by windows");
    assert!(StepWindows::align(&mut wa, &mut wb, window_tensors), "two windows at least");
    let to = Destination { output: Some(out), colour: Colour::Never };
    let done = compare_by_windows([&wa, &wb], &options(filter), format, &to).unwrap()?;
    let outcome = done.outcome.or_input_errors(&done.problems, false);
    Some((std::fs::read_to_string(out).unwrap(), outcome, wa.windows().len()))
}

/// The table, CSV and JSON.
const ALL: &[CompareFormat] = &[CompareFormat::Table, CompareFormat::Csv, CompareFormat::Json];

/// Windows of one step (each of `formats`) and, where both runs have five steps at least, of two (JSON),
/// each the whole's report; returns the whole's JSON (`formats` ends with JSON).
fn same_by_windows(a: &Path, b: &Path, filter: &Filter, formats: &[CompareFormat]) -> Value {
    let dir = scratch();
    let (a_whole, b_whole) = (CaptureSource::open(a).unwrap(), CaptureSource::open(b).unwrap());
    let (a_index, b_index) = (a_whole.index(), b_whole.index());
    let per_step = |i: &analyzer::index::Index| i.tensors.len() as u64 / i.steps().len() as u64;
    let two_steps = 9 * per_step(a_index).max(per_step(b_index)) / 2;
    let steps = a_index.steps().into_iter().chain(b_index.steps()).collect::<BTreeSet<u64>>().len();
    let long = a_index.steps().len().min(b_index.steps().len()) >= 5;
    drop((a_whole, b_whole));
    let (reports, outcome) = whole(a, b, filter, formats, &dir.path().join("whole"));
    for (&format, expected) in formats.iter().zip(&reports) {
        let budgets: &[u64] = if format == CompareFormat::Json && long { &[1, two_steps] } else { &[1] };
        for &window_tensors in budgets {
            let (found, found_outcome, n) =
                by_windows(a, b, filter, format, window_tensors, &dir.path().join("windows"))
                    .expect("read by windows");
            let expected_windows = if window_tensors == 1 { n == steps } else { n >= 2 && n < steps };
            assert!(expected_windows, "{n} windows of {window_tensors} tensors");
            assert_eq!(found_outcome, outcome, "{format:?}, {n} windows");
            // Lines, so that a failure shows where they part.
            let (found, expected): (Vec<&str>, Vec<&str>) =
                (found.lines().collect(), expected.lines().collect());
            assert_eq!(found, expected, "{} vs {}: {format:?}, {n} windows", a.display(), b.display());
        }
    }
    serde_json::from_str(reports.last().unwrap()).unwrap()
}

#[test]
fn runs_that_agree_and_another_seed_compare_the_same_by_windows() {
    let a = job(r#", "seed": 7"#, STEPS, true);
    let report = same_by_windows(&a, &a, &Filter::default(), &[CompareFormat::Table, CompareFormat::Json]);
    assert!(report["failing_ops"].as_array().unwrap().is_empty(), "{report:#}");
    let b = job(r#", "seed": 8"#, STEPS, true);
    let report = same_by_windows(&a, &b, &Filter::default(), ALL);
    let rows = report["rows"].as_array().unwrap();
    assert!(rows.iter().filter(|r| r["status"] == "fail").count() * 2 > rows.len(), "most pairs fail");
    // In the whole run's order: rank by rank, each rank's steps in order; every rank fails.
    let placed: Vec<(u64, u64)> =
        rows.iter().map(|r| (r["rank"].as_u64().unwrap(), r["step"].as_u64().unwrap())).collect();
    assert!(placed.windows(2).all(|w| w[0] <= w[1]) && placed[0].0 == 0 && placed.last().unwrap().0 == 3);
}

/// Apart from the test above, so that the two run at once.
#[test]
fn a_selection_and_an_overflows_culprit_compare_the_same_by_windows() {
    let (a, b) = (job(r#", "seed": 7"#, STEPS, true), job(r#", "seed": 8"#, STEPS, true));
    // A selection of steps and ranks, read by windows, is the whole's selection too.
    let selection = Filter { steps: vec![0, 2], ranks: vec![0, 3], ops: vec![] };
    let selected = same_by_windows(&a, &b, &selection, &[CompareFormat::Json]);
    assert!(selected["rows"].as_array().unwrap().iter().all(|r| r["rank"] == 0 || r["rank"] == 3));
    // An overflow on rank 1 in step 1: the culprit is the first cleared failing op in the whole run's
    // order, rank by rank, whichever window found it.
    let fault = r#", "seed": 7, "faults": {"overflow": {"op": "model/layer_0/mlp/fc1/MatMul", "step": 1, "rank": 1}}"#;
    let overflow = job(fault, STEPS, true);
    let report =
        same_by_windows(&overflow, &a, &Filter::default(), &[CompareFormat::Table, CompareFormat::Json]);
    assert!(report["culprit"].is_object(), "{report:#}");
    let failing = report["failing_ops"].as_array().unwrap();
    assert!(failing.iter().any(|f| f["step"] == 1 && f["rank"] == 1), "{report:#}");
}

#[test]
fn fewer_steps_leave_the_same_tensors_unmatched_by_windows() {
    let (long, short) = (job("", 6, false), job("", 5, false));
    // Statistics captures: pairs with equal hashes pass, the others are not measured (an input problem).
    let report =
        same_by_windows(&long, &short, &Filter::default(), &[CompareFormat::Table, CompareFormat::Json]);
    let unmatched = report["unmatched"].as_array().unwrap();
    assert!(!unmatched.is_empty() && unmatched.iter().all(|u| u["step"].as_u64() == Some(5)));
    let ranks: Vec<u64> = unmatched.iter().map(|u| u["rank"].as_u64().unwrap()).collect();
    assert!(ranks.windows(2).all(|w| w[0] <= w[1]) && ranks.first() != ranks.last(), "{ranks:?}");
    let warnings = report["warnings"].as_array().unwrap();
    assert!(warnings.iter().any(|w| w.as_str().unwrap().contains("step 5 has no counterpart")), "{report:#}");
}

#[test]
fn another_feed_forward_width_is_compared_by_windows_and_another_model_whole() {
    let long = job("", 6, false);
    // Another width of the feed-forward layers only: compared, by windows too.
    same_by_windows(&long, &job(r#", "d_ff": 72"#, 6, false), &Filter::default(), &[CompareFormat::Json]);
    // Another width: a window refuses it, and the whole runs are compared instead, and refused.
    let wide = job(r#", "d_model": 48"#, 6, false);
    let dir = scratch();
    let out = dir.path().join("windows");
    // Whichever the form: the windows' configuration check does not read the rows.
    assert!(by_windows(&long, &wide, &Filter::default(), CompareFormat::Json, 1, &out).is_none());
    let (reports, outcome) = whole(&long, &wide, &Filter::default(), &[CompareFormat::Json], &out);
    assert_eq!(outcome, Outcome::InputErrors);
    assert!(reports[0].contains("these are not runs of the same model"), "{reports:?}");
}
