//! The reader: maps a run's segments and walks their records in order, zero-copy. Metadata (op, tensor
//! metadata, statistics, hash) is decoded from the frame head; tensor data is only touched by
//! [`CapturedTensor::read_data`], so scanning a capture costs time proportional to its records, not its bytes.
//!
//! Integrity: the last segment of a stream may be unsealed (the writer was killed). Its records are read up
//! to the first position that is not a valid frame; that position is the stream's [`TornTail`]. A bad frame
//! anywhere else (a sealed segment, or an unsealed one with valid frames after the bad one) is corruption
//! and is reported as a [`FormatError`] naming the file and offset.

use super::collective::CollectiveInfo;
use super::manifest::{read_json, Manifest, StreamInfo, MANIFEST_FILE, STREAM_FILE};
use super::planes::{
    decodes_in_windows, window_scratch_max, Joined, Pieces, PlaneBytes, Windows, WINDOW_BYTES,
};
use super::record::*;
use super::segment::{self, Frame, SegmentHeader, HEADER_LEN};
use super::zstd_frames::{decompress, scan_frames, zstd_pieces};
use super::{parse_segment_file_name, shuffle, trim_lock};
use crate::histogram::Histogram;
use crate::stats::{content_hash, TensorStats};
use crate::{FormatError, Result};
use accutrace_proto::capture as pb;
use memmap2::Mmap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// A capture run directory: its manifest (when there is one) and its streams.
pub struct CaptureRun {
    /// The run directory.
    pub dir: PathBuf,
    /// `manifest.json`, absent when the collector died before writing it.
    pub manifest: Option<Manifest>,
    /// Streams, sorted by stream id.
    pub streams: Vec<StreamReader>,
}

impl CaptureRun {
    /// Opens every stream directory (a directory holding `stream.json`) of `dir`.
    pub fn open(dir: &Path) -> Result<CaptureRun> {
        let manifest = if dir.join(MANIFEST_FILE).exists() { Some(Manifest::read(dir)?) } else { None };
        let mut streams = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| FormatError::io(dir, &e))? {
            let path = entry.map_err(|e| FormatError::io(dir, &e))?.path();
            if path.join(STREAM_FILE).is_file() {
                streams.push(StreamReader::open(&path)?);
            }
        }
        streams.sort_by_key(|s| s.info.stream_id);
        // One batch of releases for the run, shared among its streams: a stream read early in a diff
        // would otherwise keep up to a batch mapped until the end, as would every other (a capture of 64
        // ranks is 64 streams). Where the share falls below a payload, each read is released at once, as
        // before batches.
        let share = RELEASE_BATCH / streams.len().max(1) as u64;
        for stream in &mut streams {
            stream.release_batch = share;
        }
        Ok(CaptureRun { dir: dir.to_path_buf(), manifest, streams })
    }
}

/// Where a stream's records end without a clean seal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// The segment file (the stream directory when no segment exists).
    pub segment: PathBuf,
    /// Offset in it where the records end.
    pub offset: u64,
    /// What was found there.
    pub reason: String,
}

struct Segment {
    path: PathBuf,
    index: u64,
    map: Mmap,
    /// Records lie in `HEADER_LEN..end`.
    end: u64,
    /// Sealed: every frame before `end` must be valid.
    sealed: bool,
    /// The open file holding the shared lock that keeps a sealing writer from cutting the mapped file.
    _lock: std::fs::File,
}

/// One stream: its segments, mapped, in order.
pub struct StreamReader {
    dir: PathBuf,
    info: StreamInfo,
    segments: Vec<Segment>,
    torn_tail: Option<TornTail>,
    /// Ranges read and not yet let go of, gathered into batches ([`Releases`]).
    releases: Mutex<Releases>,
    /// The bytes of a batch: [`RELEASE_BATCH`], shared among the streams of a [`CaptureRun`].
    release_batch: u64,
}

/// Bytes of segment ranges that decodes and [`StreamReader::release_tensor_data_at`] leave mapped before
/// they are let go of together ([`StreamReader::release_pending`]): per stream opened alone, and per run
/// for the streams of a [`CaptureRun`], which share it equally.
pub const RELEASE_BATCH: u64 = 4 << 20;

/// Ranges that reads leave waiting before they are let go of together, whatever their bytes.
const RELEASE_RANGES: usize = 256;

/// Ranges of one segment at most this far apart are let go of as one, with what lies between them (the next
/// record's head, the page two payloads share): the kernel's fault-around window, which read faults may have
/// mapped there anyway.
const RELEASE_JOIN_GAP: u64 = FAULT_AROUND_BYTES as u64;

/// Ranges of a stream's segments whose bytes have been read (decoded payloads, compared repeats), waiting
/// to leave the mapping together. Every `madvise` that unmaps pages ends with a TLB shootdown: an interrupt
/// to each other CPU that runs one of this process's threads, which on a VM is a trap per CPU. With one call
/// per tensor, madvise was 10% of an outputs-only diff's CPU on 2 vCPUs, 7 points of it those interrupts
/// (main `94da7a1`, both vCPUs running the diff). The ranges are let go of once they add up to a batch
/// ([`RELEASE_BATCH`], or a run's streams' share of it) or `RELEASE_RANGES` ranges, sorted, with neighbours
/// in one segment joined into one call; so at most that much more stays mapped than with a release per
/// read.
#[derive(Default)]
struct Releases {
    /// (position of the segment in `segments`, start, end), in the order they came.
    ranges: Vec<(usize, u64, u64)>,
    /// Their lengths added up.
    bytes: u64,
}

impl StreamReader {
    /// Maps the segments of a stream directory and checks their headers; finds the torn tail.
    pub fn open(dir: &Path) -> Result<StreamReader> {
        let info: StreamInfo = read_json(&dir.join(STREAM_FILE))?;
        let mut files: Vec<(u64, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| FormatError::io(dir, &e))? {
            let path = entry.map_err(|e| FormatError::io(dir, &e))?.path();
            if let Some(index) = path.file_name().and_then(|n| n.to_str()).and_then(parse_segment_file_name) {
                files.push((index, path));
            }
        }
        // A gap in the indices (a lost segment) is not an error here: segments are self-contained, so the
        // others are read, and `capture::completeness` reports what is missing.
        files.sort();
        let mut segments = Vec::new();
        let mut torn_tail = None;
        let last = files.len().saturating_sub(1);
        for (i, (index, path)) in files.into_iter().enumerate() {
            let file = std::fs::File::open(&path).map_err(|e| FormatError::io(&path, &e))?;
            // Before the length is taken: a writer sealing the stream cuts the last segment only while no
            // reader holds this lock (trim_lock), and the lock lasts as long as the segment is mapped.
            trim_lock::hold_for_reading(&file);
            // SAFETY: the mapping is read-only. Segments are append-only files that no one truncates while
            // they are read (the one cut, at the seal, waits for the lock taken above); a live writer (possibly
            // in another process) only writes past the committed frames, and the words it races on (commit
            // word, sealed end) are read atomically (segment.rs).
            let map = unsafe { Mmap::map(&file) }.map_err(|e| FormatError::io(&path, &e))?;
            match open_segment(&map, index, i == last) {
                Ok((end, sealed, tail)) => {
                    if let Some((offset, reason)) = tail {
                        torn_tail = Some(TornTail { segment: path.clone(), offset, reason });
                    }
                    segments.push(Segment { path, index, map, end, sealed, _lock: file });
                }
                Err(e) => return Err(e.in_file(&path)),
            }
        }
        if segments.is_empty() {
            torn_tail = Some(TornTail { segment: dir.to_path_buf(), offset: 0, reason: "no segment".into() });
        }
        Ok(StreamReader {
            dir: dir.to_path_buf(),
            info,
            segments,
            torn_tail,
            releases: Mutex::default(),
            release_batch: RELEASE_BATCH,
        })
    }

    /// Who wrote the stream.
    pub fn info(&self) -> &StreamInfo {
        &self.info
    }

    /// The stream directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The segment files, in order.
    pub fn segment_paths(&self) -> impl Iterator<Item = &Path> {
        self.segments.iter().map(|s| s.path.as_path())
    }

    /// The indices of the segments found, ascending (contiguous unless segments were lost).
    pub fn segment_indices(&self) -> impl Iterator<Item = u64> + '_ {
        self.segments.iter().map(|s| s.index)
    }

    /// Segment files longer than the size their header gives, with the bytes past it: nothing the writer
    /// made (it sizes each file exactly), so something was appended to the file after the capture.
    pub fn bytes_past_segment_size(&self) -> Vec<(&Path, u64)> {
        self.segments
            .iter()
            .filter_map(|s| {
                let size = SegmentHeader::decode(&s.map).ok().flatten()?.segment_size;
                let len = s.map.len() as u64;
                (len > size).then(|| (s.path.as_path(), len - size))
            })
            .collect()
    }

    /// Reads every byte of every mapped segment, up to the length the file had when it was mapped, and
    /// returns their sum: for tests that a segment stays readable while mapped (a file cut under a mapping
    /// faults with SIGBUS).
    #[doc(hidden)]
    pub fn sum_of_mapped_bytes(&self) -> u64 {
        self.segments.iter().flat_map(|s| s.map.iter()).map(|&b| u64::from(b)).sum()
    }

    /// Where the records end when the stream was not sealed (the writer died): the last segment and offset.
    pub fn torn_tail(&self) -> Option<&TornTail> {
        self.torn_tail.as_ref()
    }

    /// The records in the order they were written.
    pub fn records(&self) -> Records<'_> {
        Records {
            stream: self,
            seg: 0,
            pos: HEADER_LEN,
            strings: Vec::new(),
            op: None,
            prev_op: None,
            done: false,
        }
    }
}

/// Checks a segment's header and finds where its records end: (end, sealed, torn tail).
/// A segment's extent: (end of its records, sealed, torn tail (offset, why)).
type Extent = (u64, bool, Option<(u64, String)>);

