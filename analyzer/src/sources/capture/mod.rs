//! accutrace captures: statistics and hashes come from the record heads, so building the index never
//! touches tensor bytes; values are decompressed on demand from the mapped segment.
//!
//! The modules, one job each:
//! - `open`: the run opened and indexed from its records: ops, tensors with their statistics, hashes and
//!   places, overflow records tied to the ops they blame, steps, what the ring deleted, the settings that
//!   change results.
//! - `tensor_data`: a tensor's data read from its place: its stored bytes whole, as the device tensor the
//!   host conversions take, or decoded to f32 block by block as they are read.
//! - `runs`: which runs the streams are of: a directory two runs wrote into is an input problem.
//! - `source_impl`: [`CaptureSource`] as a [`Source`](super::Source): values, host bytes and blocks,
//!   stored data compared and released, the buffers and scratch a read holds, what the manifest says.

mod open;
pub mod runs;
mod source_impl;
mod tensor_data;

use crate::index::Index;
use accutrace_formats::capture::reader::CaptureRun;
use accutrace_formats::capture::record;
use std::path::PathBuf;

pub struct CaptureSource {
    root: PathBuf,
    run: CaptureRun,
    index: Index,
    /// Device layout of each tensor (by tensor id), to undo it when values are read.
    metas: Vec<Option<record::TensorMeta>>,
}

/// A tensor's place in the run: stream, segment, frame offset (packed into the index's locator).
fn pack(stream: usize, segment: u64, offset: u64) -> u64 {
    ((stream as u64) << 56) | ((segment & 0xFF_FFFF) << 32) | (offset & 0xFFFF_FFFF)
}

fn unpack(locator: u64) -> (usize, u64, u64) {
    ((locator >> 56) as usize, (locator >> 32) & 0xFF_FFFF, locator & 0xFFFF_FFFF)
}

#[cfg(test)]
mod test_data;
