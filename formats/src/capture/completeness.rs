//! What a capture says it holds against what a reader found. The manifest counts every stream's records
//! and segments and says whether each stream was sealed; `stream.json` makes a stream directory a stream.
//! A reader that trusts what it happens to find turns a deleted segment or stream into a clean answer;
//! [`check`] lists every way the capture is short, for the reader to put before its answer.
//!
//! Checked: a missing `manifest.json`; a stream the manifest lists whose `stream.json` is gone; a stream
//! on disk the manifest does not list; segments missing at the start, in the middle or at the end
//! (against `segments_created` and `segments_deleted`); fewer (or more) tensor, overflow and statistics
//! records than the manifest counts (when the ring deleted nothing, so every record must still be there);
//! a stream that was not sealed, or whose last segment ends torn; a segment file longer than its header
//! says (appended to after the capture); and the collector's own losses
//! (dropped chunks, incomplete, unparsed and lost files: `counts.drops` and the pipeline counters); and a
//! process whose dump callback never held the runtime's only callback slot, or lost it, to another tool's
//! callback (whatever the dump mode: an empty overflow capture is no all-clear); and a process whose
//! every-op dump was set and whose job ran models, single ops, steps or collectives but that received no
//! dump chunk at all (another tool's callback registered where the collector could not see it).

use super::manifest::{StreamCounts, StreamSummary, MANIFEST_FILE, STREAM_FILE};
use super::reader::{CaptureRun, Record, StreamReader};
use super::PipelineCounters;
use std::fmt;
use std::path::PathBuf;

/// Records of one stream as a reader counted them while walking it ([`RecordTally::count`] each record).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordTally {
    /// Op records.
    pub ops: u64,
    /// Tensor records.
    pub tensors: u64,
    /// Overflow (op-debug) records.
    pub overflow_records: u64,
    /// Statistics-mode CSV records.
    pub stats_csv_records: u64,
    /// Step-boundary records (format version 2).
    pub step_marks: u64,
    /// HCCL call records (format version 3).
    pub collectives: u64,
}

impl RecordTally {
    /// Counts one record of the stream.
    pub fn count(&mut self, record: &Record<'_>) {
        match record {
            Record::Op(_) => self.ops += 1,
            Record::Tensor(_) => self.tensors += 1,
            Record::Overflow(_) => self.overflow_records += 1,
            Record::StatsCsv(_) => self.stats_csv_records += 1,
            Record::StepMark(_) => self.step_marks += 1,
            Record::Collective(_) => self.collectives += 1,
            // A tensor record passed over undecoded (`Records::passing_tensors`).
            Record::Unknown { kind: crate::capture::record::KIND_TENSOR } => self.tensors += 1,
            Record::Unknown { .. } => {}
        }
    }

    /// Walks every record of `stream` (stopping at the first unreadable one).
    pub fn of_stream(stream: &StreamReader) -> RecordTally {
        let mut tally = RecordTally::default();
        for item in stream.records() {
            match item {
                Ok(r) => tally.count(&r.record),
                Err(_) => break,
            }
        }
        tally
    }
}

/// One way the capture is short: where, and what is missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// The run directory, a stream directory, or a segment file.
    pub path: PathBuf,
    /// What is missing or wrong, in words.
    pub problem: String,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.problem)
    }
}

/// Every way `run` is short of what its manifest and stream files say; `tallies[i]` are the records a
/// reader found in `run.streams[i]`. Empty when the capture is whole.
pub fn check(run: &CaptureRun, tallies: &[RecordTally]) -> Vec<Shortfall> {
    let mut found = Vec::new();
    let mut short = |path: PathBuf, problem: String| found.push(Shortfall { path, problem });
    let Some(manifest) = &run.manifest else {
        short(
            run.dir.join(MANIFEST_FILE),
            "missing: the collector never wrote it or it was removed, so nothing says what the capture \
             should hold (streams read as found)"
                .into(),
        );
        for stream in &run.streams {
            stream_on_disk(stream, None, &mut short);
        }
        return found;
    };
    if manifest.counts.drops > 0 {
        short(
            run.dir.join(MANIFEST_FILE),
            format!(
                "the collector dropped or lost {} chunk(s) or file(s) (counts.drops): ops and tensors are missing",
                manifest.counts.drops
            ),
        );
    }
    for (dir, counters) in manifest.pipeline_counters() {
        let losses: Vec<String> =
            counters.nonzero_losses().iter().map(|(name, n)| format!("{name} {n}")).collect();
        if !losses.is_empty() {
            short(run.dir.join(&dir), format!("the collector's losses: {}", losses.join(", ")));
        }
    }
    for (dir, counters) in manifest.pipeline_counters() {
        let summary = manifest.streams.iter().find(|s| s.dir == dir);
        // One cause, said once: the slot seen taken explains an empty capture too.
        let problem = callback_slot_taken(&counters)
            .or_else(|| summary.and_then(|s| no_dump_arrived(&counters, &s.counts)));
        if let Some(problem) = problem {
            short(run.dir.join(&dir), problem);
        }
        if let Some(problem) = finalized_unsynchronized(&counters) {
            short(run.dir.join(&dir), problem);
        }
    }
    let dir_name = |s: &StreamReader| s.dir().file_name().map(|n| n.to_string_lossy().into_owned());
    for summary in &manifest.streams {
        let at = run.dir.join(&summary.dir);
        match run.streams.iter().position(|s| dir_name(s).as_deref() == Some(summary.dir.as_str())) {
            Some(i) => {
                stream_on_disk(&run.streams[i], Some(summary), &mut short);
                let tally = tallies.get(i).copied().unwrap_or_default();
                record_counts(summary, &tally, at, &mut short);
            }
            None => {
                let why = if at.is_dir() { format!("{STREAM_FILE} is missing") } else { "missing".into() };
                short(
                    at,
                    format!(
                        "listed in the manifest (rank {}, pid {}, {} tensors) but the stream directory's {why}: \
                         none of its records were read",
                        rank_text(summary.info.rank),
                        summary.info.pid,
                        summary.counts.tensors
                    ),
                );
            }
        }
    }
    for stream in &run.streams {
        let name = dir_name(stream).unwrap_or_default();
        if !manifest.streams.iter().any(|s| s.dir == name) {
            short(
                stream.dir().to_path_buf(),
                "not in the manifest: it cannot vouch for what this stream holds (a copy? written after its \
                 last update?)"
                    .into(),
            );
            stream_on_disk(stream, None, &mut short);
        }
    }
    found
}

