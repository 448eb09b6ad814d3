//! Pins the ABI facts the collector and the simulated runtime both depend on (docs/CANN.md §3): if the
//! header or a regenerated bindings.rs drifts, this fails before any chunk is misread.

use ascend_sys::*;
use std::mem::{align_of, offset_of, size_of};

#[test]
fn acldump_chunk_layout_is_lp64() {
    assert_eq!(size_of::<acldumpChunk>(), 4120);
    assert_eq!(align_of::<acldumpChunk>(), 8);
    assert_eq!(offset_of!(acldumpChunk, fileName), 0);
    assert_eq!(offset_of!(acldumpChunk, bufLen), 4096);
    assert_eq!(offset_of!(acldumpChunk, isLastChunk), 4100);
    assert_eq!(offset_of!(acldumpChunk, offset), 4104);
    assert_eq!(offset_of!(acldumpChunk, flag), 4112);
    assert_eq!(offset_of!(acldumpChunk, dataBuf), 4116);
    assert_eq!(ACLDUMP_CHUNK_HEADER_LEN, 4120);
    assert_eq!(ACLDUMP_CHUNK_DATA_OFFSET, 4116);
    assert_eq!(ACL_DUMP_MAX_FILE_PATH_LENGTH, 4096);
    // c_char is i8 on x86_64 and u8 on aarch64: only its size is fixed.
    assert_eq!(size_of::<core::ffi::c_char>(), 1);
    assert_eq!(size_of::<aclError>(), 4);
    assert_eq!(size_of::<aclrtFloatOverflowMode>(), 4);
    assert_eq!(size_of::<aclrtStream>(), size_of::<usize>());
    // A nullable callback is one pointer, as the C ABI passes it.
    assert_eq!(size_of::<Option<AcldumpCallbackFn>>(), size_of::<usize>());
}

#[test]
fn constants_have_the_public_values() {
    assert_eq!(ACL_SUCCESS, 0);
    assert_eq!(ACL_ERROR_NONE, 0);
    assert_eq!(ACL_ERROR_INVALID_PARAM, 100000);
    assert_eq!(ACL_ERROR_UNINITIALIZE, 100001);
    assert_eq!(ACL_ERROR_REPEAT_INITIALIZE, 100002);
    assert_eq!(ACL_ERROR_INVALID_FILE, 100003);
    assert_eq!(ACL_ERROR_WRITE_FILE, 100004);
    assert_eq!(ACL_ERROR_INVALID_FILE_SIZE, 100005);
    assert_eq!(ACL_ERROR_PARSE_FILE, 100006);
    assert_eq!(ACL_ERROR_INVALID_DUMP_CONFIG, 100009);
    assert_eq!(ACL_ERROR_INVALID_MODEL_ID, 100011);
    assert_eq!(ACL_ERROR_PARSE_MODEL, 100013);
    assert_eq!(ACL_ERROR_READ_MODEL_FAILURE, 100014);
    assert_eq!(ACL_ERROR_REPEAT_FINALIZE, 100037);
    assert_eq!(ACL_ERROR_DUMP_ALREADY_RUN, 100044);
    assert_eq!(ACL_ERROR_DUMP_NOT_RUN, 100045);
    assert_eq!(ACL_ERROR_BAD_ALLOC, 200000);
    assert_eq!(ACL_ERROR_API_NOT_SUPPORT, 200001);
    assert_eq!(ACL_ERROR_INVALID_DEVICE, 200002);
    assert_eq!(ACL_ERROR_INTERNAL_ERROR, 500000);
    assert_eq!(ACL_ERROR_FAILURE, 500001);
    assert_eq!(ACL_RT_OVERFLOW_MODE_SATURATION, 0);
    assert_eq!(ACL_RT_OVERFLOW_MODE_INFNAN, 1);
    assert_eq!(ACL_RT_OVERFLOW_MODE_UNDEF, 2);
    assert_eq!(ACLDUMP_OFFSET_APPEND, -1);
    assert_eq!(ACL_OVERFLOW_STATUS_SIZE, 64);
    assert_eq!(error_name(100002), "ACL_ERROR_REPEAT_INITIALIZE");
}

#[test]
fn loader_reports_failures_by_name() {
    // Nothing named libascendcl.so is loaded into this test binary.
    assert!(matches!(AclLibrary::attach_loaded(), Err(LoadError::NotLoaded)));

    let err = AclLibrary::from_path("/nonexistent/libascendcl.so").unwrap_err();
    assert!(matches!(err, LoadError::Open { .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent/libascendcl.so"));

    // A real library without any ACL symbol: loading works, every entry point is missing by name.
    let lib = AclLibrary::from_path("libc.so.6").expect("libc loads");
    assert_eq!(lib.fns.missing().len(), 32);
    let err = lib.acldump_reg_callback().unwrap_err();
    assert!(err.to_string().contains("acldumpRegCallback"), "{err}");
    assert!(lib.runtime_path().is_none());
}

#[test]
fn library_path_of_finds_the_defining_object() {
    let path =
        library_path_of(libc::malloc as *const core::ffi::c_void).expect("malloc is in a loaded object");
    assert!(path.to_string_lossy().contains("libc"), "{}", path.display());
    assert!(library_path_of(core::ptr::null()).is_none());
}

#[test]
fn hccl_abi_facts() {
    use ascend_sys::hccl::*;
    assert_eq!(size_of::<HcclRootInfo>(), 4108);
    assert_eq!(ROOT_INFO_LEN, 4108);
    assert_eq!(size_of::<HcclComm>(), size_of::<usize>());
    assert_eq!(size_of::<HcclResult>(), 4);
    assert_eq!((HCCL_REDUCE_SUM, HCCL_REDUCE_PROD, HCCL_REDUCE_MAX, HCCL_REDUCE_MIN), (0, 1, 2, 3));
    assert_eq!((HCCL_DATA_TYPE_FP16, HCCL_DATA_TYPE_FP32, HCCL_DATA_TYPE_BFP16), (3, 4, 11));
    assert_eq!((HCCL_E_PARA, HCCL_E_TIMEOUT), (1, 9));
    assert_eq!(COMM_NAME_MAX_LENGTH, 128);
    assert_eq!(result_name(HCCL_E_TIMEOUT), "HCCL_E_TIMEOUT");
    assert_eq!(reduce_op_name(HCCL_REDUCE_MAX), Some("max"));
    assert_eq!(reduce_op_name(7), None);
    // The memory-copy kinds and allocation policies of acl_rt.h.
    assert_eq!((ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_HOST), (1, 2));
    assert_eq!(ACL_MEM_MALLOC_HUGE_FIRST, 0);
}
