//! The zstd side of reading a tensor's payload: whole decodes with one decompression context per thread,
//! and the walk over the writer's frames (RFC 8878) that lends the blocks zstd stored as they are instead of
//! copying them out ([`zstd_pieces`]).

use std::io::Read;
use std::mem::MaybeUninit;
use std::ops::Range;

thread_local! {
    /// One zstd decompression context per thread, made on first use: a context is ~100 KiB of tables that
    /// creating per tensor allocated and zeroed each time. A frame's decoding does not depend on what the
    /// context decoded before (no dictionary; each call starts a new frame).
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// `f` with this thread's decompression context, made on first use.
fn with_decompressor<T>(
    f: impl FnOnce(&mut zstd::bulk::Decompressor<'static>) -> std::io::Result<T>,
) -> std::io::Result<T> {
    DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        let d = match &mut *d {
            Some(d) => d,
            none => none.insert(zstd::bulk::Decompressor::new()?),
        };
        f(d)
    })
}

/// Largest expansion trusted for a direct allocation; beyond it, decoding grows the buffer as output comes.
const TRUSTED_RATIO: u64 = 64;

/// A recorded size this small is trusted whatever the ratio: a lie costs at most this much room, while the
/// growing decoder's fresh context (~100 KiB made and zeroed) was 5% of compare on many small zero tensors,
/// which zstd shrinks more than [`TRUSTED_RATIO`] (a 4 KiB tensor of zeros is a 20-byte frame).
const TRUSTED_SIZE: u64 = 1 << 20;

/// The `size` bytes that the zstd frames in `src` decode to, into `out` (its old contents dropped).
pub(super) fn decompress(src: &[u8], size: u64, out: &mut Vec<u8>) -> std::result::Result<(), String> {
    out.clear();
    if size <= (src.len() as u64).saturating_mul(TRUSTED_RATIO).max(TRUSTED_SIZE) {
        out.reserve(size as usize);
        with_decompressor(|d| d.decompress_to_buffer(src, out)).map_err(|e| format!("zstd: {e}"))?;
    } else {
        // Highly compressible data, or a lying size: let the buffer grow with the real output only.
        let decoder = zstd::stream::read::Decoder::with_buffer(src).map_err(|e| format!("zstd: {e}"))?;
        decoder.take(size.saturating_add(1)).read_to_end(out).map_err(|e| format!("zstd: {e}"))?;
    }
    if out.len() as u64 != size {
        return Err(format!("data decompresses to {} bytes, {} recorded", out.len(), size));
    }
    Ok(())
}

/// Where the first frame of `payload` that zstd fails on alone starts (or the first whose end zstd cannot
/// find), to say where the damage of a failed decode lies; `None` where every frame decodes alone. For
/// errors only: it decodes the frames again, one at a time, to nowhere.
pub(super) fn failing_frame(payload: &[u8]) -> Option<usize> {
    let mut pos = 0;
    while pos < payload.len() {
        let Ok(len) = zstd::zstd_safe::find_frame_compressed_size(&payload[pos..]) else {
            return Some(pos);
        };
        // zstd measured the frame within the slice; a size of nothing or past the end (which it does not
        // give) would still end here rather than loop or panic.
        let Some(frame) = payload.get(pos..pos.saturating_add(len)).filter(|_| len > 0) else {
            return Some(pos);
        };
        let decoded = zstd::stream::read::Decoder::with_buffer(frame)
            .and_then(|mut frame| std::io::copy(&mut frame, &mut std::io::sink()));
        if decoded.is_err() {
            return Some(pos);
        }
        pos += len;
    }
    None
}

/// Where a piece of a tensor's byte planes lies ([`zstd_pieces`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PieceIn {
    /// In the payload: a block zstd stored as it is.
    Payload,
    /// In the scratch buffer: a frame zstd decoded.
    Scratch,
}

