//! PyTorch `.pt` files (`torch.save` of one tensor), read without Python.
//!
//! The file is a zip archive: `{prefix}/data.pkl` (a pickle describing the tensor), `{prefix}/data/{key}`
//! (raw storage bytes), `{prefix}/byteorder` (`little`/`big`, absent in old files = little) and version
//! files. The pickle runs in [`super::pickle`]'s safe interpreter; the view it describes (offset, size,
//! stride) is checked against the storage's real size before anything is allocated, gathered into C order
//! and decoded by the shared `crate::tensor` decoders.
//!
//! Two ways in: [`read_pt_file`] / [`parse_pt`] hold the whole archive in memory (a map or the fuzz
//! target's bytes); [`stream_pt_file`], what `compare` uses, streams a stored storage member through a
//! small per-thread buffer, checking its CRC-32 and decoding it chunk by chunk into the caller's buffer.

use super::pickle::{self, PickledTensor};
use crate::dump::MappedFile;
use crate::{DType, FormatError, Result};
use std::borrow::Cow;
use std::io::{Cursor, Read, Seek};
use std::path::Path;

/// Largest `data.pkl` accepted: tensor pickles are a few hundred bytes.
const MAX_PICKLE_BYTES: u64 = 16 << 20;
/// A view may repeat storage elements (stride 0, broadcast) but may not produce more than this many
/// times the storage's real bytes: the output size must stay tied to what the archive holds.
const MAX_EXPANSION: u64 = 64;

/// A tensor read from a `.pt` file: dtype, shape and its elements in C order as little-endian bytes.
#[derive(Debug)]
pub struct RawTensor {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<u64>,
    /// Elements in C order, little-endian.
    pub bytes: Vec<u8>,
}

impl RawTensor {
    /// Number of elements (the product of the shape), checked: the shape comes from the file.
    pub fn elements(&self) -> Result<usize> {
        crate::tensor::element_count_usize(&self.shape)
    }
}

/// A tensor of a `.pt` archive held in memory: its bytes (C order, little-endian) are borrowed from the
/// archive where they can be (a stored, contiguous, little-endian storage: what `torch.save` writes).
#[derive(Debug)]
pub struct PtTensor<'a> {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<u64>,
    /// Elements in C order, little-endian.
    pub bytes: Cow<'a, [u8]>,
}

impl PtTensor<'_> {
    /// Number of elements (the product of the shape), checked: the shape comes from the file.
    pub fn elements(&self) -> Result<usize> {
        crate::tensor::element_count_usize(&self.shape)
    }

    fn into_raw(self) -> RawTensor {
        RawTensor { dtype: self.dtype, shape: self.shape, bytes: self.bytes.into_owned() }
    }
}

/// Reads the `.pt` file at `path`; every error names the file and, where known, the byte offset.
pub fn read_pt_file(path: &Path) -> Result<RawTensor> {
    let map = MappedFile::open(path)?;
    parse_pt(map.bytes()).map(PtTensor::into_raw).map_err(|e| e.in_file(path))
}

/// Reads a `.pt` archive from memory (the fuzz target's entry point).
pub fn read_pt_bytes(bytes: &[u8]) -> Result<RawTensor> {
    parse_pt(bytes).map(PtTensor::into_raw)
}

fn zip_err(e: zip::result::ZipError) -> FormatError {
    FormatError::whole(format!("not a readable torch.save zip archive: {e}"))
}

/// Reads one archive entry completely through the zip reader (decompressing, checking the CRC), checking
/// that it holds exactly the size its header claims and never reserving more than `limit` bytes up front.
fn read_entry<R: Read + Seek>(
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
fn entry_bytes<'a>(
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
        return Err(FormatError::at(
            start,
            format!("archive entry {name} declares {declared} bytes past the end of the archive"),
        ));
    };
    let bytes = &archive[range];
    if crc32(bytes) != crc {
        return Err(FormatError::at(start, format!("archive entry {name}: checksum mismatch")));
    }
    Ok((Cow::Borrowed(bytes), start))
}

/// Members at least this large are CRC-checked in parts of [`CRC_PART`] bytes by the pool's threads, the
/// parts' CRCs combined in order (crc32fast's `combine`: the CRC of the whole, bit for bit). The check of a
/// 144 MiB fp32 storage lent from its map ran on one core while the others waited.
/// (Smaller under test, so that the tests' storages of about a megabyte take the parallel path.)
const PARALLEL_CRC_BYTES: usize = if cfg!(test) { 1 << 20 } else { 8 << 20 };
const CRC_PART: usize = if cfg!(test) { 256 << 10 } else { 4 << 20 };

/// The CRC-32 of `bytes` (zip's), on several threads where they are many.
fn crc32(bytes: &[u8]) -> u32 {
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
struct Header {
    tensor: PickledTensor,
    big_endian: bool,
    /// Bytes per storage element.
    elsize: usize,
    storage_name: String,
    /// The storage member's declared size.
    storage_limit: u64,
    /// The bytes the storage's elements take (at most `storage_limit`).
    storage_bytes: usize,
}

/// Reads the archive's directory, its `data.pkl` (through `load_pkl`, given the entry's name) and
/// `byteorder`, and checks that the storage the pickle names exists and is large enough.
fn read_header<R: Read + Seek>(
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
                "{} of {} elements does not fit in {storage_name} ({storage_limit} bytes)",
                tensor.storage.class, tensor.storage.numel
            ))
        })? as usize;
    Ok(Header { tensor, big_endian, elsize: elsize as usize, storage_name, storage_limit, storage_bytes })
}

