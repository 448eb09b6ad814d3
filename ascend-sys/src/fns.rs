//! One function-pointer type per ACL entry point accutrace touches (signatures of `accutrace_acl.h`).
//!
//! `Option<AclFooFn>` has the same ABI as a nullable C function pointer, which is how the dump callback is
//! passed to `acldumpRegCallback`.

use crate::bindings::{
    aclDataBuffer, aclDataType, aclError, aclFormat, aclSysParamOpt, aclTensorDesc, acldumpChunk,
    aclmdlDataset, aclopAttr, aclopCompileType, aclopEngineType, aclopHandle, aclrtFloatOverflowMode,
    aclrtMemMallocPolicy, aclrtMemcpyKind, aclrtStream,
};
use core::ffi::{c_char, c_void};

pub type AclInitFn = unsafe extern "C" fn(config_path: *const c_char) -> aclError;
pub type AclFinalizeFn = unsafe extern "C" fn() -> aclError;
pub type AclrtSetDeviceFn = unsafe extern "C" fn(device_id: i32) -> aclError;
pub type AclrtResetDeviceFn = unsafe extern "C" fn(device_id: i32) -> aclError;
pub type AclrtSynchronizeDeviceFn = unsafe extern "C" fn() -> aclError;
pub type AclrtSetDeviceSatModeFn = unsafe extern "C" fn(mode: aclrtFloatOverflowMode) -> aclError;
pub type AclrtGetDeviceSatModeFn = unsafe extern "C" fn(mode: *mut aclrtFloatOverflowMode) -> aclError;
pub type AclrtCtxSetSysParamOptFn = unsafe extern "C" fn(opt: aclSysParamOpt, value: i64) -> aclError;
pub type AclrtCtxGetSysParamOptFn = unsafe extern "C" fn(opt: aclSysParamOpt, value: *mut i64) -> aclError;
pub type AclrtGetOverflowStatusFn =
    unsafe extern "C" fn(output_addr: *mut c_void, output_size: usize, stream: aclrtStream) -> aclError;
pub type AclrtResetOverflowStatusFn = unsafe extern "C" fn(stream: aclrtStream) -> aclError;

pub type AclrtMallocFn =
    unsafe extern "C" fn(dev_ptr: *mut *mut c_void, size: usize, policy: aclrtMemMallocPolicy) -> aclError;
pub type AclrtFreeFn = unsafe extern "C" fn(dev_ptr: *mut c_void) -> aclError;
pub type AclrtMemcpyFn = unsafe extern "C" fn(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
) -> aclError;
pub type AclrtSynchronizeStreamFn = unsafe extern "C" fn(stream: aclrtStream) -> aclError;

pub type AclmdlCreateDatasetFn = unsafe extern "C" fn() -> *mut aclmdlDataset;
pub type AclmdlDestroyDatasetFn = unsafe extern "C" fn(dataset: *const aclmdlDataset) -> aclError;
pub type AclmdlAddDatasetBufferFn =
    unsafe extern "C" fn(dataset: *mut aclmdlDataset, buffer: *mut aclDataBuffer) -> aclError;
pub type AclmdlGetDatasetNumBuffersFn = unsafe extern "C" fn(dataset: *const aclmdlDataset) -> usize;
pub type AclmdlGetDatasetBufferFn =
    unsafe extern "C" fn(dataset: *const aclmdlDataset, index: usize) -> *mut aclDataBuffer;
pub type AclCreateDataBufferFn = unsafe extern "C" fn(data: *mut c_void, size: usize) -> *mut aclDataBuffer;
pub type AclDestroyDataBufferFn = unsafe extern "C" fn(buffer: *const aclDataBuffer) -> aclError;
pub type AclGetDataBufferAddrFn = unsafe extern "C" fn(buffer: *const aclDataBuffer) -> *mut c_void;
pub type AclGetDataBufferSizeV2Fn = unsafe extern "C" fn(buffer: *const aclDataBuffer) -> usize;

pub type AclmdlLoadFromFileFn =
    unsafe extern "C" fn(model_path: *const c_char, model_id: *mut u32) -> aclError;
pub type AclmdlExecuteFn =
    unsafe extern "C" fn(model_id: u32, input: *const aclmdlDataset, output: *mut aclmdlDataset) -> aclError;
pub type AclmdlUnloadFn = unsafe extern "C" fn(model_id: u32) -> aclError;

pub type AclCreateTensorDescFn = unsafe extern "C" fn(
    data_type: aclDataType,
    num_dims: i32,
    dims: *const i64,
    format: aclFormat,
) -> *mut aclTensorDesc;
pub type AclDestroyTensorDescFn = unsafe extern "C" fn(desc: *const aclTensorDesc);
pub type AclSetTensorStorageFormatFn =
    unsafe extern "C" fn(desc: *mut aclTensorDesc, format: aclFormat) -> aclError;
