//! The zip archive's members: read through the zip reader or lent from memory (CRC-checked either way),
//! `data.pkl` and `byteorder` read into a [`Header`], and the file seen through [`WindowedFile`] when it is
//! streamed rather than held.

use super::super::pickle::PickledTensor;
use crate::{FormatError, Result};
use std::borrow::Cow;
use std::io::{Cursor, Read, Seek};

/// Largest `data.pkl` accepted: tensor pickles are a few hundred bytes.
pub(super) const MAX_PICKLE_BYTES: u64 = 16 << 20;

pub(super) fn zip_err(e: zip::result::ZipError) -> FormatError {
    FormatError::whole(format!(
        "not a readable torch.save zip archive: {e} (a .pt file cut short by a copy or a full disk, or not \
         written by torch.save; copy the dump again)"
    ))
}

/// Reads one archive entry completely through the zip reader (decompressing, checking the CRC), checking
/// that it holds exactly the size its header claims and never reserving more than `limit` bytes up front.
pub(super) fn read_entry<R: Read + Seek>(
    zip: &mut zip::ZipArchive<R>,
    name: &str,
    limit: u64,
) -> Result<(Vec<u8>, u64)> {
    let entry = zip.by_name(name).map_err(|e| FormatError::whole(format!("archive entry {name}: {e}")))?;
    let start = entry.data_start();
    let declared = entry.size();
    if declared > limit {
        return Err(FormatError::at(
            start,
            format!("archive entry {name} declares {declared} bytes, limit {limit}"),
        ));
    }
    let mut buf = Vec::new();
    entry
        .take(declared.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| FormatError::at(start, format!("archive entry {name}: {e}")))?;
    if buf.len() as u64 != declared {
        return Err(FormatError::at(
            start,
            format!("archive entry {name} holds {} bytes, its header says {declared}", buf.len()),
        ));
    }
    Ok((buf, start))
}

/// One archive entry's bytes: a stored (uncompressed) member, which is what `torch.save` writes, is a
/// slice of `archive` itself, bounds- and CRC-checked like the zip reader would; anything else is read
/// through [`read_entry`].
pub(super) fn entry_bytes<'a>(
    zip: &mut zip::ZipArchive<Cursor<&'a [u8]>>,
    archive: &'a [u8],
    name: &str,
    limit: u64,
) -> Result<(Cow<'a, [u8]>, u64)> {
    let stored = {
        let entry =
            zip.by_name(name).map_err(|e| FormatError::whole(format!("archive entry {name}: {e}")))?;
        let (start, declared) = (entry.data_start(), entry.size());
        let plain = entry.compression() == zip::CompressionMethod::Stored
            && entry.compressed_size() == declared
            && !entry.encrypted();
        plain.then_some((start, declared, entry.crc32()))
    };
    let Some((start, declared, crc)) = stored else {
        return read_entry(zip, name, limit).map(|(b, start)| (Cow::Owned(b), start));
    };
    if declared > limit {
        return Err(FormatError::at(
            start,
            format!("archive entry {name} declares {declared} bytes, limit {limit}"),
        ));
    }
    let range = usize::try_from(start)
        .ok()
        .zip(usize::try_from(declared).ok())
        .and_then(|(s, n)| Some(s..s.checked_add(n)?))
        .filter(|r| r.end <= archive.len());
    let Some(range) = range else {
        return Err(past_the_end(start, name, declared));
    };
    let bytes = &archive[range];
    if crc32(bytes) != crc {
        return Err(checksum_mismatch(start, name));
    }
    Ok((Cow::Borrowed(bytes), start))
}

/// What a reader of a damaged member can do: its bytes are not those the archive was written with.
pub(super) const DAMAGED_MEMBER: &str =
    "the file changed after it was written (a damaged disk, or a copy cut short or altered); copy the dump again";

/// A member whose bytes do not match the CRC-32 the archive records for them.
pub(super) fn checksum_mismatch(start: u64, name: &str) -> FormatError {
    FormatError::at(start, format!("archive entry {name}: checksum mismatch: {DAMAGED_MEMBER}"))
}

/// A member that, by the size the archive records, runs past the end of the file (or the bytes read).
pub(super) fn past_the_end(start: u64, name: &str, declared: u64) -> FormatError {
    FormatError::at(
        start,
        format!(
            "archive entry {name} declares {declared} bytes past the end of the archive: {DAMAGED_MEMBER}"
        ),
    )
}

/// Members at least this large are CRC-checked in parts of [`CRC_PART`] bytes by the pool's threads, the
/// parts' CRCs combined in order (crc32fast's `combine`: the CRC of the whole, bit for bit). The check of a
/// 144 MiB fp32 storage lent from its map ran on one core while the others waited.
/// (Smaller under test, so that the tests' storages of about a megabyte take the parallel path.)
pub(super) const PARALLEL_CRC_BYTES: usize = if cfg!(test) { 1 << 20 } else { 8 << 20 };
pub(super) const CRC_PART: usize = if cfg!(test) { 256 << 10 } else { 4 << 20 };

/// The CRC-32 of `bytes` (zip's), on several threads where they are many.
pub(super) fn crc32(bytes: &[u8]) -> u32 {
    use rayon::prelude::*;
    if bytes.len() < PARALLEL_CRC_BYTES || rayon::current_num_threads() < 2 {
        return crc32fast::hash(bytes);
    }
    let part = |bytes: &[u8]| {
        let mut crc = crc32fast::Hasher::new();
        crc.update(bytes);
        crc
    };
    let combined = bytes.par_chunks(CRC_PART).map(part).reduce_with(|mut a, b| {
        a.combine(&b);
        a
    });
    combined.unwrap_or_default().finalize()
}

