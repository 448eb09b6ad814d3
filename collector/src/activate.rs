//! Activation and the end of a capture: the interposed `aclInit`/`aclFinalize`, attaching to the runtime,
//! starting the pipeline, and sealing it at `aclFinalize`, at process exit, or on SIGTERM.
//!
//! Staged like bytehound: the library has no constructor; all work starts in the first interposed call,
//! after the real `aclInit` succeeded. A thread-local guard makes our own calls pass straight through.
//! Process-wide state is a few atomics (no locks), so a forked child can reset it safely: the child starts
//! inactive, inherits no writer threads, and gets its own stream if it calls `aclInit` itself.

use crate::config::{self, Activation, Config, PanicPoint};
use crate::pipeline::{Msg, Pipeline, Waker, RUNNING, STARTING, STOPPED};
use crate::pool::SlotPool;
use crate::routing::Router;
use accutrace_formats::capture::{Manifest, StreamInfo, StreamWriter, WriterOptions};
use ascend_sys::*;
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

/// The running pipeline of this process (null when none). Pipelines are leaked, never freed, so a
/// pointer loaded here stays valid even while another thread finishes the capture.
static CURRENT: AtomicPtr<Pipeline> = AtomicPtr::new(std::ptr::null_mut());
/// An activation is in progress or done in this process (reset at fork and after a finished capture).
static ACTIVATING: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set while this thread runs collector code: hooks reached from inside it only forward.
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// The running pipeline, if any.
pub fn current() -> Option<&'static Pipeline> {
    let p = CURRENT.load(Ordering::Acquire);
    // SAFETY: non-null values come from Box::leak in `activate` and are never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

struct Reentry;

impl Reentry {
    /// `None` if this thread is already inside the collector.
    fn enter() -> Option<Reentry> {
        IN_HOOK.with(|f| (!f.replace(true)).then_some(Reentry))
    }
}

impl Drop for Reentry {
    fn drop(&mut self) {
        IN_HOOK.with(|f| f.set(false));
    }
}

/// `dlsym(RTLD_NEXT, name)`: the definition after ours in the lookup order (the runtime's).
fn next_symbol(name: &std::ffi::CStr) -> *mut c_void {
    // SAFETY: `name` is NUL-terminated; RTLD_NEXT lookups have no other requirement.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
}

fn real_init() -> Option<AclInitFn> {
    static REAL: OnceLock<usize> = OnceLock::new();
    let addr = *REAL.get_or_init(|| {
        let p = next_symbol(c"aclInit");
        if !p.is_null() {
            return p as usize;
        }
        // Not reachable through RTLD_NEXT (an unusual load order): ask the loaded runtime itself.
        AclLibrary::attach_loaded().ok().and_then(|l| l.fns.acl_init.map(|f| f as usize)).unwrap_or(0)
    });
    // SAFETY: a non-zero value is the address of the runtime's aclInit, whose C signature is AclInitFn.
    (addr != 0).then(|| unsafe { std::mem::transmute::<usize, AclInitFn>(addr) })
}

fn real_finalize() -> Option<AclFinalizeFn> {
    static REAL: OnceLock<usize> = OnceLock::new();
    let addr = *REAL.get_or_init(|| {
        let p = next_symbol(c"aclFinalize");
        if !p.is_null() {
            return p as usize;
        }
        AclLibrary::attach_loaded().ok().and_then(|l| l.fns.acl_finalize.map(|f| f as usize)).unwrap_or(0)
    });
    // SAFETY: as in real_init, for aclFinalize.
    (addr != 0).then(|| unsafe { std::mem::transmute::<usize, AclFinalizeFn>(addr) })
}

/// The interposed `aclInit`: forward, then activate on success (or on a harmless repeat init).
///
/// # Safety
/// `config_path` is what the caller passed to `aclInit`: NULL or a NUL-terminated path (aclInit's contract).
pub(crate) unsafe fn acl_init_hook(config_path: *const c_char) -> aclError {
    let Some(real) = real_init() else {
        crate::log(
            "the real aclInit cannot be found (is libascendcl.so loaded?); returning ACL_ERROR_UNINITIALIZE",
        );
        return ACL_ERROR_UNINITIALIZE;
    };
    // SAFETY: forwarding the caller's argument unchanged to the function it meant to call.
    let code = unsafe { real(config_path) };
    let Some(_guard) = Reentry::enter() else { return code };
    // Activation writes files on the job's thread: a write failure must not signal the job.
    let _shield = crate::signals::Shield::new();
    if (code == ACL_SUCCESS || code == ACL_ERROR_REPEAT_INITIALIZE)
        && catch_unwind(activate_from_env).is_err()
    {
        crate::log("activation panicked; the collector is inactive, the job continues without it");
        if let Some(p) = current() {
            p.disable("activation panicked");
        }
    }
    code
}

