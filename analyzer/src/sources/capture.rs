//! accutrace captures: statistics and hashes come from the record heads, so building the index never
//! touches tensor bytes; values are decompressed on demand from the mapped segment.

use super::buffers::{give_buffer, take_buffer, with_values_scratch};
use super::device_stats;
use super::source::{HostBlocks, SliceBlocks, Source};
use crate::index::{Index, TensorId, TensorInfo};
use crate::overflow_records;
use crate::problems::InputProblem;
use crate::threads::tensor_bytes;
use accutrace_formats::capture::completeness::{self, RecordTally};
use accutrace_formats::capture::reader::{CaptureRun, Record, TensorBlocks};
use accutrace_formats::capture::record;
use accutrace_formats::dump;
use accutrace_formats::layout::{device_runs, Format};
use accutrace_formats::tensor::host::{host_shape, host_values, DeviceTensor};
use accutrace_formats::tensor::host_bytes::{self, HostBytes};
use accutrace_formats::tensor::{element_count, lanes_per_element};
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

    /// [`Source::read_values`] decoded block by block as the data is read
    /// ([`TensorBlocks::decode_f32_into`]): straight into `out` where the device order is the host's (nearly
    /// every tensor); in a device layout, each block put where it goes in `out` as it is read
    /// ([`TensorBlocks::decode_device_runs_into`]), or, for the layouts that do not split by device axis
    /// (grouped FRACTAL_Z, C1HWNCoC0), into this thread's values scratch and laid out from there into
    /// `out`, as [`host_values`] lays out the whole decode's values. The values are the whole decode's, without a
    /// buffer of its decoded bytes; the content hash is checked as the whole decode checks it, and every
    /// error is the whole decode's. `Ok(false)`, nothing read, for sub-byte and undecodable types and where
    /// the bytes are not the device shape's: the whole decode takes those, and reports what is wrong.
    fn read_values_in_blocks(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<bool> {
        let Some(meta) = self.metas[tensor].as_ref() else {
            return Ok(false);
        };
        let original = meta.original_shape.as_deref().unwrap_or_default();
        let width = match meta.dtype.bits() {
            Some(bits) if bits >= 8 && bits % 8 == 0 => u64::from(bits / 8),
            _ => return Ok(false),
        };
        if !meta.dtype.is_decodable() {
            return Ok(false);
        }
        let host_order = host_bytes::device_order_is_host_order(meta.format, original);
        let bytes = element_count(&meta.device_shape).and_then(|n| n.checked_mul(width));
        let (s, segment, offset) = unpack(self.index.tensors[tensor].locator);
        let mut scratch = take_buffer();
        let read = self.run.streams[s].with_tensor_blocks_at(segment, offset, &mut scratch, |blocks| {
            if bytes != Some(blocks.len() as u64) {
                return Ok(false);
            }
            if host_order {
                return blocks.decode_f32_into(meta.dtype, out);
            }
            let format = Format::from_code(meta.format);
            if let Some(runs) =
                device_runs(format, &meta.device_shape, original, meta.dtype, meta.sub_format)?
            {
                // Each block put where it goes as it is read: no device-order copy of the tensor.
                return blocks.decode_device_runs_into(meta.dtype, &runs, out);
            }
            with_values_scratch(|device| {
                if !blocks.decode_f32_into(meta.dtype, device)? {
                    return Ok(false);
                }
                accutrace_formats::layout::to_host_into(
                    Format::from_code(meta.format),
                    device,
                    lanes_per_element(meta.dtype),
                    &meta.device_shape,
                    original,
                    meta.dtype,
                    meta.sub_format,
                    out,
                )?;
                Ok(true)
            })
        });
        give_buffer(scratch);
        Ok(read??)
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
        if self.read_values_in_blocks(tensor, out)? {
            return Ok(());
        }
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

    fn decodes_on_read(&self) -> bool {
        true
    }

    /// A read holds the f32 values and zstd's scratch (the planes zstd decodes, at most the tensor's bytes,
    /// or a window's frames: [`decode_scratch_max`](Source::decode_scratch_max); the blocks are decoded from
    /// there straight into the values, or put from each block where it goes for a tensor in a device
    /// layout), and a tensor in a layout that does not split by device axis (grouped FRACTAL_Z, C1HWNCoC0)
    /// also its device-order values: 2, and 3 where such a tensor is at least half the largest (its extra
    /// buffer then matters). Measured with 1, 2 and 4
    /// threads (RAYON_NUM_THREADS, scripts/bench-memory, compare of two captures): each thread added
    /// 1.1-1.35x the largest tensor as f32 per side, beside the 2 MiB of the pool's footprint (medium:4,
    /// 2 MiB: 22, 30, 44 MiB; its outputs only: 14, 20, 33; seq 256, 8 MiB: 25, 47, 92), against
    /// 1.65-2.2x before the blocks were decoded straight into the values (94da7a1: 25, 29, 57; 13, 25, 40;
    /// 38, 75, 124).
    fn buffers_per_tensor(&self) -> u64 {
        let (mut largest, mut largest_in_layout) = (0u64, 0u64);
        for meta in self.metas.iter().flatten() {
            let width = meta.dtype.bits().map_or(4, |b| u64::from(b).div_ceil(8).max(4));
            let bytes = element_count(&meta.device_shape).unwrap_or(u64::MAX).saturating_mul(width);
            largest = largest.max(bytes);
            let original = meta.original_shape.as_deref().unwrap_or_default();
            let format = Format::from_code(meta.format);
            let by_runs = || device_runs(format, &meta.device_shape, original, meta.dtype, meta.sub_format);
            if !host_bytes::device_order_is_host_order(meta.format, original)
                && !matches!(by_runs(), Ok(Some(_)))
            {
                largest_in_layout = largest_in_layout.max(bytes);
            }
        }
        if largest_in_layout.saturating_mul(2) >= largest && largest_in_layout > 0 {
            3
        } else {
            2
        }
    }

    /// Captures whose writer cut the data into frames of at most ~1 MiB are read a window at a time where
    /// a tensor is longer than a window: the scratch then holds a window's frames, not the whole planes
    /// that compress ([`StreamReader::blocks_scratch_bytes`]). Where the largest tensor's read holds at
    /// most that bound (the widest element's), every read does; captures written before frames were cut
    /// hold their large tensors' planes whole, and so give `None`.
    ///
    /// [`StreamReader::blocks_scratch_bytes`]: accutrace_formats::capture::StreamReader::blocks_scratch_bytes
    fn decode_scratch_max(&self) -> Option<u64> {
        let tensors = &self.index.tensors;
        let with_data = |t: &usize| tensors[*t].has_data && self.metas[*t].is_some();
        let widest = (0..tensors.len()).filter(with_data).filter_map(|t| tensors[t].dtype.bits()).max()?;
        let bound = accutrace_formats::capture::blocks_scratch_max(widest.div_ceil(8) as usize);
        let largest = (0..tensors.len()).filter(with_data).max_by_key(|&t| tensor_bytes(&tensors[t]))?;
        let (s, segment, offset) = unpack(tensors[largest].locator);
        let bytes = self.run.streams[s].blocks_scratch_bytes(segment, offset).ok()?;
        (bytes <= bound).then_some(bound)
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

#[cfg(test)]
mod tests {
    use super::*;
    use accutrace_formats::capture::{Io, OpInfo, Policy, StepSource, StreamInfo, StreamWriter, TensorMeta};
    use accutrace_formats::layout::to_device;
    use accutrace_formats::stats::{content_hash, TensorStats};
    use accutrace_formats::DType;

    /// xorshift bytes: incompressible, so stored as they are (raw, or zstd's stored blocks of a plane).
    fn noise(n: usize, mut s: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect()
    }

    /// A tensor to write: dtype, format, device shape, host shape, bytes.
    type Written = (DType, Format, Vec<u64>, Option<Vec<u64>>, Vec<u8>);

    /// Writes one stream of `tensors` under one op.
    fn write(dir: &Path, tensors: &[Written]) {
        let info = StreamInfo { stream_id: 0, rank: Some(0), device: 0, pid: 1000, host: "test".into() };
        let mut w = StreamWriter::create(dir, info, 1 << 20, Policy::KeepAll).unwrap();
        let op = OpInfo {
            name: "layer/matmul".into(),
            op_type: "MatMulV2".into(),
            step: 0,
            task_id: 7,
            stream_id: 2,
            timestamp_us: 1_700_000_000_000_000,
            dump_file: "MatMulV2.layer_matmul.7.2.1700000000000000".into(),
            original_names: vec![],
            dump_number: None,
            step_source: StepSource::Model,
        };
        w.append_op(&op).unwrap();
        for (i, (dtype, format, device_shape, original_shape, bytes)) in tensors.iter().enumerate() {
            let meta = TensorMeta {
                io: Io::Output,
                index: i as u32,
                dtype: *dtype,
                format: format.code(),
                sub_format: 0,
                device_shape: device_shape.clone(),
                original_shape: original_shape.clone(),
                original_op: None,
            };
            let stats = TensorStats::of_bytes(*dtype, bytes).unwrap();
            w.append_tensor(&meta, &stats, content_hash(bytes), Some(bytes), 1).unwrap();
        }
        w.seal().unwrap();
    }

    /// The values and error of the whole decode, [`CaptureSource::read_values`]' path before blocks.
    fn read_whole(source: &CaptureSource, t: TensorId) -> std::result::Result<Vec<u32>, String> {
        let mut out = Vec::new();
        source
            .with_device_tensor(t, |device| Ok(host_values(device, &mut Vec::new(), &mut out)?))
            .map(|_| out.iter().map(|v| v.to_bits()).collect())
            .map_err(|e| format!("{e:#}"))
    }

    /// `read_values` of `t` into `out`, asserted to give [`read_whole`]'s values bit for bit or its error;
    /// that result.
    fn read_as_whole(
        source: &CaptureSource,
        t: TensorId,
        out: &mut Vec<f32>,
    ) -> std::result::Result<Vec<u32>, String> {
        let whole = read_whole(source, t);
        let read = source.read_values(t, out).map_err(|e| format!("{e:#}"));
        let read = read.map(|()| out.iter().map(|v| v.to_bits()).collect::<Vec<u32>>());
        assert!(
            read == whole,
            "tensor {t}: {:?} against {:?}",
            read.map(|v| v.len()),
            whole.map(|v| v.len())
        );
        whole
    }

    /// ND tensors of several widths (stored raw, or zstd with stored and compressed planes), device
    /// layouts (fp16 and complex NC1HWC0, an NZ tensor whose shapes do not fit) and bytes that are not
    /// the shape's: `read_values` takes the blocks wherever the bytes are the shape's and gives the whole
    /// decode's values bit for bit, or its error, reusing one buffer; once bytes of the stored data are
    /// flipped, it fails with the whole decode's error, never with values.
    #[test]
    fn values_read_in_blocks_are_the_whole_decodes_and_damage_is_the_same_error() {
        let host_shape = [2u64, 20, 3, 5];
        let nc1hwc0: Vec<u16> = (0..600).map(|i| 0x3C00 + i).collect();
        let (device, device_shape) =
            to_device(Format::NC1HWC0, &nc1hwc0, &host_shape, DType::FLOAT16, 0, 0x7E00).unwrap();
        let activations: Vec<u8> =
            (0..90_000u32).flat_map(|i| (0x3800 + (i % 1500) as u16).to_le_bytes()).collect();
        let mut fp16 = noise(160_000, 1);
        fp16.iter_mut().skip(1).step_by(2).for_each(|b| *b = 0x3C | (*b & 1));
        let tensors = vec![
            (DType::FLOAT16, Format::ND, vec![80_000], None, fp16),
            (DType::FLOAT, Format::ND, vec![100, 100], Some(vec![10_000]), noise(40_000, 2)),
            (
                DType::FLOAT16,
                Format::NC1HWC0,
                device_shape,
                Some(host_shape.to_vec()),
                device.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
            (DType::FLOAT16, Format::ND, vec![90_000], None, activations),
            (DType::INT8, Format::ND, vec![5_000], None, noise(5_000, 3)),
            (DType::DOUBLE, Format::ND, vec![4, 3], None, noise(96, 4)),
            (DType::FLOAT, Format::ND, vec![7], None, noise(32, 5)),
            // A device shape that does not fit the host shape: the layout's error.
            (DType::FLOAT16, Format::FRACTAL_NZ, vec![1, 1, 16, 16], Some(vec![40, 3]), noise(512, 6)),
            (DType::COMPLEX64, Format::NC1HWC0, vec![1, 1, 1, 1, 16], Some(vec![1, 3, 1, 1]), noise(128, 7)),
        ];
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &tensors);
        let source = CaptureSource::open(dir.path()).unwrap();
        assert_eq!(source.index.tensors.len(), tensors.len());
        let mut out = Vec::new();
        let mut in_blocks = 0;
        for t in 0..tensors.len() {
            in_blocks += usize::from(matches!(source.read_values_in_blocks(t, &mut out), Ok(true)));
            let _ = read_as_whole(&source, t, &mut out);
        }
        // Every ND tensor whose bytes are its shape's; the NC1HWC0 one and the short one are not.
        assert_eq!(in_blocks, 7);
        // The largest tensors are in host order; the NC1HWC0 one is small.
        assert_eq!(source.buffers_per_tensor(), 2);
        assert!(read_whole(&source, 6).is_err_and(|e| e.contains("need")));
        assert!(read_whole(&source, 7).is_err_and(|e| e.contains("does not fit")));
        drop(source);

        // Flip bytes where the payloads' stored bytes lie (found by their contents): each damaged tensor
        // reads as the whole decode reads it, an error.
        let segment = std::fs::read_dir(
            dir.path().join(std::fs::read_dir(dir.path()).unwrap().next().unwrap().unwrap().file_name()),
        )
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "acc"))
        .unwrap();
        let mut bytes = std::fs::read(&segment).unwrap();
        let low_plane: Vec<u8> = tensors[0].4.iter().step_by(2).copied().collect();
        // The f32 noise may be stored raw or as planes (its third here).
        let f32_plane: Vec<u8> = tensors[1].4.iter().skip(2).step_by(4).copied().collect();
        let find = |needle: &[u8]| bytes.windows(needle.len()).position(|w| w == needle);
        let places = [
            find(&low_plane[40_000..40_032]),
            find(&tensors[1].4[30_000..30_032]).or_else(|| find(&f32_plane[5_000..5_032])),
            find(&tensors[4].4[1_000..1_032]),
        ];
        for at in places {
            bytes[at.expect("stored bytes found") + 7] ^= 0x5A;
        }
        std::fs::write(&segment, &bytes).unwrap();
        let source = CaptureSource::open(dir.path()).unwrap();
        let mut failed = 0;
        for t in 0..tensors.len() {
            let whole = read_as_whole(&source, t, &mut out);
            failed += usize::from(whole.is_err_and(|e| e.contains("content hash")));
        }
        assert_eq!(failed, 3);
    }

    /// A capture whose largest tensor (or one at least half its size) is in a layout that does not split
    /// by device axis (C1HWNCoC0's diagonal) holds one more buffer per read: its device-order values. One in
    /// FRACTAL_NZ does not: its blocks go where they belong as they are read.
    #[test]
    fn a_large_tensor_in_a_layout_read_whole_counts_one_buffer_more() {
        let in_layout = |format: Format, host: Vec<u64>| {
            let device_shape =
                accutrace_formats::layout::device_shape(format, &host, DType::FLOAT16, 0).unwrap();
            let n = device_shape.iter().product::<u64>() as usize;
            (DType::FLOAT16, format, device_shape, Some(host), noise(2 * n, n as u64))
        };
        let nz = |rows: u64| in_layout(Format::FRACTAL_NZ, vec![rows, 32]);
        let diagonal = |n: u64| in_layout(Format::C1HWNCOC0, vec![1, 1, 16, n]);
        let nd = |n: u64| (DType::FLOAT, Format::ND, vec![n], None, noise(4 * n as usize, n));
        for (tensors, buffers) in [
            (vec![nd(4096), nd(100)], 2),
            (vec![nd(4096), nz(64)], 2),
            (vec![nz(256), nd(100)], 2),
            (vec![nd(4096), diagonal(1)], 2),
            (vec![nd(4096), diagonal(8)], 3),
            (vec![diagonal(32), nd(100)], 3),
        ] {
            let dir = tempfile::tempdir().unwrap();
            write(dir.path(), &tensors);
            assert_eq!(CaptureSource::open(dir.path()).unwrap().buffers_per_tensor(), buffers);
        }
    }

    /// A tensor longer than a window (17 MiB of fp16 data, in the writer's frames of at most 1 MiB): its
    /// values, read a window at a time, are the whole decode's, and the capture counts its scratch as a
    /// window's frames at most.
    #[test]
    fn a_tensor_longer_than_a_window_is_read_whole_through_a_bounded_scratch() {
        let n = (17 << 20) / 2 + 3;
        let bytes: Vec<u8> = noise(2 * n, 5).chunks(2).flat_map(|e| [e[0], 0x3C | (e[1] & 1)]).collect();
        let big = (DType::FLOAT16, Format::ND, vec![n as u64], None, bytes);
        let small = (DType::FLOAT, Format::ND, vec![100], None, noise(400, 3));
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &[big, small]);
        let source = CaptureSource::open(dir.path()).unwrap();
        let bound = accutrace_formats::capture::blocks_scratch_max(4);
        assert_eq!(source.decode_scratch_max(), Some(bound));
        let (s, segment, offset) = unpack(source.index.tensors[0].locator);
        let scratch = source.run.streams[s].blocks_scratch_bytes(segment, offset).unwrap();
        // Its compressed plane (the high bytes; the noisy low ones are stored), within the fp16 bound.
        assert_eq!(scratch, n as u64);
        assert!(scratch <= accutrace_formats::capture::blocks_scratch_max(2));
        let mut out = Vec::new();
        for t in 0..2 {
            read_as_whole(&source, t, &mut out).unwrap();
        }
    }
}
