//! What the tests of the tensor data's read share: data the writer stores in pieces, its stored form, and
//! the reads they compare (whole, block by block, as values).

use super::stored_data::StoredData;
use crate::capture::planes::WINDOW_BYTES;
use crate::capture::record::DataEncoding;
use crate::stats::content_hash;
use crate::{DType, Result};
use std::path::Path;

/// `bytes` bytes of `width`-byte elements whose low byte is noise and whose other bytes take few values:
/// the writer stores the low plane's frame as zstd's stored blocks and compresses the others.
pub(super) fn tensor(width: usize, bytes: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..bytes)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            if i % width == 0 {
                state as u8
            } else {
                0x3C | (state >> 60) as u8 & 1
            }
        })
        .collect()
}

pub(super) fn stored<'a>(payload: &'a [u8], encoding: DataEncoding, raw: &[u8]) -> StoredData<'a> {
    StoredData {
        encoding,
        payload,
        payload_offset: 0,
        data_size: raw.len() as u64,
        content_hash: content_hash(raw),
    }
}

/// What `with_tensor_blocks_at` gives: the data read through [`StoredData::plane_bytes`] in blocks of
/// `block` bytes, once its hash matched.
pub(super) fn read_blocks(stored: &StoredData<'_>, block: usize) -> Result<Vec<u8>> {
    read_blocks_in(stored, block, WINDOW_BYTES, &mut Vec::new())
}

/// [`read_blocks`] with windows of `window` bytes and `scratch`.
pub(super) fn read_blocks_in(
    stored: &StoredData<'_>,
    block: usize,
    window: usize,
    scratch: &mut Vec<u8>,
) -> Result<Vec<u8>> {
    stored.read_blocks_with(Path::new("t"), scratch, window, |blocks| {
        let (mut out, mut buf) = (Vec::new(), vec![0u8; block]);
        while out.len() < blocks.len() {
            out.extend_from_slice(blocks.next_block(&mut buf));
        }
        out
    })
}

/// What `read_tensor_data_at` gives: zstd's whole decode.
pub(super) fn read_whole(stored: &StoredData<'_>) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    stored.decode(Path::new("t"), &mut out, &mut Vec::new())?;
    Ok(out)
}

/// `s`'s data decoded as `dtype` values as `with_tensor_blocks_at` would, in parallel from `parallel_min`
/// bytes on: the values' bits once the hash matched, or the error.
pub(super) fn decode_checked(s: &StoredData<'_>, dtype: DType, parallel_min: usize) -> Result<Vec<u32>> {
    decode_checked_in(s, dtype, parallel_min, WINDOW_BYTES, &mut Vec::new())
}

/// [`decode_checked`] with windows of `window` bytes and `scratch`.
pub(super) fn decode_checked_in(
    s: &StoredData<'_>,
    dtype: DType,
    parallel_min: usize,
    window: usize,
    scratch: &mut Vec<u8>,
) -> Result<Vec<u32>> {
    let mut out = vec![-7.0f32; 11];
    // Waves of as many chunks as threads: several waves, the last ragged, even on small data.
    let taken = s.read_blocks_with(Path::new("t"), scratch, window, |blocks| {
        blocks.decode_f32_into_from(dtype, &mut out, parallel_min, |threads| threads)
    })?;
    assert!(taken?, "{dtype}");
    Ok(out.iter().map(|v| v.to_bits()).collect())
}

/// The types of whole-byte elements that decode, each with its width in bytes: integers, floats (fp16 and
/// bf16 among them) and complex numbers, 1 to 16 bytes an element.
pub(super) const BYTE_DTYPES: [(DType, usize); 10] = [
    (DType::INT8, 1),
    (DType::FLOAT16, 2),
    (DType::BF16, 2),
    (DType::COMPLEX32, 4),
    (DType::FLOAT, 4),
    (DType::INT32, 4),
    (DType::DOUBLE, 8),
    (DType::COMPLEX64, 8),
    (DType::INT64, 8),
    (DType::COMPLEX128, 16),
];
