//! The walk over a stream's records ([`Records`]): frame after frame, segment after segment, each record's
//! head decoded into a [`Record`] (string definitions resolved, an op continued across segments given once).

use super::tensor_head::{self, TensorHead};
use super::{CapturedTensor, Record, RecordRef, Segment, StreamReader};
use crate::capture::collective::CollectiveInfo;
use crate::capture::record::*;
use crate::capture::segment::{self, Frame, HEADER_LEN};
use crate::histogram::Histogram;
use crate::stats::TensorStats;
use crate::{FormatError, Result};
use accutrace_proto::capture as pb;
use std::sync::Arc;

/// What a bad or empty frame inside a sealed segment means, and what to do: the collector wrote every
/// frame up to the sealed end before it sealed the file, so the bytes changed afterwards.
const CHANGED: &str = "the collector sealed this file with a record here, so these bytes were zeroed or \
                       overwritten after it closed it (a damaged disk or copy); copy the capture again";

/// Iterator over a stream's records (see [`StreamReader::records`]). Stops after the first error.
pub struct Records<'a> {
    stream: &'a StreamReader,
    seg: usize,
    pos: u64,
    /// Frames of the first segment before this offset, but string definitions, are not decoded.
    skip_before: u64,
    /// Tensor records are passed over undecoded ([`Records::passing_tensors`]).
    tensors_undecoded: bool,
    /// The head of the tensor record last passed over ([`Records::passed_head`]).
    passed: Option<&'a [u8]>,
    strings: Vec<Arc<str>>,
    op: Option<Arc<OpInfo>>,
    /// The last op of the previous segment: a `continued` op record that repeats it is not yielded again.
    prev_op: Option<Arc<OpInfo>>,
    done: bool,
}

impl StreamReader {
    /// The records in the order they were written.
    pub fn records(&self) -> Records<'_> {
        self.records_from(0, 0)
    }

    /// The records from byte `offset` of the stream's `position`-th segment on (a position among the
    /// segments found, not a file's index): a walk of some steps of a long capture starts where their first
    /// record is. The segment's frames before `offset` are passed over undecoded but for its string
    /// definitions, which the records after them name; `offset` is meant to be an op record's, since the
    /// tensor records that follow name the op before them.
    pub fn records_from(&self, position: usize, offset: u64) -> Records<'_> {
        Records {
            stream: self,
            seg: position,
            pos: HEADER_LEN,
            skip_before: offset,
            tensors_undecoded: false,
            passed: None,
            strings: Vec::new(),
            op: None,
            prev_op: None,
            done: false,
        }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<RecordRef<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let Some(seg) = self.stream.segments.get(self.seg) else {
                self.done = true;
                break;
            };
            if self.pos >= seg.end {
                // Walked to its end: its pages leave this process's mapping (a walk of the whole capture,
                // as every index build makes, would otherwise leave each record head's pages, and the
                // kernel's fault-around neighbours, counted as resident). Records already returned stay
                // readable: their bytes fault back in from the page cache.
                seg.release(0, seg.map.len() as u64);
                self.seg += 1;
                self.pos = HEADER_LEN;
                self.skip_before = 0;
                self.strings.clear();
                // Segments without ops (overflow records only) do not forget the last op.
                if self.op.is_some() {
                    self.prev_op = self.op.take();
                }
                continue;
            }
            let offset = self.pos;
            let (meta, head_end, body_end, kind, next) = match segment::frame_at(&seg.map, offset, seg.end) {
                Frame::Valid { body, len, meta, head_len, kind, next } => {
                    (meta, body + head_len, body + len, kind, next)
                }
                Frame::Empty if !seg.sealed => {
                    self.pos = seg.end;
                    continue;
                }
                Frame::Empty => {
                    return self.fail(seg, offset, format!("sealed segment has no record here: {CHANGED}"))
                }
                Frame::Bad(why) if seg.sealed => return self.fail(seg, offset, format!("{why}: {CHANGED}")),
                Frame::Bad(why) => return self.fail(seg, offset, why),
            };
            self.pos = next;
            if offset < self.skip_before && kind != KIND_STRING {
                continue;
            }
            if self.tensors_undecoded && kind == KIND_TENSOR {
                if self.op.is_none() {
                    return self.fail(seg, offset, "tensor record before any op record".into());
                }
                self.passed = Some(&seg.map[meta as usize..head_end as usize]);
                let record = Record::Unknown { kind };
                return Some(Ok(RecordRef { segment: &seg.path, segment_index: seg.index, offset, record }));
            }
            let m = &seg.map[meta as usize..head_end as usize];
            let payload = &seg.map[head_end as usize..body_end as usize];
            match self.decode(seg, kind, m, payload, head_end) {
                Ok(Some(record)) => {
                    return Some(Ok(RecordRef {
                        segment: &seg.path,
                        segment_index: seg.index,
                        offset,
                        record,
                    }))
                }
                Ok(None) => continue,
                Err(e) => return self.fail(seg, offset, e.problem),
            }
        }
        None
    }
}

