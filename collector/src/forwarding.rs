//! Forwarding past a library that calls back into the collector. A compatibility library (CANN ships a
//! prebuilt `libascendcl.so` beside the split `libacl_rt.so`/`libascend_dump.so`) may define an ACL function
//! as a wrapper that calls the real one through its PLT or `dlsym(RTLD_DEFAULT)`. With the collector
//! preloaded, that call reaches our export again, whose next definition is the wrapper: the two would call
//! each other until the stack overflowed and killed the job.
//!
//! So each hook notes, per thread, which definition it is forwarding to ([`Forwarding`]). A call of the
//! same hook arriving while that is set came from inside that definition ([`inside`]): it is forwarded to
//! the first definition of the name in an object loaded after the one holding it, neither the collector
//! nor that object ([`next_definition_after`], remembered per hook), and the collector's own part does not
//! run again. When no such definition exists the hook answers an error code instead of recursing.
//!
//! The ACL hooks (acl_hooks.rs), the settings hooks (settings.rs) and the HCCL hooks (hccl.rs, whose
//! libhccl.so may be such a shim in front of the library implementing HCCL) share this one mechanism, each
//! hook with its own slot.
//!
//! This runs in the hooks, never in `dlsym`'s path, so it may allocate (dlopen may); it never panics.

use crate::entry_guard::guarded;
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

/// acl_hooks' slots: guards 0 to `ACL_HOOKS - 1`.
pub const ACL_HOOKS: usize = 10;
/// hccl's slots: guards `HCCL_FIRST + slot`.
pub const HCCL_HOOKS: usize = 10;
/// The first of hccl's guards.
pub const HCCL_FIRST: usize = ACL_HOOKS;
/// settings' slots (`aclrtCtxSetSysParamOpt`, `aclrtSetDeviceSatMode`): guards `SETTINGS_FIRST + slot`.
pub const SETTINGS_HOOKS: usize = 2;
/// The first of settings' guards.
pub const SETTINGS_FIRST: usize = HCCL_FIRST + HCCL_HOOKS;
/// How many hooks have a guard.
pub const HOOKS: usize = SETTINGS_FIRST + SETTINGS_HOOKS;

/// The target noted when the hook forwards to a definition it did not look up itself (aclInit's runtime
/// found through the loader): a call re-entering from there has nowhere known to go.
pub const UNKNOWN_TARGET: usize = usize::MAX;

thread_local! {
    /// Per hook: the definition this thread is forwarding to now, 0 when it is not inside that hook.
    /// Const-initialised and without a destructor: no allocation or registration on first use.
    static FORWARDING_TO: [Cell<usize>; HOOKS] = const { [const { Cell::new(0) }; HOOKS] };
}

/// Held while this thread forwards hook `hook`'s call to a definition; restores the enclosing one on drop.
pub struct Forwarding {
    hook: usize,
    enclosing: usize,
}

impl Forwarding {
    /// This thread now forwards `hook`'s call to `target` (a function's address, or [`UNKNOWN_TARGET`]).
    pub fn to(hook: usize, target: usize) -> Forwarding {
        let target = if target == 0 { UNKNOWN_TARGET } else { target };
        let enclosing = FORWARDING_TO.with(|f| f[hook].replace(target));
        Forwarding { hook, enclosing }
    }
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        FORWARDING_TO.with(|f| f[self.hook].set(self.enclosing));
    }
}

/// The definition an enclosing call of `hook` on this thread is forwarding to: `Some` means this call came
/// from inside it.
pub fn inside(hook: usize) -> Option<usize> {
    Some(FORWARDING_TO.with(|f| f[hook].get())).filter(|&t| t != 0)
}

/// Where a call of `hook` (the export `name`, ours at `ours`) goes: `None` for the outermost call (the
/// collector's part runs), else, as it arrived from inside the definition an enclosing call of it forwarded
/// to, the next definition past that one, `Some(None)` when there is none. Then the hook answers `refusal`
/// (said once per hook, naming `defined_by`, what should define it) rather than call it again.
pub fn reentered(
    hook: usize,
    name: &CStr,
    ours: usize,
    refusal: &str,
    defined_by: &str,
) -> Option<Option<usize>> {
    let from = inside(hook)?;
    let next = next_after(hook, from, name, ours);
    if next.is_none() {
        static SAID: [AtomicBool; HOOKS] = [const { AtomicBool::new(false) }; HOOKS];
        if !SAID[hook].swap(true, Ordering::Relaxed) {
            crate::log(&format!(
                "{name} was called again from inside the {name} the collector forwarded to (a library that \
                 forwards {name} through the global scope, loaded before {defined_by}), and no later library \
                 defines it; answering {refusal} instead of calling it again. Load {defined_by} before that \
                 library, or preload the collector after it",
                name = name.to_string_lossy()
            ));
        }
    }
    Some(next)
}

/// Per hook, the last lookup: (from, the next definition after it or 0 for none). A wrapper re-enters on
/// every call (every launch, for the execute hooks), so the walk below runs once per wrapper.
static NEXT: Mutex<[(usize, usize); HOOKS]> = Mutex::new([(0, 0); HOOKS]);

/// [`next_definition_after`], remembered per hook.
pub fn next_after(hook: usize, from: usize, name: &CStr, ours: usize) -> Option<usize> {
    let cached = NEXT.lock().unwrap_or_else(PoisonError::into_inner)[hook];
    if cached.0 == from && from != 0 {
        return Some(cached.1).filter(|&n| n != 0);
    }
    let next = next_definition_after(from, name, ours);
    NEXT.lock().unwrap_or_else(PoisonError::into_inner)[hook] = (from, next.unwrap_or(0));
    next
}