/// When the collector saw another tool's dump callback hold the runtime's only callback slot while it
/// captured (registered before the collector's, which the runtime then answered ACL_SUCCESS and ignored),
/// or remove the collector's callback: what happened, in words. In any dump mode: an overflow-only dump
/// rightly delivers nothing from a clean run, so only this tells "no overflow" from "nothing received".
pub fn callback_slot_taken(counters: &PipelineCounters) -> Option<String> {
    let what_to_do = "Turn the other tool's dump off (MindSpore's or msprobe's dump, another collector: its \
         callback takes the runtime's only slot) and run again; a framework's own dump configuration \
         without a callback of its own (torch_npu's ACL dump option) can stay, with \
         ACCUTRACE_RESPECT_FRAMEWORK_DUMP=1";
    if counters.other_callback_held_slot > 0 {
        let later = if counters.other_callbacks_unregistered > 0 {
            "; the other tool unregistered it later, which left no callback registered (the runtime had \
             ignored the collector's)"
        } else {
            ""
        };
        return Some(format!(
            "another tool's dump callback held the runtime's only dump callback slot when the collector \
             registered its own: the runtime answered ACL_SUCCESS and kept sending every chunk to the other \
             one{later}, so this process captured nothing (an empty overflow or dump capture here is no \
             all-clear). {what_to_do}"
        ));
    }
    if counters.our_callback_removed > 0 {
        return Some(format!(
            "another tool's acldumpUnregCallback removed the collector's dump callback while it captured \
             ({} time(s); the runtime removes whichever callback is registered): nothing arrived after that, \
             so ops and tensors are missing. {what_to_do}",
            counters.our_callback_removed
        ));
    }
    None
}

/// When the collector finalized the dump at a step end (the step hook's re-set) without first waiting for the
/// device: ops launched asynchronously (eager frameworks) and still running then lost their dumps, since the
/// runtime's aclmdlFinalizeDump stops receiving them. What happened, in words.
pub fn finalized_unsynchronized(counters: &PipelineCounters) -> Option<String> {
    let consequence = "ops still running on the device then (launched asynchronously, as eager frameworks \
         launch) lost their dumps, since aclmdlFinalizeDump stops the runtime's dump receiver: ops and tensors \
         may be missing at step ends";
    if counters.finalize_syncs_failed > 0 {
        return Some(format!(
            "aclrtSynchronizeDevice failed ({} time(s), last with error code {}) before the collector \
             finalized the dump at a step end; {consequence}. Look for the runtime's error in its log \
             (ASCEND_GLOBAL_LOG_LEVEL=1) and run again",
            counters.finalize_syncs_failed, counters.finalize_sync_error
        ));
    }
    if counters.finalize_syncs_unavailable > 0 {
        return Some(format!(
            "the runtime has no aclrtSynchronizeDevice, so the collector finalized the dump at {} step end(s) \
             without waiting for the device; {consequence}. Use a CANN runtime that exports aclrtSynchronizeDevice",
            counters.finalize_syncs_unavailable
        ));
    }
    None
}

