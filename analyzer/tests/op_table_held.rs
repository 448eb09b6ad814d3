//! An op holds its tensors as bounds of the index's tensor table, not a list of ids each (#18: memory must
//! not grow by two heap blocks an op): the bytes held while ops and tensors are added are counted by this
//! test binary's own allocator (`alloc_count`).

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use analyzer::index::{Index, IndexedOp, TensorInfo};

/// Per thread: the index is built on the test's own thread.
#[global_allocator]
static ALLOCATOR: alloc_count::PerThread = alloc_count::PerThread;

#[test]
fn an_op_holds_no_list_of_its_tensors() {
    const OPS: usize = 20_000;
    let mut index = Index::default();
    // The tables themselves are reserved, so that what is counted is what each op holds beside its slot.
    index.ops.reserve_exact(OPS);
    index.tensors.reserve_exact(3 * OPS);
    let ((), held) = alloc_count::PerThread::peak_while(|| {
        for _ in 0..OPS {
            let op = index.push_op("model/MatMul".into(), "MatMul".into(), 0, 0);
            for (io, i) in [(Io::Input, 0), (Io::Input, 1), (Io::Output, 0)] {
                index.push_tensor(TensorInfo::new(op, io, i, DType::FLOAT, vec![4]));
            }
        }
    });
    let last = &index.ops[OPS - 1];
    let t = 3 * (OPS - 1);
    assert_eq!((last.inputs(), last.outputs()), (t..t + 2, t + 2..t + 3));
    // A slot of the op table (80 bytes; 104 with the launch an `Option<Launch>`) and what the op holds
    // beside it: none. With a list of inputs and one of outputs, 160 and 64 (a heap block of four ids
    // each); 120 with the names fat pointers (`Arc<str>`).
    let per_op = std::mem::size_of::<IndexedOp>() + held / OPS;
    assert!(per_op <= 88, "{per_op} bytes an op ({held} bytes held beside the tables for {OPS} ops)");
}
