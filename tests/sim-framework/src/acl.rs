//! Driving libascendcl.so the way a framework (torch_npu, a TF adapter) does: load it, then call the ACL
//! entry points it resolved. Two ways, as frameworks differ (docs/CANN.md §5):
//!
//! - [`Resolve::Global`] (the default): the library is loaded with RTLD_GLOBAL and every entry point is
//!   resolved through the global symbol scope, `dlsym(RTLD_DEFAULT, name)`, as a framework linked against
//!   libascendcl.so gets them. With `LD_PRELOAD=libcollector.so` the collector's `aclInit`/`aclFinalize`
//!   come first in that scope and interpose the runtime's.
//! - [`Resolve::Handle`]: the library is loaded without RTLD_GLOBAL and every entry point is looked up with
//!   `dlsym(handle, name)`, as torch_npu's `FunctionLoader` does. That lookup searches the library and its
//!   dependencies only, never an `LD_PRELOAD`ed object: a collector that only defines `aclInit` is bypassed,
//!   one that interposes `dlsym` itself is not.

use anyhow::{anyhow, bail, Context, Result};
use ascend_sys::fns::*;
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::{Path, PathBuf};

/// How a framework finds the runtime's functions (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Resolve {
    /// RTLD_GLOBAL, then `dlsym(RTLD_DEFAULT, name)`.
    #[default]
    Global,
    /// RTLD_LOCAL, then `dlsym(handle, name)`.
    Handle,
}

/// The loaded runtime; the handle is kept open (never closed) for the life of the process, as frameworks do.
pub struct Acl {
    pub path: String,
    handle: *mut c_void,
    resolve: Resolve,
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
    /// Loads the runtime at `path` (RTLD_GLOBAL, the default resolution).
    pub fn load(path: &str) -> Result<Acl> {
        Acl::load_with(path, Resolve::Global)
    }

    pub fn load_with(path: &str, resolve: Resolve) -> Result<Acl> {
        let c = CString::new(path).context("library path contains NUL")?;
        let flags = match resolve {
            Resolve::Global => libc::RTLD_NOW | libc::RTLD_GLOBAL,
            Resolve::Handle => libc::RTLD_NOW | libc::RTLD_LOCAL,
        };
        // SAFETY: `c` is a valid NUL-terminated string; dlopen has no other preconditions.
        let handle = unsafe { libc::dlopen(c.as_ptr(), flags) };
        if handle.is_null() {
            bail!("dlopen({path}) failed: {}", dl_error());
        }
        Ok(Acl { path: path.to_string(), handle, resolve })
    }

    /// Resolves `name` the way this runtime was loaded to be resolved (module docs).
    ///
    /// # Safety
    /// `T` must be the C function-pointer type of the symbol `name`.
    pub unsafe fn symbol<T: Copy>(&self, name: &CStr) -> Result<T> {
        // SAFETY: our caller owes symbol_opt's contract, which is ours.
        let found = unsafe { self.symbol_opt(name) };
        found.ok_or_else(|| anyhow!("{} not found: {}", name.to_string_lossy(), dl_error()))
    }

    /// Like [`Acl::symbol`], `None` when the symbol is absent.
    ///
    /// # Safety
    /// `T` must be the C function-pointer type of the symbol `name`.
    pub unsafe fn symbol_opt<T: Copy>(&self, name: &CStr) -> Option<T> {
        let scope = match self.resolve {
            Resolve::Global => libc::RTLD_DEFAULT,
            Resolve::Handle => self.handle,
        };
        // SAFETY: forwarded from this function's contract; the handle stays open for the process's life.
        unsafe { lookup(scope, name) }
    }
}

