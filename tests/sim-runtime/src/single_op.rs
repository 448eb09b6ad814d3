//! Single-operator execution, the path eager frameworks take (torch_npu's OpCommand): tensor
//! descriptions, op attributes, and the launches `aclopExecuteV2`, the deprecated `aclopExecute`,
//! `aclopExecWithHandle` (an op matched once by `aclopCreateHandle`), `aclopCompileAndExecute` and
//! `aclopCompileAndExecuteV2` (the last two, the vendor's libacl_op_compiler.so, compile the op first when
//! needed: nothing to compile or match here, so all five launch the same way).
//!
//! `aclopExecuteV2(opType, inputs, outputs, attr, stream)` launches one op on operands in device memory.
//! The simulated device does not compute here: the framework side (sim-model, driven by `sim-train
//! --eager`) has already written each output's device values into its buffer, as a kernel would have. What
//! the runtime does is what it does around every launch: check the operands, give the task an id, raise
//! the op's overflow status bits (the simulator-private attribute `_sim_overflow_status`, standing in for
//! the kernel's own status), and dump the op in the single-op layout (`emit::dump_single_op`) when
//! `dump_op_switch` is on.
//!
//! Op names: an aclop call carries none, so the runtime names each launch `{op_type}_{n}` (n counts that
//! type's launches in the process), the name its dump file and `DumpData.op_name` show.
//!
//! Handles (tensor descriptions, attributes, op handles) are checked against their tables before use, as in
//! `memory`: a foreign or destroyed handle is `ACL_ERROR_INVALID_PARAM`, never undefined behaviour.

use crate::abi::guard;
use crate::dumper::Delivery;
use crate::emit::{dump_single_op, SingleOpTarget};
use crate::{memory, overflow, state};
use accutrace_formats::DType;
use ascend_sys::*;
use sim_model::{OpEvent, TensorView};
use std::collections::HashMap;
use std::ffi::{c_char, CStr};
use std::sync::Mutex;

/// The attribute through which the simulated kernel reports the overflow status bits it raised.
pub const OVERFLOW_STATUS_ATTR: &str = "_sim_overflow_status";

/// The most dimensions a tensor description takes (CANN's limit is far below this).
const MAX_DIMS: i32 = 64;

#[derive(Clone, Debug)]
struct Desc {
    dtype: aclDataType,
    dims: Vec<i64>,
    format: aclFormat,
    storage_format: Option<aclFormat>,
    storage_dims: Option<Vec<i64>>,
}

#[derive(Clone, Debug, Default)]
struct Attr {
    ints: HashMap<String, i64>,
    strings: HashMap<String, String>,
}

/// What an `aclopHandle` holds: the op and copies of its descriptions and attribute, so that the caller may
/// destroy those while the handle lives (the vendor's handle keeps its own too).
#[derive(Clone, Debug)]
struct Described {
    op_type: String,
    inputs: Vec<Desc>,
    outputs: Vec<Desc>,
    attr: Attr,
}

#[derive(Default)]
struct Tables {
    descs: HashMap<usize, Desc>,
    attrs: HashMap<usize, Attr>,
    op_handles: HashMap<usize, Described>,
    /// Launches per op type (the `{n}` of op names).
    launches: HashMap<String, u64>,
    /// The default stream's next task id.
    next_task: u32,
}

static TABLES: Mutex<Option<Tables>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut Tables) -> R) -> R {
    let mut guard = state::lock(&TABLES);
    f(guard.get_or_insert_with(Tables::default))
}

/// Forgets the launch counts and task ids (aclFinalize); live handles stay valid.
pub fn reset_counters() {
    with(|t| {
        t.launches.clear();
        t.next_task = 0;
    });
}

/// A unique handle: a real allocation, so no two live handles compare equal.
fn new_handle() -> usize {
    Box::into_raw(Box::new(0u8)).expose_provenance()
}