fn open_segment(map: &[u8], index: u64, last: bool) -> Result<Extent> {
    let header = match SegmentHeader::decode(map) {
        Ok(Some(h)) => h,
        // A header that was never completely written: only the creation of the last segment was torn.
        Ok(None) | Err(_) if last && map.iter().skip(HEADER_LEN as usize).all(|&b| b == 0) => {
            return Ok((HEADER_LEN, false, Some((0, "segment header never completed".into()))));
        }
        Ok(None) => return Err(FormatError::at(0, "segment header is zero but records follow")),
        Err(e) => return Err(e),
    };
    if header.segment_index != index {
        return Err(FormatError::at(
            24,
            format!("header says segment {} but the file name {index}", header.segment_index),
        ));
    }
    let file_len = map.len() as u64;
    let sealed_end = segment::sealed_end(map);
    if sealed_end != 0 {
        if sealed_end < HEADER_LEN || sealed_end > header.segment_size || sealed_end > file_len {
            return Err(FormatError::at(
                56,
                format!("sealed end {sealed_end} outside the segment ({file_len} bytes)"),
            ));
        }
        return Ok((sealed_end, true, None));
    }
    if !last {
        return Err(FormatError::at(56, "segment is not sealed but later segments exist"));
    }
    // The open segment of a killed writer: walk the frames to the first position that is not one.
    let limit = header.segment_size.min(file_len);
    let mut pos = HEADER_LEN;
    loop {
        match segment::frame_at(map, pos, limit) {
            Frame::Valid { next, .. } => pos = next,
            Frame::Empty => return tail(map, pos, limit, "no record committed here".into()),
            Frame::Bad(why) => return tail(map, pos, limit, why),
        }
    }
}

/// The records of an open segment end at `pos`. That is a torn tail unless a valid frame follows, which
/// means data was lost in the middle: corruption.
fn tail(map: &[u8], pos: u64, limit: u64, why: String) -> Result<Extent> {
    let mut probe = pos + 8;
    while probe + segment::FRAME_HEADER <= limit {
        let word = &map[probe as usize..probe as usize + 4];
        if word != [0, 0, 0, 0] && matches!(segment::frame_at(map, probe, limit), Frame::Valid { .. }) {
            return Err(FormatError::at(
                pos,
                format!("corrupt record ({why}) before the committed record at {probe}"),
            ));
        }
        probe += 8;
    }
    Ok((pos, false, Some((pos, why))))
}

/// A record and where it is.
#[derive(Debug)]
pub struct RecordRef<'a> {
    /// The segment file.
    pub segment: &'a Path,
    /// The segment's index in the stream.
    pub segment_index: u64,
    /// The frame's offset in the segment file.
    pub offset: u64,
    /// The record.
    pub record: Record<'a>,
}

/// A record of a stream (string definitions are resolved by the iterator and not returned).
#[derive(Debug)]
pub enum Record<'a> {
    /// An operator execution.
    Op(Arc<OpInfo>),
    /// A tensor of the preceding op.
    Tensor(CapturedTensor<'a>),
    /// An op-debug (overflow) record.
    Overflow(OverflowInfo),
    /// A statistics-mode CSV record.
    StatsCsv(StatsCsv),
    /// A step boundary (format version 2).
    StepMark(StepMark),
    /// An HCCL call (format version 3).
    Collective(CollectiveInfo),
    /// A kind this build does not know (skipped safely: its frame is valid).
    Unknown {
        /// The record kind.
        kind: u8,
    },
}

/// A tensor record: everything but the data is decoded; the data stays in the mapping until asked for.
#[derive(Debug, Clone)]
pub struct CapturedTensor<'a> {
    /// The op it belongs to.
    pub op: Arc<OpInfo>,
    /// Metadata.
    pub meta: TensorMeta,
    /// Statistics.
    pub stats: TensorStats,
    /// The values' histogram, when the writer computed one (format version 4, `ACCUTRACE_HISTOGRAM`).
    pub histogram: Option<Box<Histogram>>,
    /// XXH3-64 of the raw bytes ([`content_hash`]).
    pub content_hash: u64,
    /// Raw size of the data in bytes (when stored).
    pub data_size: u64,
    /// How the data is stored.
    pub encoding: DataEncoding,
    payload: &'a [u8],
    payload_offset: u64,
    path: &'a Path,
}

impl CapturedTensor<'_> {
    /// Whether the record carries the tensor's data.
    pub fn has_data(&self) -> bool {
        self.encoding != DataEncoding::None
    }

    /// Bytes the data takes in the segment.
    pub fn stored_size(&self) -> u64 {
        self.payload.len() as u64
    }

    /// The data as stored (compressed and shuffled per [`encoding`](Self::encoding)): for benchmarks that
    /// time the decompressor alone on a capture's own frames.
    #[doc(hidden)]
    pub fn stored_bytes(&self) -> &[u8] {
        self.payload
    }

    /// Decodes the data into `out` (resized to `data_size`) and checks it against the content hash.
    pub fn read_data(&self, out: &mut Vec<u8>) -> Result<()> {
        self.read_data_with(out, &mut Vec::new())
    }

    /// [`read_data`](Self::read_data) with a caller-owned scratch buffer (for the shuffled bytes).
    pub fn read_data_with(&self, out: &mut Vec<u8>, scratch: &mut Vec<u8>) -> Result<()> {
        let stored = StoredData {
            encoding: self.encoding,
            payload: self.payload,
            payload_offset: self.payload_offset,
            data_size: self.data_size,
            content_hash: self.content_hash,
        };
        stored.decode(self.path, out, scratch)
    }
}

/// A tensor record's data as stored: enough to decode and verify it without the rest of the record.
struct StoredData<'a> {
    encoding: DataEncoding,
    payload: &'a [u8],
    payload_offset: u64,
    data_size: u64,
    content_hash: u64,
}

impl StoredData<'_> {
    /// An error at the payload, in `path`.
    fn error(&self, path: &Path, problem: String) -> FormatError {
        FormatError::at(self.payload_offset, problem).in_file(path)
    }

    /// The data as byte planes of `width`-byte elements (width 1: in order): the payload itself when stored
    /// raw, else decompressed into `scratch`.
    fn planes<'s>(&'s self, path: &Path, scratch: &'s mut Vec<u8>) -> Result<(&'s [u8], usize)> {
        match self.encoding {
            DataEncoding::None => Err(self.error(path, "the tensor was recorded without data".into())),
            DataEncoding::Raw => {
                if self.payload.len() as u64 != self.data_size {
                    return Err(self.error(
                        path,
                        format!("{} data bytes stored, {} recorded", self.payload.len(), self.data_size),
                    ));
                }
                Ok((self.payload, 1))
            }
            DataEncoding::Zstd { shuffle_width } => {
                decompress(self.payload, self.data_size, scratch).map_err(|e| self.error(path, e))?;
                Ok((scratch.as_slice(), shuffle_width as usize))
            }
        }
    }

    /// [`planes`](Self::planes) for reading block by block: where zstd stored some frames' blocks as they
    /// are (the flat planes, whose literals the writer does not compress), those blocks are lent from the
    /// payload instead of copied out of it ([`zstd_pieces`]); the other frames are decoded into `scratch`.
    /// Data longer than a window, written in frames a window takes, is decoded a window at a time as it is
    /// read ([`Windows`]): `scratch` then holds a window's frames, not the whole planes. Anything else, or
    /// anything [`zstd_pieces`] does not take, is [`planes`](Self::planes)' whole decode, with its errors.
    /// `window`: the data bytes a window makes readable ([`WINDOW_BYTES`] but in tests).
    fn plane_bytes<'s>(
        &'s self,
        path: &Path,
        scratch: &'s mut Vec<u8>,
        window: usize,
    ) -> Result<(PlaneBytes<'s>, usize)> {
        if let DataEncoding::Zstd { shuffle_width } = self.encoding {
            let (width, len) = (shuffle_width as usize, self.data_size as usize);
            if let Some(frames) = self.windowed_frames(window) {
                let windows = Windows::new(self.payload, frames, scratch, len, window);
                return Ok((PlaneBytes::Windows(windows), width));
            }
            if let Some(pieces) = zstd_pieces(self.payload, self.data_size, scratch) {
                return Ok((PlaneBytes::Pieces(Pieces::new(pieces, self.payload, scratch, len)), width));
            }
        }
        let (planes, width) = self.planes(path, scratch)?;
        Ok((PlaneBytes::Whole(planes), width))
    }

    /// The payload's frames, where the data is read `window` bytes at a time ([`decodes_in_windows`]).
    fn windowed_frames(&self, window: usize) -> Option<Vec<super::zstd_frames::Frame>> {
        let len = usize::try_from(self.data_size).ok()?;
        if !matches!(self.encoding, DataEncoding::Zstd { .. }) || len <= window {
            return None;
        }
        scan_frames(self.payload, self.data_size).filter(|frames| decodes_in_windows(frames, len, window))
    }

    /// `f` over the data read block by block ([`TensorBlocks`]; zstd's frames in `scratch`, a `window` at a
    /// time where they are read so), then what `f` left is read: `f`'s result once the whole data matched
    /// its content hash, else the error `read_tensor_data_at` gives.
    fn read_blocks_with<R>(
        &self,
        path: &Path,
        scratch: &mut Vec<u8>,
        window: usize,
        f: impl FnOnce(&mut TensorBlocks<'_>) -> R,
    ) -> Result<R> {
        let (planes, width) = self.plane_bytes(path, scratch, window)?;
        let mut blocks = TensorBlocks::new(planes, width);
        let result = f(&mut blocks);
        match blocks.finish() {
            Some(hash) => self.check_hash(path, hash).map(|()| result),
            None => Err(self.whole_decode_error(path, scratch)),
        }
    }

    /// Decodes into `out` (its old contents are overwritten, never zeroed first: a reused buffer costs no
    /// fill), with `scratch` for the shuffled bytes.
    fn decode(&self, path: &Path, out: &mut Vec<u8>, scratch: &mut Vec<u8>) -> Result<()> {
        let (planes, width) = match self.planes(path, scratch) {
            Ok(planes) => planes,
            Err(e) => {
                out.clear();
                return Err(e);
            }
        };
        if width <= 1 {
            out.clear();
            out.extend_from_slice(planes);
        } else {
            // Shrinking writes nothing, growing zeroes only the new part; unshuffle writes every byte.
            out.resize(planes.len(), 0);
            shuffle::unshuffle(planes, width, out);
        }
        self.check_hash(path, content_hash(out))
    }

    /// The whole decode's error, for data whose frames zstd failed on while they were read a window at a
    /// time ([`Windows`]): the error `read_tensor_data_at` gives.
    fn whole_decode_error(&self, path: &Path, scratch: &mut Vec<u8>) -> FormatError {
        match self.planes(path, scratch) {
            Err(e) => e,
            Ok(_) => self.error(path, "a zstd frame of the data failed to decode".into()),
        }
    }

    fn check_hash(&self, path: &Path, hash: u64) -> Result<()> {
        if hash != self.content_hash {
            return Err(self.error(path, "tensor data does not match its content hash".into()));
        }
        Ok(())
    }
}