/// Parses a `.pt` archive held in memory.
pub fn parse_pt(archive: &[u8]) -> Result<PtTensor<'_>> {
    let mut zip = zip::ZipArchive::new(Cursor::new(archive)).map_err(zip_err)?;
    let h = read_header(&mut zip, |zip, name| {
        let (pkl, pkl_start) = entry_bytes(zip, archive, name, MAX_PICKLE_BYTES)?;
        pickle::load_tensor(&pkl).map_err(|e| e.shifted(pkl_start))
    })?;
    let (storage, _) = entry_bytes(&mut zip, archive, &h.storage_name, h.storage_limit)?;
    let (tensor, elsize) = (&h.tensor, h.elsize);
    let mut bytes = match storage {
        Cow::Borrowed(s) => gather(tensor, &s[..h.storage_bytes], elsize)?,
        Cow::Owned(s) => Cow::Owned(gather(tensor, &s[..h.storage_bytes], elsize)?.into_owned()),
    };
    if h.big_endian && elsize > 1 {
        for el in bytes.to_mut().chunks_exact_mut(elsize) {
            el.reverse();
        }
    }
    Ok(PtTensor { dtype: h.tensor.storage.dtype, shape: h.tensor.size, bytes })
}

/// Bytes of the file kept from its start and from its end when a `.pt` file is streamed: the zip
/// directory, `data.pkl`, `byteorder` and the local headers lie there in what `torch.save` writes.
const WINDOW: usize = 8 << 10;
/// Storage bytes read per system call when streaming, and bytes checked, decoded and hashed per step in
/// between (so that each step's bytes are still in L1 for the next pass).
const READ_CHUNK: usize = 256 << 10;
const STEP: usize = 16 << 10;

/// A file read through `Read + Seek` for the zip reader: the first and last [`WINDOW`] bytes are read once
/// up front, anything else with a positioned read. Never maps the file.
#[cfg(unix)]
struct WindowedFile<'f> {
    file: &'f std::fs::File,
    len: u64,
    pos: u64,
    head: Vec<u8>,
    tail: Vec<u8>,
    tail_start: u64,
}

