//! A `.pt` file's tensor bytes handed out block by block ([`PtBlocks`]), for readers that measure as they go.

use super::archive::checksum_mismatch;
use super::plan::{plan, Plan};
use super::stream::READ_CHUNK;
use crate::{DType, FormatError, Result};
use std::path::Path;

/// A `.pt` file's tensor bytes (C order, little-endian), handed out in order block by block
/// ([`PtBlocks::next_block`]) from positioned reads into a buffer of 256 KiB (`READ_CHUNK`): never mapped, so
/// reading a storage of any size leaves none of its pages in the process (a mapped 144 MiB pair showed as 297
/// MiB of RSS). Each byte read goes to the member's CRC; [`PtBlocks::finish`] reads what is left of the
/// member and checks it, so what the blocks showed counts only when it returns `Ok`.
#[cfg(unix)]
pub struct PtBlocks {
    plan: Plan,
    path: std::path::PathBuf,
    /// The next member byte (relative to its start) to read; every byte before it went to `crc`.
    at: u64,
    crc: crc32fast::Hasher,
    buf: Vec<u8>,
    /// The bytes of `buf` read but not yet handed out (all inside the view).
    ready: std::ops::Range<usize>,
    /// The view's bytes not yet handed out.
    left: usize,
    /// The first error met by a read: the blocks after it are zeros.
    error: Option<FormatError>,
}

/// The buffer a [`PtBlocks`] holds, whatever the tensor's size.
#[cfg(unix)]
pub const PT_BLOCKS_BUFFER_BYTES: usize = READ_CHUNK;

/// The storage's dtype where the `.pt` file at `path` is streamed ([`open_pt_blocks`] gives `Some`, and
/// [`stream_pt_file`](super::stream_pt_file) reads it in chunks), `None` where it is read whole: from its
/// directory and `data.pkl` alone, without reading the storage. Errors name the file.
#[cfg(unix)]
pub fn streamed_dtype(path: &Path) -> Result<Option<DType>> {
    Ok(plan(path).map_err(|e| e.in_file(path))?.map(|p| p.h.tensor.storage.dtype))
}

/// Opens the `.pt` file at `path` for [`PtBlocks`]: `None` where its storage cannot be streamed (compressed,
/// a view that is not contiguous, big-endian: [`parse_pt`](super::parse_pt) reads those whole). Errors name
/// the file.
#[cfg(unix)]
pub fn open_pt_blocks(path: &Path) -> Result<Option<PtBlocks>> {
    let Some(plan) = plan(path).map_err(|e| e.in_file(path))? else {
        return Ok(None);
    };
    let left = plan.span.bytes;
    let mut blocks = PtBlocks {
        plan,
        path: path.to_path_buf(),
        at: 0,
        crc: crc32fast::Hasher::new(),
        buf: vec![0; READ_CHUNK],
        ready: 0..0,
        left,
        error: None,
    };
    // The member's bytes before the view: only its CRC takes them.
    blocks.skip_to(blocks.plan.span.offset as u64);
    Ok(Some(blocks))
}

#[cfg(unix)]
impl PtBlocks {
    /// The storage's dtype.
    pub fn dtype(&self) -> DType {
        self.plan.h.tensor.storage.dtype
    }

    /// The tensor's bytes in all.
    pub fn len(&self) -> usize {
        self.plan.span.bytes
    }

    /// Whether the tensor has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads `n` bytes (at most a buffer's) from member byte `self.at` into the buffer.
    fn read(&mut self, n: usize) {
        let mut buf = std::mem::take(&mut self.buf);
        self.read_into(&mut buf[..n]);
        self.buf = buf;
    }

    /// Reads `bytes.len()` bytes from member byte `self.at` into `bytes` and the CRC, or records the first
    /// error and zero-fills them.
    fn read_into(&mut self, bytes: &mut [u8]) {
        use std::os::unix::fs::FileExt;
        if self.error.is_none() {
            match self.plan.file.read_exact_at(bytes, self.plan.start + self.at) {
                Ok(()) => self.crc.update(bytes),
                Err(e) => self.error = Some(FormatError::io(&self.path, &e)),
            }
        }
        if self.error.is_some() {
            bytes.fill(0);
        }
        self.at += bytes.len() as u64;
    }

    /// Reads the member's bytes up to `end` (relative to its start) for the CRC alone.
    fn skip_to(&mut self, end: u64) {
        while self.at < end {
            let n = (end - self.at).min(READ_CHUNK as u64) as usize;
            self.read(n);
        }
    }

    /// The next `min(buf.len(), bytes left)` bytes of the tensor, borrowed from this reader's buffer or
    /// written into `buf` (where they span two reads, or are more than a buffer's worth). After a failed read
    /// the bytes are zeros, and [`PtBlocks::finish`] returns the error.
    pub fn next_block<'s>(&'s mut self, buf: &'s mut [u8]) -> &'s [u8] {
        let want = buf.len().min(self.left);
        self.left -= want;
        if self.ready.len() >= want {
            let block = self.ready.start..self.ready.start + want;
            self.ready.start = block.end;
            return &self.buf[block];
        }
        let mut filled = 0;
        while filled < want {
            if self.ready.is_empty() && want - filled >= READ_CHUNK {
                // A block of a buffer's size or more (a reader splitting its work over threads) is read
                // straight into `buf`.
                self.read_into(&mut buf[filled..want]);
                filled = want;
                continue;
            }
            if self.ready.is_empty() {
                // The view's next bytes, at most a buffer's worth.
                let view_left = (self.plan.span.offset + self.plan.span.bytes) as u64 - self.at;
                let n = view_left.min(READ_CHUNK as u64) as usize;
                self.read(n);
                self.ready = 0..n;
            }
            let n = self.ready.len().min(want - filled);
            buf[filled..filled + n].copy_from_slice(&self.buf[self.ready.start..self.ready.start + n]);
            self.ready.start += n;
            filled += n;
        }
        &buf[..want]
    }

    /// Reads what is left of the member (the view's bytes not handed out, and those after the view) for the
    /// CRC, then checks it: the first read error, else a checksum mismatch, in the words of the other
    /// readers, naming the file.
    pub fn finish(mut self) -> Result<()> {
        self.skip_to(self.plan.declared);
        let (start, name) = (self.plan.start, &self.plan.h.storage_name);
        let result = match self.error.take() {
            Some(e) => Err(e),
            None if self.crc.clone().finalize() != self.plan.crc => Err(checksum_mismatch(start, name)),
            None => Ok(()),
        };
        result.map_err(|e| e.in_file(&self.path))
    }
}
