//! Segment files: the fixed header and the record frames, as bytes. No I/O here: the writer and the reader
//! map the files and call these on the mapped bytes.
//!
//! ```text
//! header (64 bytes, little-endian)           frame at offset o (o % 8 == 0, o >= 64)
//!  0  [u8; 8]  magic "ACCUTRSG"               o+0  u32  commit word = body length L (0: no record)
//!  8  u32      format version (1-4)           o+4  u32  CRC-32 of (commit word ++ body head)
//! 12  u32      header length (64)             o+8  L bytes of body:
//! 16  u64      segment size (file length)          u8 kind, varint n, n bytes of protobuf, payload
//! 24  u64      segment index in the stream    next frame at align8(o + 8 + L)
//! 32  u32      capture stream id
//! 36  u32      reserved (0)
//! 40  u64      creation time, µs since epoch
//! 48  u32      CRC-32 of bytes 0..48
//! 52  u32      reserved (0)
//! 56  u64      sealed end: 0 while open; when sealed, the offset just past the last frame
//! ```
//! The body "head" is kind + varint + protobuf; the payload after it (tensor data) is not covered by the
//! frame CRC, so scanning metadata never reads data pages: data is verified by its content hash on decode.
//!
//! Publication order (writer): body, then CRC, then the commit word with a Release store; sealing stores
//! the sealed end last. Space past the last frame is zero, so a zero commit word is the end.

use crate::{FormatError, Result};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// First eight bytes of every segment file.
pub const MAGIC: [u8; 8] = *b"ACCUTRSG";
/// Bytes of the segment header; the first frame starts here.
pub const HEADER_LEN: u64 = 64;
/// Bytes of a frame before its body (commit word + CRC).
pub const FRAME_HEADER: u64 = 8;
/// Offset of the sealed-end word in the header.
const SEALED_AT: usize = 56;

/// The decoded segment header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Format version of the segment.
    pub version: u32,
    /// Size of the segment (the file's length when complete).
    pub segment_size: u64,
    /// Sequence number of the segment within its stream (never reused, also under the ring policy).
    pub segment_index: u64,
    /// Capture stream id.
    pub stream_id: u32,
    /// Creation time, µs since the Unix epoch.
    pub created_unix_us: u64,
}

