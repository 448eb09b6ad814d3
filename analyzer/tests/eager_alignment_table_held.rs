//! The kernels-against-API-calls alignment holds one block of its table's moves at a time, not the whole
//! table (#18: 2 bytes a cell, 283 MiB for a 128-layer eager step): the bytes held are counted by this test
//! binary's own allocator (`alloc_count`).

use accutrace_formats::stats::TensorStats;
use accutrace_formats::DType;
use analyzer::api_matching::align_kernels_to_apis;
use analyzer::index::{Index, Io, TensorId, TensorInfo};

#[global_allocator]
static ALLOCATOR: alloc_count::Process = alloc_count::Process;

const KERNELS: usize = 5_000;
const CALLS: usize = 2_000;

/// One output of op `op` of `rows` x 8 values whose statistics are all `value`.
fn output(index: &mut Index, op: usize, rows: u64, value: f64) {
    let stats = TensorStats {
        count: 8 * rows,
        mean: value,
        l2_norm: value,
        max: value,
        min: value,
        ..TensorStats::default()
    };
    let t = index.push_tensor(TensorInfo::new(op, Io::Output, 0, DType::FLOAT16, vec![rows, 8]));
    index.set_stats(t, Some(stats));
}

#[test]
fn the_alignment_holds_a_block_of_its_table_not_the_whole() {
    // Kernel k: an output of 1 + k % 4 rows, its statistics k. API call a is kernel 2a + 1's; the kernels
    // past 2 x CALLS belong to no call (an optimizer's).
    let (mut target, mut bench) = (Index::default(), Index::default());
    for k in 0..KERNELS {
        let op = target.push_op(format!("Mul_{k}"), "Mul".into(), 0, 0);
        output(&mut target, op, 1 + k as u64 % 4, k as f64);
    }
    for a in 0..CALLS {
        let op = bench.push_op(format!("Functional.mul.{a}.forward"), "mul".into(), 0, 0);
        let k = 2 * a + 1;
        output(&mut bench, op, 1 + k as u64 % 4, k as f64);
    }
    let all_target: Vec<TensorId> = (0..KERNELS).collect();
    let all_bench: Vec<TensorId> = (0..CALLS).collect();
    let (alignment, peak) =
        alloc_count::Process::peak_while(|| align_kernels_to_apis(&target, &bench, &all_target, &all_bench));
    let expected: Vec<(TensorId, TensorId)> = (0..CALLS).map(|a| (2 * a + 1, a)).collect();
    assert_eq!(alignment.pairs, expected);
    assert!(alignment.warnings.is_empty(), "{:?}", alignment.warnings);
    assert_eq!(alignment.unplaced_target.len(), KERNELS - 2 * CALLS);
    // The whole table's moves: (CALLS + 1) x 2 states a kernel x 2 bytes, 40 MB. A block of them and the
    // checkpoints: 3.7 MB.
    let whole = (CALLS + 1) * KERNELS * 2 * 2;
    assert!(peak < whole / 5, "{peak} bytes held; the whole table is {whole}");
}
