//! `libcollector.so`: captures the CANN dump stream of a training job into accutrace capture segments.
//!
//! `LD_PRELOAD=libcollector.so ACCUTRACE_DIR=runs/x <training command>` (see `docs/COLLECTOR.md`).
//! The library interposes `aclInit` and `aclFinalize`; after the real `aclInit` it attaches to the loaded
//! runtime, registers a dump callback and configures the dump. Data flows
//! `callback` (copy into a pre-allocated slot) -> queue -> `writer` threads (`reassembly`, parse, statistics,
//! hash, compression) -> capture segments, sealed with a `manifest` at `aclFinalize`, exit or SIGTERM.
//!
//! - [`config`]: options. [`activate`]: hooks, attach, start and end of a capture, process hooks.
//! - [`callback`]: the hot path. [`pool`]: the slots. [`routing`]: which writer gets a file.
//!   [`pipeline`]: the shared state.
//! - [`reassembly`], [`writer`]: files back together, then records. [`manifest`]: `manifest.json`.
//! - [`counters`]: what the manifest reports.
//! - [`signals`], [`limits`]: living in the job's process without changing it (signals, rlimits).

pub mod activate;
pub mod callback;
pub mod config;
pub mod counters;
pub mod limits;
pub mod manifest;
pub mod pipeline;
pub mod pool;
pub mod reassembly;
pub mod routing;
pub mod signals;
pub mod writer;

use ascend_sys::aclError;
use std::ffi::c_char;
use std::panic::catch_unwind;

/// Logs one line to stderr, prefixed `accutrace:`. Never fails, never panics, and never raises SIGPIPE in
/// the job when nobody reads its stderr any more.
pub fn log(msg: &str) {
    use std::io::Write;
    let _shield = signals::Shield::new();
    let _ = writeln!(std::io::stderr().lock(), "accutrace: {msg}");
}

/// Interposes the runtime's `aclInit`: forwards to it, then starts the collector when configured.
///
/// # Safety
/// aclInit's contract: `config_path` is NULL or a NUL-terminated path.
#[no_mangle]
pub unsafe extern "C" fn aclInit(config_path: *const c_char) -> aclError {
    // SAFETY: the argument is forwarded unchanged from our caller, who owes aclInit's contract.
    match catch_unwind(|| unsafe { activate::acl_init_hook(config_path) }) {
        Ok(code) => code,
        Err(_) => {
            // The hook forwards before doing anything else, so a panic here means the runtime's result is
            // lost; report the generic failure rather than unwind into C.
            log("aclInit hook panicked");
            ascend_sys::ACL_ERROR_INTERNAL_ERROR
        }
    }
}

/// Interposes the runtime's `aclFinalize`: seals the capture, then forwards.
#[no_mangle]
pub extern "C" fn aclFinalize() -> aclError {
    match catch_unwind(activate::acl_finalize_hook) {
        Ok(code) => code,
        Err(_) => {
            log("aclFinalize hook panicked");
            ascend_sys::ACL_ERROR_INTERNAL_ERROR
        }
    }
}
