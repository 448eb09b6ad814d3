//! The HCCL half: a shim `libhccl.so` whose entry points forward through the global scope, as one calling
//! the library that implements HCCL (CANN splits it, hccl and hcomm) through its PLT would. A job opens
//! this library as its libhccl.so (`sim-train --hccl-lib`) and resolves every entry point it uses through
//! its handle, so each is defined here; the implementation (tests/sim-hccl) is loaded after it, e.g.
//! `LD_PRELOAD=libcollector.so:libacl_compat.so:libhccl.so`. The collector's exports come first in the
//! global scope: a call the collector forwarded here comes back to it.

use crate::{target, trace};
use ascend_sys::aclrtStream;
use ascend_sys::hccl::{
    HcclAllGatherFn, HcclAllReduceFn, HcclBarrierFn, HcclBroadcastFn, HcclComm, HcclCommConfig,
    HcclCommDestroyFn, HcclCommInitRootInfoConfigFn, HcclCommInitRootInfoFn, HcclDataType, HcclGetRootInfoFn,
    HcclRecvFn, HcclReduceOp, HcclReduceScatterFn, HcclResult, HcclRootInfo, HcclSendFn, HCCL_E_NOT_FOUND,
};
use std::ffi::c_void;

/// Forwards to the global scope's `HcclGetRootInfo` (which the collector does not watch).
///
/// # Safety
/// HCCL's contract for HcclGetRootInfo.
#[no_mangle]
pub unsafe extern "C" fn HcclGetRootInfo(root_info: *mut HcclRootInfo) -> HcclResult {
    let f = target(c"HcclGetRootInfo");
    if f.is_null() {
        return HCCL_E_NOT_FOUND;
    }
    trace("HcclGetRootInfo");
    // SAFETY: a definition of HcclGetRootInfo, of its C signature; the argument is our caller's.
    unsafe { std::mem::transmute::<*mut c_void, HcclGetRootInfoFn>(f)(root_info) }
}

/// Forwards to the global scope's `HcclCommInitRootInfo`.
///
/// # Safety
/// HCCL's contract for HcclCommInitRootInfo.
#[no_mangle]
pub unsafe extern "C" fn HcclCommInitRootInfo(
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    comm: *mut HcclComm,
) -> HcclResult {
    let f = target(c"HcclCommInitRootInfo");
    if f.is_null() {
        return HCCL_E_NOT_FOUND;
    }
    trace("HcclCommInitRootInfo");
    // SAFETY: a definition of HcclCommInitRootInfo, of its C signature; the arguments are our caller's.
    unsafe { std::mem::transmute::<*mut c_void, HcclCommInitRootInfoFn>(f)(n_ranks, root_info, rank, comm) }
}

/// Forwards to the global scope's `HcclCommInitRootInfoConfig`.
///
/// # Safety
/// HCCL's contract for HcclCommInitRootInfoConfig.
#[no_mangle]
pub unsafe extern "C" fn HcclCommInitRootInfoConfig(
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    config: *const HcclCommConfig,
    comm: *mut HcclComm,
) -> HcclResult {
    let f = target(c"HcclCommInitRootInfoConfig");
    if f.is_null() {
        return HCCL_E_NOT_FOUND;
    }
    trace("HcclCommInitRootInfoConfig");
    // SAFETY: a definition of HcclCommInitRootInfoConfig, of its C signature; the arguments are our caller's.
    unsafe {
        std::mem::transmute::<*mut c_void, HcclCommInitRootInfoConfigFn>(f)(
            n_ranks, root_info, rank, config, comm,
        )
    }
}

/// Forwards to the global scope's `HcclCommDestroy`.
///
/// # Safety
/// HCCL's contract for HcclCommDestroy.
#[no_mangle]
pub unsafe extern "C" fn HcclCommDestroy(comm: HcclComm) -> HcclResult {
    let f = target(c"HcclCommDestroy");
    if f.is_null() {
        return HCCL_E_NOT_FOUND;
    }
    trace("HcclCommDestroy");
    // SAFETY: a definition of HcclCommDestroy, of its C signature; the argument is our caller's.
    unsafe { std::mem::transmute::<*mut c_void, HcclCommDestroyFn>(f)(comm) }
}

