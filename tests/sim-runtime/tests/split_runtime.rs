//! The open-source runtime's library split (hicann/runtime `src/acl/aclrt/CMakeLists.txt`): `aclInit`, the
//! `aclrt*` calls and the dump configuration live in `libacl_rt.so`, `libascendcl.so` is a compatibility
//! library a framework may never load. Attaching must find the runtime under that name too.
//!
//! A binary of its own: no other test may have loaded the simulated runtime under its usual SONAME.

mod common;
use ascend_sys::loader::{ACL_RT_NAME, ASCENDCL_NAME};
use ascend_sys::AclLibrary;
use std::ffi::CString;

/// A copy of the simulated runtime whose SONAME is `libacl_rt.so` (the same length or shorter, so the name
/// is rewritten in place and the rest of the file is untouched).
fn runtime_renamed_acl_rt(dir: &std::path::Path) -> std::path::PathBuf {
    let mut bytes = std::fs::read(common::cdylib_path()).unwrap();
    let old = format!("{ASCENDCL_NAME}\0").into_bytes();
    let mut new = format!("{ACL_RT_NAME}\0").into_bytes();
    new.resize(old.len(), 0);
    let mut replaced = 0;
    let mut at = 0;
    while let Some(i) = bytes[at..].windows(old.len()).position(|w| w == old.as_slice()) {
        bytes[at + i..at + i + old.len()].copy_from_slice(&new);
        at += i + old.len();
        replaced += 1;
    }
    assert!(replaced > 0, "the simulated runtime has no SONAME {ASCENDCL_NAME}");
    let path = dir.join(ACL_RT_NAME);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn loaded(name: &str) -> bool {
    let c = CString::new(name).unwrap();
    // SAFETY: a NUL-terminated name; RTLD_NOLOAD maps nothing new. The handle is closed at once.
    unsafe {
        let h = libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if !h.is_null() {
            libc::dlclose(h);
        }
        !h.is_null()
    }
}

#[test]
fn a_runtime_loaded_as_libacl_rt_is_attached_with_its_dump_api() {
    let dir = tempfile::tempdir().unwrap();
    let path = runtime_renamed_acl_rt(dir.path());
    let c = CString::new(path.to_str().unwrap()).unwrap();
    // What a framework built against the split runtime does: the runtime is loaded, libascendcl.so is not.
    // SAFETY: loading the simulated runtime runs no initialiser that needs anything from us; the handle
    // stays open for the rest of the process.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen {}", path.display());
    assert!(loaded(ACL_RT_NAME) && !loaded(ASCENDCL_NAME), "the copy's SONAME was not rewritten");

    let lib = AclLibrary::attach_loaded().expect("attach to libacl_rt.so");
    assert_eq!(lib.opened(), [ACL_RT_NAME]);
    assert!(lib.fns.missing().is_empty(), "missing: {:?}", lib.fns.missing());
    assert!(lib.aclmdl_set_dump().is_ok() && lib.acldump_reg_callback().is_ok());
}
