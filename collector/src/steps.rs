//! Steps in eager mode, where the runtime's single-operator dumps carry no step (docs/CANN.md §5).
//!
//! - **The framework's hook**: `accutrace_step_end()`, exported for the Python start-up hook that `analyzer
//!   record` installs (called after each `optimizer.step()` / `GradScaler.step()`) and for any framework
//!   that wants to call it. As msprobe does per step, the collector then re-sets the dump with a per-step
//!   path, `{run}/.dump/step{N}` (finalize, init, set), so every op launched from then on is dumped under
//!   that path and its file name tells the writer its step exactly, however late it is delivered. It also
//!   writes a HOOK step mark. The first configuration already uses `.../step0`; `ACCUTRACE_STEPS` is applied
//!   per step (msprobe's `dump_step` 2147483647 for a step not wanted).
//! - **A marker op**: `ACCUTRACE_STEP_MARKER=<regex on op types>`. Writers count steps as they record the
//!   files (a run of marker ops ends a step) and write a MARKER step mark per marker op; readers recompute
//!   the exact steps from the marks (`accutrace_formats::capture::step_marks`).
//! - Neither: ops of the single-op layout are step 0 with step source NONE, and the analyzer infers steps
//!   from the period of the op sequence.

use crate::entry_guard::guarded;
use crate::hooks::Reentry;
use crate::pipeline::{current, Pipeline};
use accutrace_formats::capture::{Appended, StepMark, StepSource};
use accutrace_formats::steps::{StepSet, NO_STEP};
use ascend_sys::loader::AclLibrary;
use ascend_sys::*;
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

/// The directory under the run directory that holds the per-step dump paths (empty: the runtime writes
/// nothing to disk while the callback is registered).
pub const DUMP_PATH_DIR: &str = ".dump";

/// The dump path of step `step`: `{run}/.dump/step{step}`.
pub fn step_dump_path(p: &Pipeline, step: u64) -> PathBuf {
    p.run_dir.join(DUMP_PATH_DIR).join(format!("{}{step}", accutrace_formats::dump::STEP_DIR_PREFIX))
}

/// The `dump_step` to set for step `step` of the hook: none when every step is wanted or the
/// configuration's selection has it; msprobe's never-reached step otherwise.
fn dump_step_for(p: &Pipeline, step: u64) -> Option<String> {
    let wanted = p.cfg.steps.as_deref().and_then(|s| StepSet::parse_cann(s).ok());
    match wanted {
        Some(set) if !set.contains(step) => Some(NO_STEP.to_string()),
        _ => None,
    }
}

/// Sets the dump for step `step` (`reinit`: finalize and initialize dumping first, as msprobe does between
/// steps). At activation (`step` 0) the configured `dump_step` is set as given, for graph models too.
pub fn set_dump(p: &Pipeline, step: u64, reinit: bool) -> Result<(), String> {
    let f = p.acl.as_ref().ok_or("no runtime attached")?;
    let init_dump = f.aclmdl_init_dump().map_err(|e| e.to_string())?;
    let set = f.aclmdl_set_dump().map_err(|e| e.to_string())?;
    let dir = step_dump_path(p, step);
    check_dump_path_len(&dir)?;
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let steps = if reinit { dump_step_for(p, step) } else { p.cfg.steps.clone() };
    let json = p.cfg.dump_json_at(&dir, steps.as_deref());
    if reinit {
        if let Some(fin) = f.fns.aclmdl_finalize_dump {
            if let Err(failure) = synchronize_device(f) {
                count_unsynchronized(p, failure);
            }
            // SAFETY: no arguments.
            unsafe { fin() };
        }
    }
    // SAFETY: no arguments.
    let code = unsafe { init_dump() };
    if code != ACL_SUCCESS && !dump_already_initialised(code) {
        return Err(format!("aclmdlInitDump returned {}({code})", error_name(code)));
    }
    let path = p.run_dir.join(format!(".dump-config-{}.json", std::process::id()));
    std::fs::write(&path, json.to_string()).map_err(|e| format!("{}: {e}", path.display()))?;
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a NUL-terminated path that outlives the call; the runtime reads the file during it.
    let code = unsafe { set(c.as_ptr()) };
    let _ = std::fs::remove_file(&path);
    if code != ACL_SUCCESS {
        return Err(format!("aclmdlSetDump returned {}({code})", error_name(code)));
    }
    if !p.cfg.overflow && p.cfg.ops.is_empty() && steps.is_none() {
        crate::counters::add(&p.counters.every_op_dumps_set, 1);
    }
    Ok(())
}

/// Waits for the device before the collector finalizes the dump (a step's re-set, the end of capture).
/// Eager frameworks launch ops asynchronously (torch_npu): when the host reaches the end of a step, the
/// step's last ops are still running and their dumps have not reached the callback. aclmdlFinalizeDump
/// stops adump's receiving server, which delivers only what the host already holds (hicann/runtime
/// `src/dfx/adump/adump/host/adx_datadump_server.cpp`), so without this those dumps are lost, silently.
/// `Err` holds the error code of a failed synchronization, `None` when the runtime has no
/// aclrtSynchronizeDevice.
pub fn synchronize_device(acl: &AclLibrary) -> Result<(), Option<aclError>> {
    let sync = acl.fns.aclrt_synchronize_device.ok_or(None)?;
    // SAFETY: no arguments; called on the thread that ends the step or the capture.
    let code = unsafe { sync() };
    if code == ACL_SUCCESS {
        Ok(())
    } else {
        Err(Some(code))
    }
}

