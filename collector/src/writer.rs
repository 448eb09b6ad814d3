//! The writer threads: take chunk parts off their queue, reassemble files (a file that fits one chunk is
//! used in its slot, uncopied), and turn each finished file into capture records with the shared codecs
//! (`accutrace_formats::dump` to parse, `stats` for statistics and content hash, `capture::StreamWriter` to
//! shuffle, compress and frame).
//!
//! A file always goes to the same thread (`routing`), so reassembly needs no locks. The one
//! stream writer is shared: statistics, hashes, shuffling and zstd (`capture::DataEncoder`) run before
//! taking its lock, so writer threads encode in parallel; under the lock one file's op and tensor records
//! are only framed and copied, together. A single writer thread shares the lock with nobody: it shuffles and
//! compresses under it, straight into the segment (`StreamWriter::append_tensor`: same bytes, no copy).
//!
//! An idle writer polls its queue for a moment, then sleeps until the callback wakes it for a batch of
//! chunks or a short timeout passes (`pipeline::Waker`): no wake-up system call per chunk.
//!
//! Steps: the callback's file name is the path the file would have had on disk; in the graph-dump layout
//! `{dump_path}/{time}/{device}/{model}/{model_id}/{step}/{file}` the step is that path component; in the
//! single-op layout under a per-step dump path (`{run}/.dump/step{N}/{time}/{device}/{file}`, set at each
//! `accutrace_step_end()`) it is N. Other single-op files are step 0, or counted from
//! `ACCUTRACE_STEP_MARKER` ops (see `crate::steps`).

use crate::config::{Mode, PanicPoint};
use crate::counters::add;
use crate::pipeline::{Msg, Pipeline, BUSY_NAP, BUSY_WINDOW, SPIN};
use crate::reassembly::{Done, Reassembler};
use crate::streamed::{Streamed, Summary};
use accutrace_formats::capture::{
    Appended, DataEncoder, EncodedData, Io, OpInfo, OriginalOp, OverflowInfo, StatsCsv, StepMark, StepSource,
    TensorMeta,
};
use accutrace_formats::dump::{self, DumpLocation, FileKind};
use accutrace_formats::stats::{stats_and_hash, stats_hash_and_histogram, Histogram, TensorStats};
use crossbeam_channel::{Receiver, TryRecvError};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often writer 0 refreshes `manifest.json` while the job runs (so a killed job leaves counts).
pub const MANIFEST_INTERVAL: Duration = Duration::from_secs(2);

/// A writer thread's reusable state besides reassembly: the zstd context and shuffle buffer, and the
/// compression buffers of one file's tensors (kept for their capacity).
#[derive(Default)]
pub struct Scratch {
    encoder: DataEncoder,
    buffers: Vec<Vec<u8>>,
}