/// At most how many bytes of decoded zstd frames [`StreamReader::with_tensor_blocks_at`] holds for
/// `width`-byte elements where it reads the data a window at a time
/// ([`StreamReader::blocks_scratch_bytes`] says where).
pub fn blocks_scratch_max(width: usize) -> u64 {
    window_scratch_max(width) as u64
}

/// A tensor's data read in order, block by block, from its byte planes ([`StreamReader::with_tensor_blocks_at`]):
/// each block is unshuffled into the caller's buffer (raw data is lent as stored) and hashed as it is read,
/// so no unshuffled copy of the whole tensor is written and read back. The content hash is checked when the
/// reading ends: what was learnt from the blocks stands only once that check passed.
pub struct TensorBlocks<'a> {
    planes: PlaneBytes<'a>,
    width: usize,
    /// Bytes handed out so far.
    pos: usize,
    hasher: crate::hash::Xxh3,
    joined: Joined,
    /// zstd failed on a frame read a window at a time ([`Windows`]): what was read is not the data, and
    /// the read reports the whole decode's error ([`StreamReader::with_tensor_blocks_at`]).
    failed: bool,
}

/// The bytes [`TensorBlocks::decode_f32_into`] decodes at a time: whole elements of every width (up to 16
/// bytes), and whole steps of the hardware fp16 conversion (8 values), so that every block but the last
/// takes the path a whole decode gives the same values, and the last the same ragged tail.
const DECODE_BLOCK: usize = 32 << 10;
const _: () = assert!(DECODE_BLOCK.is_multiple_of(16 * 8));

/// Data of at least this many bytes is decoded to f32 on several threads where the pool has them
/// ([`TensorBlocks::decode_in_parallel`]). Below it the tasks would cost more than they save, and compare
/// runs pairs of such tensors on every thread at once where the memory budget lets it (the largest tensors
/// of a medium:4 capture, 1 MiB of fp16, on both threads of a 2-core machine), so that splitting their
/// decode would only add the tasks' cost.
const PARALLEL_DECODE_MIN: usize = 2 << 20;
/// The bytes one parallel task unshuffles and decodes: whole [`DECODE_BLOCK`]s, so that its blocks start
/// where the serial loop's do.
const PARALLEL_CHUNK: usize = 2 * DECODE_BLOCK;
/// At most this many chunks at once: the two wave buffers (one decoded while the other is hashed) hold at
/// most 2 x 16 x 64 KiB = 2 MiB while a tensor is read.
const PARALLEL_WAVE_MAX: usize = 16;
/// At least this many chunks at once, however few the threads: each wave costs a join and a wake-up.
const PARALLEL_WAVE_MIN: usize = 8;

/// The two wave buffers of a parallel decode (at most 2 x `PARALLEL_WAVE_MAX` x `PARALLEL_CHUNK` =
/// 2 MiB), kept per thread between tensors: allocated and freed per tensor, on whichever thread of the pool
/// read it, they stayed behind in that thread's malloc arena (compare on 16 cores: 91 MiB anonymous against
/// 60 with glibc's mmap threshold fixed). A reader that runs reads on other threads for one thread lends
/// them with [`swap_wave_buffers`], so that they stay that thread's.
#[derive(Debug, Default)]
pub struct WaveBuffers(Vec<u8>, Vec<u8>);

thread_local! {
    static WAVE_BUFFERS: std::cell::RefCell<WaveBuffers> =
        const { std::cell::RefCell::new(WaveBuffers(Vec::new(), Vec::new())) };
}

/// Swaps `buffers` with this thread's wave buffers ([`WaveBuffers`]).
pub fn swap_wave_buffers(buffers: &mut WaveBuffers) {
    WAVE_BUFFERS.with(|b| std::mem::swap(&mut *b.borrow_mut(), buffers));
}

impl WaveBuffers {
    /// Bytes they hold.
    pub fn capacity(&self) -> usize {
        self.0.capacity() + self.1.capacity()
    }
}