/// A step end's synchronization that failed or could not be made: counted in the manifest (and said at the
/// end of capture), so the capture does not claim to hold every op.
fn count_unsynchronized(p: &Pipeline, failure: Option<aclError>) {
    let Some(code) = failure else {
        return crate::counters::add(&p.counters.finalize_syncs_unavailable, 1);
    };
    crate::counters::add(&p.counters.finalize_syncs_failed, 1);
    let error = &p.counters.finalize_sync_error;
    error.store(u64::from(code.unsigned_abs()), std::sync::atomic::Ordering::Relaxed);
}

/// The longest `dump_path` the runtime's dump configuration accepts, in bytes (hicann/runtime
/// `src/dfx/adump/adump/impl/dump_config_converter.h`). A longer one fails aclmdlSetDump with
/// ACL_ERROR_INVALID_DUMP_CONFIG, which names neither the path nor the limit.
pub const MAX_DUMP_PATH_LEN: usize = 512;

fn check_dump_path_len(dir: &std::path::Path) -> Result<(), String> {
    let len = dir.as_os_str().len();
    if len > MAX_DUMP_PATH_LEN {
        return Err(format!(
            "the dump path {} is {len} bytes long and CANN takes at most {MAX_DUMP_PATH_LEN}; \
             set ACCUTRACE_DIR to a directory with a shorter path",
            dir.display()
        ));
    }
    Ok(())
}

/// Whether `aclmdlInitDump` refused only because dumping is initialised already (by the framework, or by
/// another tool): the open-source runtime answers a repeat with ACL_ERROR_REPEAT_INITIALIZE (hicann/runtime
/// `src/acl/aclrt_impl/toolchain/dump.cpp`); ACL_ERROR_DUMP_ALREADY_RUN is kept for other releases.
fn dump_already_initialised(code: aclError) -> bool {
    code == ACL_ERROR_REPEAT_INITIALIZE || code == ACL_ERROR_DUMP_ALREADY_RUN
}

/// Removes the (empty) per-step dump directories at the end of a capture; anything the runtime did write
/// there stays.
pub fn remove_dump_paths(p: &Pipeline) {
    let root = p.run_dir.join(DUMP_PATH_DIR);
    let Ok(entries) = std::fs::read_dir(&root) else { return };
    for e in entries.flatten() {
        let _ = std::fs::remove_dir(e.path());
    }
    let _ = std::fs::remove_dir(&root);
}

fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// A training step ended (the framework's hook): step N + 1 begins. Returns it, or -1 when no capture is
/// running. Safe to call from any thread, any number of times; a no-op without a capture.
#[no_mangle]
pub extern "C" fn accutrace_step_end() -> i32 {
    guarded("accutrace_step_end", -1, |_| {
        let Some(p) = current() else { return -1 };
        let Some(_guard) = Reentry::enter() else { return -1 };
        let _shield = crate::signals::Shield::new();
        match catch_unwind(AssertUnwindSafe(|| step_end(p))) {
            Ok(step) => step,
            Err(_) => {
                p.disable("accutrace_step_end panicked");
                -1
            }
        }
    })
}

fn step_end(p: &Pipeline) -> i32 {
    if !p.accepting() {
        return -1;
    }
    let step = p.steps.begin_next_step();
    let mark = StepMark { source: StepSource::Hook, step, wall_time_us: now_us(), ..StepMark::default() };
    let written = match p.stream().as_mut() {
        Some(w) => w.append_step_mark(&mark),
        None => Ok(Appended::Stopped),
    };
    if let Err(e) = written {
        p.disable(&format!("cannot write the capture: {e}"));
        return -1;
    }
    if !p.cfg.respect_framework_dump {
        if let Err(e) = set_dump(p, step, true) {
            // Later ops would be filed under the previous step: stop rather than mislabel them.
            p.disable(&format!("cannot set the dump of step {step}: {e}"));
            return -1;
        }
    }
    i32::try_from(step).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_init_dump_is_taken_as_initialised_as_the_runtime_answers_it() {
        assert!(dump_already_initialised(ACL_ERROR_REPEAT_INITIALIZE));
        assert!(dump_already_initialised(ACL_ERROR_DUMP_ALREADY_RUN));
        assert!(!dump_already_initialised(ACL_ERROR_UNINITIALIZE));
        assert!(!dump_already_initialised(ACL_ERROR_INTERNAL_ERROR));
    }

    #[test]
    fn a_dump_path_over_cann_s_limit_is_refused_by_name_before_the_runtime_sees_it() {
        let at_limit = PathBuf::from(format!("/{}", "d".repeat(MAX_DUMP_PATH_LEN - 1)));
        assert!(check_dump_path_len(&at_limit).is_ok());
        let over = at_limit.join("step0");
        let err = check_dump_path_len(&over).unwrap_err();
        assert!(
            err.contains("518 bytes") && err.contains("at most 512") && err.contains("ACCUTRACE_DIR"),
            "{err}"
        );
    }
}
