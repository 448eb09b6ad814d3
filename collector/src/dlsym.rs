//! `dlsym` interposition: frameworks that resolve a library's functions with `dlopen` + `dlsym(handle,
//! name)` (torch_npu's `FunctionLoader` does so for HCCL, cann-facts §5) never reach an `LD_PRELOAD`ed
//! definition, because a lookup through a handle searches that library and its dependencies only. So the
//! collector exports `dlsym` itself: it asks the real one, then lets each interposing module swap the
//! result for its wrapper (`INTERPOSERS`; the module remembers the real function and forwards to it).
//!
//! `dlsym(RTLD_NEXT, name)` means "the next definition after the CALLER's object", and glibc finds the
//! caller from the return address. A Rust function calling the real `dlsym` would make every such lookup
//! relative to `libcollector.so` instead, so another interposer loaded after us would be handed its own
//! definition and recurse. The export is therefore a few instructions of assembly: RTLD_NEXT jumps straight
//! into the real `dlsym` with the caller's return address untouched (nothing to interpose there: a
//! framework never asks RTLD_NEXT for a library it loaded itself); every other handle goes to
//! `dlsym_hook`, which also gets the caller's return address: a lookup made by the collector's own code
//! (attaching to the runtime, finding the real functions) always gets the real symbol. x86_64 and aarch64 only (where Ascend hosts run); elsewhere nothing is interposed and the
//! HCCL wrappers are reached only through the global scope.
//!
//! Everything on this path runs in every process the library is preloaded into, possibly before `main`
//! and from inside other libraries' initialisation: it neither allocates nor takes locks nor panics (its
//! panic guard, [`crate::entry_guard`], allocates and logs only after a panic).

use crate::entry_guard::guarded;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// The modules that hand out wrappers: each returns `Some(pointer to return)` for a name it watches.
const INTERPOSERS: &[fn(&CStr, *mut c_void) -> Option<*mut c_void>] =
    &[crate::acl_hooks::interpose, crate::hccl::interpose, crate::settings::interpose];

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// glibc's `dlsym`, once resolved (read by the assembly below, so it must stay a plain pointer-sized static).
static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// Stands in for `dlsym` where the real one cannot be found (not glibc): every lookup fails.
unsafe extern "C" fn no_dlsym(_handle: *mut c_void, _name: *const c_char) -> *mut c_void {
    guarded("dlsym", std::ptr::null_mut(), |_| std::ptr::null_mut())
}

/// Finds glibc's `dlsym` through `dlvsym`, which is not interposed: in libc.so.6 since glibc 2.34, in
/// libdl before (version `GLIBC_2.2.5` on x86_64, `GLIBC_2.17` on aarch64).
extern "C" fn resolve_real_dlsym() -> *mut c_void {
    guarded("dlsym", no_dlsym as DlsymFn as *mut c_void, |_| {
        let current = REAL_DLSYM.load(Ordering::Acquire);
        if !current.is_null() {
            return current;
        }
        let mut found = std::ptr::null_mut();
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"] {
            // SAFETY: NUL-terminated strings; RTLD_NEXT from this object finds the definition after ours.
            found = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
            if !found.is_null() {
                break;
            }
        }
        if found.is_null() {
            found = no_dlsym as DlsymFn as *mut c_void;
        }
        REAL_DLSYM.store(found, Ordering::Release);
        found
    })
}

/// Whether `addr` lies in the collector's own object: the collector's own lookups (attaching to the
/// runtime, finding the real functions) must get the real symbols, never its own hooks.
fn is_ours(addr: usize) -> bool {
    static OWN_BASE: AtomicUsize = AtomicUsize::new(0);
    let base_of = |a: usize| -> usize {
        // SAFETY: dladdr only reads the loader's tables; a zeroed Dl_info is a valid output buffer.
        unsafe {
            let mut info: libc::Dl_info = std::mem::zeroed();
            if libc::dladdr(a as *const c_void, &mut info) != 0 {
                info.dli_fbase as usize
            } else {
                0
            }
        }
    };
    let mut own = OWN_BASE.load(Ordering::Relaxed);
    if own == 0 {
        own = base_of(is_ours as *const () as usize);
        OWN_BASE.store(own, Ordering::Relaxed);
    }
    own != 0 && base_of(addr) == own
}