/// Fewest bytes zstd decodes for a tensor before its frames are decoded on several threads at once (each
/// frame alone: zstd decodes one frame on one core).
const PARALLEL_DECODE_MIN: u64 = 1 << 20;

/// Decodes each frame (its bytes in `payload`) into its slice (of bytes, or a [`Room`]), which it must fill
/// exactly: on the pool's threads where there are two or more, of at least [`PARALLEL_DECODE_MIN`] bytes
/// together, and more than one thread; else in turn. `false` where zstd fails on one or it does not fill
/// its slice.
pub(super) fn decode_frames<B>(payload: &[u8], jobs: Vec<(Range<usize>, &mut B)>) -> bool
where
    B: zstd::zstd_safe::WriteBuf + Send + ?Sized,
{
    use rayon::prelude::*;
    let whole = |(bytes, slice): (Range<usize>, &mut B)| {
        let size = slice.capacity();
        with_decompressor(|d| d.decompress_to_buffer(&payload[bytes], slice)).is_ok_and(|n| n == size)
    };
    let bytes: usize = jobs.iter().map(|j| j.1.capacity()).sum();
    if jobs.len() > 1 && bytes as u64 >= PARALLEL_DECODE_MIN && rayon::current_num_threads() > 1 {
        jobs.into_par_iter().all(whole)
    } else {
        jobs.into_iter().all(whole)
    }
}

/// A frame's part of a buffer's spare capacity, which zstd decodes into without it being zero-filled first
/// (zeroing the parts of a pooled scratch was 2.5-3% of diff's CPU on captures of 9-18 MiB tensors, besides
/// faulting in fresh pages twice). `filled` is what zstd says it wrote there, from the room's start.
pub(super) struct Room<'a> {
    room: &'a mut [MaybeUninit<u8>],
    filled: usize,
}

impl<'a> Room<'a> {
    pub(super) fn new(room: &'a mut [MaybeUninit<u8>]) -> Self {
        Room { room, filled: 0 }
    }
}

// SAFETY: `as_slice` covers only the bytes zstd reported written (`filled_until`, whose callers guarantee
// they were, and which zstd-safe calls with at most `capacity`); the pointer and capacity are the room's.
unsafe impl zstd::zstd_safe::WriteBuf for Room<'_> {
    fn as_slice(&self) -> &[u8] {
        let filled = self.filled.min(self.room.len());
        // SAFETY: the first `filled` bytes of the room were written (see the impl's note).
        unsafe { std::slice::from_raw_parts(self.room.as_ptr().cast(), filled) }
    }

    fn capacity(&self) -> usize {
        self.room.len()
    }

    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.room.as_mut_ptr().cast()
    }

    unsafe fn filled_until(&mut self, n: usize) {
        self.filled = n;
    }
}

/// A zstd frame of a tensor's payload, as the writer makes it ([`scan_frames`]).
#[derive(Clone, Debug)]
pub(super) struct Frame {
    /// Its bytes in the payload.
    pub bytes: Range<usize>,
    /// Where its content lies in the byte planes.
    pub planes: Range<usize>,
    /// The contents of its blocks, in the payload, where zstd stored every one of them as it is.
    pub stored: Option<Vec<Range<usize>>>,
}

/// zstd's largest block (`ZSTD_BLOCKSIZE_MAX`).
const ZSTD_BLOCK_MAX: u64 = 128 << 10;
/// The largest window zstd decodes without being told to allow more (`ZSTD_WINDOWLOG_LIMIT_DEFAULT`).
const ZSTD_WINDOW_MAX: u64 = 1 << 27;

