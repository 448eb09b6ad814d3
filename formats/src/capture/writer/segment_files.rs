//! Segment files: created (or a crash's leftover truncated), given their size (`fallocate`, else zeros
//! written, or sparse), mapped and pre-faulted; in chunks that a cancel flag can stop, on the helper thread.

use crate::capture::segment::HEADER_LEN;
use crate::{FormatError, Result};
use memmap2::{MmapMut, MmapOptions};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes the helper allocates and pre-faults between two looks at its cancel flag.
const PREPARE_CHUNK: u64 = 4 << 20;

/// Creates segment `path` (which must not exist) of `size` bytes, maps and pre-faults it and writes
/// `header`: the synchronous path of a roll, and the first segment.
pub(super) fn create_segment(path: &Path, size: u64, preallocate: bool, header: &[u8]) -> Result<MmapMut> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| FormatError::io(path, &e))?;
    allocate(&file, size, preallocate).map_err(|e| FormatError::io(path, &e))?;
    let mut map = map_segment(&file, size).map_err(|e| FormatError::io(path, &e))?;
    prefault(&map);
    map[..HEADER_LEN as usize].copy_from_slice(header);
    Ok(map)
}

/// The helper thread's work: creates (or truncates a crash's leftover) `path`, the next segment under its
/// temporary name, gives it `size` bytes, maps and pre-faults it, `PREPARE_CHUNK` at a time, giving up
/// when `cancel` is set. The header is written at the roll. On error (or cancel) the file is removed.
pub(super) fn prepare_segment(
    path: &Path,
    size: u64,
    preallocate: bool,
    cancel: &AtomicBool,
) -> std::io::Result<MmapMut> {
    let cancelled = || std::io::Error::new(std::io::ErrorKind::Interrupted, "segment preparation cancelled");
    let prepared =
        OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path).and_then(|file| {
            allocate_cancellable(&file, size, preallocate, cancel)?;
            if cancel.load(Ordering::Relaxed) {
                return Err(cancelled());
            }
            let map = map_segment(&file, size)?;
            let mut at = 0;
            while at < size {
                if cancel.load(Ordering::Relaxed) {
                    return Err(cancelled());
                }
                let len = PREPARE_CHUNK.min(size - at);
                if !prefault_range(&map, at as usize, len as usize) {
                    prefault(&map);
                    break;
                }
                at += len;
            }
            Ok(map)
        });
    if prepared.is_err() {
        let _ = std::fs::remove_file(path);
    }
    prepared
}

/// [`allocate`] in `PREPARE_CHUNK` steps (fallocate of each range, which also extends the file), checking
/// `cancel` between them; where fallocate is unsupported, or without preallocation, as [`allocate`].
fn allocate_cancellable(
    file: &File,
    size: u64,
    preallocate: bool,
    cancel: &AtomicBool,
) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    if preallocate {
        let mut at = 0;
        while at < size {
            if cancel.load(Ordering::Relaxed) {
                return Err(std::io::Error::new(std::io::ErrorKind::Interrupted, "cancelled"));
            }
            let len = PREPARE_CHUNK.min(size - at);
            if !fallocate_range(file, at, len)? {
                break;
            }
            at += len;
        }
        if at >= size {
            return Ok(());
        }
    }
    let _ = cancel;
    allocate(file, size, preallocate)
}

/// Maps `size` bytes of a segment file this writer just created.
fn map_segment(file: &File, size: u64) -> std::io::Result<MmapMut> {
    // SAFETY: the file was just created (or truncated) by this writer and has `size` bytes; only this writer
    // writes it and nobody truncates it while mapped (a reader in another process only reads, and renaming
    // the prepared file to its segment name keeps the mapping). Memory safety of the mapping then holds
    // for its lifetime, which `OpenSegment` (or the preparation) owns.
    unsafe { MmapOptions::new().len(size as usize).map_mut(file) }
}

/// Faults the pages of a fresh segment in up front, writable, in one call (`MADV_POPULATE_WRITE`, Linux
/// 5.14+): appends then copy into mapped pages without a page fault each. Best effort: where the advice is
/// unknown, ask for read-ahead instead (the pages then fault on their first write, as without it).
fn prefault(map: &MmapMut) {
    #[cfg(target_os = "linux")]
    if map.advise(memmap2::Advice::PopulateWrite).is_ok() {
        return;
    }
    let _ = map.advise(memmap2::Advice::WillNeed);
}

/// `MADV_POPULATE_WRITE` of `len` bytes at `offset` (see [`prefault`]); false where unsupported.
fn prefault_range(map: &MmapMut, offset: usize, len: usize) -> bool {
    #[cfg(target_os = "linux")]
    if map.advise_range(memmap2::Advice::PopulateWrite, offset, len).is_ok() {
        return true;
    }
    let _ = (map, offset, len);
    false
}

/// Gives the new file its size: allocated blocks (fallocate, else zeros written through the file), or a
/// sparse extend.
fn allocate(file: &File, size: u64, preallocate: bool) -> std::io::Result<()> {
    if !preallocate {
        return file.set_len(size);
    }
    #[cfg(target_os = "linux")]
    if fallocate_range(file, 0, size)? {
        return Ok(());
    }
    let zeros = vec![0u8; 1 << 20];
    let mut left = size;
    let mut w = file;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        w.write_all(&zeros[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// `fallocate(fd, 0, offset, size)`: allocates the file's blocks (reading as zeros) and extends its length
/// to `offset + size`, without writing them. Ok(false): the file system does not support it (the caller
/// writes zeros instead).
#[cfg(target_os = "linux")]
fn fallocate_range(file: &File, offset: u64, size: u64) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    let too_large = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "segment size too large");
    let len = libc::off_t::try_from(size).map_err(|_| too_large())?;
    let offset = libc::off_t::try_from(offset).map_err(|_| too_large())?;
    loop {
        // SAFETY: `file` owns an open descriptor for the whole call; fallocate reads only its integer
        // arguments and touches no memory of this process.
        let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, offset, len) };
        if r == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => return Ok(false),
            _ => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn preallocation_allocates_blocks_and_sparse_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let size = 4 << 20;
        let dense = File::create(dir.path().join("dense")).unwrap();
        allocate(&dense, size, true).unwrap();
        let m = dense.metadata().unwrap();
        assert_eq!(m.len(), size);
        assert!(m.blocks() * 512 >= size, "{} blocks for {size} bytes", m.blocks());
        let sparse = File::create(dir.path().join("sparse")).unwrap();
        allocate(&sparse, size, false).unwrap();
        let m = sparse.metadata().unwrap();
        assert_eq!(m.len(), size);
        assert!(m.blocks() * 512 < size);
        // Preallocated space reads as zeros (the reader's "end of frames").
        let bytes = std::fs::read(dir.path().join("dense")).unwrap();
        assert!(bytes.iter().all(|&b| b == 0));
    }
}
