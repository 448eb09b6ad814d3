//! Shared by the integration tests: the built `libascendcl.so` opened through ascend-sys's loader (so the
//! tests go through the real C ABI, as a framework would), one-at-a-time access to its global state, and a
//! dump callback that records every chunk.
#![allow(dead_code)]

use ascend_sys::*;
use std::collections::HashMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::ThreadId;

/// The cdylib cargo built for this test run: `target/<profile>/deps/libascendcl.so`, beside the test
/// binary (`cargo test` does not always copy it up to `target/<profile>/`, which may hold a stale one).
pub fn cdylib_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps.join("libascendcl.so"), deps.parent().unwrap().join("libascendcl.so")]
        .into_iter()
        .find(|p| p.is_file())
        .expect("libascendcl.so is built with the tests")
}

pub fn lib() -> &'static AclLibrary {
    static LIB: OnceLock<AclLibrary> = OnceLock::new();
    LIB.get_or_init(|| {
        let lib = AclLibrary::from_path(cdylib_path()).expect("load the simulated libascendcl.so");
        assert!(lib.fns.missing().is_empty(), "missing exports: {:?}", lib.fns.missing());
        lib
    })
}

/// The runtime is process-global: tests in one binary take turns.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn cstr(p: &Path) -> CString {
    CString::new(p.to_str().unwrap()).unwrap()
}

// Thin wrappers: each calls the export through the pointer the loader resolved. Every call is sound for the
// same reason: the pointers come from the loaded library, which `lib()` keeps loaded for the whole process,
// and the arguments satisfy each function's C contract (valid NUL-terminated strings, writable outputs).
pub fn init(config: Option<&Path>) -> aclError {
    let c = config.map(cstr);
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    unsafe { lib().acl_init().unwrap()(c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())) }
}
pub fn finalize() -> aclError {
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    unsafe { lib().acl_finalize().unwrap()() }
}
pub fn set_device(id: i32) -> aclError {
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    unsafe { lib().aclrt_set_device().unwrap()(id) }
}
pub fn synchronize() -> aclError {
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    unsafe { lib().aclrt_synchronize_device().unwrap()() }
}
pub fn set_sat_mode(mode: aclrtFloatOverflowMode) -> aclError {
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    unsafe { lib().aclrt_set_device_sat_mode().unwrap()(mode) }
}
pub fn get_sat_mode() -> (aclError, aclrtFloatOverflowMode) {
    let mut mode = 99;
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    let rc = unsafe { lib().aclrt_get_device_sat_mode().unwrap()(&mut mode) };
    (rc, mode)
}
pub fn overflow_status() -> (aclError, u64) {
    let mut buf = [0xffu8; ACL_OVERFLOW_STATUS_SIZE];
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    let rc = unsafe {
        lib().aclrt_get_overflow_status().unwrap()(buf.as_mut_ptr().cast(), buf.len(), std::ptr::null_mut())
    };
    (rc, u64::from_le_bytes(buf[..8].try_into().unwrap()))
}
pub fn reset_overflow_status() -> aclError {
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    unsafe { lib().aclrt_reset_overflow_status().unwrap()(std::ptr::null_mut()) }
}
pub fn init_dump() -> aclError {
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    unsafe { lib().aclmdl_init_dump().unwrap()() }
}
pub fn set_dump(path: &Path) -> aclError {
    let c = cstr(path);
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    unsafe { lib().aclmdl_set_dump().unwrap()(c.as_ptr()) }
}
pub fn finalize_dump() -> aclError {
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    unsafe { lib().aclmdl_finalize_dump().unwrap()() }
}
pub fn reg_callback(flag: i32) -> aclError {
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    unsafe { lib().acldump_reg_callback().unwrap()(Some(record_chunk), flag) }
}
pub fn unreg_callback() {
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    unsafe { lib().acldump_unreg_callback().unwrap()() }
}
pub fn load(model: &Path) -> (aclError, u32) {
    let c = cstr(model);
    let mut id = 0;
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    let rc = unsafe { lib().aclmdl_load_from_file().unwrap()(c.as_ptr(), &mut id) };
    (rc, id)
}
pub fn execute(id: u32) -> aclError {
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    unsafe { lib().aclmdl_execute().unwrap()(id, std::ptr::null(), std::ptr::null_mut()) }
}
pub fn unload(id: u32) -> aclError {
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    unsafe { lib().aclmdl_unload().unwrap()(id) }
}

/// One chunk as the callback saw it.
#[derive(Clone, Debug)]
pub struct Chunk {
    pub file_name: String,
    pub data: Vec<u8>,
    pub last: bool,
    pub offset: i64,
    pub flag: i32,
    pub len: i32,
    pub thread: ThreadId,
}

static CHUNKS: Mutex<Vec<Chunk>> = Mutex::new(Vec::new());

unsafe extern "C" fn record_chunk(chunk: *const acldumpChunk, len: i32) -> i32 {
    // SAFETY: the runtime passes a valid chunk whose dataBuf holds bufLen bytes, for this call only.
    let c = unsafe { &*chunk };
    // SAFETY: as above: dataBuf holds bufLen bytes while the call lasts, and they are copied out.
    let data = unsafe { std::slice::from_raw_parts(c.dataBuf.as_ptr(), c.bufLen as usize) }.to_vec();
    let name_bytes: Vec<u8> = c.fileName.iter().take_while(|&&b| b != 0).map(|&b| b as u8).collect();
    CHUNKS.lock().unwrap().push(Chunk {
        file_name: String::from_utf8(name_bytes).unwrap(),
        data,
        last: c.isLastChunk == 1,
        offset: c.offset,
        flag: c.flag,
        len,
        thread: std::thread::current().id(),
    });
    0
}

pub fn take_chunks() -> Vec<Chunk> {
    std::mem::take(&mut *CHUNKS.lock().unwrap())
}

/// Reassembles chunks by file name, checking that no chunk follows a file's last one.
pub fn reassemble(chunks: &[Chunk]) -> HashMap<String, Vec<u8>> {
    let mut done: HashMap<String, Vec<u8>> = HashMap::new();
    let mut open: HashMap<String, Vec<u8>> = HashMap::new();
    for c in chunks {
        assert!(!done.contains_key(&c.file_name), "chunk after the last one of {}", c.file_name);
        open.entry(c.file_name.clone()).or_default().extend_from_slice(&c.data);
        if c.last {
            let bytes = open.remove(&c.file_name).unwrap();
            done.insert(c.file_name.clone(), bytes);
        }
    }
    assert!(open.is_empty(), "files without a last chunk: {:?}", open.keys().collect::<Vec<_>>());
    done
}

/// Every regular file under `root`, by full path.
pub fn files_under(root: &Path) -> HashMap<String, Vec<u8>> {
    let mut out = HashMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.to_str().unwrap().to_string(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}
