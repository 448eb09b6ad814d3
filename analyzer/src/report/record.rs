//! The report of `analyzer record`: what the capture holds, from its manifest and stream files and then
//! from the index, and what the collector cost the job; a summary, one CSV row per stream, or JSON.

use super::{human_bytes, write_json, Format, Output};
use crate::filter::rank_ranges;
use accutrace_formats::capture::manifest::{Manifest, RunCounts, StreamSummary, MANIFEST_FILE};
use accutrace_formats::capture::reader::CaptureRun;
use accutrace_formats::capture::PipelineCounters;
use anyhow::{Context, Result};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What a capture directory holds.
#[derive(Serialize)]
pub struct CaptureSummary {
    /// The run directory.
    pub dir: PathBuf,
    /// Bytes of the files under it.
    pub bytes: u64,
    /// The run's counts, from `manifest.json` (absent when the collector never wrote it).
    pub counts: Option<RunCounts>,
    /// Whether the manifest has an end time (the collector finished cleanly).
    pub finished: bool,
    /// What the collector cost the job, when the manifest says.
    pub collector_cost: Option<CollectorCost>,
    /// One entry per stream (one per process that captured).
    pub streams: Vec<StreamSummary>,
    /// Streams whose records end without a clean seal: `segment at byte N: why`.
    pub torn_tails: Vec<String>,
    /// What the analyzer's index of the capture holds.
    pub indexed: Option<Indexed>,
    /// Why the capture could not be indexed, when it could not.
    pub index_error: Option<String>,
}

/// The collector's own cost, summed over the processes of the run.
#[derive(Serialize)]
pub struct CollectorCost {
    /// CPU time of the writer threads, seconds.
    pub writer_cpu_s: f64,
    /// Time the dump callback waited for a free slot, milliseconds.
    pub callback_wait_ms: f64,
    /// How many times it waited.
    pub callback_waits: u64,
}

/// What the analyzer's index of the capture holds.
#[derive(Serialize)]
pub struct Indexed {
    pub ops: usize,
    pub tensors: usize,
    pub steps: Vec<u64>,
    pub ranks: Vec<u32>,
    pub overflow_records: usize,
    /// What the capture misses (lost segments or streams, dropped chunks, unsealed streams).
    pub problems: Vec<String>,
    pub warnings: Vec<String>,
}

impl CaptureSummary {
    /// Reads what `dir` holds; `None` when nothing was captured at all (no manifest, no stream).
    pub fn read(dir: &Path) -> Result<Option<CaptureSummary>> {
        let manifest = match Manifest::read(dir) {
            Ok(m) => Some(m),
            Err(_) if !dir.join(MANIFEST_FILE).exists() => None,
            Err(e) => return Err(e.into()),
        };
        let run =
            CaptureRun::open(dir).with_context(|| format!("cannot read the capture in {}", dir.display()))?;
        if manifest.is_none() && run.streams.is_empty() {
            return Ok(None);
        }
        let torn_tails = run
            .streams
            .iter()
            .filter_map(|s| s.torn_tail())
            .map(|t| format!("{} at byte {}: {}", t.segment.display(), t.offset, t.reason))
            .collect();
        // The capture reader may lag behind the collector during development; the manifest still speaks.
        let (indexed, index_error) = match crate::sources::open(dir) {
            Ok(source) => (Some(source), None),
            Err(e) => (None, Some(format!("{e:#}"))),
        };
        let indexed = indexed.map(|source| {
            let index = source.index();
            Indexed {
                ops: index.ops.len(),
                tensors: index.tensors.len(),
                steps: index.steps(),
                ranks: index.ranks(),
                overflow_records: index.overflow_records.len(),
                problems: index.problems.iter().map(|p| p.message.clone()).collect(),
                warnings: index.warnings.clone(),
            }
        });
        Ok(Some(CaptureSummary {
            dir: dir.to_path_buf(),
            bytes: disk_usage(dir),
            finished: manifest.as_ref().is_some_and(|m| m.finished_unix_us.is_some()),
            collector_cost: manifest.as_ref().and_then(collector_cost),
            counts: manifest.as_ref().map(|m| m.counts.clone()),
            streams: manifest.map(|m| m.streams).unwrap_or_default(),
            torn_tails,
            indexed,
            index_error,
        }))
    }
}

