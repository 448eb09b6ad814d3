//! The records of a capture stream, as Rust values, and their protobuf form (`proto/capture.proto`).
//!
//! A frame body is `u8 kind, varint n, n bytes of protobuf` (the head) followed, for tensor records only,
//! by the stored data bytes (the payload). Kinds this build does not know are skipped by readers.

use crate::histogram::Histogram;
use crate::stats::TensorStats;
use crate::{DType, FormatError, Result};
use accutrace_proto::capture as pb;
use prost::Message;
use std::sync::Arc;

/// Record kind: an interned string ([`pb::StringDef`]).
pub const KIND_STRING: u8 = 1;
/// Record kind: an operator execution ([`pb::OpRecord`]).
pub const KIND_OP: u8 = 2;
/// Record kind: a tensor of the preceding op ([`pb::TensorRecord`] + data).
pub const KIND_TENSOR: u8 = 3;
/// Record kind: an op-debug overflow dump ([`pb::OverflowRecord`]).
pub const KIND_OVERFLOW: u8 = 4;
/// Record kind: a statistics-mode CSV dump ([`pb::StatsCsvRecord`]).
pub const KIND_STATS_CSV: u8 = 5;
/// Record kind (version 2): a step boundary ([`pb::StepMark`]).
pub const KIND_STEP_MARK: u8 = 6;
/// Record kind (version 3): an HCCL collective or point-to-point call ([`pb::CollectiveRecord`]).
pub const KIND_COLLECTIVE: u8 = 7;

/// Where an op's step number came from (format version 2; every version-1 op reads as [`StepSource::Model`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StepSource {
    /// The graph dump's path: the model's own iteration.
    #[default]
    Model,
    /// A single-operator dump whose path says nothing: the step is recorded as 0 and may be inferred.
    None,
    /// The per-step dump path the collector sets when the framework's hook calls `accutrace_step_end()`.
    Hook,
    /// The collector's count of `ACCUTRACE_STEP_MARKER` ops: readers recompute it from the stream's
    /// [`StepMark`]s ([`step_marks`](super::step_marks)).
    Marker,
}

impl StepSource {
    /// The protobuf value.
    pub fn code(self) -> i32 {
        match self {
            StepSource::Model => pb::StepSource::Model as i32,
            StepSource::None => pb::StepSource::None as i32,
            StepSource::Hook => pb::StepSource::Hook as i32,
            StepSource::Marker => pb::StepSource::Marker as i32,
        }
    }

    /// From the protobuf value; values of a newer writer read as [`StepSource::None`] (nothing known).
    pub fn from_code(code: i32) -> StepSource {
        match pb::StepSource::try_from(code) {
            Ok(pb::StepSource::Model) => StepSource::Model,
            Ok(pb::StepSource::Hook) => StepSource::Hook,
            Ok(pb::StepSource::Marker) => StepSource::Marker,
            Ok(pb::StepSource::None) | Err(_) => StepSource::None,
        }
    }
}

/// A step boundary the collector learned of while recording (record kind 6).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepMark {
    /// [`StepSource::Hook`] or [`StepSource::Marker`].
    pub source: StepSource,
    /// Hook: the step that begins. Marker: the step the marker op ends, as the collector counted it.
    pub step: u64,
    /// Host clock when the collector learned of it, µs since the epoch.
    pub wall_time_us: u64,
    /// Marker: the marker op's dump timestamp.
    pub op_timestamp_us: u64,
    /// Marker: the marker op's dump number (six-field names).
    pub op_dump_number: Option<u64>,
    /// Marker: the marker op's type.
    pub op_type: String,
}

/// One operator execution (one dump file): the context of the tensor records that follow it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpInfo {
    /// `DumpData.op_name`.
    pub name: String,
    /// Op type (the first field of the dump file name).
    pub op_type: String,
    /// Training step (iteration).
    pub step: u64,
    /// Device task id.
    pub task_id: u32,
    /// Device stream id of the task.
    pub stream_id: u32,
    /// Dump time, µs since the epoch.
    pub timestamp_us: u64,
    /// The file name the dump would have had on disk.
    pub dump_file: String,
    /// Framework op names fused into this op (fusion provenance).
    pub original_names: Vec<String>,
    /// The dump number of a six-field file name (format version 2).
    pub dump_number: Option<u64>,
    /// Where `step` came from (format version 2).
    pub step_source: StepSource,
}

impl OpInfo {
    /// When the runtime says this op ran: its timestamp, dump number, task and stream ids, and the FFTS+
    /// ids only its dump file name keeps. Records arrive in the order files completed; this orders them.
    pub fn launch(&self) -> crate::dump::Launch {
        let ffts = crate::dump::names::ffts_suffix(&self.dump_file);
        crate::dump::Launch {
            timestamp_us: self.timestamp_us,
            dump_number: self.dump_number,
            task_id: u64::from(self.task_id),
            stream_id: u64::from(self.stream_id),
            context_id: ffts.map_or(0, |f| f.context_id),
            thread_id: ffts.map_or(0, |f| f.thread_id),
        }
    }

    /// The dump file name CANN gives an op with these fields (`{op_type}.{op_name}[.{dump_number}]
    /// .{task_id}.{stream_id}.{timestamp_us}`, op name sanitized). The writer stores `dump_file` only when it
    /// differs from this (e.g. FFTS+ suffixes), which keeps statistics-mode records small; the reader fills
    /// it back in.
    pub fn canonical_dump_file(&self) -> String {
        crate::dump::names::format_file_name(&crate::dump::names::DumpFileName {
            op_type: self.op_type.clone(),
            op_name: crate::dump::names::sanitize_op_name(&self.name),
            dump_number: self.dump_number,
            task_id: u64::from(self.task_id),
            stream_id: Some(u64::from(self.stream_id)),
            timestamp_us: self.timestamp_us,
            ffts: None,
            kind: crate::dump::names::FileKind::Tensor,
        })
    }
}

