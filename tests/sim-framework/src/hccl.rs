//! Driving libhccl.so the way torch_npu does: `dlopen` the library, then `dlsym(handle, name)` for every
//! entry point (its `FunctionLoader`; docs/CANN.md §5).
//!
//! Unlike ACL (see `acl`), HCCL is deliberately NOT resolved through the global scope: a lookup through the
//! handle searches libhccl.so and its dependencies only, so a collector that merely defines `HcclAllReduce`
//! under `LD_PRELOAD` never sees these calls. It must interpose `dlsym` itself, which is what this path
//! exercises.

use anyhow::{anyhow, bail, Context, Result};
use ascend_sys::hccl::*;
use std::ffi::{c_void, CStr, CString};
use std::path::{Path, PathBuf};

/// Where to load HCCL from: `--hccl-lib`, else `$SIM_HCCL_LIB`, else `libhccl.so` next to this executable
/// (where cargo puts the stand-in's cdylib), else the plain name.
pub fn library_path(cli: Option<&Path>) -> String {
    if let Some(p) = cli {
        return p.display().to_string();
    }
    if let Some(p) = std::env::var_os("SIM_HCCL_LIB").filter(|v| !v.is_empty()) {
        return PathBuf::from(p).display().to_string();
    }
    let beside = std::env::current_exe().ok().and_then(|exe| {
        let dir = exe.parent()?.to_path_buf();
        [dir.join("libhccl.so"), dir.parent()?.join("libhccl.so")].into_iter().find(|p| p.is_file())
    });
    beside.map_or_else(|| "libhccl.so".to_string(), |p| p.display().to_string())
}

/// The HCCL entry points a data-parallel job calls, resolved once through the library's handle.
pub struct Hccl {
    pub get_root_info: HcclGetRootInfoFn,
    pub comm_init_root_info: HcclCommInitRootInfoFn,
    /// `HcclCommInitRootInfoConfig`, when the library has it (torch_npu then prefers it).
    pub comm_init_root_info_config: Option<HcclCommInitRootInfoConfigFn>,
    /// Make communicators with `comm_init_root_info_config` (`sim-train --hccl-comm-config`).
    pub init_with_config: bool,
    pub comm_destroy: HcclCommDestroyFn,
    pub all_reduce: HcclAllReduceFn,
    pub broadcast: HcclBroadcastFn,
    pub all_gather: HcclAllGatherFn,
    /// The calls only a pipeline-parallel job makes (`--pipeline`); a library without them fails there.
    pub reduce_scatter: Option<HcclReduceScatterFn>,
    pub barrier: Option<HcclBarrierFn>,
    pub send: Option<HcclSendFn>,
    pub recv: Option<HcclRecvFn>,
    /// Simulator only: `simHcclInjectFault(comm, name)` (absent from a real libhccl.so).
    pub inject_fault: Option<unsafe extern "C" fn(HcclComm, *const std::ffi::c_char) -> HcclResult>,
}

impl Hccl {
    pub fn load(path: &str) -> Result<Hccl> {
        let c = CString::new(path).context("library path contains NUL")?;
        // SAFETY: a valid NUL-terminated path. The handle is never closed: the pointers resolved from it
        // stay valid for the life of the process.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW) };
        if handle.is_null() {
            bail!("dlopen({path}) failed: {}", dl_error());
        }
        // SAFETY: each type is the accutrace_hccl.h signature of the symbol named beside it.
        unsafe {
            Ok(Hccl {
                get_root_info: symbol(handle, c"HcclGetRootInfo")?,
                comm_init_root_info: symbol(handle, c"HcclCommInitRootInfo")?,
                comm_init_root_info_config: symbol(handle, c"HcclCommInitRootInfoConfig").ok(),
                init_with_config: false,
                comm_destroy: symbol(handle, c"HcclCommDestroy")?,
                all_reduce: symbol(handle, c"HcclAllReduce")?,
                broadcast: symbol(handle, c"HcclBroadcast")?,
                all_gather: symbol(handle, c"HcclAllGather")?,
                reduce_scatter: symbol(handle, c"HcclReduceScatter").ok(),
                barrier: symbol(handle, c"HcclBarrier").ok(),
                send: symbol(handle, c"HcclSend").ok(),
                recv: symbol(handle, c"HcclRecv").ok(),
                inject_fault: symbol(handle, c"simHcclInjectFault").ok(),
            })
        }
    }
}

/// `dlsym(handle, name)` as a function pointer of type `T`.
///
/// # Safety
/// `handle` is a live dlopen handle and `T` the C function-pointer type of `name`.
unsafe fn symbol<T: Copy>(handle: *mut c_void, name: &CStr) -> Result<T> {
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: live handle and NUL-terminated name per the contract.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    if p.is_null() {
        return Err(anyhow!("{} not found in libhccl.so: {}", name.to_string_lossy(), dl_error()));
    }
    // SAFETY: pointer-sized (asserted) and, per the contract, the symbol's function type.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
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

/// An HCCL result, checked: `what` names the call in the error.
pub fn check(what: &str, code: HcclResult) -> Result<()> {
    if code == HCCL_SUCCESS {
        Ok(())
    } else {
        bail!("{what} returned {} ({code})", result_name(code))
    }
}