#[cfg(unix)]
impl<'f> WindowedFile<'f> {
    fn new(file: &'f std::fs::File, len: u64) -> std::io::Result<Self> {
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

thread_local! {
    /// Per-thread read buffer of [`stream_pt_file`] ([`READ_CHUNK`] bytes once used).
    static READ_BUF: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Decodes the tensor of the `.pt` file at `path` into `out` as f32 (like [`read_pt_file`] then
/// `decode_f32`: same values, same checks), reusing `out`'s memory, and feeds the values' little-endian
/// bytes to `hasher` when given. Returns the dtype; errors name the file.
///
/// A stored, contiguous, little-endian storage (what `torch.save` writes) is streamed: read in chunks with
/// positioned reads (no memory map, so no page faults and no unmapping), and each chunk is CRC-checked,
/// decoded and hashed while it is in cache. The CRC covers the whole member, as the zip reader's does, and
/// a mismatch is an error (`out` is then cleared). Anything else is read whole and goes through
/// [`parse_pt`].
pub fn stream_pt_file(
    path: &Path,
    out: &mut Vec<f32>,
    hasher: Option<&mut crate::hash::Xxh3>,
) -> Result<DType> {
    let result = stream_pt(path, Some(out), hasher).map_err(|e| e.in_file(path));
    if result.is_err() {
        out.clear();
    }
    result
}

/// Feeds the little-endian f32 bytes of the values of the `.pt` file's tensor at `path` to `hasher`:
/// exactly what [`stream_pt_file`] feeds it, with the same checks and the same errors, but the values are
/// decoded a step at a time into a small buffer and dropped, not into one the size of the tensor (a content
/// hash alone, as `diff` asks for every tensor, needs no copy of it). Returns the dtype; errors name the file.
pub fn stream_pt_file_hash(path: &Path, hasher: &mut crate::hash::Xxh3) -> Result<DType> {
    stream_pt(path, None, Some(hasher)).map_err(|e| e.in_file(path))
}

#[cfg(not(unix))]
fn stream_pt(
    path: &Path,
    out: Option<&mut Vec<f32>>,
    hasher: Option<&mut crate::hash::Xxh3>,
) -> Result<DType> {
    read_whole(path, out.unwrap_or(&mut Vec::new()), hasher)
}

/// [`stream_pt_file`] for archives it cannot stream: the file read into memory and parsed by [`parse_pt`].
fn read_whole(path: &Path, out: &mut Vec<f32>, hasher: Option<&mut crate::hash::Xxh3>) -> Result<DType> {
    let bytes = std::fs::read(path).map_err(|e| FormatError::io(path, &e))?;
    let t = parse_pt(&bytes)?;
    crate::tensor::host::decode_reusing(t.dtype, &t.bytes, t.elements()?, out)?;
    if let Some(h) = hasher {
        super::values_hash::hash_f32_le(h, out);
    }
    Ok(t.dtype)
}

/// [`stream_pt_file`] into `out`, or with `out` `None` into a buffer of one step's values that each step
/// overwrites ([`stream_pt_file_hash`]; the archives it cannot stream are then read whole as there).
/// A `.pt` file opened for streaming ([`plan`]): a stored, contiguous, little-endian storage of a dtype that
/// decodes element by element (what `torch.save` writes), the member's place in the file and its CRC.
#[cfg(unix)]
struct Plan {
    file: std::fs::File,
    h: Header,
    span: ViewSpan,
    /// The storage member's first byte in the file, its declared size and CRC-32.
    start: u64,
    declared: u64,
    crc: u32,
}

/// Reads the `.pt` file's directory and `data.pkl` through [`WindowedFile`] and checks its view: `None`
/// where the storage cannot be streamed (read it whole through [`parse_pt`] then).
#[cfg(unix)]
fn plan(path: &Path) -> Result<Option<Plan>> {
    let file = std::fs::File::open(path).map_err(|e| FormatError::io(path, &e))?;
    let len = file.metadata().map_err(|e| FormatError::io(path, &e))?.len();
    let reader = WindowedFile::new(&file, len).map_err(|e| FormatError::io(path, &e))?;
    let mut zip = zip::ZipArchive::new(reader).map_err(zip_err)?;
    let h = read_header(&mut zip, |zip, name| {
        let (pkl, pkl_start) = read_entry(zip, name, MAX_PICKLE_BYTES)?;
        pickle::load_tensor(&pkl).map_err(|e| e.shifted(pkl_start))
    })?;
    let dtype = h.tensor.storage.dtype;
    let stored = {
        let entry = zip
            .by_name(&h.storage_name)
            .map_err(|e| FormatError::whole(format!("archive entry {}: {e}", h.storage_name)))?;
        let plain = entry.compression() == zip::CompressionMethod::Stored
            && entry.compressed_size() == entry.size()
            && !entry.encrypted();
        plain.then(|| (entry.data_start(), entry.size(), entry.crc32()))
    };
    let span = check_view(&h.tensor, h.storage_bytes, h.elsize)?;
    let decodes_alone = dtype.is_decodable()
        && crate::tensor::lanes_per_element(dtype) == 1
        && dtype.bits() == Some(8 * h.elsize as u32);
    let Some((start, declared, crc)) = stored else {
        return Ok(None);
    };
    if !span.contiguous || (h.big_endian && h.elsize > 1) || !decodes_alone {
        return Ok(None);
    }
    let name = &h.storage_name;
    start.checked_add(declared).filter(|&e| e <= len).ok_or_else(|| {
        FormatError::at(
            start,
            format!("archive entry {name} declares {declared} bytes past the end of the archive"),
        )
    })?;
    Ok(Some(Plan { file, h, span, start, declared, crc }))
}

#[cfg(unix)]
fn stream_pt(
    path: &Path,
    out: Option<&mut Vec<f32>>,
    hasher: Option<&mut crate::hash::Xxh3>,
) -> Result<DType> {
    let Some(Plan { file, h, span, start, declared, crc }) = plan(path)? else {
        return read_whole(path, out.unwrap_or(&mut Vec::new()), hasher);
    };
    let (dtype, name) = (h.tensor.storage.dtype, &h.storage_name);
    // The view's bytes, relative to the member's start; inside the member (check_view, storage_bytes).
    let (view_start, view_end) = (span.offset as u64, (span.offset + span.bytes) as u64);
    // Sized once for the whole view, keeping what `out` already holds: the steps below write every element,
    // so only a part that grows is zero-filled first (a per-step `resize` zero-filled every element).
    let total = span.bytes / h.elsize;
    let out = out.map(|out| {
        if out.len() < total {
            grow_zeroed(out, total);
        } else {
            out.truncate(total);
        }
        &mut out[..]
    });
    let member = Streamed { file: &file, path, start, view: view_start..view_end, dtype, elsize: h.elsize };
    // A large view kept in `out` is read in parts on the pool's threads ([`Streamed::parts`]); anything else
    // in one part, in order, on this thread.
    let parts = match out {
        Some(out) if span.bytes >= PARALLEL_STREAM_BYTES && rayon::current_num_threads() > 1 => {
            member.parts(0..declared, out, hasher)
        }
        out => vec![member.part(0..declared, out, hasher)],
    };
    // The first error in the member's order, as one pass in order meets it; then the CRC of the whole member.
    let mut crc_state = crc32fast::Hasher::new();
    let mut filled = 0usize;
    for part in parts {
        part.result?;
        crc_state.combine(&part.crc);
        filled += part.filled;
    }
    if crc_state.finalize() != crc {
        return Err(FormatError::at(start, format!("archive entry {name}: checksum mismatch")));
    }
    if filled != total {
        return Err(FormatError::at(start, format!("archive entry {name} ended before the tensor's bytes")));
    }
    Ok(dtype)
}

/// Grows `out` to `total` zeros beyond what it holds ([`stream_pt`] then writes every element). A growth of a
/// large view's size is zero-filled on the pool's threads: the first 144 MiB decode buffer's page faults and
/// zero-fill ran on one core while the other waited, a sixth of compare's time on an LLM-sized msprobe pair. (rayon writes the zeros into the spare capacity and sets the length once all are written.)
fn grow_zeroed(out: &mut Vec<f32>, total: usize) {
    use rayon::prelude::*;
    let grow = total.saturating_sub(out.len());
    if grow >= PARALLEL_STREAM_BYTES / 4 && rayon::current_num_threads() > 1 {
        out.par_extend(rayon::iter::repeat_n(0.0f32, grow));
    } else {
        out.resize(total, 0.0);
    }
}

/// Views at least this large (bytes of storage) that [`stream_pt`] keeps in `out` are read in parts of
/// [`STREAM_PART`] bytes by the pool's threads: a 144 MiB weight read, checked and decoded on one core while
/// the others waited took most of compare's time on an LLM-sized msprobe pair.
/// (Smaller under test, so that the tests' storages of about a megabyte take the parallel path.)
const PARALLEL_STREAM_BYTES: usize = if cfg!(test) { 1 << 20 } else { 8 << 20 };
/// A part of a member read in parallel: whole read chunks, so that parts never split an element either.
const STREAM_PART: u64 = (if cfg!(test) { 2 } else { 16 }) * READ_CHUNK as u64;
/// Parts per thread of the pool that [`Streamed::parts`] reads at once while one thread hashes the ones
/// before them (a wave): a few MiB per thread, so that what it hashes is still in the last-level cache.
/// (One under test, so that the tests' storages of a few parts take several waves.)
const WAVE_PARTS_PER_THREAD: usize = if cfg!(test) { 1 } else { 2 };

/// A stored, contiguous member that [`stream_pt`] streams: where it lies in the file and which of its bytes
/// (`view`, relative to the member's start) are the tensor's elements.
#[cfg(unix)]
struct Streamed<'a> {
    file: &'a std::fs::File,
    path: &'a Path,
    /// The member's first byte in the file.
    start: u64,
    view: std::ops::Range<u64>,
    dtype: DType,
    elsize: usize,
}

/// What [`Streamed::part`] read of its bytes: their CRC state, the view's elements among them it decoded,
/// and the first error met (after which the part stops).
#[cfg(unix)]
struct Part {
    crc: crc32fast::Hasher,
    filled: usize,
    result: Result<()>,
}

#[cfg(unix)]
impl Streamed<'_> {
    /// The view's elements that lie in `range` of the member (bytes relative to its start), as indices into
    /// the view.
    fn elements_of(&self, range: &std::ops::Range<u64>) -> std::ops::Range<usize> {
        let clamp =
            |b: u64| (b.clamp(self.view.start, self.view.end) - self.view.start) as usize / self.elsize;
        clamp(range.start)..clamp(range.end)
    }

    /// [`Streamed::part`] over `range` in parts of [`STREAM_PART`] bytes, each on whichever thread of the
    /// pool takes it, decoding into its own elements of `out` (all of the view's). The hash is fed in the
    /// member's order from `out`, a wave of parts behind the reads: while the pool reads a wave of parts,
    /// one thread hashes the wave before it (still in the last-level cache), so that no pass over the values
    /// is left for one thread once all are read. The parts are returned in order.
    fn parts(
        &self,
        range: std::ops::Range<u64>,
        out: &mut [f32],
        hasher: Option<&mut crate::hash::Xxh3>,
    ) -> Vec<Part> {
        use rayon::prelude::*;
        let mut slices = Vec::new();
        let (mut at, mut tail) = (range.start, out);
        while at < range.end {
            let r = at..range.end.min(at + STREAM_PART);
            let (this, next) = std::mem::take(&mut tail).split_at_mut(self.elements_of(&r).len());
            slices.push((r, this));
            (at, tail) = (at + STREAM_PART, next);
        }
        let Some(hasher) = hasher else {
            return slices.into_par_iter().map(|(r, out)| self.part(r, Some(out), None)).collect();
        };
        // Whether every part so far read all its elements: the hash is fed only while they did (a part that
        // failed leaves its error, which is returned before any hash is taken).
        let mut whole = true;
        let mut hash = |done: &[(std::ops::Range<u64>, &mut [f32])], parts: &[Part]| {
            for ((_, values), part) in done.iter().zip(parts) {
                whole &= part.result.is_ok() && part.filled == values.len();
                if !whole {
                    return;
                }
                super::values_hash::hash_f32(hasher, values);
            }
        };
        let wave = rayon::current_num_threads() * WAVE_PARTS_PER_THREAD;
        let mut parts: Vec<Part> = Vec::with_capacity(slices.len());
        let mut previous: Vec<(std::ops::Range<u64>, &mut [f32])> = Vec::new();
        let mut slices = slices.into_iter().peekable();
        while slices.peek().is_some() {
            let mut this: Vec<_> = slices.by_ref().take(wave).collect();
            let done = &parts[parts.len() - previous.len()..];
            let ((), read) = rayon::join(
                || hash(&previous, done),
                || {
                    let read =
                        this.par_iter_mut().map(|(r, out)| self.part(r.clone(), Some(&mut **out), None));
                    read.collect::<Vec<_>>()
                },
            );
            parts.extend(read);
            previous = this;
        }
        hash(&previous, &parts[parts.len() - previous.len()..]);
        parts
    }

    /// Reads `range` of the member (bytes relative to its start; a multiple of [`READ_CHUNK`] from the
    /// member's start, or its end) chunk by chunk with positioned reads into this thread's [`READ_BUF`],
    /// feeding each step to a CRC and decoding the view's elements in it into `out` (the view's elements
    /// of `range`), or with `out` `None` into a buffer of one step's values that each step overwrites; the
    /// values' little-endian bytes go to `hasher` in order. An fp32 storage on a little-endian machine is
    /// read straight into `out` where a chunk lies inside the view: its bytes are the values.
    fn part(
        &self,
        range: std::ops::Range<u64>,
        mut out: Option<&mut [f32]>,
        mut hasher: Option<&mut crate::hash::Xxh3>,
    ) -> Part {
        use std::os::unix::fs::FileExt;
        let (dtype, elsize) = (self.dtype, self.elsize);
        let mut step_values = Vec::new();
        if out.is_none() {
            step_values.resize(STEP.min(self.elements_of(&range).len()), 0.0);
        }
        let mut part = Part { crc: crc32fast::Hasher::new(), filled: 0, result: Ok(()) };
        let mut buf = READ_BUF.with(std::cell::Cell::take);
        buf.resize(READ_CHUNK, 0);
        let mut at = range.start;
        'chunks: while at < range.end {
            let n = (range.end - at).min(READ_CHUNK as u64) as usize;
            let chunk = at..at + n as u64;
            let direct = cfg!(target_endian = "little")
                && dtype == DType::FLOAT
                && self.view.start <= chunk.start
                && chunk.end <= self.view.end;
            if let (true, Some(out)) = (direct, out.as_deref_mut()) {
                // Inside the view: `n / 4` elements of `out` from `filled` (see `elements_of`).
                let values = &mut out[part.filled..part.filled + n / 4];
                let bytes = super::values_hash::f32_bytes_mut(values);
                if let Err(e) = self.file.read_exact_at(bytes, self.start + at) {
                    part.result = Err(FormatError::io(self.path, &e));
                    break;
                }
                part.crc.update(bytes);
                if let Some(hasher) = hasher.as_deref_mut() {
                    hasher.update(bytes);
                }
                part.filled += n / 4;
                at += n as u64;
                continue;
            }
            if let Err(e) = self.file.read_exact_at(&mut buf[..n], self.start + at) {
                part.result = Err(FormatError::io(self.path, &e));
                break;
            }
            // STEP is a multiple of every element size, and so are READ_CHUNK and the view's offsets, so steps
            // never split an element.
            for (i, step) in buf[..n].chunks(STEP).enumerate() {
                part.crc.update(step);
                let step_start = at + (i * STEP) as u64;
                let from = self.view.start.max(step_start);
                let to = self.view.end.min(step_start + step.len() as u64);
                if from >= to {
                    continue;
                }
                let bytes = &step[(from - step_start) as usize..(to - step_start) as usize];
                // Inside the view, so inside `out` (this part's elements), whole elements (see above); at most
                // STEP elements, so inside `step_values` too.
                let n = bytes.len() / elsize;
                let values = match out.as_deref_mut() {
                    Some(out) => &mut out[part.filled..part.filled + n],
                    None => &mut step_values[..n],
                };
                part.filled += n;
                if let Err(e) = crate::tensor::decode_f32_into(dtype, bytes, values) {
                    part.result = Err(e);
                    break 'chunks;
                }
                if let Some(hasher) = hasher.as_deref_mut() {
                    if dtype == DType::FLOAT {
                        // The f32 values' little-endian bytes are the storage's bytes.
                        hasher.update(bytes);
                    } else {
                        super::values_hash::hash_f32(hasher, values);
                    }
                }
            }
            at += n as u64;
        }
        READ_BUF.with(|c| c.set(buf));
        part
    }
}

/// A `.pt` file's tensor bytes (C order, little-endian), handed out in order block by block
/// ([`PtBlocks::next_block`]) from positioned reads into a buffer of 256 KiB (`READ_CHUNK`): never mapped,
/// so reading a storage of any size leaves none of its pages in the process (a mapped 144 MiB pair showed
/// as 297 MiB of RSS). Each byte read goes to the member's CRC; [`PtBlocks::finish`] reads what is left of the
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
/// [`stream_pt_file`] reads it in chunks), `None` where it is read whole: from its directory and `data.pkl`
/// alone, without reading the storage. Errors name the file.
#[cfg(unix)]
pub fn streamed_dtype(path: &Path) -> Result<Option<DType>> {
    Ok(plan(path).map_err(|e| e.in_file(path))?.map(|p| p.h.tensor.storage.dtype))
}

/// Opens the `.pt` file at `path` for [`PtBlocks`]: `None` where its storage cannot be streamed (compressed,
/// a view that is not contiguous, big-endian: [`parse_pt`] reads those whole). Errors name the file.
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
    /// written into `buf` (where they span two reads, or are more than a buffer's worth). After a failed read the bytes are zeros, and
    /// [`PtBlocks::finish`] returns the error.
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
            None if self.crc.clone().finalize() != self.plan.crc => {
                Err(FormatError::at(start, format!("archive entry {name}: checksum mismatch")))
            }
            None => Ok(()),
        };
        result.map_err(|e| e.in_file(&self.path))
    }
}

