//! diff reads a tensor that both runs recorded twice (an op's output, then the next op's input) once, where
//! each run stores the same bytes for both records: the report is the one measured pair by pair, and a
//! damaged copy of such a tensor, first or second, is still unreadable.

mod repeats;
mod support;

use analyzer::diff::{diff, DiffOptions};
use repeats::{damage, write_run};
use std::path::Path;

/// diff of `a` and `b` as JSON, with and without the shortcut, and how often the shortcut was taken.
fn both_ways(a: &Path, b: &Path) -> (String, String, usize) {
    repeats::both_ways(a, b, |x, y| {
        serde_json::to_string_pretty(&diff(x, y, &DiffOptions::default()).unwrap()).unwrap()
    })
}

#[test]
fn tensors_recorded_twice_are_read_once_and_give_the_same_report() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (write_run(dir.path(), false), write_run(dir.path(), true));
    let (with, without, taken) = both_ways(&a, &b);
    assert_eq!(with, without);
    // Outputs of ops 2..4 differ and are recorded again as inputs of ops 3..5: 3 repeats, 2 sources each.
    assert_eq!(taken, 6, "{with}");
    let report: serde_json::Value = serde_json::from_str(&with).unwrap();
    assert_eq!(report["verdict"], "different");
    assert_eq!(report["decoded_tensors"], 7, "{report}");
}

#[test]
fn a_damaged_copy_of_a_tensor_recorded_twice_is_unreadable_either_way() {
    // Record 3k + 2 is op k's output; record 3(k+1) is the same bytes as op k+1's input 0. Op 2 is stored
    // compressed, op 3 raw; the first copy or the second damaged, in run 1 or in run 2.
    for (nth, run2) in [(8, false), (9, false), (8, true), (9, true), (11, false), (12, true)] {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (write_run(dir.path(), false), write_run(dir.path(), true));
        damage(if run2 { &b } else { &a }, nth);
        let (with, without, _) = both_ways(&a, &b);
        assert_eq!(with, without, "record {nth} of run {}", if run2 { 2 } else { 1 });
        let report: serde_json::Value = serde_json::from_str(&with).unwrap();
        let problems = report["input_problems"].to_string();
        assert!(problems.contains("content hash") || problems.contains("zstd"), "{nth}: {report}");
        // The damaged record's op (its output or its input 0).
        assert!(problems.contains(&format!("model/op{}", nth / 3)), "{nth}: {problems}");
    }
}
