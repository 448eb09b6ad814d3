//! The one trait every source implements.

use crate::index::{Index, TensorId};
use accutrace_formats::tensor::host_bytes::HostBytes;
use anyhow::Result;
use std::path::Path;

/// A run to analyse: a capture, a CANN dump tree, a directory of .npy files, or an msprobe dump.
pub trait Source: Send + Sync {
    /// Short name of the source kind (`capture`, `cann-dump`, `npy`, `msprobe`).
    fn kind(&self) -> &'static str;
    /// What the user pointed at.
    fn root(&self) -> &Path;
    /// Ops and tensors, without bytes.
    fn index(&self) -> &Index;
    /// The tensor's values in host layout (device format undone, padding cropped), C order, as f32.
    fn read_values(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<()>;
    /// The 64-bit content hash of the tensor's raw bytes: stored when the source has one, else computed.
    fn content_hash(&self, tensor: TensorId) -> Result<u64>;
    /// [`Source::read_values`] and [`Source::content_hash`] together; sources override it to hash the bytes
    /// they read for the values instead of reading the tensor a second time.
    fn read_values_and_hash(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<u64> {
        self.read_values(tensor, out)?;
        self.content_hash(tensor)
    }
    /// Calls `f` once with the tensor's values, exactly [`Source::read_values`]'s: decoded into `buf`, or,
    /// where the source already holds them as host-order f32 (a little-endian, C-order f32 `.npy` file),
    /// borrowed from its memory map without a copy.
    fn with_values(&self, tensor: TensorId, buf: &mut Vec<f32>, f: &mut dyn FnMut(&[f32])) -> Result<()> {
        self.read_values(tensor, buf)?;
        f(buf);
        Ok(())
    }
    /// The tensor's own bytes in host layout (no trip through f32), when the source can give them:
    /// `convert` writes fp64 and 64-bit integers exactly this way. `None`: use [`Source::read_values`].
    fn read_host_bytes(&self, _tensor: TensorId) -> Result<Option<HostBytes>> {
        Ok(None)
    }
    /// Calls `f` once with [`Source::read_host_bytes`]' bytes, borrowed where the source can (a capture
    /// decodes into a buffer it reuses): `Ok(false)` without calling `f` where that gives `None`. An msprobe
    /// dump lends its `.pt` storages here only, for diff, and gives `None` there.
    fn with_host_bytes(&self, tensor: TensorId, f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        match self.read_host_bytes(tensor)? {
            Some(host) => {
                f(&host.bytes);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    /// Calls `f` once with [`Source::with_host_bytes`]' bytes as [`HostBlocks`], for readers that take them
    /// in order block by block (diff): a capture then unshuffles its planes block by block into the
    /// reader's buffer instead of writing the whole tensor first. What `f` learnt counts only when this
    /// returns `Ok(true)`: a capture checks the content hash after `f` returns. `Ok(false)` without
    /// calling `f` where [`Source::with_host_bytes`] gives `false`.
    fn with_host_blocks(&self, tensor: TensorId, f: &mut dyn FnMut(&mut dyn HostBlocks)) -> Result<bool> {
        self.with_host_bytes(tensor, &mut |bytes| f(&mut SliceBlocks::new(bytes)))
    }
    /// Whether tensors `a` and `b` of this source hold the same data in the same layout, as proved by their
    /// stored bytes themselves (a capture: the same dtype, layout and shapes, and payloads equal byte for
    /// byte), never by a hash alone: then every figure read from one holds for the other, and `a`'s data
    /// matching its content hash when read vouches for `b`'s. diff and compare read a tensor recorded twice (an
    /// op's output, then the next op's input) once. `false` where the source cannot tell (the default).
    /// Asked just before `a` is read: what the check brought into memory (a capture's mapped pages) is left
    /// for that read, and [`Source::release_stored_data`] lets it go after it.
    fn same_stored_data(&self, _a: TensorId, _b: TensorId) -> Result<bool> {
        Ok(false)
    }
    /// Lets go of what [`Source::same_stored_data`] (and a read after it) left in memory of `a` (a
    /// capture's mapped pages of its payload, and those the kernel mapped around them).
    fn release_stored_data(&self, _a: TensorId) -> Result<()> {
        Ok(())
    }
    /// Lets go of everything reads left in memory (a capture's mapped pages), while no read is in flight.
    fn release_all(&self) {}
    /// Whether a read decodes the tensor (zstd, unshuffle, conversion to f32) into the reading thread's
    /// buffers (`sources::buffers`) rather than copying or lending it from a map: two such reads on two
    /// threads overlap real work, so compare reads a large pair's two sides at once, the bench side on
    /// buffers lent to the helping thread. `false` unless a source knows better.
    fn decodes_on_read(&self) -> bool {
        false
    }
    /// How many buffers the size of a tensor as f32 a thread holds while it reads one of this source's
    /// tensors for comparison (decoded bytes, decoding scratch, the f32 values): what sizes compare's pool
    /// ([`crate::threads`]). 2 unless a source knows better.
    fn buffers_per_tensor(&self) -> u64 {
        2
    }
    /// At most how many bytes one of those buffers, the decoding scratch, holds however large the tensor,
    /// where a source reads its tensors through a bounded scratch (a capture read a window at a time);
    /// `None` where it grows with the tensor.
    fn decode_scratch_max(&self) -> Option<u64> {
        None
    }
    /// At most how many bytes a read of the tensor's host blocks ([`Source::with_host_blocks`]) holds, where
    /// the source reads them block by block: a capture's decoded zstd frames, at most the data's size (half
    /// the tensor as f32 for fp16 and bf16). `None` where it reads the tensor whole.
    fn host_blocks_bytes(&self, _tensor: TensorId) -> Option<u64> {
        None
    }
    /// Lines about the source as a whole, for `inspect` to print under its title (a capture: each stream,
    /// sealed or not, and the collector's drop counters). Empty where there is nothing beyond the index.
    fn about(&self) -> Vec<String> {
        Vec::new()
    }
}

/// A tensor's host-layout bytes read in order, block by block ([`Source::with_host_blocks`]): from a slice
/// ([`SliceBlocks`]) or decoded as they are asked for (a capture's byte planes, unshuffled block by block
/// into the reader's buffer, so that no whole-tensor copy is written and read back).
pub trait HostBlocks: Send {
    /// Bytes in all.
    fn len(&self) -> usize;
    /// Whether there are no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The next `min(buf.len(), bytes left)` bytes, written into `buf` or borrowed from the source.
    fn next_block<'s>(&'s mut self, buf: &'s mut [u8]) -> &'s [u8];
    /// `f` of [`next_block`](Self::next_block)'s bytes, for a reader that splits its work on a large `buf`
    /// over the current pool's threads: a capture splits its unshuffle of them the same way, and hashes
    /// them while `f` runs.
    fn with_next_wave(&mut self, buf: &mut [u8], f: &mut (dyn FnMut(&[u8]) + Send)) {
        f(self.next_block(buf))
    }
}

/// [`HostBlocks`] over bytes already in memory: blocks are borrowed, nothing is copied.
pub struct SliceBlocks<'a> {
    bytes: &'a [u8],
}

impl<'a> SliceBlocks<'a> {
    pub fn new(bytes: &'a [u8]) -> SliceBlocks<'a> {
        SliceBlocks { bytes }
    }
}

impl HostBlocks for SliceBlocks<'_> {
    fn len(&self) -> usize {
        self.bytes.len()
    }

    fn next_block<'s>(&'s mut self, buf: &'s mut [u8]) -> &'s [u8] {
        let (block, rest) = self.bytes.split_at(buf.len().min(self.bytes.len()));
        self.bytes = rest;
        block
    }
}