/// The body of writer thread `index`.
/// Started with [`crate::signals::spawn_quiet`]: it takes none of the job's signals (in particular not
/// SIGTERM, whose handler waits for the writers to drain, nor SIGXFSZ when a segment hits `ulimit -f`).
pub fn run(p: &'static Pipeline, rx: Receiver<Msg>, index: usize) {
    let waker = &p.wakers[index];
    waker.register();
    let mut r = Reassembler::with_histogram(p.cfg.histogram);
    let mut scratch = Scratch::default();
    let mut last_manifest = Instant::now();
    let mut last_msg = Instant::now();
    // Whether the queue was polled (spun on) since the last message.
    let mut polled = false;
    loop {
        let msg = match rx.try_recv() {
            Ok(m) => m,
            Err(TryRecvError::Disconnected) => Msg::Stop,
            Err(TryRecvError::Empty) => {
                if index == 0 && last_manifest.elapsed() >= MANIFEST_INTERVAL {
                    crate::manifest::publish(p, false);
                    last_manifest = Instant::now();
                }
                // Poll only right after work, when more is likely on its way; a nap that found nothing
                // naps again at once (each poll took CPU from the job: on 2 vCPUs, a fifth of the writer's).
                if !std::mem::replace(&mut polled, true) && spin_until_work(&rx) {
                    continue;
                }
                let now = Instant::now();
                let until = if now.duration_since(last_msg) < BUSY_WINDOW {
                    now + BUSY_NAP
                } else if index == 0 {
                    last_manifest + MANIFEST_INTERVAL
                } else {
                    now + MANIFEST_INTERVAL
                };
                waker.sleep(until, || !rx.is_empty());
                continue;
            }
        };
        last_msg = Instant::now();
        polled = false;
        match msg {
            Msg::Part { slot, name_len, len, hash, offset, last, chunk_end } => {
                if p.is_disabled() {
                    p.pool.give_back(slot);
                    if chunk_end {
                        add(&p.counters.dropped_disabled, 1);
                    }
                    continue;
                }
                if p.cfg.test_slow_writer_ms > 0 {
                    std::thread::sleep(Duration::from_millis(p.cfg.test_slow_writer_ms));
                }
                let bytes = p.pool.bytes(&slot, name_len as usize + len as usize);
                let (name, data) = bytes.split_at(name_len as usize);
                if r.is_whole_file(name, hash, offset, last) {
                    // A file in one chunk (most tensors are small) is recorded from its slot: no copy.
                    add(&p.counters.files, 1);
                    record(p, &mut scratch, name, Content::Bytes(data));
                    p.pool.give_back(slot);
                    if chunk_end {
                        add(&p.counters.chunks_written, 1);
                    }
                } else {
                    // Statistics mode keeps no tensor bytes: a tensor file's statistics are computed as its
                    // chunks arrive (`streamed`), the file is never put back together.
                    let done = r.push_file(name, hash, offset, data, last, |name| streams(p, name));
                    p.pool.give_back(slot);
                    if chunk_end {
                        add(&p.counters.chunks_written, 1);
                    }
                    if let Some(d) = done {
                        handle(p, &mut r, &mut scratch, d);
                    }
                }
            }
            Msg::Dropped { hash, last } => {
                if let Some(d) = r.dropped(hash, last) {
                    handle(p, &mut r, &mut scratch, d);
                }
            }
            Msg::Stop => {
                for d in r.finish() {
                    handle(p, &mut r, &mut scratch, d);
                }
                add(&p.counters.writer_cpu_ns, thread_cpu_ns());
                return;
            }
        }
        if index == 0 && last_manifest.elapsed() >= MANIFEST_INTERVAL {
            crate::manifest::publish(p, false);
            last_manifest = Instant::now();
        }
    }
}

/// Polls an empty queue for up to [`SPIN`]: spinning first, then yielding the CPU. True once it has work.
fn spin_until_work(rx: &Receiver<Msg>) -> bool {
    let started = Instant::now();
    let mut step = 0u32;
    loop {
        if !rx.is_empty() {
            return true;
        }
        if step < 7 {
            for _ in 0..1u32 << step {
                std::hint::spin_loop();
            }
            step += 1;
        } else {
            if started.elapsed() >= SPIN {
                return false;
            }
            std::thread::yield_now();
        }
    }
}

/// CPU time (user + system) the calling thread has used, in nanoseconds (0 if the clock is unavailable).
fn thread_cpu_ns() -> u64 {
    // SAFETY: clock_gettime writes the timespec it is given; a zeroed timespec is a valid value.
    let t = unsafe {
        let mut t: libc::timespec = std::mem::zeroed();
        if libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) != 0 {
            return 0;
        }
        t
    };
    (t.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec as u64)
}

fn handle(p: &Pipeline, r: &mut Reassembler, scratch: &mut Scratch, done: Done) {
    add(&p.counters.files, 1);
    match done {
        Done::Incomplete { .. } => add(&p.counters.files_incomplete, 1),
        Done::Complete { name, bytes } => {
            record(p, scratch, &name, Content::Bytes(&bytes));
            r.recycle(bytes);
        }
        Done::Streamed { name, file } => record(p, scratch, &name, Content::Streamed(file)),
        Done::Unparsed { name, error } => record(p, scratch, &name, Content::Unparsed(error)),
    }
}

/// A finished file as the writer gets it.
enum Content<'a> {
    /// Its bytes.
    Bytes(&'a [u8]),
    /// Its header and the statistics of its tensors, computed as its chunks arrived (statistics mode).
    Streamed(Box<Streamed>),
    /// A streamed file that is not what its header declares.
    Unparsed(accutrace_formats::FormatError),
}

/// Whether the file `name` (its would-be path) is streamed: a tensor dump in statistics mode. What it
/// decides by is what [`record_file`] decides the kind of a file by.
fn streams(p: &Pipeline, name: &[u8]) -> bool {
    p.cfg.mode == Mode::Stats && {
        let path = String::from_utf8_lossy(name);
        let base = path.rsplit('/').next().unwrap_or(&path);
        file_kind(base) == Some(FileKind::Tensor)
    }
}

