//! Matching keys the benchmark's ops by their name made once per op, not a key a tensor with its name
//! copied into it (#18: memory must not grow by copies per tensor): the bytes held are counted by this test
//! binary's own allocator (`alloc_count`).

mod support;

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use analyzer::matching::{match_runs, MatchOptions};
use support::RunWriter;

/// Per thread: matching runs on the test's own thread.
#[global_allocator]
static ALLOCATOR: alloc_count::PerThread = alloc_count::PerThread;

/// A run of `ops` ops named as a model's are (about 60 characters), each with eight outputs.
fn write_run(path: &std::path::Path, ops: u64) -> std::path::PathBuf {
    let mut run = RunWriter::create(path, 1 << 24);
    for k in 0..ops {
        run.op_named(
            0,
            k,
            &format!("model/decoder/layers.{k}/self_attention/query_key_value/MatMul"),
            "MatMul",
        );
        for index in 0..8 {
            run.tensor(Io::Output, index, DType::FLOAT, &((8 * k + u64::from(index)) as f32).to_le_bytes());
        }
    }
    run.finish()
}

#[test]
fn an_op_name_is_not_copied_into_each_tensor_key() {
    const OPS: u64 = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let target = analyzer::sources::open(&write_run(&dir.path().join("target"), OPS)).unwrap();
    let bench = analyzer::sources::open(&write_run(&dir.path().join("bench"), OPS)).unwrap();
    let (matching, peak) = alloc_count::PerThread::peak_while(|| {
        match_runs(target.index(), bench.index(), &MatchOptions::default())
    });
    let tensors = 8 * OPS as usize;
    assert_eq!((matching.pairs.len(), matching.unmatched_target.len()), (tensors, 0));
    // The benchmark's ops keyed by rank, step and name (a key and an id an op, each op's tensor found by
    // its place) and the pairs: 74 bytes a tensor. With a key and an id a tensor, 161; with a copy of its
    // op's name in every tensor's key, 229.
    assert!(peak / tensors <= 90, "{peak} bytes held for {tensors} tensors");
}
