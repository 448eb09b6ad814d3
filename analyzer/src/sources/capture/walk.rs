//! One stream's records added to an index as they are walked: ops, tensors, overflow records, device
//! statistics, collectives and step marks; at the stream's end its steps resolved and its overflow records
//! tied to the ops they blame. The whole capture's index ([`CaptureSource::open`](super::CaptureSource::open))
//! and a step window's ([`windows`](super::windows)) walk records the same way.

use super::{pack, Layouts, StoredLayout};
use crate::index::{Index, OpId, OverflowRecord, TensorExtras, TensorInfo};
use crate::overflow_records;
use crate::problems::InputProblem;
use crate::sources::device_stats;
use accutrace_formats::capture::reader::{Record, RecordRef, StreamReader};
use accutrace_formats::capture::record;
use accutrace_formats::dump;
use accutrace_formats::layout::Format;
use accutrace_formats::tensor::element_count;
use accutrace_formats::tensor::host::host_shape;
use anyhow::Result;
use std::path::Path;
use std::sync::Arc;

/// What an index is made of while records are added: the index, and the layouts of tensors whose data the
/// capture holds.
#[derive(Default)]
pub(super) struct Building {
    pub index: Index,
    pub layouts: Layouts,
}

/// The state of one stream's walk.
pub(super) struct StreamWalk {
    stream: usize,
    rank: u32,
    current: Option<(OpId, Arc<record::OpInfo>)>,
    /// (task id, stream id, timestamp) -> op id, to tie overflow records to the op they name.
    op_keys: Vec<(u32, u32, u64, OpId)>,
    /// Overflow records arrive before the dump of the op they blame: resolved once the stream is read.
    pending: Vec<(OverflowRecord, u64)>,
    /// Every op of the stream with where its step came from, and the step marks: the steps are resolved at
    /// the end. Not the ops' records (#18: their texts, held to the end of each stream, were 7 of overflow's
    /// 61 MB heap at 198,840 tensors): the index keeps each op's launch.
    stream_ops: Vec<(OpId, record::StepSource)>,
    marks: Vec<record::StepMark>,
    stats_parts: device_stats::StatsCsvParts,
}

impl StreamWalk {
    /// The walk of `reader`, the run's `stream`-th stream.
    pub fn new(stream: usize, reader: &StreamReader) -> StreamWalk {
        StreamWalk {
            stream,
            rank: reader.info().rank.unwrap_or(0),
            current: None,
            op_keys: Vec::new(),
            pending: Vec::new(),
            stream_ops: Vec::new(),
            marks: Vec::new(),
            stats_parts: device_stats::StatsCsvParts::default(),
        }
    }

