//! The ACL entry points the collector exports, `aclInit`, `aclFinalize`, `aclmdlExecute`, the single-op
//! launches `aclopExecuteV2`, `aclopCompileAndExecute` and `aclopCompileAndExecuteV2` (torch_npu's usual
//! eager path, OpCommand), `aclopExecWithHandle` (a single-op model matched once by `aclopCreateHandle`)
//! and the deprecated `aclopExecute`, `acldumpRegCallback` and `acldumpUnregCallback`: reached through the
//! global scope (`LD_PRELOAD`), or handed out by the collector's `dlsym` ([`crate::dlsym`]) to a framework
//! that looks them up through a handle (torch_npu's FunctionLoader, `libacl_op_compiler.so`'s for the
//! compile-and-execute pair). Each forwards to the real function unchanged. `aclInit` and `aclFinalize`
//! also run the collector's part ([`crate::activate`]); the launches are only counted, so that a capture
//! that received nothing from a job that ran can say so ([`model_executions`], [`op_executions`]);
//! the callback pair is watched for another tool's callback, because the runtime keeps one callback and
//! answers a second registration ACL_SUCCESS while ignoring it ([`CallbackSlot`]). The collector's own
//! registration goes through its loader's handle, which `dlsym` answers with the real function, so every
//! call that reaches these two exports is another tool's.
//!
//! A library loaded between us and the runtime whose definition calls the function again through the global
//! scope (a forwarding compatibility library) re-enters the same hook from inside the call it forwarded:
//! such a call is passed on past that library, and the collector's part runs once ([`crate::forwarding`]).

use crate::activate::{acl_finalize_hook, acl_init_hook};
use crate::callback_slot::CallbackSlot;
use crate::entry_guard::{guarded, Forwarded};
use crate::forwarding::{self, Forwarding};
use ascend_sys::*;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The watched names, by slot in [`REAL`].
const NAMES: [&CStr; forwarding::ACL_HOOKS] = [
    c"aclInit",
    c"aclFinalize",
    c"aclmdlExecute",
    c"aclopExecuteV2",
    c"acldumpRegCallback",
    c"acldumpUnregCallback",
    c"aclopCompileAndExecute",
    c"aclopCompileAndExecuteV2",
    c"aclopExecute",
    c"aclopExecWithHandle",
];
const INIT: usize = 0;
const FINALIZE: usize = 1;
const EXECUTE: usize = 2;
const OP_EXECUTE: usize = 3;
const REG_CALLBACK: usize = 4;
const UNREG_CALLBACK: usize = 5;
const OP_COMPILE_EXECUTE: usize = 6;
const OP_COMPILE_EXECUTE_V2: usize = 7;
const OP_EXECUTE_DEPRECATED: usize = 8;
const OP_EXEC_WITH_HANDLE: usize = 9;

/// The runtime's functions: what a `dlsym` through the collector found, else (0) the next definition.
static REAL: [AtomicUsize; forwarding::ACL_HOOKS] = [const { AtomicUsize::new(0) }; forwarding::ACL_HOOKS];

/// Successful `aclmdlExecute` calls of this process.
static MODEL_EXECUTIONS: AtomicU64 = AtomicU64::new(0);
/// Successful single-op launches (`aclopExecuteV2`, `aclopCompileAndExecute`, `aclopCompileAndExecuteV2`,
/// `aclopExecute`, `aclopExecWithHandle`) of this process. None of these calls another of them in the
/// vendor's runtime (each launches through its own executor call), so no launch is counted twice.
static OP_EXECUTIONS: AtomicU64 = AtomicU64::new(0);

/// Successful `aclmdlExecute` calls of this process so far.
pub fn model_executions() -> u64 {
    MODEL_EXECUTIONS.load(Ordering::Relaxed)
}

/// Successful single-op launches (eager ops, by any of the five launches) of this process so far.
pub fn op_executions() -> u64 {
    OP_EXECUTIONS.load(Ordering::Relaxed)
}

