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
//! - [`record`]: the record kinds (string, op, tensor, overflow, stats CSV, step mark) and their protobuf form.
//! - [`step_marks`]: the steps of a stream's ops from its marker step marks (`ACCUTRACE_STEP_MARKER`).
//! - [`shuffle`]: the byte shuffle applied before zstd; [`encode`]: shuffle + zstd of tensor data.
//! - [`policy`]: retention (keep all, ring, trigger).
//! - [`writer`]: [`StreamWriter`]. [`reader`]: [`CaptureRun`], [`StreamReader`], [`Records`].
//! - [`manifest`]: `manifest.json` and `stream.json`.

pub mod encode;
pub mod manifest;
pub mod policy;
pub mod reader;
pub mod record;
pub mod segment;
pub mod shuffle;
pub mod step_marks;
pub mod writer;

pub use encode::{encode_data, DataEncoder, EncodedData};
pub use manifest::{Manifest, RunCounts, StreamCounts, StreamInfo, StreamSummary};
pub use policy::{Policy, PolicyState};
pub use reader::{CaptureRun, Record, RecordRef, Records, StreamReader, TensorRef, TornTail};
pub use record::{
    DataEncoding, Io, OpInfo, OriginalOp, OverflowInfo, StatsCsv, StepMark, StepSource, TensorMeta,
};
pub use writer::{Appended, StreamWriter, WriterOptions, DEFAULT_SEGMENT_SIZE};

/// Version of the capture format written by this build (segment headers and the manifest).
/// 2: step-boundary records (kind 6), an op's dump number and step source.
pub const FORMAT_VERSION: u32 = 2;

/// The oldest version this build reads (a version-1 stream reads as version 2 without the new fields).
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
