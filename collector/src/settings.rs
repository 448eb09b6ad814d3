//! Runtime settings the job makes, seen by interposing the calls that make them: the deterministic
//! computation option (`aclrtCtxSetSysParamOpt`) and the float overflow mode (`aclrtSetDeviceSatMode`).
//!
//! Reading them back later does not work: a framework resets the device (and its context, where the
//! options live) before `aclFinalize`, so the values the job trained with are gone by the end. The hooks
//! forward every call unchanged and remember what a successful call set; the manifest records it
//! (`environment.settings`). Like `aclInit`, they are reached through the global scope (`LD_PRELOAD`) and,
//! for a framework that looks them up through the runtime's handle, through the collector's `dlsym`
//! ([`crate::dlsym`]). Active or not, the collector always forwards; a call re-entered from inside a
//! forwarding compatibility library is passed on past it and recorded once ([`crate::forwarding`]).

use crate::entry_guard::{guarded, Forwarded};
use crate::forwarding::{self, Forwarding};
use ascend_sys::*;
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

/// No value seen yet.
const UNSET: i64 = i64::MIN;
static DETERMINISTIC: AtomicI64 = AtomicI64::new(UNSET);
static OVERFLOW_MODE: AtomicI64 = AtomicI64::new(UNSET);

/// What the job set so far.
pub fn observed() -> accutrace_formats::capture::JobSettings {
    let load = |a: &AtomicI64| Some(a.load(Ordering::Acquire)).filter(|&v| v != UNSET);
    accutrace_formats::capture::JobSettings {
        deterministic: load(&DETERMINISTIC),
        overflow_mode: load(&OVERFLOW_MODE)
            .map(|m| overflow_mode_name(m as aclrtFloatOverflowMode).to_string()),
    }
}

/// The manifest's name of an overflow mode.
pub fn overflow_mode_name(mode: aclrtFloatOverflowMode) -> &'static str {
    match mode {
        ACL_RT_OVERFLOW_MODE_SATURATION => "saturation",
        ACL_RT_OVERFLOW_MODE_INFNAN => "inf_nan",
        _ => "undef",
    }
}

/// The watched names, by slot in [`REAL`].
const NAMES: [&CStr; 2] = [c"aclrtCtxSetSysParamOpt", c"aclrtSetDeviceSatMode"];
const SYS_PARAM: usize = 0;
const SAT_MODE: usize = 1;

/// The runtime's functions: what a `dlsym` through the collector found, else (0) the next definition.
static REAL: [AtomicUsize; 2] = [const { AtomicUsize::new(0) }; 2];

/// For `dlsym` ([`crate::dlsym`]): our hook instead of `real` for a watched name, `real` remembered as the
/// function the hook forwards to. Allocation-free, like all of `dlsym`'s path.
pub fn interpose(name: &CStr, real: *mut c_void) -> Option<*mut c_void> {
    let slot = NAMES.iter().position(|n| *n == name)?;
    let hook = hook_of(slot);
    if real == hook {
        return None;
    }
    REAL[slot].store(real.expose_provenance(), Ordering::Release);
    Some(hook)
}

/// Our hook for a slot.
fn hook_of(slot: usize) -> *mut c_void {
    match slot {
        SYS_PARAM => aclrtCtxSetSysParamOpt as *const () as *mut c_void,
        _ => aclrtSetDeviceSatMode as *const () as *mut c_void,
    }
}

/// Where a call of `slot` goes (0: nowhere), and whether it re-entered from inside the definition an
/// enclosing call of it forwarded to (a forwarding compatibility library, [`crate::forwarding`]): then it
/// goes past that one, and only the enclosing call records the setting.
fn target(slot: usize) -> (usize, bool) {
    let ours = hook_of(slot).expose_provenance();
    let guard = forwarding::SETTINGS_FIRST + slot;
    match forwarding::reentered(guard, NAMES[slot], ours, "ACL_ERROR_API_NOT_SUPPORT", "the runtime") {
        Some(next) => (next.unwrap_or(0), true),
        None => (real(slot), false),
    }
}

