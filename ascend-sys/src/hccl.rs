//! The part of HCCL's C ABI (`libhccl.so`) that accutrace touches: types and constants from
//! `include/accutrace_hccl.h` (committed bindgen output in `src/hccl_bindings.rs`), one function-pointer
//! alias per entry point (for `dlsym` results and for implementations to check their signatures against),
//! and readable names for the enum codes. The `extern "C"` declarations stay in [`bindings`]: callers
//! resolve the functions at run time.
//!
//! The codes are C enums received across the ABI: they are plain integers here, never Rust enums, because
//! a caller may pass a value outside the listed ones.

/// bindgen output for `include/accutrace_hccl.h`; its `extern "C"` declarations are never linked.
#[allow(non_camel_case_types, non_snake_case, non_upper_case_globals, dead_code, clippy::all)]
pub mod bindings {
    include!("hccl_bindings.rs");
}

pub use bindings::{
    HcclComm, HcclCommConfig, HcclDataType, HcclReduceOp, HcclResult, HcclRootInfo, COMM_NAME_MAX_LENGTH,
    HCCL_DATA_TYPE_BFP16, HCCL_DATA_TYPE_FP16, HCCL_DATA_TYPE_FP32, HCCL_DATA_TYPE_FP64,
    HCCL_DATA_TYPE_FP8E4M3, HCCL_DATA_TYPE_FP8E5M2, HCCL_DATA_TYPE_FP8E8M0, HCCL_DATA_TYPE_HIF8,
    HCCL_DATA_TYPE_INT128, HCCL_DATA_TYPE_INT16, HCCL_DATA_TYPE_INT32, HCCL_DATA_TYPE_INT64,
    HCCL_DATA_TYPE_INT8, HCCL_DATA_TYPE_UINT16, HCCL_DATA_TYPE_UINT32, HCCL_DATA_TYPE_UINT64,
    HCCL_DATA_TYPE_UINT8, HCCL_E_AGAIN, HCCL_E_CCE, HCCL_E_DRV, HCCL_E_INTERNAL, HCCL_E_MEMORY,
    HCCL_E_NETWORK, HCCL_E_NOT_FOUND, HCCL_E_NOT_SUPPORT, HCCL_E_OPEN_FILE_FAILURE, HCCL_E_PARA,
    HCCL_E_PROFILING, HCCL_E_PTR, HCCL_E_REMOTE, HCCL_E_ROCE_CONNECT, HCCL_E_ROCE_TRANSFER, HCCL_E_RUNTIME,
    HCCL_E_SYSCALL, HCCL_E_TCP_CONNECT, HCCL_E_TCP_TRANSFER, HCCL_E_TIMEOUT, HCCL_E_UNAVAIL, HCCL_REDUCE_MAX,
    HCCL_REDUCE_MIN, HCCL_REDUCE_PROD, HCCL_REDUCE_SUM, HCCL_ROOT_INFO_BYTES, HCCL_SUCCESS,
};

use crate::bindings::aclrtStream;
use core::ffi::{c_char, c_void};

