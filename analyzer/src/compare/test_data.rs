//! The compare tests' shared data: a step of ops from their tensors' hashes.

use crate::index::{Index, Io, TensorInfo};
use accutrace_formats::DType;

/// A step of ops given as (name, input hashes, output hash); returns the index and the hash of each
/// tensor (inputs, then the output, per op).
pub(super) fn step(ops: &[(&str, &[u64], u64)]) -> (Index, Vec<Option<u64>>) {
    let mut index = Index::default();
    let mut hashes = Vec::new();
    for &(name, inputs, output) in ops {
        let op = index.push_op(name.into(), "T".into(), 0, 0);
        let tensor = |io, i| TensorInfo::for_test(op, io, i, DType::FLOAT, vec![4]);
        for (i, &h) in inputs.iter().enumerate() {
            index.push_tensor(tensor(Io::Input, i as u32));
            hashes.push(Some(h));
        }
        index.push_tensor(tensor(Io::Output, 0));
        hashes.push(Some(output));
    }
    (index, hashes)
}