/// `dlsym` for every handle but RTLD_NEXT: the real lookup, then the interposers' say, unless the caller
/// (whose return address the trampoline passes as `caller`) is the collector itself.
extern "C" fn dlsym_hook(handle: *mut c_void, name: *const c_char, caller: usize) -> *mut c_void {
    guarded("dlsym", std::ptr::null_mut(), |forwarded| {
        // SAFETY: `resolve_real_dlsym` returns glibc's dlsym (or `no_dlsym`), both of the DlsymFn signature.
        let real: DlsymFn = unsafe { std::mem::transmute::<*mut c_void, DlsymFn>(resolve_real_dlsym()) };
        // SAFETY: forwarding the caller's arguments unchanged.
        let found = forwarded.call(|| unsafe { real(handle, name) });
        if name.is_null() || found.is_null() {
            return found;
        }
        // SAFETY: a non-null name that the real dlsym just read as a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(name) };
        if is_ours(caller) {
            return found;
        }
        // Nothing below allocates or panics (the interposers compare names and store atomics); were it to
        // panic, the guard answers what the real dlsym found.
        INTERPOSERS.iter().find_map(|f| f(name, found)).unwrap_or(found)
    })
}

/// The exported `dlsym` (see the module docs): RTLD_NEXT tail-jumps into the real one, everything else goes
/// to `dlsym_hook`.
///
/// # Safety
/// dlsym's contract: `name` is a NUL-terminated string, `handle` a handle or a pseudo-handle.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // RTLD_NEXT is (void *)-1. The slow path resolves the real dlsym once, keeping the arguments and a
    // 16-byte aligned stack for the call, then jumps as the fast path does.
    core::arch::naked_asm!(
        "cmp rdi, -1",
        "je 2f",
        // The caller's return address becomes dlsym_hook's third argument.
        "mov rdx, [rsp]",
        "jmp {hook}",
        "2:",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 3f",
        "jmp rax",
        "3:",
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {resolve}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "jmp rax",
        hook = sym dlsym_hook,
        real = sym REAL_DLSYM,
        resolve = sym resolve_real_dlsym,
    )
}

/// The exported `dlsym` (see the module docs): RTLD_NEXT tail-jumps into the real one, everything else goes
/// to `dlsym_hook`.
///
/// # Safety
/// dlsym's contract: `name` is a NUL-terminated string, `handle` a handle or a pseudo-handle.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // RTLD_NEXT is (void *)-1: `cmn x0, #1` sets Z exactly then. x16 is the intra-procedure-call scratch
    // register, free to use at a call boundary; the slow path saves the arguments and the link register.
    core::arch::naked_asm!(
        "cmn x0, #1",
        "b.eq 2f",
        // The caller's return address (the link register) becomes dlsym_hook's third argument.
        "mov x2, x30",
        "b {hook}",
        "2:",
        "adrp x16, {real}",
        "ldr x16, [x16, :lo12:{real}]",
        "cbz x16, 3f",
        "br x16",
        "3:",
        "stp x29, x30, [sp, #-32]!",
        "stp x0, x1, [sp, #16]",
        "bl {resolve}",
        "mov x16, x0",
        "ldp x0, x1, [sp, #16]",
        "ldp x29, x30, [sp], #32",
        "br x16",
        hook = sym dlsym_hook,
        real = sym REAL_DLSYM,
        resolve = sym resolve_real_dlsym,
    )
}

#[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
mod tests {
    use super::*;

    #[test]
    fn lookups_through_the_export_behave_like_glibc_s() {
        // This test binary links the collector, so `dlsym` below is ours.
        // SAFETY: NUL-terminated names and valid pseudo-handles.
        unsafe {
            let getpid = dlsym(libc::RTLD_DEFAULT, c"getpid".as_ptr());
            assert_eq!(getpid, libc::getpid as *mut c_void);
            assert!(dlsym(libc::RTLD_DEFAULT, c"no_such_symbol_anywhere".as_ptr()).is_null());
            // RTLD_NEXT from this binary finds libc's definition after it.
            assert_eq!(dlsym(libc::RTLD_NEXT, c"getpid".as_ptr()), getpid);
            // A lookup through a handle of a watched HCCL name that does not exist stays null.
            let libc_handle = libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
            assert!(!libc_handle.is_null());
            assert!(dlsym(libc_handle, c"HcclAllReduce".as_ptr()).is_null());
            assert_eq!(dlsym(libc_handle, c"getpid".as_ptr()), getpid);
        }
        // A caller inside the collector is never handed a hook; one outside is.
        let ours = is_ours as *const () as usize;
        let outside = libc::getpid as *const () as usize;
        assert!(is_ours(ours) && !is_ours(outside));
        assert_eq!(crate::acl_hooks::interpose(c"getpid", std::ptr::null_mut()), None);
        assert!(!REAL_DLSYM.load(Ordering::Acquire).is_null());
    }
}