impl<'a> TensorBlocks<'a> {
    fn new(planes: PlaneBytes<'a>, width: usize) -> TensorBlocks<'a> {
        let (hasher, joined) = (crate::hash::Xxh3::new(), Joined::default());
        TensorBlocks { planes, width, pos: 0, hasher, joined, failed: false }
    }

    /// The data's size in bytes.
    pub fn len(&self) -> usize {
        self.planes.len()
    }

    /// Whether the data is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next `min(buf.len(), bytes left)` bytes of the data, unshuffled into `buf` or lent as stored.
    pub fn next_block<'s>(&'s mut self, buf: &'s mut [u8]) -> &'s [u8] {
        let n = buf.len().min(self.len() - self.pos);
        self.failed = self.failed || !self.planes.prepare(self.width, self.pos, self.pos + n);
        if self.failed {
            // Not the data: zeros stand in for it, and the read reports the error once `f` returns.
            self.pos += n;
            buf[..n].fill(0);
            return &buf[..n];
        }
        let block = self.planes.read(self.width, self.pos, &mut buf[..n], &mut self.joined);
        self.hasher.update(block);
        self.pos += n;
        block
    }

    /// Decodes the data as `dtype` values into `out` (one lane per element, two for complex; resized to
    /// fit, its memory reused and only its growth zeroed), block by block as it is read: the values
    /// [`decode_reusing`](crate::tensor::host::decode_reusing) gives for the whole bytes, bit for bit,
    /// without a copy of the whole bytes. `Ok(false)`, with nothing read, where the data is not whole
    /// elements of `dtype` (or `dtype` has sub-byte elements, or none that decode) or some was read already:
    /// the caller then decodes the whole bytes, which reports what is wrong. Like everything read from the
    /// blocks, the values stand only once the content hash has matched
    /// ([`StreamReader::with_tensor_blocks_at`]).
    pub fn decode_f32_into(&mut self, dtype: crate::DType, out: &mut Vec<f32>) -> Result<bool> {
        self.decode_f32_into_from(dtype, out, PARALLEL_DECODE_MIN, |threads| {
            threads.clamp(PARALLEL_WAVE_MIN, PARALLEL_WAVE_MAX)
        })
    }

    /// Decodes the data, device values of `dtype` in device order, into `out` in the host layout that `runs`
    /// describes (resized to its host elements, one lane each, two for complex; memory reused): each block
    /// as it is read is put where its runs go, so the device-order values are never held whole. The values
    /// [`decode_f32_into`](Self::decode_f32_into) and `layout::to_host_into` give together, bit for bit.
    /// `Ok(false)`, with nothing read, where [`decode_f32_into`](Self::decode_f32_into) would give it, or the
    /// data is not `runs`' device elements.
    pub fn decode_device_runs_into(
        &mut self,
        dtype: crate::DType,
        runs: &crate::layout::DeviceRuns,
        out: &mut Vec<f32>,
    ) -> Result<bool> {
        let width = match dtype.bits() {
            Some(bits) if bits >= 8 && bits % 8 == 0 => bits as usize / 8,
            _ => return Ok(false),
        };
        let lanes = crate::tensor::lanes_per_element(dtype);
        let whole = self.pos == 0 && self.len().is_multiple_of(width) && dtype.is_decodable();
        let host = usize::try_from(runs.host_len()).ok().and_then(|n| n.checked_mul(lanes));
        let (true, Some(host)) = (whole && (self.len() / width) as u64 == runs.device_len(), host) else {
            return Ok(false);
        };
        if out.len() < host {
            out.resize(host, 0.0);
        } else {
            out.truncate(host);
        }
        // The device elements `first..end` decoded into `values`, a block at a time as the runs reach them:
        // the serial loop's blocks, so the same values.
        let (mut bytes, mut values) = (vec![0u8; DECODE_BLOCK], vec![0f32; DECODE_BLOCK / width * lanes]);
        let (mut first, mut end, mut failed) = (0u64, 0u64, None);
        runs.for_each(|device, host, step, len| {
            let mut done = 0;
            while done < len {
                let at = device + done;
                while at >= end {
                    let block = self.next_block(&mut bytes);
                    let n = block.len() / width;
                    if n == 0 {
                        // Not reached: the data holds the runs' device elements (checked above).
                        failed = Some(FormatError::at(0, "the data ended before its device elements"));
                        return false;
                    }
                    if let Err(e) = crate::tensor::decode_f32_into(dtype, block, &mut values[..n * lanes]) {
                        failed = Some(e);
                        return false;
                    }
                    (first, end) = (end, end + n as u64);
                }
                let take = (len - done).min(end - at);
                let from = &values[(at - first) as usize * lanes..][..take as usize * lanes];
                let to = (host + done * step) as usize * lanes;
                let stride = step as usize * lanes;
                if step == 1 {
                    out[to..to + from.len()].copy_from_slice(from);
                } else if lanes == 1 {
                    // One value an element (every real dtype): a plain strided store.
                    let to = &mut out[to..=to + (from.len() - 1) * stride];
                    for (o, &v) in to.iter_mut().step_by(stride).zip(from) {
                        *o = v;
                    }
                } else {
                    for (k, v) in from.chunks_exact(lanes).enumerate() {
                        out[to + k * stride..][..lanes].copy_from_slice(v);
                    }
                }
                done += take;
            }
            true
        });
        match failed {
            Some(e) => Err(e),
            None => Ok(true),
        }
    }

    /// [`decode_f32_into`](Self::decode_f32_into), split over the current rayon pool's threads
    /// ([`decode_in_parallel`](Self::decode_in_parallel), `chunks(threads)` chunks a wave) where the data is
    /// at least `parallel_min` bytes and the pool has more than one.
    fn decode_f32_into_from(
        &mut self,
        dtype: crate::DType,
        out: &mut Vec<f32>,
        parallel_min: usize,
        chunks: impl Fn(usize) -> usize,
    ) -> Result<bool> {
        let width = match dtype.bits() {
            Some(bits) if bits >= 8 && bits % 8 == 0 => bits as usize / 8,
            _ => return Ok(false),
        };
        let lanes = crate::tensor::lanes_per_element(dtype);
        let total = (self.len() / width).checked_mul(lanes);
        let Some(total) =
            total.filter(|_| dtype.is_decodable() && self.pos == 0 && self.len().is_multiple_of(width))
        else {
            return Ok(false);
        };
        if out.len() < total {
            out.resize(total, 0.0);
        } else {
            out.truncate(total);
        }
        let threads = rayon::current_num_threads();
        if self.len() >= parallel_min && threads > 1 && PARALLEL_CHUNK.is_multiple_of(width) {
            self.decode_in_parallel(dtype, width, lanes, out, chunks(threads))?;
            return Ok(true);
        }
        let mut buf = [0u8; DECODE_BLOCK];
        let mut at = 0;
        while self.pos < self.len() {
            let block = self.next_block(&mut buf);
            let n = block.len() / width * lanes;
            crate::tensor::decode_f32_into(dtype, block, &mut out[at..at + n])?;
            at += n;
        }
        Ok(true)
    }

    /// The values of `width`-byte `dtype` elements (`lanes` f32 each) decoded into `out`, which fits them,
    /// on up to `chunks` threads: the data goes in waves of `chunks` chunks of [`PARALLEL_CHUNK`] bytes,
    /// each chunk unshuffled and decoded by one task into its own part of a wave buffer and of `out`, in
    /// blocks at the offsets of the serial loop (so the same values, bit for bit), while the previous wave's
    /// bytes are hashed, in order, beside them. So the wave buffers hold the unshuffled bytes until they
    /// are hashed; data stored in order (raw, or 1-byte elements in one slice) is decoded and hashed where
    /// it lies, with no buffer. On an error, what was hashed stands as read (`pos`), so that
    /// [`finish`](Self::finish) hashes the rest as the serial loop leaves it to.
    fn decode_in_parallel(
        &mut self,
        dtype: crate::DType,
        width: usize,
        lanes: usize,
        out: &mut [f32],
        chunks: usize,
    ) -> Result<()> {
        use rayon::prelude::*;
        let len = self.len();
        let (planes, plane_width, hasher) = (&mut self.planes, self.width, &mut self.hasher);
        let in_order = planes.in_order(plane_width);
        let wave = chunks * PARALLEL_CHUNK;
        // This thread's wave buffers ([`WaveBuffers`]), grown once to the wave, then reused: no allocation or
        // zero-fill per tensor. Every byte hashed was written by this tensor's tasks first.
        let WaveBuffers(mut hashing, mut decoding) =
            WAVE_BUFFERS.with(|b| std::mem::take(&mut *b.borrow_mut()));
        if in_order.is_none() {
            for buffer in [&mut hashing, &mut decoding] {
                if buffer.len() < wave {
                    buffer.resize(wave, 0);
                }
            }
        }
        // Put back however this ends.
        struct Back(Vec<u8>, Vec<u8>);
        impl Drop for Back {
            fn drop(&mut self) {
                let buffers = WaveBuffers(std::mem::take(&mut self.0), std::mem::take(&mut self.1));
                WAVE_BUFFERS.with(|b| *b.borrow_mut() = buffers);
            }
        }
        // The bytes decoded, not yet hashed: in `hashing` (from its start) unless they are in order.
        let mut pending = 0..0;
        let mut pos = 0;
        while pos < len {
            let end = (pos + wave).min(len);
            if !planes.prepare(plane_width, pos, end) {
                // zstd failed on a frame of this window: the read reports the whole decode's error.
                self.failed = true;
                self.pos = len;
                drop(Back(hashing, decoding));
                return Ok(());
            }
            let planes = &*planes;
            let values = &mut out[pos / width * lanes..end / width * lanes];
            let unhashed = match in_order {
                Some(data) => &data[pending.clone()],
                None => &hashing[..pending.len()],
            };
            // Chunk `k` of this wave: bytes `pos + k * PARALLEL_CHUNK` on, into `buf` (empty where in order).
            let chunk = |k: usize, values: &mut [f32], buf: &mut [u8]| -> Result<()> {
                let start = pos + k * PARALLEL_CHUNK;
                let n = PARALLEL_CHUNK.min(end - start);
                let mut joined = Joined::default();
                for at in (0..n).step_by(DECODE_BLOCK) {
                    let m = DECODE_BLOCK.min(n - at);
                    let block = match in_order {
                        Some(data) => &data[start + at..start + at + m],
                        None => {
                            planes.read_into(plane_width, start + at, &mut buf[at..at + m], &mut joined);
                            &buf[at..at + m]
                        }
                    };
                    crate::tensor::decode_f32_into(
                        dtype,
                        block,
                        &mut values[at / width * lanes..(at + m) / width * lanes],
                    )?;
                }
                Ok(())
            };
            let per_chunk = PARALLEL_CHUNK / width * lanes;
            let (_, decoded) = rayon::join(
                || hasher.update(unhashed),
                || -> Vec<Result<()>> {
                    match in_order {
                        Some(_) => values
                            .par_chunks_mut(per_chunk)
                            .enumerate()
                            .map(|(k, values)| chunk(k, values, &mut []))
                            .collect(),
                        None => values
                            .par_chunks_mut(per_chunk)
                            .zip(decoding.par_chunks_mut(PARALLEL_CHUNK))
                            .enumerate()
                            .map(|(k, (values, buf))| chunk(k, values, buf))
                            .collect(),
                    }
                },
            );
            // Hashed up to here: the rest is `finish`'s if this wave failed.
            self.pos = pos;
            if let Err(e) = decoded.into_iter().collect::<Result<()>>() {
                drop(Back(hashing, decoding));
                return Err(e);
            }
            pending = pos..end;
            std::mem::swap(&mut hashing, &mut decoding);
            pos = end;
        }
        hasher.update(match in_order {
            Some(data) => &data[pending],
            None => &hashing[..pending.len()],
        });
        self.pos = len;
        drop(Back(hashing, decoding));
        Ok(())
    }

    /// Reads what is left (hashing it) and returns the hash of the whole data; `None` where zstd failed on
    /// a frame read a window at a time.
    fn finish(mut self) -> Option<u64> {
        let mut buf = [0u8; 16 << 10];
        while self.pos < self.len() && !self.failed {
            self.next_block(&mut buf);
        }
        (!self.failed).then(|| self.hasher.digest())
    }
}

impl StreamReader {
    /// Decodes the data of the tensor record at `offset` of segment `segment_index` (a place a
    /// [`RecordRef`] reported), without walking the stream: random access for analyses that pair tensors.
    pub fn read_tensor_data_at(&self, segment_index: u64, offset: u64, out: &mut Vec<u8>) -> Result<()> {
        self.read_tensor_data_at_with(segment_index, offset, out, &mut Vec::new())
    }

    /// [`read_tensor_data_at`](Self::read_tensor_data_at) with a caller-owned scratch buffer for the
    /// shuffled bytes: callers that decode many tensors reuse both buffers instead of allocating (and the
    /// kernel zeroing) two per tensor. The payload's pages are dropped from this process's mapping once
    /// decoded (`MADV_DONTNEED`: they stay in the page cache), with other reads' in batches of
    /// [`RELEASE_BATCH`] bytes, so reading a whole capture does not leave it all counted as the process's
    /// resident memory.
    pub fn read_tensor_data_at_with(
        &self,
        segment_index: u64,
        offset: u64,
        out: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        let (seg, stored) = self.stored_at(segment_index, offset)?;
        let decoded = stored.decode(&self.segments[seg].path, out, scratch);
        self.release_later(seg, stored.payload_offset, stored.payload_offset + stored.payload.len() as u64);
        decoded
    }