/// The interposed `aclFinalize`: seal the capture while the runtime still runs, then forward.
pub fn acl_finalize_hook() -> aclError {
    if let Some(_guard) = Reentry::enter() {
        if let Some(p) = current() {
            let _shield = crate::signals::Shield::new();
            if catch_unwind(AssertUnwindSafe(|| finish(p, End::Finalize))).is_err() {
                crate::log("finishing the capture panicked; segments written so far remain readable");
            }
        }
    }
    match real_finalize() {
        // SAFETY: the runtime's aclFinalize, no arguments.
        Some(f) => unsafe { f() },
        None => {
            crate::log("the real aclFinalize cannot be found; returning ACL_ERROR_UNINITIALIZE");
            ACL_ERROR_UNINITIALIZE
        }
    }
}

fn activate_from_env() {
    if ACTIVATING.swap(true, Ordering::AcqRel) {
        return; // already active (a repeated aclInit) or being activated
    }
    let cfg = match config::from_env() {
        Ok(Activation::Inert) => return,
        Ok(Activation::Active(c)) => *c,
        Err(e) => {
            crate::log(&format!("{e}; the collector is inactive"));
            return;
        }
    };
    if cfg.test_panic == Some(PanicPoint::Init) {
        panic!("ACCUTRACE_TEST_PANIC=init");
    }
    if let Err(e) = activate(cfg) {
        crate::log(&format!("{e}; the collector is inactive, the job continues without it"));
    }
}

/// Attaches, starts the pipeline, registers the callback and sets the dump configuration.
pub fn activate(cfg: Config) -> Result<(), String> {
    let acl = attach()?;
    let p = start(cfg, Some(acl))?;
    CURRENT.store(p as *const Pipeline as *mut Pipeline, Ordering::Release);
    install_process_hooks();
    read_overflow_mode(p);
    crate::manifest::publish(p, false);
    if let Err(e) = register(p) {
        p.disable(&e);
        finish(p, End::Finalize);
    }
    Ok(())
}

/// A pipeline fed by calling [`crate::callback::dump_callback`] directly, without a runtime: for
/// benchmarks and tests of the pipeline. It becomes the process's current pipeline.
#[doc(hidden)]
pub fn standalone(cfg: Config) -> Result<&'static Pipeline, String> {
    let p = start(cfg, None)?;
    CURRENT.store(p as *const Pipeline as *mut Pipeline, Ordering::Release);
    install_process_hooks();
    Ok(p)
}

