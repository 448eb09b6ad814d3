//! Collectives: the HCCL calls of the job, recorded as collective records (docs/CAPTURE_FORMAT.md).
//!
//! The wrappers below are reached two ways: as `libcollector.so`'s own exports (a framework that resolves
//! HCCL through the global scope, or links it), and as what our `dlsym` hands out for these names (torch_npu
//! resolves HCCL with `dlsym(handle, name)`, which never searches `LD_PRELOAD`ed objects; see
//! [`crate::dlsym`]). Either way each wrapper forwards to the real function and returns its result
//! unchanged; around the call it records, for every communicator, the sequence number, op, count, type,
//! root or peer, and the statistics and content hash of the input and output buffers.
//!
//! Communicator identity: the hash of the root info the communicator was made from (the same bytes on
//! every member, handed out of band), `root-{xxh3 hex}`, by `HcclCommInitRootInfo` or
//! `HcclCommInitRootInfoConfig` (which torch_npu prefers when libhccl.so has it). A communicator made before the collector saw it
//! gets its HCCL name (`HcclGetCommName`), else `unknown-{handle}` (its calls cannot be matched across
//! ranks: the analyzer says so).
//!
//! Reading the buffers: they are device memory, so the wrapper synchronizes the call's stream (everything
//! queued before it is done), copies the input to the host with `aclrtMemcpy`, calls the real function,
//! synchronizes again and copies the output. That makes the call synchronous and costs two copies of each
//! buffer: `ACCUTRACE_COLLECTIVES=meta` records the call without touching its buffers, `off` nothing.
//!
//! A libhccl.so that is a shim forwarding each entry point through the global scope (to the library that
//! implements HCCL) calls our export again from inside the call we forwarded to it: such a call is passed on
//! past the shim and recorded once, by the outermost call ([`crate::forwarding`]).

use crate::config::Collectives;
use crate::entry_guard::guarded;
use crate::forwarding::{self, Forwarding};
use crate::hooks::Reentry;
use crate::pipeline::{current, Pipeline};
use accutrace_formats::capture::{BufferSummary, CollectiveInfo, CollectiveOp};
use accutrace_formats::dtype::hccl as hccl_dtype;
use accutrace_formats::stats::stats_and_hash;
use ascend_sys::hccl::*;
use ascend_sys::{aclrtStream, ACL_MEMCPY_DEVICE_TO_HOST, ACL_SUCCESS};
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The HCCL entry points the collector watches, by slot in [`REAL`].
const NAMES: [&CStr; 10] = [
    c"HcclCommInitRootInfo",
    c"HcclCommDestroy",
    c"HcclAllReduce",
    c"HcclBroadcast",
    c"HcclAllGather",
    c"HcclReduceScatter",
    c"HcclBarrier",
    c"HcclSend",
    c"HcclRecv",
    c"HcclCommInitRootInfoConfig",
];
const INIT: usize = 0;
const DESTROY: usize = 1;
const ALL_REDUCE: usize = 2;
const BROADCAST: usize = 3;
const ALL_GATHER: usize = 4;
const REDUCE_SCATTER: usize = 5;
const BARRIER: usize = 6;
const SEND: usize = 7;
const RECV: usize = 8;
const INIT_CONFIG: usize = 9;

const _: () = assert!(NAMES.len() == forwarding::HCCL_HOOKS);

/// A slot's forwarding guard ([`crate::forwarding`] numbers acl_hooks' first).
const fn guard(slot: usize) -> usize {
    forwarding::HCCL_FIRST + slot
}

/// The real function of each watched name (0 = not known yet).
static REAL: [AtomicUsize; 10] = [const { AtomicUsize::new(0) }; 10];