    /// [`read_tensor_data_at_with`](Self::read_tensor_data_at_with) for readers that take the data in
    /// order, block by block: the byte planes are decompressed into `scratch` (zstd's stored blocks are
    /// read where they lie in the segment instead), then `f` reads them through [`TensorBlocks`] (each
    /// block unshuffled into `f`'s own buffer); what `f` leaves unread is read after
    /// it returns, and `f`'s result is returned only when the whole data matches its content hash (else
    /// the same error as `read_tensor_data_at`). `f` is not called when the data cannot be decompressed,
    /// except where it is decoded a window at a time as `f` reads it (data longer than a window, see
    /// [`blocks_scratch_bytes`](Self::blocks_scratch_bytes)): a frame zstd fails on then gives zeros for the
    /// rest of the data to `f` and that same error once `f` returns.
    pub fn with_tensor_blocks_at<R>(
        &self,
        segment_index: u64,
        offset: u64,
        scratch: &mut Vec<u8>,
        f: impl FnOnce(&mut TensorBlocks<'_>) -> R,
    ) -> Result<R> {
        let (seg, stored) = self.stored_at(segment_index, offset)?;
        let path = &self.segments[seg].path;
        let read = stored.read_blocks_with(path, scratch, WINDOW_BYTES, f);
        self.release_later(seg, stored.payload_offset, stored.payload_offset + stored.payload.len() as u64);
        read
    }

    /// At most how many bytes of decoded zstd frames [`with_tensor_blocks_at`](Self::with_tensor_blocks_at)
    /// holds in its scratch while reading the tensor record at `offset` of segment `segment_index`: for data
    /// longer than a window written in frames of at most ~1 MiB (the writer's since frames were cut, see
    /// docs/CAPTURE_FORMAT.md), a window's frames, whatever the data's size; else the frames zstd decodes
    /// (the planes that compress), or the whole data where the payload's frames are not the writer's. Reads
    /// only the headers of the frames and of their blocks.
    pub fn blocks_scratch_bytes(&self, segment_index: u64, offset: u64) -> Result<u64> {
        let (_, stored) = self.stored_at(segment_index, offset)?;
        let DataEncoding::Zstd { shuffle_width } = stored.encoding else {
            return Ok(0);
        };
        let Some(frames) = scan_frames(stored.payload, stored.data_size) else {
            return Ok(stored.data_size);
        };
        let decoded: u64 = frames.iter().filter(|f| f.stored.is_none()).map(|f| f.planes.len() as u64).sum();
        if stored.windowed_frames(WINDOW_BYTES).is_some() {
            return Ok(decoded.min(window_scratch_max(shuffle_width as usize) as u64));
        }
        Ok(decoded)
    }

    /// Whether the tensor record at `offset` of segment `segment_index` and the one at `other_offset` of
    /// segment `other_segment` of `other` (this stream or another) store the same data the same way: the
    /// same encoding, data size and content hash, and payloads equal byte for byte. Decoding is
    /// deterministic, so both then decode to the same bytes, and one decode that matched its content hash
    /// vouches for the other: a tensor recorded twice (an op's output, then the next op's input) need
    /// not be decompressed twice. Nothing here trusts a hash alone: the stored bytes are compared.
    ///
    /// Both records' pages stay mapped: the check is meant to come just before the earlier record is
    /// decoded, which then reads them without faulting them in again. Both are the caller's to release
    /// after that decode ([`release_tensor_data_at`](Self::release_tensor_data_at), which also lets go of
    /// the pages the kernel mapped around them, or [`release_all`](Self::release_all)).
    pub fn same_stored_data(
        &self,
        segment_index: u64,
        offset: u64,
        other: &StreamReader,
        other_segment: u64,
        other_offset: u64,
    ) -> Result<bool> {
        let (_, stored) = self.stored_at(segment_index, offset)?;
        let (_, other_stored) = other.stored_at(other_segment, other_offset)?;
        let same = stored.encoding == other_stored.encoding
            && stored.encoding != DataEncoding::None
            && stored.data_size == other_stored.data_size
            && stored.content_hash == other_stored.content_hash
            && stored.payload == other_stored.payload;
        Ok(same)
    }

    /// Releases the pages of the tensor record at `offset` of segment `segment_index` from the mapping, as
    /// a decode does afterwards (in the same batches), with the neighbours the kernel mapped around them:
    /// for records whose payloads [`same_stored_data`](Self::same_stored_data) read. Records around a
    /// repeat are mostly repeats too, read and released earlier or never read, so what faults map around
    /// them would stay.
    pub fn release_tensor_data_at(&self, segment_index: u64, offset: u64) -> Result<()> {
        let (seg, stored) = self.stored_at(segment_index, offset)?;
        let (start, end) = self.segments[seg]
            .around(stored.payload_offset, stored.payload_offset + stored.payload.len() as u64);
        self.release_later(seg, start, end);
        Ok(())
    }

    /// Releases now what reads and [`release_tensor_data_at`](Self::release_tensor_data_at) left waiting
    /// for a full batch ([`RELEASE_BATCH`]).
    pub fn release_pending(&self) {
        let ranges = std::mem::take(&mut *self.releases());
        self.release_ranges(ranges);
    }

    /// Releases every page of every segment from this process's mapping (as [`records`](Self::records)
    /// does at each segment's end), for a caller that has no read in flight: pages the kernel mapped around
    /// the ones read, of records read and released before or never read, and the ranges waiting for a
    /// batch, go too.
    pub fn release_all(&self) {
        *self.releases() = Releases::default();
        for seg in &self.segments {
            seg.release(0, seg.map.len() as u64);
        }
    }

    /// The ranges waiting to be released. They are only ever pushed or taken whole under the lock, so a
    /// panic elsewhere while it was held leaves them usable.
    fn releases(&self) -> std::sync::MutexGuard<'_, Releases> {
        self.releases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Releases `start..end` of the segment at `seg` in `segments` (its pages wholly inside) with the ranges
    /// waiting before it, once they make a batch ([`Releases`]); until then they stay mapped.
    fn release_later(&self, seg: usize, start: u64, end: u64) {
        let batch = {
            let mut waiting = self.releases();
            waiting.ranges.push((seg, start, end));
            waiting.bytes += end.saturating_sub(start);
            if waiting.bytes < self.release_batch && waiting.ranges.len() < RELEASE_RANGES {
                return;
            }
            std::mem::take(&mut *waiting)
        };
        self.release_ranges(batch);
    }

    /// Releases `ranges` with one call per run of ranges of a segment that lie at most `RELEASE_JOIN_GAP`
    /// apart: the pages between them go too (the records' heads, pages two payloads share, which a release
    /// of each payload alone would leave mapped).
    fn release_ranges(&self, mut waiting: Releases) {
        waiting.ranges.sort_unstable();
        let mut run: Option<(usize, u64, u64)> = None;
        for (seg, start, end) in waiting.ranges {
            match &mut run {
                Some((s, _, e)) if *s == seg && start <= e.saturating_add(RELEASE_JOIN_GAP) => {
                    *e = (*e).max(end)
                }
                _ => {
                    if let Some((s, a, b)) = run.replace((seg, start, end)) {
                        self.segments[s].release(a, b);
                    }
                }
            }
        }
        if let Some((s, a, b)) = run {
            self.segments[s].release(a, b);
        }
    }

    /// The position in `segments` of segment `segment_index` and the stored data of the tensor record at
    /// `offset` in it.
    fn stored_at(&self, segment_index: u64, offset: u64) -> Result<(usize, StoredData<'_>)> {
        let at = self.segments.iter().position(|s| s.index == segment_index).ok_or_else(|| {
            FormatError::whole(format!("stream has no segment {segment_index}")).in_file(&self.dir)
        })?;
        let seg = &self.segments[at];
        let (meta, head_end, body_end, kind) = match segment::frame_at(&seg.map, offset, seg.end) {
            Frame::Valid { body, len, meta, head_len, kind, .. } => (meta, body + head_len, body + len, kind),
            _ => return Err(FormatError::at(offset, "no record starts here").in_file(&seg.path)),
        };
        if kind != KIND_TENSOR {
            return Err(
                FormatError::at(offset, format!("record kind {kind} is not a tensor")).in_file(&seg.path)
            );
        }
        let m = &seg.map[meta as usize..head_end as usize];
        let r: pb::TensorRecord =
            decode_message(m, "tensor").map_err(|e| e.shifted(offset).in_file(&seg.path))?;
        let stored = StoredData {
            encoding: DataEncoding::from_record(&r).map_err(|e| e.shifted(offset).in_file(&seg.path))?,
            payload: &seg.map[head_end as usize..body_end as usize],
            payload_offset: head_end,
            data_size: r.data_size,
            content_hash: r.content_hash,
        };
        Ok((at, stored))
    }
}

impl Segment {
    /// Drops the mapped pages wholly inside `start..end` from this process's page tables, once the bytes
    /// there have been read (a tensor's payload decoded, a segment walked): a capture read from end to end
    /// would otherwise show every byte of it as the process's resident memory (file-backed, reclaimable, but what `top`, `time` and cluster
    /// schedulers report). The pages stay in the page cache; touching them again faults them back in
    /// with the same bytes. A failure only leaves the pages mapped.
    fn release(&self, start: u64, end: u64) {
        let page = page_size();
        let first = (start as usize).div_ceil(page) * page;
        let last = (end as usize).min(self.map.len()) / page * page;
        if last > first {
            // SAFETY: MADV_DONTNEED's hazard is losing private modifications of a mapping. This mapping is a
            // read-only shared mapping of the file (`Mmap::map`), which holds no private pages: afterwards a
            // read of the range faults the file's own bytes back in from the page cache. The range is
            // page-aligned and inside the mapping, and no slice into it is lost (slices stay valid: the
            // mapping itself is not changed).
            let _ = unsafe {
                self.map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, last - first)
            };
        }
    }
}

impl Segment {
    /// `start..end` widened to every page the kernel may have mapped with it, for a
    /// [`release`](Self::release): a read fault maps the page cache's pages of the aligned window around
    /// the faulting page (Linux's fault-around, 64 KiB by default), so bytes read again after their
    /// neighbours were released bring those neighbours back into the mapping. Pages of other records
    /// released with them while another thread reads them fault back in with the same bytes.
    fn around(&self, start: u64, end: u64) -> (u64, u64) {
        // The windows are aligned in the address space, not in the file.
        let window = FAULT_AROUND_BYTES.max(page_size()) as u64;
        let base = self.map.as_ptr() as u64 % window;
        let first = ((base + start) / window * window).saturating_sub(base);
        (first, ((base + end).div_ceil(window) * window).saturating_sub(base))
    }
}

/// The window Linux's read faults map around the faulting page by default (`fault_around_bytes`).
const FAULT_AROUND_BYTES: usize = 64 << 10;

/// The size of a memory page (4 KiB on x86_64, often 64 KiB on aarch64 servers).
fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf with a valid name has no preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(size).ok().filter(|s| s.is_power_of_two()).unwrap_or(64 * 1024)
    })
}

