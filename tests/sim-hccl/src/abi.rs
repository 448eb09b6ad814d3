//! The exported HCCL entry points (signatures checked against `ascend_sys::hccl` below).
//!
//! Every export runs under `catch_unwind` (a panic becomes `HCCL_E_INTERNAL`) and logs a failure on stderr
//! in one line naming the call and the rank, as the real library logs to its plog. Communicator handles
//! are small integers in pointer clothing: a handle this library did not hand out, or one already
//! destroyed, is refused with `HCCL_E_PARA` instead of being dereferenced.

use crate::comm::{dtype_bytes, new_root_info, root_info_dir, CommError, Communicator};
use crate::transport::TransportError;
use ascend_sys::aclrtStream;
use ascend_sys::hccl::*;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

type Shared = Arc<Mutex<Communicator>>;

static COMMS: Mutex<BTreeMap<usize, Shared>> = Mutex::new(BTreeMap::new());
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn lookup(comm: HcclComm) -> Option<Shared> {
    lock(&COMMS).get(&comm.addr()).cloned()
}

fn guard(name: &str, body: impl FnOnce() -> HcclResult) -> HcclResult {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| {
        eprintln!("sim-hccl: {name} panicked; returning HCCL_E_INTERNAL");
        HCCL_E_INTERNAL
    })
}

/// Logs a failed call and maps the error onto its result code.
fn failed(call: &str, rank: Option<u32>, e: &CommError) -> HcclResult {
    let who = rank.map(|r| format!(" (rank {r})")).unwrap_or_default();
    eprintln!("sim-hccl: {call}{who}: {e}");
    match e {
        CommError::Param(_) => HCCL_E_PARA,
        CommError::Unsupported(_) => HCCL_E_NOT_SUPPORT,
        CommError::Transport(TransportError::Timeout { .. }) => HCCL_E_TIMEOUT,
        CommError::Transport(TransportError::Io { .. }) => HCCL_E_SYSCALL,
        CommError::Transport(TransportError::Corrupt { .. }) => HCCL_E_INTERNAL,
        CommError::Transport(TransportError::Mismatch { .. } | TransportError::SizeMismatch { .. }) => {
            HCCL_E_PARA
        }
    }
}

/// Runs `f` on the communicator behind `comm`, turning its error into a logged result code.
fn with_comm(
    call: &str,
    comm: HcclComm,
    f: impl FnOnce(&mut Communicator) -> Result<(), CommError>,
) -> HcclResult {
    let Some(shared) = lookup(comm) else {
        eprintln!("sim-hccl: {call}: {comm:?} is not a live communicator of this process");
        return HCCL_E_PARA;
    };
    let mut c = lock(&shared);
    match f(&mut c) {
        Ok(()) => HCCL_SUCCESS,
        Err(e) => failed(call, Some(c.rank()), &e),
    }
}

/// Copies `len` bytes from a caller's buffer (a device buffer: the simulator keeps them in host memory).
///
/// # Safety
/// When `len > 0` and `ptr` is non-null, `ptr` is readable for `len` bytes (the HCCL contract for buffers).
unsafe fn read_buffer(ptr: *const c_void, len: usize) -> Result<Vec<u8>, CommError> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if ptr.is_null() {
        return Err(CommError::Param("null buffer".into()));
    }
    // SAFETY: non-null and readable for `len` bytes per this function's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }.to_vec())
}

/// Copies `data` into a caller's buffer.
///
/// # Safety
/// When `data` is non-empty and `ptr` is non-null, `ptr` is writable for `data.len()` bytes. `data` is our
/// own allocation, so the two cannot overlap.
unsafe fn write_buffer(ptr: *mut c_void, data: &[u8]) -> Result<(), CommError> {
    if data.is_empty() {
        return Ok(());
    }
    if ptr.is_null() {
        return Err(CommError::Param("null buffer".into()));
    }
    // SAFETY: per this function's contract.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.cast::<u8>(), data.len()) };
    Ok(())
}

fn scaled(bytes: usize, by: u32) -> Result<usize, CommError> {
    bytes.checked_mul(by as usize).ok_or_else(|| CommError::Param("buffer size overflows".into()))
}

