//! A buffer holding one `acldumpChunk` (header and payload) as the dump callback receives it: what a
//! runtime (the simulated one) or a test hands to a callback. One place for the layout's unsafe writes.

use crate::bindings::__IncompleteArrayField;
use crate::{acldumpChunk, ACLDUMP_CHUNK_DATA_OFFSET, ACLDUMP_CHUNK_HEADER_LEN, ACLDUMP_OFFSET_APPEND};

/// One reusable, 8-byte aligned buffer holding an `acldumpChunk` header and up to `capacity` payload bytes.
pub struct ChunkBuf {
    /// u64 words give the struct's 8-byte alignment (its `offset` field is an i64).
    words: Vec<u64>,
    capacity: usize,
    len: usize,
}

impl ChunkBuf {
    pub fn new(capacity: usize) -> ChunkBuf {
        // The callback may read `len` = 4120 + bufLen bytes although data starts at 4116: size for that.
        let bytes = ACLDUMP_CHUNK_HEADER_LEN + capacity;
        ChunkBuf { words: vec![0u64; bytes.div_ceil(8)], capacity, len: ACLDUMP_CHUNK_HEADER_LEN }
    }

    /// Fills in one chunk. `file_name` is truncated to 4095 bytes so the NUL always fits (real paths are far
    /// shorter; dump_path is capped at 512 characters).
    pub fn fill(&mut self, file_name: &[u8], data: &[u8], last: bool) {
        assert!(data.len() <= self.capacity, "chunk payload exceeds the buffer");
        let mut header = acldumpChunk {
            fileName: [0; 4096],
            bufLen: data.len() as u32,
            isLastChunk: u32::from(last),
            offset: ACLDUMP_OFFSET_APPEND,
            flag: 0,
            dataBuf: __IncompleteArrayField::new(),
        };
        let name = &file_name[..file_name.len().min(header.fileName.len() - 1)];
        for (dst, &src) in header.fileName.iter_mut().zip(name) {
            // c_char is i8 or u8 by target; `as` keeps the bit pattern either way.
            *dst = src as core::ffi::c_char;
        }
        let base = self.words.as_mut_ptr().cast::<u8>();
        // SAFETY: `words` holds at least HEADER_LEN + capacity bytes, is 8-byte aligned (u64 storage, as
        // acldumpChunk requires) and is exclusively borrowed; the payload copy ends at
        // DATA_OFFSET + data.len() <= HEADER_LEN + capacity and does not overlap `data`, which we do not own.
        unsafe {
            base.cast::<acldumpChunk>().write(header);
            core::ptr::copy_nonoverlapping(data.as_ptr(), base.add(ACLDUMP_CHUNK_DATA_OFFSET), data.len());
        }
        self.len = ACLDUMP_CHUNK_HEADER_LEN + data.len();
    }

    /// One chunk of exactly `data`: `ChunkBuf::new(data.len())` filled once.
    pub fn of(file_name: &[u8], data: &[u8], last: bool) -> ChunkBuf {
        let mut buf = ChunkBuf::new(data.len());
        buf.fill(file_name, data, last);
        buf
    }

    pub fn as_ptr(&self) -> *const acldumpChunk {
        self.words.as_ptr().cast()
    }

    /// The callback's `len` argument: `sizeof(acldumpChunk) + bufLen`.
    pub fn callback_len(&self) -> i32 {
        self.len as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_header_fields_land_at_the_abi_offsets() {
        let mut buf = ChunkBuf::new(8);
        buf.fill(b"/d/x", &[1, 2, 3], true);
        assert_eq!(buf.callback_len(), 4123);
        // SAFETY: the buffer holds 4120 + 8 initialised bytes (zeroed, then written by fill).
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), 4128) };
        assert_eq!(&bytes[..5], b"/d/x\0");
        assert_eq!(u32::from_ne_bytes(bytes[4096..4100].try_into().unwrap()), 3);
        assert_eq!(u32::from_ne_bytes(bytes[4100..4104].try_into().unwrap()), 1);
        assert_eq!(i64::from_ne_bytes(bytes[4104..4112].try_into().unwrap()), -1);
        assert_eq!(i32::from_ne_bytes(bytes[4112..4116].try_into().unwrap()), 0);
        assert_eq!(&bytes[4116..4119], &[1, 2, 3]);
    }
}
