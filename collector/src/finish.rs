//! The end of a capture: at `aclFinalize` or process exit (the runtime still works: stop dumping through
//! it first), or on SIGTERM (do not call into the runtime), the writer threads drain, the stream is sealed
//! and the manifest written.

use crate::pipeline::{self, Msg, Pipeline, STOPPED};
use accutrace_formats::capture::completeness;
use ascend_sys::*;
use std::sync::atomic::Ordering;

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
        // Ops still running on the device would lose their dumps to either call below. A failure is not
        // counted: frameworks reset their device before aclFinalize (torch_npu, sim-train), and the reset
        // waits for the device's tasks, so the sync may rightly fail for want of a device, having nothing
        // to wait for; the step ends' synchronizations are the ones counted.
        let _ = crate::steps::synchronize_device(acl);
        // Stop dumping through the runtime; both calls deliver what it still holds before returning.
        if !p.cfg.respect_framework_dump {
            if let Some(f) = acl.fns.aclmdl_finalize_dump {
                // SAFETY: no arguments.
                unsafe { f() };
            }
        }
        if let Some(f) = acl.fns.acldump_unreg_callback {
            // The runtime removes whichever callback is registered: not another tool's that held the slot.
            if crate::callback_slot::CallbackSlot::ours_to_unregister() {
                // SAFETY: no arguments.
                unsafe { f() };
                crate::callback_slot::CallbackSlot::ours_unregistered();
            }
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
    let counters = p.counters.snapshot();
    let stream_path = p.run_dir.join(&p.stream_dir);
    if let Some(problem) = completeness::callback_slot_taken(&counters)
        .or_else(|| summary.as_ref().and_then(|s| completeness::no_dump_arrived(&counters, &s.counts)))
    {
        // The empty capture would otherwise read as a clean run; the manifest's counters let the analyzer
        // say the same.
        crate::log(&format!("{}: {problem}", stream_path.display()));
    }
    if let Some(problem) = completeness::finalized_unsynchronized(&counters) {
        crate::log(&format!("{}: {problem}", stream_path.display()));
    }
    if counters.other_callbacks_after_ours > 0 {
        // Not our loss: the other tool's (it may believe it dumped), so a note, not a shortfall.
        crate::log(&format!(
            "{}: another tool registered a dump callback {} time(s) while the collector's held the runtime's \
             only callback slot; the runtime ignored it, so that tool's dump received nothing (this capture \
             is whole)",
            stream_path.display(),
            counters.other_callbacks_after_ours
        ));
    }
    crate::steps::remove_dump_paths(p);
    if let Err(e) = crate::manifest::merge(p, summary, true) {
        crate::log(&format!("cannot write {}/manifest.json: {e}", p.run_dir.display()));
    }
    pipeline::retire(p);
}

/// Records the runtime's float overflow mode in the manifest (a saturation-mode job shows overflows as
/// values at the dtype's limit).
pub(crate) fn read_overflow_mode(p: &Pipeline) {
    let Some(get) = p.acl.as_ref().and_then(|a| a.fns.aclrt_get_device_sat_mode) else { return };
    let mut mode: aclrtFloatOverflowMode = ACL_RT_OVERFLOW_MODE_UNDEF;
    // SAFETY: a valid out-pointer to an aclrtFloatOverflowMode.
    if unsafe { get(&mut mode) } == ACL_SUCCESS {
        let name = crate::settings::overflow_mode_name(mode);
        *p.overflow_mode.lock().unwrap_or_else(|e| e.into_inner()) = Some(name.to_string());
    }
}