/// The kind of a dump file by its name (a mapping file is no kind: `None`).
fn file_kind(base: &str) -> Option<FileKind> {
    if base == dump::mapping::MAPPING_FILE {
        return None;
    }
    Some(match dump::parse_file_name(base) {
        Ok(n) => n.kind,
        Err(_) if base.ends_with(".csv") => FileKind::StatsCsv,
        // A long name replaced by a number (its mapping.csv comes later): judge by the content.
        Err(_) => FileKind::Tensor,
    })
}

/// Records one complete file; a write failure (a full disk, a file size limit) or a panic disables the
/// collector, and the file counts as lost.
fn record(p: &Pipeline, scratch: &mut Scratch, name: &[u8], content: Content<'_>) {
    if p.is_disabled() {
        add(&p.counters.files_lost, 1);
        return;
    }
    let why = match catch_unwind(AssertUnwindSafe(|| record_file(p, scratch, name, content))) {
        Ok(Ok(())) => return,
        Ok(Err(e)) => format!("cannot write the capture: {e}"),
        Err(_) => "a writer thread panicked".to_string(),
    };
    add(&p.counters.files_lost, 1);
    p.disable(&why);
}

/// The training step of a file from its would-be path (module docs), and where it came from: the graph
/// layout's step directory; else a per-step dump path `.../step{N}/{time}/{device}/{file}` set at
/// `accutrace_step_end()`; else nothing (a single-operator dump, step 0). The layout is read where dump
/// trees are read (`accutrace_formats::dump::DumpLocation`).
pub fn step_from_path(path: &str) -> (u64, StepSource) {
    let dir = std::path::Path::new(path).parent().unwrap_or(std::path::Path::new(""));
    let location = DumpLocation::of(dir);
    match (location.step, location.step_path) {
        (Some(step), _) => (step, StepSource::Model),
        (None, Some(step)) => (step, StepSource::Hook),
        (None, None) => (0, StepSource::None),
    }
}

