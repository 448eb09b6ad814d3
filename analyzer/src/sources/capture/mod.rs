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
//! - `walk`: one stream's records added to an index as they are walked (the whole capture's, or a step
//!   window's).
//! - `windows`: a long capture read a window of steps at a time, each window its own index, so that a
//!   command's memory does not grow with the run's length.
//! - `source_impl`: [`CaptureSource`] as a [`Source`](super::Source): values, host bytes and blocks,
//!   stored data compared and released, the buffers and scratch a read holds, what the manifest says.

mod open;
pub mod runs;
mod source_impl;
pub mod step_calls;
mod tensor_data;
mod walk;
pub mod windows;

use crate::index::{Index, TensorId};
use accutrace_formats::capture::reader::CaptureRun;
use accutrace_formats::capture::record;
use std::path::PathBuf;
use std::sync::Arc;

pub struct CaptureSource {
    root: PathBuf,
    /// Shared with the index, which reads the tensors' statistics from the records again.
    run: Arc<CaptureRun>,
    index: Index,
    /// Device layout of each tensor whose data the capture holds, to undo it when values are read.
    layouts: Layouts,
}

/// [`StoredLayout`] by tensor id, for the tensors whose data the capture holds. The table is made on the
/// first such tensor: a statistics-only capture (the mode for long runs) keeps none, where a slot a tensor
/// was 32 bytes of every command's memory (#18).
#[derive(Default)]
struct Layouts(Vec<Option<StoredLayout>>);

impl Layouts {
    /// The layout of `tensor`, the id the index gave it: ids without one in between are left empty.
    fn set(&mut self, tensor: TensorId, layout: StoredLayout) {
        if self.0.len() <= tensor {
            self.0.resize(tensor + 1, None);
        }
        self.0[tensor] = Some(layout);
    }

    fn get(&self, tensor: TensorId) -> Option<&StoredLayout> {
        self.0.get(tensor)?.as_ref()
    }

    /// Follows the index's [`Reorder`](crate::index::Reorder) of its `tensors` tensors.
    fn reorder(self, previous: &[TensorId], tensors: usize) -> Layouts {
        if self.0.is_empty() {
            return self;
        }
        let mut table = self.0;
        table.resize(tensors, None);
        Layouts(crate::index::Reorder::apply(previous, table))
    }

    /// Tensor ids with a layout, ascending.
    fn tensors(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.0.iter().enumerate().filter(|(_, l)| l.is_some()).map(|(t, _)| t)
    }
}

/// What the host conversions read of a tensor besides what the index holds (its dtype and device shape).
/// Kept apart from the record's `TensorMeta` so that no shape is held twice: a copy of every tensor's meta
/// with its two shapes was a sixth of the index's memory on a stats capture (#18).
#[derive(Clone, Debug, PartialEq, Eq)]
struct StoredLayout {
    format: i32,
    sub_format: i32,
    original_shape: OriginalShape,
}

/// The framework shape the record gave, which is the index's host shape nearly always.
#[derive(Clone, Debug, PartialEq, Eq)]
enum OriginalShape {
    None,
    HostShape,
    Other(Box<[u64]>),
}

impl StoredLayout {
    fn of(meta: &record::TensorMeta, host_shape: &[u64]) -> StoredLayout {
        let original_shape = match &meta.original_shape {
            None => OriginalShape::None,
            Some(shape) if shape[..] == *host_shape => OriginalShape::HostShape,
            Some(shape) => OriginalShape::Other(shape.clone().into_boxed_slice()),
        };
        StoredLayout { format: meta.format, sub_format: meta.sub_format, original_shape }
    }
}

/// A tensor's device layout as the host conversions take it, borrowed from the index and its
/// [`StoredLayout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DeviceLayout<'a> {
    dtype: accutrace_formats::DType,
    format: i32,
    sub_format: i32,
    device_shape: &'a [u64],
    original_shape: Option<&'a [u64]>,
}

impl CaptureSource {
    /// The device layout of a tensor whose data the capture holds (`None` for statistics alone: device
    /// statistics, a statistics-only capture).
    fn layout(&self, tensor: TensorId) -> Option<DeviceLayout<'_>> {
        let stored = self.layouts.get(tensor)?;
        let info = &self.index.tensors[tensor];
        Some(DeviceLayout {
            dtype: info.dtype,
            format: stored.format,
            sub_format: stored.sub_format,
            device_shape: info.device_shape()?,
            original_shape: match &stored.original_shape {
                OriginalShape::None => None,
                OriginalShape::HostShape => Some(&info.shape),
                OriginalShape::Other(shape) => Some(shape),
            },
        })
    }
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
