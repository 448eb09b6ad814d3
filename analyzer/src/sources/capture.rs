//! accutrace captures: statistics and hashes come from the record heads, so building the index never
//! touches tensor bytes; values are decompressed on demand from the mapped segment.

use super::device_stats;
use super::source::{HostBlocks, SliceBlocks, Source};
use crate::index::{Index, TensorId, TensorInfo};
use crate::overflow_records;
use crate::problems::InputProblem;
use accutrace_formats::capture::completeness::{self, RecordTally};
use accutrace_formats::capture::reader::{CaptureRun, Record, TensorBlocks};
use accutrace_formats::capture::record;
use accutrace_formats::dump;
use accutrace_formats::layout::Format;
use accutrace_formats::tensor::element_count;
use accutrace_formats::tensor::host::{host_shape, host_values, DeviceTensor};
use accutrace_formats::tensor::host_bytes::{self, HostBytes};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

pub struct CaptureSource {
    root: PathBuf,
    run: CaptureRun,
    index: Index,
    /// Device layout of each tensor (by tensor id), to undo it when values are read.
    metas: Vec<Option<record::TensorMeta>>,
}

/// A tensor's place in the run: stream, segment, frame offset (packed into the index's locator).
fn pack(stream: usize, segment: u64, offset: u64) -> u64 {
    ((stream as u64) << 56) | ((segment & 0xFF_FFFF) << 32) | (offset & 0xFFFF_FFFF)
}

fn unpack(locator: u64) -> (usize, u64, u64) {
    ((locator >> 56) as usize, (locator >> 32) & 0xFF_FFFF, locator & 0xFFFF_FFFF)
}