    /// Adds one record of the stream. `root`: the capture, for errors.
    pub fn add(&mut self, into: &mut Building, item: RecordRef<'_>, root: &Path) -> Result<()> {
        let (index, rank, s) = (&mut into.index, self.rank, self.stream);
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
                let id = push_op(index, &op, rank);
                self.op_keys.push((op.task_id, op.stream_id, op.timestamp_us, id));
                self.stream_ops.push((id, op.step_source));
                self.current = Some((id, op));
            }
            Record::Tensor(t) => {
                let op_id = match &self.current {
                    Some((id, op)) if Arc::ptr_eq(op, &t.op) => *id,
                    _ => {
                        let id = push_op(index, &t.op, rank);
                        self.stream_ops.push((id, t.op.step_source));
                        self.current = Some((id, t.op.clone()));
                        id
                    }
                };
                let m = &t.meta;
                let original = m.original_shape.clone().unwrap_or_default();
                if element_count(&m.device_shape).is_none() || element_count(&original).is_none() {
                    index.problems.push(InputProblem::incomplete(format!(
                        "{}: at byte {}: tensor shape {:?} (original {:?}) has more elements than 64 bits \
                         count; the tensor is left out",
                        item.segment.display(),
                        item.offset,
                        m.device_shape,
                        original
                    )));
                    return Ok(());
                }
                let format = Format::from_code(m.format);
                let shape = host_shape(m.format, &m.device_shape, &original);
                let layout = t.has_data().then(|| StoredLayout::of(m, &shape));
                let original_op = m.original_op.as_ref().map(|o| (index.share_name(&o.name), o.output_index));
                let tensor = TensorInfo {
                    has_data: t.has_data(),
                    locator: pack(s, item.segment_index, item.offset),
                    ..TensorInfo::new(op_id, m.io, m.index, m.dtype, shape)
                }
                .with_original_op(original_op)
                .with_hash(Some(t.content_hash));
                let id = index.push_tensor(tensor.with_extras(TensorExtras {
                    device_format: (!format.is_identity()).then(|| format.name().into_owned()),
                    device_shape: Some(m.device_shape.clone()),
                    histogram: t.histogram.clone(),
                    ..TensorExtras::default()
                }));
                // The record keeps the statistics where the locator points: read again on request.
                index.set_stats_in_record(id);
                if let Some(layout) = layout {
                    into.layouts.set(id, layout);
                }
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
                                self.pending.push((found, info.timestamp_us));
                            }
                        }
                    }
                    Err(e) => index
                        .problems
                        .push(InputProblem::incomplete(format!("{file}: overflow record unreadable: {e}"))),
                }
            }
            Record::StatsCsv(csv) => {
                if let Err(e) = device_stats::add_stats_csv(
                    index,
                    &mut self.stats_parts,
                    &csv.dump_file,
                    &csv.csv,
                    csv.step,
                    rank,
                ) {
                    index.problems.push(InputProblem::incomplete(format!(
                        "{} ({}): statistics CSV unreadable: {e}",
                        item.segment.display(),
                        csv.dump_file
                    )));
                }
            }
            Record::Collective(info) => {
                index.collectives.push(crate::index::CollectiveCall { rank, info });
            }
            Record::StepMark(mark) => self.marks.push(mark),
            Record::Unknown { .. } => {}
        }
        Ok(())
    }

    /// Notes a step mark the walk did not read itself (a window's walk reads none; the census found it).
    pub fn note_mark(&mut self, mark: record::StepMark) {
        self.marks.push(mark);
    }

    /// Ends the walk of `reader`: its ops' steps resolved, what its ring deleted (`segments_deleted`, as the
    /// manifest counts it; `None` where the caller says it), its overflow records tied to the ops they blame.
    pub fn finish(self, into: &mut Building, reader: &StreamReader, segments_deleted: Option<u64>) {
        let index = &mut into.index;
        let starts_at_first_segment = reader
            .segment_paths()
            .next()
            .and_then(|p| {
                p.file_name()?.to_str().and_then(accutrace_formats::capture::parse_segment_file_name)
            })
            .is_none_or(|first| first == 0);
        let label = reader.dir().display().to_string();
        crate::steps::resolve_capture_steps(
            index,
            &self.stream_ops,
            &self.marks,
            starts_at_first_segment,
            &label,
        );
        if let Some(segments_deleted) = segments_deleted.filter(|&n| n > 0) {
            let steps = self.stream_ops.iter().map(|(id, _)| index.ops[*id].step);
            index.ring_deleted.push(crate::index::RingDeleted {
                rank: self.rank,
                first_step: steps.clone().min(),
                last_step: steps.max(),
                segments_deleted,
            });
        }
        for (mut found, timestamp) in self.pending {
            // The blamed op: same task and stream id, the first dump at or after the record.
            found.op = self
                .op_keys
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
}

/// Adds a captured op with what the runtime said about its launch.
fn push_op(index: &mut Index, op: &record::OpInfo, rank: u32) -> OpId {
    index.push_op_at(op.name.clone(), op.op_type.clone(), op.step, rank, Some(op.launch()))
}
