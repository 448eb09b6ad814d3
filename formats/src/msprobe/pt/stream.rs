//! A stored, contiguous storage member streamed with positioned reads (never mapped): CRC-checked,
//! decoded and hashed chunk by chunk, a large one in parts on the pool's threads.

use super::super::values_hash;
#[cfg(unix)]
use super::archive::{checksum_mismatch, DAMAGED_MEMBER};
#[cfg(unix)]
use super::plan::{plan, Plan};
use super::whole::parse_pt;
use crate::{DType, FormatError, Result};
use std::path::Path;

/// Storage bytes read per system call when streaming, and bytes checked, decoded and hashed per step in
/// between (so that each step's bytes are still in L1 for the next pass).
pub(super) const READ_CHUNK: usize = 256 << 10;
const STEP: usize = 16 << 10;

thread_local! {
    /// Per-thread read buffer of [`stream_pt_file`] ([`READ_CHUNK`] bytes once used).
    static READ_BUF: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Decodes the tensor of the `.pt` file at `path` into `out` as f32 (like
/// [`read_pt_file`](super::read_pt_file) then `decode_f32`: same values, same checks), reusing `out`'s
/// memory, and feeds the values' little-endian bytes to `hasher` when given. Returns the dtype; errors name
/// the file.
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

/// Feeds the little-endian f32 bytes of the values of the `.pt` file's tensor at `path` to `hasher`: exactly
/// what [`stream_pt_file`] feeds it, with the same checks and the same errors, but the values are decoded a
/// step at a time into a small buffer and dropped, not into one the size of the tensor (a content hash alone,
/// as `diff` asks for every tensor, needs no copy of it). Returns the dtype; errors name the file.
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
        values_hash::hash_f32_le(h, out);
    }
    Ok(t.dtype)
}

/// [`stream_pt_file`] into `out`, or with `out` `None` into a buffer of one step's values that each step
/// overwrites ([`stream_pt_file_hash`]; the archives it cannot stream are then read whole as there).
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
        return Err(checksum_mismatch(start, name));
    }
    if filled != total {
        let problem = format!("archive entry {name} ended before the tensor's bytes: {DAMAGED_MEMBER}");
        return Err(FormatError::at(start, problem));
    }
    Ok(dtype)
}

/// Grows `out` to `total` zeros beyond what it holds ([`stream_pt`] then writes every element). A growth of a
/// large view's size is zero-filled on the pool's threads: the first 144 MiB decode buffer's page faults and
/// zero-fill ran on one core while the other waited, a sixth of compare's time on an LLM-sized msprobe pair.
/// (rayon writes the zeros into the spare capacity and sets the length once all are written.)
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
pub(super) const PARALLEL_STREAM_BYTES: usize = if cfg!(test) { 1 << 20 } else { 8 << 20 };
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
                values_hash::hash_f32(hasher, values);
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
                let bytes = values_hash::f32_bytes_mut(values);
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
            // STEP is a multiple of every element size, and so are READ_CHUNK and the view's offsets, so
            // steps never split an element.
            for (i, step) in buf[..n].chunks(STEP).enumerate() {
                part.crc.update(step);
                let step_start = at + (i * STEP) as u64;
                let from = self.view.start.max(step_start);
                let to = self.view.end.min(step_start + step.len() as u64);
                if from >= to {
                    continue;
                }
                let bytes = &step[(from - step_start) as usize..(to - step_start) as usize];
                // Inside the view, so inside `out` (this part's elements), whole elements (see above); at
                // most STEP elements, so inside `step_values` too.
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
                        values_hash::hash_f32(hasher, values);
                    }
                }
            }
            at += n as u64;
        }
        READ_BUF.with(|c| c.set(buf));
        part
    }
}