/// One finished file to records. `Err` only for capture write failures (which disable the collector);
/// files we cannot parse are counted and skipped.
fn record_file(
    p: &Pipeline,
    scratch: &mut Scratch,
    name: &[u8],
    content: Content<'_>,
) -> accutrace_formats::Result<()> {
    if p.cfg.test_panic == Some(PanicPoint::Writer) {
        panic!("ACCUTRACE_TEST_PANIC=writer");
    }
    let path = String::from_utf8_lossy(name);
    let base = path.rsplit('/').next().unwrap_or(&path).to_string();
    let (step, step_source) = step_from_path(&path);
    let Some(kind) = file_kind(&base) else {
        add(&p.counters.files_mapping, 1);
        return Ok(());
    };
    let parsed = dump::parse_file_name(&base).ok();
    let c = &p.counters;
    // Only tensor files are streamed (`streams`); the other kinds always come as bytes.
    let bytes = match (&content, kind) {
        (Content::Bytes(bytes), _) => *bytes,
        (Content::Unparsed(e), _) => {
            unparsed(p, &path, e);
            return Ok(());
        }
        (Content::Streamed(_), FileKind::Tensor) => &[],
        (Content::Streamed(_), _) => {
            unparsed(p, &path, &"a streamed file that is not a tensor dump");
            return Ok(());
        }
    };
    match kind {
        FileKind::StatsCsv => {
            let rec = StatsCsv { step, dump_file: base, csv: bytes.to_vec() };
            let r = with_stream(p, |w| w.append_stats_csv(&rec))?;
            count(p, r, &c.stats_csv_records);
        }
        FileKind::OpDebug => {
            let file = match dump::parse_dump(bytes) {
                Ok(f) => f,
                Err(e) => {
                    unparsed(p, &path, &e);
                    return Ok(());
                }
            };
            let payload = file.outputs.first().map(|t| t.bytes.to_vec()).unwrap_or_default();
            let (task_id, stream_id, ts) = ids(parsed.as_ref(), file.header.dump_time);
            let rec = OverflowInfo { step, task_id, stream_id, timestamp_us: ts, dump_file: base, payload };
            let r = with_stream(p, |w| w.append_overflow(&rec))?;
            count(p, r, &c.overflow_records);
        }
        FileKind::Tensor => {
            // A streamed file brings its header and its tensors' statistics; the others are parsed here.
            let (file, mut summaries) = match content {
                Content::Streamed(s) => {
                    let Streamed { header: h, summaries } = *s;
                    let file = dump::DumpFile {
                        layout: dump::DumpLayout::Binary,
                        header: h.header,
                        inputs: h.inputs,
                        outputs: h.outputs,
                        buffers: Vec::new(),
                        workspaces: Vec::new(),
                    };
                    (file, Some(summaries.into_iter()))
                }
                _ => match dump::parse_dump(bytes) {
                    Ok(f) => (f, None),
                    Err(e) => {
                        unparsed(p, &path, &e);
                        return Ok(());
                    }
                },
            };
            let (task_id, stream_id, timestamp_us) = ids(parsed.as_ref(), file.header.dump_time);
            let mut original_names: Vec<String> = Vec::new();
            for o in file.outputs.iter().filter_map(|t| t.original_op.as_ref()) {
                if !o.name.is_empty() && !original_names.contains(&o.name) {
                    original_names.push(o.name.clone());
                }
            }
            let op_type = parsed.as_ref().map(|n| n.op_type.clone()).unwrap_or_default();
            let dump_number = parsed.as_ref().and_then(|n| n.dump_number);
            // The step-0 dump path of a framework that never called accutrace_step_end() says nothing.
            let step_source = match step_source {
                StepSource::Hook if step == 0 && !p.steps.hook_called() => StepSource::None,
                other => other,
            };
            // Nothing in the path says the step: count ACCUTRACE_STEP_MARKER runs, when there is a marker.
            let (step, step_source, marker) = match (step_source, p.steps.count_marker(&op_type)) {
                (StepSource::None, Some((counted, is_marker))) => (counted, StepSource::Marker, is_marker),
                _ => (step, step_source, false),
            };
            let mark = marker.then(|| StepMark {
                source: StepSource::Marker,
                step,
                wall_time_us: 0,
                op_timestamp_us: timestamp_us,
                op_dump_number: dump_number,
                op_type: op_type.clone(),
            });
            let op = OpInfo {
                name: file.header.op_name.clone(),
                op_type,
                step,
                task_id,
                stream_id,
                timestamp_us,
                dump_file: base,
                original_names,
                dump_number,
                step_source,
            };
            // Statistics, hashes and (tensor mode) shuffle + zstd outside the stream lock: they are the work.
            // A single writer thread has nobody to share the lock with: it compresses under it, straight
            // into the segment (`append_tensor`, same bytes), which saves a copy of the compressed data.
            let with_data = p.cfg.mode == Mode::Tensor;
            let in_place = with_data && p.cfg.writers == 1;
            let mut tensors: Vec<(TensorMeta, Described, Option<EncodedData>)> = Vec::new();
            for t in file.inputs.iter().chain(&file.outputs) {
                let (meta, described) = describe(p, t, summaries.as_mut().and_then(Iterator::next));
                let data = if with_data && !in_place {
                    let buf = scratch.buffers.pop().unwrap_or_default();
                    Some(scratch.encoder.encode(t.bytes, t.dtype, p.cfg.zstd_level, buf)?)
                } else {
                    None
                };
                tensors.push((meta, described, data));
            }
            let level = p.cfg.zstd_level;
            let written = with_stream(p, |w| {
                if let Some(mark) = &mark {
                    w.append_step_mark(mark)?;
                }
                if let Appended::Stopped = w.append_op(&op)? {
                    add(&c.refused_after_stop, 1);
                    return Ok(Appended::Stopped);
                }
                for ((meta, d, data), t) in tensors.iter().zip(file.inputs.iter().chain(&file.outputs)) {
                    let hist = d.histogram.as_ref();
                    let r = if in_place {
                        w.append_tensor_with_histogram(meta, &d.stats, hist, d.hash, Some(t.bytes), level)?
                    } else {
                        w.append_tensor_encoded_with_histogram(meta, &d.stats, hist, d.hash, data.as_ref())?
                    };
                    count(p, r, &c.tensors);
                }
                Ok(Appended::Stopped)
            });
            scratch.buffers.extend(tensors.into_iter().filter_map(|t| t.2).map(EncodedData::into_buffer));
            written?;
        }
    }
    add(&c.files_recorded, 1);
    Ok(())
}