/// # Safety
/// `root_info` is NULL or points at a writable `HcclRootInfo`.
#[no_mangle]
pub unsafe extern "C" fn HcclGetRootInfo(root_info: *mut HcclRootInfo) -> HcclResult {
    guard("HcclGetRootInfo", || {
        if root_info.is_null() {
            return HCCL_E_PTR;
        }
        match new_root_info() {
            // SAFETY: non-null and writable per the contract; `HcclRootInfo` is 4108 bytes of char.
            Ok(info) => unsafe {
                std::ptr::copy_nonoverlapping(info.as_ptr(), root_info.cast::<u8>(), info.len())
            },
            Err(e) => {
                eprintln!("sim-hccl: HcclGetRootInfo: cannot create the meeting directory: {e}");
                return HCCL_E_SYSCALL;
            }
        }
        HCCL_SUCCESS
    })
}

/// # Safety
/// `root_info` is NULL or points at a readable `HcclRootInfo`; `comm` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn HcclCommInitRootInfo(
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    comm: *mut HcclComm,
) -> HcclResult {
    // SAFETY: the caller's contract is init_root_info's.
    unsafe { init_root_info("HcclCommInitRootInfo", n_ranks, root_info, rank, comm) }
}

/// `HcclCommInitRootInfo` with a communicator config (hccl.h), which torch_npu prefers when the library
/// has it. The simulator has nothing to configure (buffer size, determinism, name): the config is not read.
/// Like the real library, it does not go through the exported `HcclCommInitRootInfo` (an interposer of
/// that name must not see this call).
///
/// # Safety
/// As [`HcclCommInitRootInfo`]; `config` may be anything.
#[no_mangle]
pub unsafe extern "C" fn HcclCommInitRootInfoConfig(
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    _config: *const HcclCommConfig,
    comm: *mut HcclComm,
) -> HcclResult {
    // SAFETY: the caller's contract is init_root_info's.
    unsafe { init_root_info("HcclCommInitRootInfoConfig", n_ranks, root_info, rank, comm) }
}

/// Joins the communicator of `root_info` as `rank` of `n_ranks`; `api` names the entry point in errors.
///
/// # Safety
/// `root_info` is NULL or points at a readable `HcclRootInfo`; `comm` is NULL or writable.
unsafe fn init_root_info(
    api: &str,
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    comm: *mut HcclComm,
) -> HcclResult {
    guard(api, || {
        if root_info.is_null() || comm.is_null() {
            return HCCL_E_PTR;
        }
        // SAFETY: non-null and readable per the contract; 4108 bytes of char.
        let info = unsafe { &*root_info.cast::<[u8; ROOT_INFO_LEN]>() };
        let joined = root_info_dir(info).and_then(|dir| Communicator::join(&dir, n_ranks, rank));
        match joined {
            Ok(c) => {
                let id = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
                lock(&COMMS).insert(id, Arc::new(Mutex::new(c)));
                // SAFETY: non-null and writable per the contract.
                unsafe { comm.write(std::ptr::without_provenance_mut(id)) };
                HCCL_SUCCESS
            }
            Err(e) => failed(api, Some(rank), &e),
        }
    })
}

#[no_mangle]
pub extern "C" fn HcclCommDestroy(comm: HcclComm) -> HcclResult {
    guard("HcclCommDestroy", || {
        let Some(shared) = lock(&COMMS).remove(&comm.addr()) else { return HCCL_E_PARA };
        // Another thread inside a call on it keeps its own reference and finishes; then the directory is
        // left for the other members' departure to remove.
        if let Ok(m) = Arc::try_unwrap(shared) {
            m.into_inner().unwrap_or_else(|e| e.into_inner()).leave();
        }
        HCCL_SUCCESS
    })
}

/// # Safety
/// `rank_size` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn HcclGetRankSize(comm: HcclComm, rank_size: *mut u32) -> HcclResult {
    guard("HcclGetRankSize", || {
        if rank_size.is_null() {
            return HCCL_E_PTR;
        }
        with_comm("HcclGetRankSize", comm, |c| {
            // SAFETY: non-null and writable per the contract.
            unsafe { rank_size.write_unaligned(c.ranks()) };
            Ok(())
        })
    })
}

