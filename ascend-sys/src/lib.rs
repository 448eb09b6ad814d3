//! The part of CANN's AscendCL C ABI that accutrace touches, and a loader for it.
//!
//! - Types, constants and the `acldumpChunk` layout come from `include/accutrace_acl.h` through the
//!   committed bindgen output in `src/bindings.rs` (regenerate with `scripts/regen-bindings`).
//! - [`fns`] has one Rust function-pointer alias per ACL entry point, for `dlsym` results and for
//!   implementations (the simulated runtime) to check their signatures against.
//! - [`hccl`]: the same for HCCL (`include/accutrace_hccl.h`, `libhccl.so`): types, constants and one
//!   function-pointer alias per entry point.
//! - [`loader`] finds or attaches to `libascendcl.so` / `libascend_dump.so` at run time; nothing here links
//!   against CANN, so the crate builds on machines without it.

pub mod chunk;
pub mod fns;
pub mod hccl;
pub mod loader;

/// bindgen output for `include/accutrace_acl.h`. Its `extern "C"` declarations are never linked by this
/// crate (there is no `#[link]`); callers resolve the functions through [`loader::AclLibrary`] instead.
#[allow(non_camel_case_types, non_snake_case, non_upper_case_globals, dead_code, clippy::all)]
// Generated code: its `unsafe fn` bodies and blocks are bindgen's, not ours to annotate.
#[allow(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
pub mod bindings {
    include!("bindings.rs");
}

pub use bindings::{
    aclDataBuffer, aclDataType, aclError, aclFormat, aclSysParamOpt, aclTensorDesc, acldumpCallback,
    acldumpChunk, aclmdlDataset, aclopAttr, aclopCompileType, aclopEngineType, aclopHandle,
    aclrtFloatOverflowMode, aclrtMemMallocPolicy, aclrtMemcpyKind, aclrtStream, ACL_BF16, ACL_BOOL,
    ACL_COMPILE_SYS, ACL_COMPILE_UNREGISTERED, ACL_DOUBLE, ACL_DT_UNDEFINED, ACL_DUMP_MAX_FILE_PATH_LENGTH,
    ACL_ENGINE_AICORE, ACL_ENGINE_SYS, ACL_ENGINE_VECTOR, ACL_ERROR_API_NOT_SUPPORT, ACL_ERROR_BAD_ALLOC,
    ACL_ERROR_DUMP_ALREADY_RUN, ACL_ERROR_DUMP_NOT_RUN, ACL_ERROR_FAILURE, ACL_ERROR_INTERNAL_ERROR,
    ACL_ERROR_INVALID_DEVICE, ACL_ERROR_INVALID_DUMP_CONFIG, ACL_ERROR_INVALID_FILE,
    ACL_ERROR_INVALID_FILE_SIZE, ACL_ERROR_INVALID_MODEL_ID, ACL_ERROR_INVALID_PARAM, ACL_ERROR_NONE,
    ACL_ERROR_OP_INPUT_NOT_MATCH, ACL_ERROR_OP_OUTPUT_NOT_MATCH, ACL_ERROR_PARSE_FILE, ACL_ERROR_PARSE_MODEL,
    ACL_ERROR_READ_MODEL_FAILURE, ACL_ERROR_REPEAT_FINALIZE, ACL_ERROR_REPEAT_INITIALIZE,
    ACL_ERROR_UNINITIALIZE, ACL_ERROR_WRITE_FILE, ACL_FLOAT, ACL_FLOAT16, ACL_FORMAT_FRACTAL_NZ,
    ACL_FORMAT_FRACTAL_Z, ACL_FORMAT_NC1HWC0, ACL_FORMAT_NCHW, ACL_FORMAT_ND, ACL_FORMAT_NHWC,
    ACL_FORMAT_UNDEFINED, ACL_INT16, ACL_INT32, ACL_INT64, ACL_INT8, ACL_MEMCPY_DEVICE_TO_DEVICE,
    ACL_MEMCPY_DEVICE_TO_HOST, ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_HOST_TO_HOST, ACL_MEM_MALLOC_HUGE_FIRST,
    ACL_MEM_MALLOC_HUGE_ONLY, ACL_MEM_MALLOC_NORMAL_ONLY, ACL_OPT_DETERMINISTIC, ACL_OPT_ENABLE_DEBUG_KERNEL,
    ACL_RT_OVERFLOW_MODE_INFNAN, ACL_RT_OVERFLOW_MODE_SATURATION, ACL_RT_OVERFLOW_MODE_UNDEF, ACL_SUCCESS,
    ACL_UINT16, ACL_UINT32, ACL_UINT64, ACL_UINT8,
};
pub use fns::*;
pub use loader::{library_path_of, AclLibrary, LoadError};

