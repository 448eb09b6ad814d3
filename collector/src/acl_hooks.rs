//! The ACL entry points the collector exports, `aclInit`, `aclFinalize` and `aclmdlExecute`: reached through
//! the global scope (`LD_PRELOAD`), or handed out by the collector's `dlsym` ([`crate::dlsym`]) to a
//! framework that looks them up through the runtime's handle. Each forwards to the runtime's real function
//! and runs the collector's part ([`crate::activate`]); `aclmdlExecute` is only counted, so that a capture
//! that received nothing from a job that ran its model can say so ([`model_executions`]).

use crate::activate::{acl_finalize_hook, acl_init_hook};
use ascend_sys::*;
use std::ffi::{c_char, c_void, CStr};
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The watched names, by slot in [`REAL`].
const NAMES: [&CStr; 3] = [c"aclInit", c"aclFinalize", c"aclmdlExecute"];
const INIT: usize = 0;
const FINALIZE: usize = 1;
const EXECUTE: usize = 2;

/// The runtime's functions: what a `dlsym` through the collector found, else (0) the next definition.
static REAL: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];

/// Successful `aclmdlExecute` calls of this process.
static MODEL_EXECUTIONS: AtomicU64 = AtomicU64::new(0);

/// Successful `aclmdlExecute` calls of this process so far.
pub fn model_executions() -> u64 {
    MODEL_EXECUTIONS.load(Ordering::Relaxed)
}

/// For `dlsym`: our hook instead of `real` when `name` is a watched name found (and `real` is remembered as
/// the function the hook forwards to). Allocation-free, like all of `dlsym`'s path.
pub fn interpose(name: &CStr, real: *mut c_void) -> Option<*mut c_void> {
    let slot = NAMES.iter().position(|n| *n == name)?;
    let hook = match slot {
        INIT => aclInit as *const () as *mut c_void,
        FINALIZE => aclFinalize as *const () as *mut c_void,
        _ => aclmdlExecute as *const () as *mut c_void,
    };
    if real == hook || real.is_null() {
        // The global scope already leads to us (LD_PRELOAD): nothing to remember. A handle without the name
        // (libascend_dump.so has no aclInit nor aclmdlExecute) keeps answering NULL: the caller must not
        // think it has one, and our hook would have nothing of that handle's to forward to.
        return None;
    }
    REAL[slot].store(real.expose_provenance(), Ordering::Release);
    Some(hook)
}

/// The real function of a slot: the one `dlsym` saw, else the next definition after ours.
fn real(slot: usize) -> Option<usize> {
    let known = REAL[slot].load(Ordering::Acquire);
    if known != 0 {
        return Some(known);
    }
    // SAFETY: a NUL-terminated name; RTLD_NEXT lookups have no other requirement.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, NAMES[slot].as_ptr()) };
    (!next.is_null()).then(|| next.expose_provenance())
}

/// Interposes the runtime's `aclInit`: forwards to it, then starts the collector when configured.
///
/// # Safety
/// aclInit's contract: `config_path` is NULL or a NUL-terminated path.
#[no_mangle]
pub unsafe extern "C" fn aclInit(config_path: *const c_char) -> aclError {
    // SAFETY: the slot holds the address of the symbol aclInit, whose C signature is AclInitFn.
    let real = real(INIT).map(|a| unsafe { std::mem::transmute::<usize, AclInitFn>(a) });
    // SAFETY: the argument is forwarded unchanged from our caller, who owes aclInit's contract.
    match catch_unwind(|| unsafe { acl_init_hook(config_path, real) }) {
        Ok(code) => code,
        Err(_) => {
            // The hook forwards before doing anything else, so a panic here means the runtime's result is
            // lost; report the generic failure rather than unwind into C.
            crate::log("aclInit hook panicked");
            ascend_sys::ACL_ERROR_INTERNAL_ERROR
        }
    }
}

/// Interposes the runtime's `aclFinalize`: seals the capture, then forwards.
#[no_mangle]
pub extern "C" fn aclFinalize() -> aclError {
    // SAFETY: the slot holds the address of the symbol aclFinalize, whose C signature is AclFinalizeFn.
    let real = real(FINALIZE).map(|a| unsafe { std::mem::transmute::<usize, AclFinalizeFn>(a) });
    match catch_unwind(|| acl_finalize_hook(real)) {
        Ok(code) => code,
        Err(_) => {
            crate::log("aclFinalize hook panicked");
            ascend_sys::ACL_ERROR_INTERNAL_ERROR
        }
    }
}

/// Interposes the runtime's `aclmdlExecute`: forwards to it and counts the calls that succeeded.
///
/// # Safety
/// aclmdlExecute's contract: `input` and `output` are datasets the runtime accepts for `model_id`.
#[no_mangle]
pub unsafe extern "C" fn aclmdlExecute(
    model_id: u32,
    input: *const aclmdlDataset,
    output: *mut aclmdlDataset,
) -> aclError {
    let Some(addr) = real(EXECUTE) else { return ACL_ERROR_UNINITIALIZE };
    // Found by RTLD_NEXT: looked up once, not on every step.
    REAL[EXECUTE].store(addr, Ordering::Release);
    // SAFETY: the slot holds the address of the symbol aclmdlExecute, whose C signature is AclmdlExecuteFn.
    let f = unsafe { std::mem::transmute::<usize, AclmdlExecuteFn>(addr) };
    // SAFETY: the arguments are forwarded unchanged from our caller, who owes aclmdlExecute's contract.
    let code = unsafe { f(model_id, input, output) };
    if code == ACL_SUCCESS {
        MODEL_EXECUTIONS.fetch_add(1, Ordering::Relaxed);
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_without_a_watched_name_keeps_answering_null() {
        for name in NAMES {
            assert_eq!(interpose(name, std::ptr::null_mut()), None, "{name:?}: a NULL lookup stays NULL");
        }
    }
}