/// The frames of `payload` in order (one per run of planes or piece of one, back to back: see
/// `encode::plane_frames`), where the payload is exactly what the writer makes and they decode to
/// `data_size` bytes: `None` for frame checksums, dictionaries, skippable or legacy frames, a frame without
/// its content size, a window or block beyond zstd's defaults, sizes that do not add up to `data_size`, or
/// bytes after the last frame. zstd's whole decode takes the payload then, with its own errors. The sizes
/// are the frames' own word: a reader allocates by them only as far as it trusts them (`zstd_pieces`, up to
/// [`TRUSTED_RATIO`] times the payload; a window, a frame of at most 1 MiB at a time).
pub(super) fn scan_frames(payload: &[u8], data_size: u64) -> Option<Vec<Frame>> {
    let (mut frames, mut pos, mut total) = (Vec::new(), 0usize, 0usize);
    while pos < payload.len() {
        let (bytes, content_size, stored) = scan_frame(payload, pos)?;
        let end = usize::try_from(content_size).ok().and_then(|n| total.checked_add(n))?;
        pos = bytes.end;
        frames.push(Frame { bytes, planes: total..end, stored });
        total = end;
    }
    (total as u64 == data_size).then_some(frames)
}

/// The pieces of the byte planes `payload` decodes to, in order, when at least one of its frames
/// ([`scan_frames`]) consists of stored blocks only: those blocks are pieces of the payload itself, and every
/// other frame is decoded alone into `scratch` (one piece per frame). Where every frame is compressed, also
/// when two or more of them, of at least `PARALLEL_DECODE_MIN` bytes together, can be decoded on more than
/// one thread ([`decode_frames`]). `None` where [`scan_frames`] takes no frames, where a frame zstd fails
/// on, where the data is more than [`TRUSTED_RATIO`] times the payload, or where the payload holds no stored
/// frame and is not decoded in parallel: the caller then decodes the whole payload with zstd as before, which
/// gives the same bytes or the same error. So a stored block is lent only where zstd would have copied it
/// out unchanged.
pub(super) fn zstd_pieces(
    payload: &[u8],
    data_size: u64,
    scratch: &mut Vec<u8>,
) -> Option<Vec<(PieceIn, Range<usize>)>> {
    if data_size > (payload.len() as u64).saturating_mul(TRUSTED_RATIO) {
        return None;
    }
    let frames = scan_frames(payload, data_size)?;
    let decoded: usize = frames.iter().filter(|f| f.stored.is_none()).map(|f| f.planes.len()).sum();
    let decoded_frames = frames.iter().filter(|f| f.stored.is_none()).count();
    let parallel =
        decoded as u64 >= PARALLEL_DECODE_MIN && decoded_frames > 1 && rayon::current_num_threads() > 1;
    if decoded_frames == frames.len() && !parallel {
        return None;
    }
    if parallel {
        // Each frame into its own part of the scratch's spare capacity ([`Room`]: no zero-fill; a pooled
        // scratch's length is whatever its last read left, often less than this tensor's). The scratch
        // becomes `decoded` long only once every frame filled its part, so every byte of it is one that
        // zstd wrote.
        scratch.clear();
        scratch.reserve(decoded);
        let (mut pieces, mut rooms) = (Vec::new(), Vec::new());
        let (mut rest, mut at) = (&mut scratch.spare_capacity_mut()[..decoded], 0);
        for frame in frames {
            match frame.stored {
                Some(blocks) => pieces.extend(blocks.into_iter().map(|b| (PieceIn::Payload, b))),
                None => {
                    // The decoded frames' sizes add up to `decoded`, so the split stays in bounds.
                    let size = frame.planes.len();
                    let (slice, tail) = std::mem::take(&mut rest).split_at_mut(size);
                    rest = tail;
                    rooms.push((frame.bytes, Room::new(slice)));
                    pieces.push((PieceIn::Scratch, at..at + size));
                    at += size;
                }
            }
        }
        let jobs = rooms.iter_mut().map(|(bytes, room)| (bytes.clone(), room)).collect();
        if !decode_frames(payload, jobs) {
            return None;
        }
        // SAFETY: the rooms tile bytes 0..decoded of the capacity (reserved above), and `decode_frames`
        // returned true only where zstd filled each one exactly.
        unsafe { scratch.set_len(decoded) };
        return Some(pieces);
    }
    // Every decoded frame's content size is at most `data_size`, which the ratio above bounds. Each frame
    // is decoded into the room after the ones before it, which nothing writes first (no zero-fill of
    // bytes about to be overwritten).
    scratch.clear();
    scratch.reserve(decoded);
    let mut pieces = Vec::new();
    for frame in frames {
        match frame.stored {
            Some(blocks) => pieces.extend(blocks.into_iter().map(|b| (PieceIn::Payload, b))),
            None => {
                let (at, size) = (scratch.len(), frame.planes.len());
                // zstd writes at most the capacity after the cursor and marks what it wrote as filled:
                // `scratch` ends where this frame's output does.
                let mut after = std::io::Cursor::new(&mut *scratch);
                after.set_position(at as u64);
                let written =
                    with_decompressor(|d| d.decompress_to_buffer(&payload[frame.bytes], &mut after)).ok()?;
                if written != size || scratch.len() != at + size {
                    return None;
                }
                pieces.push((PieceIn::Scratch, at..at + size));
            }
        }
    }
    Some(pieces)
}

