//! A record made into frames: its strings interned in the segment's table (new ones as string-definition
//! frames before it), its head encoded, the frames written where they fit, or the stream rolled to a
//! segment that holds them.

use super::{Appended, Msg, StreamWriter};
use crate::capture::record::*;
use crate::capture::segment::{self, align8, FRAME_HEADER, HEADER_LEN};
use crate::capture::MAX_HEAD;
use crate::{FormatError, Result};
use accutrace_proto::capture as pb;
use std::collections::HashMap;

impl StreamWriter {
    /// Interns the strings of `msg` in the current segment's table (new ones go to `self.defs`) and
    /// encodes its head into `self.head`.
    pub(super) fn encode(&mut self, msg: &Msg) {
        self.defs.clear();
        let id = |s: &str, strings: &mut HashMap<String, u32>, defs: &mut Vec<(u32, String)>| -> u32 {
            if s.is_empty() {
                return 0;
            }
            if let Some(&id) = strings.get(s) {
                return id;
            }
            let id = strings.len() as u32 + 1;
            strings.insert(s.to_string(), id);
            defs.push((id, s.to_string()));
            id
        };
        let (strings, defs) = (&mut self.strings, &mut self.defs);
        match msg {
            Msg::Op(op, continued) => {
                let rec = pb::OpRecord {
                    name: id(&op.name, strings, defs),
                    op_type: id(&op.op_type, strings, defs),
                    step: op.step,
                    task_id: op.task_id,
                    stream_id: op.stream_id,
                    timestamp_us: op.timestamp_us,
                    dump_file: (op.dump_file != op.canonical_dump_file()).then(|| op.dump_file.clone()),
                    original_names: op.original_names.iter().map(|n| id(n, strings, defs)).collect(),
                    continued: *continued,
                    dump_number: op.dump_number,
                    step_source: op.step_source.code(),
                };
                encode_head(KIND_OP, &rec, &mut self.head);
            }
            Msg::Tensor { meta, stats, histogram, hash, size, enc } => {
                let (encoding, shuffle_width) = match enc {
                    DataEncoding::None => (pb::Encoding::None, 0),
                    DataEncoding::Raw => (pb::Encoding::Raw, 0),
                    DataEncoding::Zstd { shuffle_width } => (pb::Encoding::Zstd, *shuffle_width),
                };
                let rec = pb::TensorRecord {
                    io: match meta.io {
                        Io::Input => pb::Io::Input as i32,
                        Io::Output => pb::Io::Output as i32,
                    },
                    index: meta.index,
                    dtype: meta.dtype.code(),
                    format: meta.format,
                    sub_format: meta.sub_format,
                    device_shape: meta.device_shape.clone(),
                    original_shape: meta
                        .original_shape
                        .as_ref()
                        .filter(|s| **s != meta.device_shape)
                        .map(|s| pb::Shape { dim: s.clone() }),
                    original_op: meta.original_op.as_ref().map_or(0, |o| id(&o.name, strings, defs)),
                    original_output_index: meta.original_op.as_ref().map_or(0, |o| o.output_index),
                    stats: Some(pb::Stats::from(*stats)),
                    content_hash: *hash,
                    data_size: *size,
                    encoding: encoding as i32,
                    shuffle_width,
                    histogram: histogram.map(pb::Histogram::from),
                };
                encode_head(KIND_TENSOR, &rec, &mut self.head);
            }
            Msg::Overflow(o) => {
                let rec = pb::OverflowRecord {
                    step: o.step,
                    task_id: o.task_id,
                    stream_id: o.stream_id,
                    timestamp_us: o.timestamp_us,
                    dump_file: o.dump_file.clone(),
                    payload: o.payload.clone(),
                };
                encode_head(KIND_OVERFLOW, &rec, &mut self.head);
            }
            Msg::Csv(c) => {
                let rec =
                    pb::StatsCsvRecord { step: c.step, dump_file: c.dump_file.clone(), csv: c.csv.clone() };
                encode_head(KIND_STATS_CSV, &rec, &mut self.head);
            }
            Msg::Mark(m) => {
                let rec = pb::StepMark {
                    source: m.source.code(),
                    step: m.step,
                    wall_time_us: m.wall_time_us,
                    op_timestamp_us: m.op_timestamp_us,
                    op_dump_number: m.op_dump_number,
                    op_type: id(&m.op_type, strings, defs),
                };
                encode_head(KIND_STEP_MARK, &rec, &mut self.head);
            }
            Msg::Collective(c) => {
                let rec = c.to_proto(id(&c.comm, strings, defs));
                encode_head(KIND_COLLECTIVE, &rec, &mut self.head);
            }
        }
        // The string definitions this record needs, as frames' heads, concatenated with their lengths.
        self.def_frames.clear();
        let mut one = Vec::new();
        for (id, value) in &self.defs {
            encode_head(KIND_STRING, &pb::StringDef { id: *id, value: value.clone() }, &mut one);
            self.def_frames.extend_from_slice(&(one.len() as u32).to_le_bytes());
            self.def_frames.extend_from_slice(&one);
        }
    }

