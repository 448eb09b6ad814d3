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
use std::ffi::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// The interposed `aclInit`: forward, then activate on success (or on a harmless repeat init).
///
/// # Safety
/// `config_path` is what the caller passed to `aclInit`: NULL or a NUL-terminated path (aclInit's contract).
pub(crate) unsafe fn acl_init_hook(config_path: *const c_char, real_init: Option<AclInitFn>) -> aclError {
    let real_init = real_init.or_else(|| AclLibrary::attach_loaded().ok().and_then(|l| l.fns.acl_init));
    let Some(real) = real_init else {
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
        && catch_unwind(|| activate_from_env(real)).is_err()
    {
        crate::log("activation panicked; the collector is inactive, the job continues without it");
        if let Some(p) = current() {
            p.disable("activation panicked");
        }
    }
    code
}

/// The interposed `aclFinalize`: seal the capture while the runtime still runs, then forward.
pub fn acl_finalize_hook(real_finalize: Option<AclFinalizeFn>) -> aclError {
    if let Some(_guard) = Reentry::enter() {
        if let Some(p) = current() {
            let _shield = crate::signals::Shield::new();
            if catch_unwind(AssertUnwindSafe(|| finish(p, End::Finalize))).is_err() {
                crate::log("finishing the capture panicked; segments written so far remain readable");
            }
        }
    }
    match real_finalize.or_else(|| AclLibrary::attach_loaded().ok().and_then(|l| l.fns.acl_finalize)) {
        // SAFETY: the runtime's aclFinalize, no arguments.
        Some(f) => unsafe { f() },
        None => {
            crate::log("the real aclFinalize cannot be found; returning ACL_ERROR_UNINITIALIZE");
            ACL_ERROR_UNINITIALIZE
        }
    }
}

/// Activation after the runtime's `aclInit` (`real_init`) succeeded.
fn activate_from_env(real_init: AclInitFn) {
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
    if let Err(e) = activate_with(cfg, Some(real_init)) {
        crate::log(&format!("{e}; the collector is inactive, the job continues without it"));
    }
}

/// Attaches, starts the pipeline, registers the callback and sets the dump configuration.
pub fn activate(cfg: Config) -> Result<(), String> {
    activate_with(cfg, None)
}

/// [`activate`], knowing the runtime's `aclInit` (which names the file to attach to when the runtime is
/// not found by its name).
fn activate_with(cfg: Config, real_init: Option<AclInitFn>) -> Result<(), String> {
    let acl = attach(real_init)?;
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
    crate::limits::threads_within_process_limit(cfg.writers)?;
    if cfg.dir.exists() && !cfg.dir.is_dir() {
        return Err(format!(
            "ACCUTRACE_DIR={}: a file, not a directory; name a new or existing directory",
            cfg.dir.display()
        ));
    }
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
        if let Some(rank) = rank {
            warn_of_another_run(&run_dir, rank);
        }
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
    base.environment = crate::environment::collect(&base.command, &|k| std::env::var(k).ok());
    base.config = serde_json::json!({
        "collector": serde_json::to_value(&cfg).unwrap_or_default(),
        "dump_json": if cfg.respect_framework_dump {
            serde_json::Value::Null
        } else {
            let step0 = run_dir.join(crate::steps::DUMP_PATH_DIR).join(format!("{}0", accutrace_formats::dump::STEP_DIR_PREFIX));
            cfg.dump_json_at(&step0, cfg.steps.as_deref())
        },
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
    let cfg_marker = cfg.step_marker.clone();
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
        steps: crate::step_state::Steps::new(cfg_marker.as_deref()),
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

/// Says on stderr, once at start, that the run directory already holds a stream of this process's rank:
/// readers that tell runs apart refuse such a mix, and it cannot be split afterwards. The job goes on.
fn warn_of_another_run(run_dir: &std::path::Path, rank: u32) {
    let found = crate::manifest::streams_of_rank(run_dir, rank);
    let Some(first) = found.first() else { return };
    crate::log(&format!(
        "ACCUTRACE_DIR={} already holds {} stream{} of rank {rank} (the first {first}): if another run's (the \
         job run again, or its workers restarted, into this directory), the analyzer leads every answer about \
         this capture with 'the capture holds different runs' (exit 2) wherever the runs' HCCL communicators \
         tell them apart; use a new ACCUTRACE_DIR for each run",
        run_dir.display(),
        found.len(),
        if found.len() == 1 { "" } else { "s" },
    ));
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
fn attach(real_init: Option<AclInitFn>) -> Result<AclLibrary, String> {
    match AclLibrary::attach_loaded() {
        Ok(l) if l.fns.acldump_reg_callback.is_some() => Ok(l),
        first => {
            let path = real_init.and_then(|f| library_path_of(f as *const c_void));
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
    // Success says nothing of whether the runtime kept ours: it keeps the first callback registered.
    crate::callback_slot::CallbackSlot::ours_registered();
    if p.cfg.respect_framework_dump {
        return Ok(());
    }
    // The dump path of step 0: a framework that calls accutrace_step_end() moves to step1, step2, ...
    crate::steps::set_dump(p, 0, false)
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