/// Our hook for a watched slot.
fn hook_of(slot: usize) -> *mut c_void {
    match slot {
        INIT => aclInit as *const () as *mut c_void,
        FINALIZE => aclFinalize as *const () as *mut c_void,
        EXECUTE => aclmdlExecute as *const () as *mut c_void,
        OP_EXECUTE => aclopExecuteV2 as *const () as *mut c_void,
        REG_CALLBACK => acldumpRegCallback as *const () as *mut c_void,
        UNREG_CALLBACK => acldumpUnregCallback as *const () as *mut c_void,
        OP_COMPILE_EXECUTE => aclopCompileAndExecute as *const () as *mut c_void,
        OP_COMPILE_EXECUTE_V2 => aclopCompileAndExecuteV2 as *const () as *mut c_void,
        OP_EXECUTE_DEPRECATED => aclopExecute as *const () as *mut c_void,
        _ => aclopExecWithHandle as *const () as *mut c_void,
    }
}

/// For `dlsym`: our hook instead of `real` when `name` is a watched name (and `real` is remembered as the
/// function the hook forwards to). Allocation-free, like all of `dlsym`'s path.
pub fn interpose(name: &CStr, real: *mut c_void) -> Option<*mut c_void> {
    let slot = NAMES.iter().position(|n| *n == name)?;
    let hook = hook_of(slot);
    if real == hook || real.is_null() {
        // The global scope already leads to us (LD_PRELOAD): nothing to remember. A handle without the
        // name (libascend_dump.so has no aclmdlExecute) keeps answering NULL: the caller must not think it
        // has one, and our hook would have nothing to forward to.
        return None;
    }
    REAL[slot].store(real.expose_provenance(), Ordering::Release);
    Some(hook)
}

/// The real function of a slot: the one `dlsym` saw, else the next definition after ours (remembered, so
/// a launch looks it up once, not on every call).
fn real(slot: usize) -> Option<usize> {
    let known = REAL[slot].load(Ordering::Acquire);
    if known != 0 {
        return Some(known);
    }
    // SAFETY: a NUL-terminated name; RTLD_NEXT lookups have no other requirement.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, NAMES[slot].as_ptr()) };
    if next.is_null() {
        return None;
    }
    REAL[slot].store(next.expose_provenance(), Ordering::Release);
    Some(next.expose_provenance())
}

/// Where a call of `slot` goes when it arrived from inside the definition an enclosing call of it forwarded
/// to ([`forwarding::reentered`]): `None` for the outermost call, else the next definition, `Some(None)`
/// for none (the hook then answers ACL_ERROR_API_NOT_SUPPORT rather than recurse).
fn reentered(slot: usize) -> Option<Option<usize>> {
    let ours = hook_of(slot).expose_provenance();
    forwarding::reentered(slot, NAMES[slot], ours, "ACL_ERROR_API_NOT_SUPPORT", "the runtime")
}

/// Interposes the runtime's `aclInit`: forwards to it, then starts the collector when configured.
///
/// # Safety
/// aclInit's contract: `config_path` is NULL or a NUL-terminated path.
#[no_mangle]
pub unsafe extern "C" fn aclInit(config_path: *const c_char) -> aclError {
    // acl_init_hook forwards inside (and catches its own activation's panics): a panic reaching the guard
    // means the runtime's result is lost, so it answers the generic failure.
    guarded("aclInit", ACL_ERROR_INTERNAL_ERROR, |forwarded| {
        if let Some(next) = reentered(INIT) {
            let Some(addr) = next else { return ACL_ERROR_API_NOT_SUPPORT };
            let _forwarding = Forwarding::to(INIT, addr);
            // SAFETY: a definition of the symbol aclInit, of C signature AclInitFn; the argument is our
            // caller's.
            return forwarded.call(|| unsafe { std::mem::transmute::<usize, AclInitFn>(addr)(config_path) });
        }
        let real_addr = real(INIT);
        let _forwarding = Forwarding::to(INIT, real_addr.unwrap_or(forwarding::UNKNOWN_TARGET));
        // SAFETY: the slot holds the address of the symbol aclInit, whose C signature is AclInitFn.
        let real = real_addr.map(|a| unsafe { std::mem::transmute::<usize, AclInitFn>(a) });
        // SAFETY: the argument is forwarded unchanged from our caller, who owes aclInit's contract.
        unsafe { acl_init_hook(config_path, real) }
    })
}