/// `dlsym(scope, name)` as a function pointer of type `T`, `None` when absent.
///
/// # Safety
/// `scope` is RTLD_DEFAULT or a live handle; `T` is the C function-pointer type of `name`.
pub unsafe fn lookup<T: Copy>(scope: *mut c_void, name: &CStr) -> Option<T> {
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: `name` is NUL-terminated and `scope` valid (the caller's contract).
    let p = unsafe { libc::dlsym(scope, name.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: T is pointer-sized (asserted) and, per the caller's contract, the symbol's fn type.
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
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
    let f: ReportFn = unsafe { acl.symbol_opt(c"simAclLastStepReport") }?;
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
    pub set_sys_param: Option<AclrtCtxSetSysParamOptFn>,
    pub load: AclmdlLoadFromFileFn,
    pub execute: AclmdlExecuteFn,
    pub unload: AclmdlUnloadFn,
}

impl Entry {
    pub fn resolve(acl: &Acl) -> Result<Entry> {
        // SAFETY: each type is the accutrace_acl.h signature of the symbol named beside it.
        unsafe {
            Ok(Entry {
                init: acl.symbol(c"aclInit")?,
                finalize: acl.symbol(c"aclFinalize")?,
                set_device: acl.symbol(c"aclrtSetDevice")?,
                reset_device: acl.symbol(c"aclrtResetDevice")?,
                set_sat_mode: acl.symbol_opt(c"aclrtSetDeviceSatMode"),
                set_sys_param: acl.symbol_opt(c"aclrtCtxSetSysParamOpt"),
                load: acl.symbol(c"aclmdlLoadFromFile")?,
                execute: acl.symbol(c"aclmdlExecute")?,
                unload: acl.symbol(c"aclmdlUnload")?,
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
                malloc: acl.symbol(c"aclrtMalloc")?,
                free: acl.symbol(c"aclrtFree")?,
                memcpy: acl.symbol(c"aclrtMemcpy")?,
                create_dataset: acl.symbol(c"aclmdlCreateDataset")?,
                destroy_dataset: acl.symbol(c"aclmdlDestroyDataset")?,
                add_dataset_buffer: acl.symbol(c"aclmdlAddDatasetBuffer")?,
                create_data_buffer: acl.symbol(c"aclCreateDataBuffer")?,
                destroy_data_buffer: acl.symbol(c"aclDestroyDataBuffer")?,
            })
        }
    }
}

/// The single-operator path an eager framework takes (`eager`): descriptions, attributes, the launch,
/// and the device memory the operands live in.
pub struct SingleOp {
    pub memory: Memory,
    pub create_desc: AclCreateTensorDescFn,
    pub destroy_desc: AclDestroyTensorDescFn,
    pub set_storage_format: AclSetTensorStorageFormatFn,
    pub set_storage_shape: AclSetTensorStorageShapeFn,
    pub create_attr: AclopCreateAttrFn,
    pub destroy_attr: AclopDestroyAttrFn,
    pub set_attr_int: AclopSetAttrIntFn,
    pub execute: OpLaunch,
    pub get_sat_mode: Option<AclrtGetDeviceSatModeFn>,
}

/// Which entry point launches each op (`sim-train --eager-launch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum EagerLaunch {
    /// `aclopExecuteV2` (acl_op.h): the op is already compiled.
    #[default]
    ExecuteV2,
    /// `aclopCompileAndExecute` (acl_op_compiler.h).
    CompileAndExecute,
    /// `aclopCompileAndExecuteV2` (acl_op_compiler.h): torch_npu's OpCommand path.
    CompileAndExecuteV2,
    /// `aclopExecute` (acl_op.h), deprecated for aclopExecuteV2.
    Execute,
    /// `aclopExecWithHandle` (acl_op.h) on a handle from `aclopCreateHandle`, destroyed after the launch.
    ExecWithHandle,
}

/// The resolved launch function of an [`EagerLaunch`].
#[derive(Clone, Copy)]
pub enum OpLaunch {
    ExecuteV2(AclopExecuteV2Fn),
    CompileAndExecute(AclopCompileAndExecuteFn),
    CompileAndExecuteV2(AclopCompileAndExecuteV2Fn),
    Execute(AclopExecuteFn),
    ExecWithHandle(ByHandle),
}

/// The functions of a launch by handle.
#[derive(Clone, Copy)]
pub struct ByHandle {
    pub create: AclopCreateHandleFn,
    pub execute: AclopExecWithHandleFn,
    pub destroy: AclopDestroyHandleFn,
}

impl OpLaunch {
    /// The C name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            OpLaunch::ExecuteV2(_) => "aclopExecuteV2",
            OpLaunch::CompileAndExecute(_) => "aclopCompileAndExecute",
            OpLaunch::CompileAndExecuteV2(_) => "aclopCompileAndExecuteV2",
            OpLaunch::Execute(_) => "aclopExecute",
            OpLaunch::ExecWithHandle(_) => "aclopExecWithHandle",
        }
    }
}

impl SingleOp {
    pub fn resolve(acl: &Acl, launch: EagerLaunch) -> Result<SingleOp> {
        // SAFETY: each type is the accutrace_acl.h signature of the symbol named beside it.
        unsafe {
            Ok(SingleOp {
                memory: Memory::resolve(acl)?,
                create_desc: acl.symbol(c"aclCreateTensorDesc")?,
                destroy_desc: acl.symbol(c"aclDestroyTensorDesc")?,
                set_storage_format: acl.symbol(c"aclSetTensorStorageFormat")?,
                set_storage_shape: acl.symbol(c"aclSetTensorStorageShape")?,
                create_attr: acl.symbol(c"aclopCreateAttr")?,
                destroy_attr: acl.symbol(c"aclopDestroyAttr")?,
                set_attr_int: acl.symbol(c"aclopSetAttrInt")?,
                execute: match launch {
                    EagerLaunch::ExecuteV2 => OpLaunch::ExecuteV2(acl.symbol(c"aclopExecuteV2")?),
                    EagerLaunch::CompileAndExecute => {
                        OpLaunch::CompileAndExecute(acl.symbol(c"aclopCompileAndExecute")?)
                    }
                    EagerLaunch::CompileAndExecuteV2 => {
                        OpLaunch::CompileAndExecuteV2(acl.symbol(c"aclopCompileAndExecuteV2")?)
                    }
                    EagerLaunch::Execute => OpLaunch::Execute(acl.symbol(c"aclopExecute")?),
                    EagerLaunch::ExecWithHandle => OpLaunch::ExecWithHandle(ByHandle {
                        create: acl.symbol(c"aclopCreateHandle")?,
                        execute: acl.symbol(c"aclopExecWithHandle")?,
                        destroy: acl.symbol(c"aclopDestroyHandle")?,
                    }),
                },
                get_sat_mode: acl.symbol_opt(c"aclrtGetDeviceSatMode"),
            })
        }
    }
}