/// Our wrapper for each slot.
fn wrapper(slot: usize) -> *mut c_void {
    let f: usize = match slot {
        INIT => HcclCommInitRootInfo as HcclCommInitRootInfoFn as usize,
        DESTROY => HcclCommDestroy as HcclCommDestroyFn as usize,
        ALL_REDUCE => HcclAllReduce as HcclAllReduceFn as usize,
        BROADCAST => HcclBroadcast as HcclBroadcastFn as usize,
        ALL_GATHER => HcclAllGather as HcclAllGatherFn as usize,
        REDUCE_SCATTER => HcclReduceScatter as HcclReduceScatterFn as usize,
        BARRIER => HcclBarrier as HcclBarrierFn as usize,
        SEND => HcclSend as HcclSendFn as usize,
        RECV => HcclRecv as HcclRecvFn as usize,
        _ => HcclCommInitRootInfoConfig as HcclCommInitRootInfoConfigFn as usize,
    };
    std::ptr::with_exposed_provenance_mut(f)
}

/// For `dlsym`: the wrapper to hand out instead of `real` when `name` is a watched HCCL function (and
/// `real` is remembered as the function the wrapper forwards to). Allocation-free: `dlsym` runs in every
/// process the library is preloaded into, at any time.
pub fn interpose(name: &CStr, real: *mut c_void) -> Option<*mut c_void> {
    let slot = NAMES.iter().position(|n| *n == name)?;
    let ours = wrapper(slot);
    if real.is_null() || real == ours {
        // Not found, or the global scope already gave our own export: nothing to remember.
        return Some(real);
    }
    REAL[slot].store(real.expose_provenance(), Ordering::Release);
    Some(ours)
}

/// The real function of a slot: the one `dlsym` saw, else the next definition after ours.
fn real(slot: usize) -> Option<usize> {
    let known = REAL[slot].load(Ordering::Acquire);
    if known != 0 {
        return Some(known);
    }
    // SAFETY: a NUL-terminated name; RTLD_NEXT lookups have no other requirement.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, NAMES[slot].as_ptr()) };
    if next.is_null() || next == wrapper(slot) {
        return None;
    }
    REAL[slot].store(next.expose_provenance(), Ordering::Release);
    Some(next.expose_provenance())
}

/// What a wrapper returns when the real function cannot be found (the library is not loaded: the caller
/// could not have meant to reach it).
const NO_REAL: HcclResult = HCCL_E_NOT_FOUND;

/// Where a call of `slot` goes, and whether it re-entered from inside the definition an enclosing call of it
/// forwarded to (then it goes past that one, and the collector's part is the enclosing call's); `Err`: the
/// code to answer instead.
fn target(slot: usize) -> Result<(usize, bool), HcclResult> {
    let ours = wrapper(slot).expose_provenance();
    match forwarding::reentered(guard(slot), NAMES[slot], ours, "HCCL_E_NOT_SUPPORT", "the HCCL library") {
        Some(Some(next)) => Ok((next, true)),
        Some(None) => Err(HCCL_E_NOT_SUPPORT),
        None => real(slot).map(|addr| (addr, false)).ok_or(NO_REAL),
    }
}

/// The function a hook forwards to, the mark that this thread forwards there (held until the call returns)
/// and whether the call re-entered; returns the code to answer when there is no function.
macro_rules! real_fn {
    ($slot:expr, $ty:ty) => {
        match target($slot) {
            Ok((addr, reentered)) => (
                // SAFETY: a definition of the slot's name, of its accutrace_hccl.h signature.
                unsafe { std::mem::transmute::<usize, $ty>(addr) },
                Forwarding::to(guard($slot), addr),
                reentered,
            ),
            Err(code) => return code,
        }
    };
}

/// What the collector knows of a communicator of this process.
struct CommState {
    id: String,
    rank: u32,
    size: u32,
    next_seq: u64,
    /// Point-to-point counts per (peer, is_send).
    p2p: HashMap<(u32, bool), u64>,
}

static COMMS: Mutex<Option<HashMap<usize, CommState>>> = Mutex::new(None);

/// Every communicator this process made from a root info, in the order made (kept after it is destroyed):
/// the manifest records them, and a communicator with as many members as the job has ranks ties every rank
/// of one job together (the analyzer tells runs apart by it).
static MADE: Mutex<Vec<Made>> = Mutex::new(Vec::new());

