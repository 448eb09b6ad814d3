//! What compare holds of its measured pairs is one row a pair (#18: memory must not grow by copies per
//! tensor): the bytes held are counted by this test binary's own allocator (`alloc_count`).

mod support;

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use analyzer::compare::{compare, CompareOptions, CompareRow};
use support::RunWriter;

/// Process-wide: the pairs are measured on other threads (this binary has one test).
#[global_allocator]
static ALLOCATOR: alloc_count::Process = alloc_count::Process;

/// A run of `ops` ops of two inputs and an output, one f32 each, every record's value its own (no pair
/// repeats another), plus `offset` (the benchmark's differ: every pair is read and measured).
fn write_run(path: &std::path::Path, ops: u64, offset: f32) -> std::path::PathBuf {
    let mut run = RunWriter::create(path, 1 << 24);
    for k in 0..ops {
        run.op(k, "Add");
        for (n, (io, index)) in [(Io::Input, 0), (Io::Input, 1), (Io::Output, 0)].into_iter().enumerate() {
            let value = (3 * k + n as u64) as f32 + offset;
            run.tensor(io, index, DType::FLOAT, &value.to_le_bytes());
        }
    }
    run.finish()
}

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
    // The rows (a `CompareRow` a pair) and compare's own tables of the pairs (matching, hashes, msprobe's
    // table, now the peak): 2,647 bytes a pair. With every result carried through a table of results (up
    // to three at once while one window of every pair was measured) and then copied into the rows, 4,562.
    let row = std::mem::size_of::<CompareRow>();
    assert!(peak / pairs <= 3_000, "{peak} bytes held for {pairs} pairs (a row is {row} bytes)");
}
