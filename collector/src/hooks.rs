//! Hooks: the guard that makes calls from inside the collector pass straight through, and the process
//! hooks that end a capture when the job does not call `aclFinalize`: at exit, in a forked child (which
//! forgets its parent's capture), and on SIGTERM (a handler that hands the sealing to a watcher thread and
//! waits for it, then lets the signal proceed).

use crate::finish::{finish, End};
use crate::pipeline::{self, current};
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::OnceLock;

thread_local! {
    /// Set while this thread runs collector code: hooks reached from inside it only forward.
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Held while this thread runs collector code.
pub(crate) struct Reentry;

impl Reentry {
    /// `None` if this thread is already inside the collector.
    pub(crate) fn enter() -> Option<Reentry> {
        IN_HOOK.with(|f| (!f.replace(true)).then_some(Reentry))
    }
}

impl Drop for Reentry {
    fn drop(&mut self) {
        IN_HOOK.with(|f| f.set(false));
    }
}

/// The process whose hooks are installed (a forked child installs its own watcher).
static HOOKS_PID: AtomicU32 = AtomicU32::new(0);
/// Self-pipe from the SIGTERM handler to the watcher thread, and the acknowledgement pipe back.
static TERM_WRITE: AtomicI32 = AtomicI32::new(-1);
static ACK_READ: AtomicI32 = AtomicI32::new(-1);
/// The handler that was installed before ours.
static PREVIOUS_TERM: OnceLock<libc::sigaction> = OnceLock::new();
/// How long the SIGTERM handler waits for the capture to be sealed before letting the signal proceed.
pub const TERM_TIMEOUT_MS: i32 = 10_000;

/// Installs the exit, fork and SIGTERM hooks once per process (and a SIGTERM watcher per process).
pub(crate) fn install_process_hooks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering extern "C" functions that catch every panic; they outlive the process.
        unsafe {
            libc::atexit(at_exit);
            libc::pthread_atfork(None, None, Some(in_child));
        }
        install_sigterm();
    });
    let pid = std::process::id();
    if HOOKS_PID.swap(pid, Ordering::AcqRel) != pid {
        start_term_watcher();
    }
}

extern "C" fn at_exit() {
    let _ = catch_unwind(|| {
        if let Some(p) = current() {
            if let Some(_g) = Reentry::enter() {
                let _shield = crate::signals::Shield::new();
                finish(p, End::Finalize);
            }
        }
    });
}

/// In a forked child: forget the parent's capture (its threads do not exist here). Atomics only: other
/// locks may have been held by parent threads at the fork.
extern "C" fn in_child() {
    // Plain catch_unwind, not entry_guard's (which logs under a lock): after a fork only async-signal-safe
    // work is sound, and nothing here panics; the guard only keeps a panic from aborting the child.
    let _ = catch_unwind(|| {
        pipeline::forget_in_child();
        TERM_WRITE.store(-1, Ordering::Release);
        ACK_READ.store(-1, Ordering::Release);
    });
}

fn install_sigterm() {
    // SAFETY: sigaction structs are plain data; we install a handler that only makes async-signal-safe
    // calls (write, poll, read, sigaction, raise) and keep the previous action to chain to.
    unsafe {
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = on_sigterm as *const () as usize;
        new.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut new.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGTERM, &new, &mut old) == 0 {
            let _ = PREVIOUS_TERM.set(old);
        }
    }
}

/// The watcher thread: waits for the handler's byte, seals the capture, acknowledges.
fn start_term_watcher() {
    let mut term = [0 as c_int; 2];
    let mut ack = [0 as c_int; 2];
    // SAFETY: pipe2 writes two descriptors into each array.
    let ok = unsafe {
        libc::pipe2(term.as_mut_ptr(), libc::O_CLOEXEC) == 0
            && libc::pipe2(ack.as_mut_ptr(), libc::O_CLOEXEC) == 0
    };
    if !ok {
        return;
    }
    let (term_read, ack_write) = (term[0], ack[1]);
    // A quiet thread: SIGTERM must run its handler on another thread, which then waits for this one.
    let spawned = crate::signals::spawn_quiet("accutrace-term", move || {
        let mut byte = 0u8;
        loop {
            // SAFETY: reading one byte into a local from a descriptor this thread owns.
            let n = unsafe { libc::read(term_read, (&mut byte as *mut u8).cast(), 1) };
            if n == 1 {
                let _ = catch_unwind(|| {
                    if let Some(p) = current() {
                        finish(p, End::Signal);
                    }
                });
                // SAFETY: writing one byte from a local to a descriptor this thread owns.
                unsafe { libc::write(ack_write, (&byte as *const u8).cast(), 1) };
            } else if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            } else {
                return;
            }
        }
    });
    if spawned.is_ok() {
        ACK_READ.store(ack[0], Ordering::Release);
        TERM_WRITE.store(term[1], Ordering::Release);
    }
}

extern "C" fn on_sigterm(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // Plain catch_unwind, as in_child's: a signal handler makes async-signal-safe calls only.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        static HANDLING: AtomicBool = AtomicBool::new(false);
        let (w, r) = (TERM_WRITE.load(Ordering::Acquire), ACK_READ.load(Ordering::Acquire));
        // SAFETY: write, poll, read, getpid, sigaction and raise are async-signal-safe; the
        // buffers are locals; the previous action is a plain copy made at installation.
        unsafe {
            let ours = HOOKS_PID.load(Ordering::Acquire) == libc::getpid() as u32;
            if ours && w >= 0 && r >= 0 && pipeline::is_running() && !HANDLING.swap(true, Ordering::AcqRel) {
                let byte = 1u8;
                if libc::write(w, (&byte as *const u8).cast(), 1) == 1 {
                    let mut fd = libc::pollfd { fd: r, events: libc::POLLIN, revents: 0 };
                    if libc::poll(&mut fd, 1, TERM_TIMEOUT_MS) == 1 {
                        let mut b = 0u8;
                        libc::read(r, (&mut b as *mut u8).cast(), 1);
                    }
                }
            }
            match PREVIOUS_TERM.get() {
                Some(prev) if prev.sa_sigaction == libc::SIG_IGN => {}
                Some(prev) if prev.sa_sigaction != libc::SIG_DFL => {
                    if prev.sa_flags & libc::SA_SIGINFO != 0 {
                        let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                            std::mem::transmute(prev.sa_sigaction);
                        f(sig, info, ctx);
                    } else {
                        let f: extern "C" fn(c_int) = std::mem::transmute(prev.sa_sigaction);
                        f(sig);
                    }
                }
                _ => {
                    // Default action: restore it and re-raise; the signal is blocked in this handler, so it
                    // is delivered (and terminates the process) as soon as the handler returns.
                    let mut dfl: libc::sigaction = std::mem::zeroed();
                    dfl.sa_sigaction = libc::SIG_DFL;
                    libc::sigaction(libc::SIGTERM, &dfl, std::ptr::null_mut());
                    libc::raise(libc::SIGTERM);
                }
            }
        }
    }));
}
