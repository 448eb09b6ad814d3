//! `compare --step` of two long captures reads the selected steps' windows alone (#18), and writes the
//! report the compare of the whole captures writes under the same selection, byte for byte; where the
//! selection cannot say what the whole runs' report does (a count over every step, as of the pairs narrower
//! in the benchmark), it reads every step's windows, and the report is still the whole's. What the whole
//! runs' report takes from the benchmark's other steps (the names it fuses there, whether it holds inputs
//! anywhere) comes from their indexes alone, or from the benchmark's census, which notes it from each tensor
//! record's head, as `analyzer compare` reads it: an fp16 capture against an fp32 one, or against one that
//! holds no input, then reads the selected windows alone.

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

/// Steps of the jobs (`compare_windows`'s: one recording for both files).
const STEPS: u64 = 3;

/// A 4-rank job of `steps` steps with `more` (JSON members, or empty) added to the model, its tensors'
/// values recorded where `values`.
fn job(more: &str, steps: u64, values: bool) -> PathBuf {
    let env: &[(&str, &str)] = if values { &[("ACCUTRACE_MODE", "tensor")] } else { &[] };
    shared_job(more, 4, steps, env)
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

/// How the benchmark's census is taken: plain (what the other steps say comes from their indexes), or
/// noting every tensor record's head, as `analyzer compare --step` takes it.
#[derive(Clone, Copy)]
enum BenchCensus {
    Plain,
    NotingHeads,
}

/// The report by windows of one step each, the selection's steps kept to where `filter` selects some, as
/// `analyzer compare` keeps to them; its outcome, the windows compared, and the windows of every step.
fn by_windows(
    (a, b): (&Path, &Path),
    filter: &Filter,
    format: CompareFormat,
    bench: BenchCensus,
) -> (String, Outcome, usize, usize) {
    let mut wa = StepWindows::census(a, 1).unwrap().expect("the target read by windows");
    let census = match bench {
        BenchCensus::Plain => StepWindows::census(b, 1),
        BenchCensus::NotingHeads => StepWindows::census_of_bench(b, 1),
    };
    let mut wb = census.unwrap().expect("the benchmark read by windows");
    if let BenchCensus::NotingHeads = bench {
        assert!(wb.tensor_heads().is_some(), "the census read every tensor's head");
    }
    let every = wa.windows().len();
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
    (std::fs::read_to_string(&out).unwrap(), outcome, done.windows, every)
}

/// Compared by windows in each of `formats`, the report and outcome are the whole's; returns the windows
/// compared and those of every step.
fn same_as_whole(a: &Path, b: &Path, filter: &Filter, formats: &[CompareFormat]) -> (usize, usize) {
    let (windows, every, _) = same_as_whole_with(a, b, filter, formats, BenchCensus::Plain);
    (windows, every)
}

/// [`same_as_whole`] with the benchmark's census taken as `bench`; also returns the whole's report in the
/// last format.
fn same_as_whole_with(
    a: &Path,
    b: &Path,
    filter: &Filter,
    formats: &[CompareFormat],
    bench: BenchCensus,
) -> (usize, usize, String) {
    let mut read = None;
    for &format in formats {
        let (expected, expected_outcome) = whole(a, b, filter, format);
        let (found, outcome, windows, every) = by_windows((a, b), filter, format, bench);
        assert_eq!(outcome, expected_outcome, "{format:?}");
        // Lines, so that a failure shows where they part.
        let (found_lines, expected_lines): (Vec<&str>, Vec<&str>) =
            (found.lines().collect(), expected.lines().collect());
        assert_eq!(found_lines, expected_lines, "{format:?} of {filter:?}");
        read = Some((windows, every, expected));
    }
    read.unwrap()
}

const ALL: &[CompareFormat] = &[CompareFormat::Table, CompareFormat::Csv, CompareFormat::Json];
const JSON: &[CompareFormat] = &[CompareFormat::Json];
const TABLE: &[CompareFormat] = &[CompareFormat::Table];

#[test]
fn a_selection_of_steps_reads_their_windows_alone() {
    let (a, b) = (job(r#", "seed": 7"#, STEPS, true), job(r#", "seed": 8"#, STEPS, true));
    // One step: its window alone, of the three.
    let one = Filter { steps: vec![1], ..Filter::default() };
    assert_eq!(same_as_whole(&a, &b, &one, ALL), (1, 3));
    // Steps apart, and ranks: a window each, none for the step between.
    let two = Filter { steps: vec![0, 2], ranks: vec![1, 2], ops: vec![] };
    assert_eq!(same_as_whole(&a, &b, &two, JSON), (2, 3));
    // Of another seed, most pairs fail: the first failing op and the culprit are the selection's.
    let (report, _) = whole(&a, &b, &one, CompareFormat::Json);
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    let failing = report["failing_ops"].as_array().unwrap();
    assert!(!failing.is_empty() && failing.iter().all(|f| f["step"] == 1), "{report:#}");
}

#[test]
fn what_the_selection_cannot_say_is_read_from_every_step() {
    // The fp32 run as the target: the warning that the sides look swapped counts the pairs narrower in the
    // benchmark over every step, which the selection alone cannot.
    let (fp32, fp16) = (job(r#", "precision": "fp32""#, 6, false), job("", 6, false));
    let one = Filter { steps: vec![4], ..Filter::default() };
    let (windows, every) = same_as_whole(&fp32, &fp16, &one, TABLE);
    assert_eq!((windows, every), (6, 6));
    let (report, _) = whole(&fp32, &fp16, &one, CompareFormat::Table);
    assert!(report.contains("look swapped"), "{report}");
    // The other way round, the loss scaling's ops have no counterpart in the selection's steps: whether the
    // benchmark fuses them in some other step is the other steps' word, which their indexes alone give:
    // the selection's window is the one compared.
    assert_eq!(same_as_whole(&fp16, &fp32, &one, ALL), (1, 6));
    let (report, _) = whole(&fp16, &fp32, &one, CompareFormat::Table);
    assert!(report.contains("model/loss/scale/Mul.input.0"), "{report}");
}

#[test]
fn an_fp16_capture_against_an_fp32_one_reads_the_selected_windows() {
    let (fp16, fp32) = (job("", 6, false), job(r#", "precision": "fp32""#, 6, false));
    // The loss scaling's ops have no counterpart in the fp32 run: whether it fuses them in another step is
    // the census's word.
    let one = Filter { steps: vec![4], ..Filter::default() };
    let both = &[CompareFormat::Json, CompareFormat::Table];
    let (windows, _, report) = same_as_whole_with(&fp16, &fp32, &one, both, BenchCensus::NotingHeads);
    assert_eq!(windows, 1);
    assert!(report.contains("step 4 rank 0: model/loss/scale/Mul.input.0"), "{report}");
    // Two steps of two ranks: their two windows.
    let some = Filter { steps: vec![1, 2], ranks: vec![0, 3], ops: vec![] };
    let (windows, _, report) = same_as_whole_with(&fp16, &fp32, &some, JSON, BenchCensus::NotingHeads);
    assert_eq!(windows, 2);
    assert!(report.contains("model/loss/scale/Mul"), "{report}");
}

#[test]
fn a_benchmark_without_inputs_is_told_by_its_census() {
    // Outputs only: the target's inputs are not listed as unmatched, as the whole runs' report has it,
    // which the selection's windows alone cannot say (it was every step's windows).
    let (target, outputs) = (job("", 6, false), shared_job("", 4, 6, &[("ACCUTRACE_IO", "output")]));
    let wb = StepWindows::census_of_bench(&outputs, 1).unwrap().unwrap();
    assert!(!wb.tensor_heads().unwrap().inputs);
    let one = Filter { steps: vec![3], ..Filter::default() };
    let (windows, _, report) = same_as_whole_with(&target, &outputs, &one, JSON, BenchCensus::NotingHeads);
    assert_eq!(windows, 1);
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    let unmatched = report["unmatched_target"].as_array().unwrap();
    assert!(unmatched.iter().all(|t| !t.as_str().unwrap().contains(".input.")), "{report:#}");
}
