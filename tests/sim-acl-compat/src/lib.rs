//! A forwarding compatibility library (test only): `aclInit`, `aclFinalize`, `aclmdlExecute`,
//! `acldumpRegCallback`, the settings `aclrtCtxSetSysParamOpt` and `aclrtSetDeviceSatMode`, and the single-op
//! launches (`aclopExecuteV2`, `aclopCompileAndExecute`, `aclopCompileAndExecuteV2`, `aclopExecute`,
//! `aclopExecWithHandle`) are wrappers that find
//! the function they forward to through the global scope, `dlsym(RTLD_DEFAULT, name)`, skipping only their
//! own definition, as a compatibility `libascendcl.so` calling the split runtime through its PLT would. Loaded
//! before the runtime with the collector preloaded, that lookup finds the collector's export again, whose
//! next definition is this wrapper: the shape that recursed without end (docs/COLLECTOR.md).
//!
//! The same wrappers of the HCCL entry points a job calls make it a shim `libhccl.so` too (`src/hccl.rs`).
//!
//! `SIM_ACL_COMPAT_TRACE=1` prints one stderr line per forwarded call, so a test can see the wrapper was on
//! the path.

mod hccl;

use ascend_sys::{
    aclDataBuffer, aclError, aclSysParamOpt, aclTensorDesc, aclmdlDataset, aclopAttr, aclopCompileType,
    aclopEngineType, aclopHandle, aclrtFloatOverflowMode, aclrtStream, AclFinalizeFn, AclInitFn,
    AcldumpCallbackFn, AcldumpRegCallbackFn, AclmdlExecuteFn, AclopCompileAndExecuteFn,
    AclopCompileAndExecuteV2Fn, AclopExecWithHandleFn, AclopExecuteFn, AclopExecuteV2Fn,
    AclrtCtxSetSysParamOptFn, AclrtSetDeviceSatModeFn, ACL_ERROR_UNINITIALIZE,
};
use std::ffi::{c_char, c_void, CStr};

/// The object (its load address) that holds `addr`, 0 when none does.
fn object_of(addr: *const c_void) -> usize {
    // SAFETY: dladdr only reads the loader's tables into a zeroed Dl_info.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(addr, &mut info) != 0 {
            info.dli_fbase as usize
        } else {
            0
        }
    }
}

/// The definition the global scope gives for `name`; when that is this library's own (nothing that defines
/// it was loaded before), the next one after it. Our own address is told by the object, not by taking
/// `aclInit`'s address here: that reference binds through the global scope too, to an earlier definition.
pub(crate) fn target(name: &CStr) -> *mut c_void {
    // SAFETY: a NUL-terminated name and pseudo-handles: dlsym has no other requirement.
    unsafe {
        let found = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
        if object_of(found) != object_of(object_of as *const c_void) {
            return found;
        }
        libc::dlsym(libc::RTLD_NEXT, name.as_ptr())
    }
}

pub(crate) fn trace(name: &str) {
    if std::env::var_os("SIM_ACL_COMPAT_TRACE").is_some() {
        // One write per line: the ranks of a job share stderr, and a line written in pieces interleaves.
        let line = format!("acl-compat: {name} forwarded\n");
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }
}

/// Forwards to the global scope's `aclInit`.
///
/// # Safety
/// aclInit's contract: `config_path` is NULL or a NUL-terminated path.
#[no_mangle]
pub unsafe extern "C" fn aclInit(config_path: *const c_char) -> aclError {
    let f = target(c"aclInit");
    if f.is_null() {
        return ACL_ERROR_UNINITIALIZE;
    }
    trace("aclInit");
    // SAFETY: a definition of aclInit, of its C signature; the argument is our caller's.
    unsafe { std::mem::transmute::<*mut c_void, AclInitFn>(f)(config_path) }
}

/// Forwards to the global scope's `acldumpRegCallback`.
///
/// # Safety
/// acldumpRegCallback's contract: `cb` is NULL or a function of the acldumpCallback signature.
#[no_mangle]
pub unsafe extern "C" fn acldumpRegCallback(cb: Option<AcldumpCallbackFn>, flag: i32) -> aclError {
    let f = target(c"acldumpRegCallback");
    if f.is_null() {
        return ACL_ERROR_UNINITIALIZE;
    }
    trace("acldumpRegCallback");
    // SAFETY: a definition of acldumpRegCallback, of its C signature; the arguments are our caller's.
    unsafe { std::mem::transmute::<*mut c_void, AcldumpRegCallbackFn>(f)(cb, flag) }
}

