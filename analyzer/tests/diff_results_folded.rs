//! What diff holds of its measured pairs is folded as each is measured (#18: memory must not grow with the
//! tensor count by tables of diff's own): the bytes held are counted by this test binary's own allocator
//! (`alloc_count`).

mod support;

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use analyzer::diff::{diff, DiffOptions};
use support::RunWriter;

/// Process-wide: the pairs are measured on other threads (this binary has one test).
#[global_allocator]
static ALLOCATOR: alloc_count::Process = alloc_count::Process;

/// A run of `ops` ops of two inputs and an output, one f32 each, every record's value its own.
fn write_run(path: &std::path::Path, ops: u64) -> std::path::PathBuf {
    let mut run = RunWriter::create(path, 1 << 24);
    for k in 0..ops {
        run.op(k, "Add");
        for (n, (io, index)) in [(Io::Input, 0), (Io::Input, 1), (Io::Output, 0)].into_iter().enumerate() {
            run.tensor(io, index, DType::FLOAT, &((3 * k + n as u64) as f32).to_le_bytes());
        }
    }
    run.finish()
}

#[test]
fn each_measured_pair_leaves_no_result_behind() {
    const OPS: u64 = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let run1 = analyzer::sources::open(&write_run(&dir.path().join("run1"), OPS)).unwrap();
    let run2 = analyzer::sources::open(&write_run(&dir.path().join("run2"), OPS)).unwrap();
    let (report, peak) = alloc_count::Process::peak_while(|| diff(&*run1, &*run2, &DiffOptions::default()));
    let report = report.unwrap();
    let pairs = 3 * OPS as usize;
    assert_eq!((report.verdict, report.compared_tensors), ("identical", pairs));
    // Matching's map of run 2's tensors (now the peak) and the pairs, and per pair a few bytes of the
    // repeats' and diff's own (one byte a tensor of run 1): 195 bytes a pair (211 while the map copied an
    // op's name into each of its tensors' keys). With every pair's figures in a table of results and then
    // in a map by tensor, 282.
    assert!(peak / pairs <= 240, "{peak} bytes held for {pairs} pairs");
}
