//! `libcollector.so`: captures the CANN dump stream of a training job into accutrace capture segments.
//!
//! `LD_PRELOAD=libcollector.so ACCUTRACE_DIR=runs/x <training command>` (see `docs/COLLECTOR.md`).
//! The library interposes `aclInit` and `aclFinalize` (and counts `aclmdlExecute`); after the real
//! `aclInit` it attaches to the loaded runtime, registers a dump callback and configures the dump. Data flows
//! `callback` (copy into a pre-allocated slot) -> queue -> `writer` threads (`reassembly`, parse, statistics,
//! hash, compression) -> capture segments, sealed with a `manifest` at `aclFinalize`, exit or SIGTERM.
//!
//! - [`config`]: options. [`acl_hooks`]: the exported `aclInit`/`aclFinalize`. [`activate`]: what they do
//!   (attach, start).
//!   [`finish`]: the end of a capture. [`hooks`]: reentry guard; exit, fork and SIGTERM hooks.
//! - [`callback`]: the hot path. [`pool`]: the slots. [`routing`]: which writer gets a file.
//!   [`pipeline`]: the shared state, and the process's current pipeline.
//! - [`reassembly`], [`writer`]: files back together (in statistics mode [`streamed`]: statistics as the
//!   chunks arrive), then records. [`manifest`]: `manifest.json`.
//! - [`hccl`]: the HCCL calls, recorded as collective records; [`dlsym`]: how lookups through a library
//!   handle reach them and the ACL hooks.
//! - [`steps`]: steps in eager mode (`accutrace_step_end()`, `ACCUTRACE_STEP_MARKER`); [`step_state`]: the
//!   pipeline's step counters.
//! - [`counters`]: what the manifest reports. [`environment`]: versions and command-line files found at
//!   activation. [`settings`]: the interposed calls that set the deterministic option and overflow mode.
//! - [`signals`], [`limits`]: living in the job's process without changing it (signals, rlimits).
//!   [`entry_guard`]: the panic guard of every `extern "C"` function.

pub mod acl_hooks;
pub mod activate;
pub mod callback;
pub mod callback_slot;
pub mod config;
pub mod counters;
pub mod dlsym;
pub mod entry_guard;
pub mod environment;
pub mod finish;
pub mod forwarding;
pub mod hccl;
pub mod hooks;
pub mod limits;
pub mod manifest;
pub mod pipeline;
pub mod pool;
pub mod reassembly;
pub mod routing;
pub mod settings;
pub mod signals;
pub mod step_state;
pub mod steps;
pub mod streamed;
pub mod writer;

/// Logs one line to stderr, prefixed `accutrace:`. Never fails, never panics, and never raises SIGPIPE in
/// the job when nobody reads its stderr any more.
pub fn log(msg: &str) {
    use std::io::Write;
    let _shield = signals::Shield::new();
    let _ = writeln!(std::io::stderr().lock(), "accutrace: {msg}");
}