/// Iterator over a stream's records (see [`StreamReader::records`]). Stops after the first error.
pub struct Records<'a> {
    stream: &'a StreamReader,
    seg: usize,
    pos: u64,
    strings: Vec<Arc<str>>,
    op: Option<Arc<OpInfo>>,
    /// The last op of the previous segment: a `continued` op record that repeats it is not yielded again.
    prev_op: Option<Arc<OpInfo>>,
    done: bool,
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
                Frame::Empty => return self.fail(seg, offset, "sealed segment has no record here".into()),
                Frame::Bad(why) => return self.fail(seg, offset, why),
            };
            self.pos = next;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::encode::encode_data;
    use crate::capture::zstd_frames::PieceIn;
    use crate::{simd, DType};

    /// `bytes` bytes of `width`-byte elements whose low byte is noise and whose other bytes take few values:
    /// the writer stores the low plane's frame as zstd's stored blocks and compresses the others.
    fn tensor(width: usize, bytes: usize, seed: u64) -> Vec<u8> {
        let mut state = seed | 1;
        (0..bytes)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                if i % width == 0 {
                    state as u8
                } else {
                    0x3C | (state >> 60) as u8 & 1
                }
            })
            .collect()
    }

    fn stored<'a>(payload: &'a [u8], encoding: DataEncoding, raw: &[u8]) -> StoredData<'a> {
        StoredData {
            encoding,
            payload,
            payload_offset: 0,
            data_size: raw.len() as u64,
            content_hash: content_hash(raw),
        }
    }

    /// What `with_tensor_blocks_at` gives: the data read through [`StoredData::plane_bytes`] in blocks of
    /// `block` bytes, once its hash matched.
    fn read_blocks(stored: &StoredData<'_>, block: usize) -> Result<Vec<u8>> {
        read_blocks_in(stored, block, WINDOW_BYTES, &mut Vec::new())
    }

    /// [`read_blocks`] with windows of `window` bytes and `scratch`.
    fn read_blocks_in(
        stored: &StoredData<'_>,
        block: usize,
        window: usize,
        scratch: &mut Vec<u8>,
    ) -> Result<Vec<u8>> {
        stored.read_blocks_with(Path::new("t"), scratch, window, |blocks| {
            let (mut out, mut buf) = (Vec::new(), vec![0u8; block]);
            while out.len() < blocks.len() {
                out.extend_from_slice(blocks.next_block(&mut buf));
            }
            out
        })
    }

    /// The hash of the data when half of it was read block by block and `finish` read the rest.
    fn hash_of_half_read(stored: &StoredData<'_>, block: usize) -> u64 {
        let mut scratch = Vec::new();
        let (planes, width) = stored.plane_bytes(Path::new("t"), &mut scratch, WINDOW_BYTES).unwrap();
        let mut blocks = TensorBlocks::new(planes, width);
        let mut buf = vec![0u8; block];
        while blocks.pos < blocks.len() / 2 {
            blocks.next_block(&mut buf);
        }
        blocks.finish().unwrap()
    }

    /// What `read_tensor_data_at` gives: zstd's whole decode.
    fn read_whole(stored: &StoredData<'_>) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        stored.decode(Path::new("t"), &mut out, &mut Vec::new())?;
        Ok(out)
    }

    /// Tensors of 1, 2, 4 and 8-byte elements (and a ragged tail), with one stored block and several per
    /// plane, read in blocks of every size (element-aligned or not, across the stored blocks' edges) at
    /// every SIMD level: the bytes zstd's whole decode gives, with stored blocks lent from the payload.
    #[test]
    fn stored_blocks_are_lent_and_read_as_zstd_decodes_them() {
        let mut lent = 0;
        for (dtype, width) in [(DType::INT8, 1), (DType::FLOAT16, 2), (DType::FLOAT, 4), (DType::DOUBLE, 8)] {
            for bytes in [0, 3, 70_000, 300_000 + width, 300_000 + width + 1] {
                let raw = tensor(width, bytes, bytes as u64 + width as u64);
                let encoded = encode_data(&raw, dtype, 1).unwrap();
                let s = stored(encoded.payload(), encoded.encoding(), &raw);
                assert_eq!(read_whole(&s).unwrap(), raw);
                let pieces = zstd_pieces(s.payload, s.data_size, &mut Vec::new());
                let stored_blocks = pieces.iter().flatten().filter(|p| p.0 == PieceIn::Payload).count();
                lent += usize::from(stored_blocks > 0);
                for level in simd::available() {
                    // Byte by byte and 3 at a time only on the smallest (slow in a debug build).
                    let small: &[usize] = if bytes == 70_000 { &[1, 3] } else { &[] };
                    for &block in small.iter().chain(&[2 * width, 4096 + width, 16 << 10, 200_001]) {
                        let got = simd::with_ceiling(level, || read_blocks(&s, block)).unwrap();
                        assert!(got == raw, "{dtype} {bytes} bytes, blocks of {block}, {level:?}");
                        let half = simd::with_ceiling(level, || hash_of_half_read(&s, block));
                        assert_eq!(
                            half, s.content_hash,
                            "{dtype} {bytes} bytes, blocks of {block}, {level:?}"
                        );
                    }
                }
            }
        }
        // Noise in a whole 1-byte tensor is stored as it is too; the 2- to 8-byte tensors' low planes are.
        assert!(lent >= 9, "only {lent} tensors had stored blocks");
    }

    /// One scratch buffer for tensors of every size in turn, larger and smaller than the last, starting
    /// with bytes of its own: the frames zstd decodes land after one another in it and it holds nothing
    /// else (no byte of an earlier tensor, nor of its own start, is read), whatever it held before.
    #[test]
    fn a_reused_scratch_holds_only_the_decoded_frames() {
        let mut scratch = vec![0xA5; 1 << 20];
        for (dtype, width) in
            [(DType::FLOAT16, 2), (DType::FLOAT, 4), (DType::DOUBLE, 8), (DType::FLOAT16, 2)]
        {
            for bytes in [300_000 + width, 70_000, 3, 600_000 + width + 1, 1000] {
                let raw = tensor(width, bytes, bytes as u64 * 31 + width as u64);
                let encoded = encode_data(&raw, dtype, 1).unwrap();
                let s = stored(encoded.payload(), encoded.encoding(), &raw);
                let path = Path::new("t");
                let (planes, width) = s.plane_bytes(path, &mut scratch, WINDOW_BYTES).unwrap();
                let mut blocks = TensorBlocks::new(planes, width);
                let (mut got, mut buf) = (Vec::new(), vec![0u8; 4096 + 3]);
                while got.len() < blocks.len() {
                    got.extend_from_slice(blocks.next_block(&mut buf));
                }
                assert_eq!(blocks.finish(), Some(s.content_hash), "{dtype} {bytes} bytes");
                assert!(got == raw, "{dtype} {bytes} bytes");
                // What zstd decoded, and only that, is in the scratch buffer.
                let frames = zstd_pieces(s.payload, s.data_size, &mut Vec::new());
                let in_scratch: usize =
                    frames.iter().flatten().filter(|p| p.0 == PieceIn::Scratch).map(|p| p.1.len()).sum();
                if frames.is_some() {
                    assert_eq!(scratch.len(), in_scratch, "{dtype} {bytes} bytes");
                }
            }
        }
    }

    /// Tensors of every byte width (fp16 with signalling NaNs, which the hardware conversion quiets and
    /// the scalar one keeps, throughout and in the ragged tail), stored whole or in pieces, of sizes that
    /// shrink and grow into one reused buffer, at every SIMD level: decoded block by block they are the
    /// whole decode's values bit for bit, and the hash still matches. Data that is not whole elements, and
    /// sub-byte or undecodable types, are left to the whole decode, untouched.
    #[test]
    fn values_decoded_block_by_block_are_the_whole_decodes() {
        let dtypes = [
            (DType::INT8, 1),
            (DType::FLOAT16, 2),
            (DType::BF16, 2),
            (DType::COMPLEX32, 4),
            (DType::FLOAT, 4),
            (DType::INT32, 4),
            (DType::DOUBLE, 8),
            (DType::COMPLEX64, 8),
            (DType::INT64, 8),
            (DType::COMPLEX128, 16),
        ];
        let mut out = Vec::new();
        let mut quieted = 0;
        for (dtype, width) in dtypes {
            for elements in [70_001, 5, 0, 3, DECODE_BLOCK / width * 3 + 13, 1_000] {
                let mut raw = tensor(width, elements * width, elements as u64 + 11);
                if width == 2 {
                    // Signalling NaNs of both signs: every 16th element and the last three.
                    for (i, e) in raw.chunks_exact_mut(2).enumerate() {
                        if i % 16 == 5 || i + 3 >= elements {
                            e.copy_from_slice(
                                &(0x7C01u16 | (i as u16 & 0x8000 | (i as u16 % 0x100))).to_le_bytes(),
                            );
                        }
                    }
                }
                let encoded = encode_data(&raw, dtype, 1).unwrap();
                let s = stored(encoded.payload(), encoded.encoding(), &raw);
                let bytes = read_whole(&s).unwrap();
                let whole_at = |level| {
                    let mut whole = Vec::new();
                    simd::with_ceiling(level, || {
                        crate::tensor::host::decode_reusing(dtype, &bytes, elements, &mut whole).unwrap()
                    });
                    whole
                };
                let top = whole_at(simd::detected());
                for level in simd::available() {
                    // Garbage left from the last tensor, longer or shorter than this one.
                    out.iter_mut().for_each(|v| *v = -7.0);
                    let path = Path::new("t");
                    let mut scratch = Vec::new();
                    let (planes, planes_width) = s.plane_bytes(path, &mut scratch, WINDOW_BYTES).unwrap();
                    let mut blocks = TensorBlocks::new(planes, planes_width);
                    let taken =
                        simd::with_ceiling(level, || blocks.decode_f32_into(dtype, &mut out)).unwrap();
                    assert!(taken, "{dtype} {elements}");
                    s.check_hash(path, blocks.finish().unwrap()).unwrap();
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
                    let whole = whole_at(level);
                    assert!(bits(&out) == bits(&whole), "{dtype}, {elements} elements, {level:?}");
                    quieted += usize::from(bits(&top) != bits(&whole));
                }
            }
        }
        // The hardware conversion quiets the signalling NaNs that the portable one keeps: the levels differ
        // in bits, so a block that split a hardware step differently would show.
        if simd::available().len() > 1 {
            assert!(quieted > 0);
        }
        // Ragged data, a sub-byte type and an undecodable one: nothing read, `out` untouched.
        let raw = tensor(4, 4 * 100 + 1, 3);
        let encoded = encode_data(&raw, DType::FLOAT, 1).unwrap();
        let s = stored(encoded.payload(), encoded.encoding(), &raw);
        for dtype in [DType::FLOAT, DType::INT4, DType::STRING] {
            let mut scratch = Vec::new();
            let (planes, planes_width) = s.plane_bytes(Path::new("t"), &mut scratch, WINDOW_BYTES).unwrap();
            let mut blocks = TensorBlocks::new(planes, planes_width);
            out = vec![1.0; 9];
            assert!(!blocks.decode_f32_into(dtype, &mut out).unwrap(), "{dtype}");
            assert_eq!((blocks.pos, out.len()), (0, 9), "{dtype}");
        }
    }

    /// `data` as one zstd frame of stored blocks (RFC 8878: a single segment, its content size in 4 bytes).
    fn stored_frame(data: &[u8]) -> Vec<u8> {
        let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD, 0xA0];
        frame.extend((data.len() as u32).to_le_bytes());
        let mut blocks = data.chunks(100_000).peekable();
        if data.is_empty() {
            frame.extend([1, 0, 0]);
        }
        while let Some(block) = blocks.next() {
            let header = (block.len() as u32) << 3 | u32::from(blocks.peek().is_none());
            frame.extend(&header.to_le_bytes()[..3]);
            frame.extend(block);
        }
        frame
    }

    /// `s`'s data decoded as `dtype` values as `with_tensor_blocks_at` would, in parallel from `parallel_min`
    /// bytes on: the values' bits once the hash matched, or the error.
    fn decode_checked(s: &StoredData<'_>, dtype: DType, parallel_min: usize) -> Result<Vec<u32>> {
        decode_checked_in(s, dtype, parallel_min, WINDOW_BYTES, &mut Vec::new())
    }

    /// [`decode_checked`] with windows of `window` bytes and `scratch`.
    fn decode_checked_in(
        s: &StoredData<'_>,
        dtype: DType,
        parallel_min: usize,
        window: usize,
        scratch: &mut Vec<u8>,
    ) -> Result<Vec<u32>> {
        let mut out = vec![-7.0f32; 11];
        // Waves of as many chunks as threads: several waves, the last ragged, even on small data.
        let taken = s.read_blocks_with(Path::new("t"), scratch, window, |blocks| {
            blocks.decode_f32_into_from(dtype, &mut out, parallel_min, |threads| threads)
        })?;
        assert!(taken?, "{dtype}");
        Ok(out.iter().map(|v| v.to_bits()).collect())
    }

    /// Tensors of every byte width whose planes are stored in pieces (stored and compressed frames), all
    /// compressed, raw, or 1-byte planes, of sizes from none to several waves with a ragged last chunk and
    /// block, decoded in parallel on pools of 2, 3 and 5 threads (waves of as many chunks) at every SIMD
    /// level: the serial decode's values bit for bit (fp16's signalling NaNs, which the levels treat
    /// differently, included) and its hash; and with a byte of a stored block or of a compressed frame
    /// flipped, its error.
    #[test]
    fn values_decoded_in_parallel_are_the_serial_decodes() {
        let dtypes = [
            (DType::FLOAT16, 2),
            (DType::BF16, 2),
            (DType::INT8, 1),
            (DType::FLOAT, 4),
            (DType::COMPLEX64, 8),
            (DType::DOUBLE, 8),
        ];
        let pools: Vec<rayon::ThreadPool> =
            [2, 3, 5].map(|n| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap()).into();
        let (mut compared, mut failed, mut kinds) = (0, 0, std::collections::BTreeSet::new());
        for (dtype, width) in dtypes {
            let sizes = [5, 0, (PARALLEL_CHUNK * 5 + DECODE_BLOCK * 2) / width + 13];
            for (case, elements) in sizes.into_iter().enumerate() {
                for kind in ["pieces", "compressed", "raw", "1-byte pieces"] {
                    let mut raw = tensor(width, elements * width, (elements * width + case) as u64);
                    match kind {
                        "compressed" => raw.iter_mut().enumerate().for_each(|(i, b)| *b = (i / 64 % 3) as u8),
                        "raw" => raw
                            .iter_mut()
                            .enumerate()
                            .for_each(|(i, b)| *b = (i.wrapping_mul(2_654_435_761) >> 13) as u8),
                        _ => {}
                    }
                    if width == 2 {
                        // Signalling NaNs of both signs, spread over the chunks.
                        for (i, e) in raw.chunks_exact_mut(2).enumerate().filter(|(i, _)| i % 997 == 5) {
                            e.copy_from_slice(&(0x7C01u16 | (i as u16 & 0x8000)).to_le_bytes());
                        }
                    }
                    let encoded = encode_data(&raw, dtype, 1).unwrap();
                    let (mut payload, mut encoding) = (encoded.payload().to_vec(), encoded.encoding());
                    if kind == "1-byte pieces" {
                        // Not what the writer makes (it shuffles 2 to 8-byte elements, and stores a 1-byte
                        // tensor raw when it does not compress), but what the reader takes: the data in
                        // order, its first half a frame of stored blocks, then a compressed frame.
                        let half = raw.len() / 2 / width * width;
                        payload = stored_frame(&raw[..half]);
                        payload.extend(zstd::bulk::compress(&raw[half..], 1).unwrap());
                        encoding = DataEncoding::Zstd { shuffle_width: 1 };
                    }
                    let s = stored(&payload, encoding, &raw);
                    let mut scratch = Vec::new();
                    kinds.insert(match s.plane_bytes(Path::new("t"), &mut scratch, WINDOW_BYTES).unwrap() {
                        (PlaneBytes::Whole(_), 1) => "in order",
                        (PlaneBytes::Whole(_), _) => "whole planes",
                        (PlaneBytes::Pieces(_), 1) => "1-byte pieces",
                        (PlaneBytes::Pieces(_), _) => "pieces",
                        (PlaneBytes::Windows(_), _) => "windows",
                    });
                    let mut damaged = Vec::new();
                    if let Some(pieces) = zstd_pieces(s.payload, s.data_size, &mut Vec::new()) {
                        let in_stored =
                            pieces.iter().find(|p| p.0 == PieceIn::Payload).map(|p| p.1.start + 7);
                        damaged.extend(in_stored);
                    }
                    if matches!(s.encoding, DataEncoding::Zstd { .. }) && s.payload.len() > 40 {
                        damaged.push(s.payload.len() / 2);
                    }
                    for level in simd::available() {
                        let serial = simd::with_ceiling(level, || decode_checked(&s, dtype, usize::MAX));
                        let serial = serial.unwrap();
                        for pool in &pools {
                            let parallel =
                                simd::with_ceiling(level, || pool.install(|| decode_checked(&s, dtype, 0)));
                            let parallel = parallel.unwrap();
                            assert!(
                                parallel == serial,
                                "{dtype} {elements} {kind}, {level:?}, {:?}",
                                pool.current_num_threads()
                            );
                            compared += 1;
                        }
                    }
                    for &at in &damaged {
                        let mut payload = s.payload.to_vec();
                        payload[at] ^= 0x10;
                        let d = StoredData { payload: &payload, ..stored(s.payload, s.encoding, &raw) };
                        let serial = decode_checked(&d, dtype, usize::MAX).map_err(|e| e.to_string());
                        for pool in &pools {
                            let parallel =
                                pool.install(|| decode_checked(&d, dtype, 0)).map_err(|e| e.to_string());
                            assert_eq!(parallel, serial, "{dtype} {elements} {kind}, byte {at} flipped");
                            failed += usize::from(parallel.is_err());
                        }
                    }
                }
            }
        }
        assert_eq!(kinds.len(), 4, "{kinds:?}");
        assert!(compared > 100 && failed > 20, "{compared} compared, {failed} damaged reads failed");
    }

    /// A parallel decode leaves its wave buffers with the thread that called it, whichever threads ran its
    /// tasks, and reuses them for the next tensor; `swap_wave_buffers` takes them from that thread.
    #[test]
    fn a_parallel_decode_keeps_its_wave_buffers_on_the_calling_thread() {
        let raw = tensor(2, PARALLEL_CHUNK * 3, 5);
        let encoded = encode_data(&raw, DType::FLOAT16, 1).unwrap();
        let s = stored(encoded.payload(), encoded.encoding(), &raw);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        pool.install(|| {
            let mut taken = WaveBuffers::default();
            swap_wave_buffers(&mut taken);
            decode_checked(&s, DType::FLOAT16, 0).unwrap();
            let mut after = WaveBuffers::default();
            swap_wave_buffers(&mut after);
            assert_eq!(after.capacity(), 2 * 3 * PARALLEL_CHUNK, "the wave buffers were not kept");
            let kept = [after.0.as_ptr(), after.1.as_ptr()];
            swap_wave_buffers(&mut after);
            decode_checked(&s, DType::FLOAT16, 0).unwrap();
            let mut again = WaveBuffers::default();
            swap_wave_buffers(&mut again);
            assert!(kept.contains(&again.0.as_ptr()) && kept.contains(&again.1.as_ptr()), "not reused");
            assert_eq!(after.capacity(), 0, "the swap left them with the thread");
        });
    }

    /// Every byte of the frame and block headers, and bytes spread over the blocks, flipped in turn: the
    /// block-by-block read gives what the whole decode gives, the same bytes or the same error. A stored
    /// block is lent only where zstd would have copied it out.
    #[test]
    fn a_flipped_byte_reads_as_the_whole_decode_reads_it() {
        for (dtype, width) in [(DType::FLOAT16, 2), (DType::FLOAT, 4)] {
            let raw = tensor(width, 70_000, 7);
            let encoded = encode_data(&raw, dtype, 1).unwrap();
            let payload = encoded.payload().to_vec();
            assert!(zstd_pieces(&payload, raw.len() as u64, &mut Vec::new()).is_some());
            let mut same_error = 0;
            let positions = (0..payload.len()).filter(|&i| i < 32 || i % 251 == 0 || payload.len() - i < 8);
            // The stored block headers: 3 bytes before each stored block.
            let headers = zstd_pieces(&payload, raw.len() as u64, &mut Vec::new()).unwrap();
            let headers: Vec<usize> = headers
                .iter()
                .filter(|p| p.0 == PieceIn::Payload)
                .flat_map(|p| p.1.start - 3..p.1.start)
                .collect();
            assert!(!headers.is_empty());
            for i in positions.chain(headers) {
                for flip in [0x01u8, 0x10, 0x80, 0xFF] {
                    let mut damaged = payload.clone();
                    damaged[i] ^= flip;
                    let s = stored(&damaged, encoded.encoding(), &raw);
                    let (whole, blocks) = (read_whole(&s), read_blocks(&s, 4096));
                    match (&whole, &blocks) {
                        (Ok(w), Ok(b)) if w == b => {}
                        (Err(w), Err(b)) if w.to_string() == b.to_string() => same_error += 1,
                        _ => panic!("{dtype} byte {i} ^ {flip:#x}: whole {whole:?}, blocks {blocks:?}"),
                    }
                }
            }
            assert!(same_error > 100, "{dtype}: only {same_error} damaged reads failed");
        }
    }

    /// Tensors longer than their window, written as the writer writes them (frames of at most 1 MiB, the
    /// noisy low plane's stored, the others compressed, some across planes), read a window at a time with
    /// windows smaller than a wave, between frames' sizes, and odd: block by block in blocks of several sizes,
    /// and as values, serially on 1 thread and in parallel on 3, they read as zstd's whole decode (the same
    /// bytes, the same values bit for bit) while the scratch holds at most a window's frames, less than the
    /// whole planes on the longest; a flipped byte in a compressed frame or a stored block gives the whole
    /// decode's bytes or its error.
    #[test]
    fn data_read_a_window_at_a_time_is_the_whole_decode() {
        let pools: Vec<rayon::ThreadPool> =
            [1, 3].map(|n| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap()).into();
        let cases = [
            (DType::FLOAT16, 2, (9 << 19) + 18),
            (DType::BF16, 2, (3 << 20) + 2),
            (DType::FLOAT, 4, (3 << 20) + 44),
            (DType::DOUBLE, 8, (5 << 19) + 8 * 13),
        ];
        let (mut bounded, mut failed) = (false, 0);
        for (dtype, width, bytes) in cases {
            let raw = tensor(width, bytes, bytes as u64);
            let encoded = encode_data(&raw, dtype, 1).unwrap();
            let s = stored(encoded.payload(), encoded.encoding(), &raw);
            let frames = scan_frames(s.payload, s.data_size).unwrap();
            let frame_max =
                frames.iter().filter(|f| f.stored.is_none()).map(|f| f.planes.len()).max().unwrap();
            let decoded: usize = frames.iter().filter(|f| f.stored.is_none()).map(|f| f.planes.len()).sum();
            assert!(frames.len() > 3 && frames.iter().any(|f| f.stored.is_some()), "{dtype}");
            let whole = read_whole(&s).unwrap();
            let values = decode_checked(&s, dtype, usize::MAX).unwrap();
            for window in [64 << 10, 700_001, (1 << 20) + (1 << 19) + 5] {
                let mut scratch = Vec::new();
                let (planes, _) = s.plane_bytes(Path::new("t"), &mut scratch, window).unwrap();
                assert!(matches!(planes, PlaneBytes::Windows(_)), "{dtype} window {window}");
                for block in [777, DECODE_BLOCK + 6] {
                    let read = read_blocks_in(&s, block, window, &mut scratch).unwrap();
                    assert!(read == whole, "{dtype} window {window}, blocks of {block}");
                }
                for (pool, parallel_min) in pools.iter().zip([usize::MAX, 0]) {
                    let got =
                        pool.install(|| decode_checked_in(&s, dtype, parallel_min, window, &mut scratch));
                    let threads = pool.current_num_threads();
                    assert!(got.unwrap() == values, "{dtype} window {window}, {threads} threads");
                }
                // A window's planes (the largest wave's when that is longer), and a frame reaching out of
                // each end of each plane's part.
                let reach = window.max(3 * PARALLEL_CHUNK) + 2 * width;
                assert!(
                    scratch.len() <= reach + 2 * width * frame_max,
                    "{dtype} window {window}: {}",
                    scratch.len()
                );
                bounded |= scratch.len() < decoded;
            }
            // Damage in a compressed frame, in a stored block, and in a frame header past the first window.
            let middle = &frames[frames.len() / 2];
            let stored_block = frames.iter().rev().find_map(|f| f.stored.as_ref()).unwrap()[0].start + 5;
            for at in [
                middle.bytes.start + middle.bytes.len() / 2,
                stored_block,
                frames[frames.len() - 1].bytes.start + 4,
            ] {
                let mut payload = s.payload.to_vec();
                payload[at] ^= 0x24;
                let d = StoredData { payload: &payload, ..stored(s.payload, s.encoding, &raw) };
                let whole = read_whole(&d).map_err(|e| e.to_string());
                let blocks = read_blocks_in(&d, 4096, 64 << 10, &mut Vec::new()).map_err(|e| e.to_string());
                assert_eq!(blocks.as_ref().err(), whole.as_ref().err(), "{dtype}, byte {at} flipped");
                let serial = decode_checked_in(&d, dtype, usize::MAX, 64 << 10, &mut Vec::new());
                let parallel =
                    pools[1].install(|| decode_checked_in(&d, dtype, 0, 64 << 10, &mut Vec::new()));
                for got in [serial, parallel] {
                    assert_eq!(
                        got.map_err(|e| e.to_string()).err(),
                        whole.as_ref().err().cloned(),
                        "{dtype} {at}"
                    );
                }
                failed += usize::from(whole.is_err());
            }
        }
        assert!(bounded, "no tensor long enough to show the scratch bounded");
        assert!(failed >= 8, "only {failed} damaged reads failed");
    }

    /// Data that compresses beyond what a whole decode trusts a payload to expand to (zeros: an optimizer's
    /// first moments) is read a window at a time too, through a scratch a window's size, not the data's.
    #[test]
    fn zeros_are_read_a_window_at_a_time() {
        let raw = vec![0u8; (12 << 20) + 12];
        let encoded = encode_data(&raw, DType::FLOAT, 1).unwrap();
        let s = stored(encoded.payload(), encoded.encoding(), &raw);
        assert!(s.payload.len() as u64 * 64 < s.data_size, "{} bytes stored", s.payload.len());
        let mut scratch = Vec::new();
        let (planes, _) = s.plane_bytes(Path::new("t"), &mut scratch, 64 << 10).unwrap();
        assert!(matches!(planes, PlaneBytes::Windows(_)));
        assert!(read_blocks_in(&s, 777, 64 << 10, &mut scratch).unwrap() == raw);
        // A window's planes and a frame reaching out of each end of each plane's part: less than the data.
        let bound = (3 * PARALLEL_CHUNK).max(64 << 10) + 8 + 8 * (1 << 20);
        assert!(scratch.len() <= bound && scratch.len() < raw.len(), "{}", scratch.len());
        assert!(read_whole(&s).unwrap() == raw);
    }

    /// Device-layout tensors (FRACTAL_NZ and NC1HWC0 with padding; fp16, fp32 and complex64) read through
    /// their runs, block by block, a window at a time or not: the values `decode_f32_into` and
    /// `to_host_into` give together, bit for bit; data that is not the runs' device elements is not taken.
    #[test]
    fn device_values_put_by_runs_are_the_host_layout() {
        use crate::layout::{device_runs, device_shape, to_host_into, Format};
        let cases: [(Format, &[u64], DType, usize); 4] = [
            (Format::FRACTAL_NZ, &[300, 70], DType::FLOAT16, 2),
            (Format::FRACTAL_NZ, &[2, 40, 330], DType::FLOAT, 4),
            (Format::NC1HWC0, &[3, 21, 29, 31], DType::FLOAT16, 2),
            (Format::NC1HWC0, &[2, 5, 40, 30], DType::COMPLEX64, 4),
        ];
        for (format, host, dtype, width) in cases {
            let shape = device_shape(format, host, dtype, 0).unwrap();
            let lanes = crate::tensor::lanes_per_element(dtype);
            let elements = shape.iter().product::<u64>() as usize * lanes;
            let raw = tensor(width, elements * width, elements as u64);
            let encoded = encode_data(&raw, dtype, 1).unwrap();
            let s = stored(encoded.payload(), encoded.encoding(), &raw);
            let device: Vec<f32> =
                decode_checked(&s, dtype, usize::MAX).unwrap().into_iter().map(f32::from_bits).collect();
            let mut expected = Vec::new();
            to_host_into(format, &device, lanes, &shape, host, dtype, 0, &mut expected).unwrap();
            let runs = device_runs(format, &shape, host, dtype, 0).unwrap().unwrap();
            for window in [WINDOW_BYTES, 64 << 10] {
                let mut out = vec![-3.0f32; 7];
                let taken = s
                    .read_blocks_with(Path::new("t"), &mut Vec::new(), window, |b| {
                        b.decode_device_runs_into(dtype, &runs, &mut out)
                    })
                    .unwrap()
                    .unwrap();
                assert!(taken, "{format} {host:?}");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
                assert!(bits(&out) == bits(&expected), "{format} {host:?} {dtype}, window {window}");
            }
            // Runs of another shape: not this data's.
            let other: Vec<u64> = host.iter().map(|&d| d + 16).collect();
            let other_shape = device_shape(format, &other, dtype, 0).unwrap();
            let other = device_runs(format, &other_shape, &other, dtype, 0).unwrap().unwrap();
            let taken = s.read_blocks_with(Path::new("t"), &mut Vec::new(), WINDOW_BYTES, |b| {
                b.decode_device_runs_into(dtype, &other, &mut Vec::new())
            });
            assert!(!taken.unwrap().unwrap(), "{format} {host:?}");
        }
    }
}