/// When a process set a dump of every op, its job then ran (model executions, single-op launches, step ends
/// or HCCL calls were recorded), and yet not one dump chunk arrived: what happened, in words. The runtime
/// answers ACL_SUCCESS to a second `acldumpRegCallback` and keeps sending to the first, so this is what a
/// capture looks like when another tool registered first where the collector could not see it (older
/// collectors saw no registration at all: [`callback_slot_taken`]). A dump finalized at step ends without
/// waiting for the device ([`finalized_unsynchronized`], said apart) explains an empty capture too: every
/// op launched asynchronously may still have been running at each finalize. One cause, said once.
pub fn no_dump_arrived(counters: &PipelineCounters, counts: &StreamCounts) -> Option<String> {
    if finalized_unsynchronized(counters).is_some() {
        return None;
    }
    let ran = counters.model_executions > 0
        || counters.op_executions > 0
        || counts.step_marks > 0
        || counts.collectives > 0;
    if counters.chunks > 0 || counters.every_op_dumps_set == 0 || !ran {
        return None;
    }
    Some(format!(
        "no dump chunk arrived although the collector set a dump of every op and the job ran ({} model \
         execution(s), {} single op(s), {} step mark(s), {} HCCL call(s)): another tool's dump callback (MindSpore's or msprobe's dump, another \
         collector) was probably registered first, and the runtime keeps sending to the first one; this \
         process captured nothing. Turn the other tool's dump off and run again",
        counters.model_executions, counters.op_executions, counts.step_marks, counts.collectives
    ))
}

fn rank_text(rank: Option<u32>) -> String {
    rank.map_or_else(|| "x".into(), |r| r.to_string())
}

/// Segments and seal of one stream found on disk, against its manifest entry when there is one.
fn stream_on_disk(
    stream: &StreamReader,
    summary: Option<&StreamSummary>,
    short: &mut impl FnMut(PathBuf, String),
) {
    let dir = stream.dir().to_path_buf();
    let indices: Vec<u64> = stream.segment_indices().collect();
    // Gaps between the segments found are missing whatever the manifest says.
    let mut missing: Vec<(u64, u64)> =
        indices.windows(2).filter(|w| w[1] > w[0] + 1).map(|w| (w[0] + 1, w[1] - 1)).collect();
    if let Some(s) = summary {
        // The ring deletes the oldest: the kept ones are `deleted..created`. A stream still being written (or
        // killed) may have rolled or deleted since the manifest's last update, so only a sealed one is held
        // to the exact range.
        let (first, end) = (s.counts.segments_deleted, s.counts.segments_created);
        if s.sealed && end > first {
            match (indices.first(), indices.last()) {
                (Some(&lo), Some(&hi)) => {
                    if lo > first {
                        missing.push((first, lo - 1));
                    }
                    if hi + 1 < end {
                        missing.push((hi + 1, end - 1));
                    }
                    if hi >= end {
                        short(
                            dir.clone(),
                            format!("segment {hi} found, but the manifest says only {end} were created"),
                        );
                    }
                }
                _ => missing.push((first, end - 1)),
            }
        }
    }
    for (segment, extra) in stream.bytes_past_segment_size() {
        short(
            segment.to_path_buf(),
            format!("{extra} bytes past the segment's size: the file was changed after the capture"),
        );
    }
    missing.sort_unstable();
    for (lo, hi) in missing {
        let which = if lo == hi { format!("segment {lo} is") } else { format!("segments {lo} to {hi} are") };
        short(dir.clone(), format!("{which} missing: their records were not read"));
    }
    match (summary.map(|s| s.sealed), stream.torn_tail()) {
        (Some(false), tail) => short(
            dir,
            format!(
                "not sealed: its process did not finish (killed, or still running){}",
                tail.map(|t| format!(
                    "; records end at byte {} of {} ({})",
                    t.offset,
                    t.segment.display(),
                    t.reason
                ))
                .unwrap_or_default()
            ),
        ),
        (_, Some(t)) => short(
            t.segment.clone(),
            format!("records end at byte {} ({}) without a seal: what followed is lost", t.offset, t.reason),
        ),
        (_, None) => {}
    }
}

/// Records found against the manifest's counts of a sealed stream (its final counts) where every record
/// must still be on disk (nothing deleted by the ring).
fn record_counts(
    summary: &StreamSummary,
    tally: &RecordTally,
    at: PathBuf,
    short: &mut impl FnMut(PathBuf, String),
) {
    if !summary.sealed || summary.counts.segments_deleted > 0 {
        return;
    }
    let c = &summary.counts;
    let pairs = [
        ("op records", tally.ops, c.ops),
        ("tensor records", tally.tensors, c.tensors),
        ("overflow records", tally.overflow_records, c.overflow_records),
        ("statistics CSV records", tally.stats_csv_records, c.stats_csv_records),
        ("step marks", tally.step_marks, c.step_marks),
        ("collective records", tally.collectives, c.collectives),
    ];
    let off: Vec<String> = pairs
        .iter()
        .filter(|(_, got, want)| got != want)
        .map(|(what, got, want)| format!("{got} {what} found, the manifest counts {want}"))
        .collect();
    if !off.is_empty() {
        short(at, off.join("; "));
    }
}