/// The real function of a slot: the one `dlsym` saw, else the next definition after ours (0: none).
fn real(slot: usize) -> usize {
    let known = REAL[slot].load(Ordering::Acquire);
    if known != 0 {
        return known;
    }
    // SAFETY: a NUL-terminated name; RTLD_NEXT lookups have no other requirement.
    unsafe { libc::dlsym(libc::RTLD_NEXT, NAMES[slot].as_ptr()) }.expose_provenance()
}

/// Interposes `aclrtCtxSetSysParamOpt`: forwards, and remembers a deterministic option that was set.
#[no_mangle]
pub extern "C" fn aclrtCtxSetSysParamOpt(opt: aclSysParamOpt, value: i64) -> aclError {
    guarded("aclrtCtxSetSysParamOpt", ACL_ERROR_INTERNAL_ERROR, |forwarded| {
        set_sys_param_opt(forwarded, opt, value)
    })
}

fn set_sys_param_opt(forwarded: &Forwarded<aclError>, opt: aclSysParamOpt, value: i64) -> aclError {
    let (addr, reentered) = target(SYS_PARAM);
    if addr == 0 {
        // A re-entered call's refusal was said by forwarding::reentered.
        if !reentered {
            crate::log(
                "the real aclrtCtxSetSysParamOpt cannot be found; returning ACL_ERROR_API_NOT_SUPPORT",
            );
        }
        return ACL_ERROR_API_NOT_SUPPORT;
    }
    let _forwarding = Forwarding::to(forwarding::SETTINGS_FIRST + SYS_PARAM, addr);
    // SAFETY: a non-zero slot holds the runtime's definition of this very symbol, whose C signature is
    // AclrtCtxSetSysParamOptFn (accutrace_acl.h); the arguments are forwarded unchanged.
    let code = forwarded
        .call(|| unsafe { std::mem::transmute::<usize, AclrtCtxSetSysParamOptFn>(addr)(opt, value) });
    if code == ACL_SUCCESS && opt == ACL_OPT_DETERMINISTIC && !reentered {
        DETERMINISTIC.store(value, Ordering::Release);
    }
    code
}

/// Interposes `aclrtSetDeviceSatMode`: forwards, and remembers the mode that was set.
#[no_mangle]
pub extern "C" fn aclrtSetDeviceSatMode(mode: aclrtFloatOverflowMode) -> aclError {
    guarded("aclrtSetDeviceSatMode", ACL_ERROR_INTERNAL_ERROR, |forwarded| {
        set_device_sat_mode(forwarded, mode)
    })
}

fn set_device_sat_mode(forwarded: &Forwarded<aclError>, mode: aclrtFloatOverflowMode) -> aclError {
    let (addr, reentered) = target(SAT_MODE);
    if addr == 0 {
        if !reentered {
            crate::log("the real aclrtSetDeviceSatMode cannot be found; returning ACL_ERROR_API_NOT_SUPPORT");
        }
        return ACL_ERROR_API_NOT_SUPPORT;
    }
    let _forwarding = Forwarding::to(forwarding::SETTINGS_FIRST + SAT_MODE, addr);
    // SAFETY: as above, for aclrtSetDeviceSatMode (AclrtSetDeviceSatModeFn).
    let code =
        forwarded.call(|| unsafe { std::mem::transmute::<usize, AclrtSetDeviceSatModeFn>(addr)(mode) });
    if code == ACL_SUCCESS && !reentered {
        OVERFLOW_MODE.store(i64::from(mode), Ordering::Release);
    }
    code
}

/// Compile-time evidence that the hooks have the header's signatures.
#[allow(dead_code)]
const SIGNATURES: () = {
    let _: AclrtCtxSetSysParamOptFn = aclrtCtxSetSysParamOpt;
    let _: AclrtSetDeviceSatModeFn = aclrtSetDeviceSatMode;
};
