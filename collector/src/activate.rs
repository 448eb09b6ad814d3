//! Activation: the interposed `aclInit`/`aclFinalize`, attaching to the runtime, starting the pipeline.
//!
//! Staged like bytehound: the library has no constructor; all work starts in the first interposed call,
//! after the real `aclInit` succeeded. A thread-local guard ([`crate::hooks`]) makes our own calls pass
//! straight through. Process-wide state is a few atomics in [`crate::pipeline`] (no locks), so a forked
//! child can reset it safely: the child starts inactive, inherits no writer threads, and gets its own
//! stream if it calls `aclInit` itself. Sealing lives in [`crate::finish`], the exit, fork and SIGTERM
//! hooks in [`crate::hooks`].

use crate::config::{self, Activation, Config, PanicPoint};
use crate::finish::{finish, read_overflow_mode, End};
use crate::hooks::{install_process_hooks, Reentry};
use crate::pipeline::{self, current, Pipeline, Waker, RUNNING, STARTING};
use crate::pool::SlotPool;
use crate::routing::Router;
use accutrace_formats::capture::{Manifest, StreamInfo, StreamWriter, WriterOptions};
use ascend_sys::*;
use std::ffi::{c_char, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};

/// Interposes the runtime's `aclInit`: forwards to it, then starts the collector when configured.
///
/// # Safety
/// aclInit's contract: `config_path` is NULL or a NUL-terminated path.
#[no_mangle]
pub unsafe extern "C" fn aclInit(config_path: *const c_char) -> aclError {
    // SAFETY: the argument is forwarded unchanged from our caller, who owes aclInit's contract.
    match catch_unwind(|| unsafe { acl_init_hook(config_path) }) {
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
    match catch_unwind(acl_finalize_hook) {
        Ok(code) => code,
        Err(_) => {
            crate::log("aclFinalize hook panicked");
            ascend_sys::ACL_ERROR_INTERNAL_ERROR
        }
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
    if !pipeline::claim_activation() {
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
    pipeline::make_current(p);
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
    pipeline::make_current(p);
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
    let rank = job_rank(&env_num);
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

/// The rank of this process in the job: HCCL's `RANK_ID` (what Ascend launchers set), else the `RANK` of
/// torchrun and its kin; a job that says it has one process (or says nothing of its size) is rank 0.
/// `None` only for a process of a larger job that names no rank.
fn job_rank(env_num: &dyn Fn(&str) -> Option<i64>) -> Option<u32> {
    let named = env_num("RANK_ID").or_else(|| env_num("RANK")).and_then(|r| u32::try_from(r).ok());
    let size = env_num("RANK_SIZE").or_else(|| env_num("WORLD_SIZE"));
    named.or_else(|| (size.is_none_or(|n| n <= 1)).then_some(0))
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

#[cfg(test)]
mod tests {
    use super::job_rank;

    #[test]
    fn the_rank_comes_from_the_launcher_or_is_0_for_a_single_process() {
        let env =
            |vars: &'static [(&'static str, i64)]| move |k: &str| vars.iter().find(|v| v.0 == k).map(|v| v.1);
        assert_eq!(job_rank(&env(&[("RANK_ID", 3), ("RANK", 5)])), Some(3));
        assert_eq!(job_rank(&env(&[("RANK", 5), ("WORLD_SIZE", 8)])), Some(5));
        assert_eq!(job_rank(&env(&[])), Some(0), "one process, no launcher: rank 0");
        assert_eq!(job_rank(&env(&[("RANK_SIZE", 1)])), Some(0));
        assert_eq!(job_rank(&env(&[("RANK_SIZE", 8)])), None, "a rank of eight that does not say which");
        assert_eq!(job_rank(&env(&[("RANK_ID", -1)])), Some(0), "nonsense is no rank");
    }
}