/// Where a view's elements lie in its storage, after [`check_view`].
struct ViewSpan {
    /// Byte offset of the first element.
    offset: usize,
    /// Bytes of the view in C order (elements times element size).
    bytes: usize,
    /// The elements are one run of storage (no gather needed).
    contiguous: bool,
}

/// Checks that every index the view can reach lies inside a storage of `storage_len` bytes and that the
/// view's size is bounded by the storage's (at most [`MAX_EXPANSION`] times).
fn check_view(t: &PickledTensor, storage_len: usize, elsize: usize) -> Result<ViewSpan> {
    let storage_elems = (storage_len / elsize) as u64;
    let numel = t
        .size
        .iter()
        .try_fold(1u64, |acc, &s| acc.checked_mul(s))
        .ok_or_else(|| FormatError::whole(format!("tensor size {:?} overflows", t.size)))?;
    if numel == 0 {
        return Ok(ViewSpan { offset: 0, bytes: 0, contiguous: true });
    }
    let mut last = t.storage_offset;
    for (&size, &stride) in t.size.iter().zip(&t.stride) {
        last = (size - 1)
            .checked_mul(stride)
            .and_then(|span| last.checked_add(span))
            .ok_or_else(|| FormatError::whole("tensor view overflows its storage index"))?;
    }
    if last >= storage_elems {
        return Err(FormatError::whole(format!(
            "tensor view (offset {}, size {:?}, stride {:?}) reaches element {last} of a storage of {storage_elems}",
            t.storage_offset, t.size, t.stride
        )));
    }
    let out_bytes =
        numel.checked_mul(elsize as u64).filter(|&b| b <= (storage_len as u64).saturating_mul(MAX_EXPANSION));
    let out_bytes = out_bytes.ok_or_else(|| {
        FormatError::whole(format!(
            "tensor of {numel} elements expands its {storage_len}-byte storage too far"
        ))
    })? as usize;
    Ok(ViewSpan {
        offset: t.storage_offset as usize * elsize,
        bytes: out_bytes,
        contiguous: is_contiguous(&t.size, &t.stride),
    })
}