pub type HcclGetRootInfoFn = unsafe extern "C" fn(root_info: *mut HcclRootInfo) -> HcclResult;
pub type HcclCommInitRootInfoFn = unsafe extern "C" fn(
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    comm: *mut HcclComm,
) -> HcclResult;
/// `HcclCommInitRootInfoConfig` (hccl.h): `HcclCommInitRootInfo` with a `const HcclCommConfig *` (buffer
/// size, determinism, name, ...) before `comm`. torch_npu resolves it with `dlsym` and prefers it. The
/// config is opaque here (an incomplete type in the header): nothing of ours reads its layout, it is only
/// passed on.
pub type HcclCommInitRootInfoConfigFn = unsafe extern "C" fn(
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    config: *const HcclCommConfig,
    comm: *mut HcclComm,
) -> HcclResult;
pub type HcclCommDestroyFn = unsafe extern "C" fn(comm: HcclComm) -> HcclResult;
pub type HcclGetRankSizeFn = unsafe extern "C" fn(comm: HcclComm, rank_size: *mut u32) -> HcclResult;
pub type HcclGetRankIdFn = unsafe extern "C" fn(comm: HcclComm, rank: *mut u32) -> HcclResult;
pub type HcclGetCommNameFn = unsafe extern "C" fn(comm: HcclComm, comm_name: *mut c_char) -> HcclResult;
pub type HcclAllReduceFn = unsafe extern "C" fn(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    op: HcclReduceOp,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult;
pub type HcclBroadcastFn = unsafe extern "C" fn(
    buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    root: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult;
pub type HcclAllGatherFn = unsafe extern "C" fn(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    send_count: u64,
    data_type: HcclDataType,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult;
pub type HcclReduceScatterFn = unsafe extern "C" fn(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    recv_count: u64,
    data_type: HcclDataType,
    op: HcclReduceOp,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult;
pub type HcclBarrierFn = unsafe extern "C" fn(comm: HcclComm, stream: aclrtStream) -> HcclResult;
pub type HcclSendFn = unsafe extern "C" fn(
    send_buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    dest_rank: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult;
pub type HcclRecvFn = unsafe extern "C" fn(
    recv_buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    src_rank: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult;

// Each alias is the header's declaration (one source: the bindings generated from it). Checked while
// compiling, in a constant whose value holds no function, so nothing links against the declarations.
const _: () = {
    use bindings::*;
    let _: HcclGetRootInfoFn = HcclGetRootInfo;
    let _: HcclCommInitRootInfoFn = HcclCommInitRootInfo;
    let _: HcclCommInitRootInfoConfigFn = HcclCommInitRootInfoConfig;
    let _: HcclCommDestroyFn = HcclCommDestroy;
    let _: HcclGetRankSizeFn = HcclGetRankSize;
    let _: HcclGetRankIdFn = HcclGetRankId;
    let _: HcclGetCommNameFn = HcclGetCommName;
    let _: HcclAllReduceFn = HcclAllReduce;
    let _: HcclBroadcastFn = HcclBroadcast;
    let _: HcclAllGatherFn = HcclAllGather;
    let _: HcclReduceScatterFn = HcclReduceScatter;
    let _: HcclBarrierFn = HcclBarrier;
    let _: HcclSendFn = HcclSend;
    let _: HcclRecvFn = HcclRecv;
};

/// `sizeof(HcclRootInfo)`: the opaque blob every member of a communicator receives.
pub const ROOT_INFO_LEN: usize = HCCL_ROOT_INFO_BYTES as usize;

/// A readable name for an HCCL result code, for log lines (`HCCL_E_TIMEOUT(9)` reads `HCCL_E_TIMEOUT`).
pub fn result_name(code: HcclResult) -> &'static str {
    match code {
        HCCL_SUCCESS => "HCCL_SUCCESS",
        HCCL_E_PARA => "HCCL_E_PARA",
        HCCL_E_PTR => "HCCL_E_PTR",
        HCCL_E_MEMORY => "HCCL_E_MEMORY",
        HCCL_E_INTERNAL => "HCCL_E_INTERNAL",
        HCCL_E_NOT_SUPPORT => "HCCL_E_NOT_SUPPORT",
        HCCL_E_NOT_FOUND => "HCCL_E_NOT_FOUND",
        HCCL_E_UNAVAIL => "HCCL_E_UNAVAIL",
        HCCL_E_SYSCALL => "HCCL_E_SYSCALL",
        HCCL_E_TIMEOUT => "HCCL_E_TIMEOUT",
        HCCL_E_OPEN_FILE_FAILURE => "HCCL_E_OPEN_FILE_FAILURE",
        HCCL_E_TCP_CONNECT => "HCCL_E_TCP_CONNECT",
        HCCL_E_ROCE_CONNECT => "HCCL_E_ROCE_CONNECT",
        HCCL_E_TCP_TRANSFER => "HCCL_E_TCP_TRANSFER",
        HCCL_E_ROCE_TRANSFER => "HCCL_E_ROCE_TRANSFER",
        HCCL_E_RUNTIME => "HCCL_E_RUNTIME",
        HCCL_E_DRV => "HCCL_E_DRV",
        HCCL_E_PROFILING => "HCCL_E_PROFILING",
        HCCL_E_CCE => "HCCL_E_CCE",
        HCCL_E_NETWORK => "HCCL_E_NETWORK",
        HCCL_E_AGAIN => "HCCL_E_AGAIN",
        HCCL_E_REMOTE => "HCCL_E_REMOTE",
        _ => "HCCL_E_(unknown)",
    }
}

/// The name of a reduce op code (`sum`, `prod`, `max`, `min`), `None` for a code HCCL does not define.
pub fn reduce_op_name(op: HcclReduceOp) -> Option<&'static str> {
    match op {
        HCCL_REDUCE_SUM => Some("sum"),
        HCCL_REDUCE_PROD => Some("prod"),
        HCCL_REDUCE_MAX => Some("max"),
        HCCL_REDUCE_MIN => Some("min"),
        _ => None,
    }
}
