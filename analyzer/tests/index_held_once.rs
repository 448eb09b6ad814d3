//! An index holds each distinct op name, op type and tensor shape once, shared by every op and tensor that
//! carries it (an output's `original_op` too), not a copy per op and per tensor (#18: memory must not grow
//! by copies per tensor; every step and every rank repeats the same names and shapes): the bytes held while
//! a capture is opened and indexed are counted by this test binary's own allocator (`alloc_count`).

mod support;

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use support::RunWriter;

/// Process-wide: this binary has one test, and opening may read on other threads.
#[global_allocator]
static ALLOCATOR: alloc_count::Process = alloc_count::Process;

#[test]
fn names_and_shapes_are_held_once_per_index() {
    const STEPS: u64 = 4;
    const OPS_A_STEP: u64 = 1_500;
    let dir = tempfile::tempdir().unwrap();
    let mut run = RunWriter::create(&dir.path().join("run"), 1 << 24);
    for step in 0..STEPS {
        for k in 0..OPS_A_STEP {
            // Named as a model's are (about 60 characters), the same names every step.
            let name = format!("model/decoder/layers.{k}/self_attention/query_key_value/MatMul");
            run.op_named(step, step * OPS_A_STEP + k, &name, "MatMulV2");
            let value = (k as f32).to_le_bytes();
            run.tensor(Io::Input, 0, DType::FLOAT, &value);
            run.tensor(Io::Input, 1, DType::FLOAT, &value);
            run.tensor_standing_for(Io::Output, 0, DType::FLOAT, &value, Some(&name));
        }
    }
    let path = run.finish();
    let (source, peak) = alloc_count::Process::peak_while(|| analyzer::sources::open(&path).unwrap());
    let index = source.index();
    let tensors = index.tensors.len();
    assert_eq!(tensors, (3 * STEPS * OPS_A_STEP) as usize);
    let output = &index.tensors[index.ops[0].outputs().next().unwrap()];
    assert_eq!(output.original_op().map(|(name, i)| (&name[..], i)), Some((&index.ops[0].name[..], 0)));
    // The index's tables (grown by doubling), the capture source's and the reader's: 258 bytes a tensor;
    // 624 with every tensor's statistics held (64 bytes) and `TensorInfo` of 136 bytes. With a copy of the
    // op's name and type per op and of the name per output (`original_op`), 704; with those shared but a
    // shape per tensor, 647.
    assert!(peak / tensors <= 270, "{peak} bytes held at the peak of opening {tensors} tensors");
}