pub type AclSetTensorStorageShapeFn =
    unsafe extern "C" fn(desc: *mut aclTensorDesc, num_dims: i32, dims: *const i64) -> aclError;
pub type AclopCreateAttrFn = unsafe extern "C" fn() -> *mut aclopAttr;
pub type AclopDestroyAttrFn = unsafe extern "C" fn(attr: *const aclopAttr);
pub type AclopSetAttrIntFn =
    unsafe extern "C" fn(attr: *mut aclopAttr, name: *const c_char, value: i64) -> aclError;
pub type AclopSetAttrStringFn =
    unsafe extern "C" fn(attr: *mut aclopAttr, name: *const c_char, value: *const c_char) -> aclError;
pub type AclopExecuteV2Fn = unsafe extern "C" fn(
    op_type: *const c_char,
    num_inputs: i32,
    input_desc: *mut *mut aclTensorDesc,
    inputs: *mut *mut aclDataBuffer,
    num_outputs: i32,
    output_desc: *mut *mut aclTensorDesc,
    outputs: *mut *mut aclDataBuffer,
    attr: *mut aclopAttr,
    stream: aclrtStream,
) -> aclError;
/// The deprecated launch (acl_op.h): as [`AclopExecuteV2Fn`] with const arrays.
pub type AclopExecuteFn = unsafe extern "C" fn(
    op_type: *const c_char,
    num_inputs: i32,
    input_desc: *const *const aclTensorDesc,
    inputs: *const *const aclDataBuffer,
    num_outputs: i32,
    output_desc: *const *const aclTensorDesc,
    outputs: *const *mut aclDataBuffer,
    attr: *const aclopAttr,
    stream: aclrtStream,
) -> aclError;
/// Matches a single-op model once for an op type, its descriptions and attributes (acl_op.h).
pub type AclopCreateHandleFn = unsafe extern "C" fn(
    op_type: *const c_char,
    num_inputs: i32,
    input_desc: *const *const aclTensorDesc,
    num_outputs: i32,
    output_desc: *const *const aclTensorDesc,
    op_attr: *const aclopAttr,
    handle: *mut *mut aclopHandle,
) -> aclError;
pub type AclopDestroyHandleFn = unsafe extern "C" fn(handle: *mut aclopHandle);
/// Launches a handle's op on these buffers (acl_op.h).
pub type AclopExecWithHandleFn = unsafe extern "C" fn(
    handle: *mut aclopHandle,
    num_inputs: i32,
    inputs: *const *const aclDataBuffer,
    num_outputs: i32,
    outputs: *const *mut aclDataBuffer,
    stream: aclrtStream,
) -> aclError;
/// torch_npu's usual eager launch (acl_op_compiler.h): compiles the op when needed, then launches it.
pub type AclopCompileAndExecuteFn = unsafe extern "C" fn(
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
) -> aclError;
/// As [`AclopCompileAndExecuteFn`], with non-const arrays (the output descriptions may be updated).
pub type AclopCompileAndExecuteV2Fn = unsafe extern "C" fn(
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
) -> aclError;

// The single-op launches' (and the op handle's) aliases are the header's declarations: a mismatch does not
// compile. Nothing here links against them (the assignments are never called).
const _: () = {
    let _: AclopExecuteV2Fn = crate::bindings::aclopExecuteV2;
    let _: AclopExecuteFn = crate::bindings::aclopExecute;
    let _: AclopCreateHandleFn = crate::bindings::aclopCreateHandle;
    let _: AclopDestroyHandleFn = crate::bindings::aclopDestroyHandle;
    let _: AclopExecWithHandleFn = crate::bindings::aclopExecWithHandle;
    let _: AclopCompileAndExecuteFn = crate::bindings::aclopCompileAndExecute;
    let _: AclopCompileAndExecuteV2Fn = crate::bindings::aclopCompileAndExecuteV2;
};

pub type AclmdlInitDumpFn = unsafe extern "C" fn() -> aclError;
pub type AclmdlSetDumpFn = unsafe extern "C" fn(dump_cfg_path: *const c_char) -> aclError;
pub type AclmdlFinalizeDumpFn = unsafe extern "C" fn() -> aclError;

/// The dump callback itself: receives one chunk; `len` is `sizeof(acldumpChunk) + bufLen`.
pub type AcldumpCallbackFn = unsafe extern "C" fn(chunk: *const acldumpChunk, len: i32) -> i32;
pub type AcldumpRegCallbackFn = unsafe extern "C" fn(cb: Option<AcldumpCallbackFn>, flag: i32) -> aclError;
pub type AcldumpUnregCallbackFn = unsafe extern "C" fn();