/// A communicator made from a root info: its identity, this process's rank in it and its size.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Made {
    pub comm: String,
    pub comm_rank: u32,
    pub comm_size: u32,
}

/// The communicators this process made from a root info so far (for the manifest, off the calls' path).
pub fn made() -> Vec<Made> {
    MADE.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn with_comms<R>(f: impl FnOnce(&mut HashMap<usize, CommState>) -> R) -> R {
    let mut guard = COMMS.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(HashMap::new))
}

/// The pipeline to record into, when the collector runs and records collectives.
fn recorder() -> Option<&'static Pipeline> {
    let p = current()?;
    (p.accepting() && p.cfg.collectives != Collectives::Off).then_some(p)
}

/// Asks the loaded libhccl.so (found by its SONAME) for `name`.
fn hccl_symbol(name: &CStr) -> Option<usize> {
    // SAFETY: NUL-terminated names; RTLD_NOLOAD only finds a library that is already loaded, and the handle
    // is deliberately not closed (dlclose would drop the reference the lookup added).
    unsafe {
        let handle = libc::dlopen(c"libhccl.so".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if handle.is_null() {
            return None;
        }
        let p = libc::dlsym(handle, name.as_ptr());
        (!p.is_null()).then(|| p.expose_provenance())
    }
}

/// Identity of a communicator the collector did not see created: its HCCL name, rank and size.
fn describe_unknown(comm: HcclComm) -> CommState {
    let (mut rank, mut size) = (0u32, 0u32);
    let mut id = format!("unknown-{:x}", comm.addr());
    // SAFETY: HCCL's query functions (resolved by name, so of the accutrace_hccl.h signatures) with a live
    // communicator of the caller's and writable outputs of the documented sizes.
    unsafe {
        if let Some(f) = hccl_symbol(c"HcclGetRankId") {
            std::mem::transmute::<usize, HcclGetRankIdFn>(f)(comm, &mut rank);
        }
        if let Some(f) = hccl_symbol(c"HcclGetRankSize") {
            std::mem::transmute::<usize, HcclGetRankSizeFn>(f)(comm, &mut size);
        }
        if let Some(f) = hccl_symbol(c"HcclGetCommName") {
            let mut name = [0 as c_char; COMM_NAME_MAX_LENGTH as usize];
            let ok =
                std::mem::transmute::<usize, HcclGetCommNameFn>(f)(comm, name.as_mut_ptr()) == HCCL_SUCCESS;
            name[name.len() - 1] = 0;
            let text = CStr::from_ptr(name.as_ptr()).to_string_lossy();
            if ok && !text.is_empty() {
                id = format!("name-{text}");
            }
        }
    }
    CommState { id, rank, size, next_seq: 0, p2p: HashMap::new() }
}

/// The identity, rank, size and the next sequence number of `comm` for a call of `op` (with `peer` for
/// point to point), advancing the count.
fn next_call(comm: HcclComm, op: CollectiveOp, peer: Option<u32>) -> (String, u32, u32, u64) {
    with_comms(|comms| {
        let c = comms.entry(comm.addr()).or_insert_with(|| describe_unknown(comm));
        let seq = match (op.is_point_to_point(), peer) {
            (true, Some(peer)) => post_increment(c.p2p.entry((peer, op == CollectiveOp::Send)).or_default()),
            _ => post_increment(&mut c.next_seq),
        };
        (c.id.clone(), c.rank, c.size, seq)
    })
}

fn post_increment(n: &mut u64) -> u64 {
    *n += 1;
    *n - 1
}

fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// A device buffer of `count` elements of `dtype`, read to the host after `stream` is synchronized.
struct DeviceBuffer {
    ptr: *const c_void,
    count: u64,
}

/// Statistics and hash of a device buffer, `None` when it cannot be read (no runtime copy function, a
/// failed copy, an unknown type).
fn summarize(
    p: &Pipeline,
    buf: &DeviceBuffer,
    dtype: HcclDataType,
    stream: aclrtStream,
) -> Option<BufferSummary> {
    let acl = p.acl.as_ref()?;
    let width = hccl_dtype::element_bytes(dtype)?;
    let len = usize::try_from(buf.count.checked_mul(width)?).ok()?;
    if buf.ptr.is_null() {
        return None;
    }
    let mut bytes = Vec::new();
    if len > 0 {
        let (sync, copy) = (acl.aclrt_synchronize_stream().ok()?, acl.aclrt_memcpy().ok()?);
        bytes.try_reserve_exact(len).ok()?;
        bytes.resize(len, 0);
        // SAFETY: the runtime's own functions; `bytes` has room for `len` bytes, the caller's buffer holds
        // them on the device (HCCL's contract for the call we are wrapping), and the stream is the caller's.
        let ok = unsafe {
            sync(stream) == ACL_SUCCESS
                && copy(bytes.as_mut_ptr().cast(), len, buf.ptr, len, ACL_MEMCPY_DEVICE_TO_HOST)
                    == ACL_SUCCESS
        };
        if !ok {
            return None;
        }
    }
    let (stats, hash) = match hccl_dtype::dtype(dtype) {
        Some(d) => {
            let (stats, hash) = stats_and_hash(d, &bytes);
            (stats.unwrap_or_default(), hash)
        }
        None => (Default::default(), accutrace_formats::stats::content_hash(&bytes)),
    };
    Some(BufferSummary { stats, content_hash: hash, size: len as u64 })
}

/// The parts of a call that vary by op.
struct Call {
    op: CollectiveOp,
    comm: HcclComm,
    stream: aclrtStream,
    count: u64,
    dtype: HcclDataType,
    reduce_op: Option<u32>,
    peer: Option<u32>,
    /// What to read before the call (None: nothing, e.g. a receive's buffer) and after it.
    input: Option<DeviceBuffer>,
    output: Option<DeviceBuffer>,
}

/// Runs `forward` (the real call) and, when the collector records collectives, records the call around
/// it. The real call happens exactly once whatever happens here; a panic in the recording disables the
/// collector and leaves the call's result alone. A `reentered` call only forwards: it is the enclosing
/// call's, recorded there.
fn observed(call: Call, reentered: bool, forward: impl FnOnce() -> HcclResult) -> HcclResult {
    if reentered {
        return forward();
    }
    let Some(_guard) = Reentry::enter() else { return forward() };
    // Counted whether or not this call is recorded, so every member numbers the communicator's calls alike
    // even if their collectors started at different times.
    let identity = catch_unwind(AssertUnwindSafe(|| next_call(call.comm, call.op, call.peer)));
    let (Some(p), Ok(identity)) = (recorder(), identity) else { return forward() };
    let _shield = crate::signals::Shield::new();
    let read = p.cfg.collectives == Collectives::Stats;
    let before = catch_unwind(AssertUnwindSafe(|| {
        let input = if read {
            call.input.as_ref().and_then(|b| summarize(p, b, call.dtype, call.stream))
        } else {
            None
        };
        (now_us(), input)
    }));
    let code = forward();
    let recorded = before.and_then(|(start_us, input)| {
        catch_unwind(AssertUnwindSafe(|| {
            let output = if read {
                call.output.as_ref().and_then(|b| summarize(p, b, call.dtype, call.stream))
            } else {
                None
            };
            let end_us = now_us();
            let (comm, comm_rank, comm_size, seq) = identity;
            let info = CollectiveInfo {
                comm,
                comm_rank,
                comm_size,
                seq,
                op: call.op,
                count: call.count,
                dtype: call.dtype,
                reduce_op: call.reduce_op,
                peer: call.peer,
                input,
                output,
                start_us,
                end_us,
                result: code as i32,
            };
            if let Some(stream) = p.stream().as_mut() {
                if let Err(e) = stream.append_collective(&info) {
                    p.disable(&format!("recording a collective failed: {e}"));
                }
            }
        }))
    });
    if recorded.is_err() {
        p.disable("recording a collective panicked");
    }
    code
}

/// # Safety
/// HCCL's contract for HcclCommInitRootInfo.
#[no_mangle]
pub unsafe extern "C" fn HcclCommInitRootInfo(
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    comm: *mut HcclComm,
) -> HcclResult {
    guarded("HcclCommInitRootInfo", HCCL_E_INTERNAL, |forwarded| {
        let (f, _forwarding, reentered) = real_fn!(INIT, HcclCommInitRootInfoFn);
        // SAFETY: forwarding the caller's arguments unchanged.
        let code = forwarded.call(|| unsafe { f(n_ranks, root_info, rank, comm) });
        if !reentered {
            // SAFETY: the real function's result and the caller's arguments, as it was given them.
            unsafe { remember_made(code, n_ranks, root_info, rank, comm) };
        }
        code
    })
}

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
    guarded("HcclCommInitRootInfoConfig", HCCL_E_INTERNAL, |forwarded| {
        let (f, _forwarding, reentered) = real_fn!(INIT_CONFIG, HcclCommInitRootInfoConfigFn);
        // SAFETY: forwarding the caller's arguments unchanged.
        let code = forwarded.call(|| unsafe { f(n_ranks, root_info, rank, config, comm) });
        if !reentered {
            // SAFETY: the real function's result and the caller's arguments, as it was given them.
            unsafe { remember_made(code, n_ranks, root_info, rank, comm) };
        }
        code
    })
}

