//! `sim-train`'s pieces: driving the (simulated) ACL runtime like a framework, and the fp32 benchmark dump.

pub mod acl;
pub mod bench;
