//! What compare holds of its measured pairs is one row a pair (#18: memory must not grow by copies per
//! tensor): the bytes held are counted by this test binary's own allocator (`alloc_count`).

mod support;

use analyzer::compare::{compare, CompareOptions, CompareRow};
use support::write_add_run as write_run;

/// Process-wide: the pairs are measured on other threads (this binary has one test).
#[global_allocator]
static ALLOCATOR: alloc_count::Process = alloc_count::Process;

#[test]
fn each_measured_pair_is_held_once_as_its_row() {
    const OPS: u64 = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let target = analyzer::sources::open(&write_run(&dir.path().join("target"), OPS, 0.0)).unwrap();
    let bench = analyzer::sources::open(&write_run(&dir.path().join("bench"), OPS, 0.5)).unwrap();
    let (comparison, peak) =
        alloc_count::Process::peak_while(|| compare(&*target, &*bench, &CompareOptions::default()));
    let pairs = comparison.rows.len();
    assert_eq!(pairs, 3 * OPS as usize);
    assert!(comparison.problems.is_empty(), "{:?}", comparison.problems);
    assert!(comparison.rows.iter().all(|r| r.judged()), "every pair is read and measured");
    // The rows (a `CompareRow` a pair) and what compare holds beside them (the matching's pairs, a window
    // of results, msprobe's verdicts): 450 bytes a pair, a row 56 bytes (each row here has msprobe's and
    // msaccucmp's metrics, boxed; a statistics capture's rows have none). A row whose ids were a `usize`
    // and an `Option` of one, 471 and 72; with msprobe's verdicts decided
    // beside a table of its rows (each target tensor's row looked up in 64 bits), 499; with that table held
    // (72 bytes a target tensor), a result for every target tensor while the culprit's hashes were looked
    // up, the pairs' repeats listed for every pair, and each result of a window 528 bytes, 826. A row that
    // held msprobe's metrics inline, 868 and 184; one that held msaccucmp's metrics inline, 920 and 288;
    // its rarely set texts (messages, reason, error) too, 1,012 and 352; one that copied both sides'
    // statistics from the index (208 bytes inline), 1,263 and 528; every result carried through a table of
    // results (up to three at once while one window of every pair was measured) and then copied into the
    // rows, 4,562.
    let row = std::mem::size_of::<CompareRow>();
    assert!(row <= 56, "a row is {row} bytes");
    assert!(peak / pairs <= 470, "{peak} bytes held for {pairs} pairs (a row is {row} bytes)");
    // The index's statistics are read from it, not copied: only the pairs whose sides lack them (a .npy
    // directory, a dump tree) carry what was measured.
    assert!(comparison
        .rows
        .iter()
        .all(|r| r.target_measured_stats.is_none() && r.bench_measured_stats.is_none()));
}