/// Copies the view's elements in C order. Every index the view can reach is checked to lie inside the
/// storage first, so the loop below cannot go out of bounds and the output size is bounded by the input.
fn gather<'a>(t: &PickledTensor, storage: &'a [u8], elsize: usize) -> Result<Cow<'a, [u8]>> {
    let span = check_view(t, storage.len(), elsize)?;
    if span.bytes == 0 {
        return Ok(Cow::Borrowed(&[]));
    }
    if span.contiguous {
        return Ok(Cow::Borrowed(&storage[span.offset..span.offset + span.bytes]));
    }
    let numel = span.bytes / elsize;
    // Odometer over the C-order index: the innermost dimension runs fastest.
    let mut out = Vec::with_capacity(span.bytes);
    let dims = t.size.len();
    let mut idx = vec![0u64; dims];
    let mut pos = t.storage_offset;
    for _ in 0..numel {
        let p = pos as usize * elsize;
        out.extend_from_slice(&storage[p..p + elsize]);
        for d in (0..dims).rev() {
            idx[d] += 1;
            pos += t.stride[d];
            if idx[d] < t.size[d] {
                break;
            }
            pos -= t.stride[d] * t.size[d];
            idx[d] = 0;
        }
    }
    Ok(Cow::Owned(out))
}