/// Forwards to the global scope's `aclrtCtxSetSysParamOpt` (the deterministic option).
#[no_mangle]
pub extern "C" fn aclrtCtxSetSysParamOpt(opt: aclSysParamOpt, value: i64) -> aclError {
    let f = target(c"aclrtCtxSetSysParamOpt");
    if f.is_null() {
        return ACL_ERROR_UNINITIALIZE;
    }
    trace("aclrtCtxSetSysParamOpt");
    // SAFETY: a definition of aclrtCtxSetSysParamOpt, of its C signature; the arguments are our caller's.
    unsafe { std::mem::transmute::<*mut c_void, AclrtCtxSetSysParamOptFn>(f)(opt, value) }
}

/// Forwards to the global scope's `aclrtSetDeviceSatMode` (the overflow mode).
#[no_mangle]
pub extern "C" fn aclrtSetDeviceSatMode(mode: aclrtFloatOverflowMode) -> aclError {
    let f = target(c"aclrtSetDeviceSatMode");
    if f.is_null() {
        return ACL_ERROR_UNINITIALIZE;
    }
    trace("aclrtSetDeviceSatMode");
    // SAFETY: a definition of aclrtSetDeviceSatMode, of its C signature; the argument is our caller's.
    unsafe { std::mem::transmute::<*mut c_void, AclrtSetDeviceSatModeFn>(f)(mode) }
}

/// Forwards to the global scope's `aclFinalize`.
#[no_mangle]
pub extern "C" fn aclFinalize() -> aclError {
    let f = target(c"aclFinalize");
    if f.is_null() {
        return ACL_ERROR_UNINITIALIZE;
    }
    trace("aclFinalize");
    // SAFETY: a definition of aclFinalize, of its C signature; no arguments.
    unsafe { std::mem::transmute::<*mut c_void, AclFinalizeFn>(f)() }
}

/// Forwards to the global scope's `aclmdlExecute`.
///
/// # Safety
/// aclmdlExecute's contract: `input` and `output` are datasets the runtime accepts for `model_id`.
#[no_mangle]
pub unsafe extern "C" fn aclmdlExecute(
    model_id: u32,
    input: *const aclmdlDataset,
    output: *mut aclmdlDataset,
) -> aclError {
    let f = target(c"aclmdlExecute");
    if f.is_null() {
        return ACL_ERROR_UNINITIALIZE;
    }
    trace("aclmdlExecute");
    // SAFETY: a definition of aclmdlExecute, of its C signature; the arguments are our caller's.
    unsafe { std::mem::transmute::<*mut c_void, AclmdlExecuteFn>(f)(model_id, input, output) }
}

/// Forwards to the global scope's `aclopExecuteV2`.
///
/// # Safety
/// aclopExecuteV2's contract.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // the C signature
pub unsafe extern "C" fn aclopExecuteV2(
    op_type: *const c_char,
    num_inputs: i32,
    input_desc: *mut *mut aclTensorDesc,
    inputs: *mut *mut aclDataBuffer,
    num_outputs: i32,
    output_desc: *mut *mut aclTensorDesc,
    outputs: *mut *mut aclDataBuffer,
    attr: *mut aclopAttr,
    stream: aclrtStream,
) -> aclError {
    let f = target(c"aclopExecuteV2");
    if f.is_null() {
        return ACL_ERROR_UNINITIALIZE;
    }
    trace("aclopExecuteV2");
    // SAFETY: a definition of aclopExecuteV2, of its C signature; the arguments are our caller's.
    unsafe {
        std::mem::transmute::<*mut c_void, AclopExecuteV2Fn>(f)(
            op_type,
            num_inputs,
            input_desc,
            inputs,
            num_outputs,
            output_desc,
            outputs,
            attr,
            stream,
        )
    }
}