/// What `data.pkl` and the archive's directory say about the tensor, before its storage is read.
pub(super) struct Header {
    pub(super) tensor: PickledTensor,
    pub(super) big_endian: bool,
    /// Bytes per storage element.
    pub(super) elsize: usize,
    pub(super) storage_name: String,
    /// The storage member's declared size.
    pub(super) storage_limit: u64,
    /// The bytes the storage's elements take (at most `storage_limit`).
    pub(super) storage_bytes: usize,
}

/// Reads the archive's directory, its `data.pkl` (through `load_pkl`, given the entry's name) and
/// `byteorder`, and checks that the storage the pickle names exists and is large enough.
pub(super) fn read_header<R: Read + Seek>(
    zip: &mut zip::ZipArchive<R>,
    load_pkl: impl FnOnce(&mut zip::ZipArchive<R>, &str) -> Result<PickledTensor>,
) -> Result<Header> {
    let pkl_name = zip
        .file_names()
        .filter(|n| n.ends_with("data.pkl") && n.matches('/').count() <= 1)
        .min_by_key(|n| n.len())
        .map(str::to_owned)
        .ok_or_else(|| FormatError::whole("archive has no data.pkl: not a torch.save file"))?;
    let prefix = pkl_name.strip_suffix("data.pkl").unwrap_or_default().to_owned();
    let tensor = load_pkl(zip, &pkl_name)?;

    let big_endian = match zip.by_name(&format!("{prefix}byteorder")) {
        Ok(mut f) => {
            let mut s = String::new();
            f.by_ref()
                .take(16)
                .read_to_string(&mut s)
                .map_err(|e| FormatError::whole(format!("byteorder: {e}")))?;
            match s.trim() {
                "little" => false,
                "big" => true,
                other => return Err(FormatError::whole(format!("byteorder is {other:?}, not little/big"))),
            }
        }
        Err(_) => false,
    };

    let elsize =
        tensor.storage.dtype.bits().map(|b| u64::from(b / 8)).filter(|&b| b > 0).ok_or_else(|| {
            FormatError::whole(format!("storage {} has no byte width", tensor.storage.class))
        })?;
    let storage_name = format!("{prefix}data/{}", tensor.storage.key);
    let storage_limit = {
        let entry =
            zip.by_name(&storage_name).map_err(|e| FormatError::whole(format!("{storage_name}: {e}")))?;
        entry.size()
    };
    let storage_bytes =
        tensor.storage.numel.checked_mul(elsize).filter(|&b| b <= storage_limit).ok_or_else(|| {
            FormatError::whole(format!(
                "{} of {} elements does not fit in {storage_name} ({storage_limit} bytes): {DAMAGED_MEMBER}",
                tensor.storage.class, tensor.storage.numel
            ))
        })? as usize;
    Ok(Header { tensor, big_endian, elsize: elsize as usize, storage_name, storage_limit, storage_bytes })
}

/// Bytes of the file kept from its start and from its end when a `.pt` file is streamed: the zip
/// directory, `data.pkl`, `byteorder` and the local headers lie there in what `torch.save` writes.
const WINDOW: usize = 8 << 10;

/// A file read through `Read + Seek` for the zip reader: the first and last [`WINDOW`] bytes are read once
/// up front, anything else with a positioned read. Never maps the file.
#[cfg(unix)]
pub(super) struct WindowedFile<'f> {
    file: &'f std::fs::File,
    len: u64,
    pos: u64,
    head: Vec<u8>,
    tail: Vec<u8>,
    tail_start: u64,
}

#[cfg(unix)]
impl<'f> WindowedFile<'f> {
    pub(super) fn new(file: &'f std::fs::File, len: u64) -> std::io::Result<Self> {
        use std::os::unix::fs::FileExt;
        let head_len = len.min(WINDOW as u64);
        let mut head = vec![0u8; head_len as usize];
        file.read_exact_at(&mut head, 0)?;
        let tail_start = len.saturating_sub(WINDOW as u64).max(head_len);
        let mut tail = vec![0u8; (len - tail_start) as usize];
        file.read_exact_at(&mut tail, tail_start)?;
        Ok(WindowedFile { file, len, pos: 0, head, tail, tail_start })
    }
}

#[cfg(unix)]
impl Read for WindowedFile<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        if self.pos >= self.len || buf.is_empty() {
            return Ok(0);
        }
        let (window, start) = if self.pos < self.head.len() as u64 {
            (Some(&self.head), 0)
        } else if self.pos >= self.tail_start {
            (Some(&self.tail), self.tail_start)
        } else {
            (None, 0)
        };
        let n = match window {
            Some(w) => {
                let from = &w[(self.pos - start) as usize..];
                let n = from.len().min(buf.len());
                buf[..n].copy_from_slice(&from[..n]);
                n
            }
            None => {
                // Up to the tail window at most, so that a read never runs past what the file held when
                // opened.
                let n = buf.len().min((self.tail_start - self.pos) as usize);
                self.file.read_at(&mut buf[..n], self.pos)?
            }
        };
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(unix)]
impl Seek for WindowedFile<'_> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        let target = match to {
            std::io::SeekFrom::Start(n) => Some(n),
            std::io::SeekFrom::End(d) => self.len.checked_add_signed(d),
            std::io::SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = target.ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "seek before the start of the file")
        })?;
        Ok(self.pos)
    }
}
