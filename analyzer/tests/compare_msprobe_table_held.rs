//! msprobe's table, made by every compare for its rows' `Result` verdicts and again where msprobe's CSV
//! writes it, is never held whole: a call's rows at a time (#18: memory must not grow by copies per
//! tensor). The bytes held are counted by this test binary's own allocator (`alloc_count`).

mod support;

use analyzer::compare::{compare, CompareOptions, Comparison};
use analyzer::report::compare::{write, CompareFormat};
use analyzer::report::{Colour, Destination};
use support::write_add_run as write_run;

/// Process-wide: the pairs are measured on other threads (this binary has one test).
#[global_allocator]
static ALLOCATOR: alloc_count::Process = alloc_count::Process;

/// Two runs of `ops` ops compared, the most held while comparing, and the most held while msprobe's CSV
/// of the comparison is written.
fn compare_and_write(dir: &std::path::Path, ops: u64) -> (usize, usize, usize) {
    let target = analyzer::sources::open(&write_run(&dir.join("target"), ops, 0.0)).unwrap();
    let bench = analyzer::sources::open(&write_run(&dir.join("bench"), ops, 0.5)).unwrap();
    let (comparison, peak) =
        alloc_count::Process::peak_while(|| compare(&*target, &*bench, &CompareOptions::default()));
    let pairs = comparison.rows.len();
    assert_eq!(pairs, 3 * ops as usize);
    let path = dir.join("msprobe.csv");
    let to = Destination { output: Some(&path), colour: Colour::Never };
    let write_csv = |c: &Comparison| write(c, CompareFormat::MsprobeCsv, &to, false);
    let (written, writing) = alloc_count::Process::peak_while(|| write_csv(&comparison));
    written.unwrap();
    let lines = std::fs::read_to_string(&path).unwrap().lines().count();
    assert_eq!(lines, pairs + 1, "a header and a row of msprobe's table per target tensor");
    (pairs, peak, writing)
}

#[test]
fn msprobe_table_is_never_held_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (small, _, writing_small) = compare_and_write(&dir.path().join("small"), 100);
    let (pairs, peak, writing) = compare_and_write(&dir.path().join("large"), 1_000);
    // Writing msprobe's CSV holds a call's rows, the writers' buffers and, while the table is made, each
    // target tensor's compared row (4 bytes): 4 bytes more a pair. With the table held from compare to
    // the CSV, 40 more (a row of positions and its verdict); with both arguments' text owned by the row,
    // 787.
    let slope = writing.saturating_sub(writing_small) / (pairs - small);
    assert!(
        slope <= 6,
        "writing msprobe's CSV holds {slope} bytes more a pair ({writing_small} -> {writing})"
    );
    // The whole compare at its peak, rows and tables: 572 bytes a pair. With each row's messages its own
    // (gathered by row in a map first), 593; with a row's ids a `usize` and an `Option` of one too, 610;
    // with msprobe's table held for its CSV too, 645; with a table of every target tensor's row looked up
    // by a map while it was built, each result of a window 528 bytes, and the hashes of every target
    // tensor listed, 1,888; with the table of text, and both sides' arguments copied as text to build it,
    // 2,466.
    assert!(peak / pairs <= 600, "{peak} bytes held for {pairs} pairs at compare's peak");
}