impl CaptureSource {
    pub fn open(root: &Path) -> Result<Self> {
        let run =
            CaptureRun::open(root).with_context(|| format!("cannot open capture {}", root.display()))?;
        let mut index = Index::default();
        let mut metas = Vec::new();
        // Records found per stream, held against the manifest's counts at the end.
        let mut tallies = vec![RecordTally::default(); run.streams.len()];
        for (s, stream) in run.streams.iter().enumerate() {
            let rank = stream.info().rank.unwrap_or(0);
            let mut current: Option<(usize, std::sync::Arc<record::OpInfo>)> = None;
            // (task id, stream id, timestamp) -> op id, to tie overflow records to the op they name.
            let mut op_keys: Vec<(u32, u32, u64, usize)> = Vec::new();
            // Overflow records arrive before the dump of the op they blame: resolved once the stream is read.
            let mut pending: Vec<(crate::index::OverflowRecord, u64)> = Vec::new();
            // Every op of the stream with its record, and the step marks: the steps are resolved at the end.
            let mut stream_ops: Vec<(usize, std::sync::Arc<record::OpInfo>)> = Vec::new();
            let mut marks = Vec::new();
            for item in stream.records() {
                let item = item?;
                tallies[s].count(&item.record);
                if item.segment_index > 0xFF_FFFF || item.offset > 0xFFFF_FFFF || s > 0xFF {
                    anyhow::bail!(
                        "{}: capture too large to index (segment {} offset {})",
                        root.display(),
                        item.segment_index,
                        item.offset
                    );
                }
                match item.record {
                    Record::Op(op) => {
                        let id = push_op(&mut index, &op, rank);
                        op_keys.push((op.task_id, op.stream_id, op.timestamp_us, id));
                        stream_ops.push((id, op.clone()));
                        current = Some((id, op));
                    }
                    Record::Tensor(t) => {
                        let op_id = match &current {
                            Some((id, op)) if std::sync::Arc::ptr_eq(op, &t.op) => *id,
                            _ => {
                                let id = push_op(&mut index, &t.op, rank);
                                stream_ops.push((id, t.op.clone()));
                                current = Some((id, t.op.clone()));
                                id
                            }
                        };
                        let m = &t.meta;
                        let original = m.original_shape.clone().unwrap_or_default();
                        if element_count(&m.device_shape).is_none() || element_count(&original).is_none() {
                            index.problems.push(InputProblem::incomplete(format!(
                                "{}: at byte {}: tensor shape {:?} (original {:?}) has more elements than 64 \
                                 bits count; the tensor is left out",
                                item.segment.display(),
                                item.offset,
                                m.device_shape,
                                original
                            )));
                            continue;
                        }
                        let format = Format::from_code(m.format);
                        index.push_tensor(TensorInfo {
                            op: op_id,
                            io: m.io,
                            index: m.index,
                            dtype: m.dtype,
                            shape: host_shape(m.format, &m.device_shape, &original),
                            device_format: (!format.is_identity()).then(|| format.name().into_owned()),
                            device_shape: Some(m.device_shape.clone()),
                            original_op: m.original_op.as_ref().map(|o| (o.name.to_string(), o.output_index)),
                            stats: Some(t.stats),
                            histogram: t.histogram.clone(),
                            hash: Some(t.content_hash),
                            label: None,
                            requires_grad: None,
                            has_data: t.has_data(),
                            locator: pack(s, item.segment_index, item.offset),
                        });
                        metas.push(Some(t.meta.clone()));
                    }
                    Record::Overflow(info) => {
                        let file = format!("{} ({})", item.segment.display(), info.dump_file);
                        // The payload is the op-debug record itself (the dump file's output[0] bytes).
                        match dump::decode_opdebug(&info.payload) {
                            Ok(record) => {
                                for engine in &record.engines {
                                    if let Some(found) =
                                        overflow_records::from_engine(engine, info.step, rank, file.clone())
                                    {
                                        pending.push((found, info.timestamp_us));
                                    }
                                }
                            }
                            Err(e) => index.problems.push(InputProblem::incomplete(format!(
                                "{file}: overflow record unreadable: {e}"
                            ))),
                        }
                    }
                    Record::StatsCsv(csv) => {
                        if let Err(e) =
                            device_stats::add_stats_csv(&mut index, &csv.dump_file, &csv.csv, csv.step, rank)
                        {
                            index.problems.push(InputProblem::incomplete(format!(
                                "{} ({}): statistics CSV unreadable: {e}",
                                item.segment.display(),
                                csv.dump_file
                            )));
                        }
                        // Stats ops have no tensor records: keep the positional maps aligned.
                        metas.resize(index.tensors.len(), None);
                    }
                    Record::Collective(info) => {
                        index.collectives.push(crate::index::CollectiveCall { rank, info });
                    }
                    Record::StepMark(mark) => marks.push(mark),
                    Record::Unknown { .. } => {}
                }
            }
            let starts_at_first_segment = stream
                .segment_paths()
                .next()
                .and_then(|p| {
                    p.file_name()?.to_str().and_then(accutrace_formats::capture::parse_segment_file_name)
                })
                .is_none_or(|first| first == 0);
            let label = stream.dir().display().to_string();
            crate::steps::resolve_capture_steps(
                &mut index,
                &stream_ops,
                &marks,
                starts_at_first_segment,
                &label,
            );
            // What the ring deleted, as the manifest counts it (a first segment lost otherwise is an input
            // problem of the completeness check, not a choice of the user's).
            let deleted = run.manifest.as_ref().and_then(|m| {
                let dir = stream.dir().file_name()?.to_str()?;
                m.streams.iter().find(|e| e.dir == dir).map(|e| e.counts.segments_deleted)
            });
            if let Some(segments_deleted) = deleted.filter(|&n| n > 0) {
                let steps = stream_ops.iter().map(|(id, _)| index.ops[*id].step);
                index.ring_deleted.push(crate::index::RingDeleted {
                    rank,
                    first_step: steps.clone().min(),
                    last_step: steps.max(),
                    segments_deleted,
                });
            }
            for (mut found, timestamp) in pending {
                // The blamed op: same task and stream id, the first dump at or after the record.
                found.op = op_keys
                    .iter()
                    .filter(|(task, strm, ts, _)| {
                        u64::from(*task) == found.task_id
                            && u64::from(*strm) == found.stream_id
                            && *ts >= timestamp
                    })
                    .min_by_key(|(_, _, ts, _)| *ts)
                    .map(|(_, _, _, id)| *id);
                index.overflow_records.push(found);
            }
        }
        if let Some(manifest) = &run.manifest {
            index.only_overflowing_ops |= captured_overflow_records_only(&manifest.config);
            index.settings = Some(settings(manifest));
            index.job_ranks = ["RANK_SIZE", "WORLD_SIZE"]
                .iter()
                .find_map(|key| manifest.env.get(*key).and_then(|v| v.trim().parse().ok()));
        }
        index.only_overflowing_ops |= !index.overflow_records.is_empty();
        // Records are in the order files completed (a big file after a small one that started later, and
        // several writer threads append in turn): execution order comes from the ops' own launch fields.
        let reorder = index.order_by_execution();
        let metas = crate::index::Reorder::apply(&reorder.tensors, metas);
        index.problems.extend(
            completeness::check(&run, &tallies)
                .iter()
                .map(|short| InputProblem::incomplete(short.to_string())),
        );
        Ok(CaptureSource { root: root.to_path_buf(), run, index, metas })
    }

