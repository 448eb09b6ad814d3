//! Who holds the runtime's one dump-callback slot ([`CallbackSlot`]), from the registrations the collector
//! makes and those its exported `acldumpRegCallback`/`acldumpUnregCallback` see ([`crate::acl_hooks`]), for
//! the capture's counters and the end of capture.

use ascend_sys::*;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Who holds the runtime's one dump-callback slot, as far as the registrations the collector sees tell,
/// and what happened to it. The runtime keeps the first callback registered: a later registration is
/// answered ACL_SUCCESS and ignored, and `acldumpUnregCallback` removes whichever is registered.
pub struct CallbackSlot;

const HELD_BY_NONE: u8 = 0;
const HELD_BY_US: u8 = 1;
const HELD_BY_OTHER: u8 = 2;

static SLOT_HOLDER: AtomicU8 = AtomicU8::new(HELD_BY_NONE);
/// Our registrations that found another tool's callback in the slot (the runtime ignored ours).
static OTHER_HELD_AT_OURS: AtomicU64 = AtomicU64::new(0);
/// Another tool's registrations while ours held the slot (the runtime ignored theirs).
static OTHER_AFTER_OURS: AtomicU64 = AtomicU64::new(0);
/// Another tool's `acldumpUnregCallback` calls that emptied a slot its callback held.
static OTHER_UNREGISTERED: AtomicU64 = AtomicU64::new(0);
/// Another tool's `acldumpUnregCallback` calls that removed ours while the collector captured.
static OURS_REMOVED: AtomicU64 = AtomicU64::new(0);

/// What [`CallbackSlot`] saw, for the pipeline counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotEvents {
    pub other_callback_held_slot: u64,
    pub other_callbacks_after_ours: u64,
    pub other_callbacks_unregistered: u64,
    pub our_callback_removed: u64,
}

impl CallbackSlot {
    /// The collector's own registration succeeded (through the loader's handle, not our export).
    pub fn ours_registered() {
        if let Err(HELD_BY_OTHER) =
            SLOT_HOLDER.compare_exchange(HELD_BY_NONE, HELD_BY_US, Ordering::AcqRel, Ordering::Acquire)
        {
            OTHER_HELD_AT_OURS.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether the collector may unregister: not while another tool's callback holds the slot (the
    /// runtime would remove that one, ending the other tool's dump).
    pub fn ours_to_unregister() -> bool {
        SLOT_HOLDER.load(Ordering::Acquire) != HELD_BY_OTHER
    }

    /// The collector unregistered its callback.
    pub fn ours_unregistered() {
        let _ = SLOT_HOLDER.compare_exchange(HELD_BY_US, HELD_BY_NONE, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Another tool's registration of `cb` through our export was answered `code`.
    pub fn other_registered(cb: Option<AcldumpCallbackFn>, code: aclError) {
        if code != ACL_SUCCESS {
            return;
        }
        if cb.is_some_and(|f| f as usize == crate::callback::dump_callback as AcldumpCallbackFn as usize) {
            // Ours, passed by someone through the global scope: the slot is ours as well.
            return Self::ours_registered();
        }
        // Held by nobody: now the other tool's. Held by the other tool: its repeat, ignored.
        if let Err(HELD_BY_US) =
            SLOT_HOLDER.compare_exchange(HELD_BY_NONE, HELD_BY_OTHER, Ordering::AcqRel, Ordering::Acquire)
        {
            OTHER_AFTER_OURS.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Another tool called `acldumpUnregCallback`: whichever callback held the slot is gone.
    pub fn other_unregistered() {
        match SLOT_HOLDER.swap(HELD_BY_NONE, Ordering::AcqRel) {
            HELD_BY_OTHER => OTHER_UNREGISTERED.fetch_add(1, Ordering::Relaxed),
            HELD_BY_US if crate::pipeline::current().is_some_and(|p| p.accepting()) => {
                OURS_REMOVED.fetch_add(1, Ordering::Relaxed)
            }
            _ => 0,
        };
    }

    /// What was seen so far.
    pub fn events() -> SlotEvents {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SlotEvents {
            other_callback_held_slot: g(&OTHER_HELD_AT_OURS),
            other_callbacks_after_ours: g(&OTHER_AFTER_OURS),
            other_callbacks_unregistered: g(&OTHER_UNREGISTERED),
            our_callback_removed: g(&OURS_REMOVED),
        }
    }
}