fn drop_handle(h: usize) {
    // SAFETY: `h` came from `new_handle` (`Box::into_raw(Box::new(0u8))`) and the caller removed it from its
    // table first, so this is the only drop.
    drop(unsafe { Box::from_raw(std::ptr::with_exposed_provenance_mut::<u8>(h)) });
}

/// `n` dims at `dims` (NULL allowed when `n` is 0).
///
/// # Safety
/// `dims` is NULL or points at `n` readable `int64_t`s.
unsafe fn read_dims(n: i32, dims: *const i64) -> Option<Vec<i64>> {
    if !(0..=MAX_DIMS).contains(&n) || (n > 0 && dims.is_null()) {
        return None;
    }
    if n == 0 {
        return Some(Vec::new());
    }
    // SAFETY: non-null and `n` elements long (the caller's contract).
    Some(unsafe { std::slice::from_raw_parts(dims, n as usize) }.to_vec())
}

/// # Safety
/// `dims` is NULL or points at `num_dims` readable `int64_t`s.
#[no_mangle]
pub unsafe extern "C" fn aclCreateTensorDesc(
    data_type: aclDataType,
    num_dims: i32,
    dims: *const i64,
    format: aclFormat,
) -> *mut aclTensorDesc {
    let mut out = std::ptr::null_mut();
    guard("aclCreateTensorDesc", || {
        // SAFETY: forwarded from this function's contract.
        let Some(dims) = (unsafe { read_dims(num_dims, dims) }) else { return ACL_ERROR_INVALID_PARAM };
        let desc = Desc { dtype: data_type, dims, format, storage_format: None, storage_dims: None };
        let h = new_handle();
        with(|t| t.descs.insert(h, desc));
        out = std::ptr::with_exposed_provenance_mut(h);
        ACL_SUCCESS
    });
    out
}

#[no_mangle]
pub extern "C" fn aclDestroyTensorDesc(desc: *const aclTensorDesc) {
    guard("aclDestroyTensorDesc", || {
        if with(|t| t.descs.remove(&desc.addr())).is_some() {
            drop_handle(desc.addr());
        }
        ACL_SUCCESS
    });
}

#[no_mangle]
pub extern "C" fn aclSetTensorStorageFormat(desc: *mut aclTensorDesc, format: aclFormat) -> aclError {
    guard("aclSetTensorStorageFormat", || {
        with(|t| match t.descs.get_mut(&desc.addr()) {
            Some(d) => {
                d.storage_format = Some(format);
                ACL_SUCCESS
            }
            None => ACL_ERROR_INVALID_PARAM,
        })
    })
}

/// # Safety
/// `dims` is NULL or points at `num_dims` readable `int64_t`s.
#[no_mangle]
pub unsafe extern "C" fn aclSetTensorStorageShape(
    desc: *mut aclTensorDesc,
    num_dims: i32,
    dims: *const i64,
) -> aclError {
    guard("aclSetTensorStorageShape", || {
        // SAFETY: forwarded from this function's contract.
        let Some(dims) = (unsafe { read_dims(num_dims, dims) }) else { return ACL_ERROR_INVALID_PARAM };
        with(|t| match t.descs.get_mut(&desc.addr()) {
            Some(d) => {
                d.storage_dims = Some(dims);
                ACL_SUCCESS
            }
            None => ACL_ERROR_INVALID_PARAM,
        })
    })
}

#[no_mangle]
pub extern "C" fn aclopCreateAttr() -> *mut aclopAttr {
    let mut out = std::ptr::null_mut();
    guard("aclopCreateAttr", || {
        let h = new_handle();
        with(|t| t.attrs.insert(h, Attr::default()));
        out = std::ptr::with_exposed_provenance_mut(h);
        ACL_SUCCESS
    });
    out
}

#[no_mangle]
pub extern "C" fn aclopDestroyAttr(attr: *const aclopAttr) {
    guard("aclopDestroyAttr", || {
        if with(|t| t.attrs.remove(&attr.addr())).is_some() {
            drop_handle(attr.addr());
        }
        ACL_SUCCESS
    });
}