impl<'a> Records<'a> {
    /// Tensor records yielded undecoded, as `Record::Unknown { kind: KIND_TENSOR }` in their place, each
    /// belonging to the op record before it: a walk that only counts them and places them (where a long
    /// capture's steps lie) skips most of the decoding. Their heads are checked when they are read.
    pub fn passing_tensors(mut self) -> Self {
        self.tensors_undecoded = true;
        self
    }

    /// The op, input or output, and original op of the tensor record last passed over undecoded, read from
    /// its head without decoding it ([`TensorHead`]); `None` where none was, or its head is not one the
    /// scan can walk or names a string its segment does not define (decoding it says what is wrong).
    pub fn passed_head(&self) -> Option<TensorHead> {
        let (io, original_op) = tensor_head::io_and_original_op(self.passed?)?;
        let original_op = match original_op as u32 {
            0 => None,
            id => Some(self.strings.get(id as usize - 1)?.clone()),
        };
        Some(TensorHead { op: self.op.clone()?, io: tensor_head::io_of(io), original_op })
    }

    fn fail(&mut self, seg: &Segment, offset: u64, why: String) -> Option<Result<RecordRef<'a>>> {
        self.done = true;
        Some(Err(FormatError::at(offset, why).in_file(&seg.path)))
    }

    fn string(&self, id: u32) -> Result<Option<Arc<str>>> {
        if id == 0 {
            return Ok(None);
        }
        match self.strings.get(id as usize - 1) {
            Some(s) => Ok(Some(s.clone())),
            None => Err(FormatError::whole(format!("string id {id} is not defined in this segment"))),
        }
    }

    fn decode(
        &mut self,
        seg: &'a Segment,
        kind: u8,
        m: &[u8],
        payload: &'a [u8],
        payload_offset: u64,
    ) -> Result<Option<Record<'a>>> {
        Ok(Some(match kind {
            KIND_STRING => {
                let def: pb::StringDef = decode_message(m, "string")?;
                if def.id as usize != self.strings.len() + 1 {
                    return Err(FormatError::whole(format!("string id {} out of sequence", def.id)));
                }
                self.strings.push(Arc::from(def.value));
                return Ok(None);
            }
            KIND_OP => {
                let r: pb::OpRecord = decode_message(m, "op")?;
                let s = |id| -> Result<String> {
                    Ok(self.string(id)?.map(|s| s.to_string()).unwrap_or_default())
                };
                let op = OpInfo {
                    name: s(r.name)?,
                    op_type: s(r.op_type)?,
                    step: r.step,
                    task_id: r.task_id,
                    stream_id: r.stream_id,
                    timestamp_us: r.timestamp_us,
                    dump_file: String::new(),
                    original_names: r.original_names.iter().map(|&id| s(id)).collect::<Result<_>>()?,
                    dump_number: r.dump_number,
                    step_source: StepSource::from_code(r.step_source),
                };
                // Absent: the writer elided it because it is the canonical name of these fields.
                let dump_file = r.dump_file.unwrap_or_else(|| op.canonical_dump_file());
                let op = Arc::new(OpInfo { dump_file, ..op });
                if let Some(prev) = self.prev_op.take().filter(|p| r.continued && **p == *op) {
                    self.op = Some(prev);
                    return Ok(None);
                }
                self.op = Some(op.clone());
                Record::Op(op)
            }
            KIND_TENSOR => {
                let r: pb::TensorRecord = decode_message(m, "tensor")?;
                let op = self
                    .op
                    .clone()
                    .ok_or_else(|| FormatError::whole("tensor record before any op record"))?;
                let encoding = DataEncoding::from_record(&r)?;
                if encoding == DataEncoding::None && !payload.is_empty() {
                    return Err(FormatError::whole("tensor record without data encoding carries data bytes"));
                }
                let stats = r.stats.as_ref().map(TensorStats::from).unwrap_or_default();
                let histogram = r.histogram.map(|h| Box::new(Histogram::from(h)));
                if let Some(h) = &histogram {
                    // Checked: both come from the record, and a damaged one must not wrap around.
                    let nonzero = [stats.nan, stats.pos_inf, stats.neg_inf, stats.zero]
                        .iter()
                        .try_fold(stats.count, |left, &c| left.checked_sub(c))
                        .ok_or_else(|| {
                            FormatError::whole("tensor statistics count more specials than values")
                        })?;
                    h.validate(nonzero)?;
                }
                let original_op = match self.string(r.original_op)? {
                    Some(name) => Some(OriginalOp { name, output_index: r.original_output_index }),
                    None => None,
                };
                let io = if r.io == pb::Io::Output as i32 { Io::Output } else { Io::Input };
                Record::Tensor(CapturedTensor {
                    op,
                    meta: TensorMeta {
                        io,
                        index: r.index,
                        dtype: crate::DType::from_code(r.dtype),
                        format: r.format,
                        sub_format: r.sub_format,
                        original_shape: r.original_shape.map(|s| s.dim),
                        device_shape: r.device_shape,
                        original_op,
                    },
                    stats,
                    histogram,
                    content_hash: r.content_hash,
                    data_size: r.data_size,
                    encoding,
                    payload,
                    payload_offset,
                    path: &seg.path,
                })
            }
            KIND_OVERFLOW => {
                let r: pb::OverflowRecord = decode_message(m, "overflow")?;
                Record::Overflow(OverflowInfo {
                    step: r.step,
                    task_id: r.task_id,
                    stream_id: r.stream_id,
                    timestamp_us: r.timestamp_us,
                    dump_file: r.dump_file,
                    payload: r.payload,
                })
            }
            KIND_STATS_CSV => {
                let r: pb::StatsCsvRecord = decode_message(m, "stats CSV")?;
                Record::StatsCsv(StatsCsv { step: r.step, dump_file: r.dump_file, csv: r.csv })
            }
            KIND_STEP_MARK => {
                let r: pb::StepMark = decode_message(m, "step mark")?;
                Record::StepMark(StepMark {
                    source: StepSource::from_code(r.source),
                    step: r.step,
                    wall_time_us: r.wall_time_us,
                    op_timestamp_us: r.op_timestamp_us,
                    op_dump_number: r.op_dump_number,
                    op_type: self.string(r.op_type)?.map(|s| s.to_string()).unwrap_or_default(),
                })
            }
            KIND_COLLECTIVE => {
                let r: pb::CollectiveRecord = decode_message(m, "collective")?;
                let comm = self.string(r.comm)?.map(|s| s.to_string()).unwrap_or_default();
                Record::Collective(CollectiveInfo::from_proto(&r, comm)?)
            }
            kind => Record::Unknown { kind },
        }))
    }
}
