//! What `overflow`, `watch` and `ranks` gather of a capture's stored statistics holds each tensor's
//! statistics once (#18: memory must not grow by copies per tensor): the bytes held are counted by this
//! test binary's own allocator (`alloc_count`).

mod support;

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use analyzer::overflow::gather_stats;
use analyzer::problems::InputProblems;
use support::RunWriter;

/// Process-wide: the reads may run on other threads (this binary has one test).
#[global_allocator]
static ALLOCATOR: alloc_count::Process = alloc_count::Process;

#[test]
fn stored_statistics_are_gathered_without_a_second_copy() {
    const OPS: u64 = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let mut run = RunWriter::create(&dir.path().join("run"), 1 << 24);
    for k in 0..OPS {
        run.op(k, "Add");
        for (io, index) in [(Io::Input, 0), (Io::Input, 1), (Io::Output, 0)] {
            run.tensor(io, index, DType::FLOAT, &(k as f32).to_le_bytes());
        }
    }
    let source = analyzer::sources::open(&run.finish()).unwrap();
    let ops: Vec<usize> = (0..source.index().ops.len()).collect();
    let tensors = source.index().tensors.len();
    let mut problems = InputProblems::default();
    let (stats, peak) =
        alloc_count::Process::peak_while(|| gather_stats(&*source, &ops, &mut problems, false));
    assert_eq!(stats.len(), tensors);
    assert!(problems.is_empty());
    // The tensor list (8 bytes a tensor) and a bit a tensor: the stored statistics stay in the index. With
    // a map holding a copy of each (a 96-byte `TensorStats` and its key, in B-tree nodes), 205 bytes a
    // tensor; with every tensor's statistics carried through the reads' results as well, 301.
    assert!(peak / tensors <= 24, "{peak} bytes held for {tensors} tensors' statistics");
}