/// What a tensor record says of the values: statistics, histogram (when configured) and content hash.
struct Described {
    stats: TensorStats,
    histogram: Option<Histogram>,
    hash: u64,
}

/// A tensor's metadata, statistics, histogram and content hash: those `summary` holds (a streamed file's),
/// else those of one pass over its bytes.
fn describe(p: &Pipeline, t: &dump::DumpTensor<'_>, summary: Option<Summary>) -> (TensorMeta, Described) {
    let (values, hash) = if let Some(s) = summary {
        (s.stats, s.hash)
    } else if p.cfg.histogram {
        let (found, hash) = stats_hash_and_histogram(t.dtype, t.bytes);
        (found.map(|(s, h)| (s, Some(h))), hash)
    } else {
        let (found, hash) = stats_and_hash(t.dtype, t.bytes);
        (found.map(|s| (s, None)), hash)
    };
    let (stats, histogram) = values.unwrap_or_else(|_| {
        add(&p.counters.tensors_without_stats, 1);
        (TensorStats::default(), None)
    });
    let meta = TensorMeta {
        io: match t.io {
            dump::Io::Input => Io::Input,
            dump::Io::Output => Io::Output,
        },
        index: t.index as u32,
        dtype: t.dtype,
        format: t.format,
        sub_format: t.sub_format,
        device_shape: t.device_shape.clone(),
        original_shape: (!t.original_shape.is_empty()).then(|| t.original_shape.clone()),
        original_op: t
            .original_op
            .as_ref()
            .map(|o| OriginalOp { name: Arc::from(o.name.as_str()), output_index: o.output_index }),
    };
    (meta, Described { stats, histogram, hash })
}

/// Task id, stream id and timestamp from the file name, else from the header (timestamp only).
fn ids(name: Option<&dump::DumpFileName>, dump_time: u64) -> (u32, u32, u64) {
    match name {
        Some(n) => (n.task_id as u32, n.stream_id.unwrap_or(0) as u32, n.timestamp_us),
        None => (0, 0, dump_time),
    }
}

/// Counts an unparsed file; logs the first (the reason is formatted only then).
fn unparsed(p: &Pipeline, path: &str, why: &dyn std::fmt::Display) {
    if p.counters.files_unparsed.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
        crate::log(&format!("skipping dump file {path}: {why} (further ones are only counted)"));
    }
}

fn count(p: &Pipeline, r: Appended, counter: &std::sync::atomic::AtomicU64) {
    match r {
        Appended::Written { .. } => add(counter, 1),
        Appended::Stopped => add(&p.counters.refused_after_stop, 1),
    }
}

fn with_stream(
    p: &Pipeline,
    f: impl FnOnce(&mut accutrace_formats::capture::StreamWriter) -> accutrace_formats::Result<Appended>,
) -> accutrace_formats::Result<Appended> {
    let mut guard = p.stream();
    match guard.as_mut() {
        Some(w) => f(w),
        // Sealed already (a late file after finish): nothing to write to.
        None => Ok(Appended::Stopped),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_come_from_the_graph_layout_or_a_per_step_dump_path() {
        let model = |step| (step, StepSource::Model);
        assert_eq!(step_from_path("/runs/x/20240101000000/0/net/1/17/Add.add.3.2.100"), model(17));
        assert_eq!(step_from_path("20240101000000/3/net/12/0/Add.add.3.2.100"), model(0));
        let none = (0, StepSource::None);
        assert_eq!(step_from_path("/d/20240101000000/0/Add.add.3.2.100"), none, "single-op layout");
        assert_eq!(step_from_path("/d/2024/0/net/1/5/Add.add.3.2.100"), none, "not a dump time directory");
        assert_eq!(step_from_path("Add.add.3.2.100"), none);
        assert_eq!(step_from_path("/runs/x/20240101000000/0/net/one/5/Add.add.3.2.100"), none);
        let hook = |step| (step, StepSource::Hook);
        assert_eq!(step_from_path("/r/.dump/step12/20240101000000/0/Add.add.1.3.2.100"), hook(12));
        assert_eq!(step_from_path("/r/.dump/step12/20240101000000/0/net/1/4/Add.add.3.2.100"), model(4));
        assert_eq!(step_from_path("/r/.dump/stepx/20240101000000/0/Add.add.1.3.2.100"), none);
    }
}