/// Interposes the runtime's `aclFinalize`: seals the capture, then forwards.
#[no_mangle]
pub extern "C" fn aclFinalize() -> aclError {
    // As aclInit: acl_finalize_hook forwards inside, after sealing the capture under its own catch_unwind.
    guarded("aclFinalize", ACL_ERROR_INTERNAL_ERROR, |forwarded| {
        if let Some(next) = reentered(FINALIZE) {
            let Some(addr) = next else { return ACL_ERROR_API_NOT_SUPPORT };
            let _forwarding = Forwarding::to(FINALIZE, addr);
            // SAFETY: a definition of the symbol aclFinalize, of C signature AclFinalizeFn; no arguments.
            return forwarded.call(|| unsafe { std::mem::transmute::<usize, AclFinalizeFn>(addr)() });
        }
        let real_addr = real(FINALIZE);
        let _forwarding = Forwarding::to(FINALIZE, real_addr.unwrap_or(forwarding::UNKNOWN_TARGET));
        // SAFETY: the slot holds the address of the symbol aclFinalize, whose C signature is AclFinalizeFn.
        let real = real_addr.map(|a| unsafe { std::mem::transmute::<usize, AclFinalizeFn>(a) });
        acl_finalize_hook(real)
    })
}

/// The body every launch hook shares: forwards the call of hook `slot` to the next definition (`call` makes
/// it with that definition's address and the hook's arguments, unchanged) and counts it in `counter` when it
/// succeeded, one relaxed add. A re-entered call is the same launch, counted by the outermost call.
fn forward_launch(
    slot: usize,
    counter: &AtomicU64,
    forwarded: &Forwarded<aclError>,
    call: impl FnOnce(usize) -> aclError,
) -> aclError {
    let reentered = reentered(slot);
    let Some(addr) = reentered.unwrap_or_else(|| real(slot)) else {
        return if reentered.is_some() { ACL_ERROR_API_NOT_SUPPORT } else { ACL_ERROR_UNINITIALIZE };
    };
    let _forwarding = Forwarding::to(slot, addr);
    let code = forwarded.call(|| call(addr));
    if code == ACL_SUCCESS && reentered.is_none() {
        counter.fetch_add(1, Ordering::Relaxed);
    }
    code
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
    guarded("aclmdlExecute", ACL_ERROR_INTERNAL_ERROR, |forwarded| {
        forward_launch(EXECUTE, &MODEL_EXECUTIONS, forwarded, |addr| {
            // SAFETY: the address of a definition of aclmdlExecute, of C signature AclmdlExecuteFn.
            let f = unsafe { std::mem::transmute::<usize, AclmdlExecuteFn>(addr) };
            // SAFETY: the arguments are forwarded unchanged from our caller, who owes the function's contract.
            unsafe { f(model_id, input, output) }
        })
    })
}

/// Interposes the runtime's `aclopExecuteV2` (an eager single op): forwards to it and counts the calls that
/// succeeded, one relaxed add on the launch path.
///
/// # Safety
/// aclopExecuteV2's contract: descriptions, buffers and attributes the runtime accepts for `op_type`.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // the C signature
pub unsafe extern "C" fn aclopExecuteV2(
    op_type: *const c_char,
    num_inputs: i32,
    input_desc: *mut *mut aclTensorDesc,
    inputs: *mut *mut aclDataBuffer,
    num_outputs: i32,
    output_desc: *mut *mut aclTensorDesc,
    outputs: *mut *mut aclDataBuffer,
    attr: *mut aclopAttr,
    stream: aclrtStream,
) -> aclError {
    guarded("aclopExecuteV2", ACL_ERROR_INTERNAL_ERROR, |forwarded| {
        forward_launch(OP_EXECUTE, &OP_EXECUTIONS, forwarded, |addr| {
            // SAFETY: the address of a definition of aclopExecuteV2, of C signature AclopExecuteV2Fn.
            let f = unsafe { std::mem::transmute::<usize, AclopExecuteV2Fn>(addr) };
            // SAFETY: the arguments are forwarded unchanged from our caller, who owes the function's contract.
            unsafe {
                f(op_type, num_inputs, input_desc, inputs, num_outputs, output_desc, outputs, attr, stream)
            }
        })
    })
}

