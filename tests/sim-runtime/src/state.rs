//! The runtime's process-wide state, as the exports see it.
//!
//! One lock guards initialisation, device, dump configuration and the model table; each loaded model has
//! its own lock so a step runs without the global one held (a dump callback may call back into the
//! runtime while the compute thread waits for the dump queue). The callback, the clock and the overflow
//! registers live outside it (see `dumper`, `clock`, `overflow`).

use crate::config::DumpConfig;
use crate::model::DeviceModel;
use ascend_sys::AcldumpCallbackFn;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// A loaded model and what it was loaded with.
pub struct LoadedModel {
    pub id: u32,
    pub model: Box<dyn DeviceModel>,
    /// The dump configuration when it was loaded (aclmdlSetDump affects models loaded after it).
    pub dump: Option<DumpConfig>,
    /// The session directory name of that configuration.
    pub session_dir: String,
    /// Steps executed so far: the next step's index.
    pub next_step: u64,
    /// The dump of a step whose first half ran and whose second half has not (`execute`).
    pub pending: Option<crate::emit::Emitter>,
}

#[derive(Default)]
pub struct Runtime {
    pub initialized: bool,
    pub device: Option<i32>,
    /// aclmdlInitDump was called (and not finalized).
    pub dump_initialized: bool,
    /// The active dump configuration (from aclInit's file or aclmdlSetDump).
    pub dump: Option<DumpConfig>,
    /// `YYYYMMDDhhmmss` of when `dump` was set.
    pub session_dir: String,
    pub next_model_id: u32,
    pub models: HashMap<u32, Arc<Mutex<LoadedModel>>>,
}

static RUNTIME: Mutex<Option<Runtime>> = Mutex::new(None);
static CALLBACK: Mutex<Option<AcldumpCallbackFn>> = Mutex::new(None);

/// Poisoning is ignored throughout: every export catches panics, and each field stays meaningful on its own.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on the runtime state (created on first use).
pub fn with<R>(f: impl FnOnce(&mut Runtime) -> R) -> R {
    let mut guard = lock(&RUNTIME);
    f(guard.get_or_insert_with(Runtime::default))
}

pub fn callback() -> Option<AcldumpCallbackFn> {
    *lock(&CALLBACK)
}

pub fn set_callback(cb: Option<AcldumpCallbackFn>) {
    *lock(&CALLBACK) = cb;
}

/// Registers `cb` unless a callback is registered already (then that one stays).
pub fn set_callback_if_none(cb: AcldumpCallbackFn) {
    lock(&CALLBACK).get_or_insert(cb);
}