/// The most loaded objects looked at (a training job loads a few hundred at most).
const MAX_OBJECTS: usize = 1024;

#[cfg(target_pointer_width = "64")]
type Phdr = libc::Elf64_Phdr;
#[cfg(target_pointer_width = "32")]
type Phdr = libc::Elf32_Phdr;

/// A loaded object as `dl_iterate_phdr` describes it: its name, load bias and program headers (which lie in
/// the object's own mapped memory).
#[derive(Clone, Copy)]
struct Object {
    name: *const c_char,
    bias: usize,
    phdr: *const Phdr,
    phnum: usize,
}

impl Object {
    /// Whether `addr` lies in one of the object's loaded segments.
    fn holds(&self, addr: usize) -> bool {
        // SAFETY: `phdr` points at `phnum` program headers of an object that is still loaded.
        let headers = unsafe { std::slice::from_raw_parts(self.phdr, self.phnum) };
        headers.iter().any(|h| {
            let start = self.bias.wrapping_add(h.p_vaddr as usize);
            h.p_type == libc::PT_LOAD && addr >= start && addr - start < h.p_memsz as usize
        })
    }
}

/// The loaded objects, in load order (the loader's list, which `dl_iterate_phdr` walks).
struct Objects {
    list: [Object; MAX_OBJECTS],
    len: usize,
}

/// Copies one object's description into `data` (an [`Objects`]); 1 stops the walk (also after a panic).
unsafe extern "C" fn collect_object(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut c_void,
) -> c_int {
    guarded("dl_iterate_phdr callback", 1, |_| {
        // SAFETY: dl_iterate_phdr passes a valid info, and `data` is the `Objects` next_definition_after
        // lent.
        let (info, objects) = unsafe { (&*info, &mut *data.cast::<Objects>()) };
        if objects.len == MAX_OBJECTS || info.dlpi_phdr.is_null() {
            return i32::from(objects.len == MAX_OBJECTS); // 1 stops the walk: the rest is not looked at
        }
        objects.list[objects.len] = Object {
            name: info.dlpi_name,
            bias: info.dlpi_addr as usize,
            phdr: info.dlpi_phdr,
            phnum: usize::from(info.dlpi_phnum),
        };
        objects.len += 1;
        0
    })
}

/// The first definition of `name` in an object loaded after the one holding `from` that is neither that
/// object nor the collector's (the object holding `ours`), defined by that object itself.
pub fn next_definition_after(from: usize, name: &CStr, ours: usize) -> Option<usize> {
    let empty = Object { name: std::ptr::null(), bias: 0, phdr: std::ptr::null(), phnum: 0 };
    let mut objects = Objects { list: [empty; MAX_OBJECTS], len: 0 };
    // SAFETY: the callback only copies what the loader describes into `objects`, which outlives the call.
    // Nothing else runs under the loader's lock: dlopen below would take its locks the other way round.
    unsafe { libc::dl_iterate_phdr(Some(collect_object), (&raw mut objects).cast()) };
    let list = &objects.list[..objects.len];
    let at = list.iter().position(|o| o.holds(from))?;
    for object in &list[at + 1..] {
        // SAFETY: the loader's name of a loaded object, NUL-terminated (empty for the program and vdso-like
        // entries, which cannot be opened by name).
        if object.name.is_null() || unsafe { *object.name } == 0 || object.holds(ours) {
            continue;
        }
        // SAFETY: RTLD_NOLOAD only opens an object already loaded (no initialiser runs); the handle is
        // closed at once. The lookup goes through the collector's dlsym, which answers a caller inside the
        // collector with the loader's own result.
        let found = unsafe {
            let handle = libc::dlopen(object.name, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            if handle.is_null() {
                continue;
            }
            let found = libc::dlsym(handle, name.as_ptr());
            libc::dlclose(handle);
            found as usize
        };
        // A handle's lookup also searches the object's dependencies: only the object's own definition counts.
        if found != 0 && object.holds(found) {
            return Some(found);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_definition_is_in_a_later_object_and_the_last_has_none() {
        let ours = the_next_definition_is_in_a_later_object_and_the_last_has_none as *const () as usize;
        let getpid = libc::getpid as *const () as usize;
        // From this test binary (the collector's object here) to libc's definition, skipping ours.
        assert_eq!(next_definition_after(ours, c"getpid", ours), Some(getpid));
        assert_eq!(next_after(0, ours, c"getpid", ours), Some(getpid));
        assert_eq!(next_after(0, ours, c"getpid", ours), Some(getpid), "remembered");
        // Past libc, nothing defines getpid: no definition, never libc's again.
        assert_eq!(next_definition_after(getpid, c"getpid", ours), None);
        assert_eq!(next_definition_after(getpid, c"no_such_symbol_anywhere", ours), None);
        assert_eq!(next_definition_after(0, c"getpid", ours), None, "no object holds address 0");
    }

    #[test]
    fn a_forwarding_mark_is_per_hook_and_restores_the_enclosing_one() {
        assert_eq!(inside(1), None);
        {
            let _outer = Forwarding::to(1, 0x1000);
            assert_eq!((inside(1), inside(2)), (Some(0x1000), None));
            {
                let _inner = Forwarding::to(1, 0);
                assert_eq!(inside(1), Some(UNKNOWN_TARGET));
            }
            assert_eq!(inside(1), Some(0x1000));
        }
        assert_eq!(inside(1), None);
    }
}