/// Interposes `aclopCompileAndExecute` (an eager single op, compiled first when needed): forwards to it and
/// counts the calls that succeeded, as [`aclopExecuteV2`].
///
/// # Safety
/// aclopCompileAndExecute's contract: descriptions, buffers and attributes the runtime accepts for
/// `op_type`; `op_path` NULL or NUL-terminated.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // the C signature
pub unsafe extern "C" fn aclopCompileAndExecute(
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
) -> aclError {
    guarded("aclopCompileAndExecute", ACL_ERROR_INTERNAL_ERROR, |forwarded| {
        forward_launch(OP_COMPILE_EXECUTE, &OP_EXECUTIONS, forwarded, |addr| {
            // SAFETY: the address of a definition of aclopCompileAndExecute, of C signature AclopCompileAndExecuteFn.
            let f = unsafe { std::mem::transmute::<usize, AclopCompileAndExecuteFn>(addr) };
            // SAFETY: the arguments are forwarded unchanged from our caller, who owes the function's contract.
            unsafe {
                f(
                    op_type,
                    num_inputs,
                    input_desc,
                    inputs,
                    num_outputs,
                    output_desc,
                    outputs,
                    attr,
                    engine_type,
                    compile_flag,
                    op_path,
                    stream,
                )
            }
        })
    })
}

/// Interposes `aclopCompileAndExecuteV2` (torch_npu's OpCommand launch): forwards to it and counts the calls
/// that succeeded, as [`aclopExecuteV2`].
///
/// # Safety
/// aclopCompileAndExecuteV2's contract: descriptions, buffers and attributes the runtime accepts for
/// `op_type`; `op_path` NULL or NUL-terminated.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // the C signature
pub unsafe extern "C" fn aclopCompileAndExecuteV2(
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
) -> aclError {
    guarded("aclopCompileAndExecuteV2", ACL_ERROR_INTERNAL_ERROR, |forwarded| {
        forward_launch(OP_COMPILE_EXECUTE_V2, &OP_EXECUTIONS, forwarded, |addr| {
            // SAFETY: the address of a definition of aclopCompileAndExecuteV2, of C signature AclopCompileAndExecuteV2Fn.
            let f = unsafe { std::mem::transmute::<usize, AclopCompileAndExecuteV2Fn>(addr) };
            // SAFETY: the arguments are forwarded unchanged from our caller, who owes the function's contract.
            unsafe {
                f(
                    op_type,
                    num_inputs,
                    input_desc,
                    inputs,
                    num_outputs,
                    output_desc,
                    outputs,
                    attr,
                    engine_type,
                    compile_flag,
                    op_path,
                    stream,
                )
            }
        })
    })
}

