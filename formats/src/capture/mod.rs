//! accutrace's capture format: what the collector writes on the device host and the analyzer maps.
//! The byte-level specification is `docs/CAPTURE_FORMAT.md`; this module is its one implementation.
//!
//! ```text
//! runs/npu/manifest.json                          the run (Manifest)
//! runs/npu/stream-000-rank0-dev0-pid4242/
//!     stream.json                                 who writes this stream (StreamInfo)
//!     seg-000000.acc, seg-000001.acc, ...         fixed-size segments of framed, checksummed records
//! ```
//! - [`segment`]: the header and the frame (length-prefixed, CRC, committed last).
//! - [`record`]: the record kinds (string, op, tensor, overflow, stats CSV, step mark) and their protobuf form;
//!   [`collective`]: collective records (HCCL calls).
//! - [`step_marks`]: the steps of a stream's ops from its marker step marks (`ACCUTRACE_STEP_MARKER`).
//! - [`shuffle`]: the byte shuffle applied before zstd; [`encode`]: shuffle + zstd of tensor data.
//! - [`policy`]: retention (keep all, ring, trigger).
//! - [`writer`]: [`StreamWriter`]. [`reader`]: [`CaptureRun`], [`StreamReader`], [`Records`].
//! - [`manifest`]: `manifest.json` and `stream.json`; [`pipeline`]: the collector's counters in it.
//! - [`completeness`]: what the manifest says should be there against what a reader found.
//!
//! # Reading a capture
//! Open the run directory (what `analyzer record` or `LD_PRELOAD=libcollector.so` wrote) and walk each
//! stream's records: an op, then its tensors (statistics, hash, and the data when it was kept).
//! ```
//! use accutrace_formats::capture::{CaptureRun, Record};
//! # use accutrace_formats::capture::{Io, OpInfo, Policy, StreamInfo, StreamWriter, TensorMeta};
//! # use accutrace_formats::stats::{content_hash, TensorStats};
//! # use accutrace_formats::DType;
//! # let tmp = tempfile::tempdir()?;
//! # let dir = tmp.path();
//! # let info = StreamInfo { stream_id: 0, rank: Some(0), device: 0, pid: 1, host: "doc".into() };
//! # let mut w = StreamWriter::create(dir, info, 1 << 20, Policy::KeepAll)?;
//! # let op = OpInfo { name: "model/fc1/MatMul".into(), op_type: "MatMulV2".into(), ..Default::default() };
//! # w.append_op(&op)?;
//! # let bytes: Vec<u8> = [1.0f32, -2.0, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect();
//! # let meta = TensorMeta {
//! #     io: Io::Output, index: 0, dtype: DType::FLOAT, format: 2, sub_format: 0,
//! #     device_shape: vec![3], original_shape: None, original_op: None,
//! # };
//! # let stats = TensorStats::of_bytes(DType::FLOAT, &bytes)?;
//! # w.append_tensor(&meta, &stats, content_hash(&bytes), Some(&bytes), 1)?;
//! # w.seal()?;
//! let run = CaptureRun::open(dir)?;
//! let mut data = Vec::new();
//! for stream in &run.streams {
//!     for record in stream.records() {
//!         match record?.record {
//!             Record::Op(op) => println!("step {} {} [{}]", op.step, op.name, op.op_type),
//!             Record::Tensor(t) => {
//!                 let m = &t.meta;
//!                 println!("  {:?} {}: {} {:?}, max {}", m.io, m.index, m.dtype, m.device_shape, t.stats.max);
//!                 if t.has_data() {
//!                     t.read_data(&mut data)?; // the bytes as the device wrote them (device layout)
//!                 }
//!             }
//!             _ => {} // overflow records, statistics CSVs, kinds a newer writer added
//!         }
//!     }
//! }
//! # assert_eq!(data, bytes);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//! [`tensor::host`](crate::tensor::host) turns such bytes into host-layout values.

pub mod collective;
pub mod completeness;
pub mod encode;
pub mod environment;
pub mod manifest;
pub mod pipeline;
mod planes;
pub mod policy;
pub mod reader;
pub mod record;
pub mod segment;
pub mod shuffle;
pub mod step_marks;
mod trim_lock;
pub mod writer;
mod zstd_frames;

pub use collective::{BufferSummary, CollectiveInfo, CollectiveOp};
pub use completeness::{RecordTally, Shortfall};
pub use encode::{encode_data, DataEncoder, EncodedData};
pub use environment::{FileDigest, FoundVersion, JobSettings, RunEnvironment, MAX_JSON_KEPT};
pub use manifest::{Manifest, RunCounts, StreamCounts, StreamInfo, StreamSummary};
pub use pipeline::PipelineCounters;
pub use policy::{Policy, PolicyState};
pub use reader::{
    blocks_scratch_bound, blocks_scratch_max, CaptureRun, CapturedTensor, Record, RecordRef, Records,
    StreamReader, TornTail,
};
pub use record::{
    DataEncoding, Io, OpInfo, OriginalOp, OverflowInfo, StatsCsv, StepMark, StepSource, TensorMeta,
};
pub use writer::{Appended, StreamWriter, WriterOptions, DEFAULT_SEGMENT_SIZE};

/// Version of the capture format written by this build (segment headers and the manifest).
/// 2: step-boundary records (kind 6), an op's dump number and step source.
/// 3: collective records (kind 7): the HCCL calls of the process.
/// 4: the sum of |x| in the statistics, and the optional histogram of a tensor's values.
pub const FORMAT_VERSION: u32 = 4;

/// The oldest version this build reads (an older stream reads as the current version without the newer
/// fields and records).
pub const OLDEST_READABLE_VERSION: u32 = 1;

/// Largest protobuf message of one record (its metadata; tensor data does not count): larger frames are
/// refused by the writer and treated as invalid by the reader, which bounds the work per frame.
pub const MAX_HEAD: u64 = 1 << 20;

/// `seg-000042.acc`.
pub fn segment_file_name(index: u64) -> String {
    format!("seg-{index:06}.acc")
}

/// The index in a segment file name (`seg-000042.acc` -> 42).
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("seg-")?.strip_suffix(".acc")?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Microseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// Pseudo-random bytes (xorshift64 from `seed`): incompressible test data for this module's unit tests.
#[cfg(test)]
pub(crate) fn test_noise(n: usize, mut seed: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}
