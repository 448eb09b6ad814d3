//! Driving libascendcl.so the way a framework (torch_npu, a TF adapter) does: load it, then call the ACL
//! entry points it resolved.
//!
//! Every entry point is resolved through the GLOBAL symbol scope, `dlsym(RTLD_DEFAULT, name)`, never through
//! the library handle. With `LD_PRELOAD=libcollector.so`, the collector's `aclInit`/`aclFinalize` come first
//! in the global scope and interpose the runtime's; they chain to the real ones. A lookup through the handle
//! would bypass the collector (it only searches libascendcl.so and its dependencies), which is exactly the
//! mistake that makes an injected collector see nothing. The library is loaded with RTLD_GLOBAL so that its
//! symbols are in that global scope at all.

use anyhow::{anyhow, bail, Context, Result};
use ascend_sys::fns::*;
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::{Path, PathBuf};

/// The loaded runtime; the handle is kept open (never closed) for the life of the process, as frameworks do.
pub struct Acl {
    pub path: String,
    _handle: *mut c_void,
}

/// Where to load the runtime from: `--lib`, else `$SIM_ACL_LIB`, else `libascendcl.so` next to this
/// executable (the cargo target dir, where the simulated runtime's cdylib lands), else the plain name
/// (the dynamic linker's search path).
pub fn library_path(cli: Option<&Path>) -> String {
    if let Some(p) = cli {
        return p.display().to_string();
    }
    if let Some(p) = std::env::var_os("SIM_ACL_LIB").filter(|v| !v.is_empty()) {
        return PathBuf::from(p).display().to_string();
    }
    let beside = std::env::current_exe().ok().and_then(|exe| {
        // Test binaries live one level deeper (target/debug/deps) than the cdylib (target/debug).
        let dir = exe.parent()?.to_path_buf();
        [dir.join("libascendcl.so"), dir.parent()?.join("libascendcl.so")].into_iter().find(|p| p.is_file())
    });
    match beside {
        Some(p) => p.display().to_string(),
        None => "libascendcl.so".to_string(),
    }
}

impl Acl {
    pub fn load(path: &str) -> Result<Acl> {
        let c = CString::new(path).context("library path contains NUL")?;
        // SAFETY: `c` is a valid NUL-terminated string; dlopen has no other preconditions.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if handle.is_null() {
            bail!("dlopen({path}) failed: {}", dl_error());
        }
        Ok(Acl { path: path.to_string(), _handle: handle })
    }

    /// Resolves `name` in the global scope (see the module docs for why not through the handle).
    ///
    /// # Safety
    /// `T` must be the C function-pointer type of the symbol `name`.
    pub unsafe fn global<T: Copy>(&self, name: &CStr) -> Result<T> {
        // SAFETY: our caller owes global_opt's contract, which is ours.
        let found = unsafe { self.global_opt(name) };
        found.ok_or_else(|| anyhow!("{} not found: {}", name.to_string_lossy(), dl_error()))
    }

    /// Like [`Acl::global`], `None` when the symbol is absent.
    ///
    /// # Safety
    /// `T` must be the C function-pointer type of the symbol `name`.
    pub unsafe fn global_opt<T: Copy>(&self, name: &CStr) -> Option<T> {
        assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
        // SAFETY: `name` is NUL-terminated; RTLD_DEFAULT searches the global scope in load order.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
        if p.is_null() {
            return None;
        }
        // SAFETY: T is pointer-sized (asserted) and, per the caller's contract, the symbol's fn type.
        Some(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call on this thread.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null, NUL-terminated (above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// A path as a C string for the ACL calls that take one.
pub fn path_cstring(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_encoded_bytes()).with_context(|| format!("{} contains NUL", p.display()))
}

/// An ACL return code, checked: `what` names the call in the error.
pub fn check(what: &str, code: i32) -> Result<()> {
    if code == ascend_sys::ACL_SUCCESS {
        Ok(())
    } else {
        bail!("{what} returned {} ({code})", ascend_sys::error_name(code))
    }
}

/// The last step's report through the runtime's `simAclLastStepReport(char*, size_t) -> size_t` export.
pub fn last_step_report(acl: &Acl) -> Option<String> {
    type ReportFn = unsafe extern "C" fn(buf: *mut c_char, len: usize) -> usize;
    // SAFETY: the simulated runtime exports this symbol with exactly this signature (sim-model docs).
    let f: ReportFn = unsafe { acl.global_opt(c"simAclLastStepReport") }?;
    let mut buf = vec![0u8; 4096];
    // SAFETY: buf is writable for buf.len() bytes; the callee writes at most len bytes incl. the NUL.
    let n = unsafe { f(buf.as_mut_ptr().cast(), buf.len()) };
    if n == 0 || n >= buf.len() {
        return None;
    }
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// The names and signatures `sim-train` calls, resolved once.
pub struct Entry {
    pub init: AclInitFn,
    pub finalize: AclFinalizeFn,
    pub set_device: AclrtSetDeviceFn,
    pub reset_device: AclrtResetDeviceFn,
    pub set_sat_mode: Option<AclrtSetDeviceSatModeFn>,
    pub load: AclmdlLoadFromFileFn,
    pub execute: AclmdlExecuteFn,
    pub unload: AclmdlUnloadFn,
}

impl Entry {
    pub fn resolve(acl: &Acl) -> Result<Entry> {
        // SAFETY: each type is the accutrace_acl.h signature of the symbol named beside it.
        unsafe {
            Ok(Entry {
                init: acl.global(c"aclInit")?,
                finalize: acl.global(c"aclFinalize")?,
                set_device: acl.global(c"aclrtSetDevice")?,
                reset_device: acl.global(c"aclrtResetDevice")?,
                set_sat_mode: acl.global_opt(c"aclrtSetDeviceSatMode"),
                load: acl.global(c"aclmdlLoadFromFile")?,
                execute: acl.global(c"aclmdlExecute")?,
                unload: acl.global(c"aclmdlUnload")?,
            })
        }
    }
}

/// Device memory and model datasets: what a framework that feeds a model and all-reduces its gradients
/// needs (`data_parallel`).
pub struct Memory {
    pub malloc: AclrtMallocFn,
    pub free: AclrtFreeFn,
    pub memcpy: AclrtMemcpyFn,
    pub create_dataset: AclmdlCreateDatasetFn,
    pub destroy_dataset: AclmdlDestroyDatasetFn,
    pub add_dataset_buffer: AclmdlAddDatasetBufferFn,
    pub create_data_buffer: AclCreateDataBufferFn,
    pub destroy_data_buffer: AclDestroyDataBufferFn,
}

impl Memory {
    pub fn resolve(acl: &Acl) -> Result<Memory> {
        // SAFETY: each type is the accutrace_acl.h signature of the symbol named beside it.
        unsafe {
            Ok(Memory {
                malloc: acl.global(c"aclrtMalloc")?,
                free: acl.global(c"aclrtFree")?,
                memcpy: acl.global(c"aclrtMemcpy")?,
                create_dataset: acl.global(c"aclmdlCreateDataset")?,
                destroy_dataset: acl.global(c"aclmdlDestroyDataset")?,
                add_dataset_buffer: acl.global(c"aclmdlAddDatasetBuffer")?,
                create_data_buffer: acl.global(c"aclCreateDataBuffer")?,
                destroy_data_buffer: acl.global(c"aclDestroyDataBuffer")?,
            })
        }
    }
}