impl SegmentHeader {
    /// The 64 header bytes with a zero sealed end.
    pub fn encode(&self) -> [u8; HEADER_LEN as usize] {
        let mut h = [0u8; HEADER_LEN as usize];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&self.version.to_le_bytes());
        h[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        h[16..24].copy_from_slice(&self.segment_size.to_le_bytes());
        h[24..32].copy_from_slice(&self.segment_index.to_le_bytes());
        h[32..36].copy_from_slice(&self.stream_id.to_le_bytes());
        h[40..48].copy_from_slice(&self.created_unix_us.to_le_bytes());
        let crc = crc32fast::hash(&h[0..48]);
        h[48..52].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Decodes and checks a header. `Ok(None)`: the header is all zero (a segment created but never
    /// started: only acceptable as a torn tail).
    pub fn decode(bytes: &[u8]) -> Result<Option<SegmentHeader>> {
        if bytes.len() < HEADER_LEN as usize {
            if bytes.iter().all(|&b| b == 0) {
                return Ok(None);
            }
            return Err(FormatError::at(
                0,
                format!("segment of {} bytes is shorter than its header", bytes.len()),
            ));
        }
        let h = &bytes[..HEADER_LEN as usize];
        if h.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        if h[0..8] != MAGIC {
            return Err(FormatError::at(0, "not an accutrace capture segment (bad magic)"));
        }
        if crc32fast::hash(&h[0..48]) != le32(h, 48) {
            return Err(FormatError::at(48, "segment header checksum mismatch"));
        }
        let version = le32(h, 8);
        if !(super::OLDEST_READABLE_VERSION..=super::FORMAT_VERSION).contains(&version) {
            return Err(FormatError::at(8, format!("unsupported capture format version {version}")));
        }
        if le32(h, 12) as u64 != HEADER_LEN {
            return Err(FormatError::at(12, format!("unexpected header length {}", le32(h, 12))));
        }
        let segment_size = le64(h, 16);
        if segment_size < HEADER_LEN {
            return Err(FormatError::at(
                16,
                format!("segment size {segment_size} is smaller than the header"),
            ));
        }
        Ok(Some(SegmentHeader {
            version,
            segment_size,
            segment_index: le64(h, 24),
            stream_id: le32(h, 32),
            created_unix_us: le64(h, 40),
        }))
    }
}

/// The sealed end of a mapped segment (0: open), read with Acquire so that it orders after the frames.
pub fn sealed_end(bytes: &[u8]) -> u64 {
    load_u64(bytes, SEALED_AT).unwrap_or(0)
}

/// Publishes the sealed end (Release: every frame before it is visible first).
pub fn store_sealed_end(map: &mut [u8], end: u64) {
    store_u64(map, SEALED_AT, end);
}

/// Rounds up to the frame alignment.
pub fn align8(x: u64) -> u64 {
    x.saturating_add(7) & !7
}

/// What lies at a frame position.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A committed frame whose head checks: body at `body..body + len`, its protobuf message at
    /// `meta..body + head_len`, the payload after that.
    Valid {
        /// Offset of the frame's body in the segment.
        body: u64,
        /// Length of the body.
        len: u64,
        /// Offset of the record's protobuf message.
        meta: u64,
        /// Length of the head (record header and message) from `body`.
        head_len: u64,
        /// The record kind byte.
        kind: u8,
        /// Offset of the next frame.
        next: u64,
    },
    /// Commit word 0: nothing was published here.
    Empty,
    /// Something is here but it is not a valid frame (why).
    Bad(String),
}

/// Reads the frame at `offset` (8-aligned) of a mapped segment, looking no further than `limit`.
pub fn frame_at(bytes: &[u8], offset: u64, limit: u64) -> Frame {
    let limit = limit.min(bytes.len() as u64);
    if offset.saturating_add(FRAME_HEADER) > limit {
        return Frame::Empty;
    }
    let len = match load_u32(bytes, offset as usize) {
        Some(0) => return Frame::Empty,
        Some(len) => u64::from(len),
        None => return Frame::Bad("misaligned frame".into()),
    };
    let body = offset + FRAME_HEADER;
    if len > limit - body {
        return Frame::Bad(format!("frame length {len} runs past the end of the written area ({limit})"));
    }
    let b = &bytes[body as usize..(body + len) as usize];
    let Some((meta_len, varint_len)) = read_varint(&b[1.min(b.len())..]) else {
        return Frame::Bad("frame body has no valid head".into());
    };
    let head_len = 1 + varint_len as u64;
    if meta_len > super::MAX_HEAD {
        return Frame::Bad(format!("metadata length {meta_len} exceeds the limit {}", super::MAX_HEAD));
    }
    let Some(head_len) = head_len.checked_add(meta_len).filter(|&h| h <= len) else {
        return Frame::Bad(format!("metadata length {meta_len} exceeds the frame length {len}"));
    };
    let mut crc = crc32fast::Hasher::new();
    crc.update(&(len as u32).to_le_bytes());
    crc.update(&b[..head_len as usize]);
    if crc.finalize() != le32(bytes, offset as usize + 4) {
        return Frame::Bad("frame checksum mismatch".into());
    }
    Frame::Valid {
        body,
        len,
        meta: body + 1 + varint_len as u64,
        head_len,
        kind: b[0],
        next: align8(body + len),
    }
}

/// Writes a frame at `offset`: `head` (kind + varint + protobuf) and `payload` into the body, then the CRC,
/// then publishes the commit word. The caller checked that `align8(offset + 8 + len)` fits the map.
pub fn write_frame(map: &mut [u8], offset: u64, head: &[u8], payload: &[u8]) {
    let o = offset as usize;
    let len = head.len() + payload.len();
    let body = o + FRAME_HEADER as usize;
    map[body..body + head.len()].copy_from_slice(head);
    map[body + head.len()..body + len].copy_from_slice(payload);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&(len as u32).to_le_bytes());
    crc.update(head);
    map[o + 4..o + 8].copy_from_slice(&crc.finalize().to_le_bytes());
    store_u32(map, o, len as u32);
}

/// [`write_frame`] for a payload of `payload_len` bytes that is already in place, right after where the head
/// goes (the writer compresses into the segment): writes the head, the CRC, then publishes the commit word.
pub fn write_frame_in_place(map: &mut [u8], offset: u64, head: &[u8], payload_len: usize) {
    let o = offset as usize;
    let len = head.len() + payload_len;
    let body = o + FRAME_HEADER as usize;
    map[body..body + head.len()].copy_from_slice(head);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&(len as u32).to_le_bytes());
    crc.update(head);
    map[o + 4..o + 8].copy_from_slice(&crc.finalize().to_le_bytes());
    store_u32(map, o, len as u32);
}

/// Appends a protobuf varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint: (value, bytes used), None when truncated or longer than 10 bytes.
fn read_varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            return Some((v, i + 1));
        }
    }
    None
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

// The commit word and the sealed end are the only words that two parties (the writer, and a reader that may
// run concurrently in another process) race on. They are accessed as atomics on the mapped memory: on the
// supported targets (x86_64, aarch64) aligned 4/8-byte atomics are plain lock-free loads and stores that
// are coherent across processes mapping the same page, so the writer's Release store pairs with the reader's
// Acquire load even across processes. After a crash, the page cache holds every store made before the kill,
// in program order of visibility, which is what makes "commit last" sufficient for SIGKILL; for power loss
// the CRC catches frames whose pages reached the disk out of order.