/// A C string argument, `None` when NULL or not UTF-8.
///
/// # Safety
/// `p` is NULL or NUL-terminated and valid for the call.
unsafe fn c_str(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated (the caller's contract).
    unsafe { CStr::from_ptr(p) }.to_str().ok().map(String::from)
}

/// # Safety
/// `name` is NULL or a NUL-terminated string valid for the call.
#[no_mangle]
pub unsafe extern "C" fn aclopSetAttrInt(attr: *mut aclopAttr, name: *const c_char, value: i64) -> aclError {
    guard("aclopSetAttrInt", || {
        // SAFETY: forwarded from this function's contract.
        let Some(name) = (unsafe { c_str(name) }) else { return ACL_ERROR_INVALID_PARAM };
        with(|t| match t.attrs.get_mut(&attr.addr()) {
            Some(a) => {
                a.ints.insert(name, value);
                ACL_SUCCESS
            }
            None => ACL_ERROR_INVALID_PARAM,
        })
    })
}

/// # Safety
/// `name` and `value` are NULL or NUL-terminated strings valid for the call.
#[no_mangle]
pub unsafe extern "C" fn aclopSetAttrString(
    attr: *mut aclopAttr,
    name: *const c_char,
    value: *const c_char,
) -> aclError {
    guard("aclopSetAttrString", || {
        // SAFETY: forwarded from this function's contract.
        let (Some(name), Some(value)) = (unsafe { c_str(name) }, unsafe { c_str(value) }) else {
            return ACL_ERROR_INVALID_PARAM;
        };
        with(|t| match t.attrs.get_mut(&attr.addr()) {
            Some(a) => {
                a.strings.insert(name, value);
                ACL_SUCCESS
            }
            None => ACL_ERROR_INVALID_PARAM,
        })
    })
}

/// One operand, read out of device memory.
struct Operand {
    dtype: DType,
    format: i32,
    device_shape: Vec<u64>,
    original_shape: Vec<u64>,
    bytes: Vec<u8>,
}

/// Checks operand `i` (its description and buffer) and copies its bytes out.
fn operand(what: &str, d: &Desc, buffer: usize) -> Result<Operand, String> {
    let (addr, len) = memory::buffer(std::ptr::with_exposed_provenance(buffer))
        .ok_or_else(|| format!("{what}: not a data buffer"))?;
    let dtype = DType::from_acl(d.dtype).ok_or_else(|| format!("{what}: aclDataType {} unknown", d.dtype))?;
    let dims = |v: &[i64]| -> Result<Vec<u64>, String> {
        v.iter()
            .map(|&x| u64::try_from(x).map_err(|_| format!("{what}: dimension {x} is not static")))
            .collect()
    };
    let original_shape = dims(&d.dims)?;
    let device_shape = dims(d.storage_dims.as_deref().unwrap_or(&d.dims))?;
    let elements = device_shape.iter().try_fold(1u64, |a, &x| a.checked_mul(x));
    let needed = elements
        .and_then(|n| dtype.byte_size(n))
        .ok_or_else(|| format!("{what}: shape {device_shape:?} of {} has no byte size", dtype.name()))?;
    if needed > len as u64 {
        return Err(format!("{what}: {} bytes of data for {needed} needed by {device_shape:?}", len));
    }
    let slice = memory::DeviceSlice::checked(addr, needed as usize)
        .ok_or_else(|| format!("{what}: buffer at {addr:#x} is not inside memory from aclrtMalloc"))?;
    Ok(Operand {
        dtype,
        format: d.storage_format.unwrap_or(d.format),
        device_shape,
        original_shape,
        bytes: slice.read(),
    })
}

/// `n` handles at `p` (NULL allowed when `n` is 0).
///
/// # Safety
/// `p` is NULL or points at `n` readable pointers.
unsafe fn handles<T>(n: i32, p: *mut *mut T) -> Option<Vec<usize>> {
    if n < 0 || (n > 0 && p.is_null()) {
        return None;
    }
    if n == 0 {
        return Some(Vec::new());
    }
    // SAFETY: non-null and `n` elements long (the caller's contract).
    Some(unsafe { std::slice::from_raw_parts(p, n as usize) }.iter().map(|h| h.expose_provenance()).collect())
}

/// # Safety
/// `op_type` is NULL or NUL-terminated; each array is NULL or holds its count of handles; all valid for the
/// call (aclopExecuteV2's contract).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn aclopExecuteV2(
    op_type: *const c_char,
    num_inputs: i32,
    input_desc: *mut *mut aclTensorDesc,
    inputs: *mut *mut aclDataBuffer,
    num_outputs: i32,
    output_desc: *mut *mut aclTensorDesc,
    outputs: *mut *mut aclDataBuffer,
    attr: *mut aclopAttr,
    _stream: aclrtStream,
) -> aclError {
    let operands = Operands { num_inputs, input_desc, inputs, num_outputs, output_desc, outputs };
    // SAFETY: forwarded from this function's contract.
    unsafe { launch("aclopExecuteV2", op_type, operands, attr) }
}

