//! msprobe's messages are a few fixed sentences: the rows that take the same ones share a copy (#18: two
//! statistics captures whose hashes differ give every pair one, a box and two strings a row when each held
//! its own). The bytes held are counted by this test binary's own allocator (`alloc_count`).

mod support;

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use analyzer::compare::{compare, CompareOptions};
use support::RunWriter;

/// Process-wide: the pairs are measured on other threads (this binary has one test).
#[global_allocator]
static ALLOCATOR: alloc_count::Process = alloc_count::Process;

/// A statistics capture of `ops` ops of two inputs and an output, their values offset by `offset`.
fn statistics_run(path: &std::path::Path, ops: u64, offset: f32) -> std::path::PathBuf {
    let mut run = RunWriter::create(path, 1 << 24);
    for k in 0..ops {
        run.op(k, "Add");
        for (n, (io, index)) in [(Io::Input, 0), (Io::Input, 1), (Io::Output, 0)].into_iter().enumerate() {
            let value = (3 * k + n as u64) as f32 + offset;
            run.tensor_without_data(io, index, DType::FLOAT, &value.to_le_bytes());
        }
    }
    run.finish()
}

#[test]
fn unmeasured_pairs_share_msprobes_message() {
    const OPS: u64 = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let target = analyzer::sources::open(&statistics_run(&dir.path().join("target"), OPS, 0.0)).unwrap();
    let bench = analyzer::sources::open(&statistics_run(&dir.path().join("bench"), OPS, 0.5)).unwrap();
    let (comparison, peak) =
        alloc_count::Process::peak_while(|| compare(&*target, &*bench, &CompareOptions::default()));
    let pairs = comparison.rows.len();
    assert_eq!(pairs, 3 * OPS as usize);
    // Every pair differs by hash and neither side holds data: none is measured, each says so.
    assert!(comparison.rows.iter().all(|r| r.unmeasured()), "every pair unmeasured");
    let first = comparison.rows[0].messages();
    assert!(first.len() == 1 && first[0].contains("Not measured"), "{first:?}");
    assert!(
        comparison.rows.iter().all(|r| r.messages().as_ptr() == first.as_ptr()),
        "one copy of the message for every row"
    );
    // The rows (56 bytes) and what compare holds beside them: 128 bytes a pair. With each row holding its
    // own messages (a box, a list and its string) and the verdicts collecting them in a map by row, 341.
    assert!(peak / pairs <= 135, "{peak} bytes held for {pairs} pairs at compare's peak");
}