    fn with_data<R>(
        &self,
        tensor: TensorId,
        f: impl FnOnce(&record::TensorMeta, &[u8]) -> Result<R>,
    ) -> Result<R> {
        let meta = self.metas[tensor].as_ref().context("device statistics carry no tensor data")?;
        let (s, segment, offset) = unpack(self.index.tensors[tensor].locator);
        let (mut bytes, mut scratch) = (take_buffer(), take_buffer());
        let read = self.run.streams[s].read_tensor_data_at_with(segment, offset, &mut bytes, &mut scratch);
        let result = match read {
            Ok(()) => f(meta, &bytes),
            Err(e) => Err(e.into()),
        };
        give_buffer(scratch);
        give_buffer(bytes);
        result
    }

    /// [`Self::with_data`], as the device tensor the host conversions take.
    fn with_device_tensor<R>(
        &self,
        tensor: TensorId,
        f: impl FnOnce(&DeviceTensor<'_>) -> Result<R>,
    ) -> Result<R> {
        self.with_data(tensor, |m, bytes| {
            let original = m.original_shape.clone().unwrap_or_default();
            f(&DeviceTensor {
                dtype: m.dtype,
                format: m.format,
                device_shape: &m.device_shape,
                original_shape: &original,
                sub_format: m.sub_format,
                bytes,
            })
        })
    }
}

/// A capture's [`TensorBlocks`] as the [`HostBlocks`] a [`Source`] hands out.
struct CaptureBlocks<'r, 'a>(&'r mut TensorBlocks<'a>);

impl HostBlocks for CaptureBlocks<'_, '_> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn next_block<'s>(&'s mut self, buf: &'s mut [u8]) -> &'s [u8] {
        self.0.next_block(buf)
    }
}

/// Decode buffers kept per thread between tensors, at most this many ([`CaptureSource::with_data`] takes
/// two, and diff holds one tensor of each run at once)...
const POOLED_BUFFERS: usize = 4;
/// ...and none larger than this: what a thread keeps idle stays a small constant, while tensors up to
/// this size (nearly all of a model's) cost no allocation, page faults or zeroing per read.
const POOLED_BUFFER_BYTES: usize = 8 << 20;