/// Interposes the deprecated `aclopExecute` (an eager single op; acl_op.h says to use aclopExecuteV2):
/// forwards to it and counts the calls that succeeded, as [`aclopExecuteV2`].
///
/// # Safety
/// aclopExecute's contract: descriptions, buffers and attributes the runtime accepts for `op_type`.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // the C signature
pub unsafe extern "C" fn aclopExecute(
    op_type: *const c_char,
    num_inputs: i32,
    input_desc: *const *const aclTensorDesc,
    inputs: *const *const aclDataBuffer,
    num_outputs: i32,
    output_desc: *const *const aclTensorDesc,
    outputs: *const *mut aclDataBuffer,
    attr: *const aclopAttr,
    stream: aclrtStream,
) -> aclError {
    guarded("aclopExecute", ACL_ERROR_INTERNAL_ERROR, |forwarded| {
        forward_launch(OP_EXECUTE_DEPRECATED, &OP_EXECUTIONS, forwarded, |addr| {
            // SAFETY: the address of a definition of aclopExecute, of C signature AclopExecuteFn.
            let f = unsafe { std::mem::transmute::<usize, AclopExecuteFn>(addr) };
            // SAFETY: the arguments are forwarded unchanged from our caller, who owes the function's contract.
            unsafe {
                f(op_type, num_inputs, input_desc, inputs, num_outputs, output_desc, outputs, attr, stream)
            }
        })
    })
}

/// Interposes `aclopExecWithHandle` (an eager single op launched on a handle from `aclopCreateHandle`):
/// forwards to it and counts the calls that succeeded, as [`aclopExecuteV2`]. Creating or destroying a
/// handle launches nothing, so those two are not interposed.
///
/// # Safety
/// aclopExecWithHandle's contract: a live handle and buffers the runtime accepts for its op.
#[no_mangle]
pub unsafe extern "C" fn aclopExecWithHandle(
    handle: *mut aclopHandle,
    num_inputs: i32,
    inputs: *const *const aclDataBuffer,
    num_outputs: i32,
    outputs: *const *mut aclDataBuffer,
    stream: aclrtStream,
) -> aclError {
    guarded("aclopExecWithHandle", ACL_ERROR_INTERNAL_ERROR, |forwarded| {
        forward_launch(OP_EXEC_WITH_HANDLE, &OP_EXECUTIONS, forwarded, |addr| {
            // SAFETY: the address of a definition of aclopExecWithHandle, of C signature
            // AclopExecWithHandleFn.
            let f = unsafe { std::mem::transmute::<usize, AclopExecWithHandleFn>(addr) };
            // SAFETY: the arguments are forwarded unchanged from our caller, who owes the function's contract.
            unsafe { f(handle, num_inputs, inputs, num_outputs, outputs, stream) }
        })
    })
}

/// Interposes the runtime's `acldumpRegCallback` for other tools (the collector registers through its
/// loader's handle): forwards unchanged and notes whose callback the runtime now keeps ([`CallbackSlot`]).
///
/// # Safety
/// acldumpRegCallback's contract: `cb` is NULL or a function of the acldumpCallback signature.
#[no_mangle]
pub unsafe extern "C" fn acldumpRegCallback(cb: Option<AcldumpCallbackFn>, flag: i32) -> aclError {
    guarded("acldumpRegCallback", ACL_ERROR_INTERNAL_ERROR, |forwarded| {
        let reentered = reentered(REG_CALLBACK);
        let Some(addr) = reentered.unwrap_or_else(|| real(REG_CALLBACK)) else {
            return if reentered.is_some() { ACL_ERROR_API_NOT_SUPPORT } else { ACL_ERROR_FAILURE };
        };
        let _forwarding = Forwarding::to(REG_CALLBACK, addr);
        // SAFETY: the address of a definition of acldumpRegCallback, of signature AcldumpRegCallbackFn.
        let f = unsafe { std::mem::transmute::<usize, AcldumpRegCallbackFn>(addr) };
        // SAFETY: the arguments are forwarded unchanged from our caller, who owes the contract.
        let code = forwarded.call(|| unsafe { f(cb, flag) });
        // The outermost call notes the registration, once.
        if reentered.is_none() {
            CallbackSlot::other_registered(cb, code);
        }
        code
    })
}