/// Creates the run directory, the stream, the slot pool and the writer threads; returns a running pipeline.
fn start(cfg: Config, acl: Option<AclLibrary>) -> Result<&'static Pipeline, String> {
    // First what is most likely to fail under the job's limits (`ulimit -v`): then nothing is on disk yet.
    let pool = SlotPool::new(cfg.slots, cfg.slot_size)?;
    std::fs::create_dir_all(&cfg.dir).map_err(|e| format!("cannot create {}: {e}", cfg.dir.display()))?;
    let run_dir = cfg.dir.canonicalize().map_err(|e| format!("{}: {e}", cfg.dir.display()))?;
    let mut cfg = cfg;
    cfg.dir = run_dir.clone();
    cfg.segment_size = crate::limits::segment_size_within_file_limit(cfg.segment_size);

    let env_num = |k: &str| std::env::var(k).ok().and_then(|v| v.trim().parse::<i64>().ok());
    let rank = env_num("RANK_ID").and_then(|r| u32::try_from(r).ok());
    let device = env_num("ASCEND_DEVICE_ID").or_else(|| env_num("DEVICE_ID")).unwrap_or(0) as i32;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_string();
    let (stream, stream_dir) = {
        let _lock =
            crate::manifest::RunLock::acquire(&run_dir).map_err(|e| format!("{}: {e}", run_dir.display()))?;
        let info = StreamInfo {
            stream_id: crate::manifest::next_stream_id(&run_dir),
            rank,
            device,
            pid: std::process::id(),
            host,
        };
        let opts = WriterOptions::new(cfg.segment_size, cfg.policy);
        let w = StreamWriter::create_with(&run_dir, info.clone(), opts).map_err(|e| e.to_string())?;
        (w, info.dir_name())
    };

    let mut base = Manifest::new(env!("CARGO_PKG_VERSION"), crate::manifest::command_line());
    base.env = crate::manifest::selected_env();
    base.config = serde_json::json!({
        "collector": serde_json::to_value(&cfg).unwrap_or_default(),
        "dump_json": if cfg.respect_framework_dump { serde_json::Value::Null } else { cfg.dump_json() },
    });

    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..cfg.writers {
        let (tx, rx) = crossbeam_channel::bounded(cfg.slots + crate::callback::NOTE_ROOM);
        senders.push(tx);
        receivers.push(rx);
    }
    let wakers = (0..cfg.writers).map(|_| Waker::default()).collect();
    let wake_batch = crate::pipeline::wake_batch(cfg.slots, cfg.writers);
    let router = Router::new(cfg.writers);
    let p: &'static Pipeline = Box::leak(Box::new(Pipeline {
        cfg,
        run_dir,
        pool,
        router,
        senders,
        wakers,
        wake_batch,
        counters: Default::default(),
        stream: Mutex::new(Some(stream)),
        stream_dir,
        phase: STARTING.into(),
        disabled: false.into(),
        finishing: false.into(),
        threads: Mutex::new(Vec::new()),
        acl,
        manifest_base: base,
        overflow_mode: Mutex::new(None),
    }));
    for (i, rx) in receivers.into_iter().enumerate() {
        match crate::signals::spawn_quiet(&format!("accutrace-w{i}"), move || crate::writer::run(p, rx, i)) {
            Ok(spawned) => p.threads.lock().unwrap_or_else(|e| e.into_inner()).push(spawned),
            Err(e) => {
                // Out of threads (RLIMIT_NPROC, memory): stop the writers that did start, seal the empty
                // stream, and leave nothing running.
                p.disabled.store(true, Ordering::Release);
                finish(p, End::Signal);
                return Err(format!("cannot start a writer thread: {e}"));
            }
        }
    }
    p.phase.store(RUNNING, Ordering::Release);
    Ok(p)
}

/// The runtime the framework loaded: by SONAME (RTLD_NOLOAD), else the file that defines the real aclInit.
fn attach() -> Result<AclLibrary, String> {
    match AclLibrary::attach_loaded() {
        Ok(l) if l.fns.acldump_reg_callback.is_some() => Ok(l),
        first => {
            let path = real_init().and_then(|f| library_path_of(f as *const c_void));
            match path.map(AclLibrary::from_path) {
                Some(Ok(l)) if l.fns.acldump_reg_callback.is_some() => Ok(l),
                _ => Err(match first {
                    Ok(_) => "the loaded runtime has no acldumpRegCallback".to_string(),
                    Err(e) => format!("cannot attach to the runtime: {e}"),
                }),
            }
        }
    }
}

fn register(p: &Pipeline) -> Result<(), String> {
    let f = p.acl.as_ref().ok_or("no runtime attached")?;
    let reg = f.acldump_reg_callback().map_err(|e| e.to_string())?;
    // SAFETY: registering a function with exactly the acldumpCallback signature; flag must be 0.
    let code = unsafe { reg(Some(crate::callback::dump_callback), 0) };
    if code != ACL_SUCCESS {
        return Err(format!("acldumpRegCallback returned {}({code})", error_name(code)));
    }
    if p.cfg.respect_framework_dump {
        return Ok(());
    }
    let init_dump = f.aclmdl_init_dump().map_err(|e| e.to_string())?;
    let set_dump = f.aclmdl_set_dump().map_err(|e| e.to_string())?;
    // SAFETY: no arguments.
    let code = unsafe { init_dump() };
    if code != ACL_SUCCESS && code != ACL_ERROR_DUMP_ALREADY_RUN {
        return Err(format!("aclmdlInitDump returned {}({code})", error_name(code)));
    }
    let path = p.run_dir.join(format!(".dump-config-{}.json", std::process::id()));
    std::fs::write(&path, p.cfg.dump_json().to_string()).map_err(|e| format!("{}: {e}", path.display()))?;
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a NUL-terminated path that outlives the call; the runtime reads the file during it.
    let code = unsafe { set_dump(c.as_ptr()) };
    let _ = std::fs::remove_file(&path);
    if code != ACL_SUCCESS {
        return Err(format!("aclmdlSetDump returned {}({code})", error_name(code)));
    }
    Ok(())
}