/// Whether a tensor is an input or an output of its op (the dump format's notion, shared).
pub use crate::dump::Io;

/// The framework op (and its output index) a device tensor came from, after fusion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginalOp {
    /// Framework op name.
    pub name: Arc<str>,
    /// Output index on that op.
    pub output_index: u32,
}

/// What is known of a tensor besides its values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMeta {
    /// Input or output.
    pub io: Io,
    /// Position among the op's inputs or outputs.
    pub index: u32,
    /// Element type.
    pub dtype: DType,
    /// CANN `OutputFormat` code of the device layout.
    pub format: i32,
    /// Sub-format (groups of grouped FRACTAL_Z).
    pub sub_format: i32,
    /// Shape of the device buffer.
    pub device_shape: Vec<u64>,
    /// Framework (host) shape, when it differs from the device shape.
    pub original_shape: Option<Vec<u64>>,
    /// Fusion provenance of this output.
    pub original_op: Option<OriginalOp>,
}

/// An op-debug (overflow) dump: the raw status payload and where it came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OverflowInfo {
    /// Training step.
    pub step: u64,
    /// Task id in the op-debug file name (not the overflowing op's: the payload names that one).
    pub task_id: u32,
    /// Stream id in the file name.
    pub stream_id: u32,
    /// Dump time, µs since the epoch.
    pub timestamp_us: u64,
    /// The file name the dump would have had on disk.
    pub dump_file: String,
    /// `output[0]` raw bytes (legacy 2048-byte or 0x5A5A5A5A layout).
    pub payload: Vec<u8>,
}

/// A statistics-mode dump: CANN's CSV text for one op, verbatim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatsCsv {
    /// Training step.
    pub step: u64,
    /// The file name the dump would have had on disk.
    pub dump_file: String,
    /// The CSV bytes.
    pub csv: Vec<u8>,
}

/// How a tensor's data is stored in its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataEncoding {
    /// No data (statistics and hash only).
    None,
    /// The raw bytes.
    Raw,
    /// Byte-shuffled by `shuffle_width`, then zstd: one or more frames back to back (docs/CAPTURE_FORMAT.md).
    Zstd {
        /// Element width used by the shuffle (1: not shuffled).
        shuffle_width: u32,
    },
}

/// Encodes `kind, varint len, message` into `out` (cleared first).
pub fn encode_head(kind: u8, msg: &impl Message, out: &mut Vec<u8>) {
    out.clear();
    out.push(kind);
    super::segment::put_varint(out, msg.encoded_len() as u64);
    // Encoding into a Vec cannot run out of space.
    let _ = msg.encode(out);
}

/// Decodes the protobuf message of a head (the bytes after kind and varint).
pub fn decode_message<M: Message + Default>(bytes: &[u8], what: &str) -> Result<M> {
    M::decode(bytes).map_err(|e| FormatError::whole(format!("malformed {what} record: {e}")))
}

impl From<&TensorStats> for pb::Stats {
    fn from(s: &TensorStats) -> Self {
        pb::Stats {
            count: s.count,
            nan: s.nan,
            pos_inf: s.pos_inf,
            neg_inf: s.neg_inf,
            zero: s.zero,
            min: s.min,
            max: s.max,
            mean: s.mean,
            l2_norm: s.l2_norm,
            at_saturation: s.at_saturation,
            abs_sum: s.abs_sum,
        }
    }
}

impl From<&pb::Stats> for TensorStats {
    fn from(s: &pb::Stats) -> Self {
        TensorStats {
            count: s.count,
            nan: s.nan,
            pos_inf: s.pos_inf,
            neg_inf: s.neg_inf,
            zero: s.zero,
            min: s.min,
            max: s.max,
            mean: s.mean,
            l2_norm: s.l2_norm,
            abs_sum: s.abs_sum,
            at_saturation: s.at_saturation,
        }
    }
}

impl From<&Histogram> for pb::Histogram {
    fn from(h: &Histogram) -> Self {
        pb::Histogram { lowest: h.lowest, negative: h.negative.clone(), positive: h.positive.clone() }
    }
}

impl From<pb::Histogram> for Histogram {
    fn from(h: pb::Histogram) -> Self {
        Histogram { lowest: h.lowest, negative: h.negative, positive: h.positive }
    }
}

impl DataEncoding {
    /// From the record's fields; unknown encodings are an error (the data cannot be read back).
    pub fn from_record(rec: &pb::TensorRecord) -> Result<DataEncoding> {
        match pb::Encoding::try_from(rec.encoding) {
            Ok(pb::Encoding::None) => Ok(DataEncoding::None),
            Ok(pb::Encoding::Raw) => Ok(DataEncoding::Raw),
            Ok(pb::Encoding::Zstd) => Ok(DataEncoding::Zstd { shuffle_width: rec.shuffle_width.max(1) }),
            Err(_) => Err(FormatError::whole(format!("unknown tensor data encoding {}", rec.encoding))),
        }
    }
}

impl TensorMeta {
    /// The framework shape: `original_shape`, or the device shape when they are the same (the reader
    /// returns `original_shape: None` then: the format stores it only when it differs).
    pub fn host_shape(&self) -> &[u64] {
        self.original_shape.as_deref().unwrap_or(&self.device_shape)
    }
}
