//! `compare --step` of an fp16 capture against an fp32 one, and against one that holds no input (#18): what
//! the whole runs' report takes from the other steps (the names the benchmark fuses there, whether it holds
//! inputs anywhere) comes from the benchmark's census, so that the selected steps' windows alone are read,
//! and the report is the whole read's under the same selection, byte for byte.

mod common;

use analyzer::compare::{compare, CompareOptions};
use analyzer::filter::Filter;
use analyzer::outcome::Outcome;
use analyzer::report::compare::windows::compare_steps_by_windows;
use analyzer::report::compare::{write, CompareFormat};
use analyzer::report::{Colour, Destination};
use analyzer::sources::capture::windows::StepWindows;
use analyzer::sources::capture::CaptureSource;
use common::*;
use std::path::{Path, PathBuf};

/// Steps of the jobs (`compare_step`'s fp16 and fp32 jobs: the same recordings).
const STEPS: u64 = 6;

/// A 4-rank statistics job with `more` (JSON members, or empty) added to the model, the collector given `env`.
fn job(more: &str, env: &[(&str, &str)]) -> PathBuf {
    shared_job(more, 4, STEPS, env)
}

fn options(filter: &Filter) -> CompareOptions {
    CompareOptions { filter: filter.clone(), progress: false, ..CompareOptions::default() }
}

/// The whole captures' report in `format` under `filter`, and its outcome.
fn whole(a: &Path, b: &Path, filter: &Filter, format: CompareFormat) -> (String, Outcome) {
    let (a, b) = (CaptureSource::open(a).unwrap(), CaptureSource::open(b).unwrap());
    let c = compare(&a, &b, &options(filter));
    let report = report_text(|to| write(&c, format, to, false).unwrap());
    (report, c.outcome().or_input_errors(&c.problems, false))
}

/// The report by windows of one step each, kept to the selection's steps as `analyzer compare` keeps to them,
/// the benchmark's census noting what compare asks of its every tensor; its outcome and the windows compared.
fn by_windows(a: &Path, b: &Path, filter: &Filter, format: CompareFormat) -> (String, Outcome, usize) {
    let mut wa = StepWindows::census(a, 1).unwrap().expect("the target read by windows");
    let mut wb = StepWindows::census_of_bench(b, 1).unwrap().expect("the benchmark read by windows");
    assert!(wb.tensor_heads().is_some(), "the census read every tensor's head");
    wa.select_steps(&filter.steps);
    wb.select_steps(&filter.steps);
    assert!(StepWindows::align(&mut wa, &mut wb, 1));
    let dir = scratch();
    let out = dir.path().join("report");
    let to = Destination { output: Some(&out), colour: Colour::Never };
    let done = compare_steps_by_windows([&mut wa, &mut wb], &options(filter), format, &to)
        .unwrap()
        .expect("compared by windows");
    let outcome = done.outcome.or_input_errors(&done.problems, false);
    (std::fs::read_to_string(&out).unwrap(), outcome, done.windows)
}

/// Compared by windows in each of `formats`, the report and outcome are the whole's; returns the windows
/// compared and the whole's report in the last format.
fn same_as_whole(a: &Path, b: &Path, filter: &Filter, formats: &[CompareFormat]) -> (usize, String) {
    let mut read = None;
    for &format in formats {
        let (expected, expected_outcome) = whole(a, b, filter, format);
        let (found, outcome, windows) = by_windows(a, b, filter, format);
        assert_eq!(outcome, expected_outcome, "{format:?}");
        // Lines, so that a failure shows where they part.
        assert_eq!(
            found.lines().collect::<Vec<_>>(),
            expected.lines().collect::<Vec<_>>(),
            "{format:?} {filter:?}"
        );
        read = Some((windows, expected));
    }
    read.unwrap()
}

#[test]
fn an_fp16_capture_against_an_fp32_one_reads_the_selected_windows() {
    let (fp16, fp32) = (job("", &[]), job(r#", "precision": "fp32""#, &[]));
    // The loss scaling's ops have no counterpart in the fp32 run: whether it fuses them in another step is
    // the census's word.
    let one = Filter { steps: vec![4], ..Filter::default() };
    let (windows, report) = same_as_whole(&fp16, &fp32, &one, &[CompareFormat::Json, CompareFormat::Table]);
    assert_eq!(windows, 1);
    assert!(report.contains("step 4 rank 0: model/loss/scale/Mul.input.0"), "{report}");
    // Two steps of two ranks: their two windows.
    let some = Filter { steps: vec![1, 2], ranks: vec![0, 3], ops: vec![] };
    let (windows, report) = same_as_whole(&fp16, &fp32, &some, &[CompareFormat::Json]);
    assert_eq!(windows, 2);
    assert!(report.contains("model/loss/scale/Mul"), "{report}");
}

#[test]
fn a_benchmark_without_inputs_is_told_by_its_census() {
    // Outputs only: the target's inputs are not listed as unmatched, as the whole runs' report has it,
    // which the selection's windows alone cannot say (it was every step's windows).
    let (target, outputs) = (job("", &[]), job("", &[("ACCUTRACE_IO", "output")]));
    let wb = StepWindows::census_of_bench(&outputs, 1).unwrap().unwrap();
    assert!(!wb.tensor_heads().unwrap().inputs);
    let one = Filter { steps: vec![3], ..Filter::default() };
    let (windows, report) = same_as_whole(&target, &outputs, &one, &[CompareFormat::Json]);
    assert_eq!(windows, 1);
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    let unmatched = report["unmatched_target"].as_array().unwrap();
    assert!(unmatched.iter().all(|t| !t.as_str().unwrap().contains(".input.")), "{report:#}");
}