/// Interposes the runtime's `acldumpUnregCallback` for other tools: forwards, and notes that the slot is
/// empty (the runtime removes whichever callback is registered, ours included).
#[no_mangle]
pub extern "C" fn acldumpUnregCallback() {
    guarded("acldumpUnregCallback", (), |forwarded| {
        let reentered = reentered(UNREG_CALLBACK);
        let Some(addr) = reentered.unwrap_or_else(|| real(UNREG_CALLBACK)) else { return };
        let _forwarding = Forwarding::to(UNREG_CALLBACK, addr);
        // SAFETY: the address of a definition of acldumpUnregCallback, of signature AcldumpUnregCallbackFn.
        let f = unsafe { std::mem::transmute::<usize, AcldumpUnregCallbackFn>(addr) };
        // SAFETY: no arguments.
        forwarded.call(|| unsafe { f() });
        if reentered.is_none() {
            CallbackSlot::other_unregistered();
        }
    })
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

    #[test]
    fn a_call_re_entered_from_the_last_definition_is_refused_not_repeated() {
        // As if aclmdlExecute, acldumpRegCallback and the single-op launches had forwarded to a definition in
        // libc, the last object that could define them: a call from inside it has nowhere further to go.
        let libc_function = libc::getpid as *const () as usize;
        let executions = model_executions();
        let slot_events = CallbackSlot::events();
        {
            let _forwarding = Forwarding::to(EXECUTE, libc_function);
            // SAFETY: nothing is called: no definition follows libc's.
            let code = unsafe { aclmdlExecute(0, std::ptr::null(), std::ptr::null_mut()) };
            assert_eq!(code, ACL_ERROR_API_NOT_SUPPORT);
        }
        {
            let _forwarding = Forwarding::to(REG_CALLBACK, libc_function);
            // SAFETY: nothing is called: no definition follows libc's.
            let code = unsafe { acldumpRegCallback(None, 0) };
            assert_eq!(code, ACL_ERROR_API_NOT_SUPPORT);
        }
        let op_launches = op_executions();
        let null: *mut c_void = std::ptr::null_mut();
        for slot in [
            OP_EXECUTE,
            OP_COMPILE_EXECUTE,
            OP_COMPILE_EXECUTE_V2,
            OP_EXECUTE_DEPRECATED,
            OP_EXEC_WITH_HANDLE,
        ] {
            let _forwarding = Forwarding::to(slot, libc_function);
            // SAFETY: nothing is called: no definition follows libc's.
            let code = unsafe {
                match slot {
                    OP_EXECUTE => aclopExecuteV2(
                        null.cast(),
                        0,
                        null.cast(),
                        null.cast(),
                        0,
                        null.cast(),
                        null.cast(),
                        null.cast(),
                        null,
                    ),
                    OP_COMPILE_EXECUTE => aclopCompileAndExecute(
                        null.cast(),
                        0,
                        null.cast(),
                        null.cast(),
                        0,
                        null.cast(),
                        null.cast(),
                        null.cast(),
                        ACL_ENGINE_SYS,
                        ACL_COMPILE_SYS,
                        null.cast(),
                        null,
                    ),
                    OP_COMPILE_EXECUTE_V2 => aclopCompileAndExecuteV2(
                        null.cast(),
                        0,
                        null.cast(),
                        null.cast(),
                        0,
                        null.cast(),
                        null.cast(),
                        null.cast(),
                        ACL_ENGINE_SYS,
                        ACL_COMPILE_SYS,
                        null.cast(),
                        null,
                    ),
                    OP_EXECUTE_DEPRECATED => aclopExecute(
                        null.cast(),
                        0,
                        null.cast(),
                        null.cast(),
                        0,
                        null.cast(),
                        null.cast(),
                        null.cast(),
                        null,
                    ),
                    _ => aclopExecWithHandle(null.cast(), 0, null.cast(), 0, null.cast(), null),
                }
            };
            assert_eq!(code, ACL_ERROR_API_NOT_SUPPORT, "{:?}", NAMES[slot]);
        }
        assert_eq!(op_executions(), op_launches, "a refused single-op launch is not counted");
        assert_eq!(model_executions(), executions, "a refused call is not counted");
        assert_eq!(CallbackSlot::events(), slot_events, "nor is it a registration");
        assert_eq!((forwarding::inside(EXECUTE), forwarding::inside(REG_CALLBACK)), (None, None));
    }
}