thread_local! {
    static BUFFERS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A decode buffer from this thread's pool (empty when the pool is).
fn take_buffer() -> Vec<u8> {
    BUFFERS.with(|b| b.borrow_mut().pop()).unwrap_or_default()
}

/// Returns a buffer to this thread's pool, or frees it (pool full, or the buffer too large to keep).
fn give_buffer(buffer: Vec<u8>) {
    if buffer.capacity() == 0 || buffer.capacity() > POOLED_BUFFER_BYTES {
        return;
    }
    BUFFERS.with(|b| {
        let mut pool = b.borrow_mut();
        if pool.len() < POOLED_BUFFERS {
            pool.push(buffer);
        }
    });
}

thread_local! {
    /// The device-order values of a tensor in a device format, laid out from there into the caller's
    /// buffer ([`host_values`]): kept per thread on the terms of [`BUFFERS`].
    static VALUES_SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `f` with this thread's values scratch, kept for the next call unless larger than
/// [`POOLED_BUFFER_BYTES`].
fn with_values_scratch<R>(f: impl FnOnce(&mut Vec<f32>) -> R) -> R {
    let mut scratch = VALUES_SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
    let result = f(&mut scratch);
    if scratch.capacity() * std::mem::size_of::<f32>() <= POOLED_BUFFER_BYTES {
        VALUES_SCRATCH.with(|s| *s.borrow_mut() = scratch);
    }
    result
}

/// Adds a captured op with what the runtime said about its launch.
fn push_op(index: &mut Index, op: &record::OpInfo, rank: u32) -> usize {
    index.push_op_at(op.name.clone(), op.op_type.clone(), op.step, rank, Some(op.launch()))
}

/// The environment variables of the real stack that change results or their reproducibility
/// (cann-facts §3): the toolkit (a CANN version has its own kernels), the device's inf/NaN mode, HCCL's
/// deterministic reductions, synchronous launches, the number of ranks.
const SETTINGS_ENV: [&str; 5] = [
    "ASCEND_TOOLKIT_HOME",
    "INF_NAN_MODE_ENABLE",
    "HCCL_DETERMINISTIC",
    "ASCEND_LAUNCH_BLOCKING",
    "RANK_SIZE",
];

/// What the manifest says about the settings that change results: the device overflow mode the collector
/// read, and [`SETTINGS_ENV`] where set.
fn settings(manifest: &accutrace_formats::capture::Manifest) -> std::collections::BTreeMap<String, String> {
    let mut settings: std::collections::BTreeMap<String, String> = SETTINGS_ENV
        .iter()
        .filter_map(|&key| manifest.env.get(key).map(|v| (key.to_string(), v.clone())))
        .collect();
    if let Some(mode) = &manifest.overflow_mode {
        settings.insert("the device overflow mode".into(), mode.clone());
    }
    settings
}

/// Whether the collector ran with the runtime's overflow detection (`ACCUTRACE_OVERFLOW=1`, the dump JSON's
/// `dump_debug: on`): then only overflowing ops were dumped.
fn captured_overflow_records_only(config: &serde_json::Value) -> bool {
    config.pointer("/dump_json/dump/dump_debug").and_then(|v| v.as_str()) == Some("on")
        || config.pointer("/collector/overflow").and_then(|v| v.as_bool()) == Some(true)
}

impl Source for CaptureSource {
    fn kind(&self) -> &'static str {
        "capture"
    }

    fn root(&self) -> &Path {
        &self.root
    }

    fn index(&self) -> &Index {
        &self.index
    }

    fn read_values(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<()> {
        self.with_device_tensor(tensor, |device| {
            with_values_scratch(|scratch| host_values(device, scratch, out))?;
            Ok(())
        })
    }

    fn content_hash(&self, tensor: TensorId) -> Result<u64> {
        self.index.tensors[tensor].hash.context("device statistics carry no content hash")
    }

    fn read_values_and_hash(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<u64> {
        // The hash is stored in the record head: nothing to compute.
        let hash = self.content_hash(tensor)?;
        self.read_values(tensor, out)?;
        Ok(hash)
    }

    fn about(&self) -> Vec<String> {
        let Some(m) = &self.run.manifest else {
            return vec!["no manifest.json: stream and collector counters unknown".into()];
        };
        let mut lines = vec![format!(
            "collector: {} chunks, {} files, {} tensors; {} chunks or files dropped or lost",
            m.counts.chunks, m.counts.files, m.counts.tensors, m.counts.drops
        )];
        let pipelines = m.pipeline_counters();
        for s in &m.streams {
            let rank = s.info.rank.map_or_else(|| "x".into(), |r| r.to_string());
            let mut line = format!(
                "stream {} (rank {rank}, pid {}): {}, {} tensors in {} segments ({} deleted by the ring)",
                s.dir,
                s.info.pid,
                if s.sealed { "sealed" } else { "NOT SEALED" },
                s.counts.tensors,
                s.counts.segments_created,
                s.counts.segments_deleted
            );
            if let Some((_, p)) = pipelines.iter().find(|(dir, _)| *dir == s.dir) {
                let losses: Vec<String> =
                    p.nonzero_losses().iter().map(|(n, v)| format!("{n} {v}")).collect();
                line.push_str(&format!(
                    "; drops: {}",
                    if losses.is_empty() { "none".to_string() } else { losses.join(", ") }
                ));
            }
            lines.push(line);
        }
        lines
    }

    fn read_host_bytes(&self, tensor: TensorId) -> Result<Option<HostBytes>> {
        self.with_device_tensor(tensor, |device| Ok(host_bytes::host_bytes(device)?))
    }

    fn with_host_blocks(&self, tensor: TensorId, f: &mut dyn FnMut(&mut dyn HostBlocks)) -> Result<bool> {
        let meta = self.metas[tensor].as_ref().context("device statistics carry no tensor data")?;
        let original = meta.original_shape.as_deref().unwrap_or_default();
        let width = match meta.dtype.bits() {
            Some(bits) if bits >= 8 && bits % 8 == 0 => u64::from(bits / 8),
            _ => 0,
        };
        // Host order is the device's (nearly every tensor): the planes are read block by block, each
        // unshuffled into `f`'s buffer. Else (a layout to undo, a sub-byte dtype) the whole bytes.
        if width == 0 || !host_bytes::device_order_is_host_order(meta.format, original) {
            return self.with_host_bytes(tensor, &mut |bytes| f(&mut SliceBlocks::new(bytes)));
        }
        let bytes = element_count(&meta.device_shape).and_then(|n| n.checked_mul(width));
        let (s, segment, offset) = unpack(self.index.tensors[tensor].locator);
        let mut scratch = take_buffer();
        let read = self.run.streams[s].with_tensor_blocks_at(segment, offset, &mut scratch, |blocks| {
            // A byte count that is not the device shape's: the whole-bytes path reports it as an error.
            let whole_elements = bytes == Some(blocks.len() as u64);
            if whole_elements {
                f(&mut CaptureBlocks(blocks));
            }
            whole_elements
        });
        give_buffer(scratch);
        match read? {
            true => Ok(true),
            false => self.with_host_bytes(tensor, &mut |bytes| f(&mut SliceBlocks::new(bytes))),
        }
    }

    fn same_stored_data(&self, a: TensorId, b: TensorId) -> Result<bool> {
        let (Some(ma), Some(mb)) = (&self.metas[a], &self.metas[b]) else {
            return Ok(false);
        };
        // What the host conversions read besides the bytes (io, index and provenance do not change them).
        fn layout(m: &record::TensorMeta) -> (accutrace_formats::DType, i32, i32, &[u64], Option<&[u64]>) {
            (m.dtype, m.format, m.sub_format, &m.device_shape, m.original_shape.as_deref())
        }
        if layout(ma) != layout(mb) {
            return Ok(false);
        }
        let ((sa, segment_a, offset_a), (sb, segment_b, offset_b)) =
            (unpack(self.index.tensors[a].locator), unpack(self.index.tensors[b].locator));
        Ok(self.run.streams[sa].same_stored_data(
            segment_a,
            offset_a,
            &self.run.streams[sb],
            segment_b,
            offset_b,
        )?)
    }

    fn release_stored_data(&self, a: TensorId) -> Result<()> {
        let (s, segment, offset) = unpack(self.index.tensors[a].locator);
        Ok(self.run.streams[s].release_tensor_data_at(segment, offset)?)
    }

    /// The zstd scratch, the decoded bytes and the f32 values, with the allocator's slack (compare of medium:4
    /// held 5x the largest tensor per thread for both sides).
    fn buffers_per_tensor(&self) -> u64 {
        3
    }

    fn release_all(&self) {
        for stream in &self.run.streams {
            stream.release_all();
        }
    }

    fn with_host_bytes(&self, tensor: TensorId, f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        // The decoded bytes themselves where the device layout is the host's: no copy.
        self.with_device_tensor(tensor, |device| match host_bytes::host_bytes_borrowed(device)? {
            Some((bytes, _)) => {
                f(&bytes);
                Ok(true)
            }
            None => Ok(false),
        })
    }
}