/// Forwards to the global scope's `HcclAllReduce`.
///
/// # Safety
/// HCCL's contract for HcclAllReduce.
#[no_mangle]
pub unsafe extern "C" fn HcclAllReduce(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    op: HcclReduceOp,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    let f = target(c"HcclAllReduce");
    if f.is_null() {
        return HCCL_E_NOT_FOUND;
    }
    trace("HcclAllReduce");
    // SAFETY: a definition of HcclAllReduce, of its C signature; the arguments are our caller's.
    unsafe {
        std::mem::transmute::<*mut c_void, HcclAllReduceFn>(f)(
            send_buf, recv_buf, count, data_type, op, comm, stream,
        )
    }
}

/// Forwards to the global scope's `HcclBroadcast`.
///
/// # Safety
/// HCCL's contract for HcclBroadcast.
#[no_mangle]
pub unsafe extern "C" fn HcclBroadcast(
    buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    root: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    let f = target(c"HcclBroadcast");
    if f.is_null() {
        return HCCL_E_NOT_FOUND;
    }
    trace("HcclBroadcast");
    // SAFETY: a definition of HcclBroadcast, of its C signature; the arguments are our caller's.
    unsafe {
        std::mem::transmute::<*mut c_void, HcclBroadcastFn>(f)(buf, count, data_type, root, comm, stream)
    }
}

/// Forwards to the global scope's `HcclAllGather`.
///
/// # Safety
/// HCCL's contract for HcclAllGather.
#[no_mangle]
pub unsafe extern "C" fn HcclAllGather(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    send_count: u64,
    data_type: HcclDataType,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    let f = target(c"HcclAllGather");
    if f.is_null() {
        return HCCL_E_NOT_FOUND;
    }
    trace("HcclAllGather");
    // SAFETY: a definition of HcclAllGather, of its C signature; the arguments are our caller's.
    unsafe {
        std::mem::transmute::<*mut c_void, HcclAllGatherFn>(f)(
            send_buf, recv_buf, send_count, data_type, comm, stream,
        )
    }
}

/// Forwards to the global scope's `HcclReduceScatter`.
///
/// # Safety
/// HCCL's contract for HcclReduceScatter.
#[no_mangle]
pub unsafe extern "C" fn HcclReduceScatter(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    recv_count: u64,
    data_type: HcclDataType,
    op: HcclReduceOp,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    let f = target(c"HcclReduceScatter");
    if f.is_null() {
        return HCCL_E_NOT_FOUND;
    }
    trace("HcclReduceScatter");
    // SAFETY: a definition of HcclReduceScatter, of its C signature; the arguments are our caller's.
    unsafe {
        std::mem::transmute::<*mut c_void, HcclReduceScatterFn>(f)(
            send_buf, recv_buf, recv_count, data_type, op, comm, stream,
        )
    }
}

/// Forwards to the global scope's `HcclBarrier`.
///
/// # Safety
/// HCCL's contract for HcclBarrier.
#[no_mangle]
pub unsafe extern "C" fn HcclBarrier(comm: HcclComm, stream: aclrtStream) -> HcclResult {
    let f = target(c"HcclBarrier");
    if f.is_null() {
        return HCCL_E_NOT_FOUND;
    }
    trace("HcclBarrier");
    // SAFETY: a definition of HcclBarrier, of its C signature; the arguments are our caller's.
    unsafe { std::mem::transmute::<*mut c_void, HcclBarrierFn>(f)(comm, stream) }
}

/// Forwards to the global scope's `HcclSend`.
///
/// # Safety
/// HCCL's contract for HcclSend.
#[no_mangle]
pub unsafe extern "C" fn HcclSend(
    send_buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    dest_rank: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    let f = target(c"HcclSend");
    if f.is_null() {
        return HCCL_E_NOT_FOUND;
    }
    trace("HcclSend");
    // SAFETY: a definition of HcclSend, of its C signature; the arguments are our caller's.
    unsafe {
        std::mem::transmute::<*mut c_void, HcclSendFn>(f)(send_buf, count, data_type, dest_rank, comm, stream)
    }
}

/// Forwards to the global scope's `HcclRecv`.
///
/// # Safety
/// HCCL's contract for HcclRecv.
#[no_mangle]
pub unsafe extern "C" fn HcclRecv(
    recv_buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    src_rank: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    let f = target(c"HcclRecv");
    if f.is_null() {
        return HCCL_E_NOT_FOUND;
    }
    trace("HcclRecv");
    // SAFETY: a definition of HcclRecv, of its C signature; the arguments are our caller's.
    unsafe {
        std::mem::transmute::<*mut c_void, HcclRecvFn>(f)(recv_buf, count, data_type, src_rank, comm, stream)
    }
}
