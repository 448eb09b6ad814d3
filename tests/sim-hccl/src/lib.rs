//! A stand-in for HCCL's `libhccl.so`: the real C signatures (`ascend-sys`'s `accutrace_hccl.h`) for
//! communicator set-up from a root info, AllReduce, Broadcast, AllGather, ReduceScatter, Barrier and
//! Send/Recv, between processes on one machine (or machines sharing a file system).
//!
//! - [`abi`]: the exported entry points.
//! - [`comm`]: root info, communicators and the collectives over byte buffers.
//! - [`transport`]: how buffers move (files in a directory the members share; see its docs).
//! - [`reduce`]: element-wise reductions in the element type.
//!
//! Buffers are "device memory" that the simulator keeps in host memory (the simulated runtime's
//! `aclrtMalloc`). Calls complete before they return; `stream` is accepted and not used. Reductions fold
//! members' buffers in rank order, so every member gets the same bits and runs repeat exactly; the
//! simulator-only export `simHcclInjectFault` makes one member's next reduction fold in another order, or
//! damages its next message in transit.
//!
//! Environment: `SIM_HCCL_DIR` (where `HcclGetRootInfo` makes meeting directories; default the system
//! temporary directory; must be shared by all members), `HCCL_EXEC_TIMEOUT` (seconds a member waits for
//! the others, default 300; the real library's variable).

pub mod abi;
pub mod comm;
pub mod reduce;
pub mod transport;