/// Forwards to the global scope's `aclopCompileAndExecute`.
///
/// # Safety
/// aclopCompileAndExecute's contract.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // the C signature
pub unsafe extern "C" fn aclopCompileAndExecute(
    op_type: *const c_char,
    num_inputs: i32,
    input_desc: *const *const aclTensorDesc,
    inputs: *const *const aclDataBuffer,
    num_outputs: i32,
    output_desc: *const *const aclTensorDesc,
    outputs: *const *mut aclDataBuffer,
    attr: *const aclopAttr,
    engine_type: aclopEngineType,
    compile_flag: aclopCompileType,
    op_path: *const c_char,
    stream: aclrtStream,
) -> aclError {
    let f = target(c"aclopCompileAndExecute");
    if f.is_null() {
        return ACL_ERROR_UNINITIALIZE;
    }
    trace("aclopCompileAndExecute");
    // SAFETY: a definition of aclopCompileAndExecute, of its C signature; the arguments are our caller's.
    unsafe {
        std::mem::transmute::<*mut c_void, AclopCompileAndExecuteFn>(f)(
            op_type,
            num_inputs,
            input_desc,
            inputs,
            num_outputs,
            output_desc,
            outputs,
            attr,
            engine_type,
            compile_flag,
            op_path,
            stream,
        )
    }
}

/// Forwards to the global scope's `aclopCompileAndExecuteV2`.
///
/// # Safety
/// aclopCompileAndExecuteV2's contract.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // the C signature
pub unsafe extern "C" fn aclopCompileAndExecuteV2(
    op_type: *const c_char,
    num_inputs: i32,
    input_desc: *mut *mut aclTensorDesc,
    inputs: *mut *mut aclDataBuffer,
    num_outputs: i32,
    output_desc: *mut *mut aclTensorDesc,
    outputs: *mut *mut aclDataBuffer,
    attr: *mut aclopAttr,
    engine_type: aclopEngineType,
    compile_flag: aclopCompileType,
    op_path: *const c_char,
    stream: aclrtStream,
) -> aclError {
    let f = target(c"aclopCompileAndExecuteV2");
    if f.is_null() {
        return ACL_ERROR_UNINITIALIZE;
    }
    trace("aclopCompileAndExecuteV2");
    // SAFETY: a definition of aclopCompileAndExecuteV2, of its C signature; the arguments are our caller's.
    unsafe {
        std::mem::transmute::<*mut c_void, AclopCompileAndExecuteV2Fn>(f)(
            op_type,
            num_inputs,
            input_desc,
            inputs,
            num_outputs,
            output_desc,
            outputs,
            attr,
            engine_type,
            compile_flag,
            op_path,
            stream,
        )
    }
}

/// Forwards to the global scope's `aclopExecute`.
///
/// # Safety
/// aclopExecute's contract.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // the C signature
pub unsafe extern "C" fn aclopExecute(
    op_type: *const c_char,
    num_inputs: i32,
    input_desc: *const *const aclTensorDesc,
    inputs: *const *const aclDataBuffer,
    num_outputs: i32,
    output_desc: *const *const aclTensorDesc,
    outputs: *const *mut aclDataBuffer,
    attr: *const aclopAttr,
    stream: aclrtStream,
) -> aclError {
    let f = target(c"aclopExecute");
    if f.is_null() {
        return ACL_ERROR_UNINITIALIZE;
    }
    trace("aclopExecute");
    // SAFETY: a definition of aclopExecute, of its C signature; the arguments are our caller's.
    unsafe {
        std::mem::transmute::<*mut c_void, AclopExecuteFn>(f)(
            op_type,
            num_inputs,
            input_desc,
            inputs,
            num_outputs,
            output_desc,
            outputs,
            attr,
            stream,
        )
    }
}

/// Forwards to the global scope's `aclopExecWithHandle` (the handle's creation is not wrapped: it launches
/// nothing).
///
/// # Safety
/// aclopExecWithHandle's contract.
#[no_mangle]
pub unsafe extern "C" fn aclopExecWithHandle(
    handle: *mut aclopHandle,
    num_inputs: i32,
    inputs: *const *const aclDataBuffer,
    num_outputs: i32,
    outputs: *const *mut aclDataBuffer,
    stream: aclrtStream,
) -> aclError {
    let f = target(c"aclopExecWithHandle");
    if f.is_null() {
        return ACL_ERROR_UNINITIALIZE;
    }
    trace("aclopExecWithHandle");
    // SAFETY: a definition of aclopExecWithHandle, of its C signature; the arguments are our caller's.
    unsafe {
        std::mem::transmute::<*mut c_void, AclopExecWithHandleFn>(f)(
            handle,
            num_inputs,
            inputs,
            num_outputs,
            outputs,
            stream,
        )
    }
}