/// Writes `summary` in `format` on standard output; `overflow`: the capture was of overflow records.
pub fn write(summary: &CaptureSummary, format: Format, overflow: bool) -> Result<()> {
    let mut out = Output::open(None)?;
    match format {
        Format::Table => print_table(&mut out, summary, overflow)?,
        Format::Json => write_json(&mut out, "record", summary)?,
        Format::Csv => {
            let mut w = csv::Writer::from_writer(&mut out);
            w.write_record([
                "stream",
                "rank",
                "device",
                "pid",
                "host",
                "ops",
                "tensors",
                "tensors_with_data",
                "sealed",
                "trigger_step",
            ])?;
            for s in &summary.streams {
                w.write_record([
                    s.info.stream_id.to_string(),
                    s.info.rank.map(|r| r.to_string()).unwrap_or_default(),
                    s.info.device.to_string(),
                    s.info.pid.to_string(),
                    s.info.host.clone(),
                    s.counts.ops.to_string(),
                    s.counts.tensors.to_string(),
                    s.counts.tensors_with_data.to_string(),
                    s.sealed.to_string(),
                    s.triggered_at_step.map(|s| s.to_string()).unwrap_or_default(),
                ])?;
            }
            w.flush()?;
        }
    }
    out.flush()?;
    Ok(())
}

/// What the collector cost the job, from the pipeline counters of every process in the manifest: the
/// writer threads' CPU time and the time the dump callback waited for a free slot. None when the manifest
/// has no such counters (another collector version).
fn collector_cost(m: &Manifest) -> Option<CollectorCost> {
    let pipelines = m.pipeline_counters();
    if pipelines.is_empty() {
        return None;
    }
    let sum = |field: fn(&PipelineCounters) -> u64| -> u64 { pipelines.iter().map(|(_, p)| field(p)).sum() };
    Some(CollectorCost {
        writer_cpu_s: sum(|p| p.writer_cpu_ns) as f64 * 1e-9,
        callback_wait_ms: sum(|p| p.block_wait_ns) as f64 * 1e-6,
        callback_waits: sum(|p| p.block_waits),
    })
}

fn print_table(out: &mut impl Write, s: &CaptureSummary, overflow: bool) -> Result<()> {
    writeln!(out, "capture {} ({} of files)", s.dir.display(), human_bytes(s.bytes))?;
    match &s.counts {
        Some(c) => {
            writeln!(
                out,
                "  {} files from {} chunks, {} tensors, {} in, {} written",
                c.files,
                c.chunks,
                c.tensors,
                human_bytes(c.bytes_in),
                human_bytes(c.bytes_out)
            )?;
            if let Some(cost) = &s.collector_cost {
                let waits = cost.callback_waits;
                writeln!(
                    out,
                    "  collector: writer threads used {:.2} s of CPU; the dump callback waited {:.1} ms for \
                     free slots ({waits} time{})",
                    cost.writer_cpu_s,
                    cost.callback_wait_ms,
                    if waits == 1 { "" } else { "s" }
                )?;
            }
            if c.drops > 0 {
                writeln!(
                    out,
                    "  warning: {} chunks or files dropped or lost: the capture is missing data",
                    c.drops
                )?;
            }
            if overflow && c.tensors == 0 {
                // CANN's overflow dump (dump_debug) excludes the data dump: only overflowing ops leave records.
                writeln!(out, "  note: with --overflow only ops that overflow are recorded; none did")?;
            }
            if !s.finished {
                writeln!(
                    out,
                    "  warning: the manifest has no end time: the collector did not finish cleanly"
                )?;
            }
        }
        None => {
            writeln!(out, "  warning: no manifest.json: the command ended before the collector finished")?
        }
    }
    for st in &s.streams {
        let rank = st.info.rank.map_or_else(|| "unknown".into(), |r| r.to_string());
        write!(
            out,
            "  stream {}: rank {rank} device {} pid {}: {} ops, {} tensors ({} with data)",
            st.info.stream_id,
            st.info.device,
            st.info.pid,
            st.counts.ops,
            st.counts.tensors,
            st.counts.tensors_with_data
        )?;
        if let Some(step) = st.triggered_at_step {
            write!(out, ", trigger fired at step {step}")?;
        }
        writeln!(out, "{}", if st.sealed { "" } else { " (not sealed)" })?;
    }
    for tail in &s.torn_tails {
        writeln!(out, "  torn tail: {tail}")?;
    }
    match (&s.indexed, &s.index_error) {
        (Some(i), _) => {
            let span = match (i.steps.first(), i.steps.last()) {
                (Some(a), Some(b)) if a != b => format!("steps {a}-{b} ({} distinct)", i.steps.len()),
                (Some(a), _) => format!("step {a}"),
                _ => "no steps".into(),
            };
            writeln!(
                out,
                "  indexed: {} ops, {} tensors, {span}, {}, {} overflow records",
                i.ops,
                i.tensors,
                rank_ranges(&i.ranks),
                i.overflow_records
            )?;
            for p in &i.problems {
                writeln!(out, "  incomplete: {p}")?;
            }
            for w in &i.warnings {
                writeln!(out, "  warning: {w}")?;
            }
        }
        (None, e) => writeln!(
            out,
            "  note: the capture could not be indexed ({}); counts above are the manifest's",
            e.as_deref().unwrap_or("no reason given")
        )?,
    }
    Ok(())
}

fn disk_usage(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => disk_usage(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}
