//! The stream writer: appends records to memory-mapped segment files, rolls to a new segment when one is
//! full, and applies the retention policy. One writer per stream (one process, one device); the collector's
//! writer threads own it. Nothing here allocates per record once the scratch buffers have grown.

use super::collective::CollectiveInfo;
use super::encode::{pays, shuffle_width, DataEncoder, EncodedData};
use super::manifest::{write_json_atomic, StreamCounts, StreamInfo, StreamSummary, STREAM_FILE};
use super::policy::{Policy, PolicyState};
use super::record::*;
use super::segment::{self, align8, SegmentHeader, FRAME_HEADER, HEADER_LEN};
use super::{now_us, segment_file_name, FORMAT_VERSION, MAX_HEAD};
use crate::histogram::Histogram;
use crate::stats::TensorStats;
use crate::{FormatError, Result};
use accutrace_proto::capture as pb;
use memmap2::{MmapMut, MmapOptions};
use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Default segment size: 64 MiB.
pub const DEFAULT_SEGMENT_SIZE: u64 = 64 << 20;
/// Smallest segment size accepted (a header and a few records).
pub const MIN_SEGMENT_SIZE: u64 = 4096;
/// Name, in the stream directory, of the next segment while it is prepared ahead of time (created, sized
/// and pre-faulted by a helper thread). Not a segment name (`seg-NNNNNN.acc`), so readers ignore it; at a
/// roll the writer writes its header and renames it to the new segment's name. A leftover from a crash is
/// removed (or overwritten) by the next writer of the stream.
pub const PREPARED_SEGMENT_FILE: &str = "seg-next.tmp";

/// The outcome of an append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Appended {
    /// Written: the segment index and the frame's offset in it, and the frame bytes used.
    Written {
        /// Segment index (`seg-{index:06}.acc`).
        segment: u64,
        /// Offset of the frame in that segment.
        offset: u64,
        /// Bytes the record took, framing, interned strings and padding included.
        bytes: u64,
    },
    /// Not written: the policy stopped recording (trigger policy, after its kept steps).
    Stopped,
}

/// Writer options beyond the segment size and policy.
#[derive(Clone, Copy, Debug)]
pub struct WriterOptions {
    /// Segment size in bytes (records larger than a segment get a segment of their own, sized to fit).
    pub segment_size: u64,
    /// Retention policy.
    pub policy: Policy,
    /// Allocate a new segment's blocks up front (`fallocate(2)`; where the file system has no fallocate,
    /// by writing its zeros through the file), so a full disk is an error from `create`/`append`, not a
    /// SIGBUS in the training process when a mapped page is first written. With fallocate this costs no
    /// pass over the data; off: the file is extended sparse.
    pub preallocate: bool,
}

impl WriterOptions {
    /// Default options with this segment size and policy (preallocation on).
    pub fn new(segment_size: u64, policy: Policy) -> Self {
        WriterOptions { segment_size, policy, preallocate: true }
    }
}

/// The next segment being prepared by a one-shot helper thread: `PREPARED_SEGMENT_FILE`, `size` bytes,
/// mapped and pre-faulted when the thread returns Ok. Setting `cancel` stops it between chunks.
struct Preparation {
    size: u64,
    cancel: Arc<AtomicBool>,
    thread: JoinHandle<std::io::Result<MmapMut>>,
}

/// Bytes the helper allocates and pre-faults between two looks at its cancel flag.
const PREPARE_CHUNK: u64 = 4 << 20;

struct OpenSegment {
    map: MmapMut,
    path: PathBuf,
    index: u64,
    /// Next frame offset.
    pos: u64,
}

/// Appends the records of one stream. Call [`seal`](Self::seal) for a clean end; dropping the writer also
/// seals (best effort). A writer that is killed leaves an unsealed last segment that readers recover.
pub struct StreamWriter {
    dir: PathBuf,
    info: StreamInfo,
    opts: WriterOptions,
    policy: PolicyState,
    seg: Option<OpenSegment>,
    /// The next segment, prepared off the appending thread (none while stopped, or if the thread could not
    /// be started).
    next: Option<Preparation>,
    /// Segments on disk, oldest first: (index, size).
    live: VecDeque<(u64, u64)>,
    next_index: u64,
    strings: HashMap<String, u32>,
    op: Option<OpInfo>,
    op_in_segment: bool,
    head: Vec<u8>,
    defs: Vec<(u32, String)>,
    def_frames: Vec<u8>,
    /// Shuffle buffer and zstd context for [`append_tensor`](Self::append_tensor).
    encoder: DataEncoder,
    /// Compressed bytes of the buffered path (kept for its capacity).
    compressed: Vec<u8>,
    counts: StreamCounts,
    sealed: bool,
}

