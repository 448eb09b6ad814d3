//! msprobe's table, built by every compare for its rows' `Result` verdicts, holds positions into the two
//! sides' arguments, not their text (#18: memory must not grow by copies per tensor): the bytes held are
//! counted by this test binary's own allocator (`alloc_count`).

mod support;

use analyzer::compare::{compare, CompareOptions, MsprobeRow};
use support::write_add_run as write_run;

/// Process-wide: the pairs are measured on other threads (this binary has one test).
#[global_allocator]
static ALLOCATOR: alloc_count::Process = alloc_count::Process;

#[test]
fn msprobe_table_holds_positions_not_text() {
    const OPS: u64 = 1_000;
    let dir = tempfile::tempdir().unwrap();
    let target = analyzer::sources::open(&write_run(&dir.path().join("target"), OPS, 0.0)).unwrap();
    let bench = analyzer::sources::open(&write_run(&dir.path().join("bench"), OPS, 0.5)).unwrap();
    let (comparison, peak) = alloc_count::Process::peak_while(|| {
        compare(&*target, &*bench, &CompareOptions { keep_msprobe_table: true, ..CompareOptions::default() })
    });
    let pairs = comparison.rows.len();
    assert_eq!(pairs, 3 * OPS as usize);
    assert_eq!(
        comparison.msprobe_table.as_ref().map(Vec::len),
        Some(pairs),
        "a row of msprobe's table per target tensor"
    );
    // What the table holds, counted by copying it: the rows themselves and what they own on the heap.
    let (copy, table_bytes) = alloc_count::Process::peak_while(|| comparison.msprobe_table.clone());
    drop(copy);
    let row = std::mem::size_of::<MsprobeRow>();
    // A row holds positions and its verdict: 40 bytes a row; 72 with its positions as `Option`s and its
    // verdict inline. With both arguments' text (names, dtype names, statistics as text) owned by the row,
    // 787 (a 640-byte row and its strings).
    let per_row = table_bytes / pairs;
    assert!(per_row <= 48, "msprobe's table holds {per_row} bytes a row (a row is {row} bytes)");
    // The whole compare at its peak, rows and tables: 645 bytes a pair. With a table of every target
    // tensor's row looked up by a map while it was built, each result of a window 528 bytes, and the hashes
    // of every target tensor listed, 1,888; with the table of text, and both sides' arguments copied as
    // text to build it, 2,466.
    assert!(peak / pairs <= 700, "{peak} bytes held for {pairs} pairs at compare's peak");
}
