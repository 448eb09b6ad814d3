//! compare reads a tensor that both sides recorded twice (an op's output, then the next op's input) once,
//! where each side stores the same bytes for both records: the report is the one measured pair by pair, and
//! a damaged copy of such a tensor, first or second, is still unreadable.

mod repeats;
mod support;

use repeats::{damage, write_run};
use std::path::Path;
use support::compare_texts;

/// compare of `a` (target) and `b` (bench) as JSON and as msprobe's CSV, with and without the shortcut, and
/// how often the shortcut was taken.
fn both_ways(a: &Path, b: &Path) -> ((String, String), (String, String), usize) {
    repeats::both_ways(a, b, |x, y| compare_texts(x, y))
}

#[test]
fn tensors_recorded_twice_are_read_once_and_give_the_same_report() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (write_run(dir.path(), false), write_run(dir.path(), true));
    let ((json, csv), (json_without, csv_without), taken) = both_ways(&a, &b);
    assert_eq!(json, json_without);
    assert_eq!(csv, csv_without);
    // Outputs of ops 2..4 differ and are recorded again as inputs of ops 3..5: 3 repeats, 2 sources each.
    assert_eq!(taken, 6, "{json}");
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["input_problems"].as_array().map(Vec::len), Some(0), "{report}");
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 18);
    // The repeats (input 0 of ops 3..5) carry measured metrics of both families, as their first pairs do.
    for k in 3..6 {
        let row = rows
            .iter()
            .find(|r| {
                r["target"].as_str().is_some_and(|t| t.contains(&format!("op{k}")) && t.contains("input.0"))
            })
            .unwrap_or_else(|| panic!("no row for op{k}'s input 0: {report}"));
        assert!(row["cosine"].is_number(), "{row}");
        assert!(row["msaccucmp"].is_object(), "{row}");
        assert_eq!(row["measured"], "values", "{row}");
    }
}

#[test]
fn a_damaged_copy_of_a_tensor_recorded_twice_is_unreadable_either_way() {
    // Record 3k + 2 is op k's output; record 3(k+1) is the same bytes as op k+1's input 0. Op 2 is stored
    // compressed, op 3 raw; the first copy or the second damaged, in the target or in the benchmark.
    for (nth, bench) in [(8, false), (9, false), (8, true), (9, true), (11, false), (12, true)] {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (write_run(dir.path(), false), write_run(dir.path(), true));
        damage(if bench { &b } else { &a }, nth);
        let ((json, csv), (json_without, csv_without), _) = both_ways(&a, &b);
        let side = if bench { "bench" } else { "target" };
        assert_eq!(json, json_without, "record {nth} of the {side}");
        assert_eq!(csv, csv_without, "record {nth} of the {side}");
        let report: serde_json::Value = serde_json::from_str(&json).unwrap();
        let problems = report["input_problems"].to_string();
        assert!(problems.contains("content hash") || problems.contains("zstd"), "{nth}: {report}");
        // The damaged record's op (its output or its input 0), and only its row unreadable.
        assert!(problems.contains(&format!("model/op{}", nth / 3)), "{nth}: {problems}");
        let unreadable: Vec<&serde_json::Value> =
            report["rows"].as_array().unwrap().iter().filter(|r| !r["error"].is_null()).collect();
        assert_eq!(unreadable.len(), 1, "{nth}: {unreadable:?}");
    }
}
