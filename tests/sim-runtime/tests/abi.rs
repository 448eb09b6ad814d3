//! ACL entry-point behaviour through the C ABI of the built libascendcl.so.

mod common;
use ascend_sys::*;
use common::*;

const OVERFLOW_MODEL: &str = r#"{"model_name": "ovf", "n_layers": 1, "faults": {"overflow": {"op": "model/layer_0/mlp/fc1/MatMul", "step": 1}}}"#;

#[test]
fn init_and_finalize_codes() {
    let _g = serial();
    assert_eq!(init(None), ACL_SUCCESS);
    assert_eq!(init(None), ACL_ERROR_REPEAT_INITIALIZE);
    assert_eq!(set_device(-1), ACL_ERROR_INVALID_PARAM);
    assert_eq!(set_device(0), ACL_SUCCESS);
    assert_eq!(synchronize(), ACL_SUCCESS);
    assert_eq!(finalize(), ACL_SUCCESS);
    assert_eq!(finalize(), ACL_ERROR_REPEAT_FINALIZE);
    // Everything that needs an initialised runtime says so.
    assert_eq!(set_device(0), ACL_ERROR_UNINITIALIZE);
    assert_eq!(init_dump(), ACL_ERROR_UNINITIALIZE);
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(load(&write(dir.path(), "m.json", "{}")).0, ACL_ERROR_UNINITIALIZE);
}

