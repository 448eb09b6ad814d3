//! The zstd side of reading a tensor's payload: whole decodes with one decompression context per thread,
//! and the walk over the writer's frames (RFC 8878) that lends the blocks zstd stored as they are instead of
//! copying them out ([`zstd_pieces`]).

use std::io::Read;

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

/// The `size` bytes that the zstd frames in `src` decode to, into `out` (its old contents dropped).
pub(super) fn decompress(src: &[u8], size: u64, out: &mut Vec<u8>) -> std::result::Result<(), String> {
    out.clear();
    if size <= (src.len() as u64).saturating_mul(TRUSTED_RATIO) {
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

/// Where a piece of a tensor's byte planes lies ([`zstd_pieces`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PieceIn {
    /// In the payload: a block zstd stored as it is.
    Payload,
    /// In the scratch buffer: a frame zstd decoded.
    Scratch,
}

/// zstd's largest block (`ZSTD_BLOCKSIZE_MAX`).
const ZSTD_BLOCK_MAX: u64 = 128 << 10;
/// The largest window zstd decodes without being told to allow more (`ZSTD_WINDOWLOG_LIMIT_DEFAULT`).
const ZSTD_WINDOW_MAX: u64 = 1 << 27;

/// The pieces of the byte planes `payload` decodes to, in order, when at least one of its zstd frames (one
/// per run of planes, back to back: see `encode::plane_frames`) consists of stored blocks only: those
/// blocks are pieces of the payload itself, and every other frame is decoded alone into `scratch` (one
/// piece per frame). `None` where the payload is not exactly what the writer makes and zstd would decode
/// without complaint (frame checksums, dictionaries, skippable or legacy frames, a frame without its
/// content size, a window or block beyond zstd's defaults, sizes that do not add up to `data_size`, bytes
/// after the last frame, a frame zstd fails on), or where no frame is stored whole: the caller then
/// decodes the whole payload with zstd as before, which gives the same bytes or the same error. So a stored
/// block is lent only where zstd would have copied it out unchanged.
pub(super) fn zstd_pieces(
    payload: &[u8],
    data_size: u64,
    scratch: &mut Vec<u8>,
) -> Option<Vec<(PieceIn, std::ops::Range<usize>)>> {
    if data_size > (payload.len() as u64).saturating_mul(TRUSTED_RATIO) {
        return None;
    }
    /// A frame: its bytes in the payload, and its stored blocks' contents when it has nothing else.
    struct Scanned {
        bytes: std::ops::Range<usize>,
        content_size: u64,
        stored: Option<Vec<std::ops::Range<usize>>>,
    }
    let mut frames = Vec::new();
    let mut pos = 0usize;
    let (mut total, mut decoded) = (0u64, 0u64);
    while pos < payload.len() {
        let frame = scan_frame(payload, pos)?;
        pos = frame.bytes.end;
        total = total.checked_add(frame.content_size)?;
        if frame.stored.is_none() {
            decoded += frame.content_size;
        }
        frames.push(frame);
    }
    if total != data_size || frames.iter().all(|f| f.stored.is_none()) {
        return None;
    }
    // Every decoded frame's content size is at most `data_size`, which the ratio above bounds. Each frame
    // is decoded into the room after the ones before it, which nothing writes first (no zero-fill of
    // bytes about to be overwritten).
    scratch.clear();
    scratch.reserve(decoded as usize);
    let mut pieces = Vec::new();
    for frame in frames {
        match frame.stored {
            Some(blocks) => pieces.extend(blocks.into_iter().map(|b| (PieceIn::Payload, b))),
            None => {
                let (at, size) = (scratch.len(), frame.content_size as usize);
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
    return Some(pieces);

    /// The zstd frame at `pos` of `payload` (RFC 8878), when it is one the writer makes: zstd's magic, no
    /// dictionary, no checksum, its content size given, a window zstd accepts by default; its blocks within
    /// the payload, and, when every block is stored, their contents, which must add up to the content size.
    fn scan_frame(payload: &[u8], pos: usize) -> Option<Scanned> {
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
        Some(Scanned { bytes: pos..at, content_size, stored })
    }
}
