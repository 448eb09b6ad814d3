//! The collector's pipeline counters as the manifest keeps them: one object per stream directory under
//! `config.pipeline` (docs/COLLECTOR.md). The collector fills them; readers learn from them what the
//! capture lost before anything reached a segment (dropped chunks, incomplete and lost files).

use super::manifest::Manifest;
use serde::{Deserialize, Serialize};

/// One process's counters (fields a manifest lacks read as 0, so older manifests still parse).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PipelineCounters {
    /// Callback invocations (chunks the runtime handed over).
    pub chunks: u64,
    /// Payload bytes of the chunks accepted into slots.
    pub bytes_in: u64,
    /// Chunks larger than a slot, split over several slots.
    pub chunks_split: u64,
    /// Chunks whose bytes reached the reassembler.
    pub chunks_written: u64,
    /// Chunks whose length did not match the dump header.
    pub dropped_bad_length: u64,
    /// Chunks dropped because no slot was free (queue-full policy `drop`).
    pub dropped_queue_full: u64,
    /// Chunks that arrived while the collector was not running (after stop, disabled).
    pub dropped_inactive: u64,
    /// Chunks whose handling panicked in the callback.
    pub dropped_panic: u64,
    /// Chunks a writer discarded because the collector had been disabled.
    pub dropped_disabled: u64,
    /// Drop notes that did not fit the writer's queue: their files cannot be marked incomplete by name.
    pub drop_notes_lost: u64,
    /// Times the callback waited for a free slot (queue-full policy `block`).
    pub block_waits: u64,
    /// Total time the callback waited for a free slot, nanoseconds.
    pub block_wait_ns: u64,
    /// Files completed (last chunk seen).
    pub files: u64,
    /// Files recorded.
    pub files_recorded: u64,
    /// Files that lost chunks (dropped, or still partial at the end); not recorded.
    pub files_incomplete: u64,
    /// Files that could not be parsed (not recorded).
    pub files_unparsed: u64,
    /// `mapping.csv` files (long-name maps); they carry no tensors.
    pub files_mapping: u64,
    /// Files that arrived whole but could not be written (the capture failed: full disk, file size limit).
    pub files_lost: u64,
    /// Tensors recorded.
    pub tensors: u64,
    /// Tensors whose statistics the decoder refused (recorded with empty statistics).
    pub tensors_without_stats: u64,
    /// Overflow (op-debug) records recorded.
    pub overflow_records: u64,
    /// Statistics-mode CSV records recorded.
    pub stats_csv_records: u64,
    /// Records refused by the trigger policy after it stopped.
    pub refused_after_stop: u64,
    /// CPU time the writer threads used (user + system).
    pub writer_cpu_ns: u64,
    /// Times the collector set a dump that delivers every op of every step (no overflow-only dump, op list
    /// or step list). Absent from older manifests (0): nothing then says that chunks were due.
    pub every_op_dumps_set: u64,
    /// Successful `aclmdlExecute` calls of the process (graph-mode steps); 0 in older manifests.
    pub model_executions: u64,
    /// Successful single-op launches of the process (eager ops: `aclopExecuteV2`, `aclopCompileAndExecute`,
    /// `aclopCompileAndExecuteV2`, `aclopExecute`, `aclopExecWithHandle`; older collectors counted
    /// `aclopExecuteV2` only, then the first three); 0 in older manifests.
    pub op_executions: u64,
    /// Times the collector registered its dump callback while another tool's held the runtime's only slot
    /// (the runtime answered ACL_SUCCESS and kept the other): the collector received nothing. 0 in older
    /// manifests (not seen then).
    pub other_callback_held_slot: u64,
    /// Another tool's registrations while the collector's callback held the slot: the runtime ignored them
    /// (the other tool's dump received nothing; this capture is whole).
    pub other_callbacks_after_ours: u64,
    /// Another tool's `acldumpUnregCallback` calls that emptied the slot its own callback held.
    pub other_callbacks_unregistered: u64,
    /// Another tool's `acldumpUnregCallback` calls that removed the collector's callback while it captured
    /// (the runtime removes whichever is registered): nothing arrived after them.
    pub our_callback_removed: u64,
    /// Finalizes of the dump at a step end (the step hook's per-step re-set) before which
    /// `aclrtSynchronizeDevice` failed: ops still running on the device then lost their dumps (the runtime's
    /// finalize stops the receiving server). 0 in older manifests (not checked then).
    pub finalize_syncs_failed: u64,
    /// The error code of the last such failure.
    pub finalize_sync_error: u64,
    /// Finalizes of the dump that ran without synchronizing because the runtime has no
    /// `aclrtSynchronizeDevice`.
    pub finalize_syncs_unavailable: u64,
}

impl PipelineCounters {
    /// Chunks dropped for any reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_bad_length
            + self.dropped_queue_full
            + self.dropped_inactive
            + self.dropped_panic
            + self.dropped_disabled
    }

    /// What the capture is missing, as the manifest's run-wide `counts.drops` sums it: dropped chunks and
    /// lost files.
    pub fn losses(&self) -> u64 {
        self.dropped() + self.files_lost
    }

    /// Every nonzero counter of what was lost, by name (`dropped_queue_full`, `files_incomplete`, ...).
    pub fn nonzero_losses(&self) -> Vec<(&'static str, u64)> {
        [
            ("dropped_bad_length", self.dropped_bad_length),
            ("dropped_queue_full", self.dropped_queue_full),
            ("dropped_inactive", self.dropped_inactive),
            ("dropped_panic", self.dropped_panic),
            ("dropped_disabled", self.dropped_disabled),
            ("drop_notes_lost", self.drop_notes_lost),
            ("files_incomplete", self.files_incomplete),
            ("files_unparsed", self.files_unparsed),
            ("files_lost", self.files_lost),
        ]
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .collect()
    }
}

impl Manifest {
    /// The pipeline counters of every process, by stream directory; entries that do not parse are left out.
    pub fn pipeline_counters(&self) -> Vec<(String, PipelineCounters)> {
        let Some(pipelines) = self.config.get("pipeline").and_then(|p| p.as_object()) else {
            return Vec::new();
        };
        pipelines
            .iter()
            .filter_map(|(dir, v)| Some((dir.clone(), serde_json::from_value(v.clone()).ok()?)))
            .collect()
    }
}