/// `aclopExecute`, deprecated for [`aclopExecuteV2`] (acl_op.h): the same launch with const arrays.
///
/// # Safety
/// As [`aclopExecuteV2`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn aclopExecute(
    op_type: *const c_char,
    num_inputs: i32,
    input_desc: *const *const aclTensorDesc,
    inputs: *const *const aclDataBuffer,
    num_outputs: i32,
    output_desc: *const *const aclTensorDesc,
    outputs: *const *mut aclDataBuffer,
    attr: *const aclopAttr,
    _stream: aclrtStream,
) -> aclError {
    // The arrays and the attribute are only read: the const pointers are the same handles.
    let operands = Operands {
        num_inputs,
        input_desc: input_desc.cast_mut().cast(),
        inputs: inputs.cast_mut().cast(),
        num_outputs,
        output_desc: output_desc.cast_mut().cast(),
        outputs: outputs.cast_mut(),
    };
    // SAFETY: forwarded from this function's contract.
    unsafe { launch("aclopExecute", op_type, operands, attr.cast_mut()) }
}

/// `aclopCreateHandle` (acl_op.h): the op, with copies of its descriptions and attribute, kept for
/// [`aclopExecWithHandle`]. The vendor matches a loaded single-op model here; the simulator has no models to
/// match, so any op type is accepted, as its launches accept any.
///
/// # Safety
/// `op_type` is NULL or NUL-terminated; each array is NULL or holds its count of handles; `handle` is NULL or
/// writable; all valid for the call.
#[no_mangle]
pub unsafe extern "C" fn aclopCreateHandle(
    op_type: *const c_char,
    num_inputs: i32,
    input_desc: *const *const aclTensorDesc,
    num_outputs: i32,
    output_desc: *const *const aclTensorDesc,
    op_attr: *const aclopAttr,
    handle: *mut *mut aclopHandle,
) -> aclError {
    guard("aclopCreateHandle", || {
        if handle.is_null() {
            return ACL_ERROR_INVALID_PARAM;
        }
        // SAFETY: forwarded from this function's contract (the arrays are only read).
        let described = unsafe {
            describe(
                op_type,
                num_inputs,
                input_desc.cast_mut().cast(),
                num_outputs,
                output_desc.cast_mut().cast(),
                op_attr.cast_mut(),
            )
        };
        let described = match described {
            Ok(d) => d,
            Err(code) => return code,
        };
        let h = new_handle();
        with(|t| t.op_handles.insert(h, described));
        // SAFETY: non-null and writable (this function's contract).
        unsafe { *handle = std::ptr::with_exposed_provenance_mut(h) };
        ACL_SUCCESS
    })
}

