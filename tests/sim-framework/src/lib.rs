//! `sim-train`'s pieces: driving the (simulated) ACL runtime like a framework, data parallel over HCCL
//! (`--ranks`, with its launcher), and the fp32 benchmark dump.

pub mod acl;
pub mod bench;
pub mod data_parallel;
pub mod hccl;
pub mod launch;