/// Names a communicator just made from `root_info` by the hash of the root info, and lists it as made.
///
/// # Safety
/// `code` is what the real init function returned for these arguments.
unsafe fn remember_made(
    code: HcclResult,
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    comm: *mut HcclComm,
) {
    if code == HCCL_SUCCESS && !root_info.is_null() && !comm.is_null() {
        let _ = catch_unwind(|| {
            // SAFETY: the call succeeded, so the root info was readable (4108 bytes) and `comm` written.
            let (bytes, handle) =
                unsafe { (std::slice::from_raw_parts(root_info.cast::<u8>(), ROOT_INFO_LEN), comm.read()) };
            let id = format!("root-{:016x}", accutrace_formats::stats::content_hash(bytes));
            let made = Made { comm: id.clone(), comm_rank: rank, comm_size: n_ranks };
            MADE.lock().unwrap_or_else(|e| e.into_inner()).push(made);
            let state = CommState { id, rank, size: n_ranks, next_seq: 0, p2p: HashMap::new() };
            with_comms(|c| c.insert(handle.addr(), state));
        });
    }
}

/// # Safety
/// HCCL's contract for HcclCommDestroy.
#[no_mangle]
pub unsafe extern "C" fn HcclCommDestroy(comm: HcclComm) -> HcclResult {
    guarded("HcclCommDestroy", HCCL_E_INTERNAL, |forwarded| {
        let (f, _forwarding, reentered) = real_fn!(DESTROY, HcclCommDestroyFn);
        if !reentered {
            let _ = catch_unwind(|| with_comms(|c| c.remove(&comm.addr())));
        }
        // SAFETY: forwarding the caller's argument unchanged.
        forwarded.call(|| unsafe { f(comm) })
    })
}

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
    guarded("HcclAllReduce", HCCL_E_INTERNAL, |forwarded| {
        let (f, _forwarding, reentered) = real_fn!(ALL_REDUCE, HcclAllReduceFn);
        let call = Call {
            op: CollectiveOp::AllReduce,
            comm,
            stream,
            count,
            dtype: data_type,
            reduce_op: Some(op),
            peer: None,
            input: Some(DeviceBuffer { ptr: send_buf, count }),
            output: Some(DeviceBuffer { ptr: recv_buf, count }),
        };
        observed(call, reentered, || {
            // SAFETY: forwarding the caller's arguments unchanged.
            forwarded.call(|| unsafe { f(send_buf, recv_buf, count, data_type, op, comm, stream) })
        })
    })
}

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
    guarded("HcclBroadcast", HCCL_E_INTERNAL, |forwarded| {
        let (f, _forwarding, reentered) = real_fn!(BROADCAST, HcclBroadcastFn);
        // Only the root's buffer holds data before the call; every member's holds the root's after it.
        let is_root = with_comms(|c| c.get(&comm.addr()).map(|s| s.rank)) == Some(root);
        let call = Call {
            op: CollectiveOp::Broadcast,
            comm,
            stream,
            count,
            dtype: data_type,
            reduce_op: None,
            peer: Some(root),
            input: is_root.then_some(DeviceBuffer { ptr: buf, count }),
            output: Some(DeviceBuffer { ptr: buf, count }),
        };
        observed(call, reentered, || {
            // SAFETY: forwarding the caller's arguments unchanged.
            forwarded.call(|| unsafe { f(buf, count, data_type, root, comm, stream) })
        })
    })
}

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
    guarded("HcclAllGather", HCCL_E_INTERNAL, |forwarded| {
        let (f, _forwarding, reentered) = real_fn!(ALL_GATHER, HcclAllGatherFn);
        let size = with_comms(|c| c.get(&comm.addr()).map(|s| u64::from(s.size)));
        let call = Call {
            op: CollectiveOp::AllGather,
            comm,
            stream,
            count: send_count,
            dtype: data_type,
            reduce_op: None,
            peer: None,
            input: Some(DeviceBuffer { ptr: send_buf, count: send_count }),
            output: size.map(|n| DeviceBuffer { ptr: recv_buf, count: send_count.saturating_mul(n) }),
        };
        observed(call, reentered, || {
            // SAFETY: forwarding the caller's arguments unchanged.
            forwarded.call(|| unsafe { f(send_buf, recv_buf, send_count, data_type, comm, stream) })
        })
    })
}

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
    guarded("HcclReduceScatter", HCCL_E_INTERNAL, |forwarded| {
        let (f, _forwarding, reentered) = real_fn!(REDUCE_SCATTER, HcclReduceScatterFn);
        let size = with_comms(|c| c.get(&comm.addr()).map(|s| u64::from(s.size)));
        let call = Call {
            op: CollectiveOp::ReduceScatter,
            comm,
            stream,
            count: recv_count,
            dtype: data_type,
            reduce_op: Some(op),
            peer: None,
            input: size.map(|n| DeviceBuffer { ptr: send_buf, count: recv_count.saturating_mul(n) }),
            output: Some(DeviceBuffer { ptr: recv_buf, count: recv_count }),
        };
        observed(call, reentered, || {
            // SAFETY: forwarding the caller's arguments unchanged.
            forwarded.call(|| unsafe { f(send_buf, recv_buf, recv_count, data_type, op, comm, stream) })
        })
    })
}

