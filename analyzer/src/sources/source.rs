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
    /// decodes into a buffer it reuses): `Ok(false)` without calling `f` where that gives `None`.
    fn with_host_bytes(&self, tensor: TensorId, f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        match self.read_host_bytes(tensor)? {
            Some(host) => {
                f(&host.bytes);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    /// Lines about the source as a whole, for `inspect` to print under its title (a capture: each stream,
    /// sealed or not, and the collector's drop counters). Empty where there is nothing beyond the index.
    fn about(&self) -> Vec<String> {
        Vec::new()
    }
}
