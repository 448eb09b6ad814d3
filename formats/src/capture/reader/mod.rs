//! The reader: maps a run's segments and walks their records in order, zero-copy. Metadata (op, tensor
//! metadata, statistics, hash) is decoded from the frame head; tensor data is only touched by
//! [`CapturedTensor::read_data`], so scanning a capture costs time proportional to its records, not its bytes.
//!
//! Integrity: the last segment of a stream may be unsealed (the writer was killed). Its records are read up
//! to the first position that is not a valid frame; that position is the stream's [`TornTail`]. A bad frame
//! anywhere else (a sealed segment, or an unsealed one with valid frames after the bad one) is corruption
//! and is reported as a [`FormatError`](crate::FormatError) naming the file and offset.
//!
//! The modules, one job each:
//! - `open`: opening a run and its streams: segments mapped, headers checked, the torn tail found.
//! - `records`: [`Records`], the walk over a stream's records, and the decoding of each record kind.
//! - `tensor_data`: a tensor record's data by its place (segment, offset): decoded whole, read block by
//!   block ([`TensorBlocks`]), or its stored bytes compared with another record's.
//! - `stats_at`: a tensor record's statistics by its place, read again instead of held.
//! - `stored_data`: a tensor's payload decoded (whole, in pieces, or a window of frames at a time) and
//!   checked against its content hash.
//! - `blocks`: [`TensorBlocks`], the data read block by block and hashed, and decoded to f32.
//! - `parallel_decode`: a large tensor decoded to f32 on the pool's threads, a wave of chunks at a time,
//!   with per-thread wave buffers ([`WaveBuffers`]).
//! - `device_runs`: device-layout values put in the host layout block by block as they are read.
//! - `tensor_head`: [`TensorHead`], two fields of a tensor record passed over, read without decoding it.
//! - `releases`: the pages read let go of from the mapping, in batches ([`RELEASE_BATCH`]).

mod blocks;
mod device_runs;
mod open;
mod parallel_blocks;
mod parallel_decode;
mod records;
mod releases;
mod stats_at;
mod stored_data;
mod tensor_data;
mod tensor_head;
#[cfg(test)]
mod test_data;

pub use parallel_decode::{swap_wave_buffers, WaveBuffers};
pub use records::Records;
pub use releases::RELEASE_BATCH;
pub use tensor_data::{blocks_scratch_bound, blocks_scratch_max};
pub use tensor_head::TensorHead;

use super::collective::CollectiveInfo;
use super::manifest::{Manifest, StreamInfo};
use super::planes::{Joined, PlaneBytes};
use super::record::{DataEncoding, OpInfo, OverflowInfo, StatsCsv, StepMark, TensorMeta};
use crate::histogram::Histogram;
use crate::stats::TensorStats;
use crate::Result;
use memmap2::Mmap;
use releases::Releases;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use stored_data::StoredData;

/// A capture run directory: its manifest (when there is one) and its streams.
pub struct CaptureRun {
    /// The run directory.
    pub dir: PathBuf,
    /// `manifest.json`, absent when the collector died before writing it.
    pub manifest: Option<Manifest>,
    /// Streams, sorted by stream id.
    pub streams: Vec<StreamReader>,
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
    ///
    /// [`content_hash`]: crate::stats::content_hash
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
    ///
    /// [`Windows`]: super::planes::Windows
    failed: bool,
}