/// C-contiguous: strides are the running products of the sizes (dimensions of size 1 may have any stride).
fn is_contiguous(size: &[u64], stride: &[u64]) -> bool {
    let mut expected = 1u64;
    for (&s, &st) in size.iter().zip(stride).rev() {
        if s != 1 && st != expected {
            return false;
        }
        expected = expected.saturating_mul(s);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::pickle::StorageRef;
    use super::*;

    fn view(size: &[u64], stride: &[u64], offset: u64) -> PickledTensor {
        PickledTensor {
            storage: StorageRef {
                dtype: DType::INT8,
                class: "CharStorage".into(),
                key: "0".into(),
                numel: 12,
            },
            storage_offset: offset,
            size: size.to_vec(),
            stride: stride.to_vec(),
        }
    }

    #[test]
    fn gathers_strided_views_in_c_order() {
        let storage: Vec<u8> = (0..12).collect();
        // A transposed 3x4 (stored 4x3): element [i][j] lives at j*3 + i.
        let got = gather(&view(&[3, 4], &[1, 3], 0), &storage, 1).unwrap();
        assert_eq!(got, vec![0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11]);
        let got = gather(&view(&[2, 2], &[4, 1], 5), &storage, 1).unwrap();
        assert_eq!(got, vec![5, 6, 9, 10]);
        let got = gather(&view(&[3], &[0], 2), &storage, 1).unwrap();
        assert_eq!(got, vec![2, 2, 2]);
        assert_eq!(gather(&view(&[0, 5], &[5, 1], 0), &storage, 1).unwrap(), Vec::<u8>::new());
    }

    /// A `torch.save`-like archive: `data.pkl` describing a 1-d view (offset, length) of a storage of
    /// `numel` elements of `class`, `byteorder`, and the storage, all stored (uncompressed).
    fn archive(class: &str, numel: u32, offset: u32, len: u32, storage: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let int = |v: u32| [&[b'J'][..], &v.to_le_bytes()].concat();
        let mut p = vec![0x80, 2];
        p.extend(b"ctorch._utils\n_rebuild_tensor_v2\nq\x00((X\x07\x00\x00\x00storage");
        p.extend(format!("ctorch\n{class}\n").as_bytes());
        p.extend(b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpu");
        p.extend(int(numel));
        p.extend(b"tQ");
        p.extend(int(offset));
        p.push(b'(');
        p.extend(int(len));
        p.extend(b"t(");
        p.extend(int(1));
        p.extend(b"t\x89ccollections\nOrderedDict\n)Rtq\x01R.");
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let stored =
            zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        for (name, bytes) in [("t/data.pkl", &p[..]), ("t/byteorder", b"little"), ("t/data/0", storage)] {
            zip.start_file(name, stored).unwrap();
            zip.write_all(bytes).unwrap();
        }
        zip.finish().unwrap().into_inner()
    }

    /// `stream_pt_file` on `bytes` written to a file: the values and their hash, or the error. Read twice,
    /// into a buffer shorter and into one longer than any tensor here (stale values of an earlier, larger
    /// tensor: `out` is reused and only resized where it grows), which must give the same; and
    /// `stream_pt_file_hash` must give the same dtype and hash, or the same error, word for word.
    fn stream(bytes: &[u8]) -> Result<(DType, Vec<f32>, u64)> {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut file, bytes).unwrap();
        let read = |mut values: Vec<f32>| {
            let mut hasher = crate::hash::Xxh3::new();
            match stream_pt_file(file.path(), &mut values, Some(&mut hasher)) {
                Ok(dtype) => Ok((dtype, values, hasher.digest())),
                Err(e) => Err((e, values)),
            }
        };
        let short = read(vec![1.0; 3]);
        let long = read(vec![f32::NAN; 1 << 18]);
        type Read = std::result::Result<(DType, Vec<f32>, u64), (FormatError, Vec<f32>)>;
        let drop_buffer = |r: &Read| match r {
            Ok(v) => Ok(v.clone()),
            Err((e, values)) => {
                // Nothing is handed out with an error.
                assert!(values.is_empty(), "{e}");
                Err(e.clone())
            }
        };
        let (short, long) = (drop_buffer(&short), drop_buffer(&long));
        assert_same(&long, &short, "into a longer buffer holding stale values");
        let mut hasher = crate::hash::Xxh3::new();
        match (stream_pt_file_hash(file.path(), &mut hasher), &short) {
            (Ok(dtype), Ok((d, _, hash))) => assert_eq!((dtype, hasher.digest()), (*d, *hash)),
            (Err(e), Err(want)) => assert_eq!(&e, want),
            (got, want) => panic!("hash only: {got:?}, with the values: {:?}", want.as_ref().err()),
        }
        short
    }

    /// The in-memory reader and the shared decoder: what `stream_pt_file` must agree with.
    fn in_memory(bytes: &[u8]) -> Result<(DType, Vec<f32>, u64)> {
        let t = read_pt_bytes(bytes)?;
        let mut values = Vec::new();
        crate::tensor::decode_f32(t.dtype, &t.bytes, t.elements()?, &mut values)?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok((t.dtype, values, crate::stats::content_hash(&bytes)))
    }

    fn assert_same(got: &Result<(DType, Vec<f32>, u64)>, want: &Result<(DType, Vec<f32>, u64)>, what: &str) {
        match (got, want) {
            (Ok((gd, gv, gh)), Ok((wd, wv, wh))) => {
                assert_eq!(gd, wd, "{what}");
                assert!(gv.iter().map(|v| v.to_bits()).eq(wv.iter().map(|v| v.to_bits())), "{what}");
                assert_eq!(gh, wh, "{what}");
            }
            (Err(_), Err(_)) => {}
            _ => panic!("{what}: streamed {:?}, in memory {:?}", got.as_ref().err(), want.as_ref().err()),
        }
    }

    fn in_pool<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
        rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap().install(f)
    }

    /// Large views are read in parts on several threads (`Streamed::parts`), with their CRCs combined and the
    /// hash fed in order: the same values, hash and errors as one pass on one thread, and as the in-memory
    /// reader, for fp32 (read straight into the values) and bf16, a view that starts and ends inside a part,
    /// and a damaged byte in the first, a middle and the last part.
    #[test]
    fn large_views_read_in_parallel_parts_as_in_one_pass() {
        let numel = (PARALLEL_STREAM_BYTES / 4 + READ_CHUNK / 8 + 1000) as u32;
        let values: Vec<f32> = (0..numel).map(|i| (i as f32 * 0.37).sin() * 1e3).collect();
        let f32_bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let bf16_bytes: Vec<u8> =
            [&f32_bytes[..], &f32_bytes[..]].concat().chunks_exact(4).flat_map(|v| [v[2], v[3]]).collect();
        for (class, storage, numel) in
            [("FloatStorage", &f32_bytes, numel), ("BFloat16Storage", &bf16_bytes, 2 * numel)]
        {
            let pt = archive(class, numel, 5, numel - 15, storage);
            assert!(storage.len() - 20 * 4 > PARALLEL_STREAM_BYTES, "{class}: one part only");
            let want = in_memory(&pt);
            assert_eq!(want.as_ref().unwrap().1.len(), numel as usize - 15);
            for threads in [1, 2, 3] {
                assert_same(&in_pool(threads, || stream(&pt)), &want, &format!("{class}, {threads} threads"));
            }
            // The storage's first byte: the view's, 5 elements before.
            let at = read_pt_bytes(&pt).map(|_| parse_pt(&pt).unwrap().bytes.as_ptr() as usize).unwrap()
                - pt.as_ptr() as usize
                - 5 * storage.len() / numel as usize;
            for damaged in [at + 7, at + storage.len() / 2 + 1, at + storage.len() - 3] {
                let mut bad = pt.clone();
                bad[damaged] ^= 0x10;
                let err = in_pool(3, || stream(&bad)).unwrap_err();
                assert!(err.problem.contains("checksum mismatch"), "{class} {damaged}: {err}");
            }
        }
    }

    #[test]
    fn crc_in_parallel_parts_is_the_crc_of_the_whole() {
        let bytes: Vec<u8> =
            (0..PARALLEL_CRC_BYTES + 3 * CRC_PART + 17).map(|i| (i * 7 + i / 251) as u8).collect();
        for len in
            [0, 1, PARALLEL_CRC_BYTES - 1, PARALLEL_CRC_BYTES, PARALLEL_CRC_BYTES + CRC_PART + 1, bytes.len()]
        {
            let want = crc32fast::hash(&bytes[..len]);
            for threads in [1, 2, 3] {
                assert_eq!(in_pool(threads, || crc32(&bytes[..len])), want, "{len} bytes, {threads} threads");
            }
        }
    }

    /// `PtBlocks` over `bytes` written to a file, read in blocks of several sizes: where it opens, the blocks
    /// make the in-memory reader's bytes and `finish` succeeds exactly where that reader does (the CRC);
    /// where it fails to open, so does that reader. Returns whether it opened.
    fn assert_blocks(bytes: &[u8], what: &str) -> bool {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut file, bytes).unwrap();
        let want = parse_pt(bytes).map(|t| (t.dtype, t.bytes.into_owned()));
        // What the header alone says is what opening says.
        let streamed = streamed_dtype(file.path());
        match open_pt_blocks(file.path()) {
            Ok(blocks) => assert_eq!(streamed.unwrap(), blocks.map(|b| b.dtype()), "{what}"),
            Err(e) => assert_eq!(streamed.unwrap_err(), e, "{what}"),
        }
        for size in [1, 4, 4096, READ_CHUNK - 1, 3 * READ_CHUNK] {
            let mut blocks = match open_pt_blocks(file.path()) {
                Ok(Some(blocks)) => blocks,
                Ok(None) => return false,
                Err(e) => {
                    assert!(want.is_err(), "{what}: blocks {e}, in memory fine");
                    return false;
                }
            };
            let mut got = Vec::new();
            let mut buf = vec![0u8; size];
            let len = blocks.len();
            loop {
                let block = blocks.next_block(&mut buf);
                assert!(block.len() == size || block.len() == len - got.len(), "{what}: {size}");
                if block.is_empty() {
                    break;
                }
                got.extend_from_slice(block);
            }
            let dtype = blocks.dtype();
            match (blocks.finish(), &want) {
                (Ok(()), Ok((d, w))) => assert!(dtype == *d && got == *w, "{what}: blocks of {size}"),
                (Err(e), Err(_)) => assert!(e.path.is_some(), "{what}: {e}"),
                (got, want) => panic!("{what}: blocks {got:?}, in memory {:?}", want.as_ref().err()),
            }
            // Stopping half way still checks the whole member.
            let mut half = open_pt_blocks(file.path()).unwrap().unwrap();
            half.next_block(&mut vec![0u8; len / 2]);
            assert_eq!(half.finish().is_ok(), want.is_ok(), "{what}: half read");
        }
        true
    }

    #[test]
    fn streams_storage_across_read_chunks() {
        // 3.5 read chunks of f32 and of bf16, viewed from element 5 to 10 before the end.
        let numel = (READ_CHUNK * 7 / 8) as u32;
        let values: Vec<f32> = (0..numel).map(|i| (i as f32 * 0.37).sin() * 1e3).collect();
        let f32_bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let bf16_bytes: Vec<u8> =
            values.iter().flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes()).collect();
        for (class, storage, dtype) in
            [("FloatStorage", &f32_bytes, DType::FLOAT), ("BFloat16Storage", &bf16_bytes, DType::BF16)]
        {
            let pt = archive(class, numel, 5, numel - 15, storage);
            assert!(assert_blocks(&pt, class));
            let got = stream(&pt);
            assert_same(&got, &in_memory(&pt), class);
            let (d, v, _) = got.unwrap();
            assert_eq!((d, v.len()), (dtype, numel as usize - 15), "{class}");
            let want = |i: usize| {
                if dtype == DType::BF16 {
                    f32::from_bits(values[i].to_bits() & 0xffff_0000)
                } else {
                    values[i]
                }
            };
            assert!(v.iter().enumerate().all(|(i, x)| x.to_bits() == want(i + 5).to_bits()), "{class}");

            // A flipped bit outside the view still fails the member's CRC.
            let last = pt.windows(storage.len()).position(|w| w == &storage[..]).unwrap() + storage.len() - 1;
            let mut bad = pt.clone();
            bad[last] ^= 1;
            assert!(assert_blocks(&bad, "flipped after the view"));
            let err = stream(&bad).unwrap_err();
            assert!(err.problem.contains("checksum mismatch"), "{err}");
            assert!(in_memory(&bad).is_err());
        }
        // A view past the storage's end is refused before anything is read.
        let err = stream(&archive("FloatStorage", numel, 20, numel - 15, &f32_bytes)).unwrap_err();
        assert!(err.problem.contains("reaches element"), "{err}");
        // A storage shorter than the pickle's element count.
        assert!(stream(&archive("FloatStorage", numel, 0, 4, &f32_bytes[..64])).is_err());
    }

    #[test]
    fn streaming_agrees_with_the_in_memory_reader_on_the_corpus_and_mutations() {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/pt_reader");
        let mut seeds: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        seeds.sort();
        assert!(!seeds.is_empty());
        let mut opened = 0;
        for path in seeds {
            let bytes = std::fs::read(&path).unwrap();
            let name = path.display().to_string();
            assert_same(&stream(&bytes), &in_memory(&bytes), &name);
            opened += usize::from(assert_blocks(&bytes, &name));
            if !name.contains("valid") {
                continue;
            }
            for cut in (0..bytes.len()).step_by(13) {
                assert_same(&stream(&bytes[..cut]), &in_memory(&bytes[..cut]), &format!("{name} cut {cut}"));
                assert_blocks(&bytes[..cut], &format!("{name} cut {cut}"));
            }
            let mut m = bytes.clone();
            for i in (0..bytes.len()).step_by(5) {
                for v in [0x00, 0xff] {
                    m[i] = v;
                    assert_same(&stream(&m), &in_memory(&m), &format!("{name} byte {i} = {v}"));
                }
                m[i] = bytes[i];
            }
        }
        assert!(opened > 0, "no seed streams");
    }

    #[test]
    fn refuses_views_outside_the_storage() {
        let storage: Vec<u8> = (0..12).collect();
        assert!(gather(&view(&[4, 4], &[4, 1], 0), &storage, 1).is_err());
        assert!(gather(&view(&[2], &[u64::MAX], 0), &storage, 1).is_err());
        assert!(gather(&view(&[u64::MAX, u64::MAX], &[0, 0], 0), &storage, 1).is_err());
        // Stride 0 may repeat, but not beyond MAX_EXPANSION times the storage.
        assert!(gather(&view(&[1 << 20], &[0], 0), &storage, 1).is_err());
    }
}