#[test]
fn init_config_errors() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(init(Some(&dir.path().join("missing.json"))), ACL_ERROR_INVALID_FILE);
    assert_eq!(init(Some(&write(dir.path(), "bad.json", "{"))), ACL_ERROR_PARSE_FILE);
    // A dump section without dump_path is refused; an empty one sets nothing, as CANN's converter has it.
    assert_eq!(
        init(Some(&write(dir.path(), "nopath.json", r#"{"dump": {"dump_mode": "all"}}"#))),
        ACL_ERROR_INVALID_DUMP_CONFIG
    );
    assert_eq!(init(Some(&write(dir.path(), "nodump.json", r#"{"dump": {}}"#))), ACL_SUCCESS);
    assert_eq!(finalize(), ACL_SUCCESS);
    // A config without a dump section is fine.
    assert_eq!(init(Some(&write(dir.path(), "empty.json", "{}"))), ACL_SUCCESS);
    assert_eq!(finalize(), ACL_SUCCESS);
}

#[test]
fn dump_api_codes() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "d.json",
        &format!(r#"{{"dump": {{"dump_path": "{}", "dump_op_switch": "on"}}}}"#, dir.path().display()),
    );
    assert_eq!(init(None), ACL_SUCCESS);
    // adump's answers (hicann/runtime src/dfx/adump/adump/host/adx_datadump_callback.cpp).
    assert_eq!(reg_callback(1), ACL_ERROR_FAILURE);
    // SAFETY: the pointer comes from the loaded library; a null callback is a documented invalid argument.
    assert_eq!(unsafe { lib().acldump_reg_callback().unwrap()(None, 0) }, ACL_ERROR_FAILURE);
    assert_eq!(reg_callback(0), ACL_SUCCESS);
    assert_eq!(set_dump(&cfg), ACL_ERROR_DUMP_NOT_RUN);
    assert_eq!(finalize_dump(), ACL_ERROR_DUMP_NOT_RUN);
    assert_eq!(init_dump(), ACL_SUCCESS);
    // A second aclmdlInitDump before aclmdlFinalizeDump is refused (src/acl/aclrt_impl/toolchain/dump.cpp).
    assert_eq!(init_dump(), ACL_ERROR_REPEAT_INITIALIZE);
    assert_eq!(set_dump(&dir.path().join("missing.json")), ACL_ERROR_INVALID_FILE);
    // Nothing to set (no dump section; NeedDump turning a valid section down) is success, as on CANN.
    assert_eq!(set_dump(&write(dir.path(), "x.json", "{}")), ACL_SUCCESS);
    let old = format!(r#"{{"dump": {{"dump_path": "{}", "dump_list": []}}}}"#, dir.path().display());
    assert_eq!(set_dump(&write(dir.path(), "old.json", &old)), ACL_SUCCESS);
    let bad = format!(r#"{{"dump": {{"dump_path": "{}", "dump_mode": "both"}}}}"#, dir.path().display());
    assert_eq!(set_dump(&write(dir.path(), "bad.json", &bad)), ACL_ERROR_INVALID_DUMP_CONFIG);
    assert_eq!(set_dump(&cfg), ACL_SUCCESS);
    assert_eq!(finalize_dump(), ACL_SUCCESS);
    unreg_callback();
    assert_eq!(finalize(), ACL_SUCCESS);
    assert!(take_chunks().is_empty());
}

#[test]
fn sat_mode_round_trip() {
    let _g = serial();
    assert_eq!(init(None), ACL_SUCCESS);
    assert_eq!(get_sat_mode(), (ACL_SUCCESS, ACL_RT_OVERFLOW_MODE_INFNAN));
    assert_eq!(set_sat_mode(ACL_RT_OVERFLOW_MODE_SATURATION), ACL_SUCCESS);
    assert_eq!(get_sat_mode(), (ACL_SUCCESS, ACL_RT_OVERFLOW_MODE_SATURATION));
    assert_eq!(set_sat_mode(ACL_RT_OVERFLOW_MODE_UNDEF), ACL_ERROR_INVALID_PARAM);
    assert_eq!(set_sat_mode(77), ACL_ERROR_INVALID_PARAM);
    assert_eq!(get_sat_mode().1, ACL_RT_OVERFLOW_MODE_SATURATION);
    assert_eq!(set_sat_mode(ACL_RT_OVERFLOW_MODE_INFNAN), ACL_SUCCESS);
    assert_eq!(get_sat_mode().1, ACL_RT_OVERFLOW_MODE_INFNAN);
    assert_eq!(
        // SAFETY: a null output pointer is a documented invalid argument.
        unsafe { lib().aclrt_get_device_sat_mode().unwrap()(std::ptr::null_mut()) },
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(finalize(), ACL_SUCCESS);
}

#[test]
fn overflow_status_is_set_by_the_faulty_step_and_cleared_by_reset() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = write(dir.path(), "m.json", OVERFLOW_MODEL);
    assert_eq!(init(None), ACL_SUCCESS);
    assert_eq!(set_device(0), ACL_SUCCESS);
    let (rc, id) = load(&model);
    assert_eq!(rc, ACL_SUCCESS);
    assert_eq!(execute(id), ACL_SUCCESS);
    assert_eq!(overflow_status(), (ACL_SUCCESS, 0), "step 0 has no fault");
    assert_eq!(execute(id), ACL_SUCCESS);
    let (rc, status) = overflow_status();
    assert_eq!(rc, ACL_SUCCESS);
    assert_ne!(status, 0, "step 1 overflows");
    assert_eq!(reset_overflow_status(), ACL_SUCCESS);
    assert_eq!(overflow_status().1, 0);
    // A buffer too small for the status word is refused.
    let mut small = [0u8; 4];
    // SAFETY: `small` is writable for its length, which the call is told.
    let rc = unsafe {
        lib().aclrt_get_overflow_status().unwrap()(small.as_mut_ptr().cast(), 4, std::ptr::null_mut())
    };
    assert_eq!(rc, ACL_ERROR_INVALID_PARAM);
    assert_eq!(unload(id), ACL_SUCCESS);
    assert_eq!(unload(id), ACL_ERROR_INVALID_MODEL_ID);
    assert_eq!(execute(id), ACL_ERROR_INVALID_MODEL_ID);
    assert_eq!(finalize(), ACL_SUCCESS);
}

#[test]
fn model_file_errors() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(init(None), ACL_SUCCESS);
    assert_eq!(load(&dir.path().join("none.json")).0, ACL_ERROR_READ_MODEL_FAILURE);
    assert_eq!(load(&write(dir.path(), "bad.json", r#"{"no_such_key": 1}"#)).0, ACL_ERROR_PARSE_MODEL);
    let (rc, a) = load(&write(dir.path(), "ok.json", "{}"));
    assert_eq!(rc, ACL_SUCCESS);
    let (_, b) = load(&write(dir.path(), "ok2.json", "{}"));
    assert_ne!(a, b, "model ids are unique");
    assert_eq!(finalize(), ACL_SUCCESS);
}

#[test]
fn attach_finds_the_loaded_runtime_by_soname() {
    let _g = serial();
    let loaded = lib();
    let attached = AclLibrary::attach_loaded().expect("RTLD_NOLOAD finds libascendcl.so by its SONAME");
    assert!(attached.fns.missing().is_empty(), "{:?}", attached.fns.missing());
    let real = std::fs::canonicalize(cdylib_path()).unwrap();
    let found = std::fs::canonicalize(attached.runtime_path().unwrap()).unwrap();
    assert_eq!(found, real);
    assert_eq!(
        attached.fns.acl_init.map(|f| f as usize),
        loaded.fns.acl_init.map(|f| f as usize),
        "both handles resolve the same aclInit"
    );
}