/// What goes into a frame, before interning.
enum Msg<'a> {
    /// The op, and whether it repeats the previous segment's op (`continued`).
    Op(&'a OpInfo, bool),
    Tensor {
        meta: &'a TensorMeta,
        stats: &'a TensorStats,
        histogram: Option<&'a Histogram>,
        hash: u64,
        size: u64,
        enc: DataEncoding,
    },
    Overflow(&'a OverflowInfo),
    Csv(&'a StatsCsv),
    Mark(&'a StepMark),
    Collective(&'a CollectiveInfo),
}

impl StreamWriter {
    /// Creates `run_dir/<info.dir_name()>/` with `stream.json` and the first segment.
    pub fn create(
        run_dir: &Path,
        info: StreamInfo,
        segment_size: u64,
        policy: Policy,
    ) -> Result<StreamWriter> {
        Self::create_with(run_dir, info, WriterOptions::new(segment_size, policy))
    }

    /// [`create`](Self::create) with all options.
    pub fn create_with(run_dir: &Path, info: StreamInfo, opts: WriterOptions) -> Result<StreamWriter> {
        if opts.segment_size < MIN_SEGMENT_SIZE || opts.segment_size & 7 != 0 {
            return Err(FormatError::whole(format!(
                "segment size {} must be a multiple of 8 and at least {MIN_SEGMENT_SIZE}",
                opts.segment_size
            )));
        }
        let dir = run_dir.join(info.dir_name());
        std::fs::create_dir_all(&dir).map_err(|e| FormatError::io(&dir, &e))?;
        // A crashed writer's half-prepared segment (best effort: preparing truncates it anyway).
        let _ = std::fs::remove_file(dir.join(PREPARED_SEGMENT_FILE));
        let mut w = StreamWriter {
            dir,
            info,
            opts,
            policy: PolicyState::new(opts.policy),
            seg: None,
            next: None,
            live: VecDeque::new(),
            next_index: 0,
            strings: HashMap::new(),
            op: None,
            op_in_segment: false,
            head: Vec::new(),
            defs: Vec::new(),
            def_frames: Vec::new(),
            encoder: DataEncoder::new(),
            compressed: Vec::new(),
            counts: StreamCounts::default(),
            sealed: false,
        };
        w.open_segment(opts.segment_size)?;
        write_json_atomic(&w.dir.join(STREAM_FILE), &w.info)?;
        Ok(w)
    }

    /// The stream's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The policy state (trigger step, stopped).
    pub fn policy(&self) -> &PolicyState {
        &self.policy
    }

    /// Appends an op record; the tensors appended after it belong to it.
    pub fn append_op(&mut self, op: &OpInfo) -> Result<Appended> {
        if !self.policy.admit_op(op.step) {
            self.op = None;
            self.counts.refused_after_stop += 1;
            return Ok(Appended::Stopped);
        }
        self.op = Some(op.clone());
        let r = self.append(Msg::Op(op, false), &[])?;
        self.op_in_segment = true;
        self.counts.ops += 1;
        Ok(r)
    }

    /// Appends a tensor of the current op: metadata, statistics, content hash, and optionally its raw bytes,
    /// byte-shuffled and compressed with zstd at `zstd_level` (stored raw when that saves under 1/32).
    ///
    /// Compresses here, inside the caller's hold on the writer. Writers shared between threads can encode
    /// first with [`DataEncoder::encode`] and append with [`append_tensor_encoded`](Self::append_tensor_encoded):
    /// the record is byte-identical.
    pub fn append_tensor(
        &mut self,
        meta: &TensorMeta,
        stats: &TensorStats,
        hash: u64,
        data: Option<&[u8]>,
        zstd_level: i32,
    ) -> Result<Appended> {
        self.append_tensor_with_histogram(meta, stats, None, hash, data, zstd_level)
    }

    /// [`append_tensor`](Self::append_tensor) with the tensor's histogram ([`crate::histogram`]), when one
    /// was computed.
    pub fn append_tensor_with_histogram(
        &mut self,
        meta: &TensorMeta,
        stats: &TensorStats,
        histogram: Option<&Histogram>,
        hash: u64,
        data: Option<&[u8]>,
        zstd_level: i32,
    ) -> Result<Appended> {
        let Some(raw) = data else {
            return self.append_tensor_encoded_with_histogram(meta, stats, histogram, hash, None);
        };
        if let Some(refused) = self.refuse_tensor()? {
            return Ok(refused);
        }
        let width = shuffle_width(meta.dtype);
        self.encoder.prepare(raw, width, zstd_level)?;
        // Common case: compress straight into the segment (no copy of the compressed bytes).
        if let Some(r) = self.append_zstd_in_place(meta, stats, histogram, hash, raw, width)? {
            return Ok(self.tensor_appended(r, meta, stats, raw.len() as u64));
        }
        let encoded = self.encoder.finish(raw, width, std::mem::take(&mut self.compressed))?;
        let r = self.append_tensor_encoded_with_histogram(meta, stats, histogram, hash, Some(&encoded));
        self.compressed = encoded.into_buffer();
        r
    }

    /// Appends a tensor of the current op whose data (if any) was encoded already, by [`DataEncoder::encode`]
    /// or [`encode_data`](super::encode_data): only frames and copies. Gives the same record as
    /// [`append_tensor`](Self::append_tensor) with the same raw bytes and zstd level.
    pub fn append_tensor_encoded(
        &mut self,
        meta: &TensorMeta,
        stats: &TensorStats,
        hash: u64,
        data: Option<&EncodedData<'_>>,
    ) -> Result<Appended> {
        self.append_tensor_encoded_with_histogram(meta, stats, None, hash, data)
    }

    /// [`append_tensor_encoded`](Self::append_tensor_encoded) with the tensor's histogram, when one was
    /// computed.
    pub fn append_tensor_encoded_with_histogram(
        &mut self,
        meta: &TensorMeta,
        stats: &TensorStats,
        histogram: Option<&Histogram>,
        hash: u64,
        data: Option<&EncodedData<'_>>,
    ) -> Result<Appended> {
        if let Some(refused) = self.refuse_tensor()? {
            return Ok(refused);
        }
        let (enc, size, payload): (DataEncoding, u64, &[u8]) = match data {
            None => (DataEncoding::None, 0, &[]),
            Some(d) => (d.encoding(), d.raw_len(), d.payload()),
        };
        let r = self.append(Msg::Tensor { meta, stats, histogram, hash, size, enc }, payload)?;
        if data.is_none() {
            self.counts.tensors += 1;
            self.policy.observe_tensor(stats.shows_overflow(meta.dtype));
            return Ok(r);
        }
        Ok(self.tensor_appended(r, meta, stats, size))
    }

    /// Some(Stopped) when the policy refuses tensors now (counted); an error without a preceding op.
    fn refuse_tensor(&mut self) -> Result<Option<Appended>> {
        if self.policy.stopped() {
            self.counts.refused_after_stop += 1;
            return Ok(Some(Appended::Stopped));
        }
        if self.op.is_none() {
            return Err(FormatError::whole("tensor record without a preceding op record"));
        }
        Ok(None)
    }

    /// Counts a tensor appended with data of `size` raw bytes; feeds the policy.
    fn tensor_appended(
        &mut self,
        r: Appended,
        meta: &TensorMeta,
        stats: &TensorStats,
        size: u64,
    ) -> Appended {
        self.counts.tensors += 1;
        self.counts.tensors_with_data += 1;
        self.counts.bytes_in += size;
        self.policy.observe_tensor(stats.shows_overflow(meta.dtype));
        r
    }

    /// The zstd path without the intermediate buffer: when the current segment holds the op, and the record
    /// with its worst-case compressed size fits the rest of the segment, the string definitions are written,
    /// zstd compresses the encoder's prepared planes directly into the frame's payload, then the head, CRC and commit word
    /// follow as in [`segment::write_frame`]. If compression does not pay, the record is stored raw in the same
    /// place (the compressed bytes are cleared first: space past the last frame stays zero).
    /// Ok(None): nothing was written or interned; the caller takes the buffered path.
    fn append_zstd_in_place(
        &mut self,
        meta: &TensorMeta,
        stats: &TensorStats,
        histogram: Option<&Histogram>,
        hash: u64,
        raw: &[u8],
        width: u32,
    ) -> Result<Option<Appended>> {
        if !self.op_in_segment || self.seg.is_none() || !self.encoder.is_prepared() {
            return Ok(None);
        }
        let size = raw.len() as u64;
        let bound = self.encoder.prepared_bound();
        let enc = DataEncoding::Zstd { shuffle_width: width };
        self.encode(&Msg::Tensor { meta, stats, histogram, hash, size, enc });
        let (pos, room) = match &self.seg {
            Some(s) => (s.pos, s.map.len() as u64 - s.pos),
            None => (0, 0),
        };
        let body = self.head.len() as u64 + bound as u64;
        if self.head.len() as u64 > MAX_HEAD || body > u64::from(u32::MAX) || self.needed(bound) > room {
            // Undo this attempt's interning: its definitions were not written.
            for (_, value) in &self.defs {
                self.strings.remove(value);
            }
            return Ok(None);
        }
        let frame = self.write_defs(pos);
        let Some(seg) = self.seg.as_mut() else {
            // Unreachable: checked at the top and nothing in between takes it.
            return Err(FormatError::whole("writer state lost its segment"));
        };
        let data_at = (frame + FRAME_HEADER) as usize + self.head.len();
        let out = &mut seg.map[data_at..data_at + bound];
        let compressed = match self.encoder.compress_prepared(&mut *out) {
            Ok(n) => n,
            Err(e) => {
                out.fill(0);
                seg.pos = frame;
                self.counts.bytes_out += frame - pos;
                return Err(e);
            }
        };
        if pays(compressed, raw.len()) {
            // zstd may leave bytes past its output (a block tried compressed, then stored raw): clear them, so
            // the frame's padding and the space past the last frame stay zero, as with a copied payload.
            seg.map[data_at + compressed..data_at + bound].fill(0);
            segment::write_frame_in_place(&mut seg.map, frame, &self.head, compressed);
            let needed = frame - pos + align8(FRAME_HEADER + self.head.len() as u64 + compressed as u64);
            seg.pos = pos + needed;
            let index = seg.index;
            self.counts.bytes_out += needed;
            self.maybe_prepare();
            return Ok(Some(Appended::Written { segment: index, offset: frame, bytes: needed }));
        }
        seg.map[data_at..data_at + bound].fill(0);
        // Stored raw: same strings (already defined just before `frame`), so no new definitions.
        seg.pos = frame;
        self.counts.bytes_out += frame - pos;
        let enc = DataEncoding::Raw;
        let r = self.append(Msg::Tensor { meta, stats, histogram, hash, size, enc }, raw)?;
        Ok(Some(match r {
            Appended::Written { segment, offset, bytes } => {
                Appended::Written { segment, offset, bytes: bytes + (frame - pos) }
            }
            stopped => stopped,
        }))
    }

    /// Appends an op-debug (overflow) record.
    pub fn append_overflow(&mut self, rec: &OverflowInfo) -> Result<Appended> {
        if self.policy.stopped() {
            self.counts.refused_after_stop += 1;
            return Ok(Appended::Stopped);
        }
        let r = self.append(Msg::Overflow(rec), &[])?;
        self.counts.overflow_records += 1;
        Ok(r)
    }

    /// Appends a statistics-mode CSV record.
    pub fn append_stats_csv(&mut self, rec: &StatsCsv) -> Result<Appended> {
        if self.policy.stopped() {
            self.counts.refused_after_stop += 1;
            return Ok(Appended::Stopped);
        }
        let r = self.append(Msg::Csv(rec), &[])?;
        self.counts.stats_csv_records += 1;
        Ok(r)
    }

    /// Appends a step boundary. Written even after a trigger stopped recording: it costs a few bytes and
    /// tells the reader how many steps the job ran.
    pub fn append_step_mark(&mut self, mark: &StepMark) -> Result<Appended> {
        let r = self.append(Msg::Mark(mark), &[])?;
        self.counts.step_marks += 1;
        Ok(r)
    }

    /// Appends an HCCL call. Written even after a trigger stopped recording (a few dozen bytes that keep
    /// the ranks' collective sequences whole).
    pub fn append_collective(&mut self, c: &CollectiveInfo) -> Result<Appended> {
        let r = self.append(Msg::Collective(c), &[])?;
        self.counts.collectives += 1;
        Ok(r)
    }

    /// What was written so far, for the manifest.
    pub fn summary(&self) -> StreamSummary {
        StreamSummary {
            info: self.info.clone(),
            dir: self.info.dir_name(),
            policy: self.opts.policy,
            counts: self.counts.clone(),
            triggered_at_step: self.policy.triggered_at(),
            sealed: self.sealed,
        }
    }

    /// Seals the last segment (publishes its end, flushes it to disk) and returns the summary.
    pub fn seal(mut self) -> Result<StreamSummary> {
        self.discard_preparation();
        let last = self.seg.as_ref().map(|s| (s.path.clone(), s.pos));
        self.seal_current(true)?;
        // The last segment was made at full size and is usually mostly empty: once sealed (and unmapped),
        // it is cut at its sealed end, so a small capture takes little disk. Readers stop at the sealed end.
        // Not while a reader maps it (trim_lock): the cut would fault its reads of the pages cut off.
        if let Some((path, end)) = last {
            let file = OpenOptions::new().write(true).open(&path).map_err(|e| FormatError::io(&path, &e))?;
            if super::trim_lock::may_cut(&file) {
                file.set_len(end).map_err(|e| FormatError::io(&path, &e))?;
            }
        }
        self.sealed = true;
        Ok(self.summary())
    }

    /// Drops the writer WITHOUT sealing, as a killed process would: for crash tests.
    #[doc(hidden)]
    pub fn abandon(mut self) {
        // A killed writer may leave its prepared segment behind: keep the file (readers ignore it).
        if let Some(p) = self.next.take() {
            let _ = p.thread.join();
        }
        self.seg = None;
        self.sealed = true;
    }

    /// Interns the strings of `msg` in the current segment's table (new ones go to `self.defs`) and
    /// encodes its head into `self.head`.
    fn encode(&mut self, msg: &Msg) {
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
    fn needed(&self, payload: usize) -> u64 {
        let mut total = 0;
        let mut at = 0;
        while at + 4 <= self.def_frames.len() {
            let len = u32::from_le_bytes(self.def_frames[at..at + 4].try_into().unwrap_or([0; 4])) as u64;
            total += align8(FRAME_HEADER + len);
            at += 4 + len as usize;
        }
        total + align8(FRAME_HEADER + self.head.len() as u64 + payload as u64)
    }

    fn append(&mut self, msg: Msg, payload: &[u8]) -> Result<Appended> {
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
    fn write_defs(&mut self, pos: u64) -> u64 {
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

    /// Seals the current segment and opens the next one of `size` bytes.
    fn roll(&mut self, size: u64) -> Result<()> {
        self.seal_current(false)?;
        self.open_segment(size)
    }

    fn seal_current(&mut self, sync: bool) -> Result<()> {
        if let Some(mut seg) = self.seg.take() {
            segment::store_sealed_end(&mut seg.map, seg.pos);
            // At a roll, start the write-back without waiting; at the end, wait for it.
            let flushed = if sync { seg.map.flush() } else { seg.map.flush_async() };
            flushed.map_err(|e| FormatError::io(&seg.path, &e))?;
        }
        Ok(())
    }

    fn open_segment(&mut self, size: u64) -> Result<()> {
        let sizes: Vec<u64> = self.live.iter().map(|&(_, s)| s).collect();
        for _ in 0..self.policy.evictions(&sizes, size) {
            if let Some((index, _)) = self.live.pop_front() {
                let path = self.dir.join(segment_file_name(index));
                std::fs::remove_file(&path).map_err(|e| FormatError::io(&path, &e))?;
                self.counts.segments_deleted += 1;
            }
        }
        let index = self.next_index;
        let path = self.dir.join(segment_file_name(index));
        let header = SegmentHeader {
            version: FORMAT_VERSION,
            segment_size: size,
            segment_index: index,
            stream_id: self.info.stream_id,
            created_unix_us: now_us(),
        }
        .encode();
        let map = match self.take_prepared(size).and_then(|map| self.publish_prepared(map, &path, &header)) {
            Some(map) => map,
            None => create_segment(&path, size, self.opts.preallocate, &header)?,
        };
        self.seg = Some(OpenSegment { map, path, index, pos: HEADER_LEN });
        self.live.push_back((index, size));
        self.next_index += 1;
        self.counts.segments_created += 1;
        self.strings.clear();
        self.op_in_segment = false;
        Ok(())
    }

    /// Once the current segment is half full, starts preparing the next one (of the configured size) on a
    /// helper thread, unless one is prepared already or recording has stopped. Not earlier: a stream that
    /// ends in the first half of a segment prepares nothing it would throw away. If the thread cannot be
    /// started, the roll creates the segment itself.
    fn maybe_prepare(&mut self) {
        let half_full = self.seg.as_ref().is_some_and(|s| s.pos >= s.map.len() as u64 / 2);
        if !half_full || self.next.is_some() || self.policy.stopped() {
            return;
        }
        let path = self.dir.join(PREPARED_SEGMENT_FILE);
        let (size, preallocate) = (self.opts.segment_size, self.opts.preallocate);
        let cancel = Arc::new(AtomicBool::new(false));
        let stop = cancel.clone();
        let spawned = std::thread::Builder::new()
            .name("accutrace-segprep".into())
            .spawn(move || prepare_segment(&path, size, preallocate, &stop));
        if let Ok(thread) = spawned {
            self.next = Some(Preparation { size, cancel, thread });
        }
    }

    /// The prepared segment's mapping if it has `size` bytes (waiting for the helper if it is not done).
    /// None: none was prepared, preparing failed (the helper removed its file), or it has another size (a
    /// record larger than a segment): then it stays for a later roll.
    fn take_prepared(&mut self, size: u64) -> Option<MmapMut> {
        if self.next.as_ref()?.size != size {
            return None;
        }
        match self.next.take()?.thread.join() {
            Ok(Ok(map)) => Some(map),
            _ => None,
        }
    }

    /// Writes `header` into the prepared segment and renames it to `path`, after the previous segment was
    /// sealed: readers see the new segment only then, with its header. None (file removed): the caller
    /// creates the segment itself.
    fn publish_prepared(&self, mut map: MmapMut, path: &Path, header: &[u8]) -> Option<MmapMut> {
        let tmp = self.dir.join(PREPARED_SEGMENT_FILE);
        map[..HEADER_LEN as usize].copy_from_slice(header);
        // Never replace an existing segment (rename would): the synchronous path then reports it.
        let published = std::fs::symlink_metadata(path).is_err() && std::fs::rename(&tmp, path).is_ok();
        if !published {
            drop(map);
            let _ = std::fs::remove_file(&tmp);
            return None;
        }
        Some(map)
    }

    /// Stops the helper and removes the segment it prepared (at the end of the stream).
    fn discard_preparation(&mut self) {
        if let Some(p) = self.next.take() {
            p.cancel.store(true, Ordering::Relaxed);
            if let Ok(Ok(map)) = p.thread.join() {
                drop(map);
                let _ = std::fs::remove_file(self.dir.join(PREPARED_SEGMENT_FILE));
            }
        }
    }
}

impl Drop for StreamWriter {
    fn drop(&mut self) {
        if !self.sealed {
            self.discard_preparation();
            let _ = self.seal_current(false);
        }
    }
}

/// Creates segment `path` (which must not exist) of `size` bytes, maps and pre-faults it and writes
/// `header`: the synchronous path of a roll, and the first segment.
fn create_segment(path: &Path, size: u64, preallocate: bool, header: &[u8]) -> Result<MmapMut> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| FormatError::io(path, &e))?;
    allocate(&file, size, preallocate).map_err(|e| FormatError::io(path, &e))?;
    let mut map = map_segment(&file, size).map_err(|e| FormatError::io(path, &e))?;
    prefault(&map);
    map[..HEADER_LEN as usize].copy_from_slice(header);
    Ok(map)
}

/// The helper thread's work: creates (or truncates a crash's leftover) `path`, the next segment under its
/// temporary name, gives it `size` bytes, maps and pre-faults it, `PREPARE_CHUNK` at a time, giving up
/// when `cancel` is set. The header is written at the roll. On error (or cancel) the file is removed.
fn prepare_segment(
    path: &Path,
    size: u64,
    preallocate: bool,
    cancel: &AtomicBool,
) -> std::io::Result<MmapMut> {
    let cancelled = || std::io::Error::new(std::io::ErrorKind::Interrupted, "segment preparation cancelled");
    let prepared =
        OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path).and_then(|file| {
            allocate_cancellable(&file, size, preallocate, cancel)?;
            if cancel.load(Ordering::Relaxed) {
                return Err(cancelled());
            }
            let map = map_segment(&file, size)?;
            let mut at = 0;
            while at < size {
                if cancel.load(Ordering::Relaxed) {
                    return Err(cancelled());
                }
                let len = PREPARE_CHUNK.min(size - at);
                if !prefault_range(&map, at as usize, len as usize) {
                    prefault(&map);
                    break;
                }
                at += len;
            }
            Ok(map)
        });
    if prepared.is_err() {
        let _ = std::fs::remove_file(path);
    }
    prepared
}

/// [`allocate`] in `PREPARE_CHUNK` steps (fallocate of each range, which also extends the file), checking
/// `cancel` between them; where fallocate is unsupported, or without preallocation, as [`allocate`].
fn allocate_cancellable(
    file: &File,
    size: u64,
    preallocate: bool,
    cancel: &AtomicBool,
) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    if preallocate {
        let mut at = 0;
        while at < size {
            if cancel.load(Ordering::Relaxed) {
                return Err(std::io::Error::new(std::io::ErrorKind::Interrupted, "cancelled"));
            }
            let len = PREPARE_CHUNK.min(size - at);
            if !fallocate_range(file, at, len)? {
                break;
            }
            at += len;
        }
        if at >= size {
            return Ok(());
        }
    }
    let _ = cancel;
    allocate(file, size, preallocate)
}

/// Maps `size` bytes of a segment file this writer just created.
fn map_segment(file: &File, size: u64) -> std::io::Result<MmapMut> {
    // SAFETY: the file was just created (or truncated) by this writer and has `size` bytes; only this writer
    // writes it and nobody truncates it while mapped (a reader in another process only reads, and renaming
    // the prepared file to its segment name keeps the mapping). Memory safety of the mapping then holds
    // for its lifetime, which `OpenSegment` (or the preparation) owns.
    unsafe { MmapOptions::new().len(size as usize).map_mut(file) }
}

/// Faults the pages of a fresh segment in up front, writable, in one call (`MADV_POPULATE_WRITE`, Linux
/// 5.14+): appends then copy into mapped pages without a page fault each. Best effort: where the advice is
/// unknown, ask for read-ahead instead (the pages then fault on their first write, as without it).
fn prefault(map: &MmapMut) {
    #[cfg(target_os = "linux")]
    if map.advise(memmap2::Advice::PopulateWrite).is_ok() {
        return;
    }
    let _ = map.advise(memmap2::Advice::WillNeed);
}

/// `MADV_POPULATE_WRITE` of `len` bytes at `offset` (see [`prefault`]); false where unsupported.
fn prefault_range(map: &MmapMut, offset: usize, len: usize) -> bool {
    #[cfg(target_os = "linux")]
    if map.advise_range(memmap2::Advice::PopulateWrite, offset, len).is_ok() {
        return true;
    }
    let _ = (map, offset, len);
    false
}

/// Gives the new file its size: allocated blocks (fallocate, else zeros written through the file), or a
/// sparse extend.
fn allocate(file: &File, size: u64, preallocate: bool) -> std::io::Result<()> {
    if !preallocate {
        return file.set_len(size);
    }
    #[cfg(target_os = "linux")]
    if fallocate_range(file, 0, size)? {
        return Ok(());
    }
    let zeros = vec![0u8; 1 << 20];
    let mut left = size;
    let mut w = file;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        w.write_all(&zeros[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// `fallocate(fd, 0, offset, size)`: allocates the file's blocks (reading as zeros) and extends its length
/// to `offset + size`, without writing them. Ok(false): the file system does not support it (the caller
/// writes zeros instead).
#[cfg(target_os = "linux")]
fn fallocate_range(file: &File, offset: u64, size: u64) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    let too_large = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "segment size too large");
    let len = libc::off_t::try_from(size).map_err(|_| too_large())?;
    let offset = libc::off_t::try_from(offset).map_err(|_| too_large())?;
    loop {
        // SAFETY: `file` owns an open descriptor for the whole call; fallocate reads only its integer
        // arguments and touches no memory of this process.
        let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, offset, len) };
        if r == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// Generous upper bound of the bytes an op record and its string definitions take in a fresh segment.
fn op_upper_bound(op: &OpInfo) -> u64 {
    let strings: u64 = [&op.name, &op.op_type].iter().map(|s| s.len() as u64 + 32).sum::<u64>()
        + op.original_names.iter().map(|s| s.len() as u64 + 32).sum::<u64>();
    strings + op.dump_file.len() as u64 + 128 + 16 * op.original_names.len() as u64
}

#[cfg(test)]
mod tests {
    use super::super::reader::{CaptureRun, Record};
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn preallocation_allocates_blocks_and_sparse_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let size = 4 << 20;
        let dense = File::create(dir.path().join("dense")).unwrap();
        allocate(&dense, size, true).unwrap();
        let m = dense.metadata().unwrap();
        assert_eq!(m.len(), size);
        assert!(m.blocks() * 512 >= size, "{} blocks for {size} bytes", m.blocks());
        let sparse = File::create(dir.path().join("sparse")).unwrap();
        allocate(&sparse, size, false).unwrap();
        let m = sparse.metadata().unwrap();
        assert_eq!(m.len(), size);
        assert!(m.blocks() * 512 < size);
        // Preallocated space reads as zeros (the reader's "end of frames").
        let bytes = std::fs::read(dir.path().join("dense")).unwrap();
        assert!(bytes.iter().all(|&b| b == 0));
    }

    #[test]
    fn shuffle_buffer_and_zstd_context_reuse_across_sizes_and_levels_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let info = StreamInfo { stream_id: 1, rank: None, device: 0, pid: 1, host: String::new() };
        let mut w = StreamWriter::create(dir.path(), info, 1 << 20, Policy::KeepAll).unwrap();
        w.append_op(&OpInfo { name: "op".into(), ..Default::default() }).unwrap();
        // Large, small, large again, odd: a stale buffer tail or a wrong length would corrupt the data.
        let datas: Vec<Vec<u8>> = [40_000usize, 1_000, 40_002, 7]
            .iter()
            .map(|&n| (0..n).map(|i| ((i / 2) % 13) as u8 * ((i % 2) as u8)).collect())
            .collect();
        for (i, d) in datas.iter().enumerate() {
            let meta = TensorMeta {
                io: Io::Output,
                index: i as u32,
                dtype: crate::DType::FLOAT16,
                format: 2,
                sub_format: 0,
                device_shape: vec![d.len() as u64 / 2],
                original_shape: None,
                original_op: None,
            };
            let stats = TensorStats::default();
            // The level (and with it the zstd parameters) changes between tensors too.
            let level = [1, 3, 1, -1][i];
            w.append_tensor(&meta, &stats, crate::stats::content_hash(d), Some(d), level).unwrap();
        }
        w.seal().unwrap();
        let got: Vec<Vec<u8>> = tensors_read_back(dir.path()).into_iter().map(|t| t.2).collect();
        assert_eq!(got, datas);
    }

    /// Every tensor of the run in `dir`, read back: original op name, encoding, data.
    fn tensors_read_back(dir: &Path) -> Vec<(Option<String>, DataEncoding, Vec<u8>)> {
        let run = CaptureRun::open(dir).unwrap();
        let mut got = Vec::new();
        for rec in run.streams[0].records() {
            if let Record::Tensor(t) = rec.unwrap().record {
                let mut buf = Vec::new();
                t.read_data(&mut buf).unwrap();
                got.push((t.meta.original_op.map(|o| o.name.to_string()), t.encoding, buf));
            }
        }
        got
    }

    fn fp16_meta(index: u32, len: usize, original: Option<&str>) -> TensorMeta {
        TensorMeta {
            io: Io::Output,
            index,
            dtype: crate::DType::FLOAT16,
            format: 2,
            sub_format: 0,
            device_shape: vec![len as u64 / 2],
            original_shape: None,
            original_op: original.map(|n| OriginalOp { name: n.into(), output_index: 0 }),
        }
    }

    #[test]
    fn in_place_and_buffered_paths_keep_strings_data_and_zero_tail() {
        let dir = tempfile::tempdir().unwrap();
        let info = StreamInfo { stream_id: 1, rank: None, device: 0, pid: 1, host: String::new() };
        let seg = 64 << 10;
        let mut w = StreamWriter::create(dir.path(), info, seg, Policy::KeepAll).unwrap();
        w.append_op(&OpInfo { name: "op".into(), ..Default::default() }).unwrap();
        // 1: incompressible, in place -> stored raw where zstd wrote (its bytes cleared past the frame).
        // 2: compressible, its worst case does not fit the rest of the segment but its real size does: the
        //    buffered path, in the same segment, with a NEW string (interned once, defined once).
        // 3: compressible, in place, another new string.
        let names = [None, Some("fused_a"), Some("fused_b")];
        let mut datas = vec![super::super::test_noise(20_000, 7)];
        let mut where_ = Vec::new();
        for i in 0..3 {
            if i == 1 {
                // Just too large for the worst case (compress_bound > len) in the room left.
                let Some(&Appended::Written { offset, bytes, .. }) = where_.last() else { panic!() };
                let room = (seg - (offset + bytes)) as usize;
                datas.push(vec![0u8; (room - 100) & !1]);
                assert!(zstd::zstd_safe::compress_bound(room - 100) > room);
            }
            if i == 2 {
                datas.push(vec![1u8; 8_000]);
            }
            let d = &datas[i];
            let meta = fp16_meta(i as u32, d.len(), names[i]);
            let hash = crate::stats::content_hash(d);
            where_.push(w.append_tensor(&meta, &TensorStats::default(), hash, Some(d), 1).unwrap());
        }
        let segs: Vec<u64> = where_
            .iter()
            .map(|a| match a {
                Appended::Written { segment, .. } => *segment,
                Appended::Stopped => panic!("stopped"),
            })
            .collect();
        assert_eq!(segs, [0, 0, 0], "all in the first segment");
        let summary = w.seal().unwrap();
        assert_eq!(summary.counts.tensors_with_data, 3);
        let got = tensors_read_back(dir.path());
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].1, DataEncoding::Raw);
        assert_eq!(got[1].1, DataEncoding::Zstd { shuffle_width: 2 });
        assert_eq!(got[2].1, DataEncoding::Zstd { shuffle_width: 2 });
        for ((name, _, data), (want_name, want)) in got.iter().zip(names.iter().zip(&datas)) {
            assert_eq!(name.as_deref(), *want_name);
            assert_eq!(data, want);
        }
        // Everything past the sealed end is zero.
        let run = CaptureRun::open(dir.path()).unwrap();
        let file =
            std::fs::read(dir.path().join(run.streams[0].info().dir_name()).join("seg-000000.acc")).unwrap();
        let end = segment::sealed_end(&file) as usize;
        assert!(end > 64 && file[end..].iter().all(|&b| b == 0));
    }
}