/// `aclopDestroyHandle` (acl_op.h); NULL or an unknown handle is ignored.
#[no_mangle]
pub extern "C" fn aclopDestroyHandle(handle: *mut aclopHandle) {
    guard("aclopDestroyHandle", || {
        if with(|t| t.op_handles.remove(&handle.addr())).is_some() {
            drop_handle(handle.addr());
        }
        ACL_SUCCESS
    });
}

/// `aclopExecWithHandle` (acl_op.h): launches the handle's op on these buffers, as [`aclopExecuteV2`]
/// launches. The vendor's counts checks: another number of inputs or outputs than the handle's
/// descriptions is ACL_ERROR_OP_INPUT_NOT_MATCH / ACL_ERROR_OP_OUTPUT_NOT_MATCH.
///
/// # Safety
/// Each array is NULL or holds its count of buffers, valid for the call.
#[no_mangle]
pub unsafe extern "C" fn aclopExecWithHandle(
    handle: *mut aclopHandle,
    num_inputs: i32,
    inputs: *const *const aclDataBuffer,
    num_outputs: i32,
    outputs: *const *mut aclDataBuffer,
    _stream: aclrtStream,
) -> aclError {
    guard("aclopExecWithHandle", || {
        // The vendor's order: the handle and the counts are checked before the launch needs a device.
        let Some(op) = with(|t| t.op_handles.get(&handle.addr()).cloned()) else {
            return ACL_ERROR_INVALID_PARAM;
        };
        // SAFETY: forwarded from this function's contract (the arrays are only read).
        let (Some(in_buf), Some(out_buf)) = (unsafe {
            (
                handles::<aclDataBuffer>(num_inputs, inputs.cast_mut().cast()),
                handles(num_outputs, outputs.cast_mut()),
            )
        }) else {
            return ACL_ERROR_INVALID_PARAM;
        };
        if in_buf.len() != op.inputs.len() {
            return ACL_ERROR_OP_INPUT_NOT_MATCH;
        }
        if out_buf.len() != op.outputs.len() {
            return ACL_ERROR_OP_OUTPUT_NOT_MATCH;
        }
        let device_id = match ready_device() {
            Ok(id) => id,
            Err(code) => return code,
        };
        run("aclopExecWithHandle", device_id, op, &in_buf, &out_buf)
    })
}

/// `aclopCompileAndExecute` (acl_op_compiler.h; the vendor's libacl_op_compiler.so): there is nothing to
/// compile here, so it launches as [`aclopExecuteV2`] does, after the compile type's check.
///
/// # Safety
/// As [`aclopExecuteV2`]; `op_path` is not read.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn aclopCompileAndExecute(
    op_type: *const c_char,
    num_inputs: i32,
    input_desc: *const *const aclTensorDesc,
    inputs: *const *const aclDataBuffer,
    num_outputs: i32,
    output_desc: *const *const aclTensorDesc,
    outputs: *const *mut aclDataBuffer,
    attr: *const aclopAttr,
    _engine_type: aclopEngineType,
    compile_flag: aclopCompileType,
    _op_path: *const c_char,
    _stream: aclrtStream,
) -> aclError {
    if !compile_type_supported(compile_flag) {
        return ACL_ERROR_API_NOT_SUPPORT;
    }
    // The arrays and the attribute are only read: the const pointers are the same handles.
    let operands = Operands {
        num_inputs,
        input_desc: input_desc.cast_mut().cast(),
        inputs: inputs.cast_mut().cast(),
        num_outputs,
        output_desc: output_desc.cast_mut().cast(),
        outputs: outputs.cast_mut(),
    };
    // SAFETY: forwarded from this function's contract.
    unsafe { launch("aclopCompileAndExecute", op_type, operands, attr.cast_mut()) }
}