/// # Safety
/// `rank` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn HcclGetRankId(comm: HcclComm, rank: *mut u32) -> HcclResult {
    guard("HcclGetRankId", || {
        if rank.is_null() {
            return HCCL_E_PTR;
        }
        with_comm("HcclGetRankId", comm, |c| {
            // SAFETY: non-null and writable per the contract.
            unsafe { rank.write_unaligned(c.rank()) };
            Ok(())
        })
    })
}

/// # Safety
/// `comm_name` is NULL or writable for `COMM_NAME_MAX_LENGTH` bytes.
#[no_mangle]
pub unsafe extern "C" fn HcclGetCommName(comm: HcclComm, comm_name: *mut c_char) -> HcclResult {
    guard("HcclGetCommName", || {
        if comm_name.is_null() {
            return HCCL_E_PTR;
        }
        with_comm("HcclGetCommName", comm, |c| {
            let max = COMM_NAME_MAX_LENGTH as usize - 1;
            let mut bytes = c.name.as_bytes()[..c.name.len().min(max)].to_vec();
            bytes.push(0);
            // SAFETY: writable for COMM_NAME_MAX_LENGTH bytes per the contract; we write at most that many.
            unsafe { write_buffer(comm_name.cast(), &bytes) }
        })
    })
}

/// # Safety
/// `send_buf` is readable and `recv_buf` writable for `count` elements of `data_type` (they may be the
/// same buffer).
#[no_mangle]
pub unsafe extern "C" fn HcclAllReduce(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    op: HcclReduceOp,
    comm: HcclComm,
    _stream: aclrtStream,
) -> HcclResult {
    guard("HcclAllReduce", || {
        with_comm("HcclAllReduce", comm, |c| {
            let len = dtype_bytes(data_type, count)?;
            // SAFETY: readable for `len` bytes per the contract.
            let send = unsafe { read_buffer(send_buf, len) }?;
            let out = c.all_reduce(&send, count, data_type, op)?;
            // SAFETY: writable for `len` bytes per the contract; `out` has `len` bytes.
            unsafe { write_buffer(recv_buf, &out) }
        })
    })
}

/// # Safety
/// `buf` is readable (on the root) and writable (elsewhere) for `count` elements of `data_type`.
#[no_mangle]
pub unsafe extern "C" fn HcclBroadcast(
    buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    root: u32,
    comm: HcclComm,
    _stream: aclrtStream,
) -> HcclResult {
    guard("HcclBroadcast", || {
        with_comm("HcclBroadcast", comm, |c| {
            let len = dtype_bytes(data_type, count)?;
            // Only the root's contents matter; the others' are overwritten.
            let mine = if c.rank() == root {
                // SAFETY: readable for `len` bytes per the contract.
                unsafe { read_buffer(buf, len) }?
            } else {
                vec![0; len]
            };
            let out = c.broadcast(&mine, count, data_type, root)?;
            // SAFETY: writable for `len` bytes per the contract.
            unsafe { write_buffer(buf, &out) }
        })
    })
}

/// # Safety
/// `send_buf` is readable for `send_count` elements, `recv_buf` writable for ranks x `send_count`.
#[no_mangle]
pub unsafe extern "C" fn HcclAllGather(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    send_count: u64,
    data_type: HcclDataType,
    comm: HcclComm,
    _stream: aclrtStream,
) -> HcclResult {
    guard("HcclAllGather", || {
        with_comm("HcclAllGather", comm, |c| {
            let len = dtype_bytes(data_type, send_count)?;
            scaled(len, c.ranks())?;
            // SAFETY: readable for `len` bytes per the contract.
            let send = unsafe { read_buffer(send_buf, len) }?;
            let out = c.all_gather(&send, send_count, data_type)?;
            // SAFETY: writable for ranks x `len` bytes per the contract; `out` has that many.
            unsafe { write_buffer(recv_buf, &out) }
        })
    })
}

