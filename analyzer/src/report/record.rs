//! The report of `analyzer record`: what the capture holds, from its manifest and stream files and then
//! from the index, and what the collector cost the job.

use super::human_bytes;
use accutrace_formats::capture::manifest::Manifest;
use accutrace_formats::capture::reader::CaptureRun;
use anyhow::{bail, Context, Result};
use std::io::Write;
use std::path::Path;

/// What the collector cost the job, from the pipeline counters of every process in the manifest: the
/// writer threads' CPU time and the time the dump callback waited for a free slot. None when the manifest
/// has no such counters (another collector version).
fn collector_cost(m: &Manifest) -> Option<String> {
    let pipelines = m.config.get("pipeline")?.as_object()?;
    let sum = |field: &str| -> u64 { pipelines.values().filter_map(|p| p.get(field)?.as_u64()).sum() };
    let (cpu_ns, waits, wait_ns) = (sum("writer_cpu_ns"), sum("block_waits"), sum("block_wait_ns"));
    Some(format!(
        "collector: writer threads used {:.2} s of CPU; the dump callback waited {:.1} ms for free slots ({} time{})",
        cpu_ns as f64 * 1e-9,
        wait_ns as f64 * 1e-6,
        waits,
        if waits == 1 { "" } else { "s" }
    ))
}

/// What the capture in `dir` holds: from the manifest and the stream files, then from the index.
pub fn write(out: &mut impl Write, dir: &Path, overflow: bool) -> Result<()> {
    let manifest = match Manifest::read(dir) {
        Ok(m) => Some(m),
        Err(_) if !dir.join(accutrace_formats::capture::manifest::MANIFEST_FILE).exists() => None,
        Err(e) => return Err(e.into()),
    };
    let run =
        CaptureRun::open(dir).with_context(|| format!("cannot read the capture in {}", dir.display()))?;
    if manifest.is_none() && run.streams.is_empty() {
        bail!(
            "{}: nothing was captured (no manifest.json, no streams): the collector did not activate; check \
             that the command loads libascendcl.so and enables dumping, and see the collector's log line on stderr",
            dir.display()
        );
    }
    // Segments are pre-allocated at their full size, so the files' size is not what the records take.
    writeln!(
        out,
        "capture {} ({} of files, segments pre-allocated)",
        dir.display(),
        human_bytes(disk_usage(dir))
    )?;
    if let Some(m) = &manifest {
        let c = &m.counts;
        writeln!(
            out,
            "  {} files from {} chunks, {} tensors, {} in, {} written",
            c.files,
            c.chunks,
            c.tensors,
            human_bytes(c.bytes_in),
            human_bytes(c.bytes_out)
        )?;
        if let Some(cost) = collector_cost(m) {
            writeln!(out, "  {cost}")?;
        }
        if c.drops > 0 {
            writeln!(out, "  warning: {} chunks or files dropped (queue full)", c.drops)?;
        }
        if overflow && c.tensors == 0 {
            // CANN's overflow dump (dump_debug) excludes the data dump: only overflowing ops leave records.
            writeln!(out, "  note: with --overflow only ops that overflow are recorded; none did")?;
        }
        if m.finished_unix_us.is_none() {
            writeln!(out, "  warning: the manifest has no end time: the collector did not finish cleanly")?;
        }
        for s in &m.streams {
            let rank = s.info.rank.map_or_else(|| "?".into(), |r| r.to_string());
            write!(
                out,
                "  stream {}: rank {rank} device {} pid {}: {} ops, {} tensors ({} with data)",
                s.info.stream_id,
                s.info.device,
                s.info.pid,
                s.counts.ops,
                s.counts.tensors,
                s.counts.tensors_with_data
            )?;
            if let Some(step) = s.triggered_at_step {
                write!(out, ", trigger fired at step {step}")?;
            }
            writeln!(out, "{}", if s.sealed { "" } else { " (not sealed)" })?;
        }
    } else {
        writeln!(out, "  warning: no manifest.json: the command ended before the collector finished")?;
    }
    for stream in &run.streams {
        if let Some(tail) = stream.torn_tail() {
            writeln!(
                out,
                "  torn tail: {} at byte {}: {}",
                tail.segment.display(),
                tail.offset,
                tail.reason
            )?;
        }
    }
    match crate::sources::open(dir) {
        Ok(source) => {
            let index = source.index();
            let steps = index.steps();
            let span = match (steps.first(), steps.last()) {
                (Some(a), Some(b)) if a != b => format!("steps {a}-{b} ({} distinct)", steps.len()),
                (Some(a), _) => format!("step {a}"),
                _ => "no steps".into(),
            };
            writeln!(
                out,
                "  indexed: {} ops, {} tensors, {span}, ranks {:?}, {} overflow records",
                index.ops.len(),
                index.tensors.len(),
                index.ranks(),
                index.overflow_records.len()
            )?;
            for w in &index.warnings {
                writeln!(out, "  warning: {w}")?;
            }
        }
        // The capture reader may lag behind the collector during development; the manifest still speaks.
        Err(e) => writeln!(
            out,
            "  note: the capture could not be indexed ({e:#}); counts above are the manifest's"
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
