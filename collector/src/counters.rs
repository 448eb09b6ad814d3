//! The pipeline's counters: relaxed atomics bumped by the callback and the writer threads, snapshotted into
//! the manifest. The invariant the tests check: once the writers have drained,
//! `chunks == chunks_written + dropped (all reasons)`.

use accutrace_formats::capture::PipelineCounters;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Laid out in two groups, 128-byte aligned: the ones the dump callback bumps first, then (past a pad) the
/// ones the writer threads bump, so the callback's increments do not pull a line the writers are writing.
#[derive(Default, Debug)]
#[repr(C, align(128))]
pub struct Counters {
    /// Callback invocations.
    pub chunks: AtomicU64,
    /// Payload bytes of the chunks accepted into slots.
    pub bytes_in: AtomicU64,
    /// Chunks larger than a slot, split over several slots.
    pub chunks_split: AtomicU64,
    pub dropped_bad_length: AtomicU64,
    pub dropped_queue_full: AtomicU64,
    /// Chunks that arrived while the collector was not running (before start, after stop, disabled).
    pub dropped_inactive: AtomicU64,
    /// Chunks whose handling panicked in the callback.
    pub dropped_panic: AtomicU64,
    /// Drop notes that did not fit the writer's queue: their files cannot be marked incomplete by name.
    pub drop_notes_lost: AtomicU64,
    /// Times the callback waited for a free slot (queue-full policy `block`), and for how long in total.
    pub block_waits: AtomicU64,
    pub block_wait_ns: AtomicU64,
    /// Keeps the writers' counters below off the callback's cache lines (10 + 6 words = 128 bytes).
    _pad: [u64; 6],
    /// Chunks whose bytes reached the reassembler.
    pub chunks_written: AtomicU64,
    /// Chunks a writer discarded because the collector had been disabled.
    pub dropped_disabled: AtomicU64,
    /// Files completed (last chunk seen) and files recorded.
    pub files: AtomicU64,
    pub files_recorded: AtomicU64,
    /// Files that lost chunks (dropped, or still partial at the end); not recorded.
    pub files_incomplete: AtomicU64,
    /// Files that could not be parsed (not recorded; the reason is logged once).
    pub files_unparsed: AtomicU64,
    /// `mapping.csv` files (long-name maps) seen; they carry no tensors.
    pub files_mapping: AtomicU64,
    /// Files that arrived whole but were not recorded because the capture could not be written (a full
    /// disk, the file size limit, a panic: the write that failed, and every file after it).
    pub files_lost: AtomicU64,
    pub tensors: AtomicU64,
    /// Tensors whose statistics the shared decoder refused (recorded with empty statistics).
    pub tensors_without_stats: AtomicU64,
    pub overflow_records: AtomicU64,
    pub stats_csv_records: AtomicU64,
    /// Records refused by the trigger policy after it stopped.
    pub refused_after_stop: AtomicU64,
    /// CPU time the writer threads used (user + system), added by each when it ends.
    pub writer_cpu_ns: AtomicU64,
    /// Dumps set that deliver every op of every step: with ops run after one, zero chunks means another
    /// callback receives them.
    pub every_op_dumps_set: AtomicU64,
    /// Finalizes of the dump before which aclrtSynchronizeDevice failed (and its last error code), or that
    /// ran without it because the runtime has none: ops still running then lost their dumps (`steps`).
    pub finalize_syncs_failed: AtomicU64,
    pub finalize_sync_error: AtomicU64,
    pub finalize_syncs_unavailable: AtomicU64,
}

pub fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}

impl Counters {
    /// A plain copy, for the manifest.
    pub fn snapshot(&self) -> PipelineCounters {
        let g = |c: &AtomicU64| c.load(Relaxed);
        let slot = crate::callback_slot::CallbackSlot::events();
        PipelineCounters {
            chunks: g(&self.chunks),
            bytes_in: g(&self.bytes_in),
            chunks_split: g(&self.chunks_split),
            chunks_written: g(&self.chunks_written),
            dropped_bad_length: g(&self.dropped_bad_length),
            dropped_queue_full: g(&self.dropped_queue_full),
            dropped_inactive: g(&self.dropped_inactive),
            dropped_panic: g(&self.dropped_panic),
            dropped_disabled: g(&self.dropped_disabled),
            drop_notes_lost: g(&self.drop_notes_lost),
            block_waits: g(&self.block_waits),
            block_wait_ns: g(&self.block_wait_ns),
            files: g(&self.files),
            files_recorded: g(&self.files_recorded),
            files_incomplete: g(&self.files_incomplete),
            files_unparsed: g(&self.files_unparsed),
            files_mapping: g(&self.files_mapping),
            files_lost: g(&self.files_lost),
            tensors: g(&self.tensors),
            tensors_without_stats: g(&self.tensors_without_stats),
            overflow_records: g(&self.overflow_records),
            stats_csv_records: g(&self.stats_csv_records),
            refused_after_stop: g(&self.refused_after_stop),
            writer_cpu_ns: g(&self.writer_cpu_ns),
            every_op_dumps_set: g(&self.every_op_dumps_set),
            finalize_syncs_failed: g(&self.finalize_syncs_failed),
            finalize_sync_error: g(&self.finalize_sync_error),
            finalize_syncs_unavailable: g(&self.finalize_syncs_unavailable),
            model_executions: crate::acl_hooks::model_executions(),
            op_executions: crate::acl_hooks::op_executions(),
            other_callback_held_slot: slot.other_callback_held_slot,
            other_callbacks_after_ours: slot.other_callbacks_after_ours,
            other_callbacks_unregistered: slot.other_callbacks_unregistered,
            our_callback_removed: slot.our_callback_removed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Counters;
    use std::mem::offset_of;

    #[test]
    fn callback_and_writer_counters_do_not_share_a_line() {
        assert_eq!(std::mem::align_of::<Counters>(), 128);
        for callback_side in [
            offset_of!(Counters, chunks),
            offset_of!(Counters, bytes_in),
            offset_of!(Counters, dropped_queue_full),
            offset_of!(Counters, block_wait_ns),
        ] {
            assert!(callback_side < 128);
        }
        assert_eq!(offset_of!(Counters, chunks_written), 128);
    }
}