/// # Safety
/// `send_buf` is readable for ranks x `recv_count` elements, `recv_buf` writable for `recv_count`.
#[no_mangle]
pub unsafe extern "C" fn HcclReduceScatter(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    recv_count: u64,
    data_type: HcclDataType,
    op: HcclReduceOp,
    comm: HcclComm,
    _stream: aclrtStream,
) -> HcclResult {
    guard("HcclReduceScatter", || {
        with_comm("HcclReduceScatter", comm, |c| {
            let len = scaled(dtype_bytes(data_type, recv_count)?, c.ranks())?;
            // SAFETY: readable for ranks x recv_count elements per the contract.
            let send = unsafe { read_buffer(send_buf, len) }?;
            let out = c.reduce_scatter(&send, recv_count, data_type, op)?;
            // SAFETY: writable for `recv_count` elements per the contract; `out` has that many.
            unsafe { write_buffer(recv_buf, &out) }
        })
    })
}

#[no_mangle]
pub extern "C" fn HcclBarrier(comm: HcclComm, _stream: aclrtStream) -> HcclResult {
    guard("HcclBarrier", || with_comm("HcclBarrier", comm, |c| c.barrier()))
}

/// # Safety
/// `send_buf` is readable for `count` elements of `data_type`.
#[no_mangle]
pub unsafe extern "C" fn HcclSend(
    send_buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    dest_rank: u32,
    comm: HcclComm,
    _stream: aclrtStream,
) -> HcclResult {
    guard("HcclSend", || {
        with_comm("HcclSend", comm, |c| {
            let len = dtype_bytes(data_type, count)?;
            // SAFETY: readable for `len` bytes per the contract.
            let send = unsafe { read_buffer(send_buf, len) }?;
            c.send(&send, count, data_type, dest_rank)
        })
    })
}

/// # Safety
/// `recv_buf` is writable for `count` elements of `data_type`.
#[no_mangle]
pub unsafe extern "C" fn HcclRecv(
    recv_buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    src_rank: u32,
    comm: HcclComm,
    _stream: aclrtStream,
) -> HcclResult {
    guard("HcclRecv", || {
        with_comm("HcclRecv", comm, |c| {
            let out = c.recv(count, data_type, src_rank)?;
            // SAFETY: writable for `count` elements per the contract; `recv` checked `out` has that many.
            unsafe { write_buffer(recv_buf, &out) }
        })
    })
}

/// Simulator only (no such call in HCCL): injects a fault into this member's next call on `comm`.
/// `fault` is `"reverse_reduction_order"`: the next AllReduce or ReduceScatter folds the members' buffers
/// in reverse rank order (see `Communicator::reverse_next_reduction`); `"corrupt_next_send"`: one bit of
/// this member's next `HcclSend` flips on its way to the receiver (`Communicator::corrupt_next_send`).
/// Frameworks resolve it optionally.
///
/// # Safety
/// `fault` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn simHcclInjectFault(comm: HcclComm, fault: *const c_char) -> HcclResult {
    guard("simHcclInjectFault", || {
        if fault.is_null() {
            return HCCL_E_PTR;
        }
        // SAFETY: non-null and NUL-terminated per the contract.
        let fault = unsafe { CStr::from_ptr(fault) }.to_string_lossy().into_owned();
        with_comm("simHcclInjectFault", comm, |c| match fault.as_str() {
            "reverse_reduction_order" => {
                c.reverse_next_reduction();
                Ok(())
            }
            "corrupt_next_send" => {
                c.corrupt_next_send();
                Ok(())
            }
            other => Err(CommError::Param(format!("unknown fault {other:?}"))),
        })
    })
}

/// Compile-time check that every export has the exact signature of `accutrace_hccl.h`.
#[allow(dead_code)]
const SIGNATURES: () = {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_handles_and_panics_are_refused() {
        assert_eq!(HcclCommDestroy(std::ptr::without_provenance_mut(usize::MAX)), HCCL_E_PARA);
        assert_eq!(HcclBarrier(std::ptr::null_mut(), std::ptr::null_mut()), HCCL_E_PARA);
        assert_eq!(guard("test", || panic!("boom")), HCCL_E_INTERNAL);
    }
}