/// # Safety
/// HCCL's contract for HcclBarrier.
#[no_mangle]
pub unsafe extern "C" fn HcclBarrier(comm: HcclComm, stream: aclrtStream) -> HcclResult {
    guarded("HcclBarrier", HCCL_E_INTERNAL, |forwarded| {
        let (f, _forwarding, reentered) = real_fn!(BARRIER, HcclBarrierFn);
        let call = Call {
            op: CollectiveOp::Barrier,
            comm,
            stream,
            count: 0,
            dtype: HCCL_DATA_TYPE_INT8,
            reduce_op: None,
            peer: None,
            input: None,
            output: None,
        };
        // SAFETY: forwarding the caller's arguments unchanged.
        observed(call, reentered, || forwarded.call(|| unsafe { f(comm, stream) }))
    })
}

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
    guarded("HcclSend", HCCL_E_INTERNAL, |forwarded| {
        let (f, _forwarding, reentered) = real_fn!(SEND, HcclSendFn);
        let call = Call {
            op: CollectiveOp::Send,
            comm,
            stream,
            count,
            dtype: data_type,
            reduce_op: None,
            peer: Some(dest_rank),
            input: Some(DeviceBuffer { ptr: send_buf, count }),
            output: None,
        };
        observed(call, reentered, || {
            // SAFETY: forwarding the caller's arguments unchanged.
            forwarded.call(|| unsafe { f(send_buf, count, data_type, dest_rank, comm, stream) })
        })
    })
}

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
    guarded("HcclRecv", HCCL_E_INTERNAL, |forwarded| {
        let (f, _forwarding, reentered) = real_fn!(RECV, HcclRecvFn);
        let call = Call {
            op: CollectiveOp::Recv,
            comm,
            stream,
            count,
            dtype: data_type,
            reduce_op: None,
            peer: Some(src_rank),
            input: None,
            output: Some(DeviceBuffer { ptr: recv_buf, count }),
        };
        observed(call, reentered, || {
            // SAFETY: forwarding the caller's arguments unchanged.
            forwarded.call(|| unsafe { f(recv_buf, count, data_type, src_rank, comm, stream) })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_watched_names_are_interposed_and_our_own_exports_pass_through() {
        let real = std::ptr::without_provenance_mut::<c_void>(0x1000);
        assert_eq!(interpose(c"HcclGetRankId", real), None);
        assert_eq!(interpose(c"aclInit", real), None);
        assert_eq!(interpose(c"HcclAllReduce", std::ptr::null_mut()), Some(std::ptr::null_mut()));
        let ours = wrapper(ALL_REDUCE);
        assert_eq!(interpose(c"HcclAllReduce", ours), Some(ours), "no wrapper around the wrapper");
        assert_eq!(interpose(c"HcclSend", real), Some(wrapper(SEND)));
        assert_eq!(REAL[SEND].load(Ordering::Acquire), 0x1000);
    }

    #[test]
    fn a_call_re_entered_from_the_last_definition_is_refused_not_recorded() {
        // As if HcclAllReduce and HcclCommInitRootInfo had forwarded to a definition in libc, the last
        // object that could define them: a call from inside it has nowhere further to go.
        let libc_function = libc::getpid as *const () as usize;
        let made_before = made().len();
        {
            let _forwarding = Forwarding::to(guard(ALL_REDUCE), libc_function);
            assert_eq!(forwarding::inside(ALL_REDUCE), None, "acl_hooks' slot of the same number is apart");
            let null = std::ptr::null_mut();
            // SAFETY: nothing is called: no definition follows libc's.
            let code = unsafe { HcclAllReduce(null, null, 1, HCCL_DATA_TYPE_INT8, 0, null, null) };
            assert_eq!(code, HCCL_E_NOT_SUPPORT);
        }
        {
            let _forwarding = Forwarding::to(guard(INIT), libc_function);
            let mut comm = std::ptr::null_mut();
            // SAFETY: nothing is called: no definition follows libc's.
            let code = unsafe { HcclCommInitRootInfo(2, std::ptr::null(), 0, &mut comm) };
            assert_eq!(code, HCCL_E_NOT_SUPPORT);
        }
        assert_eq!(made().len(), made_before, "a refused init makes no communicator");
        assert_eq!((forwarding::inside(guard(ALL_REDUCE)), forwarding::inside(guard(INIT))), (None, None));
    }

    #[test]
    fn sequence_numbers_count_per_communicator_and_point_to_point_per_peer() {
        let a = std::ptr::without_provenance_mut::<c_void>(0xa0);
        let b = std::ptr::without_provenance_mut::<c_void>(0xb0);
        with_comms(|c| {
            c.insert(
                a.addr(),
                CommState { id: "A".into(), rank: 1, size: 4, next_seq: 0, p2p: HashMap::new() },
            );
        });
        assert_eq!(next_call(a, CollectiveOp::AllReduce, None), ("A".into(), 1, 4, 0));
        assert_eq!(next_call(a, CollectiveOp::Send, Some(2)), ("A".into(), 1, 4, 0));
        assert_eq!(next_call(a, CollectiveOp::Send, Some(2)).3, 1);
        assert_eq!(next_call(a, CollectiveOp::Recv, Some(2)).3, 0);
        assert_eq!(
            next_call(a, CollectiveOp::Broadcast, Some(0)).3,
            1,
            "point to point leaves the count alone"
        );
        // A communicator made before the collector saw it: named after its handle when HCCL cannot say.
        assert_eq!(next_call(b, CollectiveOp::AllGather, None), ("unknown-b0".into(), 0, 0, 0));
    }
}
