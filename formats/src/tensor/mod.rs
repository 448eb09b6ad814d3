//! Decoding tensor bytes (little-endian, exactly as the device dumped them) into f32 or f64 lanes, and the
//! reverse for the simulated runtime.
//!
//! Every dtype whose [`crate::dtype::Kind`] is not `Opaque` decodes: IEEE floats, bf16, fp8 (E4M3FN,
//! E5M2), signed and unsigned integers (packed int4 low nibble first, bit-packed uint1 LSB first), bool, the
//! quantized QINT/QUINT types as their integer storage, and complex types as interleaved (re, im) lanes.
//! Anything else is refused by name: a decoder that guesses produces plausible wrong numbers.
//!
//! Errors carry offset 0, meaning "the start of this tensor": callers that decode a sub-slice of a file
//! shift it with [`FormatError::shifted`].

mod decode;
mod encode;
mod fp16;
pub mod half_bits;
pub mod host;
pub mod host_bytes;

pub use decode::{decode_f32, decode_f32_into, decode_f64, decode_f64_into};
pub use encode::encode_f32;
pub use fp16::fp16_to_f32;

use crate::dtype::Kind;
use crate::{DType, FormatError, Result};

/// Output lanes per element: 2 for complex types (re, im), 1 otherwise.
pub fn lanes_per_element(dtype: DType) -> usize {
    if dtype.kind() == Kind::Complex {
        2
    } else {
        1
    }
}

/// Refuses dtypes whose bytes accutrace does not know how to read.
fn check_decodable(dtype: DType) -> Result<()> {
    if dtype.is_decodable() {
        Ok(())
    } else {
        Err(FormatError::at(0, format!("dtype {} cannot be decoded to numbers", dtype.name())))
    }
}

/// Checks that `bytes` holds exactly `elements` elements of `dtype` (packed types rounded up to a byte).
fn check_byte_len(dtype: DType, bytes: usize, elements: usize) -> Result<()> {
    let expected = dtype.byte_size(elements as u64);
    if expected == Some(bytes as u64) {
        return Ok(());
    }
    let expected = expected.map_or_else(|| "more than 2^64".to_string(), |e| e.to_string());
    Err(FormatError::at(
        0,
        format!("{elements} elements of {} need {expected} bytes, got {bytes}", dtype.name()),
    ))
}
