//! `sim-train`'s pieces: driving the (simulated) ACL runtime like a framework (graph mode, or op by op in
//! eager mode), data parallel over HCCL (`--ranks`, with its launcher), pipeline parallel (`--pipeline`), tensor x data parallel (`--tensor-parallel`), and the fp32 benchmark dump.

pub mod acl;
pub mod bench;
pub mod bench_msprobe;
pub mod data_parallel;
pub mod eager;
pub mod hccl;
pub mod launch;
pub mod pipeline;
pub mod tensor_parallel;