/// `aclopCompileAndExecuteV2` (acl_op_compiler.h), torch_npu's OpCommand launch: as
/// [`aclopCompileAndExecute`]; the output descriptions already hold the shapes the op produces.
///
/// # Safety
/// As [`aclopExecuteV2`]; `op_path` is not read.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn aclopCompileAndExecuteV2(
    op_type: *const c_char,
    num_inputs: i32,
    input_desc: *mut *mut aclTensorDesc,
    inputs: *mut *mut aclDataBuffer,
    num_outputs: i32,
    output_desc: *mut *mut aclTensorDesc,
    outputs: *mut *mut aclDataBuffer,
    attr: *mut aclopAttr,
    _engine_type: aclopEngineType,
    compile_flag: aclopCompileType,
    _op_path: *const c_char,
    _stream: aclrtStream,
) -> aclError {
    if !compile_type_supported(compile_flag) {
        return ACL_ERROR_API_NOT_SUPPORT;
    }
    let operands = Operands { num_inputs, input_desc, inputs, num_outputs, output_desc, outputs };
    // SAFETY: forwarded from this function's contract.
    unsafe { launch("aclopCompileAndExecuteV2", op_type, operands, attr) }
}

/// The vendor's check (hicann/ge `api/acl/acl_op_compiler/single_op/op_compiler.cpp` `CheckInput`): any
/// other compile type is ACL_ERROR_API_NOT_SUPPORT.
fn compile_type_supported(compile_flag: aclopCompileType) -> bool {
    compile_flag == ACL_COMPILE_SYS || compile_flag == ACL_COMPILE_UNREGISTERED
}

/// The operand arrays of one launch, as the caller passed them.
struct Operands {
    num_inputs: i32,
    input_desc: *mut *mut aclTensorDesc,
    inputs: *mut *mut aclDataBuffer,
    num_outputs: i32,
    output_desc: *mut *mut aclTensorDesc,
    outputs: *mut *mut aclDataBuffer,
}

/// The device of an initialized runtime, which every launch needs.
fn ready_device() -> Result<i32, aclError> {
    let (initialized, device) = state::with(|rt| (rt.initialized, rt.device));
    if !initialized {
        return Err(ACL_ERROR_UNINITIALIZE);
    }
    device.ok_or(ACL_ERROR_INVALID_DEVICE)
}

/// The op a call describes: its type, its descriptions and attribute (NULL: none), looked up in their
/// tables. A NULL or empty type, a NULL array or a handle not in its table is ACL_ERROR_INVALID_PARAM.
///
/// # Safety
/// `op_type` is NULL or NUL-terminated; each array is NULL or holds its count of handles; all valid for the
/// call.
unsafe fn describe(
    op_type: *const c_char,
    num_inputs: i32,
    input_desc: *mut *mut aclTensorDesc,
    num_outputs: i32,
    output_desc: *mut *mut aclTensorDesc,
    attr: *mut aclopAttr,
) -> Result<Described, aclError> {
    // SAFETY: forwarded from this function's contract.
    let op_type = unsafe { c_str(op_type) }.filter(|t| !t.is_empty()).ok_or(ACL_ERROR_INVALID_PARAM)?;
    // SAFETY: forwarded from this function's contract.
    let (Some(in_desc), Some(out_desc)) =
        (unsafe { (handles(num_inputs, input_desc), handles(num_outputs, output_desc)) })
    else {
        return Err(ACL_ERROR_INVALID_PARAM);
    };
    with(|t| {
        let descs = |hs: &[usize]| hs.iter().map(|h| t.descs.get(h).cloned()).collect::<Option<Vec<_>>>();
        let attr = if attr.is_null() { Some(Attr::default()) } else { t.attrs.get(&attr.addr()).cloned() };
        match (descs(&in_desc), descs(&out_desc), attr) {
            (Some(inputs), Some(outputs), Some(attr)) => Ok(Described { op_type, inputs, outputs, attr }),
            _ => Err(ACL_ERROR_INVALID_PARAM),
        }
    })
}

