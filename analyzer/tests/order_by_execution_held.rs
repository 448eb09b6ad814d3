//! Putting an index in execution order holds a few ids a tensor beside the index, not a list of tensors
//! per op (#18: memory must not grow by a heap block per op at the peak of indexing): the bytes held are
//! counted by this test binary's own allocator (`alloc_count`).

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use analyzer::index::{Index, Launch, TensorInfo};

/// Per thread: ordering runs on the test's own thread.
#[global_allocator]
static ALLOCATOR: alloc_count::PerThread = alloc_count::PerThread;

#[test]
fn ordering_holds_no_list_per_op() {
    const OPS: u64 = 20_000;
    let mut index = Index::default();
    // Added latest first, so that ordering moves every op and tensor.
    for k in (0..OPS).rev() {
        let launch = Launch { timestamp_us: k, ..Launch::default() };
        let op = index.push_op_at(format!("model/op{k}"), "Add".into(), 0, 0, Some(launch));
        for (io, i) in [(Io::Input, 0), (Io::Input, 1), (Io::Output, 0)] {
            index.push_tensor(TensorInfo::new(op, io, i, DType::FLOAT, vec![4]));
        }
    }
    let (reorder, peak) = alloc_count::PerThread::peak_while(|| index.order_by_execution());
    let tensors = index.tensors.len();
    assert_eq!(reorder.tensors[..3], [tensors - 3, tensors - 2, tensors - 1]);
    assert_eq!(index.ops[0].name, "model/op0");
    // The permutations of ops and tensors (returned), their inverses and a slot per op: 24 bytes a tensor
    // at three tensors an op. With a list of tensors per op (24 bytes and a heap block each), 41.
    assert!(peak / tensors <= 32, "{peak} bytes held to order {tensors} tensors");
}