fn read_overflow_mode(p: &Pipeline) {
    let Some(get) = p.acl.as_ref().and_then(|a| a.fns.aclrt_get_device_sat_mode) else { return };
    let mut mode: aclrtFloatOverflowMode = ACL_RT_OVERFLOW_MODE_UNDEF;
    // SAFETY: a valid out-pointer to an aclrtFloatOverflowMode.
    if unsafe { get(&mut mode) } == ACL_SUCCESS {
        let name = match mode {
            ACL_RT_OVERFLOW_MODE_SATURATION => "saturation",
            ACL_RT_OVERFLOW_MODE_INFNAN => "inf_nan",
            _ => "undef",
        };
        *p.overflow_mode.lock().unwrap_or_else(|e| e.into_inner()) = Some(name.to_string());
    }
}

/// What ends a capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// aclFinalize or process exit: the runtime still works, so stop dumping through it first.
    Finalize,
    /// SIGTERM: another thread may be stopped inside the runtime, so do not call into it; seal what arrived.
    Signal,
}

/// Stops the capture and seals it; only the first call does anything.
pub fn finish(p: &'static Pipeline, end: End) {
    if p.finishing.swap(true, Ordering::AcqRel) {
        return;
    }
    if let (End::Finalize, Some(acl)) = (end, p.acl.as_ref()) {
        read_overflow_mode(p);
        // Stop dumping through the runtime; both calls deliver what it still holds before returning.
        if !p.cfg.respect_framework_dump {
            if let Some(f) = acl.fns.aclmdl_finalize_dump {
                // SAFETY: no arguments.
                unsafe { f() };
            }
        }
        if let Some(f) = acl.fns.acldump_unreg_callback {
            // SAFETY: no arguments.
            unsafe { f() };
        }
    }
    p.phase.store(STOPPED, Ordering::Release);
    for (tx, waker) in p.senders.iter().zip(&p.wakers) {
        waker.wake();
        let _ = tx.send(Msg::Stop);
        waker.wake();
    }
    let threads = std::mem::take(&mut *p.threads.lock().unwrap_or_else(|e| e.into_inner()));
    for t in threads {
        let _ = t.join();
    }
    let writer = p.stream().take();
    let summary = match writer.map(|w| w.seal()) {
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => {
            crate::log(&format!("cannot seal the capture: {e}"));
            None
        }
        None => None,
    };
    if let Err(e) = crate::manifest::merge(p, summary, true) {
        crate::log(&format!("cannot write {}/manifest.json: {e}", p.run_dir.display()));
    }
    let _ = CURRENT.compare_exchange(
        p as *const Pipeline as *mut Pipeline,
        std::ptr::null_mut(),
        Ordering::AcqRel,
        Ordering::Relaxed,
    );
    ACTIVATING.store(false, Ordering::Release);
}

// ---- process hooks: exit, fork, SIGTERM ----

/// The process whose hooks are installed (a forked child installs its own watcher).
static HOOKS_PID: AtomicU32 = AtomicU32::new(0);
/// Self-pipe from the SIGTERM handler to the watcher thread, and the acknowledgement pipe back.
static TERM_WRITE: AtomicI32 = AtomicI32::new(-1);
static ACK_READ: AtomicI32 = AtomicI32::new(-1);
/// The handler that was installed before ours.
static PREVIOUS_TERM: OnceLock<libc::sigaction> = OnceLock::new();
/// How long the SIGTERM handler waits for the capture to be sealed before letting the signal proceed.
pub const TERM_TIMEOUT_MS: i32 = 10_000;

fn install_process_hooks() {
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
    CURRENT.store(std::ptr::null_mut(), Ordering::Release);
    ACTIVATING.store(false, Ordering::Release);
    TERM_WRITE.store(-1, Ordering::Release);
    ACK_READ.store(-1, Ordering::Release);
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
    static HANDLING: AtomicBool = AtomicBool::new(false);
    let (w, r) = (TERM_WRITE.load(Ordering::Acquire), ACK_READ.load(Ordering::Acquire));
    // SAFETY (this block): write, poll, read, getpid, sigaction and raise are async-signal-safe; the
    // buffers are locals; the previous action is a plain copy made at installation.
    unsafe {
        let ours = HOOKS_PID.load(Ordering::Acquire) == libc::getpid() as u32;
        if ours
            && w >= 0
            && r >= 0
            && !CURRENT.load(Ordering::Acquire).is_null()
            && !HANDLING.swap(true, Ordering::AcqRel)
        {
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
                // Default action: restore it and re-raise; the signal is blocked in this handler, so it is
                // delivered (and terminates the process) as soon as the handler returns.
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGTERM, &dfl, std::ptr::null_mut());
                libc::raise(libc::SIGTERM);
            }
        }
    }
}