/// One single-op launch through `entry` (the export called, for messages) of the op the call describes.
///
/// # Safety
/// `op_type` is NULL or NUL-terminated; each array is NULL or holds its count of handles; all valid for the
/// call.
unsafe fn launch(entry: &str, op_type: *const c_char, operands: Operands, attr: *mut aclopAttr) -> aclError {
    let Operands { num_inputs, input_desc, inputs, num_outputs, output_desc, outputs } = operands;
    guard(entry, || {
        let device_id = match ready_device() {
            Ok(id) => id,
            Err(code) => return code,
        };
        // SAFETY: forwarded from this function's contract.
        let op = match unsafe { describe(op_type, num_inputs, input_desc, num_outputs, output_desc, attr) } {
            Ok(op) => op,
            Err(code) => return code,
        };
        // SAFETY: forwarded from this function's contract.
        let (Some(in_buf), Some(out_buf)) =
            (unsafe { (handles(num_inputs, inputs), handles(num_outputs, outputs)) })
        else {
            return ACL_ERROR_INVALID_PARAM;
        };
        run(entry, device_id, op, &in_buf, &out_buf)
    })
}

/// Runs `op` on these buffers (as many as its descriptions): the launch every entry point makes.
fn run(entry: &str, device_id: i32, op: Described, in_buf: &[usize], out_buf: &[usize]) -> aclError {
    let Described { op_type, inputs: in_desc, outputs: out_desc, attr } = op;
    let read = |kind: &str, descs: &[Desc], bufs: &[usize]| -> Result<Vec<Operand>, String> {
        descs.iter().zip(bufs).enumerate().map(|(i, (d, &b))| operand(&format!("{kind} {i}"), d, b)).collect()
    };
    let (ins, outs) = match (read("input", &in_desc, in_buf), read("output", &out_desc, out_buf)) {
        (Ok(i), Ok(o)) => (i, o),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("sim-ascendcl: {entry}({op_type}): {e}");
            return ACL_ERROR_INVALID_PARAM;
        }
    };
    let (task_id, op_name) = with(|t| {
        let n = t.launches.entry(op_type.clone()).or_insert(0);
        let name = format!("{op_type}_{n}");
        *n += 1;
        t.next_task = t.next_task.wrapping_add(1);
        (t.next_task, name)
    });
    let status = attr.ints.get(OVERFLOW_STATUS_ATTR).map_or(0, |&s| s as u64);
    if status != 0 {
        overflow::record(status);
    }
    let target = state::with(|rt| {
        rt.dump.clone().filter(|c| c.dumps_single_ops()).map(|cfg| SingleOpTarget {
            cfg,
            device_id,
            session_dir: rt.session_dir.clone(),
            opdebug_layout: overflow::layout_from_env(),
            delivery: match state::callback() {
                Some(cb) => Delivery::Callback(cb),
                None => Delivery::Disk,
            },
        })
    });
    // The op's dump is made when the device runs it: at once, or later in asynchronous mode (`stream`).
    let work = target.map(|target| -> crate::stream::Work {
        Box::new(move || dump_launch(&target, &op_type, &op_name, &ins, &outs, status, task_id))
    });
    crate::stream::launch(work);
    ACL_SUCCESS
}

/// Dumps one launch in the single-op layout.
fn dump_launch(
    target: &SingleOpTarget,
    op_type: &str,
    op_name: &str,
    ins: &[Operand],
    outs: &[Operand],
    status: u64,
    task_id: u32,
) {
    fn view(o: &Operand) -> TensorView<'_> {
        TensorView {
            dtype: o.dtype,
            format: o.format,
            device_shape: o.device_shape.clone(),
            original_shape: o.original_shape.clone(),
            bytes: &o.bytes,
            original_op: None,
        }
    }
    let event = OpEvent {
        op_type,
        op_name,
        inputs: ins.iter().map(view).collect(),
        outputs: outs.iter().map(view).collect(),
        overflow_status: status,
    };
    dump_single_op(target, &event, task_id);
}