fn load_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let p = bytes.get(at..at + 4)?.as_ptr();
    if p.align_offset(4) != 0 {
        return None;
    }
    // SAFETY: `p` points to 4 readable bytes inside `bytes` (checked by `get`) and is 4-aligned (checked);
    // AtomicU32 has the layout of u32, and an atomic load of read-only memory is a plain load.
    Some(u32::from_le(unsafe { &*(p as *const AtomicU32) }.load(Ordering::Acquire)))
}

fn load_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let p = bytes.get(at..at + 8)?.as_ptr();
    if p.align_offset(8) != 0 {
        return None;
    }
    // SAFETY: as in `load_u32`, for 8 bytes at an 8-aligned address.
    Some(u64::from_le(unsafe { &*(p as *const AtomicU64) }.load(Ordering::Acquire)))
}

fn store_u32(map: &mut [u8], at: usize, v: u32) {
    let slot = &mut map[at..at + 4];
    let p = slot.as_mut_ptr();
    if p.align_offset(4) != 0 {
        slot.copy_from_slice(&v.to_le_bytes());
        return;
    }
    // SAFETY: `p` is 4 writable, 4-aligned bytes we hold exclusively through `&mut`; AtomicU32 has u32's
    // layout. The atomic (rather than plain) store gives Release ordering against the body written before.
    unsafe { AtomicU32::from_ptr(p as *mut u32) }.store(v.to_le(), Ordering::Release);
}

fn store_u64(map: &mut [u8], at: usize, v: u64) {
    let slot = &mut map[at..at + 8];
    let p = slot.as_mut_ptr();
    if p.align_offset(8) != 0 {
        slot.copy_from_slice(&v.to_le_bytes());
        return;
    }
    // SAFETY: as in `store_u32`, for 8 bytes at an 8-aligned address.
    unsafe { AtomicU64::from_ptr(p as *mut u64) }.store(v.to_le(), Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An 8-aligned buffer like a mapping.
    fn buf(len: usize) -> Vec<u64> {
        vec![0u64; len.div_ceil(8)]
    }

    fn bytes(v: &mut [u64]) -> &mut [u8] {
        // SAFETY: u64 storage viewed as bytes; u8 has no alignment or validity requirements.
        unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, v.len() * 8) }
    }

    #[test]
    fn header_round_trip_and_checks() {
        let h = SegmentHeader {
            version: 1,
            segment_size: 4096,
            segment_index: 7,
            stream_id: 3,
            created_unix_us: 99,
        };
        let enc = h.encode();
        assert_eq!(SegmentHeader::decode(&enc).unwrap(), Some(h));
        assert_eq!(SegmentHeader::decode(&[0; 64]).unwrap(), None);
        let mut bad = enc;
        bad[30] ^= 1;
        assert_eq!(SegmentHeader::decode(&bad).unwrap_err().offset, Some(48));
        bad = enc;
        bad[0] = b'X';
        assert!(SegmentHeader::decode(&bad).unwrap_err().problem.contains("magic"));
    }

    #[test]
    fn frame_commit_and_checks() {
        let mut store = buf(256);
        let map = bytes(&mut store);
        let head = [3u8, 2, 0xAA, 0xBB];
        write_frame(map, 64, &head, b"data!");
        let f = frame_at(map, 64, 256);
        assert_eq!(f, Frame::Valid { body: 72, len: 9, meta: 74, head_len: 4, kind: 3, next: 88 });
        assert_eq!(frame_at(map, 88, 256), Frame::Empty);
        // The payload is outside the CRC (verified by the content hash), the head is inside.
        map[80] ^= 0xFF;
        assert!(matches!(frame_at(map, 64, 256), Frame::Valid { .. }));
        map[74] ^= 0xFF;
        assert!(matches!(frame_at(map, 64, 256), Frame::Bad(_)));
        map[74] ^= 0xFF;
        // A length running past the limit is bad, not a panic.
        assert!(matches!(frame_at(map, 64, 76), Frame::Bad(_)));
        store_sealed_end(map, 88);
        assert_eq!(sealed_end(map), 88);
        // A payload already in place gives the same frame as one passed in.
        let mut other = buf(256);
        let other = bytes(&mut other);
        other[64 + 8 + head.len()..64 + 8 + head.len() + 5].copy_from_slice(b"data!");
        write_frame_in_place(other, 64, &head, 5);
        map[80] ^= 0xFF;
        assert_eq!(&other[64..96], &map[64..96]);
    }
}