/// `sizeof(acldumpChunk)` under LP64: the fixed header before `dataBuf`. A callback's `len` argument is
/// this plus `bufLen`.
pub const ACLDUMP_CHUNK_HEADER_LEN: usize = core::mem::size_of::<acldumpChunk>();

/// Offset of `dataBuf` inside `acldumpChunk` (4116: the payload starts before the struct's tail padding).
pub const ACLDUMP_CHUNK_DATA_OFFSET: usize = core::mem::offset_of!(acldumpChunk, dataBuf);

/// The `offset` value meaning "append to the file" (the only one the dump producer is known to send).
pub const ACLDUMP_OFFSET_APPEND: i64 = -1;

/// Size of the device buffer (aclrtMalloc'd, not host memory) `aclrtGetOverflowStatus` copies the status
/// into, as the runtime's documentation fixes it (hicann/runtime `docs/zh/api_ref/04_device_management.md`).
pub const ACL_OVERFLOW_STATUS_SIZE: usize = 64;

/// A readable name for an ACL error code, for log lines (`ACL_ERROR_REPEAT_INITIALIZE(100002)`).
pub fn error_name(code: aclError) -> &'static str {
    match code {
        ACL_SUCCESS => "ACL_SUCCESS",
        ACL_ERROR_INVALID_PARAM => "ACL_ERROR_INVALID_PARAM",
        ACL_ERROR_UNINITIALIZE => "ACL_ERROR_UNINITIALIZE",
        ACL_ERROR_REPEAT_INITIALIZE => "ACL_ERROR_REPEAT_INITIALIZE",
        ACL_ERROR_INVALID_FILE => "ACL_ERROR_INVALID_FILE",
        ACL_ERROR_WRITE_FILE => "ACL_ERROR_WRITE_FILE",
        ACL_ERROR_INVALID_FILE_SIZE => "ACL_ERROR_INVALID_FILE_SIZE",
        ACL_ERROR_PARSE_FILE => "ACL_ERROR_PARSE_FILE",
        ACL_ERROR_INVALID_DUMP_CONFIG => "ACL_ERROR_INVALID_DUMP_CONFIG",
        ACL_ERROR_INVALID_MODEL_ID => "ACL_ERROR_INVALID_MODEL_ID",
        ACL_ERROR_PARSE_MODEL => "ACL_ERROR_PARSE_MODEL",
        ACL_ERROR_READ_MODEL_FAILURE => "ACL_ERROR_READ_MODEL_FAILURE",
        ACL_ERROR_REPEAT_FINALIZE => "ACL_ERROR_REPEAT_FINALIZE",
        ACL_ERROR_DUMP_ALREADY_RUN => "ACL_ERROR_DUMP_ALREADY_RUN",
        ACL_ERROR_DUMP_NOT_RUN => "ACL_ERROR_DUMP_NOT_RUN",
        ACL_ERROR_BAD_ALLOC => "ACL_ERROR_BAD_ALLOC",
        ACL_ERROR_API_NOT_SUPPORT => "ACL_ERROR_API_NOT_SUPPORT",
        ACL_ERROR_INVALID_DEVICE => "ACL_ERROR_INVALID_DEVICE",
        ACL_ERROR_INTERNAL_ERROR => "ACL_ERROR_INTERNAL_ERROR",
        ACL_ERROR_FAILURE => "ACL_ERROR_FAILURE",
        _ => "ACL_ERROR_(unknown)",
    }
}