    /// Bytes the encoded defs and record take in a segment.
    pub(super) fn needed(&self, payload: usize) -> u64 {
        let mut total = 0;
        let mut at = 0;
        while at + 4 <= self.def_frames.len() {
            let len = u32::from_le_bytes(self.def_frames[at..at + 4].try_into().unwrap_or([0; 4])) as u64;
            total += align8(FRAME_HEADER + len);
            at += 4 + len as usize;
        }
        total + align8(FRAME_HEADER + self.head.len() as u64 + payload as u64)
    }

    pub(super) fn append(&mut self, msg: Msg, payload: &[u8]) -> Result<Appended> {
        let is_tensor = matches!(msg, Msg::Tensor { .. });
        for attempt in 0..3 {
            if is_tensor && !self.op_in_segment {
                // A segment is self-contained: the op of its first tensors is repeated at its start.
                let op = self.op.clone().unwrap_or_default();
                self.append(Msg::Op(&op, true), &[])?;
                self.op_in_segment = true;
            }
            self.encode(&msg);
            if self.head.len() as u64 > MAX_HEAD {
                return Err(FormatError::whole(format!(
                    "record metadata of {} bytes exceeds the limit of {MAX_HEAD}",
                    self.head.len()
                )));
            }
            let body = self.head.len() as u64 + payload.len() as u64;
            if body > u64::from(u32::MAX) {
                return Err(FormatError::whole(format!(
                    "record of {body} bytes exceeds the 4 GiB frame limit"
                )));
            }
            let needed = self.needed(payload.len());
            let (pos, room) = match &self.seg {
                Some(s) => (s.pos, s.map.len() as u64 - s.pos),
                None => (0, 0),
            };
            if needed <= room {
                return Ok(self.write_encoded(pos, needed, payload));
            }
            // Does not fit: roll to a segment large enough for the record, its strings and (for a tensor) its
            // op written again. The new segment starts a new string table, so this attempt's ids are void.
            let op_room = if is_tensor { self.op.as_ref().map_or(0, op_upper_bound) } else { 0 };
            let fresh = self.opts.segment_size.max(align8(HEADER_LEN + needed + op_room + 4096));
            if attempt == 2 {
                break;
            }
            self.roll(fresh)?;
        }
        Err(FormatError::whole("record does not fit a fresh segment"))
    }

    /// Writes `self.def_frames` and `self.head` + `payload` at `pos` (they fit).
    fn write_encoded(&mut self, pos: u64, needed: u64, payload: &[u8]) -> Appended {
        let frame = self.write_defs(pos);
        let Some(seg) = self.seg.as_mut() else { return Appended::Stopped };
        segment::write_frame(&mut seg.map, frame, &self.head, payload);
        seg.pos = pos + needed;
        let index = seg.index;
        self.counts.bytes_out += needed;
        self.maybe_prepare();
        Appended::Written { segment: index, offset: frame, bytes: needed }
    }

    /// Writes the frames of `self.def_frames` at `pos` (they fit); returns the offset after them.
    pub(super) fn write_defs(&mut self, pos: u64) -> u64 {
        let Some(seg) = self.seg.as_mut() else { return pos };
        let mut at = pos;
        let mut i = 0;
        while i + 4 <= self.def_frames.len() {
            let len = u32::from_le_bytes(self.def_frames[i..i + 4].try_into().unwrap_or([0; 4])) as usize;
            segment::write_frame(&mut seg.map, at, &self.def_frames[i + 4..i + 4 + len], &[]);
            at = align8(at + FRAME_HEADER + len as u64);
            i += 4 + len;
        }
        at
    }
}

/// Generous upper bound of the bytes an op record and its string definitions take in a fresh segment.
fn op_upper_bound(op: &OpInfo) -> u64 {
    let strings: u64 = [&op.name, &op.op_type].iter().map(|s| s.len() as u64 + 32).sum::<u64>()
        + op.original_names.iter().map(|s| s.len() as u64 + 32).sum::<u64>();
    strings + op.dump_file.len() as u64 + 128 + 16 * op.original_names.len() as u64
}
