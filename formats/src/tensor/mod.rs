//! Decoding tensor bytes (little-endian, exactly as the device dumped them) into f32 or f64 lanes, and the
//! reverse for the simulated runtime.
//!
//! Every dtype whose [`crate::dtype::Kind`] is not `Opaque` decodes: IEEE floats, bf16, fp8 (E4M3FN,
//! E5M2), HiFloat8, signed and unsigned integers (packed int4 low nibble first, bit-packed uint1 LSB
//! first), bool, the quantized QINT/QUINT types as their integer storage, and complex types as interleaved
//! (re, im) lanes.
//! Anything else is refused by name: a decoder that guesses produces plausible wrong numbers.
//!
//! Errors carry offset 0, meaning "the start of this tensor": callers that decode a sub-slice of a file
//! shift it with [`FormatError::shifted`].

mod decode;
mod encode;
mod fp16;
pub mod half_bits;
pub mod hifloat8;
pub mod host;
pub mod host_bytes;

pub use decode::{decode_f32, decode_f32_into, decode_f64, decode_f64_into};
pub use encode::encode_f32;
pub use fp16::fp16_to_f32;

use crate::dtype::Kind;
use crate::{DType, FormatError, Result};

/// Elements of a tensor of `shape` (1 for a 0-d tensor), or `None` when the product of the dims overflows
/// 64 bits. Dims come from files, so every product of them goes through here (or [`element_count_usize`]):
/// a forged shape is an error, never a wrapped count or an overflow panic.
pub fn element_count(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

/// [`element_count`] as a `usize` (for decoding), or an error naming the shape.
pub fn element_count_usize(shape: &[u64]) -> Result<usize> {
    element_count(shape)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| FormatError::whole(format!("shape {shape:?} has more elements than 64 bits count")))
}

/// Output lanes per element: 2 for complex types (re, im), 1 otherwise.
pub fn lanes_per_element(dtype: DType) -> usize {
    if dtype.kind() == Kind::Complex {
        2
    } else {
        1
    }
}

/// Refuses dtypes whose bytes accutrace does not know how to read, in the words every reader uses
/// ([`DType::undecodable_reason`]), so that a capture's tensor and a dump's say the same.
fn check_decodable(dtype: DType) -> Result<()> {
    match dtype.undecodable_reason() {
        None => Ok(()),
        Some(why) => Err(FormatError::at(0, why)),
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