/// The zstd frame at `pos` of `payload` (RFC 8878), when it is one the writer makes: zstd's magic, no
/// dictionary, no checksum, its content size given, a window zstd accepts by default. Its bytes, its content
/// size, and, when every block is stored, their contents, which must add up to the content size.
#[allow(clippy::type_complexity)]
fn scan_frame(payload: &[u8], pos: usize) -> Option<(Range<usize>, u64, Option<Vec<Range<usize>>>)> {
    let byte = |i: usize| payload.get(i).copied();
    let head = payload.get(pos..pos + 5)?;
    if head[..4] != [0x28, 0xB5, 0x2F, 0xFD] {
        return None;
    }
    let descriptor = head[4];
    let (size_flag, single_segment) = (descriptor >> 6, descriptor & 0x20 != 0);
    // Reserved bit, content checksum, dictionary ID: none of them is written.
    if descriptor & 0x08 != 0 || descriptor & 0x04 != 0 || descriptor & 0x03 != 0 {
        return None;
    }
    let mut at = pos + 5;
    let window = if single_segment {
        None
    } else {
        let w = byte(at)?;
        at += 1;
        let log = 10 + u32::from(w >> 3);
        let base = 1u64 << log;
        Some(base + base / 8 * u64::from(w & 7))
    };
    let size_len = match (size_flag, single_segment) {
        (0, false) => return None,
        (0, true) => 1,
        (1, _) => 2,
        (2, _) => 4,
        _ => 8,
    };
    let field = payload.get(at..at + size_len)?;
    let mut le = [0u8; 8];
    le[..size_len].copy_from_slice(field);
    let content_size = u64::from_le_bytes(le) + if size_len == 2 { 256 } else { 0 };
    at += size_len;
    let window = window.unwrap_or(content_size);
    if window > ZSTD_WINDOW_MAX {
        return None;
    }
    let block_max = window.min(ZSTD_BLOCK_MAX);
    let mut stored = Some(Vec::new());
    let mut stored_bytes = 0u64;
    loop {
        let h = payload.get(at..at + 3)?;
        let h = u32::from(h[0]) | u32::from(h[1]) << 8 | u32::from(h[2]) << 16;
        let (last, kind, size) = (h & 1 != 0, (h >> 1) & 3, (h >> 3) as usize);
        at += 3;
        let body = match kind {
            0 => size,
            1 => 1,
            2 => size,
            _ => return None,
        };
        if body > payload.len() - at {
            return None;
        }
        match (&mut stored, kind) {
            (Some(blocks), 0) if size as u64 <= block_max => {
                blocks.push(at..at + size);
                stored_bytes += size as u64;
            }
            (Some(_), 0) => return None,
            (s, _) => *s = None,
        }
        at += body;
        if last {
            break;
        }
    }
    if stored.is_some() && stored_bytes != content_size {
        return None;
    }
    Some((pos..at, content_size, stored))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::encode::encode_data;
    use crate::DType;

    /// The planes that `pieces` of `payload` and `scratch` put together, in order.
    fn joined(payload: &[u8], scratch: &[u8], pieces: &[(PieceIn, std::ops::Range<usize>)]) -> Vec<u8> {
        let part = |(from, range): &(PieceIn, std::ops::Range<usize>)| match from {
            PieceIn::Payload => payload[range.clone()].to_vec(),
            PieceIn::Scratch => scratch[range.clone()].to_vec(),
        };
        pieces.iter().flat_map(part).collect()
    }

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap()
    }

    /// Zeros shrink far past [`TRUSTED_RATIO`]: below [`TRUSTED_SIZE`] they decode straight into the
    /// buffer, above it through the growing decoder; either way a recorded size that lies, up or down, is
    /// an error naming both sizes or zstd's, never a short or padded tensor.
    #[test]
    fn highly_compressible_data_decodes_either_way_and_a_lying_size_is_refused() {
        for size in [4096usize, (TRUSTED_SIZE as usize) * 3] {
            let frame = zstd::bulk::compress(&vec![0u8; size], 1).unwrap();
            assert!(
                size as u64 > frame.len() as u64 * TRUSTED_RATIO,
                "{size} zeros are {} bytes",
                frame.len()
            );
            let mut out = vec![7u8; 3];
            decompress(&frame, size as u64, &mut out).unwrap();
            assert!(out.len() == size && out.iter().all(|&b| b == 0), "{size} zeros");
            let over = decompress(&frame, size as u64 + 1, &mut out).unwrap_err();
            assert!(over.contains(&format!("decompresses to {size} bytes")), "{over}");
            assert!(decompress(&frame, size as u64 - 1, &mut out).is_err(), "{size} zeros read as one fewer");
        }
    }

    /// Tensors of several frames per plane (fp16, f32; planes that compress, flat ones zstd stores, odd
    /// sizes), read through a reused scratch that shrinks and grows: on one thread and on three, the pieces
    /// are zstd's own decode of the whole payload, and the scratch holds just the decoded frames.
    #[test]
    fn frames_decoded_in_parallel_are_the_whole_decode() {
        let mut scratch = Vec::new();
        let sizes = [3 << 20 | 6, 1 << 20, (5 << 20) + 12, 700_001 * 2];
        for (dtype, bytes) in
            [DType::FLOAT16, DType::FLOAT, DType::FLOAT16, DType::FLOAT].into_iter().zip(sizes)
        {
            // Low bytes noise (flat: stored), high bytes few values (compressed).
            let noise = crate::capture::test_noise(bytes, bytes as u64);
            let width = if dtype == DType::FLOAT { 4 } else { 2 };
            let raw: Vec<u8> = noise
                .iter()
                .enumerate()
                .map(|(i, b)| if i % width == width - 1 { b & 3 } else { *b })
                .collect();
            let encoded = encode_data(&raw, dtype, 1).unwrap();
            let payload = encoded.payload();
            let whole = zstd::stream::decode_all(payload).unwrap();
            for threads in [1, 3] {
                let pieces = pool(threads).install(|| zstd_pieces(payload, raw.len() as u64, &mut scratch));
                let pieces = pieces.expect("a stored frame, or frames to decode in parallel");
                assert!(
                    joined(payload, &scratch, &pieces) == whole,
                    "{dtype} {bytes} bytes, {threads} threads"
                );
                let in_scratch: usize =
                    pieces.iter().filter(|p| p.0 == PieceIn::Scratch).map(|p| p.1.len()).sum();
                assert_eq!(scratch.len(), in_scratch, "{dtype} {bytes} bytes, {threads} threads");
            }
        }
    }

    /// The frames decoded in parallel go into the scratch's spare capacity: a scratch as the buffer pools
    /// hand it back (emptied, its capacity kept) is used as it is, and where a frame fails the scratch is
    /// left empty, claiming no byte that zstd did not write (it was left zero-filled to the frames' length).
    #[test]
    fn a_parallel_decode_leaves_the_scratch_only_what_zstd_wrote() {
        let raw: Vec<u8> = crate::capture::test_noise(3 << 20, 11).iter().map(|b| b & 7).collect();
        let encoded = encode_data(&raw, DType::FLOAT16, 1).unwrap();
        let payload = encoded.payload();
        let mut scratch = Vec::with_capacity(8 << 20);
        let room = scratch.as_ptr();
        let pieces = pool(2).install(|| zstd_pieces(payload, raw.len() as u64, &mut scratch)).unwrap();
        assert!(joined(payload, &scratch, &pieces) == zstd::stream::decode_all(payload).unwrap());
        assert_eq!((scratch.len(), scratch.as_ptr()), (raw.len(), room), "not decoded in place");
        let damaged_at = (9..payload.len()).step_by(payload.len() / 40).find(|&at| {
            let mut damaged = payload.to_vec();
            damaged[at] ^= 0x5a;
            // The frames still scan (the damage is inside one), and zstd fails on it.
            scan_frames(&damaged, raw.len() as u64).is_some()
                && zstd::stream::decode_all(damaged.as_slice()).is_err()
        });
        let mut damaged = payload.to_vec();
        damaged[damaged_at.expect("an offset inside a frame where zstd fails")] ^= 0x5a;
        for mut scratch in [Vec::with_capacity(8 << 20), vec![0xA5; 8 << 20], Vec::new()] {
            assert!(pool(2).install(|| zstd_pieces(&damaged, raw.len() as u64, &mut scratch)).is_none());
            assert!(scratch.is_empty(), "a failed decode left {} bytes in the scratch", scratch.len());
        }
    }

    /// Where every frame is compressed, the pieces are taken only to decode the frames in parallel; a
    /// damaged frame gives no pieces (the caller's whole decode then reports it), on any number of threads.
    #[test]
    fn compressed_frames_go_parallel_only_on_several_threads_and_damage_gives_none() {
        let raw: Vec<u8> = crate::capture::test_noise(3 << 20, 7).iter().map(|b| b & 7).collect();
        let encoded = encode_data(&raw, DType::FLOAT16, 1).unwrap();
        let payload = encoded.payload();
        let mut scratch = Vec::new();
        assert!(pool(1).install(|| zstd_pieces(payload, raw.len() as u64, &mut scratch)).is_none());
        let pieces = pool(2).install(|| zstd_pieces(payload, raw.len() as u64, &mut scratch)).unwrap();
        assert!(pieces.len() > 2 && pieces.iter().all(|p| p.0 == PieceIn::Scratch));
        assert!(joined(payload, &scratch, &pieces) == zstd::stream::decode_all(payload).unwrap());
        // Damage at spread offsets: wherever zstd fails on the whole payload there are no pieces, and
        // wherever it decodes something (no checksums: the content hash is what catches that), the
        // pieces are that something.
        let mut failures = 0;
        for at in (9..payload.len()).step_by(payload.len() / 40) {
            let mut damaged = payload.to_vec();
            damaged[at] ^= 0x5a;
            let whole = zstd::stream::decode_all(damaged.as_slice()).ok().filter(|w| w.len() == raw.len());
            failures += usize::from(whole.is_none());
            for threads in [1, 2, 4] {
                let got = pool(threads).install(|| zstd_pieces(&damaged, raw.len() as u64, &mut scratch));
                if let Some(pieces) = got {
                    let planes = joined(&damaged, &scratch, &pieces);
                    assert!(whole.as_ref() == Some(&planes), "damage at {at}, {threads} threads");
                }
            }
        }
        assert!(failures > 0, "no damage that zstd notices: the test shows nothing");
    }
}
