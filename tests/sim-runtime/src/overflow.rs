//! The device's float overflow mode and status register, and the op-debug records of dump_debug.
//!
//! The status is the OR of the AI Core status bits (docs/CANN.md §4) of every op that overflowed since the
//! last reset, as `aclrtGetOverflowStatus` reports it. On hardware the call writes device memory
//! asynchronously; here the buffer is host memory and the value is there when the call returns.

use ascend_sys::{aclrtFloatOverflowMode, ACL_RT_OVERFLOW_MODE_INFNAN, ACL_RT_OVERFLOW_MODE_SATURATION};
use sim_model::OverflowMode;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

static SAT_MODE: AtomicU32 = AtomicU32::new(ACL_RT_OVERFLOW_MODE_INFNAN);
static STATUS: AtomicU64 = AtomicU64::new(0);

/// The mode a fresh device starts in: INF/NaN (newer chips' default) unless `SIM_ACL_SAT_MODE=saturation`.
pub fn default_mode() -> aclrtFloatOverflowMode {
    match std::env::var("SIM_ACL_SAT_MODE").as_deref().map(str::trim) {
        Ok(m) if m.eq_ignore_ascii_case("saturation") => ACL_RT_OVERFLOW_MODE_SATURATION,
        _ => ACL_RT_OVERFLOW_MODE_INFNAN,
    }
}

/// Back to power-on state: default mode, no overflow recorded (aclInit, aclrtResetDevice).
pub fn reset_device() {
    SAT_MODE.store(default_mode(), Ordering::SeqCst);
    STATUS.store(0, Ordering::SeqCst);
}

pub fn set_mode(mode: aclrtFloatOverflowMode) {
    SAT_MODE.store(mode, Ordering::SeqCst);
}

pub fn mode() -> aclrtFloatOverflowMode {
    SAT_MODE.load(Ordering::SeqCst)
}

/// The mode as the model computes with it.
pub fn model_mode() -> OverflowMode {
    if mode() == ACL_RT_OVERFLOW_MODE_SATURATION {
        OverflowMode::Saturation
    } else {
        OverflowMode::InfNan
    }
}

/// An op raised `bits`.
pub fn record(bits: u64) {
    STATUS.fetch_or(bits, Ordering::SeqCst);
}

pub fn status() -> u64 {
    STATUS.load(Ordering::SeqCst)
}

pub fn reset_status() {
    STATUS.store(0, Ordering::SeqCst);
}

/// Which op-debug payload layout dump_debug writes (`SIM_ACL_OPDEBUG_LAYOUT=legacy|v2`, default v2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpDebugLayout {
    /// 2048 bytes of u64 fields.
    Legacy,
    /// Starts with 0x5A5A5A5A, then per-engine records.
    V2,
}

pub fn layout_from_env() -> OpDebugLayout {
    match std::env::var("SIM_ACL_OPDEBUG_LAYOUT").as_deref().map(str::trim) {
        Ok(l) if l.eq_ignore_ascii_case("legacy") => OpDebugLayout::Legacy,
        _ => OpDebugLayout::V2,
    }
}