/// Compile-time check that every export has the exact signature of `accutrace_acl.h`.
#[allow(dead_code)]
const SIGNATURES: () = {
    let _: AclCreateTensorDescFn = aclCreateTensorDesc;
    let _: AclDestroyTensorDescFn = aclDestroyTensorDesc;
    let _: AclSetTensorStorageFormatFn = aclSetTensorStorageFormat;
    let _: AclSetTensorStorageShapeFn = aclSetTensorStorageShape;
    let _: AclopCreateAttrFn = aclopCreateAttr;
    let _: AclopDestroyAttrFn = aclopDestroyAttr;
    let _: AclopSetAttrIntFn = aclopSetAttrInt;
    let _: AclopSetAttrStringFn = aclopSetAttrString;
    let _: AclopExecuteV2Fn = aclopExecuteV2;
    let _: AclopExecuteFn = aclopExecute;
    let _: AclopCreateHandleFn = aclopCreateHandle;
    let _: AclopDestroyHandleFn = aclopDestroyHandle;
    let _: AclopExecWithHandleFn = aclopExecWithHandle;
    let _: AclopCompileAndExecuteFn = aclopCompileAndExecute;
    let _: AclopCompileAndExecuteV2Fn = aclopCompileAndExecuteV2;
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_keeps_its_op_after_the_descriptions_go_and_checks_the_launch_s_counts() {
        let null: *mut std::ffi::c_void = std::ptr::null_mut();
        let dims = [2i64, 3];
        // SAFETY: `dims` holds the 2 dims passed; the arrays below hold the counts passed; every handle is
        // this test's.
        unsafe {
            let input = aclCreateTensorDesc(ACL_FLOAT, 2, dims.as_ptr(), ACL_FORMAT_ND);
            let output = aclCreateTensorDesc(ACL_FLOAT, 2, dims.as_ptr(), ACL_FORMAT_ND);
            let (ins, outs) = ([input.cast_const()], [output.cast_const()]);
            let mut handle: *mut aclopHandle = null.cast();
            let code = aclopCreateHandle(
                c"Relu".as_ptr(),
                1,
                ins.as_ptr(),
                1,
                outs.as_ptr(),
                std::ptr::null(),
                &mut handle,
            );
            assert_eq!(code, ACL_SUCCESS);
            assert!(!handle.is_null());
            // The vendor's handle holds its own copy: the caller's descriptions may go.
            aclDestroyTensorDesc(input);
            aclDestroyTensorDesc(output);
            assert!(with(|t| t.op_handles.get(&handle.addr()).is_some_and(|op| op.op_type == "Relu")));
            let buffers = [null.cast_const().cast::<aclDataBuffer>(); 2];
            let out_buffers = [null.cast::<aclDataBuffer>(); 2];
            let exec = |n_in, n_out| {
                aclopExecWithHandle(handle, n_in, buffers.as_ptr(), n_out, out_buffers.as_ptr(), null)
            };
            assert_eq!(exec(2, 1), ACL_ERROR_OP_INPUT_NOT_MATCH);
            assert_eq!(exec(1, 2), ACL_ERROR_OP_OUTPUT_NOT_MATCH);
            assert_eq!(exec(-1, 1), ACL_ERROR_INVALID_PARAM);
            aclopDestroyHandle(handle);
            // A destroyed handle is refused, never used.
            assert_eq!(exec(1, 1), ACL_ERROR_INVALID_PARAM);
            let code = aclopCreateHandle(
                std::ptr::null(),
                0,
                std::ptr::null(),
                0,
                std::ptr::null(),
                std::ptr::null(),
                &mut handle,
            );
            assert_eq!(code, ACL_ERROR_INVALID_PARAM, "no op type");
            let code = aclopCreateHandle(
                c"Relu".as_ptr(),
                0,
                std::ptr::null(),
                0,
                std::ptr::null(),
                std::ptr::null(),
                null.cast(),
            );
            assert_eq!(code, ACL_ERROR_INVALID_PARAM, "nowhere to write the handle");
        }
    }
}
