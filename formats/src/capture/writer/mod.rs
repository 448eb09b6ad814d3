//! The stream writer: appends records to memory-mapped segment files, rolls to a new segment when one is
//! full, and applies the retention policy. One writer per stream (one process, one device); the collector's
//! writer threads own it. Nothing here allocates per record once the scratch buffers have grown.
//!
//! The modules, one job each:
//! - `lifecycle`: a writer created with its first segment, summarised, sealed (the last segment cut to its
//!   end), abandoned or dropped.
//! - `appends`: the records appended (op, tensor, overflow, statistics CSV, step mark, collective) as the
//!   policy admits them, a tensor's data compressed straight into its frame where it fits.
//! - `framing`: a record's strings interned and its head encoded, its frames written, and a roll where it
//!   does not fit the segment.
//! - `segments`: the stream's segments sealed, rolled and opened (the policy's evictions first), the next
//!   one prepared on a helper thread.
//! - `segment_files`: a segment file created, given its size (fallocate, else zeros), mapped and pre-faulted.

mod appends;
mod framing;
mod lifecycle;
mod segment_files;
mod segments;

use super::collective::CollectiveInfo;
use super::encode::DataEncoder;
use super::manifest::{StreamCounts, StreamInfo};
use super::policy::{Policy, PolicyState};
use super::record::{DataEncoding, OpInfo, OverflowInfo, StatsCsv, StepMark, TensorMeta};
use crate::histogram::Histogram;
use crate::stats::TensorStats;
use memmap2::MmapMut;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
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
